//! The executors a run can hold, as two closed enums: [`LocalBackend`],
//! a model vauban holds (candle, and Torch and MLX where built), which
//! implements [`LocalModel`]; and [`Backend`], any executor a side of a
//! run can use (a local model, an endpoint, a recorded bundle), which
//! implements [`Executor`]. Callers hold these through the traits;
//! dispatch is a `match` per call, never per token (the per-token loop
//! lives inside a session).

use std::ops::ControlFlow;
use std::path::Path;

use super::candle::{CandleExecutor, CandleSession};
use super::http::{HttpExecutor, HttpSpec};
#[cfg(feature = "mlx")]
use super::mlx;
use super::replay::ReplayExecutor;
#[cfg(feature = "torch")]
use super::torch;
use super::{
    Effect, Executor, ExecutorError, InferenceSession, LastTokenState, LocalModel, ModelDims,
    ModelSpec, RunOptions, StepOutput, TraceOutput, WeightChange,
};
use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention};
use crate::model::lora::Adapter;
use crate::trace::{Capabilities, DeviceKind, ModelRef, TraceRequest};

/// A model vauban holds, by backend.
// One lives per side for a whole run: its size does not matter, and the
// variants stay unboxed so dispatch is a match, not a pointer chase.
#[allow(clippy::large_enum_variant)]
pub enum LocalBackend {
    /// The embedded default: vauban's own forward on candle.
    Candle(CandleExecutor),
    /// libtorch, through tch (built with the `torch` feature).
    #[cfg(feature = "torch")]
    Torch(torch::TorchExecutor),
    /// MLX, through mlx-rs (built with the `mlx` feature).
    #[cfg(feature = "mlx")]
    Mlx(mlx::MlxExecutor),
}

/// Calls one trait method on whichever local model is held.
macro_rules! local {
    ($self:ident, $e:ident => $call:expr) => {
        match $self {
            LocalBackend::Candle($e) => $call,
            #[cfg(feature = "torch")]
            LocalBackend::Torch($e) => $call,
            #[cfg(feature = "mlx")]
            LocalBackend::Mlx($e) => $call,
        }
    };
}

impl LocalBackend {
    /// The Torch executor on `spec`'s model and device; in a build
    /// without the `torch` feature, an error saying how to build it.
    pub fn torch(spec: &ModelSpec) -> Result<LocalBackend, ExecutorError> {
        #[cfg(feature = "torch")]
        return Ok(LocalBackend::Torch(torch::TorchExecutor::load(spec)?));
        #[cfg(not(feature = "torch"))]
        {
            let _ = spec;
            Err(ExecutorError::Request(super::TORCH_MISSING.into()))
        }
    }

    /// The MLX executor on `spec`'s model and device; in a build without
    /// the `mlx` feature, an error saying how to build it.
    pub fn mlx(spec: &ModelSpec) -> Result<LocalBackend, ExecutorError> {
        #[cfg(feature = "mlx")]
        return Ok(LocalBackend::Mlx(mlx::MlxExecutor::load(spec)?));
        #[cfg(not(feature = "mlx"))]
        {
            let _ = spec;
            Err(ExecutorError::Request(super::MLX_MISSING.into()))
        }
    }
}

impl Executor for LocalBackend {
    fn capabilities(&self) -> Capabilities {
        local!(self, e => e.capabilities())
    }
    fn model_ref(&self) -> ModelRef {
        local!(self, e => e.model_ref())
    }
    fn device_name(&self) -> String {
        local!(self, e => e.device_name())
    }
    fn device_kind(&self) -> DeviceKind {
        local!(self, e => e.device_kind())
    }
    fn known_dims(&self) -> Option<ModelDims> {
        Some(self.dims())
    }
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        local!(self, e => e.trace(request, options, policy))
    }
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        local!(self, e => e.trace_all(jobs, batch, on_done))
    }
}

impl LocalModel for LocalBackend {
    type Session<'a> = LocalSession<'a>;

    /// The default backend for a model path: candle.
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        Ok(LocalBackend::Candle(CandleExecutor::load(spec)?))
    }
    fn assets(&self) -> &crate::model::assets::ModelAssets {
        local!(self, e => e.assets())
    }
    fn weights_sha256(&self) -> Option<String> {
        local!(self, e => e.weights_sha256())
    }
    fn is_quantized(&self) -> bool {
        local!(self, e => e.is_quantized())
    }
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> LocalSession<'a> {
        match self {
            LocalBackend::Candle(e) => LocalSession::Candle(e.session(interventions)),
            #[cfg(feature = "torch")]
            LocalBackend::Torch(e) => LocalSession::Torch(e.session(interventions)),
            #[cfg(feature = "mlx")]
            LocalBackend::Mlx(e) => LocalSession::Mlx(e.session(interventions)),
        }
    }
    fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        local!(self, e => e.last_token_states(interventions, prompts))
    }
    fn orthogonalize(
        &mut self,
        direction: &Direction,
        layers: &[usize],
    ) -> Result<Vec<WeightChange>, ExecutorError> {
        local!(self, e => e.orthogonalize(direction, layers))
    }
    fn apply_adapter(&mut self, adapter: &Adapter) -> Result<Vec<WeightChange>, ExecutorError> {
        local!(self, e => e.apply_adapter(adapter))
    }
    fn export_hf(&self, dir: &Path) -> Result<(), ExecutorError> {
        local!(self, e => e.export_hf(dir))
    }
}

