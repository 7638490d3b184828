//! The evidence set claim mappers are shown and claims are checked against:
//! every finding of the run with the id a claim cites, grouped by what it
//! can support. Built once, from what the traces and
//! the analysis actually hold; what is absent is simply not offered.

use std::collections::BTreeMap;

use super::analyze::Analysis;
use super::gather::SuiteTraces;
use crate::plugin::claims::{
    ActivationEvidence, DistributionEvidence, EvidenceSet, InterventionEvidence, WeightEvidence,
};
use crate::report::Access;
use crate::report::document::{ActivationFindings, DistributionShift, Side};
use crate::trace::{ArtifactData, ArtifactKind as K, TensorSummary, Trace};

/// The evidence set of a run: every finding of the analysis and the
/// traces, with the id a claim cites. An error when two findings share an
/// id (a bug in vauban): a claim citing one could not be checked.
pub(super) fn evidence_set(
    analysis: &Analysis,
    traces: &SuiteTraces<'_>,
) -> anyhow::Result<EvidenceSet> {
    let first = &traces.first;
    let set = EvidenceSet {
        access_level: analysis.access.level.as_str().to_owned(),
        claim_strength: analysis.access.claim_strength,
        kinds_in_both: analysis.kinds_in_both.clone(),
        deltas: analysis
            .deltas
            .iter()
            .map(crate::report::document::ReportDelta::for_claims)
            .collect(),
        distribution: analysis
            .distribution
            .as_ref()
            .map(distribution)
            .unwrap_or_default(),
        activations: analysis
            .activation_findings
            .as_ref()
            .map(activations)
            .unwrap_or_default(),
        weights: weights(&first.baseline, &first.candidate),
        interventions: interventions(&analysis.access, &first.baseline, &first.candidate),
    };
    // Ids are unique by construction (finding ids hold a `:`, metric names
    // cannot); a collision would let a claim borrow another's support.
    let collisions = set.duplicate_ids();
    if !collisions.is_empty() {
        anyhow::bail!(
            "evidence ids collide ({}): a claim citing one could not be checked; this is a bug in vauban",
            collisions.join(", ")
        );
    }
    Ok(set)
}

fn distribution(d: &DistributionShift) -> Vec<DistributionEvidence> {
    let prompts = d.per_prompt.len() as u32;
    vec![
        DistributionEvidence {
            id: "kl:first_token".into(),
            measure: "mean KL(baseline ‖ candidate) of the first generated token's distribution"
                .into(),
            value: d.first_token_kl_mean,
            prompts,
        },
        DistributionEvidence {
            id: "kl:continuation".into(),
            measure: "mean KL(baseline ‖ candidate) over the baseline's continuation".into(),
            value: d.mean_kl,
            prompts,
        },
    ]
}

/// One item per layer: the mean projection over every prompt, per side.
fn activations(a: &ActivationFindings) -> Vec<ActivationEvidence> {
    let side_mean = |side: Side, k: usize| -> Option<(f64, usize)> {
        let (sum, n) = a
            .series
            .iter()
            .filter(|s| s.side == side)
            .filter_map(|s| Some((s.mean_projection.get(k)? * s.prompts as f64, s.prompts)))
            .fold((0.0, 0), |(a, b), (x, n)| (a + x, b + n));
        (n > 0).then(|| (sum / n as f64, n))
    };
    a.layers
        .iter()
        .enumerate()
        .filter_map(|(k, &layer)| {
            let (baseline_mean, n) = side_mean(Side::Baseline, k)?;
            let (candidate_mean, _) = side_mean(Side::Candidate, k)?;
            Some(ActivationEvidence {
                id: format!("projection:layer{layer}"),
                layer: layer as u32,
                direction: a.direction.clone(),
                baseline_mean,
                candidate_mean,
                prompts: n as u32,
            })
        })
        .collect()
}

/// Weight matrices recorded by both sides (from each side's first trace
/// that holds any: weights do not change between prompts).
fn weights(baseline: &[&Trace], candidate: &[&Trace]) -> Vec<WeightEvidence> {
    let snapshots = |traces: &[&Trace]| -> BTreeMap<(usize, String), TensorSummary> {
        traces
            .iter()
            .map(|t| {
                t.artifacts_of(K::WeightSnapshot)
                    .filter_map(|a| match (&a.data, a.layer) {
                        (ArtifactData::Tensor { summary, .. }, Some(layer)) => Some((
                            (
                                layer,
                                a.labels
                                    .get("matrix")
                                    .cloned()
                                    .unwrap_or_else(|| a.id.clone()),
                            ),
                            summary.clone(),
                        )),
                        _ => None,
                    })
                    .collect::<BTreeMap<_, _>>()
            })
            .find(|m| !m.is_empty())
            .unwrap_or_default()
    };
    let base = snapshots(baseline);
    let cand = snapshots(candidate);
    base.iter()
        .filter_map(|((layer, matrix), b)| {
            let c = cand.get(&(*layer, matrix.clone()))?;
            Some(WeightEvidence {
                id: format!("weights:layer{layer}.{matrix}"),
                layer: *layer as u32,
                matrix: matrix.clone(),
                baseline_l2_norm: b.l2_norm?,
                candidate_l2_norm: c.l2_norm?,
                summaries_differ: (b.l2_norm, b.mean, b.std, b.min, b.max)
                    != (c.l2_norm, c.mean, c.std, c.min, c.max),
            })
        })
        .collect()
}

/// Every intervention record in the traces, with the scope it covers.
fn interventions(
    access: &Access,
    baseline: &[&Trace],
    candidate: &[&Trace],
) -> Vec<InterventionEvidence> {
    access
        .interventions
        .iter()
        .map(|r| {
            let side = r.side.as_str();
            let trace = match r.side {
                Side::Baseline => baseline,
                Side::Candidate | Side::Snapshot => candidate,
            }
            .iter()
            .find(|t| t.id == r.trace);
            let record = trace
                .and_then(|t| t.artifact(&r.artifact))
                .and_then(|a| match &a.data {
                    ArtifactData::Record { value } => Some(value),
                    _ => None,
                });
            let iv = record.and_then(|v| v.get("intervention"));
            let direction = iv.and_then(|iv| iv.get("direction")).map(|d| {
                let field = |k: &str| d.get(k).and_then(|v| v.as_str()).unwrap_or("?");
                format!("{}:{}", field("source"), field("tensor"))
            });
            InterventionEvidence {
                id: format!("{side}:{}:{}", r.trace, r.artifact),
                side: side.to_owned(),
                prompt: trace
                    .and_then(|t| t.request.prompt_id.clone())
                    .unwrap_or_else(|| r.trace.clone()),
                mode: r.mode(),
                layer: r.layer.map(|l| l as u32),
                direction,
                alpha: iv.and_then(|iv| iv.get("alpha")).and_then(|a| a.as_f64()),
            }
        })
        .collect()
}
