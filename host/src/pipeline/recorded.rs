//! Comparing recordings another tool made (`vauban import`): which
//! samples pair, and how many samples each side holds per prompt.
//!
//! Two imported logs of one task pair by sample id. A sample one log
//! holds and the other does not, or one whose input differs under the
//! same id, is excluded from the paired tests and named in the report's
//! limitations; nothing is paired by position. Each side is replayed with
//! as many samples per prompt (epochs, repeats) as its log holds for every
//! paired prompt, and the per-prompt mean is the unit of the paired tests,
//! as for `observe.samples`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::Plan;
use super::sides::SideName;
use crate::bundle::Bundle;
use crate::config::Suite;
use crate::config::file::ExecutorKind;

/// What a replayed side's bundle holds, by prompt: the input and the
/// number of samples.
struct Held {
    imported: bool,
    task: Option<String>,
    /// Samples the log held that became no trace, and why.
    left_out: Vec<String>,
    by_position: bool,
    prompts: BTreeMap<String, (Option<String>, usize)>,
}

fn held(path: &Path) -> anyhow::Result<Held> {
    let bundle = Bundle::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut prompts: BTreeMap<String, (Option<String>, usize)> = BTreeMap::new();
    for t in bundle.traces() {
        let id = t.request.prompt_id.clone().unwrap_or_else(|| t.id.clone());
        let e = prompts
            .entry(id)
            .or_insert_with(|| (t.request.text.clone(), 0));
        e.1 += 1;
    }
    let imported = bundle.manifest().imported.as_ref();
    Ok(Held {
        imported: imported.is_some(),
        task: imported.map(|i| i.task.clone()),
        by_position: imported.is_some_and(|i| i.by_position),
        left_out: imported
            .map(|i| {
                i.missing
                    .iter()
                    .map(|m| match m.epoch {
                        Some(e) => format!("{} (epoch {e}): {}", m.sample, m.reason),
                        None => format!("{}: {}", m.sample, m.reason),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        prompts,
    })
}

impl Plan {
    /// When both sides replay bundles and either was imported: narrows the
    /// suite to the samples both hold with the same input, states the rest
    /// in the report's limitations, and replays each side with the samples
    /// per prompt its log holds. Bundles vauban recorded itself are left
    /// as the config says (a prompt they lack is an error, as before).
    pub fn pair_imported(&mut self) -> anyhow::Result<()> {
        let replayed = |s: SideName| self.side(s).backend == ExecutorKind::Replay;
        if !(replayed(SideName::Baseline) && replayed(SideName::Candidate)) {
            return Ok(());
        }
        let base = held(&self.baseline.model)?;
        let cand = held(&self.candidate.model)?;
        if !(base.imported || cand.imported) {
            return Ok(());
        }
        if let (Some(a), Some(b)) = (&base.task, &cand.task)
            && a != b
        {
            self.warnings.push(format!(
                "the two logs are of different tasks (`{a}` and `{b}`): their samples are paired by id all the same; check that the ids mean the same prompts"
            ));
        }
        for (name, h) in [(SideName::Baseline, &base), (SideName::Candidate, &cand)] {
            if h.by_position {
                self.warnings.push(format!(
                    "the {name} log's samples are known by their position (imported with --by-position): a pair is the same place in both runs' lists of tests, not the same test by its content"
                ));
            }
            if let Some(first) = h.left_out.first() {
                self.warnings.push(format!(
                    "the {name} log's {} sample(s) that became no trace (the first: {first}) are not compared",
                    h.left_out.len()
                ));
            }
        }
        let mut kept = Vec::new();
        let (mut one_sided, mut differing) = (Vec::new(), Vec::new());
        for p in &self.suite.prompts {
            match (base.prompts.get(&p.id), cand.prompts.get(&p.id)) {
                (Some((bt, _)), Some((ct, _)))
                    if bt == ct && bt.as_deref().is_none_or(|t| t == p.text) =>
                {
                    kept.push(p.clone())
                }
                (Some(_), Some(_)) => differing.push(p.id.clone()),
                _ => one_sided.push(p.id.clone()),
            }
        }
        let listed = |ids: &[String]| {
            let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
            match ids.len() > 10 {
                true => format!("{} and {} more", shown.join(", "), ids.len() - 10),
                false => shown.join(", "),
            }
        };
        if !one_sided.is_empty() {
            self.warnings.push(format!(
                "{} sample(s) held by one log only, excluded from the paired tests: {}",
                one_sided.len(),
                listed(&one_sided)
            ));
        }
        if !differing.is_empty() {
            self.warnings.push(format!(
                "{} sample(s) with another input under the same id in the two logs, excluded from the paired tests: {}",
                differing.len(),
                listed(&differing)
            ));
        }
        if kept.is_empty() {
            anyhow::bail!(
                "no sample pairs: the two logs share no sample id with the same input ({} one-sided, {} differing)",
                one_sided.len(),
                differing.len()
            );
        }
        for (name, h) in [(SideName::Baseline, &base), (SideName::Candidate, &cand)] {
            let counts: Vec<usize> = kept.iter().map(|p| h.prompts[&p.id].1).collect();
            let fewest = counts.iter().copied().min().unwrap_or(1);
            if counts.iter().any(|&c| c != fewest) {
                self.warnings.push(format!(
                    "the {name} log holds from {fewest} to {} samples (epochs) per prompt: the first {fewest} of each are compared",
                    counts.iter().max().unwrap_or(&fewest)
                ));
            }
            let side = match name {
                SideName::Baseline => &mut self.baseline,
                SideName::Candidate => &mut self.candidate,
            };
            side.generation.samples = fewest;
        }
        self.suite = Suite::new(kept, "the samples both logs hold")?;
        Ok(())
    }
}

/// The config of `vauban diff A B` without `--config`, written to
/// `dir/diff.toml` (and returned): the prompts the baseline's bundle holds
/// (the comparison pairs them with the candidate's), both sides replayed,
/// no scorer (the bundles' own metrics are compared), the default claim
/// mapper. A user edits it and passes it back with `--config`.
pub fn write_diff_config(baseline: &Path, candidate: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let absolute = |p: &Path| -> anyhow::Result<PathBuf> {
        std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
    };
    let (base, cand) = (absolute(baseline)?, absolute(candidate)?);
    let bundle = Bundle::open(&base).with_context(|| format!("cannot open {}", base.display()))?;
    let label = |b: &Bundle, fallback: &Path| -> String {
        b.traces()
            .first()
            .map(|t| t.model.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| fallback.display().to_string())
    };
    let cand_bundle =
        Bundle::open(&cand).with_context(|| format!("cannot open {}", cand.display()))?;
    // Two runs of one model are told apart by their bundles' names.
    let (mut base_label, mut cand_label) = (label(&bundle, &base), label(&cand_bundle, &cand));
    if base_label == cand_label {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        base_label = format!("{base_label} ({})", name(&base));
        cand_label = format!("{cand_label} ({})", name(&cand));
    }
    let mut prompts = toml::value::Array::new();
    let mut seen = std::collections::BTreeSet::new();
    for t in bundle.traces() {
        let id = t.request.prompt_id.clone().unwrap_or_else(|| t.id.clone());
        if !seen.insert(id.clone()) {
            continue;
        }
        let mut p = toml::Table::new();
        p.insert("id".into(), id.into());
        p.insert(
            "text".into(),
            t.request.text.clone().unwrap_or_default().into(),
        );
        if let Some(c) = &t.request.category {
            p.insert("category".into(), c.clone().into());
        }
        prompts.push(p.into());
    }
    let side = |model: &Path, label: String| {
        let mut t = toml::Table::new();
        t.insert("model".into(), model.display().to_string().into());
        t.insert("executor".into(), "replay".into());
        t.insert("label".into(), label.into());
        toml::Value::Table(t)
    };
    let mut config = toml::Table::new();
    config.insert("output".into(), ".".into());
    let mut suite = toml::Table::new();
    suite.insert("prompts".into(), prompts.into());
    config.insert("suite".into(), suite.into());
    config.insert("baseline".into(), side(&base, base_label.clone()));
    config.insert("candidate".into(), side(&cand, cand_label.clone()));
    let mut mapper = toml::Table::new();
    mapper.insert("plugin".into(), "claims-default".into());
    config.insert(
        "claim_mappers".into(),
        toml::Value::Array(vec![mapper.into()]),
    );
    let mut report = toml::Table::new();
    report.insert(
        "title".into(),
        format!("{cand_label} vs {base_label}").into(),
    );
    config.insert("report".into(), report.into());
    let text = format!(
        "# Written by `vauban diff {} {}` without --config: every prompt the\n# bundles hold, the metrics they recorded, the default claim mapper.\n# Edit it (gates, scorers, categories) and pass it with --config.\n{}",
        baseline.display(),
        candidate.display(),
        toml::to_string(&config).context("the generated config")?
    );
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("diff.toml");
    crate::atomic_file::write(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
