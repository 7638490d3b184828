//! The executor seam: who runs a model and records its trace.
//!
//! Two traits, split by what an executor can honestly do. [`Executor`]
//! is what every one does: describe what it can record, and run requests
//! into traces (candle, the embedded default; Torch and MLX; an
//! OpenAI-compatible endpoint over HTTP; replay of recorded bundles).
//! [`LocalModel`] is what only a model vauban holds can do: tokenize,
//! step through a KV cache ([`InferenceSession`]), read hidden states,
//! change and export its weights. The optional backends (torch, mlx) sit
//! behind default-off cargo features and share one executor over a tensor
//! library (`tensor_lib`). [`Backend`] and [`LocalBackend`] hold one
//! executor of each kind as a closed enum (`backend.rs`).

mod backend;
pub mod candle;
pub mod device;
pub mod generate;
pub mod hook;
pub mod http;
pub mod identity;
pub mod kv_layout;
#[cfg(feature = "mlx")]
pub mod mlx;
pub mod recorder;
pub mod replay;
#[cfg(any(feature = "torch", feature = "mlx"))]
pub mod tensor_lib;
#[cfg(feature = "torch")]
pub mod torch;
mod traced;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention};
use crate::model::ModelError;
use crate::model::assets::ModelAssets;
use crate::model::lora::Adapter;
use crate::model::{Dtype, KvType, PrimitivePath, WeightMode};
use crate::trace::{
    Capabilities, DeviceKind, ModelRef, TensorData, Trace, TraceError, TraceRequest,
};

pub use backend::{Backend, LocalBackend, LocalSession};
pub use device::DeviceSpec;
pub use generate::{GenerateOptions, Generation, StopReason, TopLogprobs};

/// Pins the worker-thread count of the backends' thread pools before any
/// thread starts (see `candle::device::pin_thread_count`).
///
/// # Safety
/// Sets an environment variable: call it first thing in `main`, before any
/// other thread exists.
pub unsafe fn pin_thread_count() {
    // SAFETY: forwarded from the caller.
    unsafe { candle::device::pin_thread_count() }
}

/// Whether the embedded backend can open `device` in this build: a GPU
/// the build was not compiled for is an error naming the feature to build
/// with (what `vauban validate` checks before any weights load).
pub fn check_device(device: DeviceSpec) -> Result<(), String> {
    candle::device::open(device).map(drop)
}

/// Whether this build has the Torch executor (the `torch` feature).
pub const TORCH_BUILT: bool = cfg!(feature = "torch");

/// Why `executor = "torch"` cannot run in a build without it, and the fix.
pub const TORCH_MISSING: &str = "`torch` is the Torch executor (libtorch), and this vauban was built without it; \
     get libtorch with `eval \"$(bash scripts/setup-torch.sh)\"`, then rebuild with \
     `cargo build --release --features torch`";

/// Whether the Torch executor can open `device` on this machine: a GPU
/// libtorch does not see is an error naming what it does see.
pub fn check_torch_device(device: DeviceSpec) -> Result<(), String> {
    #[cfg(feature = "torch")]
    return torch::open_device(device).map(drop);
    #[cfg(not(feature = "torch"))]
    {
        let _ = device;
        Err(TORCH_MISSING.into())
    }
}

/// Whether this build has the MLX executor (the `mlx` feature).
pub const MLX_BUILT: bool = cfg!(feature = "mlx");

/// Why `executor = "mlx"` cannot run in a build without it, and the fix.
pub const MLX_MISSING: &str = "`mlx` is the MLX executor (mlx-rs), and this vauban was built without it; \
     on Linux get MLX with `eval \"$(bash scripts/setup-mlx.sh)\"`, then rebuild with \
     `cargo build --release --features mlx` (on macOS the build fetches MLX itself: see docs/executor.md)";

