//! Models with hook points: our own transformer code on candle, written for
//! observation (and, next, intervention) from the start.
//!
//! - [`gguf`]: a GGUF file read into a config, a tokenizer and weights;
//! - [`tokenizer`]: the tokenizer built from GGUF metadata, as the metadata says;
//! - [`llama`]: the llama-family forward pass with residual-stream hooks.
//!
//! The executor seam, HF-style folders, chat templates, the KV cache and
//! interventions arrive with the rest of issue #3.

pub mod gguf;
pub mod llama;
pub mod tokenizer;

use std::path::PathBuf;

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
    #[error(
        "{path}: architecture `{found}` is not supported; vauban runs llama-family models (llama, SmolLM, Qwen2, Mistral)"
    )]
    UnsupportedArchitecture { path: PathBuf, found: String },
    #[error("{path}: tensor `{tensor}` {problem}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        problem: String,
    },
    #[error(
        "tensor `{tensor}` has shape {found:?} but the model's config implies {expected:?}; the metadata and the weights disagree"
    )]
    ShapeMismatch {
        tensor: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{0}")]
    Tokenizer(String),
    #[error("layer {layer} is out of range: the model has {count} layers (0 to {})", count - 1)]
    LayerOutOfRange { layer: usize, count: usize },
    #[error("no token ids to run; the prompt encoded to nothing")]
    EmptyInput,
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("tensor computation failed: {0}")]
    Compute(#[from] candle_core::Error),
}
