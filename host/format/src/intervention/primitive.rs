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
//! conditional on the projection before the change.
//!
//! This module holds the intervention as a backend-neutral value: the mode,
//! scale, positions, condition and the direction's `f32` values. Each
//! executor applies it with its own tensor ops in every decode step (the
//! candle backend: `executor::candle::intervene`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

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
    /// Measure the projection `h·d` per token; `h` is unchanged (`project`).
    Project,
    /// Subtract the component along `d`, scaled: `h − α·(h·d)·d`; with
    /// α = 1 and a unit `d` it removes it (`subtract`).
    Subtract,
    /// Add the component along `d` again, scaled: `h + α·(h·d)·d`
    /// (`add`).
    Add,
    /// Measure the coordinates `c = h·Bᵀ` in every basis row; `h` is
    /// unchanged (`subspace_project`).
    SubspaceProject,
    /// Subtract the basis rows weighted by the coordinates: `h − α·c·B`;
    /// with α = 1 and orthonormal rows it removes the span's component
    /// (`subspace_remove`).
    SubspaceRemove,
    /// Add the basis rows weighted by the coordinates: `h + α·c·B`
    /// (`subspace_add`).
    SubspaceAdd,
    /// Move the component along a unit `d` toward the target `v`:
    /// `h + α·(v − h·d)·d` (`clamp`).
    Clamp,
    /// Add the direction itself, scaled: `h + α·d`, whatever `h` holds
    /// (`steer`).
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
    pub fn names() -> String {
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
    /// Every token of every call (`all`; the default).
    #[default]
    All,
    /// The last token of each call: the final prompt token in prefill, and
    /// the one new token in every decode step.
    Last,
    /// Positions `start..end`, `end` exclusive; no `end` runs to the end of
    /// the sequence, generated tokens included.
    Range {
        /// The first position selected.
        start: usize,
        /// The first position past the range; `None` for no end.
        end: Option<usize>,
    },
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
pub fn parse_positions(s: &str) -> Result<Positions, String> {
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
pub fn parse_when(s: &str) -> Result<When, String> {
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
    /// Which side of the threshold the score must be on.
    pub when: When,
    /// The threshold the score is compared with (strictly).
    pub threshold: f32,
}

/// A direction, or a basis of several, as read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Direction {
    /// The file path as given.
    pub source: String,
    /// The tensor's name inside the file (empty for a `.npy` array).
    pub tensor: String,
    /// The row picked from a `[k, d_model]` tensor, if one was.
    pub row: Option<usize>,
    /// sha256 (hex) of the file's bytes, for provenance.
    pub file_sha256: String,
    /// `[k, d_model]` row-major, used as given (not normalised).
    pub basis: Vec<f32>,
    rows: usize,
    width: usize,
    /// The L2 norm of each basis row.
    pub norms: Vec<f32>,
}

impl Direction {
    /// A direction from `values` of `shape` (`[d_model]`, one row, or
    /// `[k, d_model]`), keeping only row `row` when given. Refuses empty
    /// or non-finite values; computes the row norms.
    pub fn new(
        source: impl Into<String>,
        tensor: impl Into<String>,
        file_sha256: impl Into<String>,
        row: Option<usize>,
        values: &[f32],
        shape: &[usize],
    ) -> Result<Self, InterveneError> {
        let (source, tensor) = (source.into(), tensor.into());
        let bad = |problem: String| InterveneError::BadTensor {
            path: PathBuf::from(&source),
            tensor: tensor.clone(),
            problem,
        };
        let (k, d) = match *shape {
            [d] => (1, d),
            [k, d] => (k, d),
            ref dims => {
                return Err(bad(format!(
                    "has shape {dims:?}; a direction is [d_model] and a basis is [k, d_model]"
                )));
            }
        };
        if k.checked_mul(d) != Some(values.len()) {
            return Err(bad(format!(
                "has shape {shape:?} but {} values",
                values.len()
            )));
        }
        if k == 0 || d == 0 {
            return Err(bad(format!("is empty (shape {shape:?})")));
        }
        let basis: Vec<f32> = match row {
            Some(r) if r >= k => {
                return Err(bad(format!(
                    "has {k} row(s); row={r} is out of range, pick 0 to {}",
                    k - 1
                )));
            }
            Some(r) => values[r * d..(r + 1) * d].to_vec(),
            None => values.to_vec(),
        };
        let mut norms = Vec::with_capacity(basis.len() / d);
        for (i, r) in basis.chunks(d).enumerate() {
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
            rows: norms.len(),
            width: d,
            basis,
            norms,
        })
    }

    /// How many directions the basis holds (`k`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The width of each direction (`d_model`).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Row `i` of the basis.
    pub fn row_values(&self, i: usize) -> &[f32] {
        &self.basis[i * self.width..(i + 1) * self.width]
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
        let scale = 1.0 / f64::from(self.norms[0]);
        let scaled: Vec<f32> = self
            .basis
            .iter()
            .map(|&v| (f64::from(v) * scale) as f32)
            .collect();
        Direction::new(
            &self.source,
            &self.tensor,
            &self.file_sha256,
            None,
            &scaled,
            &[self.width],
        )
        .map(|d| Direction { row: self.row, ..d })
    }
}

/// One intervention at one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Intervention {
    /// The transformer block (0-based) whose output the intervention acts on.
    pub layer: usize,
    /// What to do along the direction.
    pub mode: Mode,
    /// The direction, or the basis for subspace modes.
    pub direction: Direction,
    /// The scale α (1.0 on the command line unless given); must be finite.
    pub alpha: f32,
    /// The clamp target; only clamp takes one.
    pub value: Option<f32>,
    /// The tokens it touches.
    pub positions: Positions,
    /// A threshold on each token's score; `None` touches every selected token.
    pub condition: Option<Condition>,
}

impl Intervention {
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
    use super::*;

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

    #[test]
    fn direction_checks_its_values() {
        let nan = [0f32, 1.0, f32::NAN, 0.0];
        let err = Direction::new("f.npy", "", "", None, &nan, &[2, 2]).unwrap_err();
        assert!(err.to_string().contains("row 1, index 0"), "{err}");
        // Picking the finite row avoids the bad one.
        let d = Direction::new("f.npy", "", "", Some(0), &nan, &[2, 2]).unwrap();
        assert_eq!((d.rows(), d.width(), d.norms.clone()), (1, 2, vec![1.0]));
        assert_eq!(d.row_values(0), [0.0, 1.0]);
        let err = Direction::new("f.npy", "", "", Some(2), &nan, &[2, 2]).unwrap_err();
        assert!(err.to_string().contains("row=2"), "{err}");
        assert!(Direction::new("f.npy", "", "", None, &[0.0, 0.0], &[1, 1, 2]).is_err());
        assert!(Direction::new("f.npy", "", "", None, &[], &[0, 2]).is_err());
        assert!(Direction::new("f.npy", "", "", None, &[1.0], &[2]).is_err());
    }

    #[test]
    fn unit_scales_one_row_and_keeps_its_provenance() {
        let d = Direction::new("f.npy", "", "ab", Some(1), &[9.0, 9.0, 3.0, 4.0], &[2, 2])
            .unwrap()
            .unit()
            .unwrap();
        assert_eq!(d.basis, [0.6, 0.8]);
        assert_eq!((d.row, d.file_sha256.as_str()), (Some(1), "ab"));
        assert!((d.norms[0] - 1.0).abs() < 1e-6);
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
