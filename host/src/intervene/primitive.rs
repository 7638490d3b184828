//! The activation primitive: one layer's activation `h` `[batch, tokens,
//! d_model]`, a direction `d` or a basis `B` `[k, d_model]`, a mode and a
//! scale α.
//!
//! | mode | result |
//! |---|---|
//! | project | `p = h·d` per token, `h` unchanged |
//! | subtract / add | `h ∓ α·(h·d)·d` |
//! | subspace_project | `c = h·Bᵀ`, `h` unchanged |
//! | subspace_remove / subspace_add | `h ∓ α·c·B` |
//! | clamp | `h + α·(v − h·d)·d`: with α = 1 the component along a unit `d` becomes `v` |
//! | steer | `h + α·d` (activation addition) |
//!
//! Any intervening mode can be limited to some token positions and made
//! conditional on the projection before the change. Everything runs as
//! candle tensor ops (two small matmuls and a mask), in f32, on whatever
//! device `h` lives on: this runs in every decode step.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::InterveneError;

/// How far a clamp direction's norm may stray from 1: clamp sets the
/// component along `d` to `v` only when `d` is a unit vector.
pub const UNIT_TOLERANCE: f32 = 1e-3;

/// What an intervention does with its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Project,
    Subtract,
    Add,
    SubspaceProject,
    SubspaceRemove,
    SubspaceAdd,
    Clamp,
    Steer,
}

impl Mode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [Mode; 8] = [
        Mode::Project,
        Mode::Subtract,
        Mode::Add,
        Mode::SubspaceProject,
        Mode::SubspaceRemove,
        Mode::SubspaceAdd,
        Mode::Clamp,
        Mode::Steer,
    ];

    /// The name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Project => "project",
            Mode::Subtract => "subtract",
            Mode::Add => "add",
            Mode::SubspaceProject => "subspace_project",
            Mode::SubspaceRemove => "subspace_remove",
            Mode::SubspaceAdd => "subspace_add",
            Mode::Clamp => "clamp",
            Mode::Steer => "steer",
        }
    }

    /// Whether the mode changes the activation (every mode but the two
    /// project modes, which only measure).
    pub fn intervenes(self) -> bool {
        !matches!(self, Mode::Project | Mode::SubspaceProject)
    }

    /// Whether the mode uses every row of a basis; the others use exactly
    /// one direction.
    pub fn subspace(self) -> bool {
        matches!(
            self,
            Mode::SubspaceProject | Mode::SubspaceRemove | Mode::SubspaceAdd
        )
    }

    /// The valid names, for error messages.
    pub(crate) fn names() -> String {
        crate::text::list(&Mode::ALL.map(Mode::as_str))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = InterveneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| InterveneError::UnknownMode {
                found: s.to_owned(),
            })
    }
}

/// Which tokens an intervention touches, by absolute position in the
/// sequence (prompt and generated tokens alike), so that a range means the
/// same tokens in prefill and in each decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    #[default]
    All,
    /// The last token of each call: the final prompt token in prefill, and
    /// the one new token in every decode step.
    Last,
    /// Positions `start..end`, `end` exclusive; no `end` runs to the end of
    /// the sequence, generated tokens included.
    Range { start: usize, end: Option<usize> },
}

impl Positions {
    /// Whether token `index` of a call with `tokens` tokens whose first
    /// token is at absolute position `offset` is selected.
    pub fn selects(self, index: usize, tokens: usize, offset: usize) -> bool {
        match self {
            Positions::All => true,
            Positions::Last => index + 1 == tokens,
            Positions::Range { start, end } => {
                let p = offset + index;
                p >= start && end.is_none_or(|e| p < e)
            }
        }
    }
}

impl fmt::Display for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Positions::All => f.write_str("all"),
            Positions::Last => f.write_str("last"),
            Positions::Range { start, end: None } => write!(f, "{start}.."),
            Positions::Range {
                start,
                end: Some(end),
            } => write!(f, "{start}..{end}"),
        }
    }
}

