//! The activation primitive on MLX arrays: the same backend-neutral
//! [`Intervention`] (modes, positions, conditions, α, the direction's
//! basis) as candle's and libtorch's, with the same outcome (the new
//! activation, each token's projections, which tokens it touched, the norm
//! of the change). `tests/primitive.rs` checks it against candle's for
//! every mode.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use crate::intervene::{Direction, InterveneError, Intervention, Mode, Positions, When};
use crate::model::ModelError;

/// What [`apply`] did, on MLX arrays (the outcome every backend gives).
pub type Outcome = crate::intervene::Outcome<Array>;

/// The direction's basis `[k, d_model]` as f32.
pub fn basis_array(d: &Direction) -> Array {
    Array::from_slice(&d.basis, &[d.rows() as i32, d.width() as i32])
}

/// Applies `iv` to `h` (`[batch, tokens, d_model]`, a float dtype,
/// computed in f32 and cast back); `offset` is the absolute position of
/// `h`'s first token, so positions mean the same tokens in prefill and
/// decode.
pub fn apply(iv: &Intervention, h: &Array, offset: usize) -> Result<Outcome, InterveneError> {
    apply_with(iv, &basis_array(&iv.direction), h, offset)
}

fn mlx_error(e: impl std::fmt::Display) -> InterveneError {
    InterveneError::Compute(format!("MLX: {e}"))
}

/// [`apply`] with the direction's basis already made (a session makes it
/// once, not in every decode step).
pub fn apply_with(
    iv: &Intervention,
    basis: &Array,
    h: &Array,
    offset: usize,
) -> Result<Outcome, InterveneError> {
    iv.check()?;
    let (b, t, d) = match h.shape() {
        &[b, t, d] if h.dtype().is_float() => (b, t, d),
        shape => {
            return Err(InterveneError::BadActivation {
                shape: shape.iter().map(|&s| s as usize).collect(),
                dtype: format!("{:?}", h.dtype()),
            });
        }
    };
    let width = iv.direction.width();
    if width != d as usize {
        return Err(InterveneError::WidthMismatch {
            width,
            hidden: d as usize,
        });
    }
    let n = b * t;
    if n == 0 {
        return Ok(Outcome {
            hidden: iv.mode.intervenes().then(|| h.clone()),
            projections: Vec::new(),
            applied: Vec::new(),
            delta_norm: 0.0,
        });
    }
    compute(iv, basis, h, offset, (b, t, d)).map_err(mlx_error)
}

/// The primitive's arithmetic, once the input is checked.
fn compute(
    iv: &Intervention,
    basis: &Array,
    h: &Array,
    offset: usize,
    (b, t, d): (i32, i32, i32),
) -> Result<Outcome, Exception> {
    let n = b * t;
    let k = basis.shape()[0];
    let x = h.as_dtype(Dtype::Float32)?.reshape(&[n, d])?;
    // Coordinates along every row: [n, k].
    let c = x.matmul(basis.t())?;
    let selected: Vec<f32> = (0..t as usize)
        .map(|i| f32::from(u8::from(iv.positions.selects(i, t as usize, offset))))
        .collect();
    let none_selected = selected.iter().all(|&s| s == 0.0);
    let mut mask = (iv.positions != Positions::All).then(|| {
        // Batch-major: row `b * t + i` is token `i` of batch row `b`.
        let rows: Vec<f32> = (0..n as usize).map(|r| selected[r % t as usize]).collect();
        Array::from_slice(&rows, &[n, 1])
    });
    if let Some(cond) = iv.condition {
        let score = match iv.mode.subspace() {
            true => c.square()?.sum_axis(1, true)?.sqrt()?,
            false => c.clone(),
        };
        let threshold = Array::from_f32(cond.threshold);
        let pass = match cond.when {
            When::Above => score.gt(&threshold)?,
            When::Below => score.lt(&threshold)?,
        }
        .as_dtype(Dtype::Float32)?;
        mask = Some(match mask {
            Some(m) => m.multiply(&pass)?,
            None => pass,
        });
    }
    let projections = values(&c)?
        .chunks(k as usize)
        .map(<[f32]>::to_vec)
        .collect();
    let applied = match &mask {
        Some(m) => values(m)?.iter().map(|&v| v > 0.5).collect(),
        None => vec![true; n as usize],
    };
    let alpha = iv.alpha;
    let (hidden, delta_norm) = match iv.mode {
        Mode::Project | Mode::SubspaceProject => (None, 0.0),
        _ if none_selected => (Some(h.clone()), 0.0),
        mode => {
            // Per token, per row, how much of each row to add: [n, k].
            let scaled = |by: f32| c.multiply(Array::from_f32(by));
            let coef = match mode {
                Mode::Subtract | Mode::SubspaceRemove => scaled(-alpha)?,
                Mode::Add | Mode::SubspaceAdd => scaled(alpha)?,
                Mode::Clamp => {
                    scaled(-alpha)?.add(Array::from_f32(alpha * iv.value.unwrap_or(0.0)))?
                }
                Mode::Steer => Array::full::<f32>(&[n, 1], Array::from_f32(alpha))?,
                Mode::Project | Mode::SubspaceProject => unreachable!("handled above"),
            };
            let coef = match &mask {
                Some(m) => coef.multiply(m)?,
                None => coef,
            };
            let new = x
                .add(coef.matmul(basis)?)?
                .reshape(&[b, t, d])?
                .as_dtype(h.dtype())?;
            let change = new
                .as_dtype(Dtype::Float32)?
                .reshape(&[n, d])?
                .subtract(&x)?;
            let norm = change.square()?.sum(None)?.sqrt()?;
            (Some(new), values(&norm)?[0])
        }
    };
    Ok(Outcome {
        hidden,
        projections,
        applied,
        delta_norm,
    })
}

