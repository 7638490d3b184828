//! Scorers: the host builds a small view of each trace, the plugin returns
//! metrics, the host checks every value against what the plugin declared.
//!
//! A judged scorer (WIT 0.3.0) scores in two calls per batch: `plan`
//! returns its judge requests, the host answers them through [`Judges`]
//! (every request of the batch at once, so they can be batched and read
//! from the record), and `score` gets the answers.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::trace::{ArtifactData, ArtifactKind, Role, Trace};
use vauban_format::judge::{Ask, JudgeAnswer, JudgeRequest};

use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::SandboxOptions;
use super::tensors::TensorSource;
use super::wit::current::convert as wit;
use super::wit::current::scorer as b;
use super::wit::{ScorerInstance, ScorerPre};
use super::{Live, World, check_info, provisional_info, typed_pre};

use super::wit::current::judged::exports::vauban::plugin::judged_scorer as wj;
use b::vauban::plugin::scoring as ws;
pub use vauban_format::evidence::Polarity;

/// Who a plugin says it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub description: String,
}

/// A metric a scorer declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSpec {
    pub name: String,
    pub unit: String,
    pub polarity: Polarity,
    pub family: String,
    pub description: String,
}

/// A judge a judged scorer asks, by the name the config binds to one of
/// the run's judges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeNeed {
    pub name: String,
    pub description: String,
}

/// What a scorer declares about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScorerInfo {
    pub plugin: PluginInfo,
    pub needs: Vec<ArtifactKind>,
    pub metrics: Vec<MetricSpec>,
    /// The judges it asks (a judged scorer only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<JudgeNeed>,
}

impl ScorerInfo {
    /// The declared metrics' names, `a, b, c`, as messages list them.
    pub fn metric_names(&self) -> String {
        self.metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Answers a judged scorer's requests: the run's judges, reached by the
/// names the scorer declared, within its budget. Each request is answered
/// or refused alone, in order; a refusal's text reaches the scorer.
pub trait Judges {
    /// `(judge name, request)` pairs, one result each, in order.
    fn answer(&mut self, requests: &[(String, JudgeRequest)]) -> Vec<Result<JudgeAnswer, String>>;
}

/// A judge request that got no answer, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    pub judge: String,
    pub reason: String,
}

/// One metric value for one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    pub trace: String,
    pub name: String,
    pub value: f64,
}

/// A trace the host did not hand to the plugin, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub trace: String,
    pub missing: Vec<ArtifactKind>,
}

/// The metrics of one scoring job, and the traces skipped for lack of
/// the artifacts the plugin needs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ScoreOutcome {
    pub metrics: Vec<MetricValue>,
    pub skipped: Vec<Skipped>,
    /// Judge requests the plan made (a judged scorer), per judge as the
    /// scorer names it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub judge_requests: std::collections::BTreeMap<String, usize>,
    /// Those that got no answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
}

/// A loaded, configured scorer.
pub struct Scorer {
    plugin: Plugin,
    pre: ScorerPre,
    info: ScorerInfo,
    config_json: String,
    sandbox: SandboxOptions,
}

impl Scorer {
    /// Configures and describes the plugin once (in a throwaway sandbox), so
    /// a bad config fails here, before any trace is scored.
    pub fn new(
        plugin: Plugin,
        config_json: &str,
        sandbox: SandboxOptions,
    ) -> Result<Scorer, PluginError> {
        if plugin.facts.world != World::JudgedScorer {
            plugin.expect_world(World::Scorer)?;
        }
        let version = plugin.facts.wit;
        let judged = plugin.facts.world == World::JudgedScorer;
        let pre = typed_pre(&plugin, |p| ScorerPre::new(p, version, judged))?;
        let mut scorer = Scorer {
            info: ScorerInfo {
                plugin: provisional_info(&plugin),
                needs: Vec::new(),
                metrics: Vec::new(),
                judges: Vec::new(),
            },
            plugin,
            pre,
            config_json: config_json.to_owned(),
            sandbox,
        };
        // Configure first: a plugin's declared metrics may depend on its config.
        let mut session = scorer.start()?;
        session.configure(&scorer.config_json)?;
        let info = session.describe()?;
        drop(session);
        scorer.info = info;
        Ok(scorer)
    }

