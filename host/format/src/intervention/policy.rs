//! Intervention policies in the forward pass: after a watched block, the
//! host projects each token's activation onto the policy's directions, the
//! policy decides, and the host applies the ops it returned with the
//! activation primitive. Plugins implement [`StepPolicy`] through
//! `plugin::policy::PolicyRun`; the model never sees the plugin.

use super::primitive::{Direction, Intervention, Mode, Positions};

/// Per-token projections of one layer's activation onto one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The transformer block whose output was observed.
    pub layer: usize,
    /// The watched direction's name ([`Watch::name`]).
    pub direction: String,
    /// Absolute position of the first token.
    pub offset: usize,
    /// The projection `h·d` of each token of this call, in order: entry
    /// `i` is the token at absolute position `offset + i`.
    pub projections: Vec<f32>,
}

/// One checked op, ready to become [`Intervention`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyOp {
    /// The block whose output the op changes; one the direction is
    /// watched at.
    pub layer: usize,
    /// The watched direction's name ([`Watch::name`]).
    pub direction: String,
    /// What to do along the direction.
    pub mode: Mode,
    /// The scale α: finite, at most 10⁴ in magnitude.
    pub alpha: f32,
    /// The clamp target: present exactly when the mode is clamp.
    pub value: Option<f32>,
    /// Absolute token positions (sorted, unique).
    pub positions: Vec<usize>,
}

impl PolicyOp {
    /// The native interventions that carry out this op: one per run of
    /// consecutive positions.
    pub fn interventions(&self, direction: &Direction) -> Vec<Intervention> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &p in &self.positions {
            match runs.last_mut() {
                Some((_, end)) if *end == p => *end = p + 1,
                _ => runs.push((p, p + 1)),
            }
        }
        runs.into_iter()
            .map(|(start, end)| Intervention {
                layer: self.layer,
                mode: self.mode,
                direction: direction.clone(),
                alpha: self.alpha,
                value: self.value,
                positions: Positions::Range {
                    start,
                    end: Some(end),
                },
                condition: None,
            })
            .collect()
    }
}

/// A direction a policy watches, bound to its vector (unit norm).
#[derive(Debug, Clone)]
pub struct Watch {
    /// The name the policy gives the direction; observations and ops refer
    /// to it by this name.
    pub name: String,
    /// The blocks after which the direction is observed.
    pub layers: Vec<usize>,
    /// The direction's values, scaled to unit norm.
    pub direction: Direction,
}

/// Decides interventions from observations, step by step.
pub trait StepPolicy {
    /// Who decides, for the trace's record (`name version`).
    fn describe(&self) -> String;
    /// The directions watched, with their layers.
    fn watches(&self) -> &[Watch];
    /// The ops for the observations of one block in one pass.
    fn decide(&mut self, observations: &[Observation]) -> Result<Vec<PolicyOp>, String>;
}

/// What a policy did over a run, for the trace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PolicyLog {
    /// Calls to `decide` (one per watched block per pass).
    pub decisions: u64,
    /// Ops the policy returned and the host applied.
    pub ops: u64,
    /// Token positions changed, counted once per op.
    pub tokens_changed_prefill: u64,
    /// Token positions changed during decode steps, counted once per op.
    pub tokens_changed_decode: u64,
    /// The first ops, as text (at most [`PolicyLog::KEEP`]).
    pub first_ops: Vec<String>,
}

impl PolicyLog {
    /// How many ops [`PolicyLog::first_ops`] keeps as text.
    pub const KEEP: usize = 32;

    /// Counts one applied op and its positions (under prefill or decode, as
    /// `prefill` says), and keeps its text while fewer than
    /// [`PolicyLog::KEEP`] are kept.
    pub fn add(&mut self, op: &PolicyOp, prefill: bool) {
        self.ops += 1;
        let n = op.positions.len() as u64;
        if prefill {
            self.tokens_changed_prefill += n;
        } else {
            self.tokens_changed_decode += n;
        }
        if self.first_ops.len() < Self::KEEP {
            let value = op.value.map(|v| format!(" value {v}")).unwrap_or_default();
            self.first_ops.push(format!(
                "layer {} {} {} alpha {}{value} at {:?}",
                op.layer,
                op.mode.as_str(),
                op.direction,
                op.alpha,
                op.positions
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_x() -> Direction {
        Direction::new("x", "direction", "00", None, &[1.0, 0.0], &[2]).unwrap()
    }

    #[test]
    fn ops_split_into_runs_of_consecutive_positions() {
        let op = PolicyOp {
            layer: 0,
            direction: "x".into(),
            mode: Mode::Subtract,
            alpha: 1.0,
            value: None,
            positions: vec![1, 2, 4],
        };
        let ivs = op.interventions(&unit_x());
        let ranges: Vec<Positions> = ivs.iter().map(|i| i.positions).collect();
        assert_eq!(
            ranges,
            [
                Positions::Range {
                    start: 1,
                    end: Some(3)
                },
                Positions::Range {
                    start: 4,
                    end: Some(5)
                }
            ]
        );
    }
}
