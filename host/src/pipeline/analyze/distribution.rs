//! The next-token distribution shift: the KL between the two sides at
//! every position of the baseline's continuation, read from the bundles'
//! recorded log-probability rows (so a replay gives the live run's KL),
//! and the reference continuation the candidate scores.

use std::collections::BTreeMap;

use crate::bundle::Bundle;
use crate::config::{Prompt, Suite};
use crate::executor::ReferenceContinuation;
use crate::pipeline::sides::SideName;
use crate::report::document::{DistributionShift, KlPositions, PromptKl};
use crate::trace::{ArtifactData, ArtifactKind as K, Role, Trace};

use super::*;

/// One prompt's KL figures from its per-position rows (the baseline's
/// top-k log-probabilities and the candidate's at the same tokens), with
/// the per-position KL and the baseline's mass outside the kept tokens.
pub fn prompt_kl(
    p: &Prompt,
    base_rows: &[Vec<f32>],
    cand_rows: &[Vec<f32>],
) -> Option<(PromptKl, Vec<f64>, Vec<f64>)> {
    if base_rows.len() != cand_rows.len() {
        return None;
    }
    let pairs = base_rows
        .iter()
        .zip(cand_rows)
        .map(|(b, c)| crate::report::stats::kl_divergence_with_rest(b, c))
        .collect::<Option<Vec<(f64, f64)>>>()?;
    prompt_kl_of(p, pairs)
}

/// One prompt's KL figures from its per-position (KL, baseline mass
/// outside the compared tokens) pairs.
fn prompt_kl_of(p: &Prompt, pairs: Vec<PositionKl>) -> Option<(PromptKl, Vec<f64>, Vec<f64>)> {
    let (per, rest): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
    let first = *per.first()?;
    Some((
        PromptKl {
            prompt_id: p.id.clone(),
            category: p.category.clone(),
            first_token_kl: first,
            mean_kl: per.iter().sum::<f64>() / per.len() as f64,
            positions: per.len(),
        },
        per,
        rest,
    ))
}

/// The continuation a trace generated, with its top tokens at each
/// position: what the other side is scored on for the KL. `None` when the
/// trace holds no top-k rows; an error when they cannot be read.
pub fn continuation_reference(
    bundle: &Bundle,
    t: &Trace,
) -> anyhow::Result<Option<ReferenceContinuation>> {
    let Some(support) = id_rows(bundle, SideName::Baseline, t, Role::ContinuationTopK)? else {
        return Ok(None);
    };
    let completion = tokens_of(t, Role::Completion).unwrap_or_default();
    Ok(Some(ReferenceContinuation::new(
        t.id.clone(),
        completion,
        support,
    )))
}

/// The `[positions, k]` token-id rows of the tokens artifact of `t` with
/// `role`; `None` when the trace has none.
fn id_rows(
    bundle: &Bundle,
    side: SideName,
    t: &Trace,
    role: Role,
) -> anyhow::Result<Option<Vec<Vec<u32>>>> {
    let Some(a) = t.artifacts_of(K::Tokens).find(|a| a.role() == Some(role)) else {
        return Ok(None);
    };
    let (r, k, what) = table(bundle, side, t, a, "token ids")?;
    if r.dtype != crate::trace::DType::U32 {
        anyhow::bail!("{what} is {:?}, not u32 token ids", r.dtype);
    }
    let ids: Vec<u32> = r
        .bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Some(ids.chunks(k).map(<[u32]>::to_vec).collect()))
}

/// Per position, the KL lower bound and the baseline's mass outside the
/// shared tokens when each side kept its own top k (`a`: the baseline's
/// ids and log-probabilities, `b`: the candidate's), over the first
/// `positions` positions (`stats::kl_lower_bound_own_top_k`).
fn on_own_top_k(
    a_ids: &[Vec<u32>],
    a_rows: &[Vec<f32>],
    b_ids: &[Vec<u32>],
    b_rows: &[Vec<f32>],
    positions: usize,
) -> Option<Vec<PositionKl>> {
    (0..positions)
        .map(|i| {
            let mut shared = Vec::new();
            let mut p_only = Vec::new();
            for (id, &a) in a_ids[i].iter().zip(&a_rows[i]) {
                match b_ids[i].iter().position(|x| x == id) {
                    Some(m) => shared.push((a, b_rows[i][m])),
                    None => p_only.push(a),
                }
            }
            crate::report::stats::kl_lower_bound_own_top_k(&shared, &p_only, &b_rows[i])
        })
        .collect()
}

/// One position's KL and the baseline's mass outside the compared tokens.
type PositionKl = (f64, f64);

/// Log-probability rows, one per position.
type KlRows = Vec<Vec<f32>>;

