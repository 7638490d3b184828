//! `vauban plugin test` and `vauban plugin inspect`: run a plugin against
//! recorded inputs, offline, and compare with a golden file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use vauban::bundle::Bundle;
use vauban::plugin::claims::{EvidenceSet, ProposedClaim};
use vauban::plugin::policy::Observation;
use vauban::plugin::{
    ClaimMapper, HostOptions, Plugin, PluginHost, Policy, SandboxOptions, Scorer, WIT_PACKAGE,
    WIT_VERSION, World,
};
use vauban::trace::{ArtifactKind, Trace};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Run a plugin on recorded inputs and print what it returns: a scorer
    /// on a trace bundle's traces (--traces), a claim mapper on an evidence
    /// set (--evidence), an intervention policy on observations
    /// (--observations). With --expect, compare with a golden file and fail
    /// with a readable diff; with --update, rewrite the golden file.
    Test(TestArgs),
    /// Print what a plugin is: world, name, version, WIT version, the
    /// artifact kinds it needs, the metrics it emits (or its directions),
    /// its imports and its sha256.
    Inspect(InspectArgs),
}

/// The sandbox flags both commands take.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// The plugin's config: a TOML or JSON file (by extension), handed to
    /// the plugin as JSON.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Wall-clock limit of one call, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub deadline_ms: u64,
    /// Linear memory the plugin may use, in MiB.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub memory_mib: u64,
    /// Instructions one call may run (turns on fuel metering).
    #[arg(long)]
    pub fuel: Option<u64>,
    /// A directory the plugin may read, mounted read-only at /data.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Compile afresh, without reading or writing the compile cache.
    #[arg(long)]
    pub no_cache: bool,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The plugin component (.wasm).
    pub plugin: PathBuf,
    /// A trace bundle to score (scorers).
    #[arg(long, value_name = "BUNDLE", required_unless_present_any = ["evidence", "observations"])]
    pub traces: Option<PathBuf>,
    /// An evidence set, as JSON (claim mappers).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["traces", "observations"])]
    pub evidence: Option<PathBuf>,
    /// Observations for one step, as a JSON list of {layer, direction,
    /// offset, projections} (intervention policies).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["traces", "evidence"])]
    pub observations: Option<PathBuf>,
    /// A judged scorer: the recorded answers of its judges (a judged
    /// run's `traces/judges/`), replayed without the judge models. Each
    /// name the scorer asks by is the recorded judge of that name, or the
    /// only judge recorded.
    #[arg(long, value_name = "DIR", requires = "traces")]
    pub judges: Option<PathBuf>,
    /// A golden file: fail, with the differences, unless the output matches.
    #[arg(long, value_name = "GOLDEN")]
    pub expect: Option<PathBuf>,
    /// Rewrite the --expect file with this run's output.
    #[arg(long, requires = "expect")]
    pub update: bool,
    /// Print the output as JSON (the golden file's format).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The plugin component (.wasm).
    pub plugin: PathBuf,
    /// Print JSON for machines instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

pub fn run(command: &PluginCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        PluginCommand::Test(args) => test(args, out),
        PluginCommand::Inspect(args) => inspect(args, out),
    }
}

impl SandboxArgs {
    fn host(&self) -> anyhow::Result<PluginHost> {
        let options = HostOptions {
            cache_dir: if self.no_cache {
                None
            } else {
                HostOptions::default_cache_dir()
            },
            fuel_metering: self.fuel.is_some(),
        };
        Ok(PluginHost::new(options)?)
    }

    fn sandbox(&self) -> anyhow::Result<SandboxOptions> {
        vauban::plugin::sandbox::check_limits(Some(self.deadline_ms), Some(self.memory_mib))
            .map_err(|(field, e)| anyhow::anyhow!("--{}: {e}", field.replace('_', "-")))?;
        if let Some(d) = &self.data_dir
            && !d.is_dir()
        {
            bail!("--data-dir {}: not a directory", d.display());
        }
        Ok(SandboxOptions {
            deadline: Duration::from_millis(self.deadline_ms),
            fuel: self.fuel,
            memory_bytes: self.memory_mib << 20,
            data_dir: self.data_dir.clone(),
            ..SandboxOptions::default()
        })
    }

    /// The config as JSON (`{}` without one).
    fn config_json(&self) -> anyhow::Result<String> {
        config_json(self.config.as_deref())
    }
}