/// Whether the MLX executor can open `device` on this machine: a device
/// MLX does not have here is an error naming what it has.
pub fn check_mlx_device(device: DeviceSpec) -> Result<(), String> {
    #[cfg(feature = "mlx")]
    return mlx::check_device(device).map(drop);
    #[cfg(not(feature = "mlx"))]
    {
        let _ = device;
        Err(MLX_MISSING.into())
    }
}

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
    /// The backend cannot do this at all (replay has no model to run).
    #[error("the {backend} executor cannot do this: {what}")]
    Unsupported {
        backend: &'static str,
        what: &'static str,
    },
    /// A recorded bundle cannot be served.
    #[error("replay: {0}")]
    Replay(String),
    /// An endpoint could not be reached or did not answer usably (the
    /// message names the endpoint and the fix).
    #[error("{0}")]
    Http(String),
    /// A LoRA adapter that cannot be read or does not fit the model.
    #[error(transparent)]
    Adapter(#[from] crate::model::lora::AdapterError),
}

/// What to load and where.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// A `.gguf` file or an HF folder.
    pub path: PathBuf,
    pub device: DeviceSpec,
    pub weights: WeightMode,
    /// How the embedded model's KV cache stores keys and values (f32: as
    /// computed; f16: half the memory, rounded).
    pub kv_cache: KvType,
    /// The Torch executor's weights and activations (candle refuses
    /// anything but f32 here: it picks its own).
    pub dtype: Dtype,
    /// How candle applies the activation primitive to CPU activations
    /// (the fused kernel, or the reference path's tensor operations).
    pub primitive: PrimitivePath,
}

impl ModelSpec {
    /// `path` with every other setting at what a config leaves it: the
    /// CPU, weights as stored, an f32 KV cache and f32.
    pub fn new(path: impl Into<PathBuf>) -> ModelSpec {
        ModelSpec {
            path: path.into(),
            device: DeviceSpec::default(),
            weights: WeightMode::default(),
            kv_cache: KvType::default(),
            dtype: Dtype::default(),
            primitive: PrimitivePath::default(),
        }
    }
}