    pub fn info(&self) -> &ScorerInfo {
        &self.info
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Whether it asks judges (the judged scorer world).
    pub fn judged(&self) -> bool {
        self.plugin.facts.world == World::JudgedScorer
    }

    /// Scores `traces` in one job: a fresh instance, configured, one batch
    /// call (a judged scorer: `plan`, the answers from `judges`, `score`).
    /// Traces lacking what the plugin needs are skipped and listed.
    pub fn score(
        &self,
        traces: &[&Trace],
        tensors: Option<Arc<dyn TensorSource>>,
        judges: Option<&mut dyn Judges>,
    ) -> Result<ScoreOutcome, PluginError> {
        let mut session = self.session()?;
        session.score(traces, tensors, judges)
    }

    /// An instance kept for many calls (until one fails): saves the
    /// instantiation per batch when scoring in a loop.
    pub fn session(&self) -> Result<ScorerSession<'_>, PluginError> {
        let mut s = self.start()?;
        s.configure(&self.config_json)?;
        Ok(s)
    }

    fn start(&self) -> Result<ScorerSession<'_>, PluginError> {
        let live = Live::start(&self.plugin, &self.info.plugin.name, &self.sandbox, |s| {
            self.pre.instantiate(s)
        })?;
        Ok(ScorerSession { scorer: self, live })
    }
}

/// One live instance of a scorer.
pub struct ScorerSession<'a> {
    scorer: &'a Scorer,
    live: Live<ScorerInstance>,
}

impl ScorerSession<'_> {
    fn describe(&mut self) -> Result<ScorerInfo, PluginError> {
        let (raw, judges) = self.live.call("describe", |s, i| i.describe(s))?;
        let info = ScorerInfo {
            judges: judges
                .into_iter()
                .map(|j| JudgeNeed {
                    name: j.name,
                    description: j.description,
                })
                .collect(),
            plugin: raw.plugin.into(),
            needs: raw.needs.into_iter().map(wit::kind_from).collect(),
            metrics: raw
                .metrics
                .into_iter()
                .map(|m| MetricSpec {
                    name: m.name,
                    unit: m.unit,
                    polarity: match m.polarity {
                        b::vauban::plugin::types::Polarity::HigherIsBetter => {
                            Polarity::HigherIsBetter
                        }
                        b::vauban::plugin::types::Polarity::LowerIsBetter => {
                            Polarity::LowerIsBetter
                        }
                        b::vauban::plugin::types::Polarity::Neutral => Polarity::Neutral,
                    },
                    family: m.family,
                    description: m.description,
                })
                .collect(),
        };
        check_info(&info.plugin)
            .and_then(|()| check_specs(&info.metrics))
            .and_then(|()| check_needs(&info.judges))
            .map_err(|m| self.live.fail("describe", Failure::Malformed(m)))?;
        Ok(info)
    }

    fn configure(&mut self, json: &str) -> Result<(), PluginError> {
        self.live
            .call_checked("configure", |s, i| i.configure(s, json))
    }

    /// Scores one batch on this instance; `judges` answers a judged
    /// scorer's plan (none: every request is refused, saying so).
    pub fn score(
        &mut self,
        traces: &[&Trace],
        tensors: Option<Arc<dyn TensorSource>>,
        judges: Option<&mut dyn Judges>,
    ) -> Result<ScoreOutcome, PluginError> {
        let info = &self.scorer.info;
        let mut outcome = ScoreOutcome::default();
        let mut views = Vec::with_capacity(traces.len());
        let mut ids = Vec::with_capacity(traces.len());
        for t in traces {
            let have = t.coverage();
            let missing: Vec<ArtifactKind> = info
                .needs
                .iter()
                .filter(|k| !have.contains(k))
                .copied()
                .collect();
            if missing.is_empty() {
                views.push(view(t, have, tensors.as_deref()));
                ids.push(t.id.clone());
            } else {
                outcome.skipped.push(Skipped {
                    trace: t.id.clone(),
                    missing,
                });
            }
        }
        if views.is_empty() {
            return Ok(outcome);
        }
        let data = self.live.store.data_mut();
        data.tensors = tensors;
        data.open_traces = ids;
        let answers = match self.scorer.judged() {
            true => self.ask(&views, judges, &mut outcome),
            false => Ok(Vec::new()),
        };
        let r = answers.and_then(|answers| {
            self.live
                .call_checked("score", |s, i| i.score(s, &views, &answers))
        });
        let data = self.live.store.data_mut();
        data.tensors = None;
        data.close_tensors();
        let ids = std::mem::take(&mut data.open_traces);
        outcome.metrics = check_metrics(r?, &ids, &info.metrics)
            .map_err(|m| self.live.fail("score", Failure::Malformed(m)))?;
        Ok(outcome)
    }
}

