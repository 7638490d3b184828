//! GGUF files: the config from the metadata, the tokenizer and chat
//! template from the metadata, and the weights (quantized ones kept
//! quantized unless [`WeightMode::F32`] asks otherwise).

use std::fs::File;
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::gguf_file::Content;

use super::config::LlamaConfig;
use super::llama::{Llama, Weight, WeightMode};
use super::{LoadedModel, ModelError, ModelFormat, Special};

/// Reads the metadata, builds the tokenizer, loads every weight.
/// The model's shape from the GGUF header (no tensor data is read).
pub fn read_config(path: &Path) -> Result<LlamaConfig, ModelError> {
    let mut file = File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let content = Content::read(&mut file).map_err(|e| ModelError::Gguf {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let config = LlamaConfig::from_gguf(path, &content)?;
    config.check(path)?;
    Ok(config)
}

pub fn load(path: &Path, mode: WeightMode, device: &Device) -> Result<LoadedModel, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let content = Content::read(&mut file).map_err(|e| ModelError::Gguf {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut config = LlamaConfig::from_gguf(path, &content)?;
    if config.rope_scaling.is_none() && content.tensor_infos.contains_key("rope_freqs.weight") {
        let factors = content
            .tensor(&mut file, "rope_freqs.weight", &Device::Cpu)
            .and_then(|q| q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>())
            .map_err(|e| ModelError::Tensor {
                path: path.to_path_buf(),
                tensor: "rope_freqs.weight".into(),
                problem: e.to_string(),
            })?;
        config.rope_scaling = Some(super::config::RopeScaling::FreqFactors { factors });
    }
    config.check(path)?;
    let tokenizer = super::tokenizer::from_gguf(&content)?;
    let md_str = |key: &str| {
        content
            .metadata
            .get(key)
            .and_then(|v| v.to_string().ok())
            .cloned()
    };
    let md_u32 = |key: &str| content.metadata.get(key).and_then(|v| v.to_u32().ok());
    let special = Special::from_ids(
        &tokenizer,
        md_u32("tokenizer.ggml.bos_token_id"),
        // EOS, and the end-of-turn / end-of-message ids that also end a reply.
        [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ]
        .iter()
        .filter_map(|k| md_u32(k))
        .fold(Vec::new(), |mut v, id| {
            if !v.contains(&id) {
                v.push(id);
            }
            v
        }),
        content
            .metadata
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false),
    );
    let chat_template = md_str("tokenizer.chat_template");
    let mut load = |name: &str| -> Result<Option<Weight>, ModelError> {
        if !content.tensor_infos.contains_key(name) {
            return Ok(None);
        }
        content
            .tensor(&mut file, name, device)
            .map(|q| Some(Weight::Quant(q)))
            .map_err(|e| ModelError::Tensor {
                path: path.to_path_buf(),
                tensor: name.to_owned(),
                problem: e.to_string(),
            })
    };
    let model = Llama::load(&config, mode, &mut load, device).map_err(|e| e.in_file(path))?;
    Ok(LoadedModel {
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        name: LoadedModel::name_of(path),
        weight_mode: mode,
        config,
        tokenizer,
        chat_template,
        special,
        model,
        weight_files: vec![path.to_path_buf()],
    })
}
