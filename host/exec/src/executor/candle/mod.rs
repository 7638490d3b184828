//! The embedded default executor: our llama-family forward on candle.

pub mod device;
pub mod intervene;
pub mod model;
mod session;
mod trace;

use super::identity::ModelIdentity;
use std::ops::ControlFlow;

use candle_core::{Device, IndexOp};

pub use session::{CandleSession, RunHook};

use self::model::LoadedModel;
use self::model::llama::LogitsAt;
use super::{
    Executor, ExecutorError, LastTokenState, LocalModel, ModelDims, ModelSpec, PromptForm,
    RunOptions, TraceOutput, WeightChange,
};
use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention};
use crate::model::lora::Adapter;
use crate::model::{Matrix, ModelError};
use crate::trace::{
    ArtifactKind as K, Capabilities, DeviceKind, ModelRef, SupportLevel, TraceRequest,
};

/// Prompts a pipeline side (or `vauban trace`) traces in one batched pass
/// unless told otherwise. On the quickstart (SmolLM2 Q4_1, 16 prompts a
/// side, 2 cores) 8 took the trace stages from 13.6 s to 8.6 s and the
/// run's peak RSS from 373 MB to 738 MB: a batch holds every prompt's
/// logits and log-probabilities at once (docs/executor.md, Batching).
pub const DEFAULT_BATCH: usize = 8;

/// A model loaded on a candle device.
pub struct CandleExecutor {
    pub model: LoadedModel,
    pub device: Device,
    /// `cpu`, `cuda:0`...
    pub device_name: String,
    device_kind: DeviceKind,
    /// The digests of its weights and vocabulary, and its changes.
    pub identity: ModelIdentity,
    /// How the activation primitive runs on CPU activations.
    pub primitive: crate::model::PrimitivePath,
}

impl CandleExecutor {
    /// Devices this build of candle can run on.
    fn device_kinds() -> Vec<DeviceKind> {
        let mut kinds = vec![DeviceKind::Cpu];
        if candle_core::utils::cuda_is_available() {
            kinds.push(DeviceKind::Cuda);
        }
        if candle_core::utils::metal_is_available() {
            kinds.push(DeviceKind::Metal);
        }
        kinds
    }

    /// The prompt text as the model sees it: as given, or rendered with the
    /// model's chat template.
    pub fn render(&self, text: &str, form: &PromptForm) -> Result<String, ExecutorError> {
        match form {
            PromptForm::Raw => Ok(text.to_owned()),
            PromptForm::Chat { system } => Ok(self.model.render_chat(text, system.as_deref())?),
        }
    }

    /// Traces `jobs` as one batch, each stage one batched pass over all of
    /// them (see [`crate::executor::traced`]): one result per job, in order.
    pub fn trace_batch(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
    ) -> Vec<Result<TraceOutput, ExecutorError>> {
        crate::executor::traced::trace_batch(self, jobs)
    }

    /// Whether tensors live in another memory than the host's (a GPU's),
    /// so each copy between the two counts in a profile.
    pub(crate) fn on_device(&self) -> bool {
        !self.device.is_cpu()
    }

    fn last_token_states_batched(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Result<Vec<LastTokenState>, ExecutorError> {
        crate::executor::check_prompts(prompts)?;
        let layers = self.dims().layers;
        let mut sessions: Vec<CandleSession<'_>> = prompts
            .iter()
            .map(|_| {
                let mut s = self.session(interventions);
                s.hook.observe_last_positions(layers);
                s
            })
            .collect();
        let logits = {
            let mut refs: Vec<&mut CandleSession<'_>> = sessions.iter_mut().collect();
            let at = vec![LogitsAt::Last; prompts.len()];
            session::prefill_batch(&mut refs, prompts, &at)?.logits
        };
        sessions
            .iter()
            .zip(logits)
            .map(|(s, logits)| {
                // `[1, positions, hidden]`: the last position's row.
                let residuals = s
                    .hook
                    .kept_residuals(|t| {
                        let n = t.dim(1)?;
                        t.i((0, n - 1))?
                            .to_dtype(candle_core::DType::F32)?
                            .to_vec1::<f32>()
                    })
                    .map_err(ModelError::from)?;
                debug_assert_eq!(residuals.len(), layers, "every block observed, in order");
                Ok(LastTokenState {
                    residuals,
                    logits: session::last_row(&logits)?,
                })
            })
            .collect()
    }
}

impl Executor for CandleExecutor {
    fn capabilities(&self) -> Capabilities {
        // Scores and report evidence come from plugins, not the executor.
        Capabilities::uniform("candle", &Self::device_kinds(), SupportLevel::Full)
            .with(K::Metric, SupportLevel::Unsupported)
            .with(K::ReportEvidence, SupportLevel::Unsupported)
    }

