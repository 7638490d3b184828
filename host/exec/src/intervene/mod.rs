//! Interventions as the host loads them: direction files (safetensors,
//! npy, GGUF control vectors) read to `f32` and hashed for provenance, and
//! the command-line form `layer=10,mode=subtract,direction=FILE` resolved
//! against a model. The values themselves (modes, directions, policies)
//! are `vauban_format::intervention`; each executor applies them with its
//! own tensor ops.

pub mod direction;
pub mod spec;

pub use direction::{control_vector_layers, load_direction};
pub use spec::InterventionSpec;
pub use vauban_format::intervention::{
    Condition, Direction, InterveneError, Intervention, Mode, Positions, When, policy, primitive,
};

/// What applying an intervention to an activation did, whatever the
/// backend: `T` is its tensor type (candle's, libtorch's).
#[derive(Debug)]
pub struct Outcome<T> {
    /// The new activation for intervening modes: same shape, dtype and
    /// device as the input. `None` for the project modes.
    pub hidden: Option<T>,
    /// Per token, per basis row, the projection before the op. Tokens are
    /// flattened batch-major: entry `b * tokens + t` is batch row `b`,
    /// token `t` of this call.
    pub projections: Vec<Vec<f32>>,
    /// Per token (flattened as `projections`): whether its position was
    /// selected and its condition passed. For an intervening mode, whether
    /// the op touched it; for a project mode, which tokens were selected,
    /// though none changes.
    pub applied: Vec<bool>,
    /// Frobenius norm of (new − old) over the whole input, measured after
    /// casting back to the input's dtype; 0 for the project modes.
    pub delta_norm: f32,
}
