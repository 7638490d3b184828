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

/// A backend's tensor operations a step policy needs: the basis of a
/// direction on the activation's device, and the primitive applied with it.
pub trait Primitive {
    type Tensor;
    fn basis(&self, d: &Direction, like: &Self::Tensor) -> Result<Self::Tensor, InterveneError>;
    fn apply(
        &self,
        iv: &Intervention,
        basis: &Self::Tensor,
        h: &Self::Tensor,
        offset: usize,
    ) -> Result<Outcome<Self::Tensor>, InterveneError>;
}

/// Runs `policy` after block `layer` on `h` (`[1, tokens, d_model]`),
/// whatever the backend: projects onto the watched directions, lets the
/// policy decide, applies its ops. Returns the new activation if an op
/// changed it. `bases` keeps each watched direction's basis, by name, for
/// the whole session.
pub fn policy_step<P: Primitive>(
    ops: &P,
    policy: &mut dyn policy::StepPolicy,
    log: &mut policy::PolicyLog,
    bases: &mut std::collections::HashMap<String, P::Tensor>,
    (layer, offset, prefill): (usize, usize, bool),
    h: &P::Tensor,
) -> Result<Option<P::Tensor>, InterveneError> {
    for w in policy.watches() {
        if !bases.contains_key(&w.name) {
            bases.insert(w.name.clone(), ops.basis(&w.direction, h)?);
        }
    }
    let mut observations = Vec::new();
    for w in policy
        .watches()
        .iter()
        .filter(|w| w.layers.contains(&layer))
    {
        let probe = Intervention {
            layer,
            mode: Mode::Project,
            direction: w.direction.clone(),
            alpha: 1.0,
            value: None,
            positions: Positions::All,
            condition: None,
        };
        let out = ops.apply(&probe, &bases[&w.name], h, offset)?;
        observations.push(policy::Observation {
            layer,
            direction: w.name.clone(),
            offset,
            projections: out.projections.iter().map(|p| p[0]).collect(),
        });
    }
    if observations.is_empty() {
        return Ok(None);
    }
    log.decisions += 1;
    let decided = policy
        .decide(&observations)
        .map_err(|e| InterveneError::Policy(format!("policy {}: {e}", policy.describe())))?;
    let mut current: Option<P::Tensor> = None;
    for op in &decided {
        let w = policy
            .watches()
            .iter()
            .find(|w| w.name == op.direction && w.layers.contains(&layer))
            .ok_or_else(|| {
                InterveneError::Policy(format!(
                    "op names direction {}, which is not watched at layer {layer}",
                    op.direction
                ))
            })?;
        for iv in op.interventions(&w.direction) {
            let out = ops.apply(&iv, &bases[&w.name], current.as_ref().unwrap_or(h), offset)?;
            if let Some(new) = out.hidden {
                current = Some(new);
            }
        }
        log.add(op, prefill);
    }
    Ok(current)
}
