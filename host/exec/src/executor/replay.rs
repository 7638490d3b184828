//! The replay executor: recorded bundles served behind the same trait as a
//! live backend, so `vauban diff` is `vauban run` with replay on both sides
//! and one side of a run can be a recording (last week's candidate).
//!
//! A replayed trace is the recorded one, with its raw tensors, found by the
//! request's prompt id; nothing is recomputed. It implements
//! [`Executor`] and not [`LocalModel`](super::LocalModel): the bundle
//! holds traces, not a model, so what needs one (tokenizing, sessions,
//! forward passes, weight changes) is not offered at all; a request with
//! interventions or a policy is refused with [`ExecutorError::Unsupported`].

use std::collections::HashMap;
use std::path::Path;

use super::{Executor, ExecutorError, ModelDims, RunOptions, TraceOutput};
use crate::intervene::policy::StepPolicy;
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
}

impl ReplayExecutor {
    /// What the recorded run did to its model, in words.
    pub fn transformation(&self) -> Option<String> {
        self.bundle.manifest().transformation.clone()
    }
}

impl Executor for ReplayExecutor {
    /// Kinds held by every trace of the bundle are `full`; the rest
    /// `unsupported`: replay can give exactly what was recorded.
    fn capabilities(&self) -> Capabilities {
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
    fn model_ref(&self) -> ModelRef {
        self.bundle
            .traces()
            .first()
            .map(|t| t.model.clone())
            .unwrap_or_default()
    }

    /// The recorded trace of `request.prompt_id`, with its raw tensors. A
    /// request whose text differs from the recorded one is refused: the
    /// bundle is not a recording of this suite.
    fn device_name(&self) -> String {
        NAME.into()
    }

    fn device_kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    /// The bundle does not record the model's shape. The layers it can
    /// serve are those it recorded, which its traces account for artifact
    /// by artifact.
    fn known_dims(&self) -> Option<ModelDims> {
        None
    }

    fn trace(
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
