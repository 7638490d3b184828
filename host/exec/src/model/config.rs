//! The shape of a llama-family model, read from GGUF metadata or an HF
//! `config.json`, with the few places the families differ made explicit.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ModelError;
use crate::gguf::GgufFile;

/// Architectures whose tensors follow llama's names and layout.
pub const LLAMA_FAMILY: &[&str] = &["llama", "mistral", "qwen2"];

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Adjacent pairs `(0,1), (2,3)…`: llama.cpp's layout for llama and
    /// mistral GGUF files, whose converter permutes the Q and K rows.
    Interleaved,
    /// First half with second half (`rotate_half`): HF checkpoints, and
    /// llama.cpp's NEOX layout (qwen2 GGUF files).
    Half,
}

/// RoPE frequency scaling, as the checkpoint declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.1's wavelength-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
    /// Per-frequency divisors stored in the GGUF file (`rope_freqs.weight`).
    FreqFactors { factors: Vec<f32> },
}

/// The shape of a llama-family model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// `llama`, `mistral` or `qwen2`.
    pub architecture: String,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    pub rope_scaling: Option<RopeScaling>,
    /// Q, K and V projections carry a bias (Qwen2, some llama fine-tunes).
    pub qkv_bias: bool,
    /// The output projection is the token embedding.
    pub tied_embeddings: bool,
    /// Positions the model was trained for (`context_length`,
    /// `max_position_embeddings`); runs past it are refused.
    pub context_length: Option<usize>,
}

impl LlamaConfig {
    /// Refuses shapes the forward pass cannot run (zero sizes, heads that do
    /// not divide), naming the field.
    pub fn check(&self, source: &Path) -> Result<(), ModelError> {
        let bad = |key: &str, problem: String| ModelError::Config {
            path: source.to_path_buf(),
            key: key.to_owned(),
            problem,
        };
        for (key, v) in [
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err(bad(key, "is 0".into()));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(bad(
                "kv_heads",
                format!(
                    "({}) does not divide the {} attention heads",
                    self.kv_heads, self.heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad(
                "head_dim",
                format!("({}) is odd; rotary embeddings need pairs", self.head_dim),
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(bad(
                "rope_theta",
                format!("({}) is not positive", self.rope_theta),
            ));
        }
        Ok(())
    }

    /// The inverse rotary frequencies of one head, scaling applied.
    pub fn inv_freqs(&self) -> Vec<f32> {
        let half = self.head_dim / 2;
        let base: Vec<f32> = (0..half)
            .map(|i| 1.0 / self.rope_theta.powf(2.0 * i as f32 / self.head_dim as f32))
            .collect();
        match &self.rope_scaling {
            None => base,
            Some(RopeScaling::Linear { factor }) => base.iter().map(|f| f / factor).collect(),
            Some(RopeScaling::FreqFactors { factors }) => base
                .iter()
                .zip(factors.iter().chain(std::iter::repeat(&1.0)))
                .map(|(f, s)| f / s)
                .collect(),
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            }) => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }

    /// The config from GGUF metadata.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        path: &Path,
        file: &GgufFile<R>,
    ) -> Result<Self, ModelError> {
        let md = |key: &str| {
            file.meta(key).ok_or_else(|| ModelError::Metadata {
                path: path.to_path_buf(),
                key: key.to_owned(),
                problem: "is missing".into(),
            })
        };
        let bad = |key: &str, e: String| ModelError::Metadata {
            path: path.to_path_buf(),
            key: key.to_owned(),
            problem: format!("has the wrong type: {e}"),
        };
        let arch = md("general.architecture")?
            .to_str()
            .map_err(|e| bad("general.architecture", e))?
            .to_owned();
        if !LLAMA_FAMILY.contains(&arch.as_str()) {
            return Err(ModelError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: arch,
            });
        }
        let u = |key: &str| -> Result<usize, ModelError> {
            let key = format!("{arch}.{key}");
            md(&key)?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| bad(&key, e))
        };
        let opt_f = |key: &str| -> Result<Option<f32>, ModelError> {
            let key = format!("{arch}.{key}");
            match file.meta(&key) {
                Some(v) => v.to_f32().map(Some).map_err(|e| bad(&key, e)),
                None => Ok(None),
            }
        };
        // A key that is absent may default; one that is present must parse.
        let opt_u = |key: &str| -> Result<Option<usize>, ModelError> {
            match file.meta(&format!("{arch}.{key}")).is_some() {
                true => u(key).map(Some),
                false => Ok(None),
            }
        };
        let hidden = u("embedding_length")?;
        let heads = u("attention.head_count")?;
        let head_dim = match file.meta(&format!("{arch}.attention.key_length")).is_some() {
            true => u("attention.key_length")?,
            false => hidden / heads.max(1),
        };
        let tokens = file
            .meta("tokenizer.ggml.tokens")
            .and_then(|v| v.array_len());
        let vocab = match (opt_u("vocab_size")?, tokens) {
            (Some(v), _) => v,
            (None, Some(n)) => n,
            (None, None) => u("vocab_size")?,
        };
        let scaling = match file
            .meta(&format!("{arch}.rope.scaling.type"))
            .and_then(|v| v.to_str().ok())
        {
            Some("linear") => opt_f("rope.scaling.factor")?
                .filter(|f| *f != 1.0)
                .map(|factor| RopeScaling::Linear { factor }),
            Some("none") | None => None,
            Some(other) => {
                return Err(ModelError::Metadata {
                    path: path.to_path_buf(),
                    key: format!("{arch}.rope.scaling.type"),
                    problem: format!("is `{other}`; supported: linear, none"),
                });
            }
        };
        Ok(LlamaConfig {
            hidden,
            layers: u("block_count")?,
            heads,
            kv_heads: opt_u("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            ffn: u("feed_forward_length")?,
            vocab,
            rms_eps: opt_f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5) as f64,
            rope_theta: opt_f("rope.freq_base")?.unwrap_or(10_000.0),
            // llama.cpp permutes Q/K for llama and mistral, not for qwen2.
            rope_style: if arch == "qwen2" {
                RopeStyle::Half
            } else {
                RopeStyle::Interleaved
            },
            rope_scaling: scaling,
            qkv_bias: file.has_tensor("blk.0.attn_q.bias"),
            tied_embeddings: !file.has_tensor("output.weight"),
            context_length: opt_u("context_length")?,
            architecture: arch,
        })
    }