/// The `[positions, k]` rows of the one logprobs artifact of `t` with
/// `role`, read from `bundle`; `None` when the trace has none.
fn kl_rows(
    bundle: &Bundle,
    side: SideName,
    t: &Trace,
    role: Role,
) -> anyhow::Result<Option<(BTreeMap<String, String>, KlRows)>> {
    let Some(a) = t.artifacts_of(K::Logprobs).find(|a| {
        a.role() == Some(role) && matches!(a.data, ArtifactData::Tensor { raw: true, .. })
    }) else {
        return Ok(None);
    };
    let (r, k, _) = table(bundle, side, t, a, "logprobs")?;
    let v = r.to_f32_vec();
    Ok(Some((
        a.labels.clone(),
        v.chunks(k).map(<[f32]>::to_vec).collect(),
    )))
}

/// KL(baseline ‖ candidate) of the next-token distributions along the
/// baseline's continuation, from what the traces recorded: the baseline's
/// top-k log-probabilities at each position it sampled, and the
/// candidate's at the same tokens, teacher-forced after its own prompt.
/// `Ok(Err(why))` when the traces cannot give a KL; an error when recorded
/// evidence is damaged.
pub fn distribution(
    suite: &Suite,
    baseline: (&[&Trace], &Bundle),
    candidate: (&[&Trace], &Bundle),
) -> anyhow::Result<Result<DistributionShift, String>> {
    if let Some(why) = vocabulary_mismatch(baseline.0, candidate.0) {
        return Ok(Err(why));
    }
    let mut per_prompt = Vec::new();
    let mut rows_by_prompt = Vec::new();
    let mut rest = Vec::new();
    let mut k = None;
    let mut mismatched = Vec::new();
    let mut positions = KlPositions::TeacherForced;
    // Whether some pair was compared on the tokens both sides' top k hold.
    let mut shared_support = false;
    for (p, (b, c)) in suite.prompts.iter().zip(baseline.0.iter().zip(candidate.0)) {
        let Some(reference) = continuation_reference(baseline.1, b)? else {
            continue;
        };
        let Some((_, base_rows)) = kl_rows(baseline.1, SideName::Baseline, b, Role::Continuation)?
        else {
            continue;
        };
        let Some((labels, cand_rows)) = kl_rows(
            candidate.1,
            SideName::Candidate,
            c,
            Role::ReferenceContinuation,
        )?
        else {
            // A side that cannot score a given continuation (an endpoint)
            // is compared on the generated positions both sides share.
            if let Some((pairs, width)) =
                shared_generated(baseline.1, b, &reference, candidate.1, c)?
            {
                positions = KlPositions::SharedGenerated;
                shared_support = true;
                k = Some(width);
                if let Some((kl, per, r)) = prompt_kl_of(p, pairs) {
                    per_prompt.push(kl);
                    rows_by_prompt.push(per);
                    rest.extend(r);
                }
            }
            continue;
        };
        if labels.get("reference_sha256") != Some(&reference.sha256)
            || base_rows.len() != reference.support.len()
        {
            mismatched.push(p.id.clone());
            continue;
        }
        // An endpoint scored the continuation through echo: its own top k
        // at each position, compared on the tokens both sides hold.
        let figures = match labels.get("values").map(String::as_str) {
            Some("own_top_k") => {
                let Some(cand_ids) = id_rows(
                    candidate.1,
                    SideName::Candidate,
                    c,
                    Role::ReferenceContinuationTopK,
                )?
                else {
                    mismatched.push(p.id.clone());
                    continue;
                };
                let n = cand_rows.len().min(cand_ids.len()).min(base_rows.len());
                shared_support = true;
                let width = cand_ids.first().map_or(0, Vec::len);
                k = Some(reference.support[0].len().min(width));
                on_own_top_k(&reference.support, &base_rows, &cand_ids, &cand_rows, n)
                    .and_then(|pairs| prompt_kl_of(p, pairs))
            }
            _ if cand_rows.len() != base_rows.len() => {
                mismatched.push(p.id.clone());
                continue;
            }
            _ => {
                k = Some(reference.support[0].len());
                prompt_kl(p, &base_rows, &cand_rows)
            }
        };
        if let Some((kl, per, r)) = figures {
            per_prompt.push(kl);
            rows_by_prompt.push(per);
            rest.extend(r);
        }
    }
    if let Some(first) = mismatched.first() {
        return Ok(Err(format!(
            "the candidate was scored on another baseline continuation than the baseline bundle holds ({} prompt(s), first `{first}`): the bundles are not from the same run",
            mismatched.len()
        )));
    }
    if per_prompt.is_empty() {
        return Ok(Err(
            "no prompt pair holds the baseline's top-k next-token rows and the candidate's scores of them (record both sides together with observe.logprobs = true)".into(),
        ));
    }
    let support = match shared_support {
        true => "top_k_shared",
        false => "top_k",
    };
    Ok(Ok(shift(
        per_prompt,
        &rows_by_prompt,
        &rest,
        k,
        positions,
        support,
    )))
}

