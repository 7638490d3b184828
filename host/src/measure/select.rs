//! The held-out split, the candidate layers, and choosing one: each
//! candidate direction ablated at every layer, scored on held-out prompts.

use super::collect::{Collected, MEASURE_BATCH, Set, log_softmax, refusal_score};
use super::{LayerScore, MeasureError, Phase, Progress};
use crate::executor::{ExecutorError, LocalBackend, LocalModel};
use crate::intervene::{Direction, Intervention, Mode, Positions};
use crate::report::stats::kl_divergence;

/// The layers chosen from by default on a model of `layers` blocks: 20% to
/// 80% of the depth, both ends included (6 to 24 of SmolLM2's 30). Early
/// layers hold little of the instruction's meaning yet, and a direction
/// from the last layers acts on too few blocks to change the answer.
pub fn default_candidates(layers: usize) -> Vec<usize> {
    if layers == 0 {
        return Vec::new();
    }
    let at = |share: f64| ((share * layers as f64).round() as usize).min(layers - 1);
    let (lo, hi) = (at(0.2), at(0.8));
    (lo.min(hi)..=hi).collect()
}

/// The indices of a set of `n` prompts held out for choosing the layer:
/// `round(n × fraction)` of them (at least 1, at most `n − 1`), evenly
/// spaced, the middle of each stride (every fourth prompt, from the third,
/// for 0.25). Deterministic: the same `n` and `fraction` give the same
/// split, whatever the prompts say. `set` names the set in the error.
pub fn holdout_split(
    set: &'static str,
    n: usize,
    fraction: f64,
) -> Result<Vec<usize>, MeasureError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(MeasureError::Holdout(fraction));
    }
    if n < 2 {
        return Err(MeasureError::TooFewPrompts { set, count: n });
    }
    let h = ((n as f64 * fraction).round() as usize).clamp(1, n - 1);
    // Consecutive indices differ by n / h > 1, so they are distinct and < n.
    Ok((0..h).map(|j| (2 * j + 1) * n / (2 * h)).collect())
}