impl ScorerSession<'_> {
    /// A judged scorer's plan for `views`, checked, and the answers to it.
    fn ask(
        &mut self,
        views: &[ws::TraceView],
        judges: Option<&mut dyn Judges>,
        outcome: &mut ScoreOutcome,
    ) -> Result<Vec<wj::JudgeAnswer>, PluginError> {
        let plan = self.live.call_checked("plan", |s, i| i.plan(s, views))?;
        check_plan(&plan, views.len())
            .map_err(|m| self.live.fail("plan", Failure::Malformed(m)))?;
        let declared: HashSet<&str> = self
            .scorer
            .info
            .judges
            .iter()
            .map(|j| j.name.as_str())
            .collect();
        // Requests naming a judge the scorer never declared are refused
        // here; the rest go to the run's judges in one batch.
        let mut results: Vec<Option<Result<JudgeAnswer, String>>> = vec![None; plan.len()];
        let mut asked = Vec::new();
        for (i, r) in plan.iter().enumerate() {
            if declared.contains(r.judge.as_str()) {
                asked.push((r.judge.clone(), request_from(r)));
            } else {
                results[i] = Some(Err(format!(
                    "judge `{}` was not declared by describe (it declares: {})",
                    truncate(&r.judge),
                    match declared.is_empty() {
                        true => "none".to_owned(),
                        false => declared
                            .iter()
                            .copied()
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                )));
            }
        }
        let answered = match judges {
            Some(j) => j.answer(&asked),
            None => {
                vec![Err("no judge is bound to this scorer in this run".to_owned()); asked.len()]
            }
        };
        let mut answered = answered.into_iter();
        for slot in results.iter_mut().filter(|s| s.is_none()) {
            *slot = Some(
                answered
                    .next()
                    .unwrap_or_else(|| Err("the host gave no answer".to_owned())),
            );
        }
        for r in &plan {
            *outcome.judge_requests.entry(r.judge.clone()).or_default() += 1;
        }
        let mut answers = Vec::with_capacity(plan.len());
        for (r, result) in plan.into_iter().zip(results) {
            let result = result.expect("every slot filled above");
            if let Err(reason) = &result {
                outcome.refused.push(Refused {
                    judge: r.judge.clone(),
                    reason: reason.clone(),
                });
            }
            answers.push(wj::JudgeAnswer {
                id: r.id,
                answer: result.map(judged_to),
            });
        }
        Ok(answers)
    }
}

/// The most judge requests a plan may make per trace of its batch: more is
/// a flood, refused as malformed before any judge is asked.
pub const MAX_REQUESTS_PER_TRACE: usize = 64;
/// The most answers of one closed set, and the longest answer.
const MAX_CHOICES: usize = 64;
const MAX_GENERATE: u32 = 4096;

