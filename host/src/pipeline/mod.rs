//! The main job: plan → trace both models (reusing
//! recorded traces) → score with plugins → paired statistics → evidence
//! set → claim mappers → the host's check of every claim → render →
//! regression gates. Each stage is timed; the report's reproducibility
//! section lists them.
//!
//! This is orchestration at the edge of the binary: its errors are
//! `anyhow` with the stage as context; the pieces it calls have typed ones.

pub mod analyze;
mod evidence;
pub mod plan;
pub mod progress;
pub mod record;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::bundle::Bundle;
use crate::config::Suite;
use crate::config::file::ExecutorKind;
use crate::executor::Executor;
use crate::interrupt;
use crate::plugin::claims::ClaimMapper;
use crate::plugin::scorer::Scorer;
use crate::plugin::{HostOptions, PluginHost, SandboxOptions};
use crate::report::document::{
    BundleRecord, DistributionShift, PluginFailure, PluginRecord, Report, ReportClaim, StageRecord,
};
use crate::report::{Evidence, access_from_evidence};

pub use plan::{Plan, SideName};

/// The `tracing` target of what a user should see by default (not a
/// warning, not a debug detail): "reusing 3 of 6 recorded baseline traces".
/// The binary prints these as plain lines; `-q` hides them.
pub const NOTICE: &str = "vauban::notice";

/// What a finished run produced.
pub struct Outcome {
    pub report: Report,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// Gates whose failure sets exit code 3.
    pub failed_gates: usize,
}

/// Times the stages of a run, and stops before the next one when the
/// user asked ([`interrupt`]).
#[derive(Default)]
struct Stages {
    records: Vec<StageRecord>,
    kept: Kept,
}

/// What the trace stage has kept, for the message of a stop after it.
#[derive(Default)]
struct Kept {
    sides: Vec<interrupt::Kept>,
    cache: PathBuf,
}

impl Stages {
    fn run<T>(
        &mut self,
        stage: &str,
        f: impl FnOnce(&mut String) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        if interrupt::requested() {
            return Err(interrupt::Interrupted {
                at: format!("before the stage `{stage}`"),
                kept: self.kept.sides.clone(),
                cache: self.kept.cache.clone(),
            }
            .into());
        }
        let start = Instant::now();
        let _span = tracing::info_span!("stage", stage).entered();
        let mut note = String::new();
        let out = f(&mut note).with_context(|| format!("stage `{stage}`"))?;
        let seconds = start.elapsed().as_secs_f64();
        tracing::info!("{stage}: {seconds:.2} s {note}");
        self.records.push(StageRecord {
            stage: stage.to_owned(),
            seconds,
            note,
        });
        Ok(out)
    }
}

/// The bar every long command shows ([`progress::bar`]).
pub use progress::bar as progress_bar;

/// Everything the report is built from.
pub(crate) struct Gathered {
    pub baseline: Bundle,
    pub candidate: Bundle,
    pub reused: [usize; 2],
    pub sides: Option<[record::LoadedSide; 2]>,
    pub measured: Option<PathBuf>,
}

