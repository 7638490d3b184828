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
    #[error(
        "unknown intervention mode `{found}`; expected one of: {}",
        Mode::names()
    )]
    UnknownMode { found: String },
    #[error("intervention spec `{text}`: {problem}")]
    Spec { text: String, problem: String },
    #[error(
        "the direction has width {width} but the model's hidden size (d_model) is {hidden}; use a direction computed for this model"
    )]
    WidthMismatch { width: usize, hidden: usize },
    #[error("{what} is {value}; it must be a finite number")]
    NotFinite { what: &'static str, value: f32 },
    #[error(
        "clamp needs a unit direction but this one has norm {norm}; normalise it (d / ‖d‖) first, or use subtract, add or steer, which take any scale"
    )]
    NotUnit { norm: f32 },
    #[error("clamp needs a target: add value=V (the component to set along the direction)")]
    MissingValue,
    #[error("value= is the clamp target, but the mode is `{mode}`; drop value= or use mode=clamp")]
    UnexpectedValue { mode: Mode },
    #[error(
        "mode `{mode}` uses one direction but the basis has {rows} rows; pick one with row=N (0 to {}), or use a subspace_* mode to use them all",
        rows.saturating_sub(1)
    )]
    OneRowNeeded { mode: Mode, rows: usize },
    #[error("layer {layer} is out of range: the model has {layers} layers (0 to {})", layers.saturating_sub(1))]
    LayerOutOfRange { layer: usize, layers: usize },
    #[error(
        "an activation must be [batch, tokens, d_model] of a float dtype (f16, bf16, f32, f64); got shape {shape:?} of {dtype}"
    )]
    BadActivation { shape: Vec<usize>, dtype: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: direction files must end in .safetensors, .npy or .gguf; convert it to one of these"
    )]
    UnknownFormat { path: PathBuf },
    #[error("{path} is not a readable {format} file: {message}")]
    Format {
        path: PathBuf,
        format: &'static str,
        message: String,
    },
    #[error("{path} has no tensor `{tensor}`; it holds: {available}; pick one with tensor=NAME")]
    NoSuchTensor {
        path: PathBuf,
        tensor: String,
        available: String,
    },
    #[error(
        "{path} holds several tensors and none is `direction.{layer}`: {available}; pick one with tensor=NAME"
    )]
    AmbiguousTensor {
        path: PathBuf,
        layer: usize,
        available: String,
    },
    #[error("{path}: tensor `{tensor}` {problem}")]
    BadTensor {
        path: PathBuf,
        tensor: String,
        problem: String,
    },
    #[error("tensor computation failed: {0}")]
    Compute(String),
    /// An intervention policy failed or returned what cannot be applied.
    #[error("{0}")]
    Policy(String),
}