/// A plugin config file (TOML or JSON, by extension) as JSON; `{}` without one.
pub(super) fn config_json(path: Option<&Path>) -> anyhow::Result<String> {
    let Some(path) = path else {
        return Ok("{}".into());
    };
    let text = vauban::input::read_text(path, vauban::input::MAX_SMALL_FILE_BYTES)
        .with_context(|| format!("cannot read the plugin config {}", path.display()))?;
    let value: serde_json::Value = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => serde_json::from_str(&text)
            .with_context(|| format!("plugin config {}: invalid JSON", path.display()))?,
        Some("toml") => {
            let v: toml::Value = toml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("plugin config {}: {e}", path.display()))?;
            serde_json::to_value(v)?
        }
        _ => bail!(
            "plugin config {}: name a .toml or .json file",
            path.display()
        ),
    };
    Ok(value.to_string())
}

/// What `plugin test` prints with --json and what golden files hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Golden {
    plugin: String,
    version: String,
    world: World,
    /// Scorers: trace id → metric → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// Scorers: trace id → the kinds it lacked.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    skipped: BTreeMap<String, Vec<ArtifactKind>>,
    /// Claim mappers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    claims: Vec<ProposedClaim>,
    /// Intervention policies: one line per op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ops: Vec<String>,
}

fn load(args: &SandboxArgs, path: &Path) -> anyhow::Result<(PluginHost, Plugin)> {
    let host = args.host()?;
    let plugin = host.load(path)?;
    Ok((host, plugin))
}

fn test(args: &TestArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (_host, plugin) = load(&args.sandbox, &args.plugin)?;
    let sandbox = args.sandbox.sandbox()?;
    let config = args.sandbox.config_json()?;
    let world = plugin.world();
    let start = Instant::now();
    let golden = match world {
        World::Scorer | World::JudgedScorer => {
            let Some(bundle_path) = &args.traces else {
                bail!(
                    "{} is a scorer: give it recorded traces with --traces BUNDLE",
                    args.plugin.display()
                );
            };
            let bundle = Arc::new(
                Bundle::open(bundle_path)
                    .with_context(|| format!("cannot open --traces {}", bundle_path.display()))?,
            );
            let scorer = Scorer::new(plugin, &config, sandbox)?;
            let traces: Vec<&Trace> = bundle.traces().iter().collect();
            let recorded = match (&args.judges, scorer.judged()) {
                (Some(dir), true) => Some(RecordedJudges::open(dir, &scorer.info().judges)?),
                (None, true) => bail!(
                    "{} is a judged scorer: give it its judges' recorded answers with --judges DIR (a judged run's traces/judges/)",
                    args.plugin.display()
                ),
                (Some(_), false) => bail!("{} asks no judge: drop --judges", args.plugin.display()),
                (None, false) => None,
            };
            let mut service = recorded.as_ref().map(RecordedJudges::service);
            let judges = service
                .as_mut()
                .map(|s| s as &mut dyn vauban::plugin::scorer::Judges);
            let outcome = scorer.score(&traces, Some(bundle.clone()), judges)?;
            if let Some(first) = outcome.refused.first() {
                bail!(
                    "{} of the scorer's judge requests have no recorded answer in {} (the first: {}); record them with a judged `vauban run` on these traces",
                    outcome.refused.len(),
                    args.judges.as_deref().unwrap_or(Path::new("")).display(),
                    first.reason
                );
            }
            let mut metrics: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
            for m in outcome.metrics {
                metrics.entry(m.trace).or_default().insert(m.name, m.value);
            }
            Golden {
                plugin: scorer.info().plugin.name.clone(),
                version: scorer.info().plugin.version.clone(),
                world,
                metrics,
                skipped: outcome
                    .skipped
                    .into_iter()
                    .map(|s| (s.trace, s.missing))
                    .collect(),
                claims: Vec::new(),
                ops: Vec::new(),
            }
        }
        World::ClaimMapper => {
            let Some(path) = &args.evidence else {
                bail!(
                    "{} is a claim mapper: give it an evidence set with --evidence FILE.json",
                    args.plugin.display()
                );
            };
            let evidence: EvidenceSet = read_json(path, "--evidence")?;
            let mapper = ClaimMapper::new(plugin, &config, sandbox)?;
            Golden {
                plugin: mapper.info().name.clone(),
                version: mapper.info().version.clone(),
                world,
                metrics: BTreeMap::new(),
                skipped: BTreeMap::new(),
                claims: mapper.propose(&evidence)?,
                ops: Vec::new(),
            }
        }
        World::InterventionPolicy => {
            let Some(path) = &args.observations else {
                bail!(
                    "{} is an intervention policy: give it observations with --observations FILE.json",
                    args.plugin.display()
                );
            };
            let raw: Vec<ObservationJson> = read_json(path, "--observations")?;
            let observations: Vec<Observation> = raw
                .into_iter()
                .map(|o| Observation {
                    layer: o.layer,
                    direction: o.direction,
                    offset: o.offset,
                    projections: o.projections,
                })
                .collect();
            let policy = Policy::new(plugin, &config, sandbox)?;
            let ops = policy.session()?.decide(&observations)?;
            Golden {
                plugin: policy.info().plugin.name.clone(),
                version: policy.info().plugin.version.clone(),
                world,
                metrics: BTreeMap::new(),
                skipped: BTreeMap::new(),
                claims: Vec::new(),
                ops: ops
                    .iter()
                    .map(|o| {
                        let value = o.value.map(|v| format!(" value {v}")).unwrap_or_default();
                        format!(
                            "layer {} {} {} alpha {}{value} at positions {:?}",
                            o.layer,
                            o.mode.as_str(),
                            o.direction,
                            o.alpha,
                            o.positions
                        )
                    })
                    .collect(),
            }
        }
    };
    let took = start.elapsed();

    if args.json {
        serde_json::to_writer_pretty(&mut *out, &golden)?;
        writeln!(out)?;
    } else {
        print_text(&golden, took, out)?;
    }
    let Some(expect) = &args.expect else {
        return Ok(());
    };
    if args.update {
        let mut text = serde_json::to_string_pretty(&golden)?;
        text.push('\n');
        vauban::atomic_file::write(expect, text.as_bytes())
            .with_context(|| format!("cannot write {}", expect.display()))?;
        writeln!(out, "updated {}", expect.display())?;
        return Ok(());
    }
    if !expect.exists() {
        bail!(
            "--expect {}: no such file; to create it from this output, run the same command with --update",
            expect.display()
        );
    }
    let expected: Golden = read_json(expect, "--expect")?;
    let diffs = diff(&expected, &golden);
    if diffs.is_empty() {
        writeln!(out, "matches {}", expect.display())?;
        return Ok(());
    }
    bail!(
        "the output differs from {} in {} place{}:\n  {}\nrerun with --update to accept this output",
        expect.display(),
        diffs.len(),
        if diffs.len() == 1 { "" } else { "s" },
        diffs.join("\n  ")
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObservationJson {
    layer: usize,
    direction: String,
    #[serde(default)]
    offset: usize,
    projections: Vec<f32>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, flag: &str) -> anyhow::Result<T> {
    let text = vauban::input::read_text(path, vauban::input::MAX_SMALL_FILE_BYTES)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        anyhow::anyhow!(
            "{flag} {}: at `{}` (line {}, column {}): {}",
            path.display(),
            e.path(),
            e.inner().line(),
            e.inner().column(),
            e.inner()
        )
    })
}