/// How the prompt text becomes tokens (serialized `{"form": "raw"}` or
/// `{"form": "chat", "system": ...}`, as the trace cache's key holds it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "form", rename_all = "snake_case")]
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

    /// Refuses a reference this model cannot score: no support rows, more
    /// rows than the continuation has positions (`completion.len() + 1`),
    /// rows of different widths, or a token id outside a vocabulary of
    /// `vocab`. Returns the rows and their width `k`.
    pub fn check(&self, vocab: usize) -> Result<(usize, usize), ExecutorError> {
        let rows = self.support.len();
        let k = self.support.first().map_or(0, Vec::len);
        if rows == 0
            || rows > self.completion.len() + 1
            || self.support.iter().any(|s| s.len() != k)
        {
            return Err(ExecutorError::Request(format!(
                "reference continuation of `{}`: {rows} support rows for {} tokens (want 1 to {}, each of the same width)",
                self.trace_id,
                self.completion.len(),
                self.completion.len() + 1
            )));
        }
        if let Some(bad) = self
            .support
            .iter()
            .flatten()
            .find(|&&id| id as usize >= vocab)
        {
            return Err(ExecutorError::Request(format!(
                "reference continuation of `{}`: token id {bad} is outside this model's vocabulary of {vocab}",
                self.trace_id
            )));
        }
        Ok((rows, k))
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

/// Token-level generation primitives over a KV cache (the session
/// contract). `prefill` runs the prompt once; each `decode_step` runs one
/// new token against the cache, never the prompt again.
pub trait InferenceSession {
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError>;
    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError>;
    /// Runs `ids` as prompt tokens after the positions already held, in one
    /// pass (the rest of a prompt after a shared prefix); the next-token
    /// logits after the last.
    fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError>;
    /// Forgets every position from `to` on, so the next pass continues
    /// after the first `to` (several prompts that share a prefix run it
    /// once). What interventions and a policy did in the forgotten
    /// positions stays in their logs. Splitting a prompt into passes gives
    /// what one pass gives only for interventions that do not depend on
    /// positions (`Positions::All` without a condition).
    fn rewind(&mut self, to: usize) -> Result<(), ExecutorError>;
    /// Positions held in the cache.
    fn position(&self) -> usize;
    /// The model's context length, when it declares one.
    fn capacity(&self) -> Option<usize>;
}

/// What every executor does, whatever runs the model (a model vauban
/// holds, an endpoint, a recorded bundle): say what it can record,
/// identify the model, and run requests into evidence-bearing traces.
/// The pipeline records both sides through this trait alone.
pub trait Executor {
    /// What this executor can produce on its device, per artifact kind.
    fn capabilities(&self) -> Capabilities;
    /// The model, with the sha256 of its weights (none once they were
    /// changed in memory, or where they cannot be known) and of its
    /// vocabulary.
    fn model_ref(&self) -> ModelRef;
    /// The device it runs on, as written in traces (`cpu`, `cuda:0`,
    /// `remote`, `replay`).
    fn device_name(&self) -> String;
    fn device_kind(&self) -> DeviceKind;
    /// The model's width and depth where this executor knows them: a
    /// model vauban holds does; an endpoint or a bundle does not say.
    fn known_dims(&self) -> Option<ModelDims>;
    /// Refuses a layer the model does not have. Where the depth is not
    /// known there is nothing to check: activations asked of such an
    /// executor are recorded in the trace as unsupported or missing.
    fn check_layers(&self, layers: &[usize]) -> Result<(), ExecutorError> {
        let Some(dims) = self.known_dims() else {
            return Ok(());
        };
        match layers.iter().find(|&&l| l >= dims.layers) {
            Some(&layer) => Err(ModelError::LayerOutOfRange {
                layer,
                count: dims.layers,
            }
            .into()),
            None => Ok(()),
        }
    }
    /// Runs `request` and records its evidence-bearing trace; with a
    /// policy, it decides ops after its watched blocks in every pass (an
    /// executor that runs no forward pass refuses a policy).
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError>;
    /// Traces every job, handing each result to `on_done` with the job's
    /// index, on this thread; `on_done` returning `Break` stops (after the
    /// rest of a batch already computed). By default one job at a time, in
    /// order; an executor that can do better (batched passes, requests in
    /// flight) overrides it. `batch` is how many prompts a batched pass
    /// may hold.
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        let _ = batch;
        for (i, (request, options)) in jobs.iter().enumerate() {
            if on_done(i, self.trace(request, options, None)).is_break() {
                return;
            }
        }
    }
}

/// What only a model vauban holds in memory can do: tokenize, step
/// through a KV cache, read hidden states, change and export its weights.
/// Candle, Torch and MLX implement it; the direction measurement, `serve`
/// and the model commands hold a local model through it.
pub trait LocalModel: Executor {
    type Session<'a>: InferenceSession
    where
        Self: 'a;

