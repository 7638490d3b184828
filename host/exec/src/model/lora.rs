//! LoRA adapters: a weight change carried as low-rank factors, `ΔW = s·B·A`
//! per matrix (`B` is `[out, r]`, `A` is `[r, in]`, `s` the scale), in the
//! two forms other tools load:
//!
//! - a PEFT adapter folder (`adapter_config.json` and
//!   `adapter_model.safetensors`, HF's module names), which
//!   `peft.PeftModel.from_pretrained` loads onto the HF model;
//! - a llama.cpp LoRA GGUF (`general.type = adapter`,
//!   `blk.N.<matrix>.weight.lora_a/_b`), which `llama-server --lora` loads
//!   onto the GGUF model.
//!
//! An [`Adapter`] holds its factors by GGUF matrix, in GGUF's layout (the
//! Q and K rows in llama.cpp's order where the family permutes them), so
//! its dense change adds to the weights [`HostWeights`] reads and every
//! backend holds. Two sources make one: a rank-1 orthogonalization, which
//! is a LoRA exactly ([`Adapter::orthogonalization`]), and the difference of
//! two models of one shape, truncated to rank `r` ([`extract`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use nalgebra::DMatrix;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use super::config::{ModelConfig, RopeStyle};
use super::gguf::{GgufFile, MetaValue, write_f32};
use super::hf::permute_qk;
use super::host_weights::HostWeights;
use super::{Matrix, ModelError, hf_name};

/// The PEFT folder's two files and the GGUF file's name inside an adapter
/// folder vauban writes.
pub const PEFT_CONFIG: &str = "adapter_config.json";
pub const PEFT_WEIGHTS: &str = "adapter_model.safetensors";
pub const GGUF_FILE: &str = "adapter.gguf";

/// An adapter that cannot be read, written or applied; each names the
/// file, the place and what to do.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
    /// The adapter does not fit the model it is applied to.
    #[error("adapter {} does not fit the model: {problem}", path.display())]
    Mismatch { path: PathBuf, problem: String },
    /// A request that cannot be met (a rank of 0 or above a matrix's).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl From<candle_core::Error> for AdapterError {
    fn from(e: candle_core::Error) -> Self {
        AdapterError::Model(ModelError::from(e))
    }
}

/// The Frobenius norm of `values`, summed in f64.
pub fn frobenius(values: &[f32]) -> f32 {
    values
        .iter()
        .map(|&x| f64::from(x).powi(2))
        .sum::<f64>()
        .sqrt() as f32
}

/// One matrix's factors, in GGUF's layout: `ΔW = scale·B·A`.
#[derive(Debug, Clone)]
pub struct LowRank {
    pub layer: usize,
    pub matrix: Matrix,
    /// `[rows, rank]`, row-major.
    pub b: Vec<f32>,
    /// `[rank, cols]`, row-major.
    pub a: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    pub rank: usize,
    pub scale: f32,
}

impl LowRank {
    /// `blk.N.<stem>.weight`: the matrix the factors change.
    pub fn tensor(&self) -> String {
        format!("blk.{}.{}.weight", self.layer, self.matrix.gguf_stem())
    }

    /// The dense change `scale·B·A`, `[rows, cols]` row-major.
    pub fn delta(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for i in 0..self.rows {
            let row = &mut out[i * self.cols..(i + 1) * self.cols];
            for k in 0..self.rank {
                let bik = self.b[i * self.rank + k] * self.scale;
                if bik == 0.0 {
                    continue;
                }
                let a = &self.a[k * self.cols..(k + 1) * self.cols];
                for (o, &x) in row.iter_mut().zip(a) {
                    *o += bik * x;
                }
            }
        }
        out
    }
}

/// A LoRA adapter: low-rank changes to some of a model's matrices.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// The family the adapter was made for, as GGUF names it (`llama`).
    pub architecture: String,
    /// One entry per changed matrix, ordered by layer then matrix.
    pub matrices: Vec<LowRank>,
    /// The files it was read from (none for one vauban computed).
    pub files: Vec<PathBuf>,
}

/// How much of a model difference one matrix's adapter keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub layer: usize,
    pub matrix: Matrix,
    /// ‖Δ‖_F: the whole difference of the two models' matrices.
    pub difference: f64,
    /// ‖B·A‖_F: what the adapter carries.
    pub kept: f64,
    /// ‖Δ − B·A‖_F: what it leaves out.
    pub residual: f64,
}

impl Kept {
    /// ‖B·A‖ / ‖Δ‖ (1 for a matrix the two models share).
    pub fn share(&self) -> f64 {
        match self.difference > 0.0 {
            true => self.kept / self.difference,
            false => 1.0,
        }
    }
}

/// The result of [`extract`]: the adapter, what it keeps of each matrix,
/// and the tensors outside its matrices that differ (an adapter cannot
/// carry a norm weight or an embedding), with ‖Δ‖_F of each.
#[derive(Debug)]
pub struct Extraction {
    pub adapter: Adapter,
    pub kept: Vec<Kept>,
    pub outside: Vec<(String, f64)>,
}

