//! Assembles the report from the run's results, and writes its files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::bundle::Bundle;
use crate::config::Redaction;
use crate::config::file::Format;
use crate::report::Access;
use crate::report::claims::ClaimStatus;
use crate::report::document::Side;
use crate::report::document::{
    self, ActivationFindings, Adjustment, BundleRecord, DistributionShift, EvidenceSection,
    InterventionSummary, ModelSide, MultipleComparisons, PluginFailure, PluginRecord, Report,
    ReportClaim, ReportDelta, Reproducibility, StageRecord, Summary, TargetChange,
};
use crate::trace::{ArtifactKind as K, Trace};

use super::analyze::{self, Declared, Values};
use super::plan::{DirectionRef, Plan, SideName, claim_gap};
use super::record::LoadedSide;

/// Everything [`build`] needs.
pub(super) struct Inputs<'a> {
    pub plan: &'a Plan,
    pub command: &'a str,
    pub base_traces: &'a [&'a Trace],
    pub cand_traces: &'a [&'a Trace],
    pub sides: Option<&'a [LoadedSide; 2]>,
    pub access: Access,
    pub kinds_in_both: Vec<K>,
    pub declared: &'a [Declared],
    pub values: &'a [Values; 2],
    /// Each side's per-prompt standard deviation over samples (empty with
    /// one sample per prompt).
    pub spread: &'a [Values; 2],
    /// Generations per prompt on each side.
    pub samples: [usize; 2],
    pub deltas: Vec<ReportDelta>,
    pub multiple_comparisons: MultipleComparisons,
    pub distribution: Option<DistributionShift>,
    /// Why there is no KL, when logprobs were asked for.
    pub distribution_unavailable: Option<String>,
    pub activation_findings: Option<ActivationFindings>,
    /// How a mixture of experts' routing moved.
    pub routing: Option<document::RoutingFindings>,
    /// Why there are no activation findings, when a direction was named.
    pub activation_note: Option<String>,
    pub claims: Vec<ReportClaim>,
    pub scorers: Vec<PluginRecord>,
    pub mappers: Vec<PluginRecord>,
    pub failures: Vec<PluginFailure>,
    pub bundles: BTreeMap<String, BundleRecord>,
}

/// Kinds every trace of both sides holds.
pub(super) fn kinds_in_both(access: &Access) -> Vec<K> {
    access
        .coverage
        .iter()
        .filter(|c| c.baseline == c.of_baseline && c.baseline > 0)
        .filter(|c| c.candidate == c.of_candidate && c.candidate.unwrap_or(0) > 0)
        .map(|c| c.kind)
        .collect()
}

fn side_of(t: &Trace, label: &str, describe: Option<String>) -> ModelSide {
    ModelSide {
        label: label.to_owned(),
        model_name: t.model.name.clone(),
        model_sha256: t.model.sha256.clone(),
        executor: t.capabilities.executor.clone(),
        device: t.device.clone(),
        transformation: describe,
    }
}

/// Per-layer projections of both sides onto the report's direction, when
/// there is one and the traces hold activations. A configured direction
/// that cannot be read here (a replay on another machine) gives no findings
/// and the reason, which the report lists among its limitations.
pub(super) fn activation_findings(
    plan: &Plan,
    measured: Option<&Path>,
    baseline: &Bundle,
    candidate: &Bundle,
) -> anyhow::Result<(Option<ActivationFindings>, Option<String>)> {
    let (v, label, sha) = match report_direction(plan, measured) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok((None, None)),
        Err(why) => {
            return Ok((None, Some(format!("no activation findings: {why}"))));
        }
    };
    let projections = analyze::projections(
        &plan.suite,
        [(Side::Baseline, baseline), (Side::Candidate, candidate)],
        &v,
    )?;
    Ok((analyze::activation_findings(label, sha, projections), None))
}

/// The unit direction for activation findings, with its label and sha256;
/// none when the config names none; why not when it names one that cannot
/// be read.
fn report_direction(
    plan: &Plan,
    measured: Option<&Path>,
) -> Result<Option<(Vec<f32>, String, String)>, String> {
    let Some((d, tensor)) = plan.report_direction.as_ref() else {
        return Ok(None);
    };
    let (path, tensor) = match d {
        DirectionRef::File(p) => (p.clone(), tensor.clone()),
        DirectionRef::Measured => {
            let Some(p) = measured
                .map(Path::to_path_buf)
                .or_else(|| plan.measure.as_ref().map(|m| m.out.clone()))
            else {
                return Err("the report direction is `measured`, but nothing was measured".into());
            };
            (
                p,
                Some(tensor.clone().unwrap_or_else(|| "direction".into())),
            )
        }
    };
    let dir = crate::intervene::load_direction(&path, tensor.as_deref(), None, 0)
        .map_err(|e| format!("the report direction cannot be read here: {e}"))?;
    let v = dir.basis;
    Ok(Some((
        v,
        format!("{} (tensor {})", path.display(), dir.tensor),
        dir.file_sha256,
    )))
}