    /// Loads the model named by `spec`.
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError>
    where
        Self: Sized;
    /// The model's files as every backend reads them: its shape, tokenizer,
    /// chat template and special tokens. What follows up to `session` is
    /// read from them, the same for every backend.
    fn assets(&self) -> &ModelAssets;
    /// sha256 of the weights as loaded, before any transformation.
    fn weights_sha256(&self) -> Option<String>;
    /// Whether the weights are held quantized.
    fn is_quantized(&self) -> bool;
    /// The model's width, depth and vocabulary.
    fn dims(&self) -> ModelDims {
        let c = &self.assets().config;
        ModelDims {
            layers: c.layers,
            hidden: c.hidden,
            vocab: c.vocab,
        }
    }
    /// The model's architecture as GGUF names it (`llama`, `qwen2`...): a
    /// control vector's `model_hint` is written from it.
    fn architecture(&self) -> String {
        self.assets().config.architecture.clone()
    }
    /// Token ids of a prompt in the given form.
    fn tokenize(&self, text: &str, form: &PromptForm) -> Result<Vec<u32>, ExecutorError> {
        let a = self.assets();
        Ok(match form {
            PromptForm::Raw => a.encode_raw(text)?,
            PromptForm::Chat { system } => a.encode(&a.render_chat(text, system.as_deref())?)?,
        })
    }
    /// Token ids of `text` alone: no BOS, no template.
    fn encode_plain(&self, text: &str) -> Result<Vec<u32>, ExecutorError> {
        Ok(self.assets().encode(text)?)
    }
    /// The tokenizer's name for one token (`ĠI` for " I" in byte-level BPE).
    fn token_name(&self, id: u32) -> Option<String> {
        self.assets().tokenizer.id_to_token(id)
    }
    /// Text of token ids.
    fn detokenize(&self, ids: &[u32]) -> Result<String, ExecutorError> {
        Ok(self.assets().decode(ids)?)
    }
    /// Whether `id` ends a generation for this model.
    fn is_eos(&self, id: u32) -> bool {
        self.assets().is_eos(id)
    }
    /// A generation session with `interventions` applied at every step.
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> Self::Session<'a>;
    /// Each prompt's last token: its residual after every block (after
    /// the interventions' changes) and its next-token logits, with
    /// `interventions` applied at every position. The prompts run as one
    /// batch where the backend can (an opening they all share runs once),
    /// with the same result as each alone; one result per prompt.
    fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>>;
    /// Removes `direction` (one row) from every matrix of `layers` that
    /// writes into the residual stream (`W ← W − r̂(r̂ᵀW)` on the attention
    /// output and MLP down projections). The model's reference then no
    /// longer claims the file's hash.
    fn orthogonalize(
        &mut self,
        direction: &Direction,
        layers: &[usize],
    ) -> Result<Vec<WeightChange>, ExecutorError>;
    /// Adds each matrix's low-rank change `s·B·A` of `adapter` to the
    /// weights (in f32; a quantized matrix is kept dense afterwards), as
    /// PEFT's `merge_and_unload` and llama.cpp's `--lora` do. The model's
    /// reference then no longer claims the file's hash.
    fn apply_adapter(&mut self, adapter: &Adapter) -> Result<Vec<WeightChange>, ExecutorError>;
    /// Reads the adapter at `path` (a PEFT folder or a LoRA GGUF), checks
    /// it against this model's shape and applies it; its digest and what
    /// it changed.
    fn load_adapter(&mut self, path: &Path) -> Result<AppliedAdapter, ExecutorError> {
        let adapter = Adapter::read(path, &self.assets().config)?;
        let sha256 = adapter.sha256()?;
        let changes = self.apply_adapter(&adapter)?;
        Ok(AppliedAdapter { sha256, changes })
    }
    /// Writes the model as loaded and transformed to an HF folder.
    fn export_hf(&self, dir: &Path) -> Result<(), ExecutorError>;

