//! The activation primitive as one fused pass over the activation: for
//! each token row `x` of `[n, d]` (f32, in place) and a basis `B` of `k`
//! rows, the coordinates `c = B·x` (the projection summaries every mode
//! records), the gate (the token's position selected, and the condition on
//! `c`, or on `‖c‖` for a subspace), then `x ← x + Σⱼ coefⱼ·Bⱼ` with the
//! mode's coefficients, and the squared norm of the change, all while the
//! row is in cache. The tensor path this replaces (`executor::candle::
//! intervene`) runs about ten tensor operations, each allocating, for the
//! same result; this is the seed's one kernel boundary, and nothing else
//! lives here (no model, no direction files, no positions rule: the caller
//! says which rows are selected).
//!
//! Each dot product and update runs over eight independent lanes the
//! compiler keeps in vector registers; rows split across the pool's
//! threads when a prompt's rows are many.

use std::sync::Mutex;

use crate::pool::Pool;

/// How candle applies the activation primitive to CPU activations: this
/// module's fused pass, or the tensor operations of the reference path. A
/// config value (`primitive = "tensor"`), so described to serde and the
/// config's JSON Schema.
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
pub enum PrimitivePath {
    /// One pass per row: coordinates, gate, change and its norm (this
    /// module's [`apply`]). Checked against the tensor path in every mode.
    #[default]
    Fused,
    /// The tensor operations of the reference path (a matmul for the
    /// coordinates, masks, a matmul for the change, each allocating).
    Tensor,
}

impl PrimitivePath {
    pub fn name(self) -> &'static str {
        match self {
            PrimitivePath::Fused => "fused",
            PrimitivePath::Tensor => "tensor",
        }
    }
}

impl std::str::FromStr for PrimitivePath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fused" => Ok(PrimitivePath::Fused),
            "tensor" => Ok(PrimitivePath::Tensor),
            _ => Err(format!("`{s}`: expected fused or tensor")),
        }
    }
}

impl std::fmt::Display for PrimitivePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the mode does with a row's coordinates `c` (`k` of them): the
/// coefficient of each basis row added to the row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// Nothing (the project modes): only the coordinates are measured.
    None,
    /// `coefⱼ = s·cⱼ`: subtract (`s = −α`), add (`s = α`), and their
    /// subspace forms.
    Scale(f32),
    /// `coef = α(v − c)`: the component along a unit direction becomes
    /// `v` at α = 1 (one basis row).
    Clamp { alpha: f32, value: f32 },
    /// `coefⱼ = α`: activation addition, whatever `c` is.
    Steer(f32),
}

/// Which rows the change applies to, beyond their positions: a threshold
/// on the row's score (`c₀`, or `‖c‖` for a subspace).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Condition {
    Always,
    /// Score `>` the threshold.
    Above(f32),
    /// Score `<` the threshold.
    Below(f32),
}

/// The primitive's request: the basis `[k, d]`, the change, the condition
/// and whether the score is the coordinates' norm (a subspace).
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    pub basis: &'a [f32],
    pub k: usize,
    pub change: Change,
    pub condition: Condition,
    pub subspace: bool,
}

/// What one pass measured: the coordinates `[n, k]` before the change,
/// whether each row was changed (selected and its condition passed), and
/// `‖new − old‖²` over the whole activation.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub projections: Vec<f32>,
    pub applied: Vec<bool>,
    pub delta_squared: f64,
}

/// One task's rows, their coordinates and flags, and its rows' squared
/// change.
type Part<'a> = (&'a mut [f32], &'a mut [f32], &'a mut [bool], f64);

/// Rows per task: a decode step's row (or a few) stays on the calling
/// thread; a prompt's rows split across the pool.
const ROWS_PER_TASK: usize = 16;

/// Lanes of the dot products and updates.
const LANES: usize = 8;

/// `Σ aᵢbᵢ` over eight independent partial sums.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    // Plain products and sums, not `mul_add`: without FMA enabled at
    // build time `mul_add` is a call to libm's software `fmaf` per value.
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// `x += s·b`; the squared norm of what was added, as the rounded `x`
/// holds it (a change measured on what the caller gets back).
fn add_scaled(x: &mut [f32], s: f32, b: &[f32]) {
    for (v, &w) in x.iter_mut().zip(b) {
        *v += s * w;
    }
}