/// Parses `all`, `last`, `N..M` or `N..`; the error is the problem and its fix.
pub(crate) fn parse_positions(s: &str) -> Result<Positions, String> {
    let bad = || {
        format!(
            "positions `{s}` is not all, last, N..M (end exclusive) or N.. (to the end); e.g. positions=5.. or positions=0..3"
        )
    };
    match s {
        "all" => return Ok(Positions::All),
        "last" => return Ok(Positions::Last),
        _ => {}
    }
    let (start, end) = s.split_once("..").ok_or_else(bad)?;
    let start = start.trim().parse::<usize>().map_err(|_| bad())?;
    let end = match end.trim() {
        "" => None,
        e => Some(e.parse::<usize>().map_err(|_| bad())?),
    };
    if let Some(e) = end
        && e <= start
    {
        return Err(format!(
            "positions `{s}` selects no token (the end is exclusive); write {start}..{} for position {start} alone",
            start + 1
        ));
    }
    Ok(Positions::Range { start, end })
}

impl FromStr for Positions {
    type Err = InterveneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_positions(s).map_err(|problem| InterveneError::Spec {
            text: s.to_owned(),
            problem,
        })
    }
}

/// Which side of the threshold a conditional intervention acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Strictly above the threshold.
    #[default]
    Above,
    /// Strictly below the threshold.
    Below,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            When::Above => "above",
            When::Below => "below",
        })
    }
}

/// Parses `above` or `below`; the error is the problem and its fix.
pub(crate) fn parse_when(s: &str) -> Result<When, String> {
    match s {
        "above" => Ok(When::Above),
        "below" => Ok(When::Below),
        _ => Err(format!(
            "when `{s}` is not above or below; write when=above or when=below"
        )),
    }
}

impl FromStr for When {
    type Err = InterveneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_when(s).map_err(|problem| InterveneError::Spec {
            text: s.to_owned(),
            problem,
        })
    }
}

/// A token is touched only when its score passes the threshold. The score
/// is the projection `h·d` for single-direction modes and the norm `‖c‖` of
/// the subspace coordinates for subspace modes, both taken before the op.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub when: When,
    pub threshold: f32,
}

/// A direction, or a basis of several, as read from a file.
#[derive(Debug, Clone)]
pub struct Direction {
    /// The file path as given.
    pub source: String,
    /// The tensor's name inside the file (empty for a `.npy` array).
    pub tensor: String,
    /// The row picked from a `[k, d_model]` tensor, if one was.
    pub row: Option<usize>,
    /// sha256 (hex) of the file's bytes, for provenance.
    pub file_sha256: String,
    /// `[k, d_model]`, f32, used as given (not normalised).
    pub basis: Tensor,
    /// The L2 norm of each basis row.
    pub norms: Vec<f32>,
}

