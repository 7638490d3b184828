//! Loading the plan's plugins into their sandboxes, and what the report
//! records of them: shared by the score and claims stages and by
//! `vauban validate`.

use anyhow::{Context, bail};

use super::{Plan, plan};
use crate::plugin::claims::ClaimMapper;
use crate::plugin::scorer::Scorer;
use crate::plugin::{HostOptions, PluginHost, SandboxOptions};
use crate::report::document::{PluginFailure, PluginRecord};

/// The plugin host every stage loads its plugins with (compiled
/// components cached on disk).
pub(super) fn host() -> anyhow::Result<PluginHost> {
    Ok(PluginHost::new(HostOptions {
        cache_dir: HostOptions::default_cache_dir(),
        fuel_metering: false,
    })?)
}

/// The sandbox a plugin of the plan runs in: its data folder, the run's
/// seed, and its own deadline and memory where the config sets them.
pub(super) fn sandbox(plan: &Plan, p: &plan::PluginPlan) -> SandboxOptions {
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

/// A plugin's failure as the report lists it.
pub(super) fn failure(name: &str, stage: &str, e: &crate::plugin::PluginError) -> PluginFailure {
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

/// What the report records of a plugin that ran.
pub(super) fn record_of(
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

/// Loads every plugin of the plan once (configured, described) and checks
/// that each gate's metric is declared by a scorer; `vauban validate` uses
/// it. Returns one line per plugin.
pub fn check_plugins(plan: &Plan) -> anyhow::Result<Vec<String>> {
    let host = host()?;
    let mut metrics = Vec::new();
    let mut lines = Vec::new();
    for p in &plan.scorers {
        let s = Scorer::new(host.load(&p.path)?, &p.config_json, sandbox(plan, p))
            .with_context(|| format!("scorer `{}` ({})", p.name, p.path.display()))?;
        if let Some(c) = &p.calibration
            && !s.info().metrics.iter().any(|m| m.name == c.metric)
        {
            bail!(
                "{}: scorer `{}`: calibration.metric `{}` is not one of its metrics ({})",
                plan.config_path.display(),
                p.name,
                c.metric,
                s.info().metric_names()
            );
        }
        super::judges::check_bindings(p, &s.info().judges).map_err(|e| {
            anyhow::anyhow!(
                "{}: scorer `{}` ({}): {e}",
                plan.config_path.display(),
                p.name,
                p.path.display()
            )
        })?;
        lines.push(format!(
            "scorer {} {}: {}",
            s.info().plugin.name,
            s.info().plugin.version,
            s.info().metric_names()
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
