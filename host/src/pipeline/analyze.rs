//! From two sides' metrics and traces to the report's numbers: paired
//! deltas per metric and category, the next-token distribution shift,
//! per-layer projections, representative examples, the prompt table and
//! regression gates.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;

use super::plan::SideName;
use crate::bundle::Bundle;
use crate::config::file::{GateSection, Severity};
use crate::config::{Prompt, Redaction, Suite};
use crate::executor::ReferenceContinuation;
use crate::plugin::scorer::{MetricSpec, Polarity};
use crate::report::deltas::{Pair, paired_delta, paired_test};
use crate::report::document::{
    ActivationFindings, Adjustment, DistributionShift, Example, GateOutcome, GateResult,
    IntervalMethod, KlPositions, MultipleComparisons, PairedTest, ProjectionSeries, PromptKl,
    PromptRow, ReportDelta, RoutingFindings, Side, first_difference,
};
use crate::report::stats::{Better, Z95, adjust_p_values, quality, wilson};
use crate::trace::{ArtifactData, ArtifactKind as K, Role, Site, Trace};

/// One side's metric values: (prompt id, metric) → value (the mean over
/// the prompt's samples when there are several).
pub type Values = HashMap<(String, String), f64>;

/// One side's metric values per sample: (prompt id, metric) → every
/// sample's value, in sample order.
pub type Samples = HashMap<(String, String), Vec<f64>>;

/// Each prompt's mean over its samples (what the paired statistics
/// compare: the prompt is the unit, not the sample), and the sample
/// standard deviation where it has two samples or more.
pub fn per_prompt(samples: &Samples) -> (Values, Values) {
    let mut means = Values::new();
    let mut spread = Values::new();
    for (k, v) in samples {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        means.insert(k.clone(), mean);
        if v.len() > 1 {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
            spread.insert(k.clone(), var.sqrt());
        }
    }
    (means, spread)
}

/// A metric a scorer declared, with the scorer's name.
#[derive(Debug, Clone)]
pub struct Declared {
    pub scorer: String,
    pub spec: MetricSpec,
    /// The artifact kinds the scorer reads: what its metrics rest on.
    pub needs: Vec<K>,
}

fn better(p: Polarity) -> Better {
    match p {
        Polarity::HigherIsBetter => Better::Higher,
        Polarity::LowerIsBetter => Better::Lower,
        Polarity::Neutral => Better::Neither,
    }
}

/// The id claims cite: `metric` overall, `metric@category` in a category.
pub fn delta_id(metric: &str, category: Option<&str>) -> String {
    match category {
        Some(c) => format!("{metric}@{c}"),
        None => metric.to_owned(),
    }
}

/// Paired deltas for every declared metric, overall then per category
/// (categories with at least one pair), in declaration order.
pub fn deltas(
    suite: &Suite,
    declared: &[Declared],
    baseline: &Values,
    candidate: &Values,
    seed: u64,
) -> Vec<ReportDelta> {
    let mut out = Vec::new();
    let mut groups: Vec<Option<&str>> = vec![None];
    groups.extend(suite.categories().into_iter().map(Some));
    for d in declared {
        let m = &d.spec.name;
        for &cat in &groups {
            let pairs: Vec<Pair> = suite
                .prompts
                .iter()
                .filter(|p| cat.is_none() || p.category.as_deref() == cat)
                .filter_map(|p| {
                    let k = (p.id.clone(), m.clone());
                    Some(Pair {
                        baseline: *baseline.get(&k)?,
                        candidate: *candidate.get(&k)?,
                    })
                })
                .collect();
            let id = delta_id(m, cat);
            let Some(md) = paired_delta(&id, m, cat, d.spec.polarity, &pairs, seed) else {
                continue;
            };
            let test = paired_test(&pairs);
            let binary = test == PairedTest::McnemarExact;
            let n = pairs.len() as u64;
            let rate_ci = |ones: usize| wilson(ones as u64, n, Z95).map(|(a, b)| [a, b]);
            let ci = md.ci_low.zip(md.ci_high);
            let rd = ReportDelta {
                id: id.clone(),
                metric: m.clone(),
                category: cat.map(str::to_owned),
                scorer: d.scorer.clone(),
                unit: d.spec.unit.clone(),
                polarity: d.spec.polarity,
                n: pairs.len(),
                baseline_mean: md.baseline_mean,
                candidate_mean: md.candidate_mean,
                delta: md.delta,
                percent_change: (md.baseline_mean != 0.0)
                    .then(|| 100.0 * md.delta / md.baseline_mean.abs()),
                ci_low: md.ci_low,
                ci_high: md.ci_high,
                baseline_rate_ci: binary
                    .then(|| rate_ci(pairs.iter().filter(|p| p.baseline == 1.0).count()))
                    .flatten(),
                candidate_rate_ci: binary
                    .then(|| rate_ci(pairs.iter().filter(|p| p.candidate == 1.0).count()))
                    .flatten(),
                interval: IntervalMethod::PairedBootstrap,
                rate_interval: binary.then_some(IntervalMethod::Wilson),
                test,
                p_value: md.p_value,
                // Set with `significant` once the whole family is known.
                p_adjusted: None,
                significant: false,
                quality: quality(md.delta, ci, better(d.spec.polarity)),
                rests_on: d.needs.clone(),
            };
            out.push(rd);
        }
    }
    out
}