/// Builds the report.
pub(super) fn build(i: Inputs<'_>, stages: &[StageRecord]) -> anyhow::Result<Report> {
    let plan = i.plan;
    let cfg = &plan.config;
    let describe = |k: usize| i.sides.and_then(|s| s[k].describe.clone());
    let baseline = side_of(i.base_traces[0], "baseline", describe(0));
    let candidate = side_of(i.cand_traces[0], "candidate", describe(1));

    let mut categories = BTreeMap::new();
    for p in &plan.suite.prompts {
        *categories
            .entry(p.category.clone().unwrap_or_else(|| "uncategorised".into()))
            .or_insert(0) += 1;
    }

    // interventions
    let mut interventions: BTreeMap<(String, String), InterventionSummary> = BTreeMap::new();
    for r in &i.access.interventions {
        let mode = r.mode();
        let e = interventions
            .entry((r.side.as_str().to_owned(), mode.clone()))
            .or_insert_with(|| InterventionSummary {
                side: r.side,
                description: match r.side {
                    Side::Baseline => baseline.transformation.clone(),
                    _ => candidate.transformation.clone(),
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
    let mut interventions: Vec<InterventionSummary> = interventions.into_values().collect();
    for s in &mut interventions {
        s.layers.sort_unstable();
        // each trace holds one record per layer
        s.traces /= s.layers.len().max(1);
    }
    for (k, side) in [(0, &baseline), (1, &candidate)] {
        if let Some(t) = plan_side_transform(plan, k)
            && t == crate::config::file::TransformKind::Orthogonalize
        {
            interventions.push(InterventionSummary {
                side: [Side::Baseline, Side::Candidate][k],
                description: side.transformation.clone().unwrap_or_default(),
                traces: 0,
                layers: Vec::new(),
                labels: BTreeMap::from([("kind".into(), "weight_orthogonalization".into())]),
            });
        }
    }

    let metric_names: Vec<String> = i.declared.iter().map(|d| d.spec.name.clone()).collect();
    let examples = analyze::examples(
        &plan.suite,
        i.base_traces,
        i.cand_traces,
        (&i.values[0], &i.values[1]),
        &metric_names,
        cfg.report.max_examples,
        cfg.report.record_outputs,
    );
    let prompts = analyze::prompt_rows(
        &plan.suite,
        i.base_traces,
        i.cand_traces,
        (&i.values[0], &i.values[1]),
        (&i.spread[0], &i.spread[1]),
        &metric_names,
        cfg.report.record_outputs,
    );
    let gates = analyze::gates(&cfg.gates, &i.deltas);

    // limitations
    let mut limitations = Vec::new();
    if let Some(wanted) = cfg.report.claim_strength
        && wanted > i.access.claim_strength
    {
        limitations.push(claim_gap(
            wanted,
            i.access.claim_strength,
            "the traces allow at most",
        ));
    }
    let n = plan.suite.prompts.len();
    if n < 30 {
        let family = match i.multiple_comparisons.method {
            Adjustment::None => format!(
                "the p-values are not corrected for the {} comparisons made",
                i.deltas.len()
            ),
            m => format!(
                "the p-values are adjusted ({}) over the {} tests made, which lowers the power further",
                m.name(),
                i.multiple_comparisons.tests
            ),
        };
        limitations.push(format!(
            "{n} paired prompts: intervals are wide and only large changes can reach significance; {family}"
        ));
    }
    for (k, side) in [(0, &plan.baseline), (1, &plan.candidate)] {
        let g = &side.generation;
        let name = side.name.as_str();
        limitations.push(match (g.temperature == 0.0, i.samples[k]) {
            (true, _) => format!(
                "{name}: greedy decoding, one completion per prompt, so its sampling variability is not measured"
            ),
            (false, 1) => format!(
                "{name}: sampled decoding (temperature {}, seed {}), one sample per prompt: set observe.samples to measure the spread",
                g.temperature, g.seed
            ),
            (false, s) => format!(
                "{name}: sampled decoding (temperature {}, seeds {} to {}), {s} samples per prompt; each metric is averaged over a prompt's samples before the paired tests, and the prompt table shows their spread",
                g.temperature,
                g.seed,
                g.seed.wrapping_add(s as u64 - 1)
            ),
        });
    }
    if let Some(d) = &i.distribution
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
    if let Some(why) = &i.distribution_unavailable {
        limitations.push(format!("no KL divergence: {why}"));
    }
    for m in &i.access.missing_evidence {
        limitations.push(format!("missing evidence: {m}"));
    }
    if let Some(note) = &i.activation_note {
        limitations.push(note.clone());
    }
    if !i.failures.is_empty() {
        limitations.push(format!(
            "{} plugin failure(s): the metrics or claims of those plugins are absent from this report (see Evidence)",
            i.failures.len()
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

    let claims_by = |s: ClaimStatus| i.claims.iter().filter(|c| c.status == s).count();
    let significant: Vec<&ReportDelta> = i.deltas.iter().filter(|d| d.significant).collect();
    let mut lines = Vec::new();
    for d in significant.iter().take(5) {
        lines.push(format!(
            "{}: {:.3} → {:.3} ({:+.3}, 95% CI [{}, {}], p = {}, adjusted {}; {})",
            d.id,
            d.baseline_mean,
            d.candidate_mean,
            d.delta,
            d.ci_low.map_or("–".into(), |v| format!("{v:+.3}")),
            d.ci_high.map_or("–".into(), |v| format!("{v:+.3}")),
            d.p_value.map_or("–".into(), fmt_p),
            d.p_adjusted.map_or("–".into(), fmt_p),
            serde_json::to_value(d.quality)?
                .as_str()
                .unwrap_or_default()
        ));
    }
    if let Some(k) = &i.distribution {
        lines.push(format!(
            "next-token KL(baseline ‖ candidate): first token {:.4} nats, mean over the continuation {:.4} nats",
            k.first_token_kl_mean, k.mean_kl
        ));
    }
    for f in i
        .activation_findings
        .iter()
        .flat_map(|a| a.findings.iter())
        .take(2)
    {
        lines.push(f.clone());
    }
    if let Some(f) = i.routing.as_ref().and_then(|r| r.findings.first()) {
        lines.push(f.clone());
    }
    let gates_failed = gates.iter().filter(|g| analyze::gate_fails(g)).count();
    let gates_warned = gates.iter().filter(|g| g.warns()).count();
    let headline = format!(
        "{} vs {} on {n} paired prompts: {} significant change(s) of {} measured ({}); evidence level: {}; claims up to: {}; {} gate(s) failed.",
        plan.candidate.label,
        plan.baseline.label,
        significant.len(),
        i.deltas.len(),
        match i.multiple_comparisons.method {
            Adjustment::None => "p-values not adjusted".to_owned(),
            m => format!("{} adjusted", m.name()),
        },
        i.access.level.as_str().replace('_', " "),
        i.access.claim_strength.as_str().replace('_', " "),
        gates_failed
    );

    let mut plugins = i.scorers.clone();
    plugins.extend(i.mappers.iter().cloned());
    let models = [
        (SideName::Baseline, &baseline),
        (SideName::Candidate, &candidate),
    ]
    .into_iter()
    .map(|(side, s)| {
        (
            side.as_str().to_owned(),
            i.sides
                .and_then(|x| x[side.index()].model_sha256.clone())
                .or_else(|| s.model_sha256.clone())
                .unwrap_or_else(|| "unknown".into()),
        )
    })
    .collect();
    let (config_sha256, _) = crate::hash::sha256_file(&plan.config_path)
        .with_context(|| format!("cannot hash {}", plan.config_path.display()))?;

    Ok(Report {
        schema: document::REPORT_SCHEMA.into(),
        title: cfg.report.title.clone(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        summary: Summary {
            headline,
            lines,
            prompts: n,
            claims_accepted: claims_by(ClaimStatus::Accepted),
            claims_downgraded: claims_by(ClaimStatus::Downgraded),
            claims_rejected: claims_by(ClaimStatus::Rejected),
            gates_failed,
            gates_warned,
            plugin_failures: i.failures.len(),
        },
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
            prompts: n,
            categories,
            kinds_in_both: i.kinds_in_both,
            scorers: i.scorers,
            claim_mappers: i.mappers,
            plugin_failures: i.failures,
        },
        access: i.access,
        claims: i.claims,
        metric_deltas: i.deltas,
        distribution: i.distribution,
        distribution_unavailable: i.distribution_unavailable,
        activation_findings: i.activation_findings,
        routing: i.routing,
        interventions,
        examples,
        prompts,
        gates,
        multiple_comparisons: i.multiple_comparisons,
        limitations,
        reproducibility: Reproducibility {
            command: i.command.to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            config_path: plan.config_path.display().to_string(),
            config_sha256,
            config_text: config_text(plan),
            suite_sha256: plan.suite_sha256.clone(),
            models,
            plugins,
            bundles: i.bundles,
            seeds: crate::config::file::seeds(cfg),
            stages: stages.to_vec(),
        },
    })
}

fn plan_side_transform(plan: &Plan, k: usize) -> Option<crate::config::file::TransformKind> {
    [&plan.baseline, &plan.candidate][k]
        .transform
        .as_ref()
        .map(|t| t.kind)
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
    values: &[Values; 2],
) -> anyhow::Result<PathBuf> {
    let mut text = String::new();
    for p in &plan.suite.prompts {
        for (side, v) in [Side::Baseline, Side::Candidate].into_iter().zip(values) {
            for d in declared {
                let Some(&value) = v.get(&(p.id.clone(), d.spec.name.clone())) else {
                    continue;
                };
                let row = document::ScoreRow {
                    prompt_id: p.id.clone(),
                    category: p.category.clone(),
                    side,
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