/// One row: its coordinates into `c`, the gate, the change; whether it
/// applied and the squared norm of its change.
fn row(
    x: &mut [f32],
    op: &Op<'_>,
    selected: bool,
    c: &mut [f32],
    before: &mut Vec<f32>,
) -> (bool, f64) {
    let d = x.len();
    for (j, cj) in c.iter_mut().enumerate() {
        *cj = dot(x, &op.basis[j * d..(j + 1) * d]);
    }
    let score = match op.subspace {
        true => c.iter().map(|v| v * v).sum::<f32>().sqrt(),
        false => c[0],
    };
    let passes = match op.condition {
        Condition::Always => true,
        Condition::Above(t) => score > t,
        Condition::Below(t) => score < t,
    };
    let applies = selected && passes;
    if !applies || op.change == Change::None {
        return (applies, 0.0);
    }
    before.clear();
    before.extend_from_slice(x);
    for (j, &cj) in c.iter().enumerate() {
        let coef = match op.change {
            Change::None => 0.0,
            Change::Scale(s) => s * cj,
            Change::Clamp { alpha, value } => alpha * (value - cj),
            Change::Steer(alpha) => alpha,
        };
        add_scaled(x, coef, &op.basis[j * d..(j + 1) * d]);
    }
    let delta: f64 = x
        .iter()
        .zip(before.iter())
        .map(|(&new, &old)| f64::from(new - old).powi(2))
        .sum();
    (applies, delta)
}

