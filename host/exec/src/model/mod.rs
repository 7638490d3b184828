//! What every backend knows about a model before it runs one: its shape,
//! its tokenizer and chat template, how to sample from it, and the errors
//! of loading one. The forward passes live with each backend
//! (`executor::candle::model` for the embedded one).
//!
//! - [`assets`]: a model file's tokenizer, chat template, special tokens
//!   and shape, read the same way for every backend;
//! - [`config`]: a model's shape and its family's block layout, from GGUF
//!   or config.json;
//! - [`gguf`]: GGUF as a file format (metadata and f32 tensors, a
//!   control vector written), over [`gguf_reader`];
//! - [`gguf_reader`]: vauban's own GGUF reader (header, tensor bytes, f32
//!   values of every type vauban dequantizes), which every GGUF read goes
//!   through;
//! - [`routing`]: which experts each token of a mixture uses;
//! - [`tokenizer`]: the tokenizer a GGUF file describes;
//! - [`chat`]: the model's own chat template, rendered with minijinja;
//! - [`sample`]: greedy and seeded next-token choice.

pub mod assets;
pub mod chat;
pub mod config;
pub mod gguf;
pub mod gguf_reader;
pub mod hf;
pub mod host_weights;
pub mod lora;
pub mod routing;
pub mod sample;
pub mod tokenizer;

pub use vauban_kernels::attention::KvType;
pub use vauban_kernels::primitive::PrimitivePath;

use std::path::{Path, PathBuf};

use config::ModelConfig;

/// How to hold matrix weights in memory (`weights` in a config and on the
/// command line: `native` or `f32`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WeightMode {
    /// As the file stores them: quantized GGUF stays quantized (small; on
    /// the CPU it runs on vauban's block kernels).
    #[default]
    Native,
    /// Dequantized to f32 at load: four to eight times the memory; for a
    /// quantized type vauban has no kernel for, and for exact f32 products.
    F32,
}

/// `s` read as serde reads a config's value of `T`, so that the command
/// line and the config accept the same names by one rule; `expected`
/// lists them for the message.
fn parse_as_config<T: serde::de::DeserializeOwned>(s: &str, expected: &str) -> Result<T, String> {
    use serde::de::value::{Error, StrDeserializer};
    T::deserialize(StrDeserializer::<Error>::new(s))
        .map_err(|_| format!("`{s}`: expected {expected}"))
}

/// The command line's `--weights`.
impl std::str::FromStr for WeightMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_as_config(s, "native or f32")
    }
}

/// The dtype a backend holds weights and activations in, where it is a
/// setting (the Torch executor's `dtype`; candle picks its own).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit floats.
    #[default]
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_as_config(s, "f32, f16 or bf16")
    }
}

/// The matrices of a block, by their role.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Matrix {
    AttnQ,
    AttnK,
    AttnV,
    /// Writes the attention output into the residual stream.
    AttnOutput,
    FfnGate,
    FfnUp,
    /// Writes the MLP output into the residual stream.
    FfnDown,
}

impl Matrix {
    pub const ALL: [Matrix; 7] = [
        Matrix::AttnQ,
        Matrix::AttnK,
        Matrix::AttnV,
        Matrix::AttnOutput,
        Matrix::FfnGate,
        Matrix::FfnUp,
        Matrix::FfnDown,
    ];

    /// Where this matrix sits in [`Matrix::ALL`] (a block's matrices kept
    /// in that order are found by it).
    pub fn index(self) -> usize {
        Matrix::ALL
            .iter()
            .position(|&m| m == self)
            .expect("every matrix is in ALL")
    }

    /// The matrix as a file stores it, `(rows, columns)`: a row per output
    /// feature (what every backend's loader checks a tensor against).
    pub fn shape(self, c: &ModelConfig) -> (usize, usize) {
        let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        match self {
            Matrix::AttnQ => (q, c.hidden),
            Matrix::AttnK | Matrix::AttnV => (kv, c.hidden),
            Matrix::AttnOutput => (c.hidden, q),
            Matrix::FfnGate | Matrix::FfnUp => (c.ffn, c.hidden),
            Matrix::FfnDown => (c.hidden, c.ffn),
        }
    }

    /// Whether the matrix has a bias (`blk.N.<stem>.bias`): the query, key
    /// and value projections of models that have them (Qwen2), never the
    /// others.
    pub fn has_bias(self, c: &ModelConfig) -> bool {
        c.qkv_bias && matches!(self, Matrix::AttnQ | Matrix::AttnK | Matrix::AttnV)
    }

