//! The activation primitive on candle tensors: [`apply`] carries out a
//! backend-neutral [`Intervention`] on one layer's activation
//! `[batch, tokens, d_model]` as two small matmuls and a mask, in f32, on
//! whatever device `h` lives on (this runs in every decode step); and
//! [`policy_step`] runs an intervention policy after a watched block.

use candle_core::{DType, Device, Tensor};

use crate::intervene::{Direction, InterveneError, Intervention, Mode, Positions, When};
use crate::model::PrimitivePath;

/// A failure inside the primitive: a candle error or a refused
/// intervention, so `?` works on both; callers see an [`InterveneError`].
#[derive(Debug)]
enum Fail {
    Candle(candle_core::Error),
    Intervene(InterveneError),
}

impl From<candle_core::Error> for Fail {
    fn from(e: candle_core::Error) -> Self {
        Fail::Candle(e)
    }
}

impl From<InterveneError> for Fail {
    fn from(e: InterveneError) -> Self {
        Fail::Intervene(e)
    }
}

impl From<Fail> for InterveneError {
    fn from(f: Fail) -> Self {
        match f {
            Fail::Candle(e) => InterveneError::Compute(e.to_string()),
            Fail::Intervene(e) => e,
        }
    }
}

/// The direction's basis `[k, d_model]` as an f32 tensor on `device` (a
/// copy of `k × d_model` floats per call: small next to the activation).
pub fn basis_tensor(d: &Direction, device: &Device) -> Result<Tensor, InterveneError> {
    basis(d, device).map_err(|e| Fail::Candle(e).into())
}

fn basis(d: &Direction, device: &Device) -> Result<Tensor, candle_core::Error> {
    Tensor::from_slice(&d.basis, (d.rows(), d.width()), device)
}

/// What [`apply`] did, on candle tensors.
pub type Outcome = crate::intervene::Outcome<Tensor>;

/// Applies `iv` to `h`.
///
/// `h`: `[batch, tokens, d_model]`, any float dtype (f32, f16, bf16,
/// f64); computed in f32 and cast back.
/// `offset`: the absolute position of h's first token (0 in prefill;
/// the cache length in a decode step), so [`Positions`] work during
/// generation.
pub fn apply(iv: &Intervention, h: &Tensor, offset: usize) -> Result<Outcome, InterveneError> {
    let basis = basis_tensor(&iv.direction, h.device())?;
    apply_with(iv, &basis, h, offset)
}

/// [`apply`] with `iv`'s basis already on `h`'s device (see
/// [`basis_tensor`]): a session makes it once, not in every decode step.
pub fn apply_with(
    iv: &Intervention,
    basis: &Tensor,
    h: &Tensor,
    offset: usize,
) -> Result<Outcome, InterveneError> {
    Ok(try_apply(iv, basis, h, offset)?)
}