/// Applies `op` to every row of `x` (`[n, d]`, row-major, changed in
/// place unless the change is [`Change::None`]); `selected[r]` says
/// whether row `r`'s position is one the op may touch.
///
/// Panics when the shapes disagree (a caller's bug: the host checks
/// widths and ranks before it calls).
pub fn apply(x: &mut [f32], d: usize, selected: &[bool], op: &Op<'_>) -> Summary {
    assert!(d > 0 && x.len().is_multiple_of(d), "x is [n, {d}]");
    let n = x.len() / d;
    assert_eq!(selected.len(), n, "one selection per row");
    assert!(
        op.k > 0 && op.basis.len() == op.k * d,
        "the basis is [k, {d}]"
    );
    assert!(
        op.subspace || op.k == 1,
        "a single-direction mode has one basis row"
    );
    let mut projections = vec![0f32; n * op.k];
    let mut applied = vec![false; n];
    let tasks = n.div_ceil(ROWS_PER_TASK);
    let parts: Vec<Mutex<Part<'_>>> = x
        .chunks_mut(ROWS_PER_TASK * d)
        .zip(projections.chunks_mut(ROWS_PER_TASK * op.k))
        .zip(applied.chunks_mut(ROWS_PER_TASK))
        .map(|((x, c), a)| Mutex::new((x, c, a, 0.0)))
        .collect();
    let run = |t: usize| {
        let mut part = parts[t].lock().expect("each task locks its own part");
        let (x, c, a, delta) = &mut *part;
        let mut before = Vec::with_capacity(d);
        for (r, ((xr, cr), ar)) in x
            .chunks_mut(d)
            .zip(c.chunks_mut(op.k))
            .zip(a.iter_mut())
            .enumerate()
        {
            let (applies, dr) = row(xr, op, selected[t * ROWS_PER_TASK + r], cr, &mut before);
            *ar = applies;
            *delta += dr;
        }
    };
    match tasks {
        0 => {}
        1 => run(0),
        _ => Pool::global().run(tasks, &run),
    }
    let delta_squared = parts
        .into_iter()
        .map(|p| p.into_inner().expect("no task panicked").3)
        .sum();
    Summary {
        projections,
        applied,
        delta_squared,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The definitions in f64, row by row.
    fn reference(
        x: &[f32],
        d: usize,
        selected: &[bool],
        op: &Op<'_>,
    ) -> (Vec<f64>, Vec<f64>, Vec<bool>) {
        let n = x.len() / d;
        let (mut out, mut proj, mut applied) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..n {
            let xr: Vec<f64> = x[r * d..(r + 1) * d]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let c: Vec<f64> = (0..op.k)
                .map(|j| (0..d).map(|i| xr[i] * f64::from(op.basis[j * d + i])).sum())
                .collect();
            let score = if op.subspace {
                c.iter().map(|v| v * v).sum::<f64>().sqrt()
            } else {
                c[0]
            };
            let passes = match op.condition {
                Condition::Always => true,
                Condition::Above(t) => score > f64::from(t),
                Condition::Below(t) => score < f64::from(t),
            };
            let on = selected[r] && passes;
            let mut new = xr.clone();
            if on {
                for (j, &cj) in c.iter().enumerate() {
                    let coef = match op.change {
                        Change::None => 0.0,
                        Change::Scale(s) => f64::from(s) * cj,
                        Change::Clamp { alpha, value } => {
                            f64::from(alpha) * (f64::from(value) - cj)
                        }
                        Change::Steer(a) => f64::from(a),
                    };
                    for (v, &w) in new.iter_mut().zip(&op.basis[j * d..(j + 1) * d]) {
                        *v += coef * f64::from(w);
                    }
                }
            }
            out.extend(new);
            proj.extend(c);
            applied.push(on);
        }
        (out, proj, applied)
    }

    /// Every change and condition, one and several basis rows, widths that
    /// are and are not a multiple of the lanes, a decode step's one row
    /// and a prompt's many (split across the threads): within f32 rounding
    /// of the f64 definitions.
    #[test]
    fn every_mode_matches_its_definition() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for (n, d) in [(1, 64), (3, 13), (40, 576), (1, 4096)] {
            let x: Vec<f32> = (0..n * d).map(|_| rng.random_range(-2.0..2.0)).collect();
            let selected: Vec<bool> = (0..n).map(|r| r % 3 != 1).collect();
            for k in [1, 3] {
                let basis: Vec<f32> = (0..k * d)
                    .map(|_| rng.random_range(-1.0..1.0) / (d as f32).sqrt())
                    .collect();
                let changes = [
                    Change::None,
                    Change::Scale(-1.0),
                    Change::Scale(0.5),
                    Change::Clamp {
                        alpha: 1.0,
                        value: 0.3,
                    },
                    Change::Steer(2.0),
                ];
                for change in changes {
                    if k > 1 && matches!(change, Change::Clamp { .. } | Change::Steer(_)) {
                        continue;
                    }
                    for condition in [
                        Condition::Always,
                        Condition::Above(0.1),
                        Condition::Below(0.1),
                    ] {
                        let op = Op {
                            basis: &basis,
                            k,
                            change,
                            condition,
                            subspace: k > 1,
                        };
                        let mut got = x.clone();
                        let s = apply(&mut got, d, &selected, &op);
                        let (want, proj, applied) = reference(&x, d, &selected, &op);
                        assert_eq!(s.applied, applied, "{n}x{d} k{k} {change:?} {condition:?}");
                        let scale = 1e-5 * (d as f64).sqrt();
                        for (a, b) in s.projections.iter().zip(&proj) {
                            assert!((f64::from(*a) - b).abs() < scale, "{a} vs {b}");
                        }
                        let mut delta = 0f64;
                        for ((a, b), old) in got.iter().zip(&want).zip(&x) {
                            assert!((f64::from(*a) - b).abs() < scale, "{change:?}: {a} vs {b}");
                            delta += (b - f64::from(*old)).powi(2);
                        }
                        assert!(
                            (s.delta_squared.sqrt() - delta.sqrt()).abs()
                                < 1e-4 * (1.0 + delta.sqrt()),
                            "{change:?}: {} vs {}",
                            s.delta_squared.sqrt(),
                            delta.sqrt()
                        );
                        if change == Change::None {
                            assert_eq!(got, x, "a project mode changes nothing");
                        }
                    }
                }
            }
        }
    }

    /// Rows not selected, and rows whose condition fails, keep their bits.
    #[test]
    fn untouched_rows_keep_their_bits() {
        let d = 24;
        let x: Vec<f32> = (0..4 * d).map(|i| (i as f32 * 0.37).sin()).collect();
        let basis: Vec<f32> = (0..d).map(|i| (i as f32 * 0.11).cos() / 5.0).collect();
        let op = Op {
            basis: &basis,
            k: 1,
            change: Change::Scale(-1.0),
            condition: Condition::Always,
            subspace: false,
        };
        let mut got = x.clone();
        let s = apply(&mut got, d, &[false, true, false, true], &op);
        assert_eq!(s.applied, [false, true, false, true]);
        assert_eq!(got[..d], x[..d]);
        assert_eq!(got[2 * d..3 * d], x[2 * d..3 * d]);
        assert_ne!(got[d..2 * d], x[d..2 * d]);
    }
}
