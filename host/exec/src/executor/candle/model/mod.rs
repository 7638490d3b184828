//! The llama-family model on candle: the forward pass with its block
//! hook ([`llama`]), loaded from a GGUF file ([`gguf`]) or an HF folder
//! ([`hf`], which also exports one), with its tokenizer and chat template.

pub mod gguf;
pub mod hf;
pub mod llama;

use std::path::Path;

use candle_core::Device;

use crate::model::assets::ModelAssets;
use crate::model::{ModelError, WeightMode, not_a_model};
use llama::Llama;

/// A loaded model: its assets (tokenizer, chat template, special tokens,
/// shape; read as every backend reads them) and candle's weights.
pub struct LoadedModel {
    pub assets: ModelAssets,
    pub model: Llama,
    pub weight_mode: WeightMode,
}

/// The assets' fields and methods (`config`, `tokenizer`, `encode`...)
/// read through the loaded model, as they did before the assets were
/// shared with the other backends.
impl std::ops::Deref for LoadedModel {
    type Target = ModelAssets;
    fn deref(&self) -> &ModelAssets {
        &self.assets
    }
}

impl LoadedModel {
    /// Loads a GGUF file or an HF folder; anything else is refused naming the path.
    pub fn load(path: &Path, mode: WeightMode, device: &Device) -> Result<Self, ModelError> {
        let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.is_dir() {
            hf::load(path, mode, device)
        } else if path.extension().is_some_and(|e| e == "gguf") {
            gguf::load(path, mode, device)
        } else {
            Err(not_a_model(path))
        }
    }
}
