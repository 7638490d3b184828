//! A run cut into shards that any array-job system runs (issue 39): `vauban
//! run CONFIG --shard K/N` traces the prompts whose id falls in slice K of
//! N (by the sha256 of the id, so the slices are the same whichever
//! machine runs which shard, in whatever order) and writes a partial
//! output, its traces and a `shard.json` record written last; `vauban
//! merge` checks that the parts are of one config, models, transformations
//! and plugins, that they cover every prompt exactly once, and writes the
//! merged bundles, whose replay (`vauban diff`) gives the unsharded run's
//! report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::Plan;
use super::Stages;
use super::gather;
use super::sides::SideName;
use crate::bundle::{Bundle, BundleWriter, WriteMode};
use crate::executor::Executor as _;

/// The record a finished shard leaves in its output folder.
pub const RECORD: &str = "shard.json";

/// One slice of N: K in 1..=N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: u32,
    pub n: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("`{s}`: give K/N, the K-th of N shards, with 1 <= K <= N (e.g. 1/4)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if n == 0 || k == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// The shard (1-based) a prompt id falls in, of `n`: the first 8 bytes of
/// the id's sha256, modulo `n`.
pub fn shard_of(prompt_id: &str, n: u32) -> u32 {
    let h = crate::hash::sha256_hex(prompt_id.as_bytes());
    let x = u64::from_str_radix(&h[..16], 16).expect("hex");
    (x % u64::from(n)) as u32 + 1
}

/// What a finished shard recorded: enough to check the parts belong
/// together and cover the suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    pub shard: Shard,
    /// sha256 of the config file's text.
    pub config_sha256: String,
    /// sha256 of the whole suite (every shard's is the same).
    pub suite_sha256: String,
    /// The whole suite's prompt ids, in order.
    pub suite: Vec<String>,
    /// This shard's prompt ids.
    pub prompts: Vec<String>,
    /// What identifies each side's runs (model, weights, transformation,
    /// executor): the trace cache's fingerprint.
    pub baseline: serde_json::Value,
    pub candidate: serde_json::Value,
    /// Every plugin of the config, by name and the sha256 of its file.
    pub plugins: BTreeMap<String, String>,
}

/// Traces shard `shard` of `plan` into its output folder and writes the
/// record last: an interrupted shard has none, and `merge` names it.
pub fn trace_shard(plan: &Plan, shard: Shard) -> anyhow::Result<ShardRecord> {
    let suite: Vec<String> = plan.suite.prompts.iter().map(|p| p.id.clone()).collect();
    let mut part = plan.clone();
    part.suite
        .prompts
        .retain(|p| shard_of(&p.id, shard.n) == shard.k);
    let prompts: Vec<String> = part.suite.prompts.iter().map(|p| p.id.clone()).collect();
    std::fs::create_dir_all(&part.output)
        .with_context(|| format!("cannot create {}", part.output.display()))?;
    let record_path = part.output.join(RECORD);
    // A rerun replaces the record only once it has finished again.
    let _ = std::fs::remove_file(&record_path);
    let fingerprints = match prompts.is_empty() {
        // An empty slice traces nothing (a small suite over many shards).
        true => {
            let (b, c) = (
                fingerprint_of(plan, SideName::Baseline),
                fingerprint_of(plan, SideName::Candidate),
            );
            (b, c)
        }
        false => {
            let mut stages = Stages::default();
            let g = gather::gather(&part, &mut stages)?;
            (
                g.sides[SideName::Baseline].fingerprint.clone(),
                g.sides[SideName::Candidate].fingerprint.clone(),
            )
        }
    };
    let mut plugins = BTreeMap::new();
    for p in plan.scorers.iter().chain(&plan.claim_mappers) {
        let (sha, _) = crate::hash::sha256_file(&p.path)
            .with_context(|| format!("cannot read {}", p.path.display()))?;
        plugins.insert(p.name.clone(), sha);
    }
    let record = ShardRecord {
        shard,
        config_sha256: crate::hash::sha256_hex(plan.config_text.as_bytes()),
        suite_sha256: plan.suite_sha256.clone(),
        suite,
        prompts,
        baseline: fingerprints.0,
        candidate: fingerprints.1,
        plugins,
    };
    let json = serde_json::to_vec_pretty(&record).expect("a record serializes");
    crate::atomic_file::write(&record_path, &json)
        .with_context(|| format!("cannot write {}", record_path.display()))?;
    Ok(record)
}