fn try_apply(
    iv: &Intervention,
    basis: &Tensor,
    h: &Tensor,
    offset: usize,
) -> Result<Outcome, Fail> {
    iv.check()?;
    let (b, t, d) = match *h.dims() {
        [b, t, d] if h.dtype().is_float() => (b, t, d),
        _ => {
            return Err(Fail::Intervene(InterveneError::BadActivation {
                shape: h.dims().to_vec(),
                dtype: format!("{:?}", h.dtype()),
            }));
        }
    };
    let width = iv.direction.width();
    if width != d {
        return Err(InterveneError::WidthMismatch { width, hidden: d }.into());
    }
    let (n, dev) = (b * t, h.device());
    if n == 0 {
        // Nothing to measure or change (an empty batch or prompt).
        return Ok(Outcome {
            hidden: iv.mode.intervenes().then(|| h.clone()),
            projections: Vec::new(),
            applied: Vec::new(),
            delta_norm: 0.0,
        });
    }
    let x = h.to_dtype(DType::F32)?.reshape((n, d))?;
    let basis = basis.to_device(dev)?;
    // Coordinates along every row: [n, k].
    let c = x.matmul(&basis.t()?)?;

    let selected: Vec<f32> = (0..t)
        .map(|i| f32::from(u8::from(iv.positions.selects(i, t, offset))))
        .collect();
    let none_selected = selected.iter().all(|&s| s == 0.0);
    let mut mask = if iv.positions == Positions::All {
        None
    } else {
        Some(
            Tensor::from_vec(selected, (1, t), dev)?
                .broadcast_as((b, t))?
                .reshape((n, 1))?,
        )
    };
    if let Some(cond) = iv.condition {
        let score = if iv.mode.subspace() {
            c.sqr()?.sum_keepdim(1)?.sqrt()?
        } else {
            c.clone()
        };
        let pass = match cond.when {
            When::Above => score.gt(cond.threshold)?,
            When::Below => score.lt(cond.threshold)?,
        }
        .to_dtype(DType::F32)?;
        mask = Some(match mask {
            Some(m) => (m * pass)?,
            None => pass,
        });
    }

    let projections = c.to_vec2::<f32>()?;
    let applied = match &mask {
        Some(m) => m
            .flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .map(|&v| v > 0.5)
            .collect(),
        None => vec![true; n],
    };
    let (hidden, delta_norm) = match iv.mode {
        Mode::Project | Mode::SubspaceProject => (None, 0.0),
        _ if none_selected => (Some(h.clone()), 0.0),
        _ => {
            let (new, norm) = change(iv, h, &x, &c, &basis, mask.as_ref())?;
            (Some(new), norm)
        }
    };
    Ok(Outcome {
        hidden,
        projections,
        applied,
        delta_norm,
    })
}

/// The changed activation and the norm of the change, for an
/// intervening mode. `x`: `h` as f32 `[n, d]`; `c`: its coordinates
/// `[n, k]`; `mask`: `[n, 1]`, 1 where the op applies.
fn change(
    iv: &Intervention,
    h: &Tensor,
    x: &Tensor,
    c: &Tensor,
    basis: &Tensor,
    mask: Option<&Tensor>,
) -> Result<(Tensor, f32), Fail> {
    let alpha = f64::from(iv.alpha);
    // Per token, per row, how much of each row to add: [n, k].
    let coef = match iv.mode {
        Mode::Subtract | Mode::SubspaceRemove => c.affine(-alpha, 0.0)?,
        Mode::Add | Mode::SubspaceAdd => c.affine(alpha, 0.0)?,
        // α(v − p) = −α·p + α·v; check() made sure value is there.
        Mode::Clamp => c.affine(-alpha, alpha * f64::from(iv.value.unwrap_or(0.0)))?,
        Mode::Steer => Tensor::full(iv.alpha, (c.dim(0)?, 1), c.device())?,
        Mode::Project | Mode::SubspaceProject => c.zeros_like()?,
    };
    let coef = match mask {
        Some(m) => coef.broadcast_mul(m)?,
        None => coef,
    };
    let new = (x + coef.matmul(basis)?)?
        .reshape(h.shape())?
        .to_dtype(h.dtype())?;
    // Measured on what the caller gets back, after the cast.
    let norm = (new.to_dtype(DType::F32)?.reshape(x.shape())? - x)?
        .sqr()?
        .sum_all()?
        .sqrt()?
        .to_scalar::<f32>()?;
    Ok((new, norm))
}

/// candle's tensor operations, for the backend-neutral step policy
/// ([`crate::intervene::policy_step`]) and the shared block hook, with how
/// the primitive runs on CPU activations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Candle {
    pub primitive: PrimitivePath,
}