impl Extraction {
    /// ‖B·A‖ / ‖Δ‖ over every matrix of the adapter together.
    pub fn total_share(&self) -> f64 {
        let d: f64 = self.kept.iter().map(|k| k.difference.powi(2)).sum();
        let k: f64 = self.kept.iter().map(|k| k.kept.powi(2)).sum();
        match d > 0.0 {
            true => (k / d).sqrt(),
            false => 1.0,
        }
    }
}

/// The matrices an adapter may change on a model shaped `c`, or why not:
/// a mixture's experts and a fused checkpoint's parts have no name of
/// their own in PEFT or llama.cpp.
fn check_target(c: &ModelConfig, m: Matrix) -> Result<(), String> {
    if c.experts.is_some() && matches!(m, Matrix::FfnGate | Matrix::FfnUp | Matrix::FfnDown) {
        return Err(format!(
            "`{}` of a mixture of experts is one matrix per expert, which neither PEFT nor llama.cpp \
             names as a LoRA target; choose the attention's matrices (attn_q, attn_k, attn_v, attn_output)",
            m.gguf_stem()
        ));
    }
    let fused = super::config::BlockLayout::of_family(&c.architecture, c.hidden).fused;
    if (fused || c.block.fused)
        && matches!(
            m,
            Matrix::AttnQ | Matrix::AttnK | Matrix::AttnV | Matrix::FfnGate | Matrix::FfnUp
        )
    {
        return Err(format!(
            "`{}` is part of a fused matrix in a {} checkpoint (qkv_proj, gate_up_proj), which an \
             adapter cannot target alone; choose attn_output and ffn_down",
            m.gguf_stem(),
            c.architecture
        ));
    }
    Ok(())
}

/// Whether the family stores `m`'s rows in llama.cpp's RoPE order in GGUF
/// (so an HF-form `B` is permuted): the heads to permute by.
fn permuted_heads(c: &ModelConfig, m: Matrix) -> Option<usize> {
    match (c.rope_style, m) {
        (RopeStyle::Interleaved, Matrix::AttnQ) => Some(c.heads),
        (RopeStyle::Interleaved, Matrix::AttnK) => Some(c.kv_heads),
        _ => None,
    }
}

/// The module PEFT names for `m` at `layer` (`model.layers.3.self_attn.o_proj`).
fn peft_module(c: &ModelConfig, layer: usize, m: Matrix) -> String {
    let name = hf_name(&format!("blk.{layer}.{}.weight", m.gguf_stem()), c);
    name.strip_suffix(".weight").unwrap_or(&name).to_owned()
}

/// The leaf of a PEFT module name (`o_proj`), what `target_modules` lists.
fn leaf(module: &str) -> &str {
    module.rsplit('.').next().unwrap_or(module)
}

