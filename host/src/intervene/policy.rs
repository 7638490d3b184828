//! Intervention policies in the forward pass: after a watched block, the
//! host projects each token's activation onto the policy's directions, the
//! policy decides, and the host applies the ops it returned with the
//! activation primitive. Plugins implement [`StepPolicy`] through
//! `plugin::policy::PolicyRun`; the model never sees the plugin.

use candle_core::Tensor;

use super::InterveneError;
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

    fn add(&mut self, op: &PolicyOp, prefill: bool) {
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

/// Runs `policy` after block `layer` on `h` (`[1, tokens, d_model]`):
/// observes, decides, applies. Returns the new activation if an op changed it.
pub fn step(
    policy: &mut dyn StepPolicy,
    log: &mut PolicyLog,
    layer: usize,
    offset: usize,
    prefill: bool,
    h: &Tensor,
) -> Result<Option<Tensor>, InterveneError> {
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
        let out = probe.apply(h, offset)?;
        observations.push(Observation {
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
    let ops = policy
        .decide(&observations)
        .map_err(|e| InterveneError::Policy(format!("policy {}: {e}", policy.describe())))?;
    let mut current: Option<Tensor> = None;
    for op in &ops {
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
            let out = iv.apply(current.as_ref().unwrap_or(h), offset)?;
            if let Some(new) = out.hidden {
                current = Some(new);
            }
        }
        log.add(op, prefill);
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    fn unit_x() -> Direction {
        let v = Tensor::new(&[1f32, 0.0], &Device::Cpu).unwrap();
        Direction::new("x", "direction", "00", None, &v).unwrap()
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
            step(&mut gate, &mut log, 1, 5, true, &h).unwrap().is_none(),
            "layer 1 is not watched"
        );
        let out = step(&mut gate, &mut log, 2, 5, true, &h).unwrap().unwrap();
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
}