/// Each candidate's unit direction ablated at every layer (subtract, α = 1,
/// every position): the mean refusal score on the held-out harmful prompts
/// and the mean KL(original ‖ ablated) on the held-out harmless ones.
pub(super) fn score_candidates(
    exec: &LocalBackend,
    candidates: &[usize],
    collected: &Collected,
    harmful: &Set,
    harmless: &Set,
    refusal_ids: &[u32],
    progress: &dyn Fn(Progress),
) -> Result<Vec<LayerScore>, MeasureError> {
    let d = exec.dims();
    let (harmful_held, harmless_held): (Vec<_>, Vec<_>) =
        (harmful.holdout().collect(), harmless.holdout().collect());
    let total = candidates.len() * (harmful_held.len() + harmless_held.len());
    // Both sets' held-out prompts, in batches: their shared chat-template
    // opening (SmolLM2's default system prompt, about two thirds of each
    // prompt) runs once per batch, and each prompt's rest after it. The
    // ablation acts at every position alike, so this is the same
    // computation (on the CPU the same bits: docs/measure.md).
    let held: Vec<(&'static str, &super::collect::Prompt)> = harmful_held
        .iter()
        .map(|p| (harmful.name, *p))
        .chain(harmless_held.iter().map(|p| (harmless.name, *p)))
        .collect();
    let mut done = 0;
    let mut tick = || {
        done += 1;
        progress(Progress {
            phase: Phase::Select,
            done,
            total,
        });
    };
    let mut scores = Vec::with_capacity(candidates.len());
    for &layer in candidates {
        super::collect::stop_if_asked()?;
        let direction = Direction::new(
            format!("measured refusal direction, layer {layer}"),
            "per_layer",
            "",
            None,
            &collected.directions[layer],
            &[d.hidden],
        )
        .map_err(ExecutorError::from)?;
        // After every block, so no block downstream of the first sees the
        // component (the primitive has no hook before block 0).
        let ablate: Vec<Intervention> = (0..d.layers)
            .map(|at| Intervention {
                layer: at,
                mode: Mode::Subtract,
                direction: direction.clone(),
                alpha: 1.0,
                value: None,
                positions: Positions::All,
                condition: None,
            })
            .collect();
        let mut logprobs: Vec<Vec<f32>> = Vec::with_capacity(held.len());
        for batch in held.chunks(MEASURE_BATCH) {
            super::collect::stop_if_asked()?;
            let ids: Vec<&[u32]> = batch.iter().map(|(_, p)| p.ids.as_slice()).collect();
            for ((set, p), state) in batch.iter().zip(exec.last_token_states(&ablate, &ids)) {
                let state = state.map_err(|source| MeasureError::Prompt {
                    set,
                    id: p.id.clone(),
                    source: Box::new(source),
                })?;
                logprobs.push(log_softmax(&state.logits));
                tick();
            }
        }
        let (harmful_lp, harmless_lp) = logprobs.split_at(harmful_held.len());
        let refusal: f64 = harmful_lp
            .iter()
            .map(|lp| refusal_score(lp, refusal_ids))
            .sum();
        let mut kl = 0.0;
        for (lp, base) in harmless_lp.iter().zip(&collected.harmless_holdout_logprobs) {
            kl += kl_divergence(base, lp).ok_or(MeasureError::NotFinite {
                what: "the ablated next-token distribution",
                layer,
                value: f64::NAN,
            })?;
        }
        let score = LayerScore {
            layer,
            norm: collected.norms[layer],
            refusal_score: refusal / harmful_held.len() as f64,
            kl: kl / harmless_held.len() as f64,
        };
        tracing::debug!(
            "layer {layer}: norm {:.4}, ablated refusal score {:.4}, harmless KL {:.5}",
            score.norm,
            score.refusal_score,
            score.kl
        );
        scores.push(score);
    }
    Ok(scores)
}

/// The candidate with the lowest refusal score among those whose KL is at
/// most `max_kl` (the lower layer on a tie); else the smallest KL seen and
/// its layer.
pub(super) fn choose(scores: &[LayerScore], max_kl: f64) -> Result<usize, (f64, usize)> {
    scores
        .iter()
        .filter(|s| s.kl <= max_kl)
        .min_by(|a, b| a.refusal_score.total_cmp(&b.refusal_score))
        .map(|s| s.layer)
        .ok_or_else(|| {
            scores
                .iter()
                .min_by(|a, b| a.kl.total_cmp(&b.kl))
                .map_or((f64::NAN, 0), |s| (s.kl, s.layer))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_candidates_span_20_to_80_percent() {
        assert_eq!(default_candidates(30), (6..=24).collect::<Vec<_>>());
        assert_eq!(default_candidates(3), [1, 2]);
        assert_eq!(default_candidates(1), [0]);
        assert!(default_candidates(0).is_empty());
    }

    #[test]
    fn holdout_is_evenly_spaced_and_bounded() {
        assert_eq!(holdout_split("x", 20, 0.25).unwrap(), [2, 6, 10, 14, 18]);
        assert_eq!(holdout_split("x", 2, 0.25).unwrap(), [1]);
        assert_eq!(holdout_split("x", 3, 0.9).unwrap(), [0, 2]);
        assert!(matches!(
            holdout_split("x", 1, 0.25),
            Err(MeasureError::TooFewPrompts { count: 1, .. })
        ));
        for f in [0.0, 1.0, f64::NAN, -0.5] {
            assert!(matches!(
                holdout_split("x", 10, f),
                Err(MeasureError::Holdout(_))
            ));
        }
    }

    fn score(layer: usize, refusal_score: f64, kl: f64) -> LayerScore {
        LayerScore {
            layer,
            norm: 1.0,
            refusal_score,
            kl,
        }
    }

    #[test]
    fn choose_takes_the_lowest_refusal_within_the_bound() {
        let s = [
            score(1, -1.0, 0.05),
            score(2, -3.0, 0.5),
            score(3, -2.0, 0.1),
        ];
        assert_eq!(choose(&s, 0.1), Ok(3));
        assert_eq!(choose(&s, 1.0), Ok(2));
        assert_eq!(choose(&s, 0.01), Err((0.05, 1)));
    }
}
