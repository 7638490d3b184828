//! Intervention policies in the forward pass: after a watched block, the
//! host projects each token's activation onto the policy's directions, the
//! policy decides, and the host applies the ops it returned with the
//! activation primitive. Plugins implement [`StepPolicy`] through
//! `plugin::policy::PolicyRun`; the model never sees the plugin.

use super::primitive::{Direction, Intervention, Mode, Positions};

/// Per-token projections of one layer's activation onto one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub layer: usize,
    pub direction: String,
    /// Absolute position of the first token.
    pub offset: usize,
    pub projections: Vec<f32>,
}

/// One checked op, ready to become [`Intervention`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyOp {
    pub layer: usize,
    pub direction: String,
    pub mode: Mode,
    pub alpha: f32,
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
    pub name: String,
    pub layers: Vec<usize>,
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
    pub ops: u64,
    /// Token positions changed, counted once per op.
    pub tokens_changed_prefill: u64,
    pub tokens_changed_decode: u64,
    /// The first ops, as text (at most [`PolicyLog::KEEP`]).
    pub first_ops: Vec<String>,
}

impl PolicyLog {
    pub const KEEP: usize = 32;

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
