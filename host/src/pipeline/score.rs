//! The score stage: every scorer plugin, in its sandbox, over every
//! sample of both sides. A scorer that fails to load or to score is a
//! failure the report lists; the run carries on without its metrics. A
//! judged scorer's requests go to the run's judges ([`super::judges`]),
//! within its budget; the requests refused are listed as its failures.

use std::sync::Arc;

use super::analyze::{self, Declared, Samples, Values};
use super::gather::{Gathered, SuiteTraces};
use super::judges::{self, RunJudges};
use super::plugins::{failure, record_of, sandbox};
use super::sides::{SideName, Sides};
use super::{Plan, Stages, progress};
use crate::plugin::PluginHost;
use crate::plugin::scorer::{Judges, ScoreOutcome, Scorer};
use crate::plugin::tensors::TensorSource;
use crate::report::document::{PluginFailure, PluginRecord, ReportJudge};
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
    /// The judges judged scorers asked.
    pub judges: Vec<ReportJudge>,
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
            judges: Vec::new(),
        };
        let mut run_judges = RunJudges::new(plan);
        // Per judge: the scorers that asked it, requests, refusals.
        let mut asked = Asked::default();
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
            let world = match scorer.judged() {
                true => "judged-scorer",
                false => "scorer",
            };
            scores
                .plugins
                .push(record_of(scorer.plugin(), &scorer.info().plugin, world));
            if let Err(e) = judges::check_bindings(p, &scorer.info().judges) {
                scores.failures.push(judge_failure(&p.name, "judges", e));
                bar.inc(2);
                continue;
            }
            let mut service = match scorer.judged() {
                true => match run_judges.service(p, &scorer.info().judges) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        scores.failures.push(judge_failure(&p.name, "judges", e));
                        for judge in p.judges.values() {
                            asked
                                .entry(judge.clone())
                                .or_default()
                                .0
                                .push(p.name.clone());
                        }
                        bar.inc(2);
                        continue;
                    }
                },
                false => None,
            };
            let mut ok = true;
            for side in SideName::BOTH {
                bar.set_message(format!("{} {side}", p.name));
                let source: Arc<dyn TensorSource> = gathered.bundles[side].clone();
                let judges = service.as_mut().map(|s| s as &mut dyn Judges);
                let scored = scorer.score(&traces.all[side], Some(source), judges);
                bar.inc(1);
                match scored {
                    Ok(outcome) => {
                        if let Some(f) = skipped(&p.name, side, &outcome.skipped) {
                            scores.failures.push(f);
                        }
                        for judge in p.judges.values() {
                            let a = asked.entry(judge.clone()).or_default();
                            if !a.0.contains(&p.name) {
                                a.0.push(p.name.clone());
                            }
                        }
                        tally(&mut asked, p, &outcome);
                        let requests = outcome.judge_requests.values().sum();
                        if let Some(line) = judges::refusals_line(&outcome.refused, requests) {
                            scores.failures.push(judge_failure(
                                &p.name,
                                &format!("judge {side}"),
                                line,
                            ));
                        }
                        keep(&mut per_sample[side], &traces.all[side], outcome.metrics);
                    }
                    Err(e) => {
                        ok = false;
                        let stage = format!("score {side}");
                        scores.failures.push(failure(&p.name, &stage, &e));
                    }
                }
            }
            // The judge's accuracy on the calibrated metric: stated, or
            // measured now on the labelled replies, by the scorer and its
            // judge as they scored the run (the answers kept as the run's).
            let accuracy = match (&p.calibration, ok) {
                (Some(c), true) => {
                    let (outcome, accuracy) = calibrate(&scorer, c, service.as_mut());
                    if let Some(o) = &outcome {
                        tally(&mut asked, p, o);
                    }
                    match accuracy {
                        Ok(a) => Some((c.metric.clone(), a.0, a.1)),
                        Err(e) => {
                            scores
                                .failures
                                .push(judge_failure(&p.name, "calibration", e));
                            None
                        }
                    }
                }
                _ => None,
            };
            if ok {
                let info = scorer.info();
                scores.declared.extend(info.metrics.iter().map(|m| {
                    Declared {
                        scorer: info.plugin.name.clone(),
                        spec: m.clone(),
                        needs: info.needs.clone(),
                        judged_by: p.judges.values().cloned().collect(),
                        accuracy: accuracy
                            .as_ref()
                            .filter(|(metric, _, _)| *metric == m.name)
                            .map(|(_, a, words)| (*a, words.clone())),
                    }
                }));
            }
        }
        bar.finish_and_clear();
        recorded(traces, &mut per_sample, &mut scores.declared);
        let record = run_judges.dir().display().to_string();
        scores.judges = run_judges
            .uses()
            .into_iter()
            .map(|u| {
                let (scorers, requests, refused) = asked.remove(&u.name).unwrap_or_default();
                report_judge(u, scorers, requests, refused, &record)
            })
            .collect();
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

