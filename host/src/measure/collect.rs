//! Running every prompt once: the residual stream after every block at the
//! last prompt token, and the unablated next-token log-probabilities there.

use serde::{Deserialize, Serialize};

use super::{MeasureError, MeasureOptions, Phase, Progress};
use crate::config::Suite;
use crate::executor::{LocalBackend, LocalModel};

/// A token whose probability counts as refusing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalToken {
    /// The token id.
    pub id: u32,
    /// The tokenizer's name for it (`ĠI` for " I" in byte-level BPE).
    pub token: String,
    /// The first text it was taken from.
    pub text: String,
}

/// The first token of each text, tokenized without special tokens,
/// deduplicated by id in the order given.
pub fn refusal_tokens(
    exec: &LocalBackend,
    texts: &[String],
) -> Result<Vec<RefusalToken>, MeasureError> {
    let mut out: Vec<RefusalToken> = Vec::new();
    for text in texts {
        // `encode`, not `encode_raw`: a BOS would be the "first token".
        let ids = exec.encode_plain(text)?;
        let Some(&id) = ids.first() else {
            return Err(MeasureError::EmptyRefusalText(text.clone()));
        };
        if out.iter().all(|t| t.id != id) {
            out.push(RefusalToken {
                id,
                token: exec.token_name(id).unwrap_or_default(),
                text: text.clone(),
            });
        }
    }
    Ok(out)
}

/// The refusal score of one next-token distribution: `log(p) − log(1 − p)`
/// where `p` is the total probability of `ids`, computed from the
/// log-probabilities in f64 so that neither tail rounds to 0 or 1.
pub fn refusal_score(logprobs: &[f32], ids: &[u32]) -> f64 {
    let lps: Vec<f64> = ids
        .iter()
        .filter_map(|&i| logprobs.get(i as usize))
        .map(|&l| f64::from(l))
        .collect();
    let max = lps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let log_p = (max + lps.iter().map(|l| (l - max).exp()).sum::<f64>().ln()).min(0.0);
    // log(1 − p) = log(−expm1(log p)), exact near both p → 0 and p → 1.
    let log_not = (-log_p.exp_m1()).max(f64::MIN_POSITIVE).ln();
    log_p - log_not
}

/// Log-softmax of one row of logits, computed in f64 and stored as f32.
pub(super) fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits
        .iter()
        .map(|&x| f64::from(x))
        .fold(f64::NEG_INFINITY, f64::max);
    let lse = max
        + logits
            .iter()
            .map(|&x| (f64::from(x) - max).exp())
            .sum::<f64>()
            .ln();
    logits
        .iter()
        .map(|&x| (f64::from(x) - lse) as f32)
        .collect()
}

/// Prompts run in one batched pass (as a pipeline side's default `batch`).
pub(super) const MEASURE_BATCH: usize = crate::executor::candle::DEFAULT_BATCH;

/// One prompt, tokenized.
pub(super) struct Prompt {
    pub id: String,
    pub ids: Vec<u32>,
    pub holdout: bool,
}

/// A prompt set, tokenized and split.
pub(super) struct Set {
    pub name: &'static str,
    pub prompts: Vec<Prompt>,
}

impl Set {
    /// Tokenizes every prompt of `suite` (before any forward pass, so a
    /// template error fails at once); `holdout[i]` says where prompt `i` goes.
    pub fn new(
        exec: &LocalBackend,
        suite: &Suite,
        name: &'static str,
        holdout: &[bool],
        options: &MeasureOptions,
    ) -> Result<Set, MeasureError> {
        let prompts = suite
            .prompts
            .iter()
            .zip(holdout)
            .map(|(p, &holdout)| {
                let ids = exec.tokenize(&p.text, &options.prompt).map_err(|source| {
                    MeasureError::Prompt {
                        set: name,
                        id: p.id.clone(),
                        source: Box::new(source),
                    }
                })?;
                Ok(Prompt {
                    id: p.id.clone(),
                    ids,
                    holdout,
                })
            })
            .collect::<Result<_, MeasureError>>()?;
        Ok(Set { name, prompts })
    }

    pub fn holdout(&self) -> impl Iterator<Item = &Prompt> {
        self.prompts.iter().filter(|p| p.holdout)
    }
}