impl Direction {
    /// A direction from `values` (`[d_model]`, one row, or `[k, d_model]`)
    /// of any float dtype, keeping only row `row` when given. Refuses
    /// empty or non-finite values; computes the row norms.
    pub fn new(
        source: impl Into<String>,
        tensor: impl Into<String>,
        file_sha256: impl Into<String>,
        row: Option<usize>,
        values: &Tensor,
    ) -> Result<Self, InterveneError> {
        let (source, tensor) = (source.into(), tensor.into());
        let bad = |problem: String| InterveneError::BadTensor {
            path: PathBuf::from(&source),
            tensor: tensor.clone(),
            problem,
        };
        if !values.dtype().is_float() {
            return Err(bad(format!(
                "has dtype {:?}; a direction must be float (f16, bf16, f32, f64)",
                values.dtype()
            )));
        }
        let all = match *values.dims() {
            [d] => values.reshape((1, d))?,
            [_, _] => values.clone(),
            ref dims => {
                return Err(bad(format!(
                    "has shape {dims:?}; a direction is [d_model] and a basis is [k, d_model]"
                )));
            }
        };
        let (k, d) = all.dims2()?;
        if k == 0 || d == 0 {
            return Err(bad(format!("is empty (shape {:?})", values.dims())));
        }
        let basis = match row {
            Some(r) if r >= k => {
                return Err(bad(format!(
                    "has {k} row(s); row={r} is out of range, pick 0 to {}",
                    k - 1
                )));
            }
            Some(r) => all.narrow(0, r, 1)?,
            None => all,
        }
        .to_dtype(DType::F32)?
        .contiguous()?;
        let rows = basis.to_vec2::<f32>()?;
        let mut norms = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            if let Some(j) = r.iter().position(|x| !x.is_finite()) {
                let i = row.unwrap_or(i);
                return Err(bad(format!(
                    "holds {} at row {i}, index {j}; a direction must be finite, recompute it",
                    r[j]
                )));
            }
            let sq: f64 = r.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            norms.push(sq.sqrt() as f32);
        }
        Ok(Direction {
            source,
            tensor,
            row,
            file_sha256: file_sha256.into(),
            basis,
            norms,
        })
    }

    /// How many directions the basis holds (`k`).
    pub fn rows(&self) -> usize {
        self.basis.dims().first().copied().unwrap_or(0)
    }

    /// The width of each direction (`d_model`).
    pub fn width(&self) -> usize {
        self.basis.dims().get(1).copied().unwrap_or(0)
    }

    /// This direction scaled to unit length, for callers that want one (the
    /// primitive itself uses directions as given). One non-zero row only;
    /// the provenance is kept and `norms` becomes `[1]`.
    pub fn unit(&self) -> Result<Direction, InterveneError> {
        if self.norms.len() != 1 || self.norms[0] <= 0.0 {
            return Err(InterveneError::Policy(format!(
                "{} (tensor {}) must be one non-zero vector to be made unit length",
                self.source, self.tensor
            )));
        }
        let scaled = self.basis.affine(1.0 / f64::from(self.norms[0]), 0.0)?;
        Direction::new(
            &self.source,
            &self.tensor,
            &self.file_sha256,
            self.row,
            &scaled,
        )
    }
}

/// One intervention at one layer.
#[derive(Debug, Clone)]
pub struct Intervention {
    pub layer: usize,
    pub mode: Mode,
    pub direction: Direction,
    pub alpha: f32,
    /// The clamp target; only clamp takes one.
    pub value: Option<f32>,
    pub positions: Positions,
    pub condition: Option<Condition>,
}

