//! The llama-family model on candle: the forward pass with its block
//! hook ([`llama`]), loaded from a GGUF file ([`gguf`]) or an HF folder
//! ([`hf`], which also exports one), with its tokenizer and chat template.

pub mod gguf;
pub mod hf;
pub mod llama;

use std::path::{Path, PathBuf};

use candle_core::Device;

use crate::model::config::LlamaConfig;
use crate::model::{ModelError, ModelFormat, Special, WeightMode, chat, not_a_model};
use llama::Llama;

impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Compute(Box::new(e))
    }
}

/// A loaded model with its tokenizer, chat template and special tokens.
pub struct LoadedModel {
    pub path: PathBuf,
    pub format: ModelFormat,
    /// A short name for reports (file or folder name).
    pub name: String,
    pub config: LlamaConfig,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat_template: Option<String>,
    pub special: Special,
    pub model: Llama,
    /// The files the weights came from (for hashing).
    pub weight_files: Vec<PathBuf>,
    pub weight_mode: WeightMode,
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

    /// A short name for a model path: its file or folder name.
    pub(crate) fn name_of(path: &Path) -> String {
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string())
    }

    /// Token ids of a raw prompt: no special tokens parsed from the text's
    /// meaning beyond the tokenizer's own, BOS first when the model asks for it.
    pub fn encode_raw(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let mut ids = self.encode(text)?;
        if let Some((bos, _)) = &self.special.bos
            && self.special.add_bos
            && ids.first() != Some(bos)
        {
            ids.insert(0, *bos);
        }
        Ok(ids)
    }

    /// Token ids of already-rendered text (a chat template adds its own BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot encode the prompt: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// Text of token ids, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot decode tokens: {e}")))
    }

    /// The chat template, compiled; an error when the model has none.
    pub fn chat(&self) -> Result<chat::ChatTemplate, ModelError> {
        let source = self.chat_template.clone().ok_or_else(|| {
            ModelError::Tokenizer(format!(
                "{} has no chat template; pass --raw to send the prompt as plain text",
                self.path.display()
            ))
        })?;
        chat::ChatTemplate::new(
            source,
            self.special.bos.as_ref().map(|b| b.1.clone()),
            self.special.eos.first().map(|e| e.1.clone()),
        )
        .map_err(|e| ModelError::Tokenizer(format!("{}: chat template: {e}", self.path.display())))
    }

    /// sha256 of the vocabulary: every token's text in id order, one a
    /// line, added tokens included. Two models with equal hashes index the
    /// same tokens (what comparing their distributions needs); an id the
    /// tokenizer has no text for hashes as an empty line.
    pub fn vocabulary_sha256(&self) -> String {
        crate::model::tokenizer::vocabulary_sha256(&self.tokenizer)
    }

    /// Whether `id` ends a generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.special.eos.iter().any(|(e, _)| *e == id)
    }
}
