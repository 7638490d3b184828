//! The run's judges as the score stage hands them to judged scorers: each
//! judge loaded once, on first use, and shared by every scorer bound to
//! it; every answer kept under the output's `traces/judges/` (or, on
//! replay, read from the record alone); each scorer with its own budget.
//! A judge that cannot load is not fatal: the requests to it are refused
//! with the reason, and the metrics that needed it are missing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::Plan;
use super::plan::{JudgePlan, PluginPlan};
use crate::config::file::ExecutorKind;
use crate::executor::http::HttpExecutor;
use crate::executor::{Executor as _, LocalBackend, LocalModel as _, ModelSpec};
use crate::judge::LocalJudge;
use crate::judge::http::HttpJudge;
use crate::judge::service::{JudgeModel, JudgeService};
use crate::judge::store::JudgeStore;
use crate::plugin::scorer::{JudgeNeed, Refused};

/// One judge of the run as the report names it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JudgeUse {
    pub name: String,
    /// What identifies its answers: the model, its digests, executor and
    /// device (an endpoint: its URL, model and fingerprint).
    pub identity: serde_json::Value,
    /// Why it could not answer at all, when it could not load.
    pub unavailable: Option<String>,
}

pub(crate) struct RunJudges<'p> {
    plan: &'p Plan,
    store: JudgeStore,
    models: BTreeMap<String, Result<JudgeModel, String>>,
}

impl<'p> RunJudges<'p> {
    pub fn new(plan: &'p Plan) -> RunJudges<'p> {
        let dir = plan
            .judge_record
            .clone()
            .unwrap_or_else(|| plan.output.join("traces").join("judges"));
        RunJudges {
            plan,
            store: JudgeStore::new(&dir),
            models: BTreeMap::new(),
        }
    }

    /// The folder the answers are kept in (or read from, on replay).
    pub fn dir(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    /// Checks a judged scorer's declared judges against its bindings, and
    /// loads the judges it is bound to: the service that answers its
    /// requests, or why it has none.
    pub fn service(
        &mut self,
        p: &PluginPlan,
        needs: &[JudgeNeed],
    ) -> Result<JudgeService<'_>, String> {
        check_bindings(p, needs)?;
        for judge in p.judges.values() {
            if !self.models.contains_key(judge) {
                let loaded = self.load(judge);
                if let Err(e) = &loaded {
                    tracing::warn!("judge `{judge}` is unavailable: {e}");
                }
                self.models.insert(judge.clone(), loaded);
            }
        }
        // A judge that could not load stays bound: its requests are
        // refused by name ("could not answer"), not dropped.
        let mut bound = BTreeMap::new();
        for (asked, judge) in &p.judges {
            match &self.models[judge] {
                Ok(model) => {
                    bound.insert(asked.clone(), (judge.clone(), model));
                }
                Err(e) => return Err(format!("judge `{judge}` could not load: {e}")),
            }
        }
        Ok(JudgeService::new(bound, &self.store, p.judge_budget))
    }

    /// Every judge a scorer asked, for the report.
    pub fn uses(&self) -> Vec<JudgeUse> {
        self.models
            .iter()
            .map(|(name, m)| match m {
                Ok(model) => JudgeUse {
                    name: name.clone(),
                    identity: model.identity(),
                    unavailable: None,
                },
                Err(e) => JudgeUse {
                    name: name.clone(),
                    identity: serde_json::Value::Null,
                    unavailable: Some(e.clone()),
                },
            })
            .collect()
    }

    fn load(&self, name: &str) -> Result<JudgeModel, String> {
        let j = &self.plan.judges[name];
        if self.plan.judge_record.is_some() {
            // Replay: the answers were kept under the identity of the judge
            // that gave them; the newest, when the record holds several.
            let identity = self
                .store
                .identities(name)
                .into_iter()
                .next()
                .ok_or_else(|| {
                    format!(
                        "the record {} holds no answer of judge `{name}` (was the run judged?)",
                        self.store.dir().display()
                    )
                })?;
            return Ok(JudgeModel::Recorded { identity });
        }
        load_judge(j).map_err(|e| format!("{e:#}"))
    }
}

/// Loads the model or connects to the endpoint of a judge.
fn load_judge(j: &JudgePlan) -> anyhow::Result<JudgeModel> {
    use anyhow::Context as _;
    if j.backend == ExecutorKind::Http {
        let spec = j
            .http
            .as_ref()
            .expect("the plan sets an http judge's endpoint");
        let exec = HttpExecutor::connect(spec)?;
        return Ok(JudgeModel::Http(Box::new(HttpJudge::new(exec))));
    }
    let spec = ModelSpec {
        path: j.model.clone(),
        device: j.device,
        weights: j.weights,
        kv_cache: j.kv_cache,
        dtype: j.dtype,
        primitive: Default::default(),
    };
    let mut exec = match j.backend {
        ExecutorKind::Torch => LocalBackend::torch(&spec),
        ExecutorKind::Mlx => LocalBackend::mlx(&spec),
        _ => LocalBackend::load(&spec),
    }
    .with_context(|| format!("cannot load {}", j.model.display()))?;
    if let Some(adapter) = &j.adapter {
        exec.load_adapter(adapter)
            .with_context(|| format!("adapter {}", adapter.display()))?;
    }
    tracing::info!("judge `{}`: {}", j.name, exec.model_ref().name);
    Ok(JudgeModel::Local(Box::new(LocalJudge::new(exec))))
}

/// A judged scorer asks by exactly the names the config binds: a declared
/// judge left unbound, or a binding the scorer never asks by, is refused
/// naming both lists.
pub(crate) fn check_bindings(p: &PluginPlan, needs: &[JudgeNeed]) -> Result<(), String> {
    let declared: Vec<&str> = needs.iter().map(|n| n.name.as_str()).collect();
    if let Some(n) = declared.iter().find(|n| !p.judges.contains_key(**n)) {
        return Err(format!(
            "it asks a judge by the name `{n}`, which the config does not bind: add `judges = {{ {n} = \"JUDGE\" }}` to the scorer, naming a `[judges.JUDGE]`"
        ));
    }
    if let Some(b) = p.judges.keys().find(|b| !declared.contains(&b.as_str())) {
        return Err(format!(
            "the config binds judge `{b}`, which it never asks (it asks: {})",
            match declared.is_empty() {
                true => "no judge: it is not a judged scorer".to_owned(),
                false => declared.join(", "),
            }
        ));
    }
    Ok(())
}

/// The refusals of one scoring job, grouped by reason, as one line.
pub(crate) fn refusals_line(refused: &[Refused], requests: usize) -> Option<String> {
    refused.first()?;
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for r in refused {
        *reasons.entry(r.reason.as_str()).or_default() += 1;
    }
    Some(format!(
        "{} of {requests} judge request(s) got no answer: {}",
        refused.len(),
        reasons
            .iter()
            .map(|(why, n)| format!("{n} × {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}