/// Values agree when within 1e-9 relative (or absolute near zero): JSON
/// round-trips f64 exactly, so this only forgives platform libm ulps.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn diff(expected: &Golden, got: &Golden) -> Vec<String> {
    let mut d = Vec::new();
    if expected.plugin != got.plugin || expected.version != got.version {
        d.push(format!(
            "plugin: expected {} {}, got {} {}",
            expected.plugin, expected.version, got.plugin, got.version
        ));
    }
    if expected.world != got.world {
        d.push(format!(
            "world: expected {}, got {}",
            expected.world, got.world
        ));
    }
    let traces: std::collections::BTreeSet<&String> =
        expected.metrics.keys().chain(got.metrics.keys()).collect();
    for t in traces {
        let empty = BTreeMap::new();
        let e = expected.metrics.get(t).unwrap_or(&empty);
        let g = got.metrics.get(t).unwrap_or(&empty);
        let names: std::collections::BTreeSet<&String> = e.keys().chain(g.keys()).collect();
        for n in names {
            match (e.get(n), g.get(n)) {
                (Some(a), Some(b)) if close(*a, *b) => {}
                (Some(a), Some(b)) => d.push(format!("trace {t} {n}: expected {a}, got {b}")),
                (Some(a), None) => d.push(format!("trace {t} {n}: expected {a}, got no value")),
                (None, Some(b)) => d.push(format!("trace {t} {n}: unexpected value {b}")),
                (None, None) => {}
            }
        }
    }
    if expected.skipped != got.skipped {
        d.push(format!(
            "skipped: expected {:?}, got {:?}",
            expected.skipped, got.skipped
        ));
    }
    let n = expected.claims.len().max(got.claims.len());
    for i in 0..n {
        match (expected.claims.get(i), got.claims.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => d.push(format!(
                "claim {i}: expected {:?} ({}), got {:?} ({})",
                a.statement,
                a.strength.as_str(),
                b.statement,
                b.strength.as_str()
            )),
            (Some(a), None) => d.push(format!("claim {i}: expected {:?}, got none", a.statement)),
            (None, Some(b)) => d.push(format!("claim {i}: unexpected {:?}", b.statement)),
            (None, None) => {}
        }
    }
    if expected.ops != got.ops {
        d.push(format!(
            "ops: expected {:?}, got {:?}",
            expected.ops, got.ops
        ));
    }
    d
}

