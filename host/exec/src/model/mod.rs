//! Models with hook points: our own transformer code on candle, written for
//! observation and intervention from the start.
//!
//! - [`config`]: the shape of a llama-family model, from GGUF or config.json;
//! - [`llama`]: the forward pass, its block hook, the KV cache, weight access;
//! - [`gguf`] / [`hf`]: loading a GGUF file or an HF folder (and exporting one);
//! - [`tokenizer`]: the tokenizer a GGUF file describes;
//! - [`chat`]: the model's own chat template, rendered with minijinja;
//! - [`sample`]: greedy and seeded next-token choice.

pub mod chat;
pub mod config;
pub mod gguf;
pub mod hf;
pub mod llama;
pub mod sample;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use candle_core::Device;

use config::LlamaConfig;
use llama::{Llama, Matrix, WeightMode};

/// A model that cannot be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a readable GGUF file: {message}")]
    Gguf { path: PathBuf, message: String },
    #[error("{path}: metadata key `{key}` {problem}")]
    Metadata {
        path: PathBuf,
        key: String,
        problem: String,
    },
    #[error("{path}: `{key}` {problem}")]
    Config {
        path: PathBuf,
        key: String,
        problem: String,
    },
    #[error(
        "{path}: architecture `{found}` is not supported; vauban runs llama-family models (llama, mistral, qwen2: Llama 2/3, SmolLM/SmolLM2, Qwen2/2.5, Mistral)"
    )]
    UnsupportedArchitecture { path: PathBuf, found: String },
    #[error("{path}: tensor `{tensor}` {problem}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        problem: String,
    },
    #[error("{}the weights have no tensor `{tensor}`, which the config implies", at(.path))]
    MissingTensor {
        tensor: String,
        path: Option<PathBuf>,
    },
    #[error(
        "{}tensor `{tensor}` has shape {found:?} but the model's config implies {expected:?}; the config and the weights disagree",
        at(.path)
    )]
    ShapeMismatch {
        tensor: String,
        found: Vec<usize>,
        expected: Vec<usize>,
        path: Option<PathBuf>,
    },
    #[error("{0}")]
    Tokenizer(String),
    #[error("layer {layer} is out of range: the model has {count} layers (0 to {})", count - 1)]
    LayerOutOfRange { layer: usize, count: usize },
    #[error(
        "{needed} positions exceed the model's context length of {limit}; shorten the prompt or lower --max-tokens"
    )]
    ContextExceeded { needed: usize, limit: usize },
    #[error("no token ids to run; the prompt encoded to nothing")]
    EmptyInput,
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error(
        "the hook after block {layer} returned shape {found:?}; the residual stream is {expected:?}"
    )]
    HookShape {
        layer: usize,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("the direction has width {found} but the model's hidden size is {hidden}")]
    DirectionWidth { found: usize, hidden: usize },
    #[error("the direction has norm {norm}; it cannot be normalised")]
    DegenerateDirection { norm: f32 },
    #[error(
        "{matrix:?} does not write into the residual stream; orthogonalize attn_output and ffn_down"
    )]
    NotResidualWriter { matrix: Matrix },
    #[error("cannot export: {0}")]
    Export(String),
    #[error("{0}")]
    Hook(String),
    #[error("tensor computation failed: {0}")]
    Compute(#[from] candle_core::Error),
}

fn at(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("{}: ", p.display()),
        None => String::new(),
    }
}

impl ModelError {
    /// Names the file a tensor error came from.
    pub fn in_file(self, file: &Path) -> Self {
        match self {
            ModelError::MissingTensor { tensor, path: None } => ModelError::MissingTensor {
                tensor,
                path: Some(file.to_path_buf()),
            },
            ModelError::ShapeMismatch {
                tensor,
                found,
                expected,
                path: None,
            } => ModelError::ShapeMismatch {
                tensor,
                found,
                expected,
                path: Some(file.to_path_buf()),
            },
            e => e,
        }
    }

    /// Renames tensors from GGUF names to the HF names a folder uses.
    pub fn hf_names(self) -> Self {
        match self {
            ModelError::MissingTensor { tensor, path } => ModelError::MissingTensor {
                tensor: hf::hf_name(&tensor),
                path,
            },
            ModelError::ShapeMismatch {
                tensor,
                found,
                expected,
                path,
            } => ModelError::ShapeMismatch {
                tensor: hf::hf_name(&tensor),
                found,
                expected,
                path,
            },
            e => e,
        }
    }
}

/// The special tokens generation and prompting need.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Special {
    /// Beginning of sequence: id and text.
    pub bos: Option<(u32, String)>,
    /// Ids that end a generation (EOS, end-of-turn).
    pub eos: Vec<(u32, String)>,
    /// Whether a raw (untemplated) prompt starts with BOS.
    pub add_bos: bool,
}

impl Special {
    pub fn from_ids(
        tokenizer: &tokenizers::Tokenizer,
        bos: Option<u32>,
        eos: Vec<u32>,
        add_bos: bool,
    ) -> Self {
        let named = |id: u32| (id, tokenizer.id_to_token(id).unwrap_or_default());
        Special {
            bos: bos.map(named),
            eos: eos.into_iter().map(named).collect(),
            add_bos: add_bos && bos.is_some(),
        }
    }
}

fn not_a_model(path: &Path) -> ModelError {
    ModelError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a model: give a .gguf file or an HF folder (config.json, *.safetensors, tokenizer.json)",
        ),
    }
}

/// Where a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFormat {
    Gguf,
    HfFolder,
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

    /// The model's shape without its weights: the GGUF header, or an HF
    /// folder's `config.json` (what `vauban validate` checks a config
    /// against, in milliseconds).
    pub fn read_config(path: &Path) -> Result<config::LlamaConfig, ModelError> {
        let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.is_dir() {
            hf::read_config(path)
        } else if path.extension().is_some_and(|e| e == "gguf") {
            gguf::read_config(path)
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
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for id in 0..self.tokenizer.get_vocab_size(true) as u32 {
            if let Some(t) = self.tokenizer.id_to_token(id) {
                h.update(t.as_bytes());
            }
            h.update(b"\n");
        }
        hex::encode(h.finalize())
    }

    /// Whether `id` ends a generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.special.eos.iter().any(|(e, _)| *e == id)
    }
}
