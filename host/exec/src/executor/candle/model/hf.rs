//! Loading an HF folder into candle's model, and writing candle's model
//! back as one (through the shared [`crate::model::hf`]).

use std::path::Path;

use candle_core::Device;

use super::LoadedModel;
use super::llama::{Llama, Weight};
use crate::model::assets::ModelAssets;
use crate::model::hf::{HfWeights, export_weights};
use crate::model::{ModelError, Special, WeightMode};

/// Loads an HF folder.
pub fn load(dir: &Path, mode: WeightMode, device: &Device) -> Result<LoadedModel, ModelError> {
    let assets = ModelAssets::from_hf(dir)?;
    let weights = HfWeights::open(&assets)?;
    let mut load = |name: &str| Ok(weights.get(name, device)?.map(Weight::Dense));
    let model = Llama::load(&assets.config, mode, &mut load, device)
        .map_err(|e| e.hf_names(&assets.config).in_file(dir))?;
    Ok(LoadedModel {
        assets,
        model,
        weight_mode: mode,
    })
}

/// Writes `model` as an HF folder vauban (and `transformers`) can load:
/// `model.safetensors` (f32), `config.json`, `tokenizer.json` and
/// `tokenizer_config.json` with the chat template. Written into a staging
/// folder and renamed into place, so a failure leaves no half folder.
pub fn export(
    model: &Llama,
    tokenizer: &tokenizers::Tokenizer,
    chat_template: Option<&str>,
    special: &Special,
    dir: &Path,
) -> Result<(), ModelError> {
    let assets = (tokenizer, chat_template, special);
    let mut dense = Vec::new();
    for (name, t) in model.dense_weights()? {
        let shape = t.dims().to_vec();
        let values = t.flatten_all()?.to_vec1::<f32>()?;
        dense.push((name, (shape, values)));
    }
    export_weights(model.config(), dense, assets, dir)
}
