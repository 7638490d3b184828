//! A GGUF file: llama-family config from its metadata, its tokenizer, and
//! its weights (kept quantized; candle's quantized matmul runs them).

use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_core::quantized::QTensor;
use candle_core::quantized::gguf_file::Content;

use super::ModelError;
use super::llama::{Llama, LlamaConfig};

/// Architectures whose GGUF tensors follow llama's names and layout.
const LLAMA_FAMILY: &[&str] = &["llama", "mistral", "qwen2"];

/// A GGUF model loaded for the forward pass.
pub struct GgufModel {
    pub path: PathBuf,
    pub config: LlamaConfig,
    pub tokenizer: tokenizers::Tokenizer,
    pub model: Llama,
}

impl GgufModel {
    /// Reads the file's metadata, builds the tokenizer, loads every weight.
    pub fn open(path: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        let mut file = File::open(&path).map_err(io)?;
        let content = Content::read(&mut file).map_err(|e| ModelError::Gguf {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let config = config(&path, &content)?;
        let tokenizer = super::tokenizer::from_gguf(&content)?;
        let mut load = |name: &str| -> Result<QTensor, ModelError> {
            content
                .tensor(&mut file, name, device)
                .map_err(|e| ModelError::Tensor {
                    path: path.clone(),
                    tensor: name.to_owned(),
                    problem: e.to_string(),
                })
        };
        let tied = !content.tensor_infos.contains_key("output.weight");
        let model = Llama::load(&config, tied, &mut load, device)?;
        Ok(GgufModel {
            path,
            config,
            tokenizer,
            model,
        })
    }
}

/// The llama config a GGUF file's metadata describes.
fn config(path: &Path, content: &Content) -> Result<LlamaConfig, ModelError> {
    let md = |key: &str| {
        content
            .metadata
            .get(key)
            .ok_or_else(|| ModelError::Metadata {
                path: path.to_path_buf(),
                key: key.to_owned(),
                problem: "is missing".into(),
            })
    };
    let bad = |key: &str, e: candle_core::Error| ModelError::Metadata {
        path: path.to_path_buf(),
        key: key.to_owned(),
        problem: format!("has the wrong type: {e}"),
    };
    let arch = md("general.architecture")?
        .to_string()
        .map_err(|e| bad("general.architecture", e))?
        .clone();
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
    let f = |key: &str, default: f32| -> Result<f32, ModelError> {
        let key = format!("{arch}.{key}");
        match content.metadata.get(&key) {
            Some(v) => v.to_f32().map_err(|e| bad(&key, e)),
            None => Ok(default),
        }
    };
    let hidden = u("embedding_length")?;
    let heads = u("attention.head_count")?;
    Ok(LlamaConfig {
        hidden,
        layers: u("block_count")?,
        heads,
        kv_heads: u("attention.head_count_kv")?,
        head_dim: u("rope.dimension_count").unwrap_or(hidden / heads),
        ffn: u("feed_forward_length")?,
        rms_eps: f("attention.layer_norm_rms_epsilon", 1e-5)? as f64,
        rope_theta: f("rope.freq_base", 10_000.0)?,
    })
}