impl Adapter {
    /// The rank-1 adapter of orthogonalizing the residual writers of each
    /// layer against its direction: for `W` the attention output and the
    /// MLP down projection, `ΔW = −r̂(r̂ᵀW) = B·A` with `B = −r̂`,
    /// `A = r̂ᵀW`, exactly; the same change `vauban model orthogonalize`
    /// makes in place. `directions` holds each layer's direction (any
    /// norm); `weights` are the base model's, as stored.
    pub fn orthogonalization(
        weights: &mut HostWeights,
        c: &ModelConfig,
        directions: &[(usize, Vec<f32>)],
    ) -> Result<Adapter, AdapterError> {
        let mut matrices = Vec::new();
        for (layer, d) in directions {
            if d.len() != c.hidden {
                return Err(ModelError::DirectionWidth {
                    found: d.len(),
                    hidden: c.hidden,
                }
                .into());
            }
            let norm = d.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            if !(norm.is_finite() && norm > 0.0) {
                return Err(ModelError::DegenerateDirection { norm: norm as f32 }.into());
            }
            let r: Vec<f64> = d.iter().map(|&x| f64::from(x) / norm).collect();
            for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                check_target(c, m).map_err(AdapterError::Usage)?;
                let (rows, cols) = m.shape(c);
                let w = weights.need(
                    &format!("blk.{layer}.{}.weight", m.gguf_stem()),
                    &[rows, cols],
                )?;
                // A = r̂ᵀW, summed in f64.
                let mut a = vec![0f64; cols];
                for (i, &ri) in r.iter().enumerate() {
                    for (acc, &x) in a.iter_mut().zip(&w[i * cols..(i + 1) * cols]) {
                        *acc += ri * f64::from(x);
                    }
                }
                matrices.push(LowRank {
                    layer: *layer,
                    matrix: m,
                    b: r.iter().map(|&x| -x as f32).collect(),
                    a: a.into_iter().map(|x| x as f32).collect(),
                    rows,
                    cols,
                    rank: 1,
                    scale: 1.0,
                });
            }
        }
        matrices.sort_by_key(|m| (m.layer, m.matrix));
        Ok(Adapter {
            architecture: c.architecture.clone(),
            matrices,
            files: Vec::new(),
        })
    }

    /// The Frobenius norm of each matrix's change, `‖s·B·A‖_F`.
    pub fn change_norms(&self) -> Vec<f32> {
        self.matrices
            .iter()
            .map(|m| frobenius(&m.delta()))
            .collect()
    }

    /// The adapter in words, for a model's name in its traces: its rank(s)
    /// and the file it came from.
    pub fn describe(&self) -> String {
        let ranks: BTreeSet<usize> = self.matrices.iter().map(|m| m.rank).collect();
        let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
        let from = self
            .files
            .first()
            .map(|f| {
                let shown = match f.file_name().is_some_and(|n| n == PEFT_CONFIG) {
                    true => f.parent().unwrap_or(f),
                    false => f.as_path(),
                };
                format!(" {}", shown.display())
            })
            .unwrap_or_default();
        format!("LoRA{from}, rank {}", ranks.join("/"))
    }

    /// sha256 over the files the adapter was read from, in order (each
    /// file's bytes): what identifies the adapted model.
    pub fn sha256(&self) -> Result<String, AdapterError> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for f in &self.files {
            let bytes = std::fs::read(f).map_err(|source| AdapterError::Io {
                path: f.clone(),
                source,
            })?;
            h.update(&bytes);
        }
        Ok(hex::encode(h.finalize()))
    }

    /// The layers the adapter changes, ascending.
    pub fn layers(&self) -> Vec<usize> {
        let set: BTreeSet<usize> = self.matrices.iter().map(|m| m.layer).collect();
        set.into_iter().collect()
    }

    /// Writes the adapter into a new folder `dir`, in both forms: PEFT's
    /// (`adapter_config.json`, `adapter_model.safetensors`) for the HF
    /// model, and llama.cpp's (`adapter.gguf`) for the GGUF one. Written
    /// into a staging folder and renamed into place, so a failure leaves
    /// no half folder. `base` is the model's path, recorded for PEFT.
    pub fn write(&self, c: &ModelConfig, base: &Path, dir: &Path) -> Result<(), AdapterError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AdapterError::Io { path, source }
        };
        if dir.exists() {
            return Err(AdapterError::Usage(format!(
                "{} exists; choose a new folder for the adapter",
                dir.display()
            )));
        }
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let staging = tempfile::Builder::new()
            .prefix(".vauban-adapter-")
            .tempdir_in(parent)
            .map_err(io(parent))?;
        self.write_peft(c, base, staging.path())?;
        self.write_gguf(&staging.path().join(GGUF_FILE))?;
        let staged = staging.keep();
        std::fs::rename(&staged, dir).map_err(io(dir))?;
        Ok(())
    }

    /// The rank every matrix shares and the alpha that makes the scale
    /// theirs (`alpha / rank`): what both formats store once.
    fn rank_and_alpha(&self) -> Result<(usize, f32), AdapterError> {
        let first = self.matrices.first().ok_or_else(|| {
            AdapterError::Usage("the adapter changes no matrix; there is nothing to write".into())
        })?;
        if let Some(m) = self
            .matrices
            .iter()
            .find(|m| m.rank != first.rank || m.scale != first.scale)
        {
            return Err(AdapterError::Usage(format!(
                "{} has rank {} and scale {}, but {} rank {} and scale {}: vauban writes adapters of one rank and scale",
                m.tensor(),
                m.rank,
                m.scale,
                first.tensor(),
                first.rank,
                first.scale
            )));
        }
        Ok((first.rank, first.scale * first.rank as f32))
    }

    fn write_peft(&self, c: &ModelConfig, base: &Path, dir: &Path) -> Result<(), AdapterError> {
        let (rank, alpha) = self.rank_and_alpha()?;
        let mut tensors: Vec<(String, Tensor)> = Vec::new();
        let mut targets = BTreeSet::new();
        let mut modules = Vec::new();
        let mut by_layer: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
        for m in &self.matrices {
            check_target(c, m.matrix).map_err(AdapterError::Usage)?;
            let module = peft_module(c, m.layer, m.matrix);
            let b = Tensor::from_slice(&m.b, (m.rows, m.rank), &Device::Cpu)?;
            let b = match permuted_heads(c, m.matrix) {
                Some(h) => permute_qk(&b, h, true)?,
                None => b,
            };
            let a = Tensor::from_slice(&m.a, (m.rank, m.cols), &Device::Cpu)?;
            tensors.push((format!("base_model.model.{module}.lora_A.weight"), a));
            tensors.push((format!("base_model.model.{module}.lora_B.weight"), b));
            targets.insert(leaf(&module).to_owned());
            modules.push(module);
            by_layer
                .entry(m.layer)
                .or_default()
                .insert(m.matrix.gguf_stem());
        }
        // PEFT applies a list of `target_modules` in every layer of
        // `layers_to_transform`: the readable form when the adapter changes
        // the same matrices in each of its layers. Otherwise the exact
        // modules, as the regular expression PEFT matches whole names
        // against, so PEFT adds no zero adapter vauban did not write.
        let first = by_layer.values().next().cloned().unwrap_or_default();
        let uniform = by_layer.values().all(|s| *s == first);
        let layers: Vec<usize> = by_layer.keys().copied().collect();
        let every_layer = layers.len() == c.layers || !uniform;
        let target_modules: serde_json::Value = match uniform {
            true => targets.into_iter().collect::<Vec<_>>().into(),
            false => modules
                .iter()
                .map(|m| m.replace('.', "\\."))
                .collect::<Vec<_>>()
                .join("|")
                .into(),
        };
        let config = serde_json::json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base.display().to_string(),
            "r": rank,
            "lora_alpha": alpha,
            "target_modules": target_modules,
            "layers_to_transform": if every_layer { serde_json::Value::Null } else { layers.into() },
            "layers_pattern": if every_layer { serde_json::Value::Null } else { "layers".into() },
            "lora_dropout": 0.0,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": false,
            "use_dora": false,
            "init_lora_weights": true,
            "inference_mode": true,
            "modules_to_save": null,
            "rank_pattern": {},
            "alpha_pattern": {},
        });
        let path = dir.join(PEFT_CONFIG);
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&config).expect("json values serialize"),
        )
        .map_err(|source| AdapterError::Io { path, source })?;
        let map: std::collections::HashMap<String, Tensor> = tensors.into_iter().collect();
        candle_core::safetensors::save(&map, dir.join(PEFT_WEIGHTS))?;
        Ok(())
    }

    fn write_gguf(&self, path: &Path) -> Result<(), AdapterError> {
        let (_, alpha) = self.rank_and_alpha()?;
        let names: Vec<(String, String)> = self
            .matrices
            .iter()
            .map(|m| {
                (
                    format!("{}.lora_a", m.tensor()),
                    format!("{}.lora_b", m.tensor()),
                )
            })
            .collect();
        let shapes: Vec<([usize; 2], [usize; 2])> = self
            .matrices
            .iter()
            .map(|m| ([m.rank, m.cols], [m.rows, m.rank]))
            .collect();
        let mut tensors: Vec<(&str, &[usize], &[f32])> = Vec::new();
        for ((m, (a, b)), (sa, sb)) in self.matrices.iter().zip(&names).zip(&shapes) {
            tensors.push((a, sa, &m.a));
            tensors.push((b, sb, &m.b));
        }
        let meta = [
            (
                "general.architecture",
                MetaValue::Str(self.architecture.clone()),
            ),
            ("general.type", MetaValue::Str("adapter".into())),
            ("general.name", MetaValue::Str("vauban adapter".into())),
            ("adapter.type", MetaValue::Str("lora".into())),
            ("adapter.lora.alpha", MetaValue::F32(alpha)),
        ];
        let mut file = std::fs::File::create(path).map_err(|source| AdapterError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        write_f32(&mut file, &meta, &tensors).map_err(|problem| AdapterError::Invalid {
            path: path.to_path_buf(),
            problem,
        })
    }

    /// Reads an adapter for a model shaped `c`: a PEFT folder (or its
    /// `adapter_config.json`), or a llama.cpp LoRA GGUF file (or a folder
    /// holding only `adapter.gguf`). Every shape, target and the family
    /// are checked against `c`; the first mismatch is named.
    pub fn read(path: &Path, c: &ModelConfig) -> Result<Adapter, AdapterError> {
        let is_gguf = path.extension().is_some_and(|e| e == "gguf");
        if is_gguf {
            return Adapter::read_gguf(path, c);
        }
        let dir = match path.file_name().is_some_and(|n| n == PEFT_CONFIG) {
            true => path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            false => path.to_path_buf(),
        };
        if !dir.is_dir() {
            return Err(AdapterError::Invalid {
                path: path.to_path_buf(),
                problem: "is neither a PEFT adapter folder nor a LoRA .gguf file".into(),
            });
        }
        if dir.join(PEFT_CONFIG).exists() {
            return Adapter::read_peft(&dir, c);
        }
        if dir.join(GGUF_FILE).exists() {
            return Adapter::read_gguf(&dir.join(GGUF_FILE), c);
        }
        Err(AdapterError::Invalid {
            path: dir,
            problem: format!(
                "holds neither {PEFT_CONFIG} (a PEFT adapter) nor {GGUF_FILE}; point at the adapter's folder or its .gguf file"
            ),
        })
    }

    fn read_peft(dir: &Path, c: &ModelConfig) -> Result<Adapter, AdapterError> {
        let cfg_path = dir.join(PEFT_CONFIG);
        let bad = |problem: String| AdapterError::Invalid {
            path: cfg_path.clone(),
            problem,
        };
        let text = std::fs::read_to_string(&cfg_path).map_err(|source| AdapterError::Io {
            path: cfg_path.clone(),
            source,
        })?;
        let cfg: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "is not JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ))
        })?;
        match cfg["peft_type"].as_str() {
            Some("LORA") => {}
            other => {
                return Err(bad(format!(
                    "`peft_type` is {}; vauban reads LoRA adapters (\"LORA\")",
                    other.map_or("missing".to_owned(), |s| format!("{s:?}"))
                )));
            }
        }
        for (key, refused) in [
            ("use_dora", "DoRA's magnitude vectors"),
            ("fan_in_fan_out", "Conv1D (fan-in-fan-out) layouts"),
        ] {
            if cfg[key].as_bool() == Some(true) {
                return Err(bad(format!(
                    "`{key}` is true: vauban applies plain LoRA, not {refused}"
                )));
            }
        }
        if cfg["bias"].as_str().is_some_and(|b| b != "none") {
            return Err(bad(
                "`bias` is not \"none\": vauban applies the low-rank factors only, not trained biases".into(),
            ));
        }
        if cfg["modules_to_save"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return Err(bad(
                "`modules_to_save` lists whole modules: vauban applies the low-rank factors only"
                    .into(),
            ));
        }
        let alpha = cfg["lora_alpha"]
            .as_f64()
            .ok_or_else(|| bad("`lora_alpha` is missing or not a number".into()))?;
        let rslora = cfg["use_rslora"].as_bool() == Some(true);
        let alpha_pattern = cfg["alpha_pattern"]
            .as_object()
            .cloned()
            .unwrap_or_default();

        let weights = dir.join(PEFT_WEIGHTS);
        if !weights.exists() {
            return Err(AdapterError::Invalid {
                path: dir.to_path_buf(),
                problem: format!("has {PEFT_CONFIG} but no {PEFT_WEIGHTS}"),
            });
        }
        let tensors = candle_core::safetensors::load(&weights, &Device::Cpu).map_err(|e| {
            AdapterError::Invalid {
                path: weights.clone(),
                problem: format!("is not a readable safetensors file: {e}"),
            }
        })?;
        // Every module a block of this model has, by PEFT's name.
        let mut modules: BTreeMap<String, (usize, Matrix)> = BTreeMap::new();
        for layer in 0..c.layers {
            for m in Matrix::ALL {
                modules.insert(peft_module(c, layer, m), (layer, m));
            }
        }
        let mut pairs: BTreeMap<String, [Option<Tensor>; 2]> = BTreeMap::new();
        for (name, t) in tensors {
            let module = name.strip_prefix("base_model.model.").unwrap_or(&name);
            let (module, slot) = match (
                module.strip_suffix(".lora_A.weight"),
                module.strip_suffix(".lora_B.weight"),
            ) {
                (Some(m), _) => (m, 0),
                (_, Some(m)) => (m, 1),
                _ => {
                    return Err(AdapterError::Invalid {
                        path: weights.clone(),
                        problem: format!(
                            "tensor `{name}` is not a LoRA factor (`….lora_A.weight` or `….lora_B.weight`); vauban applies plain LoRA adapters"
                        ),
                    });
                }
            };
            pairs.entry(module.to_owned()).or_default()[slot] = Some(t);
        }
        let mut matrices = Vec::new();
        for (module, [a, b]) in pairs {
            let mismatch = |problem: String| AdapterError::Mismatch {
                path: weights.clone(),
                problem,
            };
            let Some(&(layer, matrix)) = modules.get(&module) else {
                return Err(mismatch(format!(
                    "it targets `{module}`, which this {} model has no matrix of ({} layers; modules such as `{}`)",
                    c.architecture,
                    c.layers,
                    peft_module(c, 0, Matrix::AttnOutput)
                )));
            };
            check_target(c, matrix).map_err(|p| mismatch(format!("`{module}`: {p}")))?;
            let (Some(a), Some(b)) = (a, b) else {
                return Err(mismatch(format!(
                    "`{module}` has only one of lora_A and lora_B"
                )));
            };
            let (rows, cols) = matrix.shape(c);
            let (ra, ca) = a.dims2()?;
            let (rb, cb) = b.dims2()?;
            if ca != cols || rb != rows || ra != cb {
                return Err(mismatch(format!(
                    "`{module}`: lora_A is [{ra}, {ca}] and lora_B [{rb}, {cb}], but the model's matrix is [{rows}, {cols}] (lora_A must be [r, {cols}], lora_B [{rows}, r])"
                )));
            }
            let rank = ra;
            let alpha = alpha_pattern
                .iter()
                .find(|(k, _)| module == **k || module.ends_with(&format!(".{k}")))
                .and_then(|(_, v)| v.as_f64())
                .unwrap_or(alpha);
            let scale = match rslora {
                true => alpha / (rank as f64).sqrt(),
                false => alpha / rank as f64,
            } as f32;
            let b = match permuted_heads(c, matrix) {
                Some(h) => permute_qk(&b.to_dtype(DType::F32)?, h, false)?,
                None => b,
            };
            let flat = |t: Tensor| -> Result<Vec<f32>, AdapterError> {
                Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
            };
            matrices.push(LowRank {
                layer,
                matrix,
                b: flat(b)?,
                a: flat(a)?,
                rows,
                cols,
                rank,
                scale,
            });
        }
        if matrices.is_empty() {
            return Err(AdapterError::Invalid {
                path: weights,
                problem: "holds no LoRA factors".into(),
            });
        }
        matrices.sort_by_key(|m| (m.layer, m.matrix));
        Ok(Adapter {
            architecture: c.architecture.clone(),
            matrices,
            files: vec![cfg_path, weights],
        })
    }

    fn read_gguf(path: &Path, c: &ModelConfig) -> Result<Adapter, AdapterError> {
        let bad = |problem: String| AdapterError::Invalid {
            path: path.to_path_buf(),
            problem,
        };
        let file = std::fs::File::open(path).map_err(|source| AdapterError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut g = GgufFile::read(std::io::BufReader::new(file)).map_err(bad)?;
        let text = |key: &str| g.meta(key).and_then(|m| m.to_str().ok()).map(str::to_owned);
        if text("general.type").as_deref() != Some("adapter")
            || text("adapter.type").as_deref() != Some("lora")
        {
            return Err(bad(
                "is not a LoRA adapter (`general.type` = adapter and `adapter.type` = lora); a model file is loaded with `model`, not `adapter`".into(),
            ));
        }
        let arch = text("general.architecture").unwrap_or_default();
        if arch != c.architecture {
            return Err(AdapterError::Mismatch {
                path: path.to_path_buf(),
                problem: format!(
                    "it was made for a `{arch}` model, and the model is `{}`",
                    c.architecture
                ),
            });
        }
        let alpha = match g.meta("adapter.lora.alpha") {
            Some(m) => Some(
                m.to_f32()
                    .map_err(|e| bad(format!("adapter.lora.alpha {e}")))?,
            ),
            None => None,
        };
        let mut matrices = Vec::new();
        for name in g.tensor_names() {
            let Some(base) = name.strip_suffix(".lora_a") else {
                if !name.ends_with(".lora_b") {
                    return Err(bad(format!(
                        "tensor `{name}` is not a LoRA factor (`….lora_a` or `….lora_b`)"
                    )));
                }
                continue;
            };
            let mismatch = |problem: String| AdapterError::Mismatch {
                path: path.to_path_buf(),
                problem,
            };
            let found = (0..c.layers)
                .flat_map(|l| Matrix::ALL.map(|m| (l, m)))
                .find(|(l, m)| base == format!("blk.{l}.{}.weight", m.gguf_stem()));
            let Some((layer, matrix)) = found else {
                return Err(mismatch(format!(
                    "it targets `{base}`, which this {} model ({} layers) has no matrix of",
                    c.architecture, c.layers
                )));
            };
            check_target(c, matrix).map_err(|p| mismatch(format!("`{base}`: {p}")))?;
            let b_name = format!("{base}.lora_b");
            let (Some(sa), Some(sb)) = (g.tensor_shape(&name), g.tensor_shape(&b_name)) else {
                return Err(mismatch(format!(
                    "`{base}` has only one of lora_a and lora_b"
                )));
            };
            let (rows, cols) = matrix.shape(c);
            if sa.len() != 2 || sb.len() != 2 || sa[1] != cols || sb[0] != rows || sa[0] != sb[1] {
                return Err(mismatch(format!(
                    "`{base}`: lora_a is {sa:?} and lora_b {sb:?}, but the model's matrix is [{rows}, {cols}] (lora_a must be [r, {cols}], lora_b [{rows}, r])"
                )));
            }
            let rank = sa[0];
            let a = g
                .read_f32(&name)
                .map_err(|p| bad(format!("tensor `{name}` {p}")))?;
            let b = g
                .read_f32(&b_name)
                .map_err(|p| bad(format!("tensor `{b_name}` {p}")))?;
            matrices.push(LowRank {
                layer,
                matrix,
                b,
                a,
                rows,
                cols,
                rank,
                // llama.cpp's rule: alpha / rank, or 1 without an alpha.
                scale: alpha.map_or(1.0, |al| al / rank as f32),
            });
        }
        if matrices.is_empty() {
            return Err(bad("holds no LoRA factors".into()));
        }
        matrices.sort_by_key(|m| (m.layer, m.matrix));
        Ok(Adapter {
            architecture: arch,
            matrices,
            files: vec![path.to_path_buf()],
        })
    }
}

