//! What the executors over a tensor library share: libtorch through tch
//! (`torch`) and MLX through mlx-rs (`mlx`). Each of those backends writes
//! two things on its own tensors: the llama-family forward pass with a
//! hook after every block ([`LibModel`]) and the handful of tensor
//! operations the hook and the trace need ([`TensorOps`], which extends
//! the activation [`Primitive`]). Everything else is written once, here:
//!
//! - [`LibExecutor`]: the model's assets and hashes, and the [`Executor`]
//!   and [`LocalModel`] impls (sessions, measurement, orthogonalization,
//!   export);
//! - [`LibSession`]: a generation session over the model's KV cache, with
//!   the block hook every local backend shares ([`crate::executor::hook`]);
//! - `trace`: traced runs, each stage one ragged pass over a batch of
//!   jobs, recorded through the shared recorder;
//! - [`crate::executor::kv_layout`] (beside, built in every build so its
//!   tests run in every build): where each sequence of a batched pass sits
//!   in the preallocated KV cache, and the masks and positions that follow.
//!
//! A new backend over another tensor library is a model and a primitive,
//! not another pipeline. Candle keeps its own session and traced run (it
//! runs quantized weights with its own kernels and packs a batch's tokens
//! into one sequence), with the same hook.

mod session;
mod trace;

use super::identity::ModelIdentity;
use super::kv_layout::{Layout, PassPlan, RowIds};
use std::ops::ControlFlow;
use std::path::Path;

pub use super::hook::{BlockHook, BlockView, Kept, NoHook, RunHook as LibHook, TensorOps};
pub use session::LibSession;

use super::{
    DeviceSpec, Executor, ExecutorError, LastTokenState, LocalModel, ModelDims, ModelSpec,
    RunOptions, TraceOutput, WeightChange,
};
use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention, Primitive};
use crate::model::assets::ModelAssets;
use crate::model::config::ModelConfig;
use crate::model::lora::Adapter;
use crate::model::{KvType, Matrix, ModelError};
use crate::trace::{
    ArtifactKind as K, Capabilities, DeviceKind, ModelRef, StageProfile, SupportLevel, TraceRequest,
};

/// The tensor type of a model's library.
pub type TensorOf<M> = <<M as LibModel>::Ops as Primitive>::Tensor;

/// Time a pass spent outside the blocks' own arithmetic.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassTiming {
    /// In the hook after each block (interventions, observation).
    pub hook_ns: u64,
    /// In the final norm and the output projection.
    pub lm_head_ns: u64,
}

/// A model's KV cache: keys and values of every block, preallocated, for
/// one sequence or several stacked as the rows of a batch
/// ([`Layout`] says which column holds which position). The
/// one-sequence methods (`len` to `fork`) are for a cache of one row,
/// which never has holes.
pub trait LibCache: Sized {
    /// Where each row's positions sit.
    fn layout(&self) -> &Layout;
    fn layout_mut(&mut self) -> &mut Layout;
    /// Positions held (one row).
    fn len(&self) -> usize {
        self.layout().rows[0].len()
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets every position from `to` on (`to` ≤ [`LibCache::len`]; one
    /// row).
    fn cut(&mut self, to: usize) {
        self.layout_mut().cut(to);
    }
    /// The token ids of the positions held (one row).
    fn ids(&self) -> &[u32] {
        &self.layout().rows[0].ids
    }
    /// A cache holding the same positions that grows on its own (one row).
    fn fork(&self) -> Result<Self, ModelError>;
    /// Bytes held by the keys and values (capacity included).
    fn bytes(&self) -> u64;
    /// One-row caches as the rows of one, each row's positions copied to
    /// its first columns, with room for `extra` more columns: what a
    /// batched stage runs on (decode reserves its longest generation).
    fn stack(rows: Vec<Self>, extra: usize) -> Result<Self, ModelError>;
    /// Each row as a one-row cache again, its positions gathered to its
    /// first columns.
    fn unstack(self) -> Result<Vec<Self>, ModelError>;
}

/// What a batched pass gives each row: its logits and timing, or `None`
/// for a row that sat the pass out.
pub type RowOutputs<T> = Vec<Option<(T, PassTiming)>>;

/// Plans a pass of `rows` over the rows `layout` holds (see
/// [`Layout::plan`]).
pub fn plan_rows<'i, T>(
    layout: &Layout,
    c: &ModelConfig,
    rows: &[LibRow<'i, T>],
) -> Result<PassPlan<'i>, ModelError> {
    let asked: Vec<RowIds<'i>> = rows
        .iter()
        .map(|r| RowIds {
            ids: r.ids,
            from: r.from,
        })
        .collect();
    layout.plan(c, &asked)
}

/// Each running row's logits, `rows_of(at, n)` being rows `at..at + n`
/// of the pass's logits (gathered in [`PassPlan::logit_rows`]'s order),
/// with the pass's timing.
pub fn split_logits<T>(
    counts: &[Option<usize>],
    timings: &[PassTiming],
    lm_head_ns: u64,
    mut rows_of: impl FnMut(usize, usize) -> Result<T, ModelError>,
) -> Result<RowOutputs<T>, ModelError> {
    let mut out = Vec::with_capacity(counts.len());
    let mut at = 0;
    for (count, timing) in counts.iter().zip(timings) {
        out.push(match count {
            None => None,
            Some(n) => {
                let logits = rows_of(at, *n)?;
                at += n;
                let timing = PassTiming {
                    lm_head_ns,
                    ..*timing
                };
                Some((logits, timing))
            }
        });
    }
    Ok(out)
}

/// One sequence's part of a batched pass ([`LibModel::run_batch`]): its
/// next tokens (none: it sits the pass out), where its logits start, and
/// the hook called after every block with its rows of the residual stream.
pub struct LibRow<'a, T> {
    pub ids: &'a [u32],
    pub from: usize,
    pub hook: &'a mut dyn BlockHook<T>,
}