    fn model_ref(&self) -> ModelRef {
        self.identity.model_ref(&self.model.assets)
    }

    fn device_name(&self) -> String {
        self.device_name.clone()
    }

    fn device_kind(&self) -> DeviceKind {
        self.device_kind
    }

    fn known_dims(&self) -> Option<ModelDims> {
        Some(self.dims())
    }

    /// Runs `request` and records its trace; with a policy deciding ops
    /// after its watched blocks, in prefill and every decode step (the
    /// trace records what it did as an intervention_result labelled `policy`).
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        crate::executor::traced::trace_one(self, request, options, policy)
    }

    /// `batch` jobs at a time in one batched pass (see
    /// [`CandleExecutor::trace_batch`]), results handed back in order.
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        crate::executor::traced::trace_in_batches(self, jobs, batch, on_done)
    }
}

impl LocalModel for CandleExecutor {
    type Session<'a> = CandleSession<'a>;

    fn assets(&self) -> &crate::model::assets::ModelAssets {
        &self.model.assets
    }

    /// Loads the model at `spec.path` on `spec.device`.
    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        if spec.dtype != crate::model::Dtype::F32 {
            return Err(ExecutorError::Request(format!(
                "dtype = \"{}\": candle holds weights as the file stores them (`weights`) and picks its compute dtype; the setting is the Torch and MLX executors'",
                spec.dtype.name()
            )));
        }
        let device = device::open(spec.device).map_err(ExecutorError::Device)?;
        let mut model = LoadedModel::load(&spec.path, spec.weights, &device)?;
        model.model.set_kv_type(spec.kv_cache);
        Ok(CandleExecutor {
            model,
            device,
            device_name: spec.device.to_string(),
            device_kind: spec.device.kind(),
            identity: ModelIdentity::default(),
            primitive: spec.primitive,
        })
    }
    /// sha256 of the weights (see [`ModelAssets::weights_sha256`]),
    /// computed once, on first use.
    ///
    /// [`ModelAssets::weights_sha256`]: crate::model::assets::ModelAssets::weights_sha256
    fn weights_sha256(&self) -> Option<String> {
        self.identity.weights_sha256(&self.model.assets)
    }
    fn is_quantized(&self) -> bool {
        self.model.model.is_quantized()
    }
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> CandleSession<'a> {
        let ops = intervene::Candle {
            primitive: self.primitive,
        };
        CandleSession::new(&self.model.model, interventions, ops)
    }

    /// One batched prefill (a shared opening run once), every block
    /// observed. A batch that fails is run again one prompt at a time, so
    /// the error names its own prompt.
    fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        crate::executor::batch_or_each(prompts, |batch| {
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
        let d = candle_core::Tensor::from_slice(&direction.basis, direction.width(), &self.device)
            .map_err(crate::model::ModelError::from)?;
        let changes =
            self.model
                .model
                .orthogonalize(&d, layers, &[Matrix::AttnOutput, Matrix::FfnDown])?;
        self.identity.record_change("orthogonalized");
        Ok(changes
            .into_iter()
            .map(|((layer, m), norm)| WeightChange {
                layer,
                matrix: m.gguf_stem().to_owned(),
                norm,
            })
            .collect())
    }

    fn apply_adapter(&mut self, adapter: &Adapter) -> Result<Vec<WeightChange>, ExecutorError> {
        self.check_layers(&adapter.layers())?;
        let model = &mut self.model.model;
        let changes = super::add_adapter(adapter, |m, delta| {
            let w = model.weight(m.layer, m.matrix)?;
            let sum = candle_core::Tensor::from_vec(delta, (m.rows, m.cols), w.device())
                .and_then(|delta| w.to_dtype(candle_core::DType::F32)? + delta)
                .map_err(ModelError::from)?;
            Ok(model.set_weight(m.layer, m.matrix, sum)?)
        })?;
        self.identity.record_change(&adapter.describe());
        Ok(changes)
    }

    fn export_hf(&self, dir: &std::path::Path) -> Result<(), ExecutorError> {
        let m = &self.model;
        model::hf::export(
            &m.model,
            &m.tokenizer,
            m.chat_template.as_deref(),
            &m.special,
            dir,
        )?;
        Ok(())
    }
}
