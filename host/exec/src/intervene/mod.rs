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
