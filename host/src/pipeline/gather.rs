//! The stages before scoring: load both sides, measure the direction
//! (when configured and the baseline is a model), and trace every prompt
//! on both, reusing what an earlier run recorded. What comes out is one
//! bundle per side ([`Gathered`]) and the suite's traces in suite order
//! ([`SuiteTraces`]): everything after reads those and nothing else of
//! this stage.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::progress::{self, bar as progress_bar};
use super::record::{self, LoadedSide};
use super::sides::{SideName, Sides};
use super::{Plan, Stages, analyze, plan};
use crate::bundle::Bundle;
use crate::config::Suite;
use crate::executor::{Executor, ReferenceContinuation};
use crate::interrupt;
use crate::trace::Trace;

/// Both sides, recorded.
pub(crate) struct Gathered {
    /// Each side's bundle of traces (shared with the scorers, which read
    /// raw tensors from it).
    pub bundles: Sides<Arc<Bundle>>,
    /// Traces each side reused from an earlier run.
    pub reused: Sides<usize>,
    /// Each side's executor and transformation.
    pub sides: Sides<LoadedSide>,
    /// The direction file the measure stage wrote or reused.
    pub measured: Option<PathBuf>,
}

/// Loads both sides, measures when configured, and traces every prompt
/// on both.
pub(super) fn gather(plan: &Plan, stages: &mut Stages) -> anyhow::Result<Gathered> {
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
    let sides = Sides::new(baseline, candidate);
    let baseline = trace_side(plan, stages, &sides, SideName::Baseline, &HashMap::new())?;
    // The candidate scores the baseline's continuations after its own
    // prompt: the KL's other half, recorded in its traces.
    let references = match plan.config.observe.logprobs {
        true => references(&baseline.bundle, &sides)?,
        false => HashMap::new(),
    };
    let candidate = trace_side(plan, stages, &sides, SideName::Candidate, &references)?;
    let recorded = Sides::new(baseline, candidate);
    Ok(Gathered {
        reused: recorded.as_ref().map(|r| r.reused),
        bundles: recorded.map(|r| Arc::new(r.bundle)),
        sides,
        measured,
    })
}

/// The trace stage of one side: every prompt (and sample) traced or
/// reused, into the side's bundle.
fn trace_side(
    plan: &Plan,
    stages: &mut Stages,
    sides: &Sides<LoadedSide>,
    name: SideName,
    references: &HashMap<String, ReferenceContinuation>,
) -> anyhow::Result<record::Recorded> {
    let plan_side = plan.side(name);
    let side = &sides[name];
    let n = plan.suite.prompts.len();
    let cache = plan.output.join("traces").join("cache");
    stages.kept.cache = cache.clone();
    let recorded_kept = stages.kept.sides.clone();
    let r = stages.run(&format!("trace {name}"), |note| {
        let settings = record::RunSettings::from_plan(plan, side, &plan_side.generation)?;
        let progress = progress_bar((n * settings.samples) as u64, name.as_str());
        let r = record::record_side(
            name.as_str(),
            side,
            plan_side.system.as_deref(),
            &settings,
            &plan.suite.prompts,
            references,
            &cache,
            &plan.output.join("traces").join(name.as_str()),
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
    stages.kept.sides.push(interrupt::Kept {
        side: name.as_str().to_owned(),
        kept: traces,
        of: traces,
    });
    Ok(r)
}

/// Each side's traces as the later stages read them.
pub(crate) struct SuiteTraces<'a> {
    /// A prompt's first sample, in suite order: what examples show and the
    /// KL pairs.
    pub first: Sides<Vec<&'a Trace>>,
    /// Every sample of every prompt: what the scorers score.
    pub all: Sides<Vec<&'a Trace>>,
    /// Generations per prompt.
    pub samples: Sides<usize>,
}

impl<'a> SuiteTraces<'a> {
    /// Orders each side's traces by the suite; an error when a side has
    /// no trace of one of its prompts.
    pub fn of(suite: &Suite, bundles: &'a Sides<Arc<Bundle>>) -> anyhow::Result<SuiteTraces<'a>> {
        let first = Sides::try_from_fn(|side| order(suite, bundles[side].traces(), side))?;
        let all = Sides::from_fn(|side| bundles[side].traces().iter().collect::<Vec<_>>());
        let samples = Sides::from_fn(|side| all[side].len() / first[side].len().max(1));
        Ok(SuiteTraces {
            first,
            all,
            samples,
        })
    }
}

/// The baseline's continuations by prompt id, for the candidate to score;
/// none when the two tokenizers differ (the KL section then says so, from
/// the traces' vocabulary hashes).
fn references(
    baseline: &Bundle,
    sides: &Sides<LoadedSide>,
) -> anyhow::Result<HashMap<String, ReferenceContinuation>> {
    let mut out = HashMap::new();
    let tokenizer = |side: &LoadedSide| side.exec.model_ref().tokenizer_sha256;
    if tokenizer(&sides.baseline) != tokenizer(&sides.candidate) {
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
pub(super) fn measure_stage(
    m: &plan::MeasurePlan,
    side: &LoadedSide,
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
    if m.reuse_only {
        anyhow::bail!(
            "the direction {} is missing, or was measured on other weights or prompts: a shard does not measure its own; measure it once with `vauban run CONFIG --measure-only`, then run the shards",
            m.out.display()
        );
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
fn order<'a>(suite: &Suite, traces: &'a [Trace], side: SideName) -> anyhow::Result<Vec<&'a Trace>> {
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