/// The significance level adjusted p-values are compared with.
pub const ALPHA: f64 = 0.05;

/// Adjusts every delta's p-value for the family of all deltas with a
/// p-value (every metric, overall and per category: the tests one report
/// reads together), and decides `significant` on the adjusted value. The
/// claim mappers' view ([`ReportDelta::for_claims`]) carries the adjusted
/// value, so a mapper comparing it with its alpha needs no correction of
/// its own.
pub fn adjust(
    deltas: &mut [ReportDelta],
    method: Adjustment,
    categories: usize,
) -> MultipleComparisons {
    let tested: Vec<usize> = (0..deltas.len())
        .filter(|&i| deltas[i].p_value.is_some())
        .collect();
    let raw: Vec<f64> = tested
        .iter()
        .map(|&i| deltas[i].p_value.unwrap_or(f64::NAN))
        .collect();
    let adjusted = adjust_p_values(&raw, method);
    for (&i, &p) in tested.iter().zip(&adjusted) {
        deltas[i].p_adjusted = Some(p);
    }
    for rd in deltas.iter_mut() {
        let excludes_zero = rd
            .ci_low
            .zip(rd.ci_high)
            .is_some_and(|(lo, hi)| lo > 0.0 || hi < 0.0);
        rd.significant = rd.p_adjusted.is_some_and(|p| p < ALPHA) && excludes_zero;
    }
    let metrics = {
        let mut m: Vec<&str> = deltas.iter().map(|d| d.metric.as_str()).collect();
        m.sort_unstable();
        m.dedup();
        m.len()
    };
    let groups = match categories {
        0 => "over all prompts".to_owned(),
        1 => "over all prompts and in 1 category".to_owned(),
        c => format!("over all prompts and in each of {c} categories"),
    };
    MultipleComparisons {
        method,
        alpha: ALPHA,
        tests: tested.len(),
        family: format!(
            "every paired test of this report: {} metric(s) {groups}, {} test(s) with a p-value",
            metrics,
            tested.len()
        ),
    }
}

/// Each gate's outcome against the deltas.
pub fn gates(gates: &[GateSection], deltas: &[ReportDelta]) -> Vec<GateResult> {
    gates
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let id = delta_id(&g.metric, g.category.as_deref());
            let name = g.name.clone().unwrap_or_else(|| format!("gate {}: {id}", i + 1));
            let observed = deltas.iter().find(|d| d.id == id).map(|d| d.delta);
            let bounds = match (g.min_delta, g.max_delta) {
                (Some(a), Some(b)) => format!("in [{a}, {b}]"),
                (Some(a), None) => format!(">= {a}"),
                (None, Some(b)) => format!("<= {b}"),
                (None, None) => "unbounded".into(),
            };
            let out_of_bounds = match g.severity {
                Severity::Warn => GateOutcome::Warn,
                Severity::Fail => GateOutcome::Fail,
            };
            let (outcome, message) = match observed {
                None => (
                    GateOutcome::NoData,
                    format!(
                        "no data: no scorer produced \"{}\" on both sides{}; a gate without data counts as {}",
                        g.metric,
                        g.category.as_deref().map(|c| format!(" in category \"{c}\"")).unwrap_or_default(),
                        g.severity.as_str()
                    ),
                ),
                Some(d) => {
                    let ok = g.min_delta.is_none_or(|a| d >= a) && g.max_delta.is_none_or(|b| d <= b);
                    if ok {
                        (GateOutcome::Pass, format!("delta {d:+.4} is {bounds}"))
                    } else {
                        (out_of_bounds, format!("delta {d:+.4} is not {bounds}"))
                    }
                }
            };
            GateResult {
                name,
                metric: g.metric.clone(),
                category: g.category.clone(),
                severity: g.severity,
                min_delta: g.min_delta,
                max_delta: g.max_delta,
                observed_delta: observed,
                outcome,
                message,
            }
        })
        .collect()
}

/// Whether a gate result fails the run (exit code 3).
pub fn gate_fails(g: &GateResult) -> bool {
    g.fails()
}

/// The text of a trace's `text` artifact with `role`.
pub fn text_of(t: &Trace, role: Role) -> Option<String> {
    t.artifacts_of(K::Text).find_map(|a| match &a.data {
        ArtifactData::Text { text } if a.role() == Some(role) => Some(text.clone()),
        _ => None,
    })
}

/// Token ids of a trace's `tokens` artifact with `role`.
pub fn tokens_of(t: &Trace, role: Role) -> Option<Vec<u32>> {
    t.artifacts_of(K::Tokens).find_map(|a| match &a.data {
        ArtifactData::TokenIds { ids } if a.role() == Some(role) => Some(ids.clone()),
        _ => None,
    })
}

/// How the report may show one prompt and its outputs, from the suite's
/// `redaction` and the config's `report.record_outputs`: the one rule the
/// examples and the prompt table both follow.
struct Shown<'a> {
    /// Each side's trace of a prompt, by prompt id.
    traces: [HashMap<&'a str, &'a Trace>; 2],
    record_outputs: bool,
}