/// The `[measure]` stage alone, for the shards to share: the direction
/// measured (or found current) at the config's own output.
pub fn measure_only(plan: &Plan) -> anyhow::Result<PathBuf> {
    let Some(m) = &plan.measure else {
        bail!("the config has no [measure]: there is no direction to measure; run the shards");
    };
    let mut stages = Stages::default();
    let side = stages.run("load baseline", |note| {
        let s = super::record::load_side(&plan.baseline, None, &plan.output)?;
        *note = s.exec.model_ref().name;
        Ok(s)
    })?;
    stages.run("measure", |note| gather::measure_stage(m, &side, note))
}

/// An empty shard's sides: what the plan says, without loading a model.
fn fingerprint_of(plan: &Plan, side: SideName) -> serde_json::Value {
    let s = plan.side(side);
    serde_json::json!({ "model": s.model.display().to_string(), "empty_shard": true })
}

/// What `merge` wrote.
pub struct Merged {
    pub shards: u32,
    pub prompts: usize,
    pub traces: [usize; 2],
}

/// Checks the shard outputs in `dirs` belong together and cover the suite
/// exactly once, and writes the merged bundles under `out/traces/`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> anyhow::Result<Merged> {
    let mut records: Vec<(PathBuf, ShardRecord)> = Vec::new();
    for d in dirs {
        let path = d.join(RECORD);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{}: no {RECORD}: not a finished shard (an interrupted one merges only once rerun and completed)",
                d.display()
            )
        })?;
        let r: ShardRecord = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a shard record", path.display()))?;
        records.push((d.clone(), r));
    }
    let Some((first_dir, first)) = records.first().cloned() else {
        bail!("no shard to merge: give the shards' output folders");
    };
    for (dir, r) in &records[1..] {
        let differs = [
            ("number of shards", r.shard.n != first.shard.n),
            ("config", r.config_sha256 != first.config_sha256),
            ("suite", r.suite_sha256 != first.suite_sha256),
            ("plugins", r.plugins != first.plugins),
            (
                "baseline model or transformation",
                r.baseline != first.baseline && !is_empty_shard(&r.baseline, &first.baseline),
            ),
            (
                "candidate model or transformation",
                r.candidate != first.candidate && !is_empty_shard(&r.candidate, &first.candidate),
            ),
        ];
        if let Some((what, _)) = differs.iter().find(|(_, d)| *d) {
            bail!(
                "{} is not a shard of the same run as {}: its {what} differs; rerun it from the same config",
                dir.display(),
                first_dir.display()
            );
        }
    }
    let n = first.shard.n;
    let mut by_k: BTreeMap<u32, &PathBuf> = BTreeMap::new();
    for (dir, r) in &records {
        if let Some(other) = by_k.insert(r.shard.k, dir) {
            bail!(
                "shard {} is given twice ({} and {}): give each shard once",
                r.shard,
                other.display(),
                dir.display()
            );
        }
    }
    if let Some(k) = (1..=n).find(|k| !by_k.contains_key(k)) {
        bail!(
            "shard {k}/{n} is missing: run `vauban run CONFIG --shard {k}/{n}` and give its output"
        );
    }
    // Each prompt exactly once, in the suite's order.
    let mut owner: BTreeMap<&str, u32> = BTreeMap::new();
    for (_, r) in &records {
        for p in &r.prompts {
            if let Some(k) = owner.insert(p, r.shard.k) {
                bail!(
                    "prompt `{p}` is in shards {k} and {}: the shards do not divide the suite",
                    r.shard.k
                );
            }
        }
    }
    if let Some(p) = first.suite.iter().find(|p| !owner.contains_key(p.as_str())) {
        bail!("prompt `{p}` is in no shard: a shard is incomplete; rerun it");
    }
    let mut traces = [0usize; 2];
    for (i, side) in SideName::BOTH.into_iter().enumerate() {
        let target = out.join("traces").join(side.as_str());
        let mut writer = BundleWriter::create(&target, WriteMode::CreateNew)
            .with_context(|| format!("cannot write {}", target.display()))?;
        let mut bundles: BTreeMap<u32, Bundle> = BTreeMap::new();
        for (dir, r) in &records {
            if r.prompts.is_empty() {
                continue;
            }
            let path = dir.join("traces").join(side.as_str());
            let b =
                Bundle::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            b.verify_all()
                .with_context(|| format!("{} is damaged", path.display()))?;
            bundles.insert(r.shard.k, b);
        }
        for p in &first.suite {
            let b = &bundles[&owner[p.as_str()]];
            for t in b
                .traces()
                .iter()
                .filter(|t| t.request.prompt_id.as_deref() == Some(p.as_str()))
            {
                let tensors = b.raw_tensors(t)?;
                writer.add_trace(t, &tensors)?;
                traces[i] += 1;
            }
        }
        if let Some(d) = bundles
            .values()
            .find_map(|b| b.manifest().transformation.clone())
        {
            writer.transformation(d);
        }
        writer.sharded(crate::bundle::Sharded {
            shards: n,
            prompts: (1..=n)
                .map(|k| {
                    records
                        .iter()
                        .find(|(_, r)| r.shard.k == k)
                        .map_or(0, |(_, r)| r.prompts.len())
                })
                .collect(),
        });
        writer.finish()?;
    }
    Ok(Merged {
        shards: n,
        prompts: first.suite.len(),
        traces,
    })
}