/// Runs the plan and writes the report files into the plan's output folder.
/// Each side is served by its executor: the model, run and traced (`vauban
/// run`), or a recorded bundle replayed (`vauban diff`, or
/// `executor = "replay"`); everything after the traces is the same code.
pub fn run(plan: &Plan, command: &str) -> anyhow::Result<Outcome> {
    let mut stages = Stages::default();
    std::fs::create_dir_all(&plan.output)
        .with_context(|| format!("cannot create the output folder {}", plan.output.display()))?;
    let gathered = trace_both(plan, &mut stages)?;
    let baseline_bundle = Arc::new(gathered.baseline);
    let candidate_bundle = Arc::new(gathered.candidate);
    // A prompt's first sample: what examples show and the KL pairs.
    let base_traces = order(&plan.suite, baseline_bundle.traces(), "baseline")?;
    let cand_traces = order(&plan.suite, candidate_bundle.traces(), "candidate")?;
    // Every sample of every prompt: what the scorers score.
    let all_traces: [Vec<&crate::trace::Trace>; 2] = [
        baseline_bundle.traces().iter().collect(),
        candidate_bundle.traces().iter().collect(),
    ];
    let samples = [
        all_traces[0].len() / base_traces.len().max(1),
        all_traces[1].len() / cand_traces.len().max(1),
    ];

    // score
    let host = PluginHost::new(HostOptions {
        cache_dir: HostOptions::default_cache_dir(),
        fuel_metering: false,
    })?;
    let mut failures: Vec<PluginFailure> = Vec::new();
    let mut scorer_records = Vec::new();
    let scored = stages.run("score", |note| {
        let mut declared = Vec::new();
        let mut values = [analyze::Samples::new(), analyze::Samples::new()];
        // One step per scorer and side.
        let bar = progress::bar(2 * plan.scorers.len() as u64, "scoring");
        for p in &plan.scorers {
            let scorer = match host
                .load(&p.path)
                .and_then(|plugin| Scorer::new(plugin, &p.config_json, sandbox(plan, p)))
            {
                Ok(s) => s,
                Err(e) => {
                    failures.push(failure(&p.name, "load", &e));
                    bar.inc(2);
                    continue;
                }
            };
            scorer_records.push(record_of(scorer.plugin(), &scorer.info().plugin, "scorer"));
            let mut ok = true;
            for (i, (traces, bundle)) in [
                (&all_traces[0], &baseline_bundle),
                (&all_traces[1], &candidate_bundle),
            ]
            .into_iter()
            .enumerate()
            {
                let src: Arc<dyn crate::plugin::tensors::TensorSource> = bundle.clone();
                bar.set_message(format!("{} {}", p.name, SideName::BOTH[i]));
                let scored = scorer.score(traces, Some(src));
                bar.inc(1);
                match scored {
                    Ok(outcome) => {
                        for m in outcome.metrics {
                            let id = traces
                                .iter()
                                .find(|t| t.id == m.trace)
                                .and_then(|t| t.request.prompt_id.clone())
                                .unwrap_or(m.trace);
                            values[i].entry((id, m.name)).or_default().push(m.value);
                        }
                        if !outcome.skipped.is_empty() {
                            failures.push(PluginFailure {
                                plugin: p.name.clone(),
                                stage: format!("score {}", SideName::BOTH[i]),
                                failure: Some("missing_artifacts".into()),
                                message: format!(
                                    "{} trace(s) skipped for lack of {}",
                                    outcome.skipped.len(),
                                    outcome.skipped[0]
                                        .missing
                                        .iter()
                                        .map(|k| k.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            });
                        }
                    }
                    Err(e) => {
                        ok = false;
                        failures.push(failure(
                            &p.name,
                            &format!("score {}", SideName::BOTH[i]),
                            &e,
                        ));
                    }
                }
            }
            if ok {
                declared.extend(scorer.info().metrics.iter().map(|m| analyze::Declared {
                    scorer: scorer.info().plugin.name.clone(),
                    spec: m.clone(),
                    needs: scorer.info().needs.clone(),
                }));
            }
        }
        bar.finish_and_clear();
        *note = format!(
            "{} metric(s) from {} scorer(s)",
            declared.len(),
            scorer_records.len()
        );
        Ok((declared, values))
    })?;
    let (declared, per_sample) = scored;
    // The prompt is the unit of the paired tests: its samples averaged.
    let (b, b_spread) = analyze::per_prompt(&per_sample[0]);
    let (c, c_spread) = analyze::per_prompt(&per_sample[1]);
    let (values, spread) = ([b, c], [b_spread, c_spread]);

    // statistics
    let access = stages.run("access", |note| {
        let a = access_from_evidence(Evidence::Paired {
            baseline: &base_traces.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
            candidate: &cand_traces.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
        })?;
        *note = format!("level {}", a.level);
        Ok(a)
    })?;
    let (deltas, multiple_comparisons) = stages.run("statistics", |note| {
        let mut d = analyze::deltas(
            &plan.suite,
            &declared,
            &values[0],
            &values[1],
            plan.config.seed,
        );
        let family = analyze::adjust(
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
    let (distribution, distribution_unavailable): (Option<DistributionShift>, Option<String>) =
        match plan.config.observe.logprobs {
            true => stages.run("distribution", |note| {
                let d = analyze::distribution(
                    &plan.suite,
                    (&base_traces, &baseline_bundle),
                    (&cand_traces, &candidate_bundle),
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
        let (a, why) = report::activation_findings(
            plan,
            gathered.measured.as_deref(),
            &baseline_bundle,
            &candidate_bundle,
        )?;
        *note = match (&a, &why) {
            (Some(a), _) => format!("{} layers", a.layers.len()),
            (None, Some(why)) => why.clone(),
            (None, None) => "none".into(),
        };
        Ok((a, why))
    })?;

    let routing = stages.run("routing", |note| {
        let r = analyze::routing([&baseline_bundle, &candidate_bundle])?;
        *note = match &r {
            Some(r) => format!("{} layers", r.layers.len()),
            None => "none".into(),
        };
        Ok(r)
    })?;

    // claims
    let kinds_in_both = report::kinds_in_both(&access);
    let evidence = evidence::evidence_set(evidence::Findings {
        access: &access,
        kinds_in_both: &kinds_in_both,
        deltas: deltas
            .iter()
            .map(crate::report::document::ReportDelta::for_claims)
            .collect(),
        distribution: distribution.as_ref(),
        activations: activation_findings.as_ref(),
        baseline: &base_traces,
        candidate: &cand_traces,
    });
    // Ids are unique by construction (finding ids hold a `:`, metric names
    // cannot); a collision would let a claim borrow another's support.
    let collisions = evidence.duplicate_ids();
    if !collisions.is_empty() {
        bail!(
            "evidence ids collide ({}): a claim citing one could not be checked; this is a bug in vauban",
            collisions.join(", ")
        );
    }
    let mut mapper_records = Vec::new();
    let claims: Vec<ReportClaim> = stages.run("claims", |note| {
        let mut out = Vec::new();
        for p in &plan.claim_mappers {
            let mapper = match host
                .load(&p.path)
                .and_then(|plugin| ClaimMapper::new(plugin, &p.config_json, sandbox(plan, p)))
            {
                Ok(m) => m,
                Err(e) => {
                    failures.push(failure(&p.name, "load", &e));
                    continue;
                }
            };
            mapper_records.push(record_of(mapper.plugin(), mapper.info(), "claim-mapper"));
            match mapper.propose(&evidence) {
                Ok(proposed) => {
                    for checked in crate::report::claims::check_all(&proposed, &evidence) {
                        out.push(ReportClaim {
                            statement: checked.statement,
                            strength: checked.strength,
                            proposed_strength: checked.proposed_strength,
                            status: checked.status,
                            evidence: checked.evidence,
                            limitations: checked.limitations,
                            reasons: checked.reasons,
                            scope: checked.scope,
                            mapper: mapper.info().name.clone(),
                        });
                    }
                }
                Err(e) => failures.push(failure(&p.name, "propose", &e)),
            }
        }
        *note = format!("{} claim(s) checked", out.len());
        Ok(out)
    })?;

    let bundles = BTreeMap::from([
        (
            "baseline".to_owned(),
            bundle_record(&baseline_bundle, gathered.reused[0])?,
        ),
        (
            "candidate".to_owned(),
            bundle_record(&candidate_bundle, gathered.reused[1])?,
        ),
    ]);
    let inputs = report::Inputs {
        plan,
        command,
        base_traces: &base_traces,
        cand_traces: &cand_traces,
        sides: gathered.sides.as_ref(),
        access,
        kinds_in_both,
        declared: &declared,
        values: &values,
        spread: &spread,
        samples,
        deltas,
        multiple_comparisons,
        distribution,
        distribution_unavailable,
        activation_findings,
        routing,
        activation_note,
        claims,
        scorers: scorer_records,
        mappers: mapper_records,
        failures,
        bundles,
    };
    let mut report = report::build(inputs, &stages.records)?;
    let files = stages.run("render", |note| {
        let mut files = report::write(plan, &mut report)?;
        files.push(report::write_scores(plan, &declared, &values)?);
        *note = format!("{} file(s)", files.len());
        Ok(files)
    })?;
    let failed_gates = report
        .gates
        .iter()
        .filter(|g| analyze::gate_fails(g))
        .count();
    Ok(Outcome {
        report,
        files,
        failed_gates,
    })
}

/// The stages before scoring: load both sides, measure (when configured
/// and the baseline is a model), trace every prompt on both.
fn trace_both(plan: &Plan, stages: &mut Stages) -> anyhow::Result<Gathered> {
    let baseline = stages.run("load baseline", |note| {
        let spinner = progress::spinner("loading the baseline model");
        let s = record::load_side(&plan.baseline, None, &plan.output);
        spinner.finish_and_clear();
        let s = s?;
        *note = s.exec.model_ref().name;
        Ok(s)
    })?;
    let measured = match &plan.measure {
        Some(m) if !baseline.exec.is_replay() => {
            Some(stages.run("measure", |note| measure_stage(m, &baseline, note))?)
        }
        _ => None,
    };
    let candidate = stages.run("load candidate", |note| {
        let spinner = progress::spinner("loading the candidate model");
        let s = record::load_side(&plan.candidate, measured.as_deref(), &plan.output);
        spinner.finish_and_clear();
        let s = s?;
        *note = s
            .describe
            .clone()
            .unwrap_or_else(|| s.exec.model_ref().name);
        Ok(s)
    })?;
    let n = plan.suite.prompts.len();
    let cache = plan.output.join("traces").join("cache");
    let mut recorded: Vec<record::Recorded> = Vec::new();
    let mut recorded_kept: Vec<interrupt::Kept> = Vec::new();
    for (side, plan_side) in [(&baseline, &plan.baseline), (&candidate, &plan.candidate)] {
        let name = plan_side.name.as_str();
        // The candidate scores the baseline's continuations after its own
        // prompt: the KL's other half, recorded in its traces.
        let references = match recorded.first() {
            Some(b) if plan.config.observe.logprobs => {
                references(&b.bundle, &baseline, &candidate)?
            }
            _ => std::collections::HashMap::new(),
        };
        stages.kept.cache = cache.clone();
        let r = stages.run(&format!("trace {name}"), |note| {
            let settings = record::RunSettings::from_plan(plan, side, &plan_side.generation)?;
            let progress = progress_bar((n * settings.samples) as u64, name);
            let r = record::record_side(
                name,
                side,
                plan_side.system.as_deref(),
                &settings,
                &plan.suite.prompts,
                &references,
                &cache,
                &plan.output.join("traces").join(name),
                &progress,
            );
            progress.finish_and_clear();
            let r = r.map_err(|e| match e.downcast::<interrupt::Interrupted>() {
                // Stopped on this side: the sides before it are whole.
                Ok(mut stop) => {
                    stop.kept.splice(0..0, recorded_kept.iter().cloned());
                    anyhow::Error::new(stop)
                }
                Err(e) => e,
            })?;
            *note = format!("{} traces, {} reused", n * settings.samples, r.reused);
            Ok(r)
        })?;
        let traces = r.bundle.traces().len();
        recorded_kept.push(interrupt::Kept {
            side: name.to_owned(),
            kept: traces,
            of: traces,
        });
        stages.kept.sides = recorded_kept.clone();
        recorded.push(r);
    }
    let c = recorded.pop().expect("two sides");
    let b = recorded.pop().expect("two sides");
    Ok(Gathered {
        baseline: b.bundle,
        candidate: c.bundle,
        reused: [b.reused, c.reused],
        sides: Some([baseline, candidate]),
        measured,
    })
}

/// The baseline's continuations by prompt id, for the candidate to score;
/// none when the two tokenizers differ (the KL section then says so, from
/// the traces' vocabulary hashes).
fn references(
    baseline: &Bundle,
    b: &record::LoadedSide,
    c: &record::LoadedSide,
) -> anyhow::Result<std::collections::HashMap<String, crate::executor::ReferenceContinuation>> {
    let mut out = std::collections::HashMap::new();
    if b.exec.model_ref().tokenizer_sha256 != c.exec.model_ref().tokenizer_sha256 {
        tracing::warn!("the two sides' tokenizers differ: no KL will be computed");
        return Ok(out);
    }
    for t in baseline.traces() {
        // A prompt's first sample is its reference (the KL pairs it with
        // the candidate's first sample).
        let Some(id) = t.request.prompt_id.clone() else {
            continue;
        };
        if out.contains_key(&id) {
            continue;
        }
        if let Some(r) = analyze::continuation_reference(baseline, t)? {
            out.insert(id, r);
        }
    }
    Ok(out)
}

/// Measures the refusal direction, or reuses a saved one measured from the
/// same weights and prompt files.
fn measure_stage(
    m: &plan::MeasurePlan,
    side: &record::LoadedSide,
    note: &mut String,
) -> anyhow::Result<PathBuf> {
    use crate::measure::{MeasureOptions, Provenance, measure, read_metadata};
    // The plan lets only a model vauban holds measure.
    let exec = side
        .exec
        .local()
        .context("the measure stage needs a model vauban holds (candle, torch or mlx)")?;
    let provenance = Provenance::of_files(exec, &m.harmful, &m.harmless)?;
    if m.out.is_file()
        && let Ok(meta) = read_metadata(&m.out)
        && provenance.matches(&meta)
        && m.layer
            .is_none_or(|l| meta.get("vauban.layer") == Some(&l.to_string()))
    {
        *note = format!("reused {}", m.out.display());
        return Ok(m.out.clone());
    }
    let harmful = Suite::load(&m.harmful)?;
    let harmless = Suite::load(&m.harmless)?;
    let mut options = MeasureOptions {
        candidates: m.layers.clone(),
        layer: m.layer,
        ..MeasureOptions::default()
    };
    if let Some(h) = m.holdout {
        options.holdout = h;
    }
    if let Some(k) = m.max_kl {
        options.max_kl = k;
    }
    let progress = progress_bar(0, "measure");
    let measurement = measure(exec, &harmful, &harmless, &options, &|p| {
        progress.set_length(p.total as u64);
        progress.set_position(p.done as u64);
    })?;
    progress.finish_and_clear();
    if let Some(parent) = m.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    measurement.save(&m.out, &provenance)?;
    *note = format!("layer {} → {}", measurement.chosen_layer(), m.out.display());
    Ok(m.out.clone())
}

/// The sides' traces in suite order, one per prompt.
fn order<'a>(
    suite: &Suite,
    traces: &'a [crate::trace::Trace],
    side: &str,
) -> anyhow::Result<Vec<&'a crate::trace::Trace>> {
    suite
        .prompts
        .iter()
        .map(|p| {
            traces
                .iter()
                .find(|t| t.request.prompt_id.as_deref() == Some(p.id.as_str()))
                .with_context(|| {
                    format!(
                        "the {side} bundle has no trace of prompt `{}`; record both sides on the config's suite",
                        p.id
                    )
                })
        })
        .collect()
}

fn sandbox(plan: &Plan, p: &plan::PluginPlan) -> SandboxOptions {
    let mut s = SandboxOptions {
        data_dir: p.data_dir.clone(),
        seed: plan.config.seed,
        ..SandboxOptions::default()
    };
    if let Some(ms) = p.deadline_ms {
        s.deadline = std::time::Duration::from_millis(ms);
    }
    if let Some(mib) = p.memory_mib {
        s.memory_bytes = mib << 20;
    }
    s
}

fn failure(name: &str, stage: &str, e: &crate::plugin::PluginError) -> PluginFailure {
    PluginFailure {
        plugin: name.to_owned(),
        stage: stage.to_owned(),
        failure: match e {
            crate::plugin::PluginError::Call { failure, .. } => Some(failure.kind().to_owned()),
            _ => None,
        },
        message: e.to_string(),
    }
}

fn record_of(
    plugin: &crate::plugin::Plugin,
    info: &crate::plugin::scorer::PluginInfo,
    world: &str,
) -> PluginRecord {
    PluginRecord {
        name: info.name.clone(),
        version: info.version.clone(),
        wit_version: plugin.facts.wit_version.clone(),
        sha256: plugin.sha256.clone(),
        world: world.to_owned(),
        path: plugin.path.display().to_string(),
    }
}

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

/// Connects to every `executor = "http"` side's endpoint and probes it
/// (`vauban validate --online`): one line per endpoint saying what it
/// serves and returns, and a warning where the run would get less
/// evidence than the config asks for. An endpoint that cannot be reached
/// is an error naming the side.
pub fn probe_endpoints(plan: &Plan) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for side in [&plan.baseline, &plan.candidate] {
        let Some(spec) = side
            .http
            .as_ref()
            .filter(|_| side.backend == ExecutorKind::Http)
        else {
            continue;
        };
        let name = side.name.as_str();
        let exec = crate::executor::http::HttpExecutor::connect(spec)
            .with_context(|| format!("{name}: probing {}", spec.url))?;
        let p = exec.probe();
        lines.push(format!(
            "{name}: {} serves `{}`{}; log-probabilities: {}; token ids: {}; prompt log-probabilities (echo): {}",
            exec.base_url(),
            p.served_model.as_deref().unwrap_or(&spec.model),
            p.system_fingerprint
                .as_deref()
                .map(|f| format!(" (fingerprint {f})"))
                .unwrap_or_default(),
            match p.top_logprobs {
                0 => "none".to_owned(),
                k => format!("top {k} per generated position"),
            },
            if p.token_ids { "yes" } else { "no" },
            if p.prompt_logprobs { "yes" } else { "no" },
        ));
        let o = &plan.config.observe;
        if o.logprobs && p.top_logprobs == 0 {
            lines.push(format!(
                "warning: {name}: observe.logprobs is set, but the endpoint returns no log-probabilities: the report will narrow to black_box (text only)"
            ));
        } else if o.logprobs && p.top_logprobs < o.top_logprobs {
            lines.push(format!(
                "warning: {name}: observe.top_logprobs = {}, but the endpoint returns at most {}: the KL covers fewer tokens (still a lower bound)",
                o.top_logprobs, p.top_logprobs
            ));
        }
        if o.logprobs && p.top_logprobs > 0 && (!p.token_ids || spec.tokenizer.is_none()) {
            lines.push(format!(
                "warning: {name}: {}: no next-token KL can be computed (it needs token ids and the served model's vocabulary)",
                match (p.token_ids, spec.tokenizer.is_some()) {
                    (false, _) => "the endpoint returns no token ids",
                    _ => "no `tokenizer` is declared",
                }
            ));
        }
        if !o.layers.is_empty() || o.weights {
            lines.push(format!(
                "warning: {name}: observe.layers/weights ask for activations or weights, which an endpoint never gives: recorded as unsupported"
            ));
        }
    }
    Ok(lines)
}

/// Loads every plugin of the plan once (configured, described) and checks
/// that each gate's metric is declared by a scorer; `vauban validate` uses
/// it. Returns one line per plugin.
pub fn check_plugins(plan: &Plan) -> anyhow::Result<Vec<String>> {
    let host = PluginHost::new(HostOptions {
        cache_dir: HostOptions::default_cache_dir(),
        fuel_metering: false,
    })?;
    let mut metrics = Vec::new();
    let mut lines = Vec::new();
    for p in &plan.scorers {
        let s = Scorer::new(host.load(&p.path)?, &p.config_json, sandbox(plan, p))
            .with_context(|| format!("scorer `{}` ({})", p.name, p.path.display()))?;
        lines.push(format!(
            "scorer {} {}: {}",
            s.info().plugin.name,
            s.info().plugin.version,
            s.info()
                .metrics
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        metrics.extend(s.info().metrics.iter().map(|m| m.name.clone()));
    }
    for p in &plan.claim_mappers {
        let m = ClaimMapper::new(host.load(&p.path)?, &p.config_json, sandbox(plan, p))
            .with_context(|| format!("claim mapper `{}` ({})", p.name, p.path.display()))?;
        lines.push(format!(
            "claim mapper {} {}",
            m.info().name,
            m.info().version
        ));
    }
    for (i, g) in plan.config.gates.iter().enumerate() {
        if !metrics.contains(&g.metric) {
            let near = metrics
                .iter()
                .min_by_key(|m| strsim::damerau_levenshtein(&g.metric, m))
                .map(|m| format!("; did you mean `{m}`?"))
                .unwrap_or_default();
            bail!(
                "{}: gates[{i}].metric: no scorer declares `{}` (declared: {}){near}",
                plan.config_path.display(),
                g.metric,
                metrics.join(", ")
            );
        }
    }
    Ok(lines)
}

/// The output folder's report file for a format.
pub fn report_path(out: &Path, ext: &str) -> PathBuf {
    out.join(format!("report.{ext}"))
}