impl<'a> Shown<'a> {
    fn new(baseline: &[&'a Trace], candidate: &[&'a Trace], record_outputs: bool) -> Self {
        let index = |ts: &[&'a Trace]| {
            let mut by_id = HashMap::new();
            for t in ts {
                if let Some(id) = t.request.prompt_id.as_deref() {
                    // The first trace of a prompt, as a linear search finds it.
                    by_id.entry(id).or_insert(*t);
                }
            }
            by_id
        };
        Shown {
            traces: [index(baseline), index(candidate)],
            record_outputs,
        }
    }

    /// The prompt's text: as written when safe, a placeholder naming its
    /// category when redacted; `None` when omitted.
    fn prompt(p: &Prompt) -> Option<String> {
        match p.redaction {
            Redaction::Safe => Some(p.text.clone()),
            Redaction::Redacted => Some(format!(
                "[redacted {} prompt]",
                p.category.as_deref().unwrap_or("uncategorised")
            )),
            Redaction::Omitted => None,
        }
    }

    /// Whether the prompt's outputs may be shown.
    fn outputs_shown(&self, p: &Prompt) -> bool {
        self.record_outputs && p.redaction == Redaction::Safe
    }

    /// Both sides' completions of `p` as the report may show them: `None`
    /// where hidden or not recorded.
    fn outputs(&self, p: &Prompt) -> [Option<String>; 2] {
        let shown = self.outputs_shown(p);
        self.traces.each_ref().map(|by_id| {
            by_id
                .get(p.id.as_str())
                .filter(|_| shown)
                .and_then(|t| text_of(t, Role::Completion))
        })
    }
}

/// Representative examples: the prompts whose metrics changed most (by
/// the number of changed metrics, then the largest change), then the
/// rest, skipping omitted prompts; redaction honoured.
pub fn examples(
    suite: &Suite,
    baseline: &[&Trace],
    candidate: &[&Trace],
    values: (&Values, &Values),
    metrics: &[String],
    max: usize,
    record_outputs: bool,
) -> Vec<Example> {
    let shown = Shown::new(baseline, candidate, record_outputs);
    // (changed metrics, largest relative change, prompt, the changes)
    type Ranked<'a> = (usize, f64, &'a Prompt, BTreeMap<String, [f64; 2]>);
    let mut scored: Vec<Ranked<'_>> = suite
        .prompts
        .iter()
        .filter(|p| p.redaction != Redaction::Omitted)
        .map(|p| {
            let mut changed = BTreeMap::new();
            let mut largest: f64 = 0.0;
            for m in metrics {
                let k = (p.id.clone(), m.clone());
                if let (Some(b), Some(c)) = (values.0.get(&k), values.1.get(&k))
                    && b != c
                {
                    changed.insert(m.clone(), [*b, *c]);
                    largest = largest.max((c - b).abs() / b.abs().max(1.0));
                }
            }
            (changed.len(), largest, p, changed)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
    scored
        .into_iter()
        .take(max)
        .map(|(n, _, p, changed)| {
            let [baseline_output, candidate_output] = shown.outputs(p);
            Example {
                prompt_id: p.id.clone(),
                category: p.category.clone(),
                redaction: p.redaction,
                prompt: Shown::prompt(p),
                baseline_output,
                candidate_output,
                changed_metrics: changed,
                why: match (n, shown.outputs_shown(p)) {
                    (0, _) => "no metric changed on this prompt".into(),
                    (n, true) => format!("{n} metric(s) changed on this prompt"),
                    (n, false) if !record_outputs => {
                        format!("{n} metric(s) changed; outputs not recorded (report.record_outputs = false)")
                    }
                    (n, false) => format!("{n} metric(s) changed; outputs hidden (redacted prompt)"),
                },
            }
        })
        .collect()
}

/// Every prompt of the suite in suite order, for the prompt table: its
/// text and outputs as [`examples`] shows them (the same rule), every
/// metric of `metrics` with a value on either side, and where the outputs
/// first differ. Omitted prompts have no row.
pub fn prompt_rows(
    suite: &Suite,
    baseline: &[&Trace],
    candidate: &[&Trace],
    values: (&Values, &Values),
    spread: (&Values, &Values),
    metrics: &[String],
    record_outputs: bool,
) -> Vec<PromptRow> {
    let shown = Shown::new(baseline, candidate, record_outputs);
    suite
        .prompts
        .iter()
        .filter_map(|p| {
            let prompt = Shown::prompt(p)?;
            let [baseline_output, candidate_output] = shown.outputs(p);
            // Metric → [baseline, candidate] of `of`, where a side has it.
            let by_metric = |of: (&Values, &Values)| {
                metrics
                    .iter()
                    .filter_map(|m| {
                        let k = (p.id.clone(), m.clone());
                        let pair = [of.0.get(&k).copied(), of.1.get(&k).copied()];
                        pair.iter().any(Option::is_some).then(|| (m.clone(), pair))
                    })
                    .collect()
            };
            let (spread, metrics) = (by_metric(spread), by_metric(values));
            let first_difference = match (&baseline_output, &candidate_output) {
                (Some(b), Some(c)) => first_difference(b, c),
                _ => None,
            };
            Some(PromptRow {
                prompt_id: p.id.clone(),
                category: p.category.clone(),
                redaction: p.redaction,
                prompt,
                baseline_output,
                candidate_output,
                metrics,
                spread,
                first_difference,
            })
        })
        .collect()
}

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
    let Some(support) = id_rows(bundle, "baseline", t, Role::ContinuationTopK)? else {
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
    side: &str,
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

/// The raw tensor of artifact `a` of `t`, with the words that name it in
/// errors (`{what} `id` of trace `t` in the {side} bundle PATH`); an error
/// in those words when it cannot be read.
fn raw_tensor<'b>(
    bundle: &'b Bundle,
    side: impl std::fmt::Display,
    t: &Trace,
    a: &crate::trace::Artifact,
    what: &str,
) -> anyhow::Result<(crate::trace::TensorRef<'b>, String)> {
    let what = format!(
        "{what} `{}` of trace `{}` in the {side} bundle {}",
        a.id,
        t.id,
        bundle.root().display()
    );
    let r = bundle
        .tensor(&t.id, &a.id)
        .with_context(|| format!("cannot read {what}"))?;
    Ok((r, what))
}

/// The raw `[positions, k]` tensor of artifact `a` of `t`, with `k` and
/// the words that name it in errors; an error naming the artifact, the
/// trace and the bundle when it cannot be read or is not a non-empty table.
fn table<'b>(
    bundle: &'b Bundle,
    side: &str,
    t: &Trace,
    a: &crate::trace::Artifact,
    what: &str,
) -> anyhow::Result<(crate::trace::TensorRef<'b>, usize, String)> {
    let (r, what) = raw_tensor(bundle, side, t, a, what)?;
    match r.shape {
        &[rows, k] if rows > 0 && k > 0 => Ok((r, k, what)),
        shape => anyhow::bail!("{what} has shape {shape:?}, not a non-empty [positions, k]"),
    }
}

