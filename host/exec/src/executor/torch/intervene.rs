//! The activation primitive on libtorch tensors: the same backend-neutral
//! [`Intervention`] (modes, positions, conditions, α, the direction's
//! basis) as candle's `executor::candle::intervene`, with the same outcome
//! (the new activation, each token's projections, which tokens it touched,
//! the norm of the change). `tests/primitive.rs` checks the two against
//! each other for every mode.

use tch::{Device, Kind, Tensor};

use crate::intervene::{Direction, InterveneError, Intervention, Mode, Positions, When};
use crate::model::ModelError;

/// What [`apply`] did, on libtorch tensors (the outcome every backend
/// gives).
pub type Outcome = crate::intervene::Outcome<Tensor>;

/// The direction's basis `[k, d_model]` as f32 on `device`.
pub fn basis_tensor(d: &Direction, device: Device) -> Tensor {
    Tensor::from_slice(&d.basis)
        .reshape([d.rows() as i64, d.width() as i64])
        .to_device(device)
}

/// Applies `iv` to `h` (`[batch, tokens, d_model]`, a float kind, computed
/// in f32 and cast back); `offset` is the absolute position of `h`'s first
/// token, so positions mean the same tokens in prefill and decode.
pub fn apply(iv: &Intervention, h: &Tensor, offset: usize) -> Result<Outcome, InterveneError> {
    apply_with(iv, &basis_tensor(&iv.direction, h.device()), h, offset)
}

/// [`apply`] with the direction's basis already on `h`'s device (a
/// session makes it once, not in every decode step).
pub fn apply_with(
    iv: &Intervention,
    basis: &Tensor,
    h: &Tensor,
    offset: usize,
) -> Result<Outcome, InterveneError> {
    iv.check()?;
    let size = h.size();
    let (b, t, d) = match size.as_slice() {
        &[b, t, d] if h.is_floating_point() => (b, t, d),
        _ => {
            return Err(InterveneError::BadActivation {
                shape: size.iter().map(|&s| s as usize).collect(),
                dtype: format!("{:?}", h.kind()),
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
            hidden: iv.mode.intervenes().then(|| h.shallow_clone()),
            projections: Vec::new(),
            applied: Vec::new(),
            delta_norm: 0.0,
        });
    }
    tch::no_grad(|| {
        let dev = h.device();
        let x = h.to_kind(Kind::Float).reshape([n, d]);
        // Coordinates along every row: [n, k].
        let c = x.matmul(&basis.transpose(0, 1));
        let selected: Vec<f32> = (0..t as usize)
            .map(|i| f32::from(u8::from(iv.positions.selects(i, t as usize, offset))))
            .collect();
        let none_selected = selected.iter().all(|&s| s == 0.0);
        let mut mask = (iv.positions != Positions::All).then(|| {
            Tensor::from_slice(&selected)
                .to_device(dev)
                .reshape([1, t])
                .expand([b, t], false)
                .reshape([n, 1])
        });
        if let Some(cond) = iv.condition {
            let score = match iv.mode.subspace() {
                true => c.square().sum_dim_intlist(1, true, Kind::Float).sqrt(),
                false => c.shallow_clone(),
            };
            let pass = match cond.when {
                When::Above => score.gt(f64::from(cond.threshold)),
                When::Below => score.lt(f64::from(cond.threshold)),
            }
            .to_kind(Kind::Float);
            mask = Some(match mask {
                Some(m) => m * pass,
                None => pass,
            });
        }
        let projections = Vec::<Vec<f32>>::try_from(&c).map_err(torch_error)?;
        let applied = match &mask {
            Some(m) => Vec::<f32>::try_from(&m.flatten(0, -1))
                .map_err(torch_error)?
                .iter()
                .map(|&v| v > 0.5)
                .collect(),
            None => vec![true; n as usize],
        };
        let alpha = f64::from(iv.alpha);
        let (hidden, delta_norm) = match iv.mode {
            Mode::Project | Mode::SubspaceProject => (None, 0.0),
            _ if none_selected => (Some(h.shallow_clone()), 0.0),
            mode => {
                // Per token, per row, how much of each row to add: [n, k].
                let coef = match mode {
                    Mode::Subtract | Mode::SubspaceRemove => &c * (-alpha),
                    Mode::Add | Mode::SubspaceAdd => &c * alpha,
                    Mode::Clamp => &c * (-alpha) + alpha * f64::from(iv.value.unwrap_or(0.0)),
                    Mode::Steer => Tensor::full([n, 1], alpha, (Kind::Float, dev)),
                    Mode::Project | Mode::SubspaceProject => c.zeros_like(),
                };
                let coef = match &mask {
                    Some(m) => coef * m,
                    None => coef,
                };
                let new = (&x + coef.matmul(basis))
                    .reshape([b, t, d])
                    .to_kind(h.kind());
                let norm = (new.to_kind(Kind::Float).reshape([n, d]) - &x)
                    .square()
                    .sum(Kind::Float)
                    .sqrt()
                    .double_value(&[]) as f32;
                (Some(new), norm)
            }
        };
        Ok(Outcome {
            hidden,
            projections,
            applied,
            delta_norm,
        })
    })
}

fn torch_error(e: tch::TchError) -> InterveneError {
    InterveneError::Compute(format!("libtorch: {e}"))
}

/// libtorch's tensor operations, for the backend-neutral step policy
/// ([`crate::intervene::policy_step`]) and the shared executor
/// ([`crate::executor::tensor_lib`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Torch;

impl crate::intervene::Primitive for Torch {
    type Tensor = Tensor;
    fn basis(&self, d: &Direction, like: &Tensor) -> Result<Tensor, InterveneError> {
        Ok(basis_tensor(d, like.device()))
    }
    fn apply(
        &self,
        iv: &Intervention,
        basis: &Tensor,
        h: &Tensor,
        offset: usize,
    ) -> Result<Outcome, InterveneError> {
        apply_with(iv, basis, h, offset)
    }
}

impl crate::executor::tensor_lib::TensorOps for Torch {
    fn batched(&self, t: &Tensor) -> Result<Tensor, ModelError> {
        Ok(t.unsqueeze(0))
    }
    fn unbatched(&self, t: &Tensor) -> Result<Tensor, ModelError> {
        Ok(t.squeeze_dim(0))
    }
    fn share(&self, t: &Tensor) -> Tensor {
        t.shallow_clone()
    }
    fn last_row(&self, t: &Tensor) -> Result<Tensor, ModelError> {
        let n = t.size()[0];
        Ok(t.narrow(0, n - 1, 1).copy())
    }
    fn join(&self, a: &Tensor, b: &Tensor) -> Result<Tensor, ModelError> {
        Ok(Tensor::cat(&[a, b], -2))
    }
    fn host(&self, t: &Tensor) -> Result<(Vec<usize>, Vec<f32>), ModelError> {
        let shape = t.size().iter().map(|&d| d as usize).collect();
        let flat = t.to_kind(Kind::Float).to_device(Device::Cpu).flatten(0, -1);
        Ok((shape, Vec::<f32>::try_from(flat)?))
    }
}
