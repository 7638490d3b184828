//! The replay executor: recorded bundles served behind the same trait as a
//! live backend, so `vauban diff` is `vauban run` with replay on both sides
//! and one side of a run can be a recording (last week's candidate).
//!
//! A replayed trace is the recorded one, with its raw tensors, found by the
//! request's prompt id; nothing is recomputed. What needs a model
//! (tokenizing, sessions, forward passes, weight changes) is refused with
//! [`ExecutorError::Unsupported`]: the bundle holds traces, not a model.

use std::collections::HashMap;
use std::path::Path;

use super::{
    Effect, ExecutorError, InferenceSession, LastTokenState, ModelDims, PromptForm, RunOptions,
    StepOutput, TraceOutput, WeightChange,
};
use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention};
use crate::trace::{ArtifactKind, Capabilities, DeviceKind, ModelRef, SupportLevel, TraceRequest};
use vauban_format::bundle::Bundle;

/// A verified bundle, its traces indexed by prompt id.
pub struct ReplayExecutor {
    bundle: Bundle,
    /// A prompt id → the index of its first trace.
    by_prompt: HashMap<String, usize>,
    /// A trace id → its index.
    by_trace: HashMap<String, usize>,
}

const NAME: &str = "replay";

fn unsupported(what: &'static str) -> ExecutorError {
    ExecutorError::Unsupported {
        backend: NAME,
        what,
    }
}

impl ReplayExecutor {
    /// Opens the bundle at `path` and verifies every file and tensor hash
    /// before anything is served from it: a damaged bundle is an error
    /// naming the file, not evidence that goes missing later.
    pub fn open(path: &Path) -> Result<Self, ExecutorError> {
        let bundle = Bundle::open(path)
            .and_then(|b| b.verify_all().map(|_| b))
            .map_err(|e| ExecutorError::Replay(format!("the bundle {}: {e}", path.display())))?;
        // A prompt's first trace serves it; its other samples (trace ids
        // `ID#K`, `observe.samples`) are served by trace id.
        let mut by_prompt = HashMap::new();
        let mut by_trace = HashMap::new();
        for (i, t) in bundle.traces().iter().enumerate() {
            let id = t.request.prompt_id.clone().unwrap_or_else(|| t.id.clone());
            by_prompt.entry(id).or_insert(i);
            if by_trace.insert(t.id.clone(), i).is_some() {
                return Err(ExecutorError::Replay(format!(
                    "the bundle {} holds two traces with the id `{}`",
                    path.display(),
                    t.id
                )));
            }
        }
        Ok(ReplayExecutor {
            bundle,
            by_prompt,
            by_trace,
        })
    }

    /// Kinds held by every trace of the bundle are `full`; the rest
    /// `unsupported`: replay can give exactly what was recorded.
    pub fn capabilities(&self) -> Capabilities {
        let traces = self.bundle.traces();
        ArtifactKind::ALL.iter().fold(
            Capabilities::uniform(NAME, &[DeviceKind::Cpu], SupportLevel::Unsupported),
            |c, &k| match !traces.is_empty() && traces.iter().all(|t| t.has(k)) {
                true => c.with(k, SupportLevel::Full),
                false => c,
            },
        )
    }

    /// The model of the bundle's first trace (a bundle records one model).
    pub fn model_ref(&self) -> ModelRef {
        self.bundle
            .traces()
            .first()
            .map(|t| t.model.clone())
            .unwrap_or_default()
    }