/// The tensors outside the blocks' matrices two models of one family may
/// differ in, by GGUF name.
fn other_tensors(c: &ModelConfig) -> Vec<String> {
    let mut names = vec![
        "token_embd.weight".to_owned(),
        "output_norm.weight".to_owned(),
    ];
    if !c.tied_embeddings {
        names.push("output.weight".into());
    }
    for l in 0..c.layers {
        // The norms this family's blocks have (an HF name can mean
        // another norm in another family).
        for stem in super::config::BLOCK_NORMS {
            if c.norm_width(stem).is_some() {
                names.push(format!("blk.{l}.{stem}.weight"));
            }
        }
        for m in [Matrix::AttnQ, Matrix::AttnK, Matrix::AttnV] {
            if m.has_bias(c) {
                names.push(format!("blk.{l}.{}.bias", m.gguf_stem()));
            }
        }
    }
    names
}

/// The first way two models' shapes differ, or `None`.
fn shape_difference(a: &ModelConfig, b: &ModelConfig) -> Option<String> {
    let fields = [
        ("layers", a.layers, b.layers),
        ("hidden", a.hidden, b.hidden),
        ("ffn", a.ffn, b.ffn),
        ("heads", a.heads, b.heads),
        ("kv_heads", a.kv_heads, b.kv_heads),
        ("head_dim", a.head_dim, b.head_dim),
        ("vocab", a.vocab, b.vocab),
    ];
    if a.architecture != b.architecture {
        return Some(format!(
            "the base is a `{}` model and the tuned one a `{}` model",
            a.architecture, b.architecture
        ));
    }
    fields
        .iter()
        .find(|(_, x, y)| x != y)
        .map(|(what, x, y)| format!("the base has {what} = {x} and the tuned model {what} = {y}"))
}