    /// The config from an HF `config.json`.
    pub fn from_hf(path: &Path, json: &HfConfig) -> Result<Self, ModelError> {
        let arch = match json.model_type.as_str() {
            "llama" | "mistral" | "qwen2" => json.model_type.clone(),
            other => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    found: other.to_owned(),
                });
            }
        };
        // transformers 5 writes `rope_parameters` (theta and scaling in one
        // object); older files write `rope_theta` and `rope_scaling`.
        let rope = json.rope_parameters.as_ref().or(json.rope_scaling.as_ref());
        let theta = json
            .rope_parameters
            .as_ref()
            .and_then(|p| p.rope_theta)
            .or(json.rope_theta);
        let scaling = match rope {
            None => None,
            Some(s) => {
                let kind = s.rope_type.as_deref().or(s.kind.as_deref()).unwrap_or("");
                let need = |v: Option<f32>, key: &str| {
                    v.ok_or_else(|| ModelError::Config {
                        path: path.to_path_buf(),
                        key: format!("rope_scaling.{key}"),
                        problem: format!("is missing (needed by rope_type `{kind}`)"),
                    })
                };
                match kind {
                    "default" | "" => None,
                    "linear" => Some(RopeScaling::Linear {
                        factor: need(s.factor, "factor")?,
                    }),
                    "llama3" => Some(RopeScaling::Llama3 {
                        factor: need(s.factor, "factor")?,
                        low_freq_factor: need(s.low_freq_factor, "low_freq_factor")?,
                        high_freq_factor: need(s.high_freq_factor, "high_freq_factor")?,
                        original_max_position_embeddings: need(
                            s.original_max_position_embeddings,
                            "original_max_position_embeddings",
                        )?,
                    }),
                    other => {
                        return Err(ModelError::Config {
                            path: path.to_path_buf(),
                            key: "rope_scaling.rope_type".into(),
                            problem: format!(
                                "`{other}` is not supported; supported: linear, llama3"
                            ),
                        });
                    }
                }
            }
        };
        let heads = json.num_attention_heads;
        Ok(LlamaConfig {
            hidden: json.hidden_size,
            layers: json.num_hidden_layers,
            heads,
            kv_heads: json.num_key_value_heads.unwrap_or(heads),
            head_dim: json.head_dim.unwrap_or(json.hidden_size / heads.max(1)),
            ffn: json.intermediate_size,
            vocab: json.vocab_size,
            rms_eps: json.rms_norm_eps,
            rope_theta: theta.unwrap_or(10_000.0),
            rope_style: RopeStyle::Half,
            rope_scaling: scaling,
            qkv_bias: json.attention_bias.unwrap_or(arch == "qwen2"),
            tied_embeddings: json.tie_word_embeddings.unwrap_or(false),
            context_length: json.max_position_embeddings,
            architecture: arch,
        })
    }
}

/// The fields of an HF `config.json` the llama family uses; others are ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HfConfig {
    pub model_type: String,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f32>,
    #[serde(default)]
    pub rope_scaling: Option<HfRopeScaling>,
    /// transformers 5's form of `rope_theta` + `rope_scaling`.
    #[serde(default)]
    pub rope_parameters: Option<HfRopeScaling>,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub attention_bias: Option<bool>,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub eos_token_id: Option<EosIds>,
}

fn default_eps() -> f64 {
    1e-6
}

/// `eos_token_id` is one id or a list (Llama 3).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EosIds {
    One(u32),
    Many(Vec<u32>),
}