/// What a stage's end on the model's device gives its profile: whether it
/// waited for the device's queued work (so the stage's time is the
/// device's, not the launch queue's) and what the device's memory was.
#[derive(Debug, Default)]
pub struct Settled {
    pub synchronised: bool,
    pub notes: Vec<(&'static str, String)>,
}

impl Settled {
    /// Notes the synchronisation and the memory figures on `p`.
    pub fn note(self, p: &mut StageProfile) {
        p.sync_points += u64::from(self.synchronised);
        for (k, v) in self.notes {
            p.notes.insert(k.into(), v);
        }
    }
}

/// The llama-family model of one tensor library, loaded on a device.
pub trait LibModel: Sized {
    /// The executor's name in traces and capabilities (`torch`, `mlx`).
    const EXECUTOR: &'static str;
    /// The executor's name in messages (`Torch`, `MLX`).
    const TITLE: &'static str;
    type Ops: TensorOps;
    type Cache: LibCache;

    /// Whether the library can run on `device` on this machine: an error
    /// naming what it can run on otherwise. Checked before anything loads,
    /// and changes nothing (a config's validation calls it too).
    fn check_device(device: DeviceSpec) -> Result<(), String>;

    /// Loads the weights of the model `assets` describe on `spec`'s
    /// device and dtype; a device or dtype the library cannot give is
    /// refused naming what it can.
    fn load(spec: &ModelSpec, assets: &ModelAssets) -> Result<Self, ExecutorError>;
    /// The devices this library can run on, on this machine.
    fn device_kinds() -> Vec<DeviceKind>;
    fn config(&self) -> &ModelConfig;
    /// An empty KV cache for this model.
    fn new_cache(&self) -> Self::Cache;
    /// Runs each row's tokens after the positions its row of `cache`
    /// holds (one row of `rows` per row of the cache), in one ragged
    /// pass, calling each row's hook after every block with that row's
    /// residual stream (`[tokens, hidden]`); each running row's f32 logits
    /// from its `from` on (`[n - from, vocab]`) and its timing (`None`
    /// for a row that sat the pass out). Token ids are checked before
    /// anything runs; a failed pass leaves the cache as it was.
    fn run_batch(
        &self,
        cache: &mut Self::Cache,
        rows: &mut [LibRow<'_, TensorOf<Self>>],
    ) -> Result<RowOutputs<TensorOf<Self>>, ModelError>;
    /// Runs `ids` after the positions `cache` (one row) holds: a batch of
    /// one ([`LibModel::run_batch`]).
    fn run(
        &self,
        ids: &[u32],
        cache: &mut Self::Cache,
        hook: &mut dyn BlockHook<TensorOf<Self>>,
        from: usize,
    ) -> Result<(TensorOf<Self>, PassTiming), ModelError> {
        if ids.is_empty() {
            // In a batch, a row without tokens sits the pass out.
            return Err(ModelError::EmptyInput);
        }
        let mut rows = [LibRow { ids, from, hook }];
        let out = self.run_batch(cache, &mut rows)?.pop().flatten();
        Ok(out.expect("a row with tokens runs"))
    }
    /// The matrix GGUF calls `blk.{layer}.{stem}.weight`, `[out, in]`.
    fn weight(&self, layer: usize, m: Matrix) -> Result<TensorOf<Self>, ModelError>;
    /// Every weight by its GGUF name, GGUF's shapes (`output.weight` only
    /// when the embeddings are not tied), for export.
    fn named_weights(&self) -> Result<Vec<(String, TensorOf<Self>)>, ModelError>;
    /// Removes the unit direction `r` (`[hidden]`) from the output of `m`
    /// at `layer` (`W ← W − r(rᵀW)`, in f32); the Frobenius norm of the
    /// change.
    fn orthogonalize(&mut self, r: &[f32], layer: usize, m: Matrix) -> Result<f32, ModelError>;
    /// Adds `delta` (`[out, in]` row-major, f32) to the matrix of `m` at
    /// `layer`, in f32 (a packed matrix is kept dense afterwards). A
    /// mixture's expert matrices are refused: an adapter names none.
    fn add_to_weight(&mut self, layer: usize, m: Matrix, delta: &[f32]) -> Result<(), ModelError>;
    /// The prefill span's `kernel` note: the library, its version, the
    /// device, the dtype and where the weights came from.
    fn kernel_note(&self) -> String;
    /// How keys and values are kept (the prefill span's `kv_cache` note).
    fn kv_note(&self) -> String;
    /// Ends a stage on the device (see [`Settled`]).
    fn settle(&self) -> Settled;
    /// Whether tensors live in another memory than the host's, so each
    /// copy between the two counts in a profile.
    fn on_device(&self) -> bool;
    /// The device's own name, for the prefill span (`NVIDIA H200`).
    fn device_label(&self) -> Option<String>;
    /// Whether some weights are held quantized (GGUF files are
    /// dequantized at load, so only a library's own packed format is).
    fn is_quantized(&self) -> bool {
        false
    }
}

/// A model loaded through a tensor library, behind the [`Executor`] trait.
pub struct LibExecutor<M> {
    pub assets: ModelAssets,
    /// Private: shared references only ever run forward passes on it (the
    /// backends' `Sync` impls rely on it).
    model: M,
    device: DeviceSpec,
    /// The digests of its weights and vocabulary, and its changes.
    pub identity: ModelIdentity,
}

impl<M: LibModel> LibExecutor<M> {
    /// [`LocalModel::last_token_states`] of one batch, in one prefill.
    fn last_token_states_batched(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Result<Vec<LastTokenState>, ExecutorError> {
        super::check_prompts(prompts)?;
        let layers = self.dims().layers;
        let ops = M::Ops::default();
        let mut sessions: Vec<LibSession<'_, M>> = prompts
            .iter()
            .map(|_| {
                let mut s = self.session(interventions);
                s.hook.observe_last_positions(layers);
                s
            })
            .collect();
        let logits = {
            let mut refs: Vec<&mut LibSession<'_, M>> = sessions.iter_mut().collect();
            let all_logits = vec![false; prompts.len()];
            session::prefill_batch(&self.model, &mut refs, prompts, &all_logits)?.logits
        };
        sessions
            .iter()
            .zip(logits)
            .map(|(s, logits)| {
                // After a shared opening, each block kept the opening's last
                // position and the prompt's: the prompt's is the last row.
                let residuals = s
                    .hook
                    .kept_residuals(|t| Ok::<_, ExecutorError>(ops.host(&ops.last_row(t)?)?.1))?;
                debug_assert_eq!(residuals.len(), layers, "every block observed, in order");
                Ok(LastTokenState {
                    residuals,
                    logits: session::last_logits(&ops, &logits)?,
                })
            })
            .collect()
    }

    /// The model; crate-private, as the backends' `Sync` impls require
    /// (a caller outside could reach the library's tensors through it).
    pub(crate) fn model(&self) -> &M {
        &self.model
    }

    /// What the prefill span's `kernel` note says of this model: the
    /// library, its version, the device, the dtype, the weights' storage.
    pub fn kernel_note(&self) -> String {
        self.model.kernel_note()
    }
}

impl<M: LibModel> Executor for LibExecutor<M> {
    fn capabilities(&self) -> Capabilities {
        // Scores and report evidence come from plugins, not the executor.
        Capabilities::uniform(M::EXECUTOR, &M::device_kinds(), SupportLevel::Full)
            .with(K::Metric, SupportLevel::Unsupported)
            .with(K::ReportEvidence, SupportLevel::Unsupported)
    }