/// An array's values as f32 on the host, row-major (evaluating it).
pub(crate) fn values(a: &Array) -> Result<Vec<f32>, Exception> {
    if a.size() == 0 {
        return Ok(Vec::new());
    }
    let a = match a.dtype() {
        Dtype::Float32 => a.contiguous()?,
        _ => a.as_dtype(Dtype::Float32)?.contiguous()?,
    };
    a.try_as_slice::<f32>()
        .map(<[f32]>::to_vec)
        .map_err(|e| Exception::custom(e.to_string()))
}

/// MLX's array operations, for the backend-neutral step policy
/// ([`crate::intervene::policy_step`]) and the shared executor
/// ([`crate::executor::tensor_lib`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Mlx;

impl crate::intervene::Primitive for Mlx {
    type Tensor = Array;
    fn basis(&self, d: &Direction, _like: &Array) -> Result<Array, InterveneError> {
        Ok(basis_array(d))
    }
    fn apply(
        &self,
        iv: &Intervention,
        basis: &Array,
        h: &Array,
        offset: usize,
    ) -> Result<Outcome, InterveneError> {
        apply_with(iv, basis, h, offset)
    }
}

impl crate::executor::tensor_lib::TensorOps for Mlx {
    fn batched(&self, t: &Array) -> Result<Array, ModelError> {
        Ok(t.expand_dims(0)?)
    }
    fn unbatched(&self, t: &Array) -> Result<Array, ModelError> {
        Ok(t.squeeze_axes(&[0])?)
    }
    fn share(&self, t: &Array) -> Array {
        t.clone()
    }
    /// Evaluated at once (under the lock, which a pass already holds), so
    /// the row no longer keeps the whole input alive.
    fn last_row(&self, t: &Array) -> Result<Array, ModelError> {
        let _lock = super::evaluating();
        let n = t.shape()[0];
        let row = t.take_axis(Array::from_slice(&[n - 1], &[1]), 0)?;
        row.eval()?;
        Ok(row)
    }
    fn join(&self, a: &Array, b: &Array) -> Result<Array, ModelError> {
        let axis = a.ndim() as i32 - 2;
        Ok(mlx_rs::ops::concatenate(&[a, b], axis)?)
    }
    /// Evaluates `t` under the lock every MLX evaluation takes (see
    /// [`super::evaluating`]).
    fn host(&self, t: &Array) -> Result<(Vec<usize>, Vec<f32>), ModelError> {
        let _lock = super::evaluating();
        let shape = t.shape().iter().map(|&d| d as usize).collect();
        Ok((shape, values(t)?))
    }
}
