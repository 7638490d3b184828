//! The Torch executor, through `tch` and libtorch (the `torch` feature):
//! the same llama-family model as candle's, from the same description
//! ([`LlamaConfig`](crate::model::config::LlamaConfig) and GGUF tensor
//! names) and the same assets (tokenizer, chat template, special tokens:
//! [`ModelAssets`]), on CPU, CUDA or MPS, behind the same [`Executor`]
//! trait and trace recorder. GGUF weights are dequantized at load (the
//! trace says so); HF folders load f32, f16 or bf16 safetensors.
//!
//! - [`model`]: the forward pass with a KV cache and a hook after every block;
//! - [`intervene`]: the activation primitive on libtorch tensors;
//! - [`cuda`]: device evidence on an NVIDIA GPU for stage profiles;
//! - `session`: generation sessions and the hook that intervenes and observes;
//! - `trace`: one traced run, recorded through the shared recorder.

pub mod cuda;
pub mod intervene;
pub mod model;
mod session;
mod trace;

use std::path::Path;
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};

pub use session::{TorchHook, TorchSession};

use self::model::TorchLlama;
use super::{
    DeviceSpec, Executor, ExecutorError, LastTokenState, ModelDims, ModelSpec, PromptForm,
    RunOptions, TraceOutput, WeightChange,
};
use crate::intervene::policy::StepPolicy;
use crate::intervene::{Direction, Intervention};
use crate::model::assets::ModelAssets;
use crate::model::{Dtype, KvType, Matrix, ModelError};
use crate::trace::{
    ArtifactKind as K, Capabilities, DeviceKind, ModelRef, SupportLevel, TraceRequest,
};

/// The libtorch device a [`DeviceSpec`] names; a device this libtorch or
/// machine does not have is refused naming what is available (never a
/// silent fall-back to the CPU).
pub fn open_device(spec: DeviceSpec) -> Result<Device, String> {
    let available = || {
        // libtorch registers its CUDA backend once; load it before the
        // first count, so no path counts before it is there.
        let _ = cuda::load_torch_cuda();
        let mut names = vec!["cpu".to_owned()];
        names.extend((0..tch::Cuda::device_count()).map(|i| format!("cuda:{i}")));
        if tch::utils::has_mps() {
            names.push("mps".into());
        }
        names.join(", ")
    };
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(i) => {
            let loaded = cuda::load_torch_cuda();
            let count = tch::Cuda::device_count().max(0) as usize;
            if i < count {
                return Ok(Device::Cuda(i));
            }
            let why = match loaded {
                Ok(()) => String::new(),
                Err(e) => format!("; libtorch's CUDA library did not load: {e}"),
            };
            Err(format!(
                "device `{spec}`: libtorch sees {count} CUDA device{} here (available: {}){why}",
                if count == 1 { "" } else { "s" },
                available()
            ))
        }
        DeviceSpec::Mps if tch::utils::has_mps() => Ok(Device::Mps),
        DeviceSpec::Mps => Err(format!(
            "device `mps`: this libtorch has no MPS backend (Apple silicon, macOS builds only; available: {})",
            available()
        )),
        DeviceSpec::Metal(_) => Err(format!(
            "device `{spec}` is candle's name for an Apple GPU; the Torch executor's is `mps`"
        )),
    }
}

/// A model loaded on a libtorch device.
pub struct TorchExecutor {
    pub assets: ModelAssets,
    /// Private: shared references only ever run forward passes on it (see
    /// the `Sync` impl below).
    model: TorchLlama,
    device: DeviceSpec,
    /// The weights' and activations' dtype.
    dtype: Dtype,
    sha256: OnceLock<Option<String>>,
    tokenizer_sha256: OnceLock<String>,
    /// Set when the weights were changed in memory after loading.
    pub modified: Option<String>,
}