fn check_plan(plan: &[wj::JudgeRequest], traces: usize) -> Result<(), String> {
    let bound = traces * MAX_REQUESTS_PER_TRACE;
    if plan.len() > bound {
        return Err(format!(
            "a plan of {} judge requests for {traces} traces (at most {MAX_REQUESTS_PER_TRACE} per trace)",
            plan.len()
        ));
    }
    let mut ids = HashSet::with_capacity(plan.len());
    for r in plan {
        if r.id.is_empty() || r.id.len() > MAX_NAME {
            return Err(format!(
                "judge request id {:?} is not 1-{MAX_NAME} bytes",
                truncate(&r.id)
            ));
        }
        if !ids.insert(r.id.as_str()) {
            return Err(format!("judge request id {} is used twice", r.id));
        }
        match &r.ask {
            wj::JudgeAsk::Generate(n) if *n == 0 || *n > MAX_GENERATE => {
                return Err(format!(
                    "judge request {}: a generation of {n} tokens (1 to {MAX_GENERATE})",
                    r.id
                ));
            }
            wj::JudgeAsk::Choices(options)
                if options.len() < 2
                    || options.len() > MAX_CHOICES
                    || options.iter().any(|o| o.is_empty() || o.len() > MAX_TEXT) =>
            {
                return Err(format!(
                    "judge request {}: a closed set is 2 to {MAX_CHOICES} non-empty answers of at most {MAX_TEXT} bytes",
                    r.id
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn request_from(r: &wj::JudgeRequest) -> JudgeRequest {
    JudgeRequest {
        prompt: r.prompt.clone(),
        system: r.system.clone(),
        raw: false,
        ask: match &r.ask {
            wj::JudgeAsk::Generate(n) => Ask::Generate { max_tokens: *n },
            wj::JudgeAsk::Choices(options) => Ask::Choices {
                options: options.clone(),
            },
        },
    }
}

fn judged_to(a: JudgeAnswer) -> wj::Judged {
    wj::Judged {
        text: a.text,
        choices: a
            .choices
            .into_iter()
            .map(|c| wj::JudgeChoice {
                answer: c.option,
                logprob: c.logprob,
                probability: c.probability,
                bounded: c.bounded,
            })
            .collect(),
        prompt_tokens: a.prompt_tokens,
        answer_tokens: a.answer_tokens,
    }
}

fn check_needs(needs: &[JudgeNeed]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for n in needs {
        if n.name.is_empty() || n.name.len() > MAX_NAME || n.description.len() > MAX_TEXT {
            return Err(format!(
                "judge name {:?} is not 1-{MAX_NAME} bytes, or its description is over {MAX_TEXT}",
                truncate(&n.name)
            ));
        }
        if !seen.insert(&n.name) {
            return Err(format!("judge {} is declared twice", n.name));
        }
    }
    if needs.len() > 16 {
        return Err(format!("{} judges declared (at most 16)", needs.len()));
    }
    Ok(())
}

const MAX_NAME: usize = 64;
const MAX_TEXT: usize = 2048;

fn check_specs(specs: &[MetricSpec]) -> Result<(), String> {
    if specs.is_empty() || specs.len() > 256 {
        return Err(format!(
            "a scorer declares 1 to 256 metrics, not {}",
            specs.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for s in specs {
        let ok = !s.name.is_empty()
            && s.name.len() <= MAX_NAME
            && s.name.starts_with(|c: char| c.is_ascii_lowercase())
            && s.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
        if !ok {
            return Err(format!(
                "metric name {:?} is not 1-{MAX_NAME} characters of a-z, 0-9, '_' and '.' starting with a letter",
                truncate(&s.name)
            ));
        }
        if !seen.insert(&s.name) {
            return Err(format!("metric {} is declared twice", s.name));
        }
        if s.unit.len() > MAX_NAME || s.family.len() > MAX_NAME || s.description.len() > MAX_TEXT {
            return Err(format!(
                "metric {}: unit, family or description is too long",
                s.name
            ));
        }
    }
    Ok(())
}

fn check_metrics(
    metrics: Vec<ws::Metric>,
    ids: &[String],
    specs: &[MetricSpec],
) -> Result<Vec<MetricValue>, String> {
    let bound = ids.len() * specs.len();
    if metrics.len() > bound {
        return Err(format!(
            "{} metrics for {} traces and {} declared metrics (at most {bound})",
            metrics.len(),
            ids.len(),
            specs.len()
        ));
    }
    let batch: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let declared: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut seen = HashSet::with_capacity(metrics.len());
    let mut out = Vec::with_capacity(metrics.len());
    for m in metrics {
        if !declared.contains(m.name.as_str()) {
            return Err(format!(
                "metric {:?} was not declared by describe",
                truncate(&m.name)
            ));
        }
        if !batch.contains(m.trace_id.as_str()) {
            return Err(format!(
                "metric {} names trace {:?}, which is not in the batch",
                m.name,
                truncate(&m.trace_id)
            ));
        }
        if !m.value.is_finite() {
            return Err(format!(
                "metric {} of trace {} is {}, not a finite number",
                m.name, m.trace_id, m.value
            ));
        }
        if !seen.insert((m.trace_id.clone(), m.name.clone())) {
            return Err(format!(
                "metric {} of trace {} is given twice",
                m.name, m.trace_id
            ));
        }
        out.push(MetricValue {
            trace: m.trace_id,
            name: m.name,
            value: m.value,
        });
    }
    Ok(out)
}

fn truncate(s: &str) -> &str {
    &s[..s.floor_char_boundary(80)]
}

/// The first artifact of `kind` whose `role` label is `role`.
fn by_role(t: &Trace, kind: ArtifactKind, role: Role) -> Option<&ArtifactData> {
    t.artifacts_of(kind)
        .find(|a| a.role() == Some(role))
        .map(|a| &a.data)
}

/// What the plugin sees of a trace: text, ids, per-token logprobs and
/// tensor summaries; raw tensors only through `tensors.open`.
fn view(
    t: &Trace,
    kinds: BTreeSet<ArtifactKind>,
    tensors: Option<&dyn TensorSource>,
) -> ws::TraceView {
    let text = |role| match by_role(t, ArtifactKind::Text, role) {
        Some(ArtifactData::Text { text }) => Some(text.clone()),
        _ => None,
    };
    let ids = |role| match by_role(t, ArtifactKind::Tokens, role) {
        Some(ArtifactData::TokenIds { ids }) => ids.clone(),
        _ => Vec::new(),
    };
    let completion_logprobs = t
        .artifacts_of(ArtifactKind::Logprobs)
        .find(|a| a.role() == Some(Role::Completion))
        .and_then(|a| match &a.data {
            ArtifactData::Tensor { raw: true, .. } => {
                tensors?.tensor(&t.id, &a.id).ok().map(|(_, v)| v)
            }
            _ => None,
        });
    let tensor_infos = t
        .artifacts
        .iter()
        .filter_map(|a| match &a.data {
            ArtifactData::Tensor { summary, raw } => Some(b::vauban::plugin::tensors::TensorInfo {
                id: a.id.clone(),
                kind: wit::kind_to(a.kind),
                layer: a.layer.map(|l| l as u32),
                labels: a
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                summary: wit::summary_to(summary),
                raw: *raw,
            }),
            _ => None,
        })
        .collect();
    ws::TraceView {
        id: t.id.clone(),
        prompt_id: t.request.prompt_id.clone(),
        category: t.request.category.clone(),
        expected_behavior: t.request.expected_behavior.clone(),
        prompt: text(Role::Prompt).or_else(|| t.request.text.clone()),
        completion: text(Role::Completion),
        prompt_tokens: ids(Role::Prompt),
        completion_tokens: ids(Role::Completion),
        completion_logprobs,
        tensors: tensor_infos,
        metrics: t
            .artifacts_of(ArtifactKind::Metric)
            .filter_map(|a| match &a.data {
                ArtifactData::Scalar { name, value, .. } => Some((name.clone(), *value)),
                _ => None,
            })
            .collect(),
        kinds: kinds.into_iter().map(wit::kind_to).collect(),
    }
}
