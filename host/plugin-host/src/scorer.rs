//! Scorers: the host builds a small view of each trace, the plugin returns
//! metrics, the host checks every value against what the plugin declared.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::trace::{ArtifactData, ArtifactKind, Role, Trace};

use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::SandboxOptions;
use super::tensors::TensorSource;
use super::wit::current::convert as wit;
use super::wit::current::scorer as b;
use super::wit::{ScorerInstance, ScorerPre};
use super::{Live, World, check_info, provisional_info, typed_pre};

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

/// What a scorer declares about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScorerInfo {
    pub plugin: PluginInfo,
    pub needs: Vec<ArtifactKind>,
    pub metrics: Vec<MetricSpec>,
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
        plugin.expect_world(World::Scorer)?;
        let version = plugin.facts.wit;
        let pre = typed_pre(&plugin, |p| ScorerPre::new(p, version))?;
        let mut scorer = Scorer {
            info: ScorerInfo {
                plugin: provisional_info(&plugin),
                needs: Vec::new(),
                metrics: Vec::new(),
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

    /// Scores `traces` in one job: a fresh instance, configured, one batch
    /// call. Traces lacking what the plugin needs are skipped and listed.
    pub fn score(
        &self,
        traces: &[&Trace],
        tensors: Option<Arc<dyn TensorSource>>,
    ) -> Result<ScoreOutcome, PluginError> {
        let mut session = self.session()?;
        session.score(traces, tensors)
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
        let raw = self.live.call("describe", |s, i| i.describe(s))?;
        let info = ScorerInfo {
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
            .map_err(|m| self.live.fail("describe", Failure::Malformed(m)))?;
        Ok(info)
    }

    fn configure(&mut self, json: &str) -> Result<(), PluginError> {
        self.live
            .call_checked("configure", |s, i| i.configure(s, json))
    }

    /// Scores one batch on this instance.
    pub fn score(
        &mut self,
        traces: &[&Trace],
        tensors: Option<Arc<dyn TensorSource>>,
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
        let r = self.live.call_checked("score", |s, i| i.score(s, &views));
        let data = self.live.store.data_mut();
        data.tensors = None;
        data.close_tensors();
        let ids = std::mem::take(&mut data.open_traces);
        outcome.metrics = check_metrics(r?, &ids, &info.metrics)
            .map_err(|m| self.live.fail("score", Failure::Malformed(m)))?;
        Ok(outcome)
    }
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