    /// The recorded trace of `request.prompt_id`, with its raw tensors. A
    /// request whose text differs from the recorded one is refused: the
    /// bundle is not a recording of this suite.
    pub fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        if policy.is_some() {
            return Err(unsupported("running an intervention policy"));
        }
        // A recording holds the run it recorded; served for a request with
        // interventions it would pass for their effect (the executor
        // contract's check caught this being answered silently).
        if !options.interventions.is_empty() {
            return Err(unsupported(
                "applying interventions (a bundle holds the runs it recorded; record the intervened run)",
            ));
        }
        let id = request
            .prompt_id
            .as_deref()
            .ok_or_else(|| ExecutorError::Request("replay needs a prompt id".into()))?;
        let root = self.bundle.root().display();
        let sample = (options.trace_id != id)
            .then(|| self.by_trace.get(&options.trace_id))
            .flatten();
        let &i = match sample {
            Some(i) => i,
            None if options.trace_id != id => {
                return Err(ExecutorError::Replay(format!(
                    "the bundle {root} holds no trace `{}` (a sample of prompt `{id}`): it was recorded with fewer samples than the config asks",
                    options.trace_id
                )));
            }
            None => self.by_prompt.get(id).ok_or_else(|| {
                ExecutorError::Replay(format!("the bundle {root} holds no trace of prompt `{id}`"))
            })?,
        };
        let trace = self.bundle.traces()[i].clone();
        if let (Some(asked), Some(recorded)) = (&request.text, &trace.request.text)
            && asked != recorded
        {
            return Err(ExecutorError::Replay(format!(
                "the bundle {root} recorded prompt `{id}` with another text than the suite's: it is not a recording of this suite"
            )));
        }
        let tensors = self
            .bundle
            .raw_tensors(&trace)
            .map_err(|e| ExecutorError::Replay(format!("{root}: {e}")))?;
        Ok(TraceOutput {
            trace,
            tensors,
            generation: None,
        })
    }
}

/// Replay has no sessions: every call is refused.
pub struct ReplaySession;

impl InferenceSession for ReplaySession {
    fn prefill(&mut self, _ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        Err(unsupported("running a forward pass"))
    }
    fn decode_step(&mut self, _id: u32) -> Result<StepOutput, ExecutorError> {
        Err(unsupported("running a forward pass"))
    }
    fn extend(&mut self, _ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        Err(unsupported("running a forward pass"))
    }
    fn rewind(&mut self, _to: usize) -> Result<(), ExecutorError> {
        Err(unsupported("running a forward pass"))
    }
    fn position(&self) -> usize {
        0
    }
    fn capacity(&self) -> Option<usize> {
        None
    }
}

impl ReplaySession {
    pub fn effects(&self) -> &[Effect] {
        &[]
    }
}

/// What the trait asks of a replay, where it can only refuse.
impl ReplayExecutor {
    /// The recorded hash of the weights (of the first trace).
    pub fn weights_sha256(&self) -> Option<String> {
        self.model_ref().sha256
    }
    pub fn device_name(&self) -> String {
        NAME.into()
    }
    pub fn device_kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    pub fn is_quantized(&self) -> bool {
        false
    }
    pub fn encode_plain(&self, _: &str) -> Result<Vec<u32>, ExecutorError> {
        Err(unsupported("tokenizing"))
    }
    pub fn is_eos(&self, _: u32) -> bool {
        false
    }
    /// The layers a replay can serve are those the bundle recorded, which
    /// its traces account for artifact by artifact; nothing to check here.
    pub fn check_layers(&self, _: &[usize]) -> Result<(), ExecutorError> {
        Ok(())
    }

    /// The bundle does not record the model's shape: zeros.
    pub fn dims(&self) -> ModelDims {
        ModelDims {
            layers: 0,
            hidden: 0,
            vocab: 0,
        }
    }
    /// The bundle does not record the model's architecture.
    pub fn architecture(&self) -> Option<String> {
        None
    }
    pub fn tokenize(&self, _: &str, _: &PromptForm) -> Result<Vec<u32>, ExecutorError> {
        Err(unsupported("tokenizing"))
    }
    pub fn token_name(&self, _: u32) -> Option<String> {
        None
    }
    pub fn detokenize(&self, _: &[u32]) -> Result<String, ExecutorError> {
        Err(unsupported("detokenizing"))
    }
    pub fn last_token_states(
        &self,
        _: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        prompts
            .iter()
            .map(|_| Err(unsupported("running a forward pass")))
            .collect()
    }
    pub fn orthogonalize(
        &mut self,
        _: &Direction,
        _: &[usize],
    ) -> Result<Vec<WeightChange>, ExecutorError> {
        Err(unsupported("changing weights"))
    }
    pub fn export_hf(&self, _: &Path) -> Result<(), ExecutorError> {
        Err(unsupported("exporting a model"))
    }
    pub fn session<'a>(&'a self, _: &'a [Intervention]) -> ReplaySession {
        ReplaySession
    }
}