/// The distribution shift from each prompt's figures: means overall and
/// per category, and per position.
fn shift(
    per_prompt: Vec<PromptKl>,
    rows_by_prompt: &[Vec<f64>],
    rest: &[f64],
    k: Option<usize>,
    positions: KlPositions,
    support: &str,
) -> DistributionShift {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut by_category: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for kl in &per_prompt {
        if let Some(c) = &kl.category {
            by_category
                .entry(c.clone())
                .or_default()
                .push(kl.first_token_kl);
        }
    }
    DistributionShift {
        support: support.into(),
        positions,
        top_k: k,
        baseline_rest_mass: Some(mean(rest)),
        first_token_kl_mean: mean(
            &per_prompt
                .iter()
                .map(|k| k.first_token_kl)
                .collect::<Vec<_>>(),
        ),
        mean_kl: mean(&per_prompt.iter().map(|k| k.mean_kl).collect::<Vec<_>>()),
        by_position: by_position(rows_by_prompt),
        by_category: by_category
            .into_iter()
            .map(|(c, v)| (c, mean(&v)))
            .collect(),
        per_prompt,
    }
}

/// Why the two sides' distributions cannot be compared token for token:
/// their tokenizers differ, or a trace does not say which it used.
fn vocabulary_mismatch(baseline: &[&Trace], candidate: &[&Trace]) -> Option<String> {
    let vocab = |t: &Trace| t.model.tokenizer_sha256.clone();
    let short = |s: &str| s.chars().take(12).collect::<String>();
    for (b, c) in baseline.iter().zip(candidate) {
        match (vocab(b), vocab(c)) {
            (Some(x), Some(y)) if x != y => {
                return Some(format!(
                    "the two sides' tokenizers differ (vocabulary sha256 {} vs {}): their next-token distributions are over different tokens, so no KL is computed",
                    short(&x),
                    short(&y)
                ));
            }
            (Some(_), Some(_)) => {}
            _ => {
                return Some(format!(
                    "trace \"{}\" or \"{}\" does not record its tokenizer's vocabulary, so it cannot be checked that the two distributions are over the same tokens",
                    b.id, c.id
                ));
            }
        }
    }
    None
}

/// The baseline's and the candidate's log-probabilities at the generated
/// positions both sides share: positions 0 to the first where the two
/// completions differ (before it both sides saw the same tokens), each
/// limited to the tokens in both sides' top k (the rest of the vocabulary
/// is the KL's one bucket, so the figure stays a lower bound), with the
/// narrower side's k. `None` when the candidate did not record its own
/// top-k rows with token ids.
fn shared_generated(
    baseline: &Bundle,
    b: &Trace,
    reference: &ReferenceContinuation,
    candidate: &Bundle,
    c: &Trace,
) -> anyhow::Result<Option<(Vec<PositionKl>, usize)>> {
    let Some((_, base_rows)) = kl_rows(baseline, SideName::Baseline, b, Role::Continuation)? else {
        return Ok(None);
    };
    let Some(cand_ref) = continuation_reference(candidate, c)? else {
        return Ok(None);
    };
    let Some((_, cand_rows)) = kl_rows(candidate, SideName::Candidate, c, Role::Continuation)?
    else {
        return Ok(None);
    };
    let (bc, cc) = (&reference.completion, &cand_ref.completion);
    let first_difference = bc
        .iter()
        .zip(cc)
        .position(|(x, y)| x != y)
        .unwrap_or(bc.len().min(cc.len()));
    let n = (first_difference + 1)
        .min(base_rows.len())
        .min(cand_rows.len())
        .min(reference.support.len())
        .min(cand_ref.support.len());
    let width = reference.support[0].len().min(cand_ref.support[0].len());
    let pairs = on_own_top_k(
        &reference.support,
        &base_rows,
        &cand_ref.support,
        &cand_rows,
        n,
    );
    Ok(pairs.filter(|_| n > 0).map(|p| (p, width)))
}

/// Mean over prompts, per position (prompts shorter than a position do not count there).
pub fn by_position(per_prompt: &[Vec<f64>]) -> Vec<f64> {
    let longest = per_prompt.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .map(|i| {
            let v: Vec<f64> = per_prompt
                .iter()
                .filter_map(|p| p.get(i).copied())
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        })
        .collect()
}