/// The `[positions, k]` rows of the one logprobs artifact of `t` with
/// `role`, read from `bundle`; `None` when the trace has none.
fn kl_rows(
    bundle: &Bundle,
    side: &str,
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
    let vocab = |t: &Trace| t.model.tokenizer_sha256.clone();
    let short = |s: &str| s.chars().take(12).collect::<String>();
    for (b, c) in baseline.0.iter().zip(candidate.0) {
        match (vocab(b), vocab(c)) {
            (Some(x), Some(y)) if x != y => {
                return Ok(Err(format!(
                    "the two sides' tokenizers differ (vocabulary sha256 {} vs {}): their next-token distributions are over different tokens, so no KL is computed",
                    short(&x),
                    short(&y)
                )));
            }
            (Some(_), Some(_)) => {}
            _ => {
                return Ok(Err(format!(
                    "trace \"{}\" or \"{}\" does not record its tokenizer's vocabulary, so it cannot be checked that the two distributions are over the same tokens",
                    b.id, c.id
                )));
            }
        }
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
        let Some((_, base_rows)) = kl_rows(baseline.1, "baseline", b, Role::Continuation)? else {
            continue;
        };
        let Some((labels, cand_rows)) =
            kl_rows(candidate.1, "candidate", c, Role::ReferenceContinuation)?
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
                let Some(cand_ids) =
                    id_rows(candidate.1, "candidate", c, Role::ReferenceContinuationTopK)?
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
    Ok(Ok(DistributionShift {
        support: match shared_support {
            true => "top_k_shared".into(),
            false => "top_k".into(),
        },
        positions,
        top_k: k,
        baseline_rest_mass: Some(mean(&rest)),
        first_token_kl_mean: mean(
            &per_prompt
                .iter()
                .map(|k| k.first_token_kl)
                .collect::<Vec<_>>(),
        ),
        mean_kl: mean(&per_prompt.iter().map(|k| k.mean_kl).collect::<Vec<_>>()),
        by_position: by_position(&rows_by_prompt),
        by_category: by_category
            .into_iter()
            .map(|(c, v)| (c, mean(&v)))
            .collect(),
        per_prompt,
    }))
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
    let Some((_, base_rows)) = kl_rows(baseline, "baseline", b, Role::Continuation)? else {
        return Ok(None);
    };
    let Some(cand_ref) = continuation_reference(candidate, c)? else {
        return Ok(None);
    };
    let Some((_, cand_rows)) = kl_rows(candidate, "candidate", c, Role::Continuation)? else {
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

/// Mean projection of the last prompt token's residual onto the unit
/// `direction`, per observed layer, per side and category, from raw
/// activations. `None` when a side lacks raw activations.
/// None when no trace holds a raw residual activation (or the direction is
/// zero); an error naming the tensor when one cannot be read or has no row
/// to project: damaged evidence is never dropped in silence.
pub fn projections(
    suite: &Suite,
    sides: [(Side, &Bundle); 2],
    direction: &[f32],
) -> anyhow::Result<Option<(Vec<usize>, Vec<ProjectionSeries>)>> {
    let norm = direction
        .iter()
        .map(|v| f64::from(*v).powi(2))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 {
        return Ok(None);
    }
    let mut layers: Vec<usize> = Vec::new();
    let mut series = Vec::new();
    for (side, bundle) in sides {
        // category → layer → (sum, n)
        let mut acc: BTreeMap<String, BTreeMap<usize, (f64, usize)>> = BTreeMap::new();
        for t in bundle.traces() {
            let cat = t.request.category.clone().unwrap_or_else(|| "all".into());
            for a in t.artifacts_of(K::Activation) {
                if a.site().is_some_and(|s| s != Site::ResidPost) {
                    continue;
                }
                let (Some(layer), ArtifactData::Tensor { raw: true, .. }) = (a.layer, &a.data)
                else {
                    continue;
                };
                let (r, what) = raw_tensor(bundle, side, t, a, "activation")?;
                let width = r.shape.last().copied().unwrap_or(0);
                if width != direction.len() {
                    anyhow::bail!(
                        "{what} has rows of {width} values; the report's direction has {}: they are not from the same model",
                        direction.len()
                    );
                }
                let v = r.to_f32_vec();
                let Some(start) = v.len().checked_sub(width).filter(|_| !v.is_empty()) else {
                    anyhow::bail!("{what} has shape {:?}: no token row to project", r.shape);
                };
                let last = &v[start..];
                let p: f64 = last
                    .iter()
                    .zip(direction)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>()
                    / norm;
                let e = acc
                    .entry(cat.clone())
                    .or_default()
                    .entry(layer)
                    .or_insert((0.0, 0));
                e.0 += p;
                e.1 += 1;
                if !layers.contains(&layer) {
                    layers.push(layer);
                }
            }
        }
        for (cat, per_layer) in acc {
            let prompts = suite
                .prompts
                .iter()
                .filter(|p| p.category.as_deref().unwrap_or("all") == cat)
                .count();
            series.push((side, cat, prompts, per_layer));
        }
    }
    if layers.is_empty() {
        return Ok(None);
    }
    layers.sort_unstable();
    let series = series
        .into_iter()
        .map(|(side, category, prompts, per_layer)| ProjectionSeries {
            side,
            category,
            prompts,
            mean_projection: layers
                .iter()
                .map(|l| per_layer.get(l).map_or(0.0, |(s, n)| s / *n as f64))
                .collect(),
        })
        .collect();
    Ok(Some((layers, series)))
}

/// A mixture of experts' routing, candidate against baseline: per observed
/// layer, the share of prompt tokens whose chosen experts differ and the
/// mean total variation between the router distributions, over the
/// prompts whose prompt tokens the two sides share (a token's routing is
/// comparable only at the same token in the same context). From the raw
/// `router` activations (`[1, tokens, experts]`, labelled with the experts
/// each token used); `None` when a side recorded none.
pub fn routing(sides: [&Bundle; 2]) -> anyhow::Result<Option<RoutingFindings>> {
    // prompt id → (prompt tokens, layer → (probabilities, experts, used))
    type Routes = BTreeMap<usize, (Vec<f32>, usize, usize)>;
    let mut per_side: Vec<HashMap<String, (Vec<u32>, Routes)>> = Vec::new();
    for (bundle, side) in sides.into_iter().zip(SideName::BOTH.map(SideName::as_str)) {
        let mut prompts = HashMap::new();
        for t in bundle.traces() {
            let Some(id) = t.request.prompt_id.clone() else {
                continue;
            };
            if prompts.contains_key(&id) {
                continue; // another sample of the prompt: its first decides
            }
            let tokens = t
                .artifacts_of(K::Tokens)
                .find(|a| a.role() == Some(Role::Prompt))
                .and_then(|a| match &a.data {
                    ArtifactData::TokenIds { ids } => Some(ids.clone()),
                    _ => None,
                });
            let mut routes = Routes::new();
            for a in t.artifacts_of(K::Activation) {
                if a.site() != Some(Site::Router) {
                    continue;
                }
                let (Some(layer), ArtifactData::Tensor { raw: true, .. }) = (a.layer, &a.data)
                else {
                    continue;
                };
                let used: usize = match a.labels.get("experts_used").map(|u| u.parse()) {
                    Some(Ok(u)) => u,
                    _ => anyhow::bail!(
                        "router activation `{}` of trace `{}` in the {side} bundle has no `experts_used` label",
                        a.id,
                        t.id
                    ),
                };
                let (r, what) = raw_tensor(bundle, side, t, a, "router activation")?;
                let experts = r.shape.last().copied().unwrap_or(0);
                if experts == 0 || used == 0 || used > experts {
                    anyhow::bail!("{what} has shape {:?} for {used} experts used", r.shape);
                }
                routes.insert(layer, (r.to_f32_vec(), experts, used));
            }
            if let (Some(tokens), false) = (tokens, routes.is_empty()) {
                prompts.insert(id, (tokens, routes));
            }
        }
        per_side.push(prompts);
    }
    let (base, cand) = (&per_side[0], &per_side[1]);
    // layer → (tokens changed, total variation summed, tokens), and the shared k
    let mut acc: BTreeMap<usize, (usize, f64, usize)> = BTreeMap::new();
    let mut prompts = 0;
    let mut used_k = None;
    for (id, (tokens, routes)) in base {
        let Some((other_tokens, other_routes)) = cand.get(id) else {
            continue;
        };
        if tokens != other_tokens {
            continue;
        }
        prompts += 1;
        for (layer, (p, experts, used)) in routes {
            let Some((q, e2, u2)) = other_routes.get(layer) else {
                continue;
            };
            if (experts, used) != (e2, u2) {
                anyhow::bail!(
                    "layer {layer}'s routers differ between the sides ({experts} experts, {used} used against {e2}, {u2}): not the same model family"
                );
            }
            used_k = Some(*used);
            let top = |row: &[f32]| {
                let mut order: Vec<usize> = (0..row.len()).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                let mut chosen = order[..*used].to_vec();
                chosen.sort_unstable();
                chosen
            };
            let entry = acc.entry(*layer).or_insert((0, 0.0, 0));
            for (a, b) in p.chunks_exact(*experts).zip(q.chunks_exact(*experts)) {
                entry.0 += usize::from(top(a) != top(b));
                entry.1 += 0.5
                    * a.iter()
                        .zip(b)
                        .map(|(x, y)| f64::from((x - y).abs()))
                        .sum::<f64>();
                entry.2 += 1;
            }
        }
    }
    let Some(used) = used_k else {
        return Ok(None);
    };
    let layers: Vec<usize> = acc.keys().copied().collect();
    let changed: Vec<f64> = acc.values().map(|v| v.0 as f64 / v.2 as f64).collect();
    let tv: Vec<f64> = acc.values().map(|v| v.1 / v.2 as f64).collect();
    let tokens = acc.values().map(|v| v.2).max().unwrap_or(0);
    let mut findings = Vec::new();
    if let Some((i, &most)) = changed
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
    {
        findings.push(match most > 0.0 {
            true => format!(
                "Routing moved most at layer {}: the {used} experts chosen differ for {:.1}% of {tokens} prompt tokens (mean total variation of the router's distribution {:.3}).",
                layers[i],
                most * 100.0,
                tv[i]
            ),
            false => format!(
                "Routing did not move: every one of {tokens} prompt tokens chose the same {used} experts at every compared layer (largest mean total variation {:.3}).",
                tv.iter().copied().fold(0.0, f64::max)
            ),
        });
    }
    let same: Vec<String> = layers
        .iter()
        .zip(&changed)
        .filter(|(_, c)| **c == 0.0)
        .map(|(l, _)| l.to_string())
        .collect();
    if !same.is_empty() && same.len() < layers.len() {
        findings.push(format!(
            "At layer{} {} every token chose the same experts on both sides.",
            if same.len() > 1 { "s" } else { "" },
            same.join(", ")
        ));
    }
    Ok(Some(RoutingFindings {
        experts_per_token: used,
        layers,
        changed_choices: changed,
        mean_total_variation: tv,
        tokens,
        prompts,
        findings,
    }))
}

/// Sentences about the projections: where the categories separate most
/// (baseline) and where the candidate moved most from the baseline.
pub fn projection_findings(layers: &[usize], series: &[ProjectionSeries]) -> Vec<String> {
    let mut out = Vec::new();
    let get = |side: Side| {
        series
            .iter()
            .filter(move |s| s.side == side)
            .collect::<Vec<_>>()
    };
    let base = get(Side::Baseline);
    // the pair of categories and the layer with the largest gap
    let mut best: Option<(f64, usize, &ProjectionSeries, &ProjectionSeries)> = None;
    for (i, a) in base.iter().enumerate() {
        for b in &base[i + 1..] {
            for (l, (x, y)) in a.mean_projection.iter().zip(&b.mean_projection).enumerate() {
                if best.is_none_or(|(g, ..)| (x - y).abs() > g) {
                    best = Some(((x - y).abs(), l, a, b));
                }
            }
        }
    }
    if let Some((_, i, a, b)) = best {
        out.push(format!(
            "On the baseline, {} and {} prompts separate most along the direction at layer {} (mean projection {} vs {}, gap {:+.3}).",
            a.category,
            b.category,
            layers[i],
            signed3(a.mean_projection[i]),
            signed3(b.mean_projection[i]),
            a.mean_projection[i] - b.mean_projection[i]
        ));
    }
    for c in get(Side::Candidate) {
        if let Some(b) = base.iter().find(|b| b.category == c.category)
            && let Some((i, shift)) = c
                .mean_projection
                .iter()
                .zip(&b.mean_projection)
                .map(|(x, y)| x - y)
                .enumerate()
                .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
        {
            out.push(format!(
                "On {} prompts the candidate's mean projection moved most at layer {}: {} → {} ({:+.3}).",
                c.category,
                layers[i],
                signed3(b.mean_projection[i]),
                signed3(c.mean_projection[i]),
                shift
            ));
        }
    }
    out
}

/// The findings section, when projections exist.
pub fn activation_findings(
    direction_label: String,
    direction_sha256: String,
    found: Option<(Vec<usize>, Vec<ProjectionSeries>)>,
) -> Option<ActivationFindings> {
    let (layers, series) = found?;
    Some(ActivationFindings {
        findings: projection_findings(&layers, &series),
        direction: direction_label,
        direction_sha256,
        layers,
        series,
    })
}

/// `x` signed, to three decimals; a value that rounds to zero reads
/// `0.000` (an ablated projection of ±1e-9 has no sign worth printing).
fn signed3(x: f64) -> String {
    match format!("{x:+.3}") {
        s if s == "+0.000" || s == "-0.000" => "0.000".into(),
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite() -> Suite {
        let p = |id: &str, cat: &str| Prompt {
            id: id.into(),
            text: format!("text {id}"),
            category: Some(cat.into()),
            expected_behavior: None,
            redaction: Redaction::Safe,
            tags: vec![],
        };
        Suite::new(
            vec![p("a", "x"), p("b", "x"), p("c", "y"), p("d", "y")],
            "t",
        )
        .unwrap()
    }

    fn values(v: &[(&str, f64)]) -> Values {
        v.iter()
            .map(|(id, x)| ((id.to_string(), "m".to_string()), *x))
            .collect()
    }

    fn declared(polarity: Polarity) -> Vec<Declared> {
        vec![Declared {
            scorer: "s".into(),
            spec: MetricSpec {
                name: "m".into(),
                unit: "rate".into(),
                polarity,
                family: "f".into(),
                description: "d".into(),
            },
            needs: vec![K::Text, K::Logprobs],
        }]
    }

    #[test]
    fn deltas_are_overall_then_per_category_with_rate_intervals() {
        let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
        let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 1.0)]);
        let d = deltas(&suite(), &declared(Polarity::LowerIsBetter), &b, &c, 7);
        let ids: Vec<&str> = d.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids, ["m", "m@x", "m@y"]);
        // Each delta rests on what its scorer reads (claims are checked on it).
        assert!(
            d.iter()
                .all(|x| x.for_claims().rests_on == [K::Text, K::Logprobs])
        );
        let overall = &d[0];
        assert_eq!((overall.baseline_mean, overall.candidate_mean), (0.5, 0.25));
        assert_eq!(overall.test, PairedTest::McnemarExact);
        // b = 2 discordant down, c = 1 up: p = 1 (two-sided exact, n = 3)
        assert_eq!(overall.p_value, Some(1.0));
        assert_eq!(overall.percent_change, Some(-50.0));
        let w = overall.baseline_rate_ci.unwrap();
        let (lo, hi) = wilson(2, 4, Z95).unwrap();
        assert_eq!(w, [lo, hi]);
        assert!(!overall.significant);
        let x = &d[1];
        assert_eq!((x.delta, x.n), (-1.0, 2));
    }

    #[test]
    fn significance_is_decided_on_the_p_value_adjusted_for_the_family() {
        // Every prompt went 1 → 0: the interval excludes 0.
        let b = values(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]);
        let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
        let one = deltas(&suite(), &declared(Polarity::Neutral), &b, &c, 7).remove(0);
        assert!(one.ci_high.unwrap() < 0.0);
        // 40 tests; the one that moved has p = 0.029, the others 0.5.
        let family = |method| {
            let mut d: Vec<_> = (0..40)
                .map(|i| {
                    let mut x = one.clone();
                    let p = if i == 7 { 0.029 } else { 0.5 };
                    x.p_value = Some(p);
                    x
                })
                .collect();
            let m = adjust(&mut d, method, 2);
            (d, m)
        };
        let (d, m) = family(Adjustment::Holm);
        assert_eq!((m.method, m.tests, m.alpha), (Adjustment::Holm, 40, 0.05));
        assert!(m.family.contains("in each of 2 categories"), "{}", m.family);
        // Holm: 40 × 0.029 > 1, capped at 1: not significant.
        assert_eq!(d[7].p_value, Some(0.029));
        assert_eq!(d[7].p_adjusted, Some(1.0));
        assert!(d.iter().all(|x| !x.significant));
        // Claim mappers see the adjusted value.
        assert_eq!(d[7].for_claims().p_value, Some(1.0));
        let (d, _) = family(Adjustment::BenjaminiHochberg);
        assert!(!d[7].significant);
        assert!(d[7].p_adjusted.unwrap() > 0.05);
        // Unadjusted, the same delta is significant (the old behaviour).
        let (d, m) = family(Adjustment::None);
        assert_eq!(m.tests, 40);
        assert!(d[7].significant && d[7].p_adjusted == Some(0.029));
        assert_eq!(d.iter().filter(|x| x.significant).count(), 1);
        // A delta without a test is outside the family and never significant.
        let mut d = vec![one.clone(), one.clone()];
        d[1].p_value = None;
        d[0].p_value = Some(0.001);
        let m = adjust(&mut d, Adjustment::Holm, 0);
        assert_eq!(m.tests, 1);
        assert_eq!(d[0].p_adjusted, Some(0.001));
        assert!(d[0].significant && !d[1].significant);
        assert_eq!(d[1].p_adjusted, None);
    }

    #[test]
    fn gates_pass_fail_and_count_missing_data() {
        let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
        let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
        let d: Vec<ReportDelta> = deltas(&suite(), &declared(Polarity::Neutral), &b, &c, 7);
        let g = |metric: &str, cat: Option<&str>, min: Option<f64>, max: Option<f64>, severity| {
            GateSection {
                name: None,
                metric: metric.into(),
                category: cat.map(Into::into),
                min_delta: min,
                max_delta: max,
                severity,
            }
        };
        let r = gates(
            &[
                g("m", Some("x"), None, Some(-0.5), Severity::Fail),
                g("m", None, Some(0.0), None, Severity::Warn),
                g("m", None, Some(0.0), None, Severity::Fail),
                g("nope", None, Some(0.0), None, Severity::Fail),
            ],
            &d,
        );
        let outcomes: Vec<&str> = r.iter().map(|g| g.outcome.as_str()).collect();
        assert_eq!(outcomes, ["pass", "warn", "fail", "no_data"]);
        let fails: Vec<bool> = r.iter().map(gate_fails).collect();
        assert_eq!(fails, [false, false, true, true]);
        assert!(
            r[2].message.contains("-0.5000 is not >= 0"),
            "{}",
            r[2].message
        );
    }

    /// One side's traces of `suite()`'s prompts, each with `completion`.
    fn traces(side: &str, completions: &[(&str, &str)]) -> Vec<Trace> {
        completions
            .iter()
            .map(|(id, text)| {
                crate::trace::fixture::TraceFixture::new(format!("{side}-{id}"))
                    .prompt_id(id)
                    .text(Role::Completion, text)
                    .trace()
            })
            .collect()
    }

    #[test]
    fn the_prompt_table_has_every_prompt_as_the_examples_show_it() {
        let mut suite = suite();
        suite.prompts[1].redaction = Redaction::Redacted;
        suite.prompts[2].redaction = Redaction::Omitted;
        let base = traces(
            "b",
            &[
                ("a", "Héllo wörld"),
                ("b", "secret"),
                ("c", "x"),
                ("d", "same"),
            ],
        );
        let cand = traces(
            "c",
            &[
                ("a", "Héllo wärld"),
                ("b", "secret!"),
                ("c", "y"),
                ("d", "same"),
            ],
        );
        let (base, cand): (Vec<&Trace>, Vec<&Trace>) =
            (base.iter().collect(), cand.iter().collect());
        let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0)]);
        let c = values(&[("a", 0.0), ("b", 1.0), ("c", 1.0), ("d", 0.5)]);
        let metrics = ["m".to_string(), "never".to_string()];
        let none = Values::new();
        let rows = prompt_rows(
            &suite,
            &base,
            &cand,
            (&b, &c),
            (&none, &none),
            &metrics,
            true,
        );
        // Suite order, the omitted prompt absent.
        let ids: Vec<&str> = rows.iter().map(|r| r.prompt_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "d"]);
        let a = &rows[0];
        assert_eq!(a.prompt, "text a");
        assert_eq!(a.baseline_output.as_deref(), Some("Héllo wörld"));
        assert_eq!(a.metrics["m"], [Some(1.0), Some(0.0)]);
        // A metric no side has is not listed.
        assert!(!a.metrics.contains_key("never"));
        // Counted in characters: `é` before the difference is one, not two bytes.
        assert_eq!(a.first_difference, Some(7));
        // Redacted: the placeholder, no outputs, no offset computed from them.
        let r = &rows[1];
        assert_eq!(r.redaction, Redaction::Redacted);
        assert_eq!(r.prompt, "[redacted x prompt]");
        assert_eq!((&r.baseline_output, &r.candidate_output), (&None, &None));
        assert_eq!(r.first_difference, None);
        // One side without a value; equal outputs have no difference.
        let d = &rows[2];
        assert_eq!(d.metrics["m"], [None, Some(0.5)]);
        assert_eq!(d.first_difference, None);
        // The examples show the same texts for the same prompts.
        let ex = examples(&suite, &base, &cand, (&b, &c), &metrics, 10, true);
        for e in &ex {
            let row = rows.iter().find(|r| r.prompt_id == e.prompt_id).unwrap();
            assert_eq!(e.prompt.as_deref(), Some(row.prompt.as_str()));
            assert_eq!(e.baseline_output, row.baseline_output);
            assert_eq!(e.candidate_output, row.candidate_output);
        }
        assert!(ex.iter().all(|e| e.prompt_id != "c"));
        // Outputs not recorded: texts null everywhere, prompts still shown.
        let rows = prompt_rows(
            &suite,
            &base,
            &cand,
            (&b, &c),
            (&none, &none),
            &metrics,
            false,
        );
        assert!(rows.iter().all(|r| r.baseline_output.is_none()
            && r.candidate_output.is_none()
            && r.first_difference.is_none()));
        assert_eq!(rows[0].prompt, "text a");
    }

    #[test]
    fn kl_by_position_averages_the_prompts_present() {
        assert_eq!(by_position(&[vec![1.0, 3.0], vec![3.0]]), vec![2.0, 3.0]);
        let p = &suite().prompts[0];
        let same = vec![vec![(0.5f32).ln(), (0.5f32).ln()]];
        let other = vec![vec![(0.9f32).ln(), (0.1f32).ln()]];
        let (k, per, rest) = prompt_kl(p, &same, &other).unwrap();
        assert!((k.first_token_kl - 0.510_825_6).abs() < 1e-5, "{k:?}");
        assert_eq!(per.len(), 1);
        assert!(rest[0].abs() < 1e-6);
        assert_eq!(prompt_kl(p, &same, &same).unwrap().0.mean_kl, 0.0);
    }
}