/// candle keeps the residual stream as `[1, t, hidden]`, the primitive's
/// own layout: nothing to convert.
impl crate::executor::hook::TensorOps for Candle {
    fn batched(&self, t: &Tensor) -> Result<Tensor, crate::model::ModelError> {
        Ok(t.clone())
    }
    fn unbatched(&self, t: &Tensor) -> Result<Tensor, crate::model::ModelError> {
        Ok(t.clone())
    }
    fn share(&self, t: &Tensor) -> Tensor {
        t.clone()
    }
    /// `[1, t, …]` → `[1, 1, …]`, copied so the pass's activations are not
    /// kept alive by a view.
    fn last_row(&self, t: &Tensor) -> Result<Tensor, crate::model::ModelError> {
        let n = t.dim(1)?;
        Ok(t.narrow(1, n - 1, 1)?.copy()?)
    }
    fn join(&self, a: &Tensor, b: &Tensor) -> Result<Tensor, crate::model::ModelError> {
        Ok(Tensor::cat(&[a, b], a.rank() - 2)?)
    }
    fn host(&self, t: &Tensor) -> Result<(Vec<usize>, Vec<f32>), crate::model::ModelError> {
        let shape = t.dims().to_vec();
        let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        Ok((shape, values))
    }
    fn primitive_note(&self) -> String {
        match self.primitive {
            PrimitivePath::Fused => format!(
                "fused: vauban-kernels' one pass per token on f32 CPU activations ({} threads); the tensor path elsewhere",
                vauban_kernels::pool::Pool::global().threads()
            ),
            PrimitivePath::Tensor => {
                "tensor: candle's tensor operations (the reference path)".into()
            }
        }
    }
}

impl crate::intervene::Primitive for Candle {
    type Tensor = Tensor;
    fn basis(&self, d: &Direction, like: &Tensor) -> Result<Tensor, InterveneError> {
        basis_tensor(d, like.device())
    }
    fn apply(
        &self,
        iv: &Intervention,
        basis: &Tensor,
        h: &Tensor,
        offset: usize,
    ) -> Result<Outcome, InterveneError> {
        let fused = self.primitive == PrimitivePath::Fused
            && h.dtype() == DType::F32
            && h.device().is_cpu();
        match fused {
            true => apply_fused(iv, h, offset),
            false => apply_with(iv, basis, h, offset),
        }
    }
}

/// [`apply`] through vauban-kernels' fused pass ([`vauban_kernels::primitive`]):
/// `h` f32 on the CPU, copied out once and back once. The same outcome as
/// the tensor path up to f32 summation order (the gate tests say how
/// close).
pub fn apply_fused(
    iv: &Intervention,
    h: &Tensor,
    offset: usize,
) -> Result<Outcome, InterveneError> {
    Ok(try_fused(iv, h, offset)?)
}