/// What [`Intervention::apply`] did.
#[derive(Debug)]
pub struct Outcome {
    /// The new activation for intervening modes: same shape, dtype and
    /// device as the input. `None` for the project modes.
    pub hidden: Option<Tensor>,
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

impl Intervention {
    /// Applies the intervention to `h`.
    ///
    /// `h`: `[batch, tokens, d_model]`, any float dtype (f32, f16, bf16,
    /// f64); computed in f32 and cast back.
    /// `offset`: the absolute position of h's first token (0 in prefill;
    /// the cache length in a decode step), so [`Positions`] work during
    /// generation.
    pub fn apply(&self, h: &Tensor, offset: usize) -> Result<Outcome, InterveneError> {
        self.check()?;
        let (b, t, d) = match *h.dims() {
            [b, t, d] if h.dtype().is_float() => (b, t, d),
            _ => {
                return Err(InterveneError::BadActivation {
                    shape: h.dims().to_vec(),
                    dtype: format!("{:?}", h.dtype()),
                });
            }
        };
        let width = self.direction.width();
        if width != d {
            return Err(InterveneError::WidthMismatch { width, hidden: d });
        }
        let (n, dev) = (b * t, h.device());
        if n == 0 {
            // Nothing to measure or change (an empty batch or prompt).
            return Ok(Outcome {
                hidden: self.mode.intervenes().then(|| h.clone()),
                projections: Vec::new(),
                applied: Vec::new(),
                delta_norm: 0.0,
            });
        }
        let x = h.to_dtype(DType::F32)?.reshape((n, d))?;
        let basis = self.direction.basis.to_device(dev)?;
        // Coordinates along every row: [n, k].
        let c = x.matmul(&basis.t()?)?;

        let selected: Vec<f32> = (0..t)
            .map(|i| f32::from(u8::from(self.positions.selects(i, t, offset))))
            .collect();
        let none_selected = selected.iter().all(|&s| s == 0.0);
        let mut mask = if self.positions == Positions::All {
            None
        } else {
            Some(
                Tensor::from_vec(selected, (1, t), dev)?
                    .broadcast_as((b, t))?
                    .reshape((n, 1))?,
            )
        };
        if let Some(cond) = self.condition {
            let score = if self.mode.subspace() {
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
        let (hidden, delta_norm) = match self.mode {
            Mode::Project | Mode::SubspaceProject => (None, 0.0),
            _ if none_selected => (Some(h.clone()), 0.0),
            _ => {
                let (new, norm) = self.change(h, &x, &c, &basis, mask.as_ref())?;
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
        &self,
        h: &Tensor,
        x: &Tensor,
        c: &Tensor,
        basis: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<(Tensor, f32), InterveneError> {
        let alpha = f64::from(self.alpha);
        // Per token, per row, how much of each row to add: [n, k].
        let coef = match self.mode {
            Mode::Subtract | Mode::SubspaceRemove => c.affine(-alpha, 0.0)?,
            Mode::Add | Mode::SubspaceAdd => c.affine(alpha, 0.0)?,
            // α(v − p) = −α·p + α·v; check() made sure value is there.
            Mode::Clamp => c.affine(-alpha, alpha * f64::from(self.value.unwrap_or(0.0)))?,
            Mode::Steer => Tensor::full(self.alpha, (c.dim(0)?, 1), c.device())?,
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

    /// Checks everything about the intervention that does not depend on
    /// the activation: finite scalars, a value exactly for clamp, one row
    /// for single-direction modes, a unit direction for clamp.
    pub fn check(&self) -> Result<(), InterveneError> {
        finite("alpha", self.alpha)?;
        if let Some(v) = self.value {
            finite("value", v)?;
        }
        if let Some(c) = self.condition {
            finite("threshold", c.threshold)?;
        }
        match (self.mode, self.value) {
            (Mode::Clamp, None) => return Err(InterveneError::MissingValue),
            (mode, Some(_)) if mode != Mode::Clamp => {
                return Err(InterveneError::UnexpectedValue { mode });
            }
            _ => {}
        }
        let rows = self.direction.rows();
        if !self.mode.subspace() && rows != 1 {
            return Err(InterveneError::OneRowNeeded {
                mode: self.mode,
                rows,
            });
        }
        if self.mode == Mode::Clamp {
            let norm = self.direction.norms.first().copied().unwrap_or(0.0);
            if (norm - 1.0).abs() > UNIT_TOLERANCE {
                return Err(InterveneError::NotUnit { norm });
            }
        }
        Ok(())
    }

    /// The JSON record of this intervention for the trace's
    /// `intervention_result` artifact.
    pub fn record(&self) -> serde_json::Value {
        let d = &self.direction;
        json!({
            "layer": self.layer,
            "mode": self.mode,
            "alpha": self.alpha,
            "value": self.value,
            "positions": self.positions,
            "condition": self.condition,
            "direction": {
                "source": d.source,
                "tensor": d.tensor,
                "row": d.row,
                "file_sha256": d.file_sha256,
                "rows": d.rows(),
                "width": d.width(),
                "norms": d.norms,
            },
        })
    }
}

fn finite(what: &'static str, value: f32) -> Result<(), InterveneError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(InterveneError::NotFinite { what, value })
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// `[1, tokens, width]` f32 activation from rows.
    fn act(rows: &[&[f32]]) -> Tensor {
        let (t, d) = (rows.len(), rows[0].len());
        let flat: Vec<f32> = rows.concat();
        Tensor::from_vec(flat, (1, t, d), &Device::Cpu).unwrap()
    }

    fn dir(rows: &[&[f32]]) -> Direction {
        let (k, d) = (rows.len(), rows[0].len());
        let t = Tensor::from_vec(rows.concat(), (k, d), &Device::Cpu).unwrap();
        Direction::new("test.safetensors", "t", "00", None, &t).unwrap()
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
        let out = iv(Mode::Project, &[E1], 1.0).apply(&h, 0).unwrap();
        assert!(out.hidden.is_none());
        assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        assert_eq!(out.applied, vec![true, true]);
        assert_eq!(out.delta_norm, 0.0);

        let out = iv(Mode::Subtract, &[E1], 1.0).apply(&h, 0).unwrap();
        close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 0.0, 6.0]]);
        assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        assert!((out.delta_norm - 29f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn add_scales_by_alpha_and_uses_the_direction_as_given() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let out = iv(Mode::Add, &[E1], 0.5).apply(&h, 0).unwrap();
        close(&hidden(&out), &[&[1.0, 3.0, 3.0], &[4.0, 7.5, 6.0]]);
        // Not normalised: d = 2·e1 gives p = 4 and h + 4·d.
        let out = iv(Mode::Add, &[&[0.0, 2.0, 0.0]], 1.0)
            .apply(&act(&[&[1.0, 2.0, 3.0]]), 0)
            .unwrap();
        assert_eq!(out.projections, vec![vec![4.0]]);
        close(&hidden(&out), &[&[1.0, 10.0, 3.0]]);
    }

    #[test]
    fn subspace_modes() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let basis: &[&[f32]] = &[&[1.0, 0.0, 0.0], &[0.0, 0.0, 2.0]];
        let out = iv(Mode::SubspaceProject, basis, 1.0).apply(&h, 0).unwrap();
        assert!(out.hidden.is_none());
        assert_eq!(out.projections, vec![vec![1.0, 6.0], vec![4.0, 12.0]]);
        assert_eq!(out.delta_norm, 0.0);

        // h − 0.5·(c₀·B₀ + c₁·B₁)
        let out = iv(Mode::SubspaceRemove, basis, 0.5).apply(&h, 0).unwrap();
        close(&hidden(&out), &[&[0.5, 2.0, -3.0], &[2.0, 5.0, -6.0]]);

        let out = iv(Mode::SubspaceAdd, basis, 2.0).apply(&h, 0).unwrap();
        close(&hidden(&out), &[&[3.0, 2.0, 27.0], &[12.0, 5.0, 54.0]]);
    }

    #[test]
    fn clamp_sets_the_component() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let mut c = iv(Mode::Clamp, &[E1], 1.0);
        c.value = Some(7.0);
        close(
            &hidden(&c.apply(&h, 0).unwrap()),
            &[&[1.0, 7.0, 3.0], &[4.0, 7.0, 6.0]],
        );
        // α = 0.5 goes half way: 2 + 0.5·(7 − 2), 5 + 0.5·(7 − 5).
        c.alpha = 0.5;
        close(
            &hidden(&c.apply(&h, 0).unwrap()),
            &[&[1.0, 4.5, 3.0], &[4.0, 6.0, 6.0]],
        );
    }

    #[test]
    fn steer_adds_the_direction() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        let out = iv(Mode::Steer, &[&[1.0, 0.0, -1.0]], 3.0)
            .apply(&h, 0)
            .unwrap();
        close(&hidden(&out), &[&[4.0, 2.0, 0.0], &[7.0, 5.0, 3.0]]);
        assert_eq!(out.projections, vec![vec![-2.0], vec![-2.0]]);
        assert!((out.delta_norm - 36f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn positions_are_absolute_with_an_offset() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &[7.0, 8.0, 9.0]]);
        let mut s = iv(Mode::Subtract, &[E1], 1.0);
        let run = |s: &Intervention, offset| s.apply(&h, offset).unwrap();

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
        let out = s.apply(&step, 12).unwrap();
        assert_eq!(out.applied, vec![true]);
        close(&hidden(&out), &[&[7.0, 0.0, 9.0]]);
        assert_eq!(s.apply(&step, 13).unwrap().applied, vec![false]);
    }

    #[test]
    fn positions_apply_to_every_batch_row() {
        let data: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        let h = Tensor::from_vec(data, (2, 2, 3), &Device::Cpu).unwrap();
        let mut s = iv(Mode::Subtract, &[E1], 1.0);
        s.positions = Positions::Last;
        let out = s.apply(&h, 0).unwrap();
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
        let out = s.apply(&h, 0).unwrap();
        assert_eq!(out.applied, vec![false, true]);
        close(&hidden(&out), &[&[1.0, 2.0, 3.0], &[4.0, 0.0, 6.0]]);

        s.condition = Some(Condition {
            when: When::Below,
            threshold: 3.0,
        });
        let out = s.apply(&h, 0).unwrap();
        assert_eq!(out.applied, vec![true, false]);
        close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 5.0, 6.0]]);

        // Combined with positions: the last token, only if above 3.
        s.condition = Some(Condition {
            when: When::Above,
            threshold: 3.0,
        });
        s.positions = Positions::Last;
        assert_eq!(s.apply(&h, 0).unwrap().applied, vec![false, true]);
        s.positions = Positions::Range {
            start: 0,
            end: Some(1),
        };
        assert_eq!(s.apply(&h, 0).unwrap().applied, vec![false, false]);

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
        let out = r.apply(&h, 0).unwrap();
        assert_eq!(out.applied, vec![false, true]);
        close(&hidden(&out), &[&[1.0, 2.0, 3.0], &[0.0, 5.0, -18.0]]);
    }