impl TorchExecutor {
    /// Loads the model at `spec.path` on `spec.device`, in `spec.dtype`.
    pub fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        if spec.kv_cache != KvType::F32 {
            return Err(ExecutorError::Request(format!(
                "kv_cache = \"{}\": the Torch executor keeps keys and values in the model's dtype; the setting is candle's",
                spec.kv_cache.name()
            )));
        }
        let device = open_device(spec.device).map_err(ExecutorError::Device)?;
        let assets = ModelAssets::load(&spec.path)?;
        // Quantized weights have no libtorch kernels here: they are
        // dequantized whatever `spec.weights` asks (the trace says so).
        let kind = match spec.dtype {
            Dtype::F32 => Kind::Float,
            Dtype::F16 => Kind::Half,
            Dtype::Bf16 => Kind::BFloat16,
        };
        let model = TorchLlama::load(&assets, device, kind)?;
        Ok(TorchExecutor {
            assets,
            model,
            device: spec.device,
            dtype: spec.dtype,
            sha256: OnceLock::new(),
            tokenizer_sha256: OnceLock::new(),
            modified: None,
        })
    }

    /// Devices this libtorch can run on, on this machine.
    fn device_kinds() -> Vec<DeviceKind> {
        let _ = cuda::load_torch_cuda();
        let mut kinds = vec![DeviceKind::Cpu];
        if tch::Cuda::is_available() {
            kinds.push(DeviceKind::Cuda);
        }
        if tch::utils::has_mps() {
            kinds.push(DeviceKind::Mps);
        }
        kinds
    }

    pub fn capabilities(&self) -> Capabilities {
        // Scores and report evidence come from plugins, not the executor.
        Capabilities::uniform("torch", &Self::device_kinds(), SupportLevel::Full)
            .with(K::Metric, SupportLevel::Unsupported)
            .with(K::ReportEvidence, SupportLevel::Unsupported)
    }

    pub fn weights_sha256(&self) -> Option<String> {
        self.sha256
            .get_or_init(|| self.assets.weights_sha256())
            .clone()
    }

    pub fn model_ref(&self) -> ModelRef {
        let (name, sha256) = match &self.modified {
            None => (self.assets.name.clone(), self.weights_sha256()),
            // The file hash would claim weights the run did not use.
            Some(how) => (format!("{} ({how})", self.assets.name), None),
        };
        ModelRef {
            name,
            path: Some(self.assets.path.display().to_string()),
            sha256,
            tokenizer_sha256: Some(
                self.tokenizer_sha256
                    .get_or_init(|| self.assets.vocabulary_sha256())
                    .clone(),
            ),
        }
    }

    pub fn dims(&self) -> ModelDims {
        let c = &self.assets.config;
        ModelDims {
            layers: c.layers,
            hidden: c.hidden,
            vocab: c.vocab,
        }
    }

    /// The kernel note of a prefill span: libtorch, its version, the dtype
    /// and where the weights came from.
    fn kernel_note(&self) -> String {
        let mut note = format!(
            "libtorch {} ({:?}), {:?}",
            libtorch_version(),
            self.model.device(),
            self.model.kind()
        );
        if let Some(stored) = self.model.dequantized() {
            note.push_str(&format!("; GGUF {stored} weights dequantized at load"));
        }
        note
    }

    pub fn session<'a>(&'a self, interventions: &'a [Intervention]) -> TorchSession<'a> {
        TorchSession::new(&self.model, interventions)
    }

    /// See [`Executor::last_token_states`]: each prompt in its own pass,
    /// every block observed at the last position.
    pub fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        let layers = self.dims().layers;
        prompts
            .iter()
            .map(|ids| {
                let mut s = self.session(interventions);
                s.hook.observe = (0..layers).collect();
                s.hook.last_only = true;
                let logits = s.pass(ids, true, ids.len().saturating_sub(1))?;
                let residuals = s
                    .hook
                    .kept
                    .iter()
                    .map(|k| host_vec(&k.tensor))
                    .collect::<Result<Vec<_>, _>>()?;
                debug_assert_eq!(residuals.len(), layers, "every block observed, in order");
                Ok(LastTokenState {
                    residuals,
                    logits: session::last_row(&logits)?,
                })
            })
            .collect()
    }

    pub fn orthogonalize(
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
            .sqrt() as f32;
        if !(norm.is_finite() && norm > 0.0) {
            return Err(ModelError::DegenerateDirection { norm }.into());
        }
        let r = Tensor::from_slice(&direction.basis) / f64::from(norm);
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
        self.modified = Some("orthogonalized".into());
        Ok(changes)
    }
}

// SAFETY: `tch::Tensor` is `Send` but not `Sync` because some of its
// methods change a tensor through `&self`. A `&TorchExecutor` reaches its
// tensors only through this module's own code, which runs forward passes
// (reading the weights; libtorch's tensors are safe to read from several
// threads, their reference counts are atomic) and never changes one
// through a shared reference: the weights change only in
// `orthogonalize`, through `&mut self`. The model field is private so no
// caller can reach a tensor through `&self` either. This lets a loaded
// executor be shared (a `OnceLock<Backend>` in a test, an `Arc` in a server).
unsafe impl Sync for TorchExecutor {}