/// A matrix `w` of a model shaped `from`, in the row order of a model
/// shaped `to`: a GGUF file of the llama family keeps Q and K rows in
/// llama.cpp's RoPE order, an HF folder in HF's, so a GGUF base and its
/// fine-tune exported as a folder are compared row for row.
fn in_layout_of(
    w: Vec<f32>,
    m: Matrix,
    from: &ModelConfig,
    to: &ModelConfig,
) -> Result<Vec<f32>, AdapterError> {
    let (heads_from, heads_to) = (permuted_heads(from, m), permuted_heads(to, m));
    if heads_from == heads_to {
        return Ok(w);
    }
    let (rows, cols) = m.shape(from);
    let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu)?;
    let t = match (heads_from, heads_to) {
        (Some(h), None) => permute_qk(&t, h, true)?,
        (None, Some(h)) => permute_qk(&t, h, false)?,
        _ => t,
    };
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// The difference `tuned − base` of every matrix in `targets`, as a rank-`rank`
/// adapter per matrix (in the base's layout; the tuned model's Q and K
/// rows brought to it where one is a GGUF file and the other a folder): the top `rank` singular directions of each
/// difference (`B = U_r`, `A = U_rᵀΔ`), found by randomized subspace
/// iteration (Halko, Martinsson and Tropp, 2011) from a fixed seed, so the
/// same models give the same adapter. What each keeps is measured on the factors
/// written, not estimated.
pub fn extract(
    base: &mut HostWeights,
    tuned: &mut HostWeights,
    (cb, ct): (&ModelConfig, &ModelConfig),
    rank: usize,
    targets: &[Matrix],
) -> Result<Extraction, AdapterError> {
    if let Some(d) = shape_difference(cb, ct) {
        return Err(AdapterError::Usage(format!(
            "the two models differ in shape: {d}; an adapter is extracted between a model and its fine-tune"
        )));
    }
    if rank == 0 {
        return Err(AdapterError::Usage("--rank must be at least 1".into()));
    }
    for &m in targets {
        check_target(cb, m).map_err(AdapterError::Usage)?;
        let (rows, cols) = m.shape(cb);
        if rank > rows.min(cols) {
            return Err(AdapterError::Usage(format!(
                "--rank {rank} is above the rank {} matrices can have ([{rows}, {cols}]); use at most {}",
                m.gguf_stem(),
                rows.min(cols)
            )));
        }
    }
    let mut matrices = Vec::new();
    let mut kept = Vec::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x10_2a);
    for layer in 0..cb.layers {
        for &m in targets {
            let name = format!("blk.{layer}.{}.weight", m.gguf_stem());
            let (rows, cols) = m.shape(cb);
            let wb = base.need(&name, &[rows, cols])?;
            let wt = in_layout_of(tuned.need(&name, &[rows, cols])?, m, ct, cb)?;
            let delta = DMatrix::from_fn(rows, cols, |i, j| {
                f64::from(wt[i * cols + j]) - f64::from(wb[i * cols + j])
            });
            let difference = delta.norm();
            if difference == 0.0 {
                // The same in both models: nothing to carry.
                kept.push(Kept {
                    layer,
                    matrix: m,
                    difference,
                    kept: 0.0,
                    residual: 0.0,
                });
                continue;
            }
            let (b, a) = truncate(&delta, rank, &mut rng);
            let approx = &b * &a;
            kept.push(Kept {
                layer,
                matrix: m,
                difference,
                kept: approx.norm(),
                residual: (&delta - &approx).norm(),
            });
            matrices.push(LowRank {
                layer,
                matrix: m,
                // Row-major, as the formats store them.
                b: b.transpose().iter().map(|&x| x as f32).collect(),
                a: a.transpose().iter().map(|&x| x as f32).collect(),
                rows,
                cols,
                rank,
                scale: 1.0,
            });
        }
    }
    if matrices.is_empty() {
        return Err(AdapterError::Usage(format!(
            "every one of the {} matrices is the same in both models: there is no difference to extract",
            kept.len()
        )));
    }
    let mut outside = Vec::new();
    for name in other_tensors(cb) {
        match (base.get(&name)?, tuned.get(&name)?) {
            (None, None) => {}
            (Some((sa, va)), Some((sb, vb))) => {
                if sa != sb {
                    return Err(AdapterError::Usage(format!(
                        "the two models differ in shape at `{name}`: {sa:?} in the base, {sb:?} in the tuned model"
                    )));
                }
                let d: f64 = va
                    .iter()
                    .zip(&vb)
                    .map(|(&x, &y)| (f64::from(y) - f64::from(x)).powi(2))
                    .sum::<f64>()
                    .sqrt();
                if d > 0.0 {
                    outside.push((name, d));
                }
            }
            (a, _) => {
                return Err(AdapterError::Usage(format!(
                    "the two models differ at `{name}`: only the {} has it",
                    if a.is_some() { "base" } else { "tuned model" }
                )));
            }
        }
    }
    Ok(Extraction {
        adapter: Adapter {
            architecture: cb.architecture.clone(),
            matrices,
            files: Vec::new(),
        },
        kept,
        outside,
    })
}

