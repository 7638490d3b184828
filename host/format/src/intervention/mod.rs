//! Interventions on the residual stream as values every executor applies
//! the same way: the mode, scale, positions and condition, the direction's
//! `f32` values, and intervention policies (the host observes, a policy
//! decides, the executor applies). Recorded in traces as
//! `intervention_result` artifacts.
//!
//! Directions are used as given, never normalised here: a direction's scale
//! is part of what the user asked for, and the record keeps each row's norm
//! so a reader can tell.

pub mod policy;
pub mod primitive;

use std::path::PathBuf;

pub use primitive::{Condition, Direction, Intervention, Mode, Positions, When};

/// An intervention that cannot be parsed, loaded or applied. Every message
/// names the offending value and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum InterveneError {
    /// A mode name that is not one of [`Mode::ALL`]'s.
    #[error(
        "unknown intervention mode `{found}`; expected one of: {}",
        Mode::names()
    )]
    UnknownMode {
        /// The name as given.
        found: String,
    },
    /// A command-line intervention spec, or one of its values (positions,
    /// `when`), that cannot be parsed.
    #[error("intervention spec `{text}`: {problem}")]
    Spec {
        /// The spec or value as given.
        text: String,
        /// What is wrong with it, and the fix.
        problem: String,
    },
    /// The direction's width differs from the model's hidden size.
    #[error(
        "the direction has width {width} but the model's hidden size (d_model) is {hidden}; use a direction computed for this model"
    )]
    WidthMismatch {
        /// The direction's width (values per row).
        width: usize,
        /// The model's hidden size (`d_model`).
        hidden: usize,
    },
    /// A scalar of the intervention is NaN or infinite.
    #[error("{what} is {value}; it must be a finite number")]
    NotFinite {
        /// Which scalar: `alpha`, `value` or `threshold`.
        what: &'static str,
        /// The value given.
        value: f32,
    },
    /// A clamp's direction is not of unit norm (within
    /// [`UNIT_TOLERANCE`](primitive::UNIT_TOLERANCE)).
    #[error(
        "clamp needs a unit direction but this one has norm {norm}; normalise it (d / ‖d‖) first, or use subtract, add or steer, which take any scale"
    )]
    NotUnit {
        /// The direction's L2 norm.
        norm: f32,
    },
    /// A clamp without a target value.
    #[error("clamp needs a target: add value=V (the component to set along the direction)")]
    MissingValue,
    /// A target value given to a mode other than clamp.
    #[error("value= is the clamp target, but the mode is `{mode}`; drop value= or use mode=clamp")]
    UnexpectedValue {
        /// The intervention's mode.
        mode: Mode,
    },
    /// A single-direction mode was given a basis of several rows.
    #[error(
        "mode `{mode}` uses one direction but the basis has {rows} rows; pick one with row=N (0 to {}), or use a subspace_* mode to use them all",
        rows.saturating_sub(1)
    )]
    OneRowNeeded {
        /// The intervention's mode.
        mode: Mode,
        /// Rows in the basis.
        rows: usize,
    },
    /// The layer is not one of the model's blocks.
    #[error("layer {layer} is out of range: the model has {layers} layers (0 to {})", layers.saturating_sub(1))]
    LayerOutOfRange {
        /// The layer given (0-based).
        layer: usize,
        /// How many layers (transformer blocks) the model has.
        layers: usize,
    },
    /// The activation handed to the primitive is not a float tensor of
    /// shape `[batch, tokens, d_model]`.
    #[error(
        "an activation must be [batch, tokens, d_model] of a float dtype (f16, bf16, f32, f64); got shape {shape:?} of {dtype}"
    )]
    BadActivation {
        /// The activation's shape.
        shape: Vec<usize>,
        /// The activation's dtype, as the backend names it.
        dtype: String,
    },
    /// A direction file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The direction file.
        path: PathBuf,
        /// The operating system's error (or why the bounded read refused
        /// the file).
        #[source]
        source: std::io::Error,
    },
    /// A direction file whose extension is none of `.safetensors`, `.npy`
    /// and `.gguf`.
    #[error(
        "{path}: direction files must end in .safetensors, .npy or .gguf; convert it to one of these"
    )]
    UnknownFormat {
        /// The direction file.
        path: PathBuf,
    },
    /// A direction file that cannot be parsed as its format, or holds no
    /// tensor.
    #[error("{path} is not a readable {format} file: {message}")]
    Format {
        /// The direction file.
        path: PathBuf,
        /// The format it was read as (`safetensors`, `npy`, `gguf`), or
        /// `direction` when it holds no tensor.
        format: &'static str,
        /// What the parser reported.
        message: String,
    },
    /// The tensor named with `tensor=` is not in the file (or a name was
    /// given for a `.npy` file, which has none).
    #[error("{path} has no tensor `{tensor}`; it holds: {available}; pick one with {pick}")]
    NoSuchTensor {
        /// The direction file.
        path: PathBuf,
        /// The tensor name asked for.
        tensor: String,
        /// The names the file holds, comma-separated.
        available: String,
        /// How to name a tensor in the syntax the user wrote (see
        /// [`InterveneError::picked_with`]).
        pick: &'static str,
    },
    /// No tensor was named, the file holds several, and none is
    /// `direction.<layer>` or `direction`.
    #[error(
        "{path} holds several tensors and none is `direction.{layer}` or `direction`: {available}; pick one with {pick}"
    )]
    AmbiguousTensor {
        /// The direction file.
        path: PathBuf,
        /// The layer the direction is for, which names the default tensor.
        layer: usize,
        /// The names the file holds, comma-separated.
        available: String,
        /// How to name a tensor in the syntax the user wrote.
        pick: &'static str,
    },
    /// The chosen tensor cannot be a direction: not float, not 1-D or 2-D,
    /// empty, non-finite, or the row asked for is out of range.
    #[error("{path}: tensor `{tensor}` {problem}")]
    BadTensor {
        /// The direction file (the source as given).
        path: PathBuf,
        /// The tensor's name (empty for a `.npy` array).
        tensor: String,
        /// What is wrong with it, phrased to follow the tensor's name.
        problem: String,
    },
    /// The backend's tensor computation failed; holds its message.
    #[error("tensor computation failed: {0}")]
    Compute(String),
    /// An intervention policy failed or returned what cannot be applied.
    #[error("{0}")]
    Policy(String),
}

impl InterveneError {
    /// The same error, with the fix for a missing or ambiguous tensor
    /// written in the caller's syntax (`--tensor NAME` for a command flag,
    /// `tensor = "NAME"` in a config table); `tensor=NAME`, the
    /// `--intervene` syntax, otherwise.
    pub fn picked_with(self, syntax: &'static str) -> Self {
        match self {
            InterveneError::NoSuchTensor {
                path,
                tensor,
                available,
                ..
            } => InterveneError::NoSuchTensor {
                path,
                tensor,
                available,
                pick: syntax,
            },
            InterveneError::AmbiguousTensor {
                path,
                layer,
                available,
                ..
            } => InterveneError::AmbiguousTensor {
                path,
                layer,
                available,
                pick: syntax,
            },
            other => other,
        }
    }
}
