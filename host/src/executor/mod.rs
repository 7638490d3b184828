//! The executor seam (DESIGN.md §6, seed 004): who runs a model and
//! records its trace.
//!
//! One [`Executor`] trait and one [`Backend`] enum with a variant per
//! backend. Optional backends (torch, mlx) will sit behind default-off
//! cargo features; in the default build the enum has the one `Candle`
//! variant and every method is a single-arm `#[inline]` match, so dispatch
//! folds into a direct call. The per-token loop lives inside an
//! [`InferenceSession`] (`prefill` / `decode_step`), never behind a
//! per-token indirection.

pub mod candle;
pub mod device;
pub mod generate;

use std::collections::HashMap;
use std::path::PathBuf;

use crate::intervene::Intervention;
use crate::model::ModelError;
use crate::model::llama::WeightMode;
use crate::trace::{Capabilities, ModelRef, TensorData, Trace, TraceError, TraceRequest};

pub use self::candle::{CandleExecutor, CandleSession};
pub use device::DeviceSpec;
pub use generate::{GenerateOptions, Generation, StopReason, TopLogprobs};

/// A run that could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the executor built an invalid trace (a bug in vauban): {0}")]
    Trace(#[from] TraceError),
    #[error("{0}")]
    Device(String),
    #[error("{0}")]
    Request(String),
    #[error("sampling: {0}")]
    Sample(#[from] crate::model::sample::SampleError),
    #[error("intervention: {0}")]
    Intervene(#[from] crate::intervene::InterveneError),
}

/// What to load and where.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// A `.gguf` file or an HF folder.
    pub path: PathBuf,
    pub device: DeviceSpec,
    pub weights: WeightMode,
}

/// How the prompt text becomes tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptForm {
    /// The text as given (BOS first when the model's tokenizer asks for it).
    Raw,
    /// One user message rendered with the model's own chat template, with
    /// an optional system message, and the assistant header appended.
    Chat { system: Option<String> },
}

/// Everything a traced run needs beyond the [`TraceRequest`].
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub trace_id: String,
    pub prompt: PromptForm,
    /// Applied in prefill and in every decode step.
    pub interventions: Vec<Intervention>,
    /// Also keep attention and MLP outputs at the observed layers.
    pub block_outputs: bool,
    /// Tokens to generate after the prompt (0: the prompt's forward only).
    pub generate: GenerateOptions,
    /// Another side's continuation to score after this run's own prompt
    /// (the candidate's side of the next-token KL).
    pub reference: Option<ReferenceContinuation>,
}

/// A continuation another trace generated, scored under this model: it is
/// teacher-forced after *this* run's prompt (its own system message and
/// chat template), and at each position the log-probabilities of the other
/// side's top tokens are kept. Both sides' distributions then cover the
/// same tokens at the same positions, which is what the KL needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceContinuation {
    /// The trace whose continuation this is.
    pub trace_id: String,
    /// Identifies `completion` and `support` (see [`ReferenceContinuation::digest`]).
    pub sha256: String,
    /// The other side's generated tokens.
    pub completion: Vec<u32>,
    /// Per position, the token ids whose log-probabilities to keep; at most
    /// `completion.len() + 1` positions (the last predicts what follows the
    /// whole continuation: the end of sequence, when the other side stopped there).
    pub support: Vec<Vec<u32>>,
}

impl ReferenceContinuation {
    /// A reference with its digest computed.
    pub fn new(trace_id: String, completion: Vec<u32>, support: Vec<Vec<u32>>) -> Self {
        let sha256 = Self::digest(&completion, &support);
        ReferenceContinuation {
            trace_id,
            sha256,
            completion,
            support,
        }
    }

    /// sha256 of the completion and support ids as little-endian u32s,
    /// with their counts: what a candidate trace cites and the report
    /// checks against the baseline's trace.
    pub fn digest(completion: &[u32], support: &[Vec<u32>]) -> String {
        let mut bytes = Vec::new();
        bytes.extend((completion.len() as u32).to_le_bytes());
        bytes.extend(completion.iter().flat_map(|i| i.to_le_bytes()));
        bytes.extend((support.len() as u32).to_le_bytes());
        for row in support {
            bytes.extend((row.len() as u32).to_le_bytes());
            bytes.extend(row.iter().flat_map(|i| i.to_le_bytes()));
        }
        crate::hash::sha256_hex(&bytes)
    }
}

/// A trace and the raw tensors it references (artifact id → data).
pub struct TraceOutput {
    pub trace: Trace,
    pub tensors: HashMap<String, TensorData>,
    /// The generation, when one was asked for.
    pub generation: Option<Generation>,
}