    fn model_ref(&self) -> ModelRef {
        self.identity.model_ref(&self.assets)
    }

    fn device_name(&self) -> String {
        self.device.to_string()
    }
    fn device_kind(&self) -> DeviceKind {
        self.device.kind()
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
        crate::executor::traced::trace_one(self, request, options, policy)
    }

    /// `batch` jobs at a time, each stage one ragged pass over them.
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        crate::executor::traced::trace_in_batches(self, jobs, batch, on_done)
    }
}

impl<M: LibModel> LocalModel for LibExecutor<M> {
    type Session<'a>
        = LibSession<'a, M>
    where
        M: 'a;

    fn assets(&self) -> &ModelAssets {
        &self.assets
    }

    /// Loads the model at `spec.path` on `spec.device`, in `spec.dtype`.
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        if spec.kv_cache != KvType::F32 {
            return Err(ExecutorError::Request(format!(
                "kv_cache = \"{}\": the {} executor keeps keys and values in the model's dtype; the setting is candle's",
                spec.kv_cache.name(),
                M::TITLE
            )));
        }
        M::check_device(spec.device).map_err(ExecutorError::Device)?;
        let assets = ModelAssets::load(&spec.path)?;
        let model = M::load(spec, &assets)?;
        Ok(LibExecutor {
            assets,
            model,
            device: spec.device,
            identity: ModelIdentity::default(),
        })
    }
    fn weights_sha256(&self) -> Option<String> {
        self.identity.weights_sha256(&self.assets)
    }
    fn is_quantized(&self) -> bool {
        self.model.is_quantized()
    }
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> LibSession<'a, M> {
        LibSession::new(&self.model, interventions)
    }