impl EosIds {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            EosIds::One(id) => vec![*id],
            EosIds::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` in config.json (`type` in older files, `rope_type` in
/// newer), or transformers 5's `rope_parameters`, which also holds the theta.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HfRopeScaling {
    #[serde(default)]
    pub rope_theta: Option<f32>,
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub factor: Option<f32>,
    #[serde(default)]
    pub low_freq_factor: Option<f32>,
    #[serde(default)]
    pub high_freq_factor: Option<f32>,
    #[serde(default)]
    pub original_max_position_embeddings: Option<f32>,
}

/// An HF folder's `config.json`: as written, and as the model's shape.
pub fn read_hf_config(dir: &Path) -> Result<(HfConfig, LlamaConfig), ModelError> {
    let config_path = dir.join("config.json");
    let text =
        crate::input::read_text(&config_path, crate::input::MAX_SMALL_FILE_BYTES).map_err(|e| {
            ModelError::Io {
                path: config_path.clone(),
                source: crate::input::io_error(e),
            }
        })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let hf: HfConfig =
        serde_path_to_error::deserialize(&mut de).map_err(|e| ModelError::Config {
            path: config_path.clone(),
            key: e.path().to_string(),
            problem: e.inner().to_string(),
        })?;
    let config = LlamaConfig::from_hf(&config_path, &hf)?;
    config.check(&config_path)?;
    Ok((hf, config))
}

/// The model's shape from a GGUF header (no tensor data is read).
pub fn read_gguf_config(path: &Path) -> Result<LlamaConfig, ModelError> {
    let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file = GgufFile::read(file).map_err(|message| ModelError::Gguf {
        path: path.to_path_buf(),
        message,
    })?;
    let config = LlamaConfig::from_gguf(path, &file)?;
    config.check(path)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> LlamaConfig {
        LlamaConfig {
            architecture: "llama".into(),
            hidden: 8,
            layers: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            ffn: 16,
            vocab: 10,
            rms_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::Half,
            rope_scaling: None,
            qkv_bias: false,
            tied_embeddings: true,
            context_length: None,
        }
    }

    #[test]
    fn each_matrix_has_the_shape_and_bias_its_loaders_check() {
        use crate::model::Matrix as M;
        // Grouped-query heads whose width is not the hidden size: the
        // query's rows and the output's columns are the heads' width.
        let mut c = LlamaConfig {
            head_dim: 5,
            ..base()
        };
        let shapes: Vec<(usize, usize)> = M::ALL.iter().map(|m| m.shape(&c)).collect();
        assert_eq!(
            shapes,
            [(10, 8), (5, 8), (5, 8), (8, 10), (16, 8), (16, 8), (8, 16)]
        );
        assert!(M::ALL.iter().all(|m| !m.has_bias(&c)));
        c.qkv_bias = true;
        let biased: Vec<M> = M::ALL.into_iter().filter(|m| m.has_bias(&c)).collect();
        assert_eq!(biased, [M::AttnQ, M::AttnK, M::AttnV]);
    }

    #[test]
    fn inverse_frequencies_follow_theta_and_linear_scaling() {
        let mut c = base();
        assert_eq!(c.inv_freqs(), vec![1.0, 0.01]);
        c.rope_scaling = Some(RopeScaling::Linear { factor: 4.0 });
        assert_eq!(c.inv_freqs(), vec![0.25, 0.0025]);
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let mut c = base();
        c.rope_scaling = Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        });
        // wavelength 2π (high frequency) is kept; 2π·100 = 628 < 8192/4 kept too.
        assert_eq!(c.inv_freqs(), vec![1.0, 0.01]);
        c.rope_theta = 1e8; // second frequency 1e-4: wavelength 62832 > 8192 → divided.
        let f = c.inv_freqs();
        assert!((f[1] - 1e-4 / 8.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn a_bad_head_split_is_named() {
        let mut c = base();
        c.kv_heads = 3;
        let e = c.check(Path::new("m/config.json")).unwrap_err().to_string();
        assert!(
            e.contains("kv_heads") && e.contains("does not divide"),
            "{e}"
        );
    }

    fn hf(extra: serde_json::Value) -> LlamaConfig {
        let mut json = serde_json::json!({
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
        });
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let parsed: HfConfig = serde_json::from_value(json).unwrap();
        LlamaConfig::from_hf(Path::new("config.json"), &parsed).unwrap()
    }

    #[test]
    fn rope_settings_are_read_in_both_config_json_forms() {
        let old = hf(serde_json::json!({"rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0}}));
        assert_eq!(old.rope_theta, 500000.0);
        assert_eq!(old.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
        let new = hf(
            serde_json::json!({"rope_parameters": {"rope_type": "llama3",
            "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        );
        assert_eq!(new.rope_theta, 500000.0);
        assert!(matches!(
            new.rope_scaling,
            Some(RopeScaling::Llama3 { factor: 8.0, .. })
        ));
        let plain =
            hf(serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}));
        assert_eq!((plain.rope_theta, plain.rope_scaling), (1e6, None));
        assert_eq!(hf(serde_json::json!({})).rope_theta, 10_000.0);
        assert_eq!(plain.kv_heads, 4, "no num_key_value_heads: one per head");
    }
}