/// What the collection pass yields.
pub(super) struct Collected {
    /// Every layer's unit direction, `[layers][hidden]`.
    pub directions: Vec<Vec<f32>>,
    /// Every layer's difference-of-means norm.
    pub norms: Vec<f64>,
    /// Unablated next-token log-probabilities of the held-out prompts, in
    /// set order.
    pub harmful_holdout_logprobs: Vec<Vec<f32>>,
    pub harmless_holdout_logprobs: Vec<Vec<f32>>,
}

/// Per-layer sums (f64) of the train prompts' activations, and the
/// held-out prompts' log-probabilities.
struct Sums {
    sum: Vec<Vec<f64>>,
    count: usize,
    holdout_logprobs: Vec<Vec<f32>>,
}

/// Stops a measurement the user interrupted (nothing is written).
pub(super) fn stop_if_asked() -> Result<(), MeasureError> {
    match crate::interrupt::requested() {
        true => Err(MeasureError::Interrupted(crate::interrupt::Interrupted {
            at: "while measuring the refusal direction".into(),
            kept: Vec::new(),
            cache: std::path::PathBuf::new(),
        })),
        false => Ok(()),
    }
}

fn run_set(
    exec: &LocalBackend,
    set: &Set,
    done: &mut usize,
    total: usize,
    progress: &dyn Fn(Progress),
) -> Result<Sums, MeasureError> {
    let d = exec.dims();
    let mut sums = Sums {
        sum: vec![vec![0.0; d.hidden]; d.layers],
        count: 0,
        holdout_logprobs: Vec::new(),
    };
    // In batches (their shared chat-template opening runs once per batch).
    for batch in set.prompts.chunks(MEASURE_BATCH) {
        stop_if_asked()?;
        let ids: Vec<&[u32]> = batch.iter().map(|p| p.ids.as_slice()).collect();
        for (p, state) in batch.iter().zip(exec.last_token_states(&[], &ids)) {
            let state = state.map_err(|e| MeasureError::Prompt {
                set: set.name,
                id: p.id.clone(),
                source: Box::new(e),
            })?;
            let (acts, logits) = (state.residuals, state.logits);
            if p.holdout {
                sums.holdout_logprobs.push(log_softmax(&logits));
            } else {
                for (acc, row) in sums.sum.iter_mut().zip(&acts) {
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a += f64::from(x);
                    }
                }
                sums.count += 1;
            }
            *done += 1;
        }
        progress(Progress {
            phase: Phase::Collect,
            done: *done,
            total,
        });
    }
    Ok(sums)
}

/// Runs every prompt of both sets once; the per-layer directions from the
/// train parts and the baseline log-probabilities of the held-out parts.
pub(super) fn collect(
    exec: &LocalBackend,
    harmful: &Set,
    harmless: &Set,
    progress: &dyn Fn(Progress),
) -> Result<Collected, MeasureError> {
    let total = harmful.prompts.len() + harmless.prompts.len();
    let mut done = 0;
    let h = run_set(exec, harmful, &mut done, total, progress)?;
    let s = run_set(exec, harmless, &mut done, total, progress)?;
    let mut directions = Vec::with_capacity(h.sum.len());
    let mut norms = Vec::with_capacity(h.sum.len());
    for (layer, (hs, ss)) in h.sum.iter().zip(&s.sum).enumerate() {
        let diff: Vec<f64> = hs
            .iter()
            .zip(ss)
            .map(|(a, b)| a / h.count as f64 - b / s.count as f64)
            .collect();
        let norm = diff.iter().map(|x| x * x).sum::<f64>().sqrt();
        if !norm.is_finite() {
            return Err(MeasureError::NotFinite {
                what: "the difference of means",
                layer,
                value: norm,
            });
        }
        if norm == 0.0 {
            return Err(MeasureError::Degenerate { layer, norm });
        }
        directions.push(diff.iter().map(|x| (x / norm) as f32).collect());
        norms.push(norm);
    }
    Ok(Collected {
        directions,
        norms,
        harmful_holdout_logprobs: h.holdout_logprobs,
        harmless_holdout_logprobs: s.holdout_logprobs,
    })
}