/// One step's result: next-token logits at the last position, f32 on the host.
pub struct StepOutput {
    pub logits: Vec<f32>,
}

/// Token-level generation primitives over a KV cache (seed 004's session
/// contract). `prefill` runs the prompt once; each `decode_step` runs one
/// new token against the cache, never the prompt again.
pub trait InferenceSession {
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError>;
    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError>;
    /// Positions held in the cache.
    fn position(&self) -> usize;
    /// The model's context length, when it declares one.
    fn capacity(&self) -> Option<usize>;
}

/// A backend that loads a model, tokenizes, traces and generates.
pub trait Executor {
    type Session<'a>: InferenceSession
    where
        Self: 'a;

    /// Loads the model named by `spec`.
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError>
    where
        Self: Sized;
    /// What this executor can produce on its device, per artifact kind.
    fn capabilities(&self) -> Capabilities;
    /// The model, with the sha256 of its weights.
    fn model_ref(&self) -> ModelRef;
    /// Token ids of a prompt in the given form.
    fn tokenize(&self, text: &str, form: &PromptForm) -> Result<Vec<u32>, ExecutorError>;
    /// Text of token ids.
    fn detokenize(&self, ids: &[u32]) -> Result<String, ExecutorError>;
    /// Runs `request` and records its evidence-bearing trace.
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
    ) -> Result<TraceOutput, ExecutorError>;
    /// A generation session with `interventions` applied at every step.
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> Self::Session<'a>;
    /// Whether `id` ends a generation for this model.
    fn is_eos(&self, id: u32) -> bool;
    /// The model's width and depth, for checking directions and layers.
    fn dims(&self) -> ModelDims;
}

/// The sizes a caller checks requests against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelDims {
    pub layers: usize,
    pub hidden: usize,
    pub vocab: usize,
}

/// The executor, by backend. Only `Candle` exists in the default build.
pub enum Backend {
    Candle(CandleExecutor),
}

/// A session, by backend.
pub enum BackendSession<'a> {
    Candle(CandleSession<'a>),
}

impl InferenceSession for BackendSession<'_> {
    #[inline]
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        match self {
            BackendSession::Candle(s) => s.prefill(ids),
        }
    }

    #[inline]
    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError> {
        match self {
            BackendSession::Candle(s) => s.decode_step(id),
        }
    }

    #[inline]
    fn position(&self) -> usize {
        match self {
            BackendSession::Candle(s) => s.position(),
        }
    }

    #[inline]
    fn capacity(&self) -> Option<usize> {
        match self {
            BackendSession::Candle(s) => s.capacity(),
        }
    }
}

impl Executor for Backend {
    type Session<'a> = BackendSession<'a>;

    /// The default backend for a model path: candle.
    #[inline]
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        Ok(Backend::Candle(<CandleExecutor as Executor>::load(spec)?))
    }

    #[inline]
    fn capabilities(&self) -> Capabilities {
        match self {
            Backend::Candle(e) => e.capabilities(),
        }
    }

    #[inline]
    fn model_ref(&self) -> ModelRef {
        match self {
            Backend::Candle(e) => e.model_ref(),
        }
    }

    #[inline]
    fn tokenize(&self, text: &str, form: &PromptForm) -> Result<Vec<u32>, ExecutorError> {
        match self {
            Backend::Candle(e) => e.tokenize(text, form),
        }
    }

    #[inline]
    fn detokenize(&self, ids: &[u32]) -> Result<String, ExecutorError> {
        match self {
            Backend::Candle(e) => e.detokenize(ids),
        }
    }

    #[inline]
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
    ) -> Result<TraceOutput, ExecutorError> {
        match self {
            Backend::Candle(e) => e.trace(request, options),
        }
    }

    #[inline]
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> BackendSession<'a> {
        match self {
            Backend::Candle(e) => BackendSession::Candle(e.session(interventions)),
        }
    }

    #[inline]
    fn is_eos(&self, id: u32) -> bool {
        match self {
            Backend::Candle(e) => e.is_eos(id),
        }
    }

    #[inline]
    fn dims(&self) -> ModelDims {
        match self {
            Backend::Candle(e) => e.dims(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_backend_enum_has_no_discriminant() {
        // One variant: the enum is the executor itself, dispatch is a direct call.
        assert_eq!(
            std::mem::size_of::<Backend>(),
            std::mem::size_of::<CandleExecutor>()
        );
    }
}