    /// Generates after `prompt` in `session` (a session of this model),
    /// ending on this model's end-of-sequence tokens and detokenizing with
    /// its tokenizer; `on_text` receives text as it becomes final.
    fn generate_in(
        &self,
        session: &mut Self::Session<'_>,
        prompt: &[u32],
        options: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, ExecutorError> {
        generate::generate(
            session,
            prompt,
            None,
            options,
            &|id| self.is_eos(id),
            &|ids| self.detokenize(ids),
            on_text,
        )
    }
}

/// `prompts` run as one batch by `batched` (one result per prompt); where
/// the batch fails, each prompt again alone, so an error names its own
/// prompt and the others still have their results.
pub(crate) fn batch_or_each<T>(
    prompts: &[&[u32]],
    batched: impl Fn(&[&[u32]]) -> Result<Vec<T>, ExecutorError>,
) -> Vec<Result<T, ExecutorError>> {
    match batched(prompts) {
        Ok(all) => all.into_iter().map(Ok).collect(),
        Err(e) if prompts.len() == 1 => vec![Err(e)],
        Err(_) => prompts
            .iter()
            .map(|p| batched(&[p]).map(|mut one| one.remove(0)))
            .collect(),
    }
}

/// A batch of prompts refused before it runs when one has no tokens.
pub(crate) fn check_prompts(prompts: &[&[u32]]) -> Result<(), ExecutorError> {
    match prompts.iter().position(|p| p.is_empty()) {
        Some(empty) => Err(ExecutorError::Request(format!(
            "prompt {empty} of the batch has no tokens"
        ))),
        None => Ok(()),
    }
}

/// What [`LocalModel::last_token_states`] gives for each prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct LastTokenState {
    /// `[layers][hidden]`: the residual after each block, last token.
    pub residuals: Vec<Vec<f32>>,
    /// Next-token logits after the last token.
    pub logits: Vec<f32>,
}

/// One matrix an orthogonalization changed, and by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightChange {
    pub layer: usize,
    /// The GGUF stem of the matrix (`attn_output`, `ffn_down`).
    pub matrix: String,
    /// Frobenius norm of the change.
    pub norm: f32,
}

/// Adds each of `adapter`'s matrices to a model through `add` (the
/// backend's own weight update, given the dense change `s·B·A`, made once
/// per matrix), in order; what each changed.
pub(crate) fn add_adapter(
    adapter: &Adapter,
    mut add: impl FnMut(&crate::model::lora::LowRank, Vec<f32>) -> Result<(), ExecutorError>,
) -> Result<Vec<WeightChange>, ExecutorError> {
    let mut changes = Vec::new();
    for m in &adapter.matrices {
        let delta = m.delta();
        let norm = crate::model::lora::frobenius(&delta);
        add(m, delta)?;
        changes.push(WeightChange {
            layer: m.layer,
            matrix: m.matrix.gguf_stem().to_owned(),
            norm,
        });
    }
    Ok(changes)
}

/// A LoRA adapter applied to a local model: the sha256 of its files (what
/// identifies the adapted model) and each matrix's change.
#[derive(Debug, Clone)]
pub struct AppliedAdapter {
    pub sha256: String,
    pub changes: Vec<WeightChange>,
}

/// What one intervention did over a run, in prefill and every decode step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effect {
    /// Absolute position of each token the op saw.
    pub positions: Vec<usize>,
    /// Projection of each token onto each basis row, before the op.
    pub projections: Vec<Vec<f32>>,
    /// Whether the op touched each token.
    pub applied: Vec<bool>,
    /// Sum of squared Frobenius norms of the changes.
    pub delta_sq: f64,
    /// Tokens seen in prefill (the rest were seen in decode steps).
    pub prefill_tokens: usize,
}

impl Effect {
    /// Adds what one application did to the `n` tokens from `offset`.
    pub(crate) fn add<T>(
        &mut self,
        out: &crate::intervene::Outcome<T>,
        offset: usize,
        prefill: bool,
    ) {
        let n = out.applied.len();
        self.positions.extend(offset..offset + n);
        self.projections.extend(out.projections.iter().cloned());
        self.applied.extend(&out.applied);
        self.delta_sq += (out.delta_norm as f64).powi(2);
        if prefill {
            self.prefill_tokens += n;
        }
    }
}

/// The sizes a caller checks requests against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelDims {
    pub layers: usize,
    pub hidden: usize,
    pub vocab: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_refuses_what_needs_a_model_by_name() {
        let e = ExecutorError::Unsupported {
            backend: "replay",
            what: "tokenizing",
        };
        assert_eq!(
            e.to_string(),
            "the replay executor cannot do this: tokenizing"
        );
    }
}