impl Plan {
    /// Where a side replays merged shards, says so in the report (once
    /// for both sides when they were sharded alike).
    pub fn state_sharding(&mut self) -> anyhow::Result<()> {
        let mut said: Vec<(SideName, crate::bundle::Sharded)> = Vec::new();
        for side in SideName::BOTH {
            let s = self.side(side);
            if s.backend != crate::config::file::ExecutorKind::Replay {
                continue;
            }
            let b = Bundle::open(&s.model)
                .with_context(|| format!("cannot open {}", s.model.display()))?;
            if let Some(sh) = &b.manifest().sharded {
                said.push((side, sh.clone()));
            }
        }
        let line = |who: &str, sh: &crate::bundle::Sharded| {
            format!(
                "{who} traces were recorded in {} shards (`vauban run --shard K/N`; prompts per shard: {}) and merged (`vauban merge`)",
                sh.shards,
                sh.prompts
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        match said.as_slice() {
            [(_, a), (_, b)] if a == b => self.warnings.push(line("both sides'", a)),
            many => {
                for (side, sh) in many {
                    self.warnings.push(line(&format!("the {side}"), sh));
                }
            }
        }
        Ok(())
    }
}

fn is_empty_shard(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    a.get("empty_shard").is_some() || b.get("empty_shard").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_bad_ones_are_usage_errors() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { k: 2, n: 3 }));
        for bad in ["0/2", "3/2", "1/0", "1", "a/b", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_prompt_falls_in_one_stable_shard() {
        for id in ["q1", "q-harm-01", "x"] {
            let k = shard_of(id, 3);
            assert!((1..=3).contains(&k));
            assert_eq!(shard_of(id, 3), k, "stable");
            assert_eq!(shard_of(id, 1), 1);
        }
    }
}