/// A judged scorer's judges failing it, as the report lists it.
fn judge_failure(plugin: &str, stage: &str, message: String) -> PluginFailure {
    PluginFailure {
        plugin: plugin.to_owned(),
        stage: stage.to_owned(),
        failure: Some("judge".into()),
        message,
    }
}

/// A judge as the report names it, from what identifies its answers.
fn report_judge(
    u: judges::JudgeUse,
    scorers: Vec<String>,
    requests: usize,
    refused: usize,
    record: &str,
) -> ReportJudge {
    let id = &u.identity;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    let (model, sha256, executor) = match id.get("endpoint") {
        // An endpoint: the model it serves and its URL.
        Some(e) => (
            text(&e["model"]).unwrap_or_default(),
            None,
            text(&e["url"]).unwrap_or_else(|| "http".into()),
        ),
        None => (
            text(&id["model"]).unwrap_or_default(),
            text(&id["sha256"]),
            text(&id["executor"]).unwrap_or_default(),
        ),
    };
    ReportJudge {
        name: u.name,
        model,
        sha256,
        executor,
        scorers,
        requests,
        refused,
        record: record.to_owned(),
        unavailable: u.unavailable,
    }
}

/// Per judge (config name): the scorers that asked it, its requests and
/// its refusals.
type Asked = std::collections::BTreeMap<String, (Vec<String>, usize, usize)>;

/// Counts one scoring job's judge requests and refusals under the judges
/// the scorer's names are bound to. Requests to a name the config does not
/// bind (a judge the scorer never declared) count for no judge: they are
/// refused, and listed as the scorer's failure.
fn tally(asked: &mut Asked, p: &super::plan::PluginPlan, outcome: &ScoreOutcome) {
    for (by, n) in &outcome.judge_requests {
        if let Some(judge) = p.judges.get(by) {
            asked.entry(judge.clone()).or_default().1 += n;
        }
    }
    for r in &outcome.refused {
        if let Some(judge) = p.judges.get(&r.judge) {
            asked.entry(judge.clone()).or_default().2 += 1;
        }
    }
}

/// The accuracy of a judged scorer's calibrated metric, and its source in
/// words; with the scoring job's outcome when the labelled set was scored
/// (its requests count as the scorer's).
fn calibrate(
    scorer: &Scorer,
    c: &super::plan::CalibrationPlan,
    service: Option<&mut crate::judge::service::JudgeService<'_>>,
) -> (
    Option<ScoreOutcome>,
    Result<(crate::report::judged::Accuracy, String), String>,
) {
    use super::plan::CalibrationSource;
    let CalibrationSource::Labelled {
        path,
        items,
        expected_behavior,
    } = &c.source
    else {
        return (None, measure(scorer, c, None));
    };
    let traces = crate::judge::calibration::labelled_traces(
        items,
        &path.display().to_string(),
        expected_behavior.as_deref(),
    );
    let refs: Vec<&Trace> = traces.iter().collect();
    let judges = service.map(|s| s as &mut dyn Judges);
    match scorer.score(&refs, None, judges) {
        Ok(outcome) => {
            let accuracy = measure(scorer, c, Some(&outcome));
            (Some(outcome), accuracy)
        }
        Err(e) => (None, Err(format!("scoring {}: {e}", path.display()))),
    }
}