    #[test]
    fn half_precision_keeps_dtype_and_shape() {
        let h = act(&[&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]]);
        for dtype in [DType::BF16, DType::F16] {
            let h = h.to_dtype(dtype).unwrap();
            let out = iv(Mode::Subtract, &[E1], 1.0).apply(&h, 0).unwrap();
            let new = out.hidden.as_ref().unwrap();
            assert_eq!(new.dtype(), dtype);
            assert_eq!(new.dims(), &[1, 2, 3]);
            close(&hidden(&out), &[&[1.0, 0.0, 3.0], &[4.0, 0.0, 6.0]]);
            let out = iv(Mode::Project, &[E1], 1.0).apply(&h, 0).unwrap();
            assert!(out.hidden.is_none());
            assert_eq!(out.delta_norm, 0.0);
            assert_eq!(out.projections, vec![vec![2.0], vec![5.0]]);
        }
    }

    #[test]
    fn refuses_bad_input() {
        let h = act(&[&[1.0, 2.0, 3.0]]);
        let err = iv(Mode::Subtract, &[&[0.0, 1.0]], 1.0)
            .apply(&h, 0)
            .unwrap_err();
        assert!(matches!(
            err,
            InterveneError::WidthMismatch {
                width: 2,
                hidden: 3
            }
        ));
        let msg = err.to_string();
        assert!(msg.contains("width 2") && msg.contains("is 3"), "{msg}");

        let err = iv(Mode::Add, &[E1], f32::NAN).apply(&h, 0).unwrap_err();
        assert!(err.to_string().contains("alpha is NaN"), "{err}");

        let mut c = iv(Mode::Clamp, &[&[0.0, 2.0, 0.0]], 1.0);
        c.value = Some(1.0);
        let err = c.apply(&h, 0).unwrap_err();
        assert!(matches!(err, InterveneError::NotUnit { norm } if norm == 2.0));
        assert!(err.to_string().contains("norm 2"), "{err}");
        c.direction = dir(&[E1]);
        c.value = Some(f32::INFINITY);
        assert!(
            c.apply(&h, 0)
                .unwrap_err()
                .to_string()
                .contains("value is inf")
        );
        c.value = None;
        assert!(matches!(c.apply(&h, 0), Err(InterveneError::MissingValue)));

        let mut s = iv(Mode::Subtract, &[E1, &[1.0, 0.0, 0.0]], 1.0);
        let err = s.apply(&h, 0).unwrap_err();
        assert!(matches!(err, InterveneError::OneRowNeeded { rows: 2, .. }));
        assert!(err.to_string().contains("row=N"), "{err}");
        s.direction = dir(&[E1]);
        s.value = Some(1.0);
        assert!(matches!(
            s.apply(&h, 0),
            Err(InterveneError::UnexpectedValue { .. })
        ));
        s.value = None;
        s.condition = Some(Condition {
            when: When::Above,
            threshold: f32::NAN,
        });
        assert!(
            s.apply(&h, 0)
                .unwrap_err()
                .to_string()
                .contains("threshold")
        );

        let flat = Tensor::new(&[[1f32, 2.0, 3.0]], &Device::Cpu).unwrap();
        let err = iv(Mode::Add, &[E1], 1.0).apply(&flat, 0).unwrap_err();
        assert!(err.to_string().contains("[1, 3]"), "{err}");
        let ints = Tensor::new(&[[[1u32, 2, 3]]], &Device::Cpu).unwrap();
        assert!(matches!(
            iv(Mode::Add, &[E1], 1.0).apply(&ints, 0),
            Err(InterveneError::BadActivation { .. })
        ));
    }