fn print_text(g: &Golden, took: Duration, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "{} {} ({}), ran in {:.1} ms",
        g.plugin,
        g.version,
        g.world,
        took.as_secs_f64() * 1e3
    )?;
    if g.world.scores() {
        let names: std::collections::BTreeSet<&String> =
            g.metrics.values().flat_map(|m| m.keys()).collect();
        let width = g.metrics.keys().map(|t| t.len()).max().unwrap_or(5).max(5);
        write!(out, "{:width$}", "trace")?;
        for n in &names {
            write!(out, "  {n:>w$}", w = n.len().max(10))?;
        }
        writeln!(out)?;
        for (t, m) in &g.metrics {
            write!(out, "{t:width$}")?;
            for n in &names {
                let v = m.get(*n).map(|v| {
                    format!("{v:.6}")
                        .trim_end_matches('0')
                        .trim_end_matches('.')
                        .to_owned()
                });
                write!(
                    out,
                    "  {:>w$}",
                    v.unwrap_or_else(|| "-".into()),
                    w = n.len().max(10)
                )?;
            }
            writeln!(out)?;
        }
        for (t, kinds) in &g.skipped {
            let k: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            writeln!(out, "skipped {t}: lacks {}", k.join(", "))?;
        }
    }
    for c in &g.claims {
        writeln!(out, "[{}] {}", c.strength.as_str(), c.statement)?;
        writeln!(out, "    evidence: {}", c.evidence.join(", "))?;
        for l in &c.limitations {
            writeln!(out, "    limitation: {l}")?;
        }
    }
    for o in &g.ops {
        writeln!(out, "op: {o}")?;
    }
    if g.world == World::InterventionPolicy && g.ops.is_empty() {
        writeln!(out, "no ops this step")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct InspectJson<'a> {
    path: String,
    sha256: &'a str,
    size_bytes: u64,
    world: World,
    wit: String,
    host_wit: String,
    imports: &'a [String],
    exports: &'a [String],
    compile_ms: f64,
    compiled_from_cache: bool,
    describe: serde_json::Value,
}