/// Power iterations of [`truncate`]: each sharpens the sketch's range
/// towards the top singular directions by their ratio to the rest.
const POWER_ITERATIONS: usize = 8;

/// `Δ ≈ B·A` of rank `rank` (`B` orthonormal columns, `[m, rank]`;
/// `A = Bᵀ Δ`, `[rank, n]`) by randomized subspace iteration: a Gaussian
/// sketch of `2·rank + 8` columns, [`POWER_ITERATIONS`] power iterations
/// re-orthonormalized by QR, then the top `rank` eigenvectors of the
/// sketch's Gram matrix. Exact (to rounding) for a difference of rank at
/// most `2·rank + 8`.
fn truncate(
    delta: &DMatrix<f64>,
    rank: usize,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> (DMatrix<f64>, DMatrix<f64>) {
    let (m, n) = delta.shape();
    let k = (2 * rank + 8).min(m.min(n));
    let omega = DMatrix::from_fn(n, k, |_, _| StandardNormal.sample(rng));
    let mut q = (delta * omega).qr().q();
    for _ in 0..POWER_ITERATIONS {
        let z = (delta.transpose() * &q).qr().q();
        q = (delta * z).qr().q();
    }
    // The sketch's range holds Δ's top singular directions: those of
    // QᵀΔ (k × n) are the eigenvectors of its k × k Gram matrix.
    let small = q.transpose() * delta;
    let gram = &small * small.transpose();
    let eig = nalgebra::SymmetricEigen::new(gram);
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&i, &j| eig.eigenvalues[j].total_cmp(&eig.eigenvalues[i]));
    let w = DMatrix::from_fn(k, rank, |i, j| eig.eigenvectors[(i, order[j])]);
    let b = q * w;
    let a = b.transpose() * delta;
    (b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank-3 difference is recovered exactly at rank 3, and a rank-2
    /// adapter of it keeps what the top two singular values say it can.
    #[test]
    fn truncation_recovers_a_low_rank_difference() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let u = DMatrix::from_fn(40, 3, |_, _| StandardNormal.sample(&mut rng));
        let v = DMatrix::from_fn(3, 90, |_, _| StandardNormal.sample(&mut rng));
        let delta: DMatrix<f64> = &u * &v;
        let (b, a) = truncate(&delta, 3, &mut rng);
        let err = (&delta - &b * &a).norm() / delta.norm();
        assert!(err < 1e-10, "relative error {err}");
        let sv = delta.clone().svd(false, false).singular_values;
        let (b, a) = truncate(&delta, 2, &mut rng);
        let kept = (&b * &a).norm();
        let best = (sv[0].powi(2) + sv[1].powi(2)).sqrt();
        assert!((kept - best).abs() / best < 1e-9, "{kept} vs {best}");
    }

    /// A full-rank difference: the rank-r adapter keeps within 0.1% of the
    /// best rank-r share (Eckart–Young), and no more than it; a pure noise
    /// matrix (the flattest spectrum, the slowest to converge) too.
    #[test]
    fn truncation_of_a_full_rank_difference_is_near_optimal() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        // Decaying spectrum plus noise, as a fine-tune's difference has.
        let delta = DMatrix::from_fn(64, 150, |i, j| {
            let x: f64 = StandardNormal.sample(&mut rng);
            x * 0.05 + ((i * 7 + j * 3) as f64 * 0.01).sin() / (1.0 + i as f64)
        });
        let sv = delta.clone().svd(false, false).singular_values;
        for r in [1, 4, 16] {
            let (b, a) = truncate(&delta, r, &mut rng);
            let kept = (&b * &a).norm();
            let best = sv.iter().take(r).map(|s| s * s).sum::<f64>().sqrt();
            assert!(kept <= best * (1.0 + 1e-9), "rank {r}: {kept} above {best}");
            assert!(kept >= best * 0.999, "rank {r}: {kept} vs best {best}");
        }
        let noise = DMatrix::from_fn(64, 64, |_, _| StandardNormal.sample(&mut rng));
        let sv = noise.clone().svd(false, false).singular_values;
        let (b, a) = truncate(&noise, 4, &mut rng);
        let best = sv.iter().take(4).map(|s| s * s).sum::<f64>().sqrt();
        let kept = (&b * &a).norm();
        assert!(kept >= best * 0.999, "noise: {kept} vs best {best}");
    }
}