    #[test]
    fn empty_activation_is_left_alone() {
        let h = Tensor::zeros((1, 0, 3), DType::F32, &Device::Cpu).unwrap();
        let out = iv(Mode::Steer, &[E1], 1.0).apply(&h, 4).unwrap();
        assert_eq!(out.hidden.unwrap().dims(), &[1, 0, 3]);
        assert!(out.projections.is_empty() && out.applied.is_empty());
    }

    #[test]
    fn direction_checks_its_values() {
        let nan = Tensor::new(&[[0f32, 1.0], [f32::NAN, 0.0]], &Device::Cpu).unwrap();
        let err = Direction::new("f.npy", "", "", None, &nan).unwrap_err();
        assert!(err.to_string().contains("row 1, index 0"), "{err}");
        // Picking the finite row avoids the bad one.
        let d = Direction::new("f.npy", "", "", Some(0), &nan).unwrap();
        assert_eq!((d.rows(), d.width(), d.norms.clone()), (1, 2, vec![1.0]));
        let err = Direction::new("f.npy", "", "", Some(2), &nan).unwrap_err();
        assert!(err.to_string().contains("row=2"), "{err}");
        let cube = Tensor::zeros((1, 1, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(Direction::new("f.npy", "", "", None, &cube).is_err());
        let empty = Tensor::zeros((0, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(Direction::new("f.npy", "", "", None, &empty).is_err());
    }

    #[test]
    fn names_and_record() {
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        let err = "remove".parse::<Mode>().unwrap_err().to_string();
        assert!(
            err.contains("`remove`") && err.contains("subspace_remove"),
            "{err}"
        );
        assert!(Mode::Clamp.intervenes() && !Mode::SubspaceProject.intervenes());
        assert!(Mode::SubspaceAdd.subspace() && !Mode::Steer.subspace());

        for p in ["all", "last", "3..7", "5.."] {
            assert_eq!(p.parse::<Positions>().unwrap().to_string(), p);
        }

        let mut s = iv(Mode::Subtract, &[&[0.0, 2.0, 0.0]], 0.5);
        s.layer = 4;
        s.positions = Positions::Range {
            start: 2,
            end: None,
        };
        s.condition = Some(Condition {
            when: When::Below,
            threshold: -1.0,
        });
        let r = s.record();
        assert_eq!(r["layer"], 4);
        assert_eq!(r["mode"], "subtract");
        assert_eq!(r["alpha"], 0.5);
        assert!(r["value"].is_null());
        assert_eq!(r["positions"]["range"]["start"], 2);
        assert_eq!(r["condition"]["when"], "below");
        assert_eq!(r["condition"]["threshold"], -1.0);
        assert_eq!(r["direction"]["rows"], 1);
        assert_eq!(r["direction"]["width"], 3);
        assert_eq!(r["direction"]["norms"][0], 2.0);
        assert_eq!(r["direction"]["tensor"], "t");
        assert_eq!(r["direction"]["source"], "test.safetensors");
    }
}