    /// The GGUF tensor name stem (`blk.N.<stem>.weight`).
    pub fn gguf_stem(self) -> &'static str {
        match self {
            Matrix::AttnQ => "attn_q",
            Matrix::AttnK => "attn_k",
            Matrix::AttnV => "attn_v",
            Matrix::AttnOutput => "attn_output",
            Matrix::FfnGate => "ffn_gate",
            Matrix::FfnUp => "ffn_up",
            Matrix::FfnDown => "ffn_down",
        }
    }
}

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
        "{path}: architecture `{found}` is not supported; vauban runs llama, mistral, qwen2, qwen3, qwen3moe, gemma2, gemma3, olmo2 and phi3 (HF model_type: the same, gemma3_text, qwen3_moe): Llama 2/3, SmolLM/SmolLM2, Mistral, Qwen2/2.5/3, Qwen3-MoE, Gemma 2/3, OLMo 2, Phi-3/4"
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
    #[error(
        "the hook after block {layer} returned {found} values; the residual stream holds {expected}"
    )]
    HookDtype {
        layer: usize,
        found: String,
        expected: String,
    },
    #[error("the direction has width {found} but the model's hidden size is {hidden}")]
    DirectionWidth { found: usize, hidden: usize },
    #[error("the direction has norm {norm}; it cannot be normalised")]
    DegenerateDirection { norm: f32 },
    #[error(
        "{matrix:?} does not write into the residual stream; orthogonalize attn_output and ffn_down"
    )]
    NotResidualWriter { matrix: Matrix },
    #[error(
        "{matrix:?} of a mixture of experts is one matrix per expert; an adapter changes the attention's matrices only"
    )]
    ExpertMatrix { matrix: Matrix },
    #[error("cannot export: {0}")]
    Export(String),
    #[error("{0}")]
    Hook(String),
    /// A backend's tensor library failed (each backend converts its own
    /// error type into this).
    #[error("tensor computation failed: {0}")]
    Compute(Box<dyn std::error::Error + Send + Sync>),
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
    pub fn hf_names(self, c: &ModelConfig) -> Self {
        match self {
            ModelError::MissingTensor { tensor, path } => ModelError::MissingTensor {
                tensor: hf_name(&tensor, c),
                path,
            },
            ModelError::ShapeMismatch {
                tensor,
                found,
                expected,
                path,
            } => ModelError::ShapeMismatch {
                tensor: hf_name(&tensor, c),
                found,
                expected,
                path,
            },
            e => e,
        }
    }
}

/// The HF name of a weight of a model shaped `c`, asked for by its GGUF
/// name. The one name that depends on the family: the norm before the MLP
/// is llama's `post_attention_layernorm`, but Gemma's
/// `pre_feedforward_layernorm` (where `post_attention_layernorm` is the
/// norm on the attention's output, GGUF's `post_attention_norm`).
pub fn hf_name(gguf: &str, c: &ModelConfig) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let Some(rest) = gguf.strip_prefix("blk.") else {
        return gguf.to_owned();
    };
    let Some((layer, rest)) = rest.split_once('.') else {
        return gguf.to_owned();
    };
    let Some((stem, kind)) = rest.split_once('.') else {
        return gguf.to_owned();
    };
    let part = match stem {
        "attn_norm" => "input_layernorm",
        "ffn_norm" if c.block.post_norms => "pre_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "post_attention_norm" => "post_attention_layernorm",
        "post_ffw_norm" => "post_feedforward_layernorm",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" if c.block.fused => "mlp.gate_up_proj",
        "ffn_up" => "mlp.up_proj",
        "attn_qkv" => "self_attn.qkv_proj",
        "ffn_gate_inp" => "mlp.gate",
        "ffn_down" => "mlp.down_proj",
        _ => return gguf.to_owned(),
    };
    format!("model.layers.{layer}.{part}.{kind}")
}

/// Where the matrix GGUF calls `name` lives in a model whose files fuse
/// matrices (Phi-3): the fused tensor's GGUF name and the rows it takes
/// there (Q, K, V in that order; the MLP's gate before its up). `None`
/// for a matrix stored on its own.
pub fn fused_part(name: &str, c: &ModelConfig) -> Option<(String, usize, usize)> {
    if !c.block.fused {
        return None;
    }
    let (layer, stem) = name.strip_prefix("blk.")?.split_once('.')?;
    let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let (fused, start, rows) = match stem {
        "attn_q.weight" => ("attn_qkv", 0, q),
        "attn_k.weight" => ("attn_qkv", q, kv),
        "attn_v.weight" => ("attn_qkv", q + kv, kv),
        "ffn_gate.weight" => ("ffn_up", 0, c.ffn),
        "ffn_up.weight" => ("ffn_up", c.ffn, c.ffn),
        _ => return None,
    };
    Some((format!("blk.{layer}.{fused}.weight"), start, rows))
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

/// Why `path` is neither a GGUF file nor an HF folder.
pub fn not_a_model(path: &Path) -> ModelError {
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

/// The model's shape without its weights: the GGUF header, or an HF
/// folder's `config.json` (what `vauban validate` checks a config against,
/// in milliseconds).
pub fn read_config(path: &Path) -> Result<ModelConfig, ModelError> {
    let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        Ok(config::read_hf_config(path)?.1)
    } else if path.extension().is_some_and(|e| e == "gguf") {
        config::read_gguf_config(path)
    } else {
        Err(not_a_model(path))
    }
}

/// candle_core is the array and safetensors library of the shared model
/// code (GGUF and HF reading, the HF exporter) as well as candle's.
impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Compute(Box::new(e))
    }
}

#[cfg(test)]
mod names {
    use super::{Dtype, WeightMode};

    /// The command line's names are the config's.
    #[test]
    fn the_command_line_reads_the_config_names() {
        assert_eq!("native".parse(), Ok(WeightMode::Native));
        assert_eq!("f32".parse(), Ok(WeightMode::F32));
        assert_eq!("bf16".parse(), Ok(Dtype::Bf16));
        assert_eq!(
            "q4".parse::<WeightMode>(),
            Err("`q4`: expected native or f32".to_owned())
        );
        assert_eq!(
            "fp8".parse::<Dtype>(),
            Err("`fp8`: expected f32, f16 or bf16".to_owned())
        );
    }
}
