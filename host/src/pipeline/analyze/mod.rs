//! From two sides' metrics and traces to the report's numbers: paired
//! deltas per metric and category, the next-token distribution shift,
//! per-layer projections, representative examples, the prompt table and
//! regression gates. One file per kind of finding; each reads the traces
//! and the scores and nothing the others computed.

mod activations;
mod distribution;
mod examples;
mod gates;
mod stats;
mod tensors;

pub use activations::*;
pub use distribution::*;
pub use examples::*;
pub use gates::*;
pub use stats::*;
use tensors::{raw_tensor, table};

#[cfg(test)]
mod tests;

use crate::report::document::{
    ActivationFindings, DistributionShift, Example, GateResult, MultipleComparisons, PromptRow,
    ReportDelta,
};
use crate::report::{Access, Evidence, access_from_evidence};
use crate::trace::ArtifactKind as K;

use super::gather::{Gathered, SuiteTraces};
use super::score::Scores;
use super::{Plan, Stages};

/// Every number the report and the evidence set show, computed once from
/// the traces and the scores.
pub(crate) struct Analysis {
    /// What the traces allow: the access level and the claim ladder's cap.
    pub access: Access,
    /// Kinds every trace of both sides holds.
    pub kinds_in_both: Vec<K>,
    /// Paired deltas per metric, overall and per category, with their
    /// p-values adjusted for the family.
    pub deltas: Vec<ReportDelta>,
    pub multiple_comparisons: MultipleComparisons,
    /// The next-token distribution shift, when log-probabilities were
    /// observed and the traces can give one…
    pub distribution: Option<DistributionShift>,
    /// …and why not, when they were and cannot.
    pub distribution_unavailable: Option<String>,
    /// Per-layer projections onto the report's direction, when there is one…
    pub activation_findings: Option<ActivationFindings>,
    /// …and why not, when one is named and cannot be used.
    pub activation_note: Option<String>,
    /// How a mixture of experts' routing moved.
    pub routing: Option<crate::report::document::RoutingFindings>,
    pub gates: Vec<GateResult>,
    pub examples: Vec<Example>,
    pub prompts: Vec<PromptRow>,
}

/// The analysis stages: access, statistics, distribution, activation
/// findings, routing; then the gates, examples and prompt table.
pub(super) fn analyze(
    plan: &Plan,
    gathered: &Gathered,
    traces: &SuiteTraces<'_>,
    scores: &Scores,
    stages: &mut Stages,
) -> anyhow::Result<Analysis> {
    let bundles = gathered.bundles.as_ref().map(|b| &**b);
    let access = stages.run("access", |note| {
        let a = access_from_evidence(Evidence::Paired {
            baseline: &traces.first.baseline,
            candidate: &traces.first.candidate,
        })?;
        *note = format!("level {}", a.level);
        Ok(a)
    })?;
    let (deltas, multiple_comparisons) = stages.run("statistics", |note| {
        let mut d = deltas(
            &plan.suite,
            &scores.declared,
            &scores.values.baseline,
            &scores.values.candidate,
            plan.config.seed,
        );
        let family = adjust(
            &mut d,
            plan.config.report.multiple_comparisons,
            plan.suite.categories().len(),
        );
        *note = format!(
            "{} paired deltas, p-values adjusted by {}",
            d.len(),
            family.method.name()
        );
        Ok((d, family))
    })?;
    // From the recorded rows alone, so a replay gives the live run's KL.
    let (distribution, distribution_unavailable) = match plan.config.observe.logprobs {
        true => stages.run("distribution", |note| {
            let d = distribution(
                &plan.suite,
                (&traces.first.baseline, bundles.baseline),
                (&traces.first.candidate, bundles.candidate),
            )?;
            *note = match &d {
                Ok(d) => format!("KL over {} prompts", d.per_prompt.len()),
                Err(why) => why.clone(),
            };
            Ok(match d {
                Ok(d) => (Some(d), None),
                Err(why) => (None, Some(why)),
            })
        })?,
        false => (None, None),
    };
    let (activation_findings, activation_note) = stages.run("activation findings", |note| {
        let (a, why) = findings_on_direction(
            plan,
            gathered.measured.as_deref(),
            bundles.baseline,
            bundles.candidate,
        )?;
        *note = match (&a, &why) {
            (Some(a), _) => format!("{} layers", a.layers.len()),
            (None, Some(why)) => why.clone(),
            (None, None) => "none".into(),
        };
        Ok((a, why))
    })?;
    let routing = stages.run("routing", |note| {
        let r = routing(bundles)?;
        *note = match &r {
            Some(r) => format!("{} layers", r.layers.len()),
            None => "none".into(),
        };
        Ok(r)
    })?;
    let report = &plan.config.report;
    let metric_names: Vec<String> = scores
        .declared
        .iter()
        .map(|d| d.spec.name.clone())
        .collect();
    let values = (&scores.values.baseline, &scores.values.candidate);
    let examples = examples(
        &plan.suite,
        &traces.first.baseline,
        &traces.first.candidate,
        values,
        &metric_names,
        report.max_examples,
        report.record_outputs,
    );
    let prompts = prompt_rows(
        &plan.suite,
        &traces.first.baseline,
        &traces.first.candidate,
        values,
        (&scores.spread.baseline, &scores.spread.candidate),
        &metric_names,
        report.record_outputs,
    );
    Ok(Analysis {
        kinds_in_both: kinds_in_both(&access),
        access,
        gates: gates(&plan.config.gates, &deltas),
        deltas,
        multiple_comparisons,
        distribution,
        distribution_unavailable,
        activation_findings,
        activation_note,
        routing,
        examples,
        prompts,
    })
}

/// Kinds every trace of both sides holds.
fn kinds_in_both(access: &Access) -> Vec<K> {
    access
        .coverage
        .iter()
        .filter(|c| c.baseline == c.of_baseline && c.baseline > 0)
        .filter(|c| c.candidate == c.of_candidate && c.candidate.unwrap_or(0) > 0)
        .map(|c| c.kind)
        .collect()
}
