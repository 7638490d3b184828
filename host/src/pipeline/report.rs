//! Assembles the report from the run's results, and writes its files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use crate::bundle::Bundle;
use crate::config::Redaction;
use crate::config::file::{Format, TransformKind};
use crate::plugin::claims::EvidenceSet;
use crate::report::claims::ClaimStatus;
use crate::report::document::{
    self, Adjustment, BundleRecord, EvidenceSection, InterventionSummary, ModelSide, Report,
    ReportDelta, Reproducibility, StageRecord, Summary, TargetChange,
};
use crate::trace::Trace;

use super::analyze::{self, Analysis, Declared, Values};
use super::claims::Claims;
use super::gather::{Gathered, SuiteTraces};
use super::plan::{Plan, claim_gap};
use super::score::Scores;
use super::sides::{SideName, Sides};

/// Everything [`build`] needs: the earlier stages' values, each whole.
pub(super) struct Inputs<'a> {
    pub plan: &'a Plan,
    pub command: &'a str,
    pub gathered: &'a Gathered,
    pub traces: &'a SuiteTraces<'a>,
    pub scores: Scores,
    pub analysis: Analysis,
    pub evidence: EvidenceSet,
    pub claims: Claims,
}

/// Builds the report document from the stages' values; it computes no
/// finding of its own, only the sentences that present them.
pub(super) fn build(i: Inputs<'_>, stages: &[StageRecord]) -> anyhow::Result<Report> {
    let plan = i.plan;
    let cfg = &plan.config;
    let a = i.analysis;
    let models = Sides::from_fn(|side| {
        model_side(
            i.traces.first[side][0],
            side,
            i.gathered.sides[side].describe.clone(),
        )
    });
    let mut failures = i.scores.failures;
    failures.extend(i.claims.failures);
    let summary = summary(plan, &a, &i.claims.claims, failures.len());
    let limitations = limitations(plan, &a, i.traces.samples, failures.len());
    let interventions = interventions(plan, &a, &models);
    let mut categories = BTreeMap::new();
    for p in &plan.suite.prompts {
        *categories
            .entry(p.category.clone().unwrap_or_else(|| "uncategorised".into()))
            .or_insert(0) += 1;
    }
    let mut plugins = i.scores.plugins.clone();
    plugins.extend(i.claims.plugins.iter().cloned());
    let reproducibility = reproducibility(i.plan, i.command, i.gathered, &models, plugins, stages)?;
    let Sides {
        baseline,
        candidate,
    } = models;
    Ok(Report {
        schema: document::REPORT_SCHEMA.into(),
        title: cfg.report.title.clone(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        summary,
        target_change: TargetChange {
            description: cfg.report.target_change.clone(),
            transformation_kind: cfg.report.transformation_kind.clone(),
            transformation_summary: cfg
                .report
                .transformation_summary
                .clone()
                .or_else(|| candidate.transformation.clone()),
            baseline,
            candidate,
        },
        evidence: EvidenceSection {
            prompts: plan.suite.prompts.len(),
            categories,
            kinds_in_both: a.kinds_in_both,
            scorers: i.scores.plugins,
            claim_mappers: i.claims.plugins,
            plugin_failures: failures,
            judges: i.scores.judges,
        },
        access: a.access,
        claims: i.claims.claims,
        evidence_set: Some(i.evidence),
        metric_deltas: a.deltas,
        distribution: a.distribution,
        distribution_unavailable: a.distribution_unavailable,
        activation_findings: a.activation_findings,
        routing: a.routing,
        interventions,
        examples: a.examples,
        prompts: a.prompts,
        gates: a.gates,
        multiple_comparisons: a.multiple_comparisons,
        limitations,
        reproducibility,
    })
}

/// A side's model as its first trace recorded it.
fn model_side(t: &Trace, side: SideName, describe: Option<String>) -> ModelSide {
    ModelSide {
        label: side.as_str().to_owned(),
        model_name: t.model.name.clone(),
        model_sha256: t.model.sha256.clone(),
        executor: t.capabilities.executor.clone(),
        device: t.device.clone(),
        transformation: describe,
    }
}

/// The headline, the lines under it, and the counts of the summary.
fn summary(
    plan: &Plan,
    a: &Analysis,
    claims: &[document::ReportClaim],
    plugin_failures: usize,
) -> Summary {
    let n = plan.suite.prompts.len();
    let claims_by = |s: ClaimStatus| claims.iter().filter(|c| c.status == s).count();
    let significant: Vec<&ReportDelta> = a.deltas.iter().filter(|d| d.significant).collect();
    let mut lines: Vec<String> = significant.iter().take(5).map(|d| delta_line(d)).collect();
    if let Some(k) = &a.distribution {
        lines.push(format!(
            "next-token KL(baseline ‖ candidate): first token {:.4} nats, mean over the continuation {:.4} nats",
            k.first_token_kl_mean, k.mean_kl
        ));
    }
    for f in a
        .activation_findings
        .iter()
        .flat_map(|a| a.findings.iter())
        .take(2)
    {
        lines.push(f.clone());
    }
    if let Some(f) = a.routing.as_ref().and_then(|r| r.findings.first()) {
        lines.push(f.clone());
    }
    let gates_failed = a.gates.iter().filter(|g| analyze::gate_fails(g)).count();
    let headline = format!(
        "{} vs {} on {n} paired prompts: {} significant change(s) of {} measured ({}); evidence level: {}; claims up to: {}; {} gate(s) failed.",
        plan.candidate.label,
        plan.baseline.label,
        significant.len(),
        a.deltas.len(),
        match a.multiple_comparisons.method {
            Adjustment::None => "p-values not adjusted".to_owned(),
            m => format!("{} adjusted", m.name()),
        },
        a.access.level.as_str().replace('_', " "),
        a.access.claim_strength.as_str().replace('_', " "),
        gates_failed
    );
    Summary {
        headline,
        lines,
        prompts: n,
        claims_accepted: claims_by(ClaimStatus::Accepted),
        claims_downgraded: claims_by(ClaimStatus::Downgraded),
        claims_rejected: claims_by(ClaimStatus::Rejected),
        gates_failed,
        gates_warned: a.gates.iter().filter(|g| g.warns()).count(),
        plugin_failures,
    }
}

/// One significant delta as a summary line.
fn delta_line(d: &ReportDelta) -> String {
    let quality = serde_json::to_value(d.quality)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    format!(
        "{}: {:.3} → {:.3} ({:+.3}, 95% CI [{}, {}], p = {}, adjusted {}; {})",
        d.id,
        d.baseline_mean,
        d.candidate_mean,
        d.delta,
        d.ci_low.map_or("–".into(), |v| format!("{v:+.3}")),
        d.ci_high.map_or("–".into(), |v| format!("{v:+.3}")),
        d.p_value.map_or("–".into(), fmt_p),
        d.p_adjusted.map_or("–".into(), fmt_p),
        quality
    )
}

/// What the recorded interventions were, one summary per side and mode,
/// and each side's weight orthogonalization (which leaves no record in
/// the traces: it changed the weights before any ran).
fn interventions(plan: &Plan, a: &Analysis, models: &Sides<ModelSide>) -> Vec<InterventionSummary> {
    let mut by: BTreeMap<(String, String), InterventionSummary> = BTreeMap::new();
    for r in &a.access.interventions {
        let mode = r.mode();
        let e = by
            .entry((r.side.as_str().to_owned(), mode.clone()))
            .or_insert_with(|| InterventionSummary {
                side: r.side,
                description: match r.side {
                    document::Side::Baseline => models.baseline.transformation.clone(),
                    _ => models.candidate.transformation.clone(),
                }
                .unwrap_or_else(|| format!("{mode} intervention")),
                traces: 0,
                layers: Vec::new(),
                labels: r.labels.clone(),
            });
        if let Some(l) = r.layer
            && !e.layers.contains(&l)
        {
            e.layers.push(l);
        }
        e.traces += 1;
    }
    let mut out: Vec<InterventionSummary> = by.into_values().collect();
    for s in &mut out {
        s.layers.sort_unstable();
        // each trace holds one record per layer
        s.traces /= s.layers.len().max(1);
    }
    for (side, model) in models.iter() {
        let kind = plan.side(side).transform.as_ref().map(|t| t.kind);
        if kind == Some(TransformKind::Orthogonalize) {
            out.push(InterventionSummary {
                side: side.document(),
                description: model.transformation.clone().unwrap_or_default(),
                traces: 0,
                layers: Vec::new(),
                labels: BTreeMap::from([("kind".into(), "weight_orthogonalization".into())]),
            });
        }
    }
    out
}

/// What the report cannot say and why, one sentence each.
fn limitations(
    plan: &Plan,
    a: &Analysis,
    samples: Sides<usize>,
    plugin_failures: usize,
) -> Vec<String> {
    let cfg = &plan.config;
    let mut limitations = Vec::new();
    if let Some(wanted) = cfg.report.claim_strength
        && wanted > a.access.claim_strength
    {
        limitations.push(claim_gap(
            wanted,
            a.access.claim_strength,
            "the traces allow at most",
        ));
    }
    let n = plan.suite.prompts.len();
    if n < 30 {
        let family = match a.multiple_comparisons.method {
            Adjustment::None => format!(
                "the p-values are not corrected for the {} comparisons made",
                a.deltas.len()
            ),
            m => format!(
                "the p-values are adjusted ({}) over the {} tests made, which lowers the power further",
                m.name(),
                a.multiple_comparisons.tests
            ),
        };
        limitations.push(format!(
            "{n} paired prompts: intervals are wide and only large changes can reach significance; {family}"
        ));
    }
    for side in SideName::BOTH {
        let g = &plan.side(side).generation;
        let imported = plan.side(side).backend == crate::config::file::ExecutorKind::Replay
            && g.samples > 1
            && g.temperature == 0.0;
        limitations.push(match (g.temperature == 0.0, samples[side]) {
            // An imported log's epochs: the decoding is the other tool's.
            (true, s) if imported && s > 1 => format!(
                "{side}: {s} recorded samples (epochs) per prompt, decoded as the log's tool decoded them; each metric is averaged over a prompt's samples before the paired tests"
            ),
            (true, _) => format!(
                "{side}: greedy decoding, one completion per prompt, so its sampling variability is not measured"
            ),
            (false, 1) => format!(
                "{side}: sampled decoding (temperature {}, seed {}), one sample per prompt: set observe.samples to measure the spread",
                g.temperature, g.seed
            ),
            (false, s) => format!(
                "{side}: sampled decoding (temperature {}, seeds {} to {}), {s} samples per prompt; each metric is averaged over a prompt's samples before the paired tests, and the prompt table shows their spread",
                g.temperature,
                g.seed,
                g.seed.wrapping_add(s as u64 - 1)
            ),
        });
    }
    if let Some(d) = &a.distribution
        && let (Some(k), Some(rest)) = (d.top_k, d.baseline_rest_mass)
    {
        limitations.push(format!(
            "the KL is over the baseline's {k} most likely tokens at each position plus one bucket for the rest of the vocabulary (on average {:.2}% of the baseline's probability): a lower bound of the full KL",
            rest * 100.0
        ));
    }
    // What the plan found short of exact or of the config (an edit a
    // model's layout makes inexact, generation cut by the context).
    limitations.extend(plan.warnings.iter().cloned());
    if let Some(why) = &a.distribution_unavailable {
        limitations.push(format!("no KL divergence: {why}"));
    }
    for m in &a.access.missing_evidence {
        limitations.push(format!("missing evidence: {m}"));
    }
    if let Some(note) = &a.activation_note {
        limitations.push(note.clone());
    }
    if plugin_failures > 0 {
        limitations.push(format!(
            "{plugin_failures} plugin failure(s): the metrics or claims of those plugins are absent from this report (see Evidence)"
        ));
    }
    let redacted = plan
        .suite
        .prompts
        .iter()
        .filter(|p| p.redaction != Redaction::Safe)
        .count();
    if redacted > 0 {
        limitations.push(format!(
            "{redacted} prompt(s) are redacted or omitted: their text and outputs are not shown in examples or the prompt table, and omitted prompts have no row there"
        ));
    }
    limitations.push("metrics are only as good as the scorers: phrase-based refusal detection misses refusals without the listed phrases and counts quoted phrases".into());
    limitations
}

/// What is needed to repeat the run: the command, the config and suite
/// digests, each side's weights, the plugins, the bundles, the seeds and
/// the stages' times.
fn reproducibility(
    plan: &Plan,
    command: &str,
    gathered: &Gathered,
    models: &Sides<ModelSide>,
    plugins: Vec<document::PluginRecord>,
    stages: &[StageRecord],
) -> anyhow::Result<Reproducibility> {
    let digests = models
        .iter()
        .map(|(side, m)| {
            let sha = gathered.sides[side]
                .model_sha256
                .clone()
                .or_else(|| m.model_sha256.clone())
                .unwrap_or_else(|| "unknown".into());
            (side.as_str().to_owned(), sha)
        })
        .collect();
    let mut bundles = BTreeMap::new();
    for side in SideName::BOTH {
        let record = bundle_record(&gathered.bundles[side], gathered.reused[side])?;
        bundles.insert(side.as_str().to_owned(), record);
    }
    let (config_sha256, _) = crate::hash::sha256_file(&plan.config_path)
        .with_context(|| format!("cannot hash {}", plan.config_path.display()))?;
    Ok(Reproducibility {
        command: command.to_owned(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        config_path: plan.config_path.display().to_string(),
        config_sha256,
        config_text: config_text(plan),
        suite_sha256: plan.suite_sha256.clone(),
        models: digests,
        plugins,
        bundles,
        seeds: crate::config::file::seeds(&plan.config),
        stages: stages.to_vec(),
    })
}

/// What the report records of a side's bundle.
fn bundle_record(b: &Bundle, reused: usize) -> anyhow::Result<BundleRecord> {
    let manifest = b.root().join("manifest.json");
    let (sha, _) = crate::hash::sha256_file(&manifest)
        .with_context(|| format!("cannot hash {}", manifest.display()))?;
    Ok(BundleRecord {
        path: b.root().display().to_string(),
        manifest_sha256: sha,
        traces: b.traces().len(),
        reused,
    })
}

/// Writes the configured formats atomically; the reproducibility section
/// gets the render stage's own timing only in the files written after it.
pub(super) fn write(plan: &Plan, report: &mut Report) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for f in &plan.config.report.formats {
        let (ext, text) = match f {
            Format::Json => ("json", serde_json::to_string_pretty(&report)? + "\n"),
            Format::Md => ("md", crate::report::render::markdown(report)),
            Format::Html => ("html", crate::report::render::html(report)),
        };
        let path = super::report_path(&plan.output, ext);
        crate::atomic_file::write(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        files.push(path);
    }
    Ok(files)
}

/// Every prompt's value of every metric, on both sides, one JSON object a
/// line (`scores.jsonl` beside the report): suite order, then side, then
/// the order the scorers declared their metrics.
pub(super) fn write_scores(
    plan: &Plan,
    declared: &[Declared],
    values: &Sides<Values>,
) -> anyhow::Result<PathBuf> {
    let mut text = String::new();
    for p in &plan.suite.prompts {
        for (side, v) in values.iter() {
            for d in declared {
                let Some(&value) = v.get(&(p.id.clone(), d.spec.name.clone())) else {
                    continue;
                };
                let row = document::ScoreRow {
                    prompt_id: p.id.clone(),
                    category: p.category.clone(),
                    side: side.document(),
                    scorer: d.scorer.clone(),
                    metric: d.spec.name.clone(),
                    value,
                };
                text.push_str(&serde_json::to_string(&row)?);
                text.push('\n');
            }
        }
    }
    let path = plan.output.join("scores.jsonl");
    crate::atomic_file::write(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// A p-value for a sentence: 3 significant digits, scientific when tiny.
fn fmt_p(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.2e}")
    } else {
        format!("{p:.3}")
    }
}

/// The config as the report shows it: withheld when it holds redacted or
/// omitted prompts inline (its sha256 still identifies it).
fn config_text(plan: &Plan) -> String {
    let inline_hidden = plan
        .config
        .suite
        .prompts
        .iter()
        .any(|p| p.redaction != Redaction::Safe);
    match inline_hidden {
        true => "(withheld: the config holds redacted or omitted prompts inline; move them to a suite file to show the config)".into(),
        false => plan.config_text.clone(),
    }
}
