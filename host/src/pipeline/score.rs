//! The score stage: every scorer plugin, in its sandbox, over every
//! sample of both sides. A scorer that fails to load or to score is a
//! failure the report lists; the run carries on without its metrics.

use std::sync::Arc;

use super::analyze::{self, Declared, Samples, Values};
use super::gather::{Gathered, SuiteTraces};
use super::plugins::{failure, record_of, sandbox};
use super::sides::{SideName, Sides};
use super::{Plan, Stages, progress};
use crate::plugin::PluginHost;
use crate::plugin::scorer::Scorer;
use crate::plugin::tensors::TensorSource;
use crate::report::document::{PluginFailure, PluginRecord};
use crate::trace::Trace;

/// What the scorers measured.
pub(crate) struct Scores {
    /// Every metric of every scorer that scored both sides.
    pub declared: Vec<Declared>,
    /// Each side's value per (prompt, metric): the mean over the prompt's
    /// samples, the unit of the paired tests.
    pub values: Sides<Values>,
    /// Each side's standard deviation over a prompt's samples (empty with
    /// one sample per prompt).
    pub spread: Sides<Values>,
    /// The scorers that loaded.
    pub plugins: Vec<PluginRecord>,
    pub failures: Vec<PluginFailure>,
}

pub(super) fn score(
    plan: &Plan,
    host: &PluginHost,
    gathered: &Gathered,
    traces: &SuiteTraces<'_>,
    stages: &mut Stages,
) -> anyhow::Result<Scores> {
    stages.run("score", |note| {
        let mut scores = Scores {
            declared: Vec::new(),
            values: Sides::default(),
            spread: Sides::default(),
            plugins: Vec::new(),
            failures: Vec::new(),
        };
        let mut per_sample: Sides<Samples> = Sides::default();
        // One step per scorer and side.
        let bar = progress::bar(2 * plan.scorers.len() as u64, "scoring");
        for p in &plan.scorers {
            let scorer = match host
                .load(&p.path)
                .and_then(|plugin| Scorer::new(plugin, &p.config_json, sandbox(plan, p)))
            {
                Ok(s) => s,
                Err(e) => {
                    scores.failures.push(failure(&p.name, "load", &e));
                    bar.inc(2);
                    continue;
                }
            };
            scores
                .plugins
                .push(record_of(scorer.plugin(), &scorer.info().plugin, "scorer"));
            let mut ok = true;
            for side in SideName::BOTH {
                bar.set_message(format!("{} {side}", p.name));
                let source: Arc<dyn TensorSource> = gathered.bundles[side].clone();
                let scored = scorer.score(&traces.all[side], Some(source));
                bar.inc(1);
                match scored {
                    Ok(outcome) => {
                        keep(&mut per_sample[side], &traces.all[side], outcome.metrics);
                        if let Some(f) = skipped(&p.name, side, &outcome.skipped) {
                            scores.failures.push(f);
                        }
                    }
                    Err(e) => {
                        ok = false;
                        let stage = format!("score {side}");
                        scores.failures.push(failure(&p.name, &stage, &e));
                    }
                }
            }
            if ok {
                let info = scorer.info();
                scores
                    .declared
                    .extend(info.metrics.iter().map(|m| Declared {
                        scorer: info.plugin.name.clone(),
                        spec: m.clone(),
                        needs: info.needs.clone(),
                    }));
            }
        }
        bar.finish_and_clear();
        *note = format!(
            "{} metric(s) from {} scorer(s)",
            scores.declared.len(),
            scores.plugins.len()
        );
        // The prompt is the unit of the paired tests: its samples averaged.
        for side in SideName::BOTH {
            let (values, spread) = analyze::per_prompt(&per_sample[side]);
            scores.values[side] = values;
            scores.spread[side] = spread;
        }
        Ok(scores)
    })
}

/// Files each metric under its trace's prompt id.
fn keep(into: &mut Samples, traces: &[&Trace], metrics: Vec<crate::plugin::scorer::MetricValue>) {
    for m in metrics {
        let id = traces
            .iter()
            .find(|t| t.id == m.trace)
            .and_then(|t| t.request.prompt_id.clone())
            .unwrap_or(m.trace);
        into.entry((id, m.name)).or_default().push(m.value);
    }
}

/// Traces a scorer skipped for lack of what it needs, as a failure the
/// report lists; none when it skipped none.
fn skipped(
    plugin: &str,
    side: SideName,
    skipped: &[crate::plugin::scorer::Skipped],
) -> Option<PluginFailure> {
    let first = skipped.first()?;
    Some(PluginFailure {
        plugin: plugin.to_owned(),
        stage: format!("score {side}"),
        failure: Some("missing_artifacts".into()),
        message: format!(
            "{} trace(s) skipped for lack of {}",
            skipped.len(),
            first
                .missing
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}