fn inspect(args: &InspectArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (_host, plugin) = load(&args.sandbox, &args.plugin)?;
    let sandbox = args.sandbox.sandbox()?;
    let config = args.sandbox.config_json()?;
    let facts = plugin.facts.clone();
    let (sha256, size, compile, cached) = (
        plugin.sha256.clone(),
        plugin.size,
        plugin.compile_time,
        plugin.cached,
    );
    // Describing runs the plugin (configure, then describe) in the sandbox;
    // a plugin that needs a config says so here.
    let describe: anyhow::Result<serde_json::Value> = match facts.world {
        World::Scorer | World::JudgedScorer => Scorer::new(plugin, &config, sandbox)
            .map_err(Into::into)
            .and_then(|s| Ok(serde_json::to_value(s.info())?)),
        World::InterventionPolicy => Policy::new(plugin, &config, sandbox)
            .map_err(Into::into)
            .and_then(|p| Ok(serde_json::to_value(p.info())?)),
        World::ClaimMapper => ClaimMapper::new(plugin, &config, sandbox)
            .map_err(Into::into)
            .and_then(|m| Ok(serde_json::to_value(m.info())?)),
    };
    let (describe, describe_error) = match describe {
        Ok(v) => (v, None),
        Err(e) => (serde_json::Value::Null, Some(format!("{e:#}"))),
    };
    if args.json {
        let j = InspectJson {
            path: args.plugin.display().to_string(),
            sha256: &sha256,
            size_bytes: size,
            world: facts.world,
            wit: format!("{WIT_PACKAGE}@{}", facts.wit_version),
            host_wit: format!("{WIT_PACKAGE}@{WIT_VERSION}"),
            imports: &facts.imports,
            exports: &facts.exports,
            compile_ms: compile.as_secs_f64() * 1e3,
            compiled_from_cache: cached,
            describe: match &describe_error {
                Some(e) => serde_json::json!({ "error": e }),
                None => describe,
            },
        };
        serde_json::to_writer_pretty(&mut *out, &j)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{}", args.plugin.display())?;
    writeln!(
        out,
        "  world:    {} ({})",
        facts.world,
        facts.world.wit_name()
    )?;
    writeln!(
        out,
        "  wit:      {WIT_PACKAGE}@{} (host {WIT_VERSION})",
        facts.wit_version
    )?;
    writeln!(out, "  sha256:   {sha256}")?;
    writeln!(out, "  size:     {size} bytes")?;
    writeln!(
        out,
        "  compiled: {:.1} ms{}",
        compile.as_secs_f64() * 1e3,
        if cached {
            " (from this host's cache)"
        } else {
            ""
        }
    )?;
    match (&describe_error, &describe) {
        (Some(e), _) => writeln!(out, "  describe: failed with this config ({e})")?,
        (None, v) => {
            let info = v.get("plugin").unwrap_or(v);
            let s = |k: &str| {
                info.get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            writeln!(
                out,
                "  plugin:   {} {}: {}",
                s("name"),
                s("version"),
                s("description")
            )?;
            if let Some(needs) = v.get("needs").and_then(|n| n.as_array()) {
                let k: Vec<&str> = needs.iter().filter_map(|x| x.as_str()).collect();
                writeln!(
                    out,
                    "  needs:    {}",
                    if k.is_empty() {
                        "nothing".into()
                    } else {
                        k.join(", ")
                    }
                )?;
            }
            if let Some(metrics) = v.get("metrics").and_then(|n| n.as_array()) {
                writeln!(out, "  metrics:")?;
                for m in metrics {
                    let g = |k: &str| m.get(k).and_then(|x| x.as_str()).unwrap_or("");
                    writeln!(
                        out,
                        "    {} [{}] {} ({}): {}",
                        g("name"),
                        g("unit"),
                        g("polarity"),
                        g("family"),
                        g("description")
                    )?;
                }
            }
            if let Some(judges) = v.get("judges").and_then(|n| n.as_array()) {
                for j in judges {
                    let g = |k: &str| j.get(k).and_then(|x| x.as_str()).unwrap_or("");
                    writeln!(out, "  judge:    {}: {}", g("name"), g("description"))?;
                }
            }
            if let Some(dirs) = v.get("directions").and_then(|n| n.as_array()) {
                for d in dirs {
                    writeln!(out, "  direction: {} at layers {}", d["name"], d["layers"])?;
                }
            }
        }
    }
    writeln!(out, "  imports:")?;
    for i in &facts.imports {
        writeln!(out, "    {i}")?;
    }
    writeln!(out, "  exports:")?;
    for e in &facts.exports {
        writeln!(out, "    {e}")?;
    }
    Ok(())
}

/// A judged scorer's judges as a recording: each name it asks by bound to
/// the recorded judge of that name (or the only one recorded), answered
/// from the record alone.
struct RecordedJudges {
    store: vauban::judge::store::JudgeStore,
    models: BTreeMap<String, (String, vauban::judge::service::JudgeModel)>,
}

impl RecordedJudges {
    fn open(dir: &Path, needs: &[vauban::plugin::scorer::JudgeNeed]) -> anyhow::Result<Self> {
        use vauban::judge::service::JudgeModel;
        if !dir.is_dir() {
            bail!(
                "--judges {}: not a folder (a judged run keeps its judges' answers in OUTPUT/traces/judges/)",
                dir.display()
            );
        }
        let store = vauban::judge::store::JudgeStore::new(dir);
        let recorded = store.judges();
        let mut models = BTreeMap::new();
        for need in needs {
            let judge = match (recorded.contains(&need.name), recorded.as_slice()) {
                (true, _) => need.name.clone(),
                (false, [only]) => only.clone(),
                (false, _) => bail!(
                    "--judges {}: the scorer asks judge `{}`, and the record holds {}: name the folder of a run that bound it",
                    dir.display(),
                    need.name,
                    match recorded.is_empty() {
                        true => "no answer".to_owned(),
                        false => format!("the judges {}", recorded.join(", ")),
                    }
                ),
            };
            let identity = store
                .identities(&judge)
                .into_iter()
                .next()
                .expect("a recorded judge has an identity");
            models.insert(
                need.name.clone(),
                (judge, JudgeModel::Recorded { identity }),
            );
        }
        Ok(RecordedJudges { store, models })
    }

    fn service(&self) -> vauban::judge::service::JudgeService<'_> {
        let bound = self
            .models
            .iter()
            .map(|(asked, (judge, model))| (asked.clone(), (judge.clone(), model)))
            .collect();
        vauban::judge::service::JudgeService::new(
            bound,
            &self.store,
            vauban::judge::service::Budget::default(),
        )
    }
}