/// The version of the libtorch this process loaded (`2.13.0`,
/// `2.11.0+cu130`), for the trace's kernel note: read from the `version.py`
/// (or `build-version`) beside the loaded `libtorch_cpu.so`, found in
/// `/proc/self/maps`; "version unknown" where neither is there.
fn libtorch_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let lib = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.ends_with("/libtorch_cpu.so"))
            .map(Path::new);
        let root = lib.and_then(|l| l.parent()?.parent());
        let read = |name: &str| std::fs::read_to_string(root?.join(name)).ok();
        read("version.py")
            .and_then(|v| {
                let line = v.lines().find(|l| l.starts_with("__version__"))?;
                Some(line.split(['\'', '"']).nth(1)?.to_owned())
            })
            .or_else(|| read("build-version").map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| "version unknown".into())
    })
}

/// A tensor's values as f32 on the host, in row-major order.
pub(crate) fn host_vec(t: &Tensor) -> Result<Vec<f32>, ExecutorError> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).to_device(Device::Cpu).flatten(0, -1))
        .map_err(|e| ModelError::from(e).into())
}

impl Executor for TorchExecutor {
    type Session<'a> = TorchSession<'a>;

    fn load(spec: &ModelSpec) -> Result<Self, ExecutorError> {
        TorchExecutor::load(spec)
    }
    fn capabilities(&self) -> Capabilities {
        TorchExecutor::capabilities(self)
    }
    fn model_ref(&self) -> ModelRef {
        TorchExecutor::model_ref(self)
    }
    fn weights_sha256(&self) -> Option<String> {
        TorchExecutor::weights_sha256(self)
    }
    fn dims(&self) -> ModelDims {
        TorchExecutor::dims(self)
    }
    fn architecture(&self) -> Option<String> {
        Some(self.assets.config.architecture.clone())
    }
    fn device_name(&self) -> String {
        self.device.to_string()
    }
    fn device_kind(&self) -> DeviceKind {
        self.device.kind()
    }
    /// Quantized files are dequantized at load: libtorch holds floats.
    fn is_quantized(&self) -> bool {
        false
    }
    fn tokenize(&self, text: &str, form: &PromptForm) -> Result<Vec<u32>, ExecutorError> {
        Ok(match form {
            PromptForm::Raw => self.assets.encode_raw(text)?,
            PromptForm::Chat { system } => self
                .assets
                .encode(&self.assets.render_chat(text, system.as_deref())?)?,
        })
    }
    fn encode_plain(&self, text: &str) -> Result<Vec<u32>, ExecutorError> {
        Ok(self.assets.encode(text)?)
    }
    fn token_name(&self, id: u32) -> Option<String> {
        self.assets.tokenizer.id_to_token(id)
    }
    fn detokenize(&self, ids: &[u32]) -> Result<String, ExecutorError> {
        Ok(self.assets.decode(ids)?)
    }
    fn is_eos(&self, id: u32) -> bool {
        self.assets.is_eos(id)
    }
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        trace::run(self, request, options, policy)
    }
    fn session<'a>(&'a self, interventions: &'a [Intervention]) -> TorchSession<'a> {
        TorchExecutor::session(self, interventions)
    }
    fn last_token_states(
        &self,
        interventions: &[Intervention],
        prompts: &[&[u32]],
    ) -> Vec<Result<LastTokenState, ExecutorError>> {
        TorchExecutor::last_token_states(self, interventions, prompts)
    }
    fn orthogonalize(
        &mut self,
        direction: &Direction,
        layers: &[usize],
    ) -> Result<Vec<WeightChange>, ExecutorError> {
        TorchExecutor::orthogonalize(self, direction, layers)
    }
    /// The weights as loaded and transformed, as f32 safetensors in an HF
    /// folder, written by the same exporter as candle's.
    fn export_hf(&self, dir: &Path) -> Result<(), ExecutorError> {
        let mut dense = Vec::new();
        for (name, t) in self.model.named_weights() {
            let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
            let values = host_vec(t)?;
            let t = candle_core::Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
                .map_err(ModelError::from)?;
            dense.push((name, t));
        }
        let a = &self.assets;
        crate::executor::candle::model::hf::export_weights(
            &a.config,
            dense,
            (&a.tokenizer, a.chat_template.as_deref(), &a.special),
            dir,
        )?;
        Ok(())
    }
}