fn try_fused(iv: &Intervention, h: &Tensor, offset: usize) -> Result<Outcome, Fail> {
    use vauban_kernels::primitive::{self as kernel, Change, Condition};
    iv.check()?;
    let (b, t, d) = match *h.dims() {
        [b, t, d] if h.dtype() == DType::F32 => (b, t, d),
        _ => {
            return Err(Fail::Intervene(InterveneError::BadActivation {
                shape: h.dims().to_vec(),
                dtype: format!("{:?}", h.dtype()),
            }));
        }
    };
    let width = iv.direction.width();
    if width != d {
        return Err(InterveneError::WidthMismatch { width, hidden: d }.into());
    }
    let n = b * t;
    let selected: Vec<bool> = (0..n)
        .map(|r| iv.positions.selects(r % t, t, offset))
        .collect();
    let none_selected = !selected.iter().any(|&s| s);
    let alpha = iv.alpha;
    let change = match iv.mode {
        Mode::Project | Mode::SubspaceProject => Change::None,
        Mode::Subtract | Mode::SubspaceRemove => Change::Scale(-alpha),
        Mode::Add | Mode::SubspaceAdd => Change::Scale(alpha),
        Mode::Clamp => Change::Clamp {
            alpha,
            value: iv.value.unwrap_or(0.0),
        },
        Mode::Steer => Change::Steer(alpha),
    };
    let condition = match iv.condition {
        None => Condition::Always,
        Some(c) => match c.when {
            When::Above => Condition::Above(c.threshold),
            When::Below => Condition::Below(c.threshold),
        },
    };
    let k = iv.direction.rows();
    let op = kernel::Op {
        basis: &iv.direction.basis,
        k,
        change,
        condition,
        subspace: iv.mode.subspace(),
    };
    let mut x = h.flatten_all()?.to_vec1::<f32>()?;
    let summary = kernel::apply(&mut x, d, &selected, &op);
    let hidden = match iv.mode {
        Mode::Project | Mode::SubspaceProject => None,
        _ if none_selected => Some(h.clone()),
        _ => Some(Tensor::from_vec(x, h.shape(), h.device())?),
    };
    let delta_norm = match hidden.is_some() && !none_selected {
        true => summary.delta_squared.sqrt() as f32,
        false => 0.0,
    };
    Ok(Outcome {
        hidden,
        projections: summary
            .projections
            .chunks(k.max(1))
            .map(<[f32]>::to_vec)
            .collect(),
        applied: summary.applied,
        delta_norm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::intervene::policy::{Observation, PolicyLog, PolicyOp, StepPolicy, Watch};
    use crate::intervene::{Condition, policy_step};

    /// `[1, tokens, width]` f32 activation from rows.
    fn act(rows: &[&[f32]]) -> Tensor {
        let (t, d) = (rows.len(), rows[0].len());
        let flat: Vec<f32> = rows.concat();
        Tensor::from_vec(flat, (1, t, d), &Device::Cpu).unwrap()
    }

    fn dir(rows: &[&[f32]]) -> Direction {
        let (k, d) = (rows.len(), rows[0].len());
        Direction::new("test.safetensors", "t", "00", None, &rows.concat(), &[k, d]).unwrap()
    }

    fn iv(mode: Mode, rows: &[&[f32]], alpha: f32) -> Intervention {
        Intervention {
            layer: 0,
            mode,
            direction: dir(rows),
            alpha,
            value: None,
            positions: Positions::All,
            condition: None,
        }
    }

    fn hidden(out: &Outcome) -> Vec<Vec<f32>> {
        let h = out
            .hidden
            .as_ref()
            .expect("an intervening mode returns hidden");
        h.to_dtype(DType::F32)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2()
            .unwrap()
    }

    fn close(a: &[Vec<f32>], b: &[&[f32]]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.len(), y.len(), "{a:?} vs {b:?}");
            for (p, q) in x.iter().zip(y.iter()) {
                assert!((p - q).abs() < 1e-5, "{a:?} vs {b:?}");
            }
        }
    }

    const E1: &[f32] = &[0.0, 1.0, 0.0];

    #[test]
    fn design_example_project_and_subtract() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let out = apply(&iv(Mode::Project, &[E1], 1.0), &h, 0).unwrap();
        assert!(out.hidden.is_none());
        assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        assert_eq!(out.applied, vec![true, true]);
        assert_eq!(out.delta_norm, 0.0);

        let out = apply(&iv(Mode::Subtract, &[E1], 1.0), &h, 0).unwrap();
        close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 0.0, 6.0]]);
        assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        assert!((out.delta_norm - 29f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn add_scales_by_alpha_and_uses_the_direction_as_given() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let out = apply(&iv(Mode::Add, &[E1], 0.5), &h, 0).unwrap();
        close(&hidden(&out), &[&[1.0, 3.0, 3.0], &[4.0, 7.5, 6.0]]);
        // Not normalised: d = 2·e1 gives p = 4 and h + 4·d.
        let out = apply(
            &iv(Mode::Add, &[&[0.0, 2.0, 0.0]], 1.0),
            &act(&[&[1.0, 2.0, 3.0]]),
            0,
        )
        .unwrap();
        assert_eq!(out.projections, vec![vec![4.0]]);
        close(&hidden(&out), &[&[1.0, 10.0, 3.0]]);
    }

    #[test]
    fn subspace_modes() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let basis: &[&[f32]] = &[&[1.0, 0.0, 0.0], &[0.0, 0.0, 2.0]];
        let out = apply(&iv(Mode::SubspaceProject, basis, 1.0), &h, 0).unwrap();
        assert!(out.hidden.is_none());
        assert_eq!(out.projections, vec![vec![1.0, 6.0], vec![4.0, 12.0]]);
        assert_eq!(out.delta_norm, 0.0);

        // h − 0.5·(c₀·B₀ + c₁·B₁)
        let out = apply(&iv(Mode::SubspaceRemove, basis, 0.5), &h, 0).unwrap();
        close(&hidden(&out), &[&[0.5, 2.0, -3.0], &[2.0, 5.0, -6.0]]);

        let out = apply(&iv(Mode::SubspaceAdd, basis, 2.0), &h, 0).unwrap();
        close(&hidden(&out), &[&[3.0, 2.0, 27.0], &[12.0, 5.0, 54.0]]);
    }

    #[test]
    fn clamp_sets_the_component() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let mut c = iv(Mode::Clamp, &[E1], 1.0);
        c.value = Some(7.0);
        close(
            &hidden(&apply(&c, &h, 0).unwrap()),
            &[&[1.0, 7.0, 3.0], &[4.0, 7.0, 6.0]],
        );
        // α = 0.5 goes half way: 2 + 0.5·(7 − 2), 5 + 0.5·(7 − 5).
        c.alpha = 0.5;
        close(
            &hidden(&apply(&c, &h, 0).unwrap()),
            &[&[1.0, 4.5, 3.0], &[4.0, 6.0, 6.0]],
        );
    }

    #[test]
    fn steer_adds_the_direction() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let out = apply(&iv(Mode::Steer, &[&[1.0, 0.0, -1.0]], 3.0), &h, 0).unwrap();
        close(&hidden(&out), &[&[4.0, 2.0, 0.0], &[7.0, 5.0, 3.0]]);
        assert_eq!(out.projections, vec![vec![-2.0], vec![-2.0]]);
        assert!((out.delta_norm - 36f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn positions_are_absolute_with_an_offset() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[7.0, 8.0, 9.0]]);
        let mut s = iv(Mode::Subtract, &[E1], 1.0);
        let run = |s: &Intervention, offset| apply(s, &h, offset).unwrap();

        // Tokens sit at positions 10, 11, 12.
        s.positions = Positions::Range {
            start: 11,
            end: Some(12),
        };
        let out = run(&s, 10);
        assert_eq!(out.applied, vec![false, true, false]);
        close(
            &hidden(&out),
            &[&[1.0, 2.0, 3.0], &[4.0, 0.0, 6.0], &[7.0, 8.0, 9.0]],
        );
        // The same range with no offset selects nothing.
        let out = run(&s, 0);
        assert_eq!(out.applied, vec![false; 3]);
        assert_eq!(out.delta_norm, 0.0);
        close(
            &hidden(&out),
            &[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[7.0, 8.0, 9.0]],
        );

        s.positions = Positions::Range {
            start: 11,
            end: None,
        };
        assert_eq!(run(&s, 10).applied, vec![false, true, true]);

        s.positions = Positions::Last;
        let out = run(&s, 10);
        assert_eq!(out.applied, vec![false, false, true]);
        close(
            &hidden(&out),
            &[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[7.0, 0.0, 9.0]],
        );

        // A decode step: one token at position 12.
        let step = act(&[&[7.0, 8.0, 9.0]]);
        s.positions = Positions::Range {
            start: 12,
            end: Some(13),
        };
        let out = apply(&s, &step, 12).unwrap();
        assert_eq!(out.applied, vec![true]);
        close(&hidden(&out), &[&[7.0, 0.0, 9.0]]);
        assert_eq!(apply(&s, &step, 13).unwrap().applied, vec![false]);
    }

    #[test]
    fn positions_apply_to_every_batch_row() {
        let data: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        let h = Tensor::from_vec(data, (2, 2, 3), &Device::Cpu).unwrap();
        let mut s = iv(Mode::Subtract, &[E1], 1.0);
        s.positions = Positions::Last;
        let out = apply(&s, &h, 0).unwrap();
        assert_eq!(out.applied, vec![false, true, false, true]);
        assert_eq!(
            out.projections,
            vec![vec![2.0], vec![5.0], vec![8.0], vec![11.0]]
        );
        let new = out.hidden.unwrap().to_vec3::<f32>().unwrap();
        assert_eq!(
            new,
            vec![
                vec![vec![1.0, 2.0, 3.0], vec![4.0, 0.0, 6.0]],
                vec![vec![7.0, 8.0, 9.0], vec![10.0, 0.0, 12.0]],
            ]
        );
    }

    #[test]
    fn conditional_touches_only_passing_tokens() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let mut s = iv(Mode::Subtract, &[E1], 1.0);
        s.condition = Some(Condition {
            when: When::Above,
            threshold: 3.0,
        });
        let out = apply(&s, &h, 0).unwrap();
        assert_eq!(out.applied, vec![false, true]);
        close(&hidden(&out), &[&[1.0, 2.0, 3.0], &[4.0, 0.0, 6.0]]);

        s.condition = Some(Condition {
            when: When::Below,
            threshold: 3.0,
        });
        let out = apply(&s, &h, 0).unwrap();
        assert_eq!(out.applied, vec![true, false]);
        close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 5.0, 6.0]]);

        // Combined with positions: the last token, only if above 3.
        s.condition = Some(Condition {
            when: When::Above,
            threshold: 3.0,
        });
        s.positions = Positions::Last;
        assert_eq!(apply(&s, &h, 0).unwrap().applied, vec![false, true]);
        s.positions = Positions::Range {
            start: 0,
            end: Some(1),
        };
        assert_eq!(apply(&s, &h, 0).unwrap().applied, vec![false, false]);

        // Subspace modes test ‖c‖: √(1 + 36) ≈ 6.1 and √(16 + 144) ≈ 12.6.
        let mut r = iv(
            Mode::SubspaceRemove,
            &[&[1.0, 0.0, 0.0], &[0.0, 0.0, 2.0]],
            1.0,
        );
        r.condition = Some(Condition {
            when: When::Above,
            threshold: 10.0,
        });
        let out = apply(&r, &h, 0).unwrap();
        assert_eq!(out.applied, vec![false, true]);
        close(&hidden(&out), &[&[1.0, 2.0, 3.0], &[0.0, 5.0, -18.0]]);
    }

    #[test]
    fn half_precision_keeps_dtype_and_shape() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        for dtype in [DType::BF16, DType::F16] {
            let h = h.to_dtype(dtype).unwrap();
            let out = apply(&iv(Mode::Subtract, &[E1], 1.0), &h, 0).unwrap();
            let new = out.hidden.as_ref().unwrap();
            assert_eq!(new.dtype(), dtype);
            assert_eq!(new.dims(), &[1, 2, 3]);
            close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 0.0, 6.0]]);
            let out = apply(&iv(Mode::Project, &[E1], 1.0), &h, 0).unwrap();
            assert!(out.hidden.is_none());
            assert_eq!(out.delta_norm, 0.0);
            assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        }
    }

    #[test]
    fn refuses_bad_input() {
        let h = act(&[&[1.0, 2.0, 3.0]]);
        let err = apply(&iv(Mode::Subtract, &[&[0.0, 1.0]], 1.0), &h, 0).unwrap_err();
        assert!(matches!(
            err,
            InterveneError::WidthMismatch {
                width: 2,
                hidden: 3
            }
        ));
        let msg = err.to_string();
        assert!(msg.contains("width 2") && msg.contains("is 3"), "{msg}");

        let err = apply(&iv(Mode::Add, &[E1], f32::NAN), &h, 0).unwrap_err();
        assert!(err.to_string().contains("alpha is NaN"), "{err}");

        let mut c = iv(Mode::Clamp, &[&[0.0, 2.0, 0.0]], 1.0);
        c.value = Some(1.0);
        let err = apply(&c, &h, 0).unwrap_err();
        assert!(matches!(err, InterveneError::NotUnit { norm } if norm == 2.0));
        assert!(err.to_string().contains("norm 2"), "{err}");
        c.direction = dir(&[E1]);
        c.value = Some(f32::INFINITY);
        assert!(
            apply(&c, &h, 0)
                .unwrap_err()
                .to_string()
                .contains("value is inf")
        );
        c.value = None;
        assert!(matches!(
            apply(&c, &h, 0),
            Err(InterveneError::MissingValue)
        ));

        let mut s = iv(Mode::Subtract, &[E1, &[1.0, 0.0, 0.0]], 1.0);
        let err = apply(&s, &h, 0).unwrap_err();
        assert!(matches!(err, InterveneError::OneRowNeeded { rows: 2, .. }));
        assert!(err.to_string().contains("row=N"), "{err}");
        s.direction = dir(&[E1]);
        s.value = Some(1.0);
        assert!(matches!(
            apply(&s, &h, 0),
            Err(InterveneError::UnexpectedValue { .. })
        ));
        s.value = None;
        s.condition = Some(Condition {
            when: When::Above,
            threshold: f32::NAN,
        });
        assert!(
            apply(&s, &h, 0)
                .unwrap_err()
                .to_string()
                .contains("threshold")
        );

        let flat = Tensor::new(&[[1f32, 2.0, 3.0]], &Device::Cpu).unwrap();
        let err = apply(&iv(Mode::Add, &[E1], 1.0), &flat, 0).unwrap_err();
        assert!(err.to_string().contains("[1, 3]"), "{err}");
        let ints = Tensor::new(&[[[1u32, 2, 3]]], &Device::Cpu).unwrap();
        assert!(matches!(
            apply(&iv(Mode::Add, &[E1], 1.0), &ints, 0),
            Err(InterveneError::BadActivation { .. })
        ));
    }

    #[test]
    fn empty_activation_is_left_alone() {
        let h = Tensor::zeros((1, 0, 3), DType::F32, &Device::Cpu).unwrap();
        let out = apply(&iv(Mode::Steer, &[E1], 1.0), &h, 4).unwrap();
        assert_eq!(out.hidden.unwrap().dims(), &[1, 0, 3]);
        assert!(out.projections.is_empty() && out.applied.is_empty());
    }

    // ---- policy_step ----

    fn unit_x() -> Direction {
        Direction::new("x", "direction", "00", None, &[1.0, 0.0], &[2]).unwrap()
    }

    /// Subtracts the direction from tokens whose projection exceeds 1.
    struct Gate(Vec<Watch>, Vec<Vec<f32>>);

    impl StepPolicy for Gate {
        fn describe(&self) -> String {
            "gate".into()
        }
        fn watches(&self) -> &[Watch] {
            &self.0
        }
        fn decide(&mut self, obs: &[Observation]) -> Result<Vec<PolicyOp>, String> {
            self.1.push(obs[0].projections.clone());
            let positions: Vec<usize> = obs[0]
                .projections
                .iter()
                .enumerate()
                .filter(|(_, p)| **p > 1.0)
                .map(|(i, _)| obs[0].offset + i)
                .collect();
            Ok(vec![PolicyOp {
                layer: obs[0].layer,
                direction: "x".into(),
                mode: Mode::Subtract,
                alpha: 1.0,
                value: None,
                positions,
            }])
        }
    }

    #[test]
    fn step_observes_decides_and_changes_only_the_chosen_tokens() {
        let watch = Watch {
            name: "x".into(),
            layers: vec![2],
            direction: unit_x(),
        };
        let mut gate = Gate(vec![watch], Vec::new());
        let mut log = PolicyLog::default();
        // Three tokens at positions 5, 6, 7 with x-components 0.5, 3, 2.
        let h = Tensor::new(&[[[0.5f32, 1.0], [3.0, 1.0], [2.0, -1.0]]], &Device::Cpu).unwrap();
        assert!(
            policy_step(
                &Candle::default(),
                &mut gate,
                &mut log,
                &mut HashMap::new(),
                (1, 5, true),
                &h
            )
            .unwrap()
            .is_none(),
            "layer 1 is not watched"
        );
        let out = policy_step(
            &Candle::default(),
            &mut gate,
            &mut log,
            &mut HashMap::new(),
            (2, 5, true),
            &h,
        )
        .unwrap()
        .unwrap();
        assert_eq!(gate.1, [vec![0.5, 3.0, 2.0]]);
        assert_eq!(
            out.to_vec3::<f32>().unwrap(),
            [[[0.5, 1.0], [0.0, 1.0], [0.0, -1.0]]]
        );
        assert_eq!(
            (log.decisions, log.ops, log.tokens_changed_prefill),
            (1, 1, 2)
        );
    }

    /// The verification gate of the fused kernel (seed 003): on every mode,
    /// positions rule and condition, one direction and a subspace, a decode
    /// step's one token and a batch of prompts, in prefill and at an
    /// offset, the fused pass gives the tensor path's outcome: the same
    /// tokens applied, and projections, activation and change norm within
    /// f32 summation order.
    #[test]
    fn the_fused_kernel_gives_the_tensor_paths_outcome() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut checked = 0;
        for (b, t, d) in [(1, 1, 64), (1, 7, 64), (3, 5, 96), (2, 33, 576)] {
            let values: Vec<f32> = (0..b * t * d)
                .map(|_| rng.random_range(-3.0..3.0))
                .collect();
            let h = Tensor::from_vec(values, (b, t, d), &Device::Cpu).unwrap();
            for k in [1usize, 3] {
                // Orthonormal rows (Gram-Schmidt): what clamp and the
                // subspace modes require.
                let mut rows: Vec<Vec<f32>> = Vec::new();
                for _ in 0..k {
                    let mut r: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
                    for q in &rows {
                        let dot: f32 = r.iter().zip(q).map(|(a, b)| a * b).sum();
                        r.iter_mut().zip(q).for_each(|(a, b)| *a -= dot * b);
                    }
                    let norm = r.iter().map(|a| a * a).sum::<f32>().sqrt();
                    rows.push(r.iter().map(|a| a / norm).collect());
                }
                let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
                let modes: &[Mode] = match k {
                    1 => &[
                        Mode::Project,
                        Mode::Subtract,
                        Mode::Add,
                        Mode::Clamp,
                        Mode::Steer,
                    ],
                    _ => &[
                        Mode::SubspaceProject,
                        Mode::SubspaceRemove,
                        Mode::SubspaceAdd,
                    ],
                };
                for &mode in modes {
                    for positions in [
                        Positions::All,
                        Positions::Last,
                        Positions::Range {
                            start: 2,
                            end: Some(4),
                        },
                        Positions::Range {
                            start: 50,
                            end: None,
                        },
                    ] {
                        for condition in [
                            None,
                            Some(Condition {
                                when: When::Above,
                                threshold: 0.2,
                            }),
                            Some(Condition {
                                when: When::Below,
                                threshold: -0.1,
                            }),
                        ] {
                            for offset in [0, 3] {
                                let mut v = iv(mode, &refs, 0.7);
                                v.value = (mode == Mode::Clamp).then_some(0.25);
                                v.positions = positions;
                                v.condition = condition;
                                let tensor = apply(&v, &h, offset).unwrap();
                                let fused = apply_fused(&v, &h, offset).unwrap();
                                let what = format!(
                                    "{b}x{t}x{d} k{k} {mode:?} {positions:?} {condition:?} @{offset}"
                                );
                                assert_eq!(fused.applied, tensor.applied, "{what}");
                                assert_eq!(
                                    fused.projections.len(),
                                    tensor.projections.len(),
                                    "{what}"
                                );
                                for (f, r) in fused
                                    .projections
                                    .iter()
                                    .flatten()
                                    .zip(tensor.projections.iter().flatten())
                                {
                                    assert!((f - r).abs() < 1e-5, "{what}: projection {f} vs {r}");
                                }
                                assert!(
                                    (fused.delta_norm - tensor.delta_norm).abs()
                                        < 1e-4 * (1.0 + tensor.delta_norm),
                                    "{what}: change {} vs {}",
                                    fused.delta_norm,
                                    tensor.delta_norm
                                );
                                match (&fused.hidden, &tensor.hidden) {
                                    (None, None) => {}
                                    (Some(f), Some(r)) => {
                                        let diff =
                                            (f - r).unwrap().abs().unwrap().max_all().unwrap();
                                        assert!(
                                            diff.to_scalar::<f32>().unwrap() < 1e-5,
                                            "{what}: {diff}"
                                        );
                                    }
                                    _ => panic!(
                                        "{what}: one path changed the activation, the other did not"
                                    ),
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 4 * (5 + 3) * 4 * 3 * 2);
    }
}