/// A generation session of a local model, by backend.
// Unboxed: every decode step goes through this match.
#[allow(clippy::large_enum_variant)]
pub enum LocalSession<'a> {
    Candle(CandleSession<'a>),
    #[cfg(feature = "torch")]
    Torch(torch::TorchSession<'a>),
    #[cfg(feature = "mlx")]
    Mlx(mlx::MlxSession<'a>),
}

/// Calls one method on whichever session is held.
macro_rules! session {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            LocalSession::Candle($s) => $call,
            #[cfg(feature = "torch")]
            LocalSession::Torch($s) => $call,
            #[cfg(feature = "mlx")]
            LocalSession::Mlx($s) => $call,
        }
    };
}

impl<'a> LocalSession<'a> {
    /// Lets `policy` decide ops after its watched blocks in every pass.
    pub fn set_policy(&mut self, policy: &'a mut dyn StepPolicy) {
        session!(self, s => s.set_policy(policy))
    }

    /// What each intervention did so far.
    pub fn effects(&self) -> &[Effect] {
        session!(self, s => s.effects())
    }
}

impl InferenceSession for LocalSession<'_> {
    #[inline]
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        session!(self, s => s.prefill(ids))
    }
    #[inline]
    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError> {
        session!(self, s => s.decode_step(id))
    }
    fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        session!(self, s => s.extend(ids))
    }
    fn rewind(&mut self, to: usize) -> Result<(), ExecutorError> {
        session!(self, s => s.rewind(to))
    }
    #[inline]
    fn position(&self) -> usize {
        session!(self, s => s.position())
    }
    #[inline]
    fn capacity(&self) -> Option<usize> {
        session!(self, s => s.capacity())
    }
}

/// Any executor a side of a run can use: a model vauban holds, an
/// OpenAI-compatible endpoint, or a recorded bundle replayed.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Local(LocalBackend),
    Http(HttpExecutor),
    Replay(ReplayExecutor),
}

/// Calls one [`Executor`] method on whichever executor is held.
macro_rules! any {
    ($self:ident, $e:ident => $call:expr) => {
        match $self {
            Backend::Local($e) => $call,
            Backend::Http($e) => $call,
            Backend::Replay($e) => $call,
        }
    };
}

impl Backend {
    /// A recorded bundle, verified, served as an executor.
    /// A replayed bundle's transformation in words, as its run recorded it.
    pub fn recorded_transformation(&self) -> Option<String> {
        match self {
            Backend::Replay(r) => r.transformation(),
            _ => None,
        }
    }

    pub fn replay(bundle: &Path) -> Result<Backend, ExecutorError> {
        Ok(Backend::Replay(ReplayExecutor::open(bundle)?))
    }

    /// An OpenAI-compatible endpoint, connected and probed.
    pub fn http(spec: &HttpSpec) -> Result<Backend, ExecutorError> {
        Ok(Backend::Http(HttpExecutor::connect(spec)?))
    }

    /// The model vauban holds, when it holds one (what weight edits,
    /// interventions and hidden states need).
    pub fn local(&self) -> Option<&LocalBackend> {
        match self {
            Backend::Local(l) => Some(l),
            _ => None,
        }
    }

    /// The model vauban holds, to change its weights.
    pub fn local_mut(&mut self) -> Option<&mut LocalBackend> {
        match self {
            Backend::Local(l) => Some(l),
            _ => None,
        }
    }

    /// Whether this serves recorded traces rather than running a model.
    pub fn is_replay(&self) -> bool {
        matches!(self, Backend::Replay(_))
    }

    /// What identifies a model served behind an endpoint, as the server
    /// reported it when probed (its URL, the model asked for and served,
    /// its fingerprint); `None` for a model vauban holds, which its
    /// weights' digest identifies instead, or a recording.
    pub fn served_identity(&self) -> Option<serde_json::Value> {
        match self {
            Backend::Http(h) => Some(h.identity()),
            _ => None,
        }
    }
}

impl From<LocalBackend> for Backend {
    fn from(local: LocalBackend) -> Backend {
        Backend::Local(local)
    }
}

impl Executor for Backend {
    fn capabilities(&self) -> Capabilities {
        any!(self, e => e.capabilities())
    }
    fn model_ref(&self) -> ModelRef {
        any!(self, e => e.model_ref())
    }
    fn device_name(&self) -> String {
        any!(self, e => e.device_name())
    }
    fn device_kind(&self) -> DeviceKind {
        any!(self, e => e.device_kind())
    }
    fn known_dims(&self) -> Option<ModelDims> {
        any!(self, e => e.known_dims())
    }
    fn check_layers(&self, layers: &[usize]) -> Result<(), ExecutorError> {
        any!(self, e => e.check_layers(layers))
    }
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        any!(self, e => e.trace(request, options, policy))
    }
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        any!(self, e => e.trace_all(jobs, batch, on_done))
    }
}