/// The accuracy `c` states, or measures from `scored`, the scorer's
/// outcome on the labelled set.
fn measure(
    scorer: &Scorer,
    c: &super::plan::CalibrationPlan,
    scored: Option<&ScoreOutcome>,
) -> Result<(crate::report::judged::Accuracy, String), String> {
    use super::plan::CalibrationSource;
    use crate::judge::calibration::Counts;
    let spec = scorer
        .info()
        .metrics
        .iter()
        .find(|m| m.name == c.metric)
        .ok_or_else(|| {
            format!(
                "calibration.metric `{}` is not a metric of this scorer (it declares: {})",
                c.metric,
                scorer.info().metric_names()
            )
        })?;
    match &c.source {
        CalibrationSource::Stated {
            sensitivity,
            specificity,
        } => Ok((
            crate::report::judged::Accuracy::Stated {
                sensitivity: *sensitivity,
                specificity: *specificity,
            },
            format!("stated in the config (sensitivity {sensitivity}, specificity {specificity})"),
        )),
        CalibrationSource::Labelled { path, items, .. } => {
            let scored = scored.expect("a labelled calibration is scored first");
            if let Some(r) = scored.refused.first() {
                return Err(format!(
                    "{} of the labelled replies of {} got no answer ({}): no correction",
                    scored.refused.len(),
                    path.display(),
                    r.reason
                ));
            }
            let mut pairs = Vec::with_capacity(items.len());
            for item in items {
                let value = scored
                    .metrics
                    .iter()
                    .find(|m| m.trace == item.id && m.name == spec.name)
                    .map(|m| m.value)
                    .ok_or_else(|| {
                        format!(
                            "{}: reply {} got no {} (a scorer that scores only some replies needs calibration.expected_behavior)",
                            path.display(),
                            item.id,
                            spec.name
                        )
                    })?;
                pairs.push((item.positive, value >= 0.5));
            }
            let counts = Counts::of(pairs);
            Ok((
                counts.accuracy(),
                format!(
                    "measured on the {} labelled replies of {} (sensitivity {}/{}, specificity {}/{})",
                    items.len(),
                    path.display(),
                    counts.true_positives,
                    counts.positives,
                    counts.true_negatives,
                    counts.negatives
                ),
            ))
        }
    }
}

/// The metrics the traces themselves hold (an imported eval's own scores,
/// `vauban import`): each metric both sides recorded is compared like a
/// scorer's, under the scorer the traces name (`inspect:match`). They rest
/// on the text the tool scored.
fn recorded(
    traces: &SuiteTraces<'_>,
    per_sample: &mut Sides<Samples>,
    declared: &mut Vec<Declared>,
) {
    use crate::plugin::scorer::{MetricSpec, Polarity};
    use crate::trace::{ArtifactData, ArtifactKind as K};
    // name → (scorer, unit, sides that hold it)
    let mut seen: Vec<(String, String, Option<String>, [bool; 2])> = Vec::new();
    for (i, side) in SideName::BOTH.into_iter().enumerate() {
        for t in &traces.all[side] {
            let prompt = t.request.prompt_id.clone().unwrap_or_else(|| t.id.clone());
            for a in t.artifacts_of(K::Metric) {
                let ArtifactData::Scalar { name, value, unit } = &a.data else {
                    continue;
                };
                // A metric a plugin also declares is the plugin's.
                if declared.iter().any(|d| &d.spec.name == name) {
                    continue;
                }
                per_sample[side]
                    .entry((prompt.clone(), name.clone()))
                    .or_default()
                    .push(*value);
                let scorer = a
                    .labels
                    .get("scorer")
                    .cloned()
                    .unwrap_or_else(|| "recorded".into());
                match seen.iter_mut().find(|s| &s.0 == name) {
                    Some(s) => s.3[i] = true,
                    None => {
                        let mut sides = [false; 2];
                        sides[i] = true;
                        seen.push((name.clone(), scorer, unit.clone(), sides));
                    }
                }
            }
        }
    }
    for (name, scorer, unit, sides) in seen {
        if sides != [true, true] {
            continue;
        }
        let tool = name.split('.').next().unwrap_or("recorded").to_owned();
        declared.push(Declared {
            scorer: format!("{tool}:{scorer}"),
            spec: MetricSpec {
                description: format!("{tool}'s scorer `{scorer}`, as its log recorded it"),
                name,
                unit: unit.unwrap_or_else(|| "score".into()),
                polarity: Polarity::Neutral,
                family: "recorded".into(),
            },
            needs: vec![K::Text, K::Metric],
            judged_by: Vec::new(),
            accuracy: None,
        });
    }
}