    /// One batched prefill (a shared opening run once), every block
    /// observed at the last position. A batch that fails is run again one
    /// prompt at a time, so the error names its own prompt.
    fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        super::batch_or_each(prompts, |batch| {
            self.last_token_states_batched(interventions, batch)
        })
    }

    fn orthogonalize(
        &mut self,
        direction: &Direction,
        layers: &[usize],
    ) -> Result<Vec<WeightChange>, ExecutorError> {
        if direction.rows() != 1 {
            return Err(ExecutorError::Request(format!(
                "{}: tensor `{}` has {} rows; orthogonalization needs one direction per layer",
                direction.source,
                direction.tensor,
                direction.rows()
            )));
        }
        let hidden = self.dims().hidden;
        if direction.width() != hidden {
            return Err(ModelError::DirectionWidth {
                found: direction.width(),
                hidden,
            }
            .into());
        }
        self.check_layers(layers)?;
        let norm = direction
            .basis
            .iter()
            .map(|&x| f64::from(x).powi(2))
            .sum::<f64>()
            .sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Err(ModelError::DegenerateDirection { norm: norm as f32 }.into());
        }
        let r: Vec<f32> = direction
            .basis
            .iter()
            .map(|&x| (f64::from(x) / norm) as f32)
            .collect();
        let mut changes = Vec::new();
        for &layer in layers {
            for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                let norm = self.model.orthogonalize(&r, layer, m)?;
                changes.push(WeightChange {
                    layer,
                    matrix: m.gguf_stem().to_owned(),
                    norm,
                });
            }
        }
        self.identity.record_change("orthogonalized");
        Ok(changes)
    }
    fn apply_adapter(&mut self, adapter: &Adapter) -> Result<Vec<WeightChange>, ExecutorError> {
        self.check_layers(&adapter.layers())?;
        let changes = super::add_adapter(adapter, |m, delta| {
            Ok(self.model.add_to_weight(m.layer, m.matrix, &delta)?)
        })?;
        self.identity.record_change(&adapter.describe());
        Ok(changes)
    }

    /// The weights as loaded and transformed, as f32 safetensors in an HF
    /// folder, written by the same exporter as candle's.
    fn export_hf(&self, dir: &Path) -> Result<(), ExecutorError> {
        let ops = M::Ops::default();
        let mut dense = Vec::new();
        for (name, t) in self.model.named_weights()? {
            dense.push((name, ops.host(&t)?));
        }
        let a = &self.assets;
        crate::model::hf::export_weights(
            &a.config,
            dense,
            (&a.tokenizer, a.chat_template.as_deref(), &a.special),
            dir,
        )?;
        Ok(())
    }
}
