//! From a config file to a checked plan: every path resolved against the
//! config's folder, the suite loaded and checked, every plugin found, and
//! every cross-reference (gate metrics, directions, layers) checked before
//! a model loads.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::config::file::{
    self, ConfigFile, ExecutorKind, ModelSection, PluginSection, TransformKind, TransformSection,
};
use crate::config::{Redaction, Suite};
use crate::executor::DeviceSpec;
use crate::model::{Dtype, KvType, PrimitivePath, WeightMode};
use crate::report::{AccessLevel, ClaimStrength};

pub use super::sides::SideName;

/// A checked config, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config_path: PathBuf,
    pub config_text: String,
    pub config: ConfigFile,
    /// The output folder (resolved).
    pub output: PathBuf,
    pub suite: Suite,
    /// sha256 of the suite as the run sees it (the file, or the inline prompts as JSON).
    pub suite_sha256: String,
    pub baseline: SidePlan,
    pub candidate: SidePlan,
    pub measure: Option<MeasurePlan>,
    /// The judges judged scorers ask, by the config's name.
    pub judges: std::collections::BTreeMap<String, JudgePlan>,
    /// Where the judges' answers are read from when they are replayed
    /// (`vauban diff`): no judge model is loaded, and a request the record
    /// lacks is refused. None: the judges run, their answers kept under
    /// the output's `traces/judges/`.
    pub judge_record: Option<PathBuf>,
    pub scorers: Vec<PluginPlan>,
    pub claim_mappers: Vec<PluginPlan>,
    /// Where activation findings' direction comes from, when any.
    pub report_direction: Option<(DirectionRef, Option<String>)>,
    /// What the config allows but will not do as written (said by
    /// `validate` and logged by `run`).
    pub warnings: Vec<String>,
}

/// One side's model and transformation.
#[derive(Debug, Clone)]
pub struct SidePlan {
    pub name: SideName,
    /// Which executor serves this side.
    pub backend: ExecutorKind,
    /// The model (a `.gguf` file or an HF folder), or the bundle a replay serves.
    pub model: PathBuf,
    pub label: String,
    pub device: DeviceSpec,
    pub weights: WeightMode,
    pub system: Option<String>,
    /// How this side generates (observe's keys and the side's overrides).
    pub generation: GenerationSettings,
    pub transform: Option<TransformPlan>,
    /// A LoRA adapter applied to the model before the transformation.
    pub adapter: Option<PathBuf>,
    /// The endpoint, with `executor = "http"` (its response cache is set
    /// when the side is loaded).
    pub http: Option<crate::executor::http::HttpSpec>,
    /// Prompts the embedded model traces in one batched pass.
    pub batch: usize,
    /// How the embedded model's KV cache stores keys and values.
    pub kv_cache: KvType,
    /// The Torch executor's dtype.
    pub dtype: Dtype,
    /// How candle applies the activation primitive.
    pub primitive: PrimitivePath,
}

impl SidePlan {
    /// This side served by replaying the bundle at `bundle` (`vauban diff`).
    pub fn replay(&mut self, bundle: PathBuf) {
        self.backend = ExecutorKind::Replay;
        self.model = bundle;
    }
}

/// A direction file, or the `[measure]` stage's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectionRef {
    File(PathBuf),
    Measured,
}

/// A checked transformation.
#[derive(Debug, Clone)]
pub struct TransformPlan {
    pub kind: TransformKind,
    pub direction: Option<DirectionRef>,
    pub tensor: Option<String>,
    pub layers: Vec<usize>,
    pub alpha: f32,
    pub interventions: Vec<crate::intervene::InterventionSpec>,
}

/// The `[measure]` stage, resolved.
#[derive(Debug, Clone)]
pub struct MeasurePlan {
    pub harmful: PathBuf,
    pub harmless: PathBuf,
    pub out: PathBuf,
    pub holdout: Option<f64>,
    pub max_kl: Option<f64>,
    pub layers: Vec<usize>,
    pub layer: Option<usize>,
    /// Use the direction already at `out`, never measure it (a shard: the
    /// direction is measured once, by `vauban run --measure-only`).
    pub reuse_only: bool,
}

/// A plugin found on disk, with its config and sandbox grants.
#[derive(Debug, Clone)]
pub struct PluginPlan {
    /// The first-party name or the file stem.
    pub name: String,
    pub path: PathBuf,
    pub config_json: String,
    pub data_dir: Option<PathBuf>,
    pub deadline_ms: Option<u64>,
    pub memory_mib: Option<u64>,
    /// A judged scorer's judges: the name it asks by → the config's judge.
    pub judges: std::collections::BTreeMap<String, String>,
    pub judge_budget: crate::judge::service::Budget,
    /// How accurate one of its 0/1 metrics is, for the corrected rate.
    pub calibration: Option<CalibrationPlan>,
}

/// A judged metric's calibration, checked.
#[derive(Debug, Clone)]
pub struct CalibrationPlan {
    pub metric: String,
    pub source: CalibrationSource,
}

#[derive(Debug, Clone)]
pub enum CalibrationSource {
    /// Labelled replies the scorer scores in the run, with its judge.
    Labelled {
        path: PathBuf,
        items: Vec<crate::judge::calibration::Labelled>,
        expected_behavior: Option<String>,
    },
    Stated {
        sensitivity: f64,
        specificity: f64,
    },
}

/// A judge of the config, checked: the model and the executor that runs it.
#[derive(Debug, Clone)]
pub struct JudgePlan {
    pub name: String,
    pub backend: ExecutorKind,
    /// The model file or folder, or the name an endpoint serves.
    pub model: PathBuf,
    pub device: DeviceSpec,
    pub weights: WeightMode,
    pub kv_cache: KvType,
    pub dtype: Dtype,
    pub adapter: Option<PathBuf>,
    pub http: Option<crate::executor::http::HttpSpec>,
}

/// First-party plugins, by the name a config uses, with their crate.
pub const FIRST_PARTY: [(&str, &str); 7] = [
    ("refusal", "vauban-plugin-refusal"),
    ("refusal-judge", "vauban-plugin-refusal-judge"),
    ("over-refusal-judge", "vauban-plugin-over-refusal-judge"),
    ("behavior", "vauban-plugin-behavior"),
    ("logprob", "vauban-plugin-logprob"),
    ("steer-gate", "vauban-plugin-steer-gate"),
    ("claims-default", "vauban-plugin-claims-default"),
];

/// Folders searched for first-party components, in order:
/// `$VAUBAN_PLUGIN_DIR`, then the cargo target folders beside this binary
/// (`target/plugins/wasm32-wasip2/plugin`, where `scripts/setup.sh` and the
/// tests build them, and `target/wasm32-wasip2/plugin`).
pub fn plugin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("VAUBAN_PLUGIN_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/{debug,release}/vauban (or target/debug/deps/… in tests)
        for target in exe.ancestors().skip(1).take(3) {
            dirs.push(target.join("plugins/wasm32-wasip2/plugin"));
            dirs.push(target.join("wasm32-wasip2/plugin"));
        }
    }
    dirs
}

/// The component file of a first-party plugin.
pub fn first_party(name: &str) -> anyhow::Result<PathBuf> {
    let Some((_, krate)) = FIRST_PARTY.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = FIRST_PARTY.iter().map(|(n, _)| *n).collect();
        let near = names
            .iter()
            .min_by_key(|n| strsim::damerau_levenshtein(name, n))
            .filter(|n| strsim::damerau_levenshtein(name, n) <= 2)
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        bail!(
            "`{name}` is not a first-party plugin{near}; first-party plugins: {}; or give `path = \"….wasm\"`",
            names.join(", ")
        );
    };
    let file = format!("{}.wasm", krate.replace('-', "_"));
    let dirs = plugin_dirs();
    for d in &dirs {
        let p = d.join(&file);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "the first-party plugin `{name}` is not built (looked for {file} in {}); build them with \
         `bash scripts/build-plugins.sh`, or set VAUBAN_PLUGIN_DIR to the folder holding {file}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl Plan {
    /// The plan of one side.
    pub fn side(&self, name: SideName) -> &SidePlan {
        match name {
            SideName::Baseline => &self.baseline,
            SideName::Candidate => &self.candidate,
        }
    }

    /// Reads and checks the config at `path`; `out` overrides its output
    /// folder. `replay`: the traces come from bundles, so the models and
    /// directions need not exist here. Each part is checked by its own
    /// method of [`Checker`], in the config's order.
    pub fn from_file(path: &Path, out: Option<&Path>, replay: bool) -> anyhow::Result<Plan> {
        let (config, text) = file::read(path)?;
        let check = Checker::new(path, &config, replay);
        let at = |key: &str, e: String| check.at(key, e);
        let output = match out {
            Some(o) => o.to_path_buf(),
            None => check.resolve("output", &config.output)?,
        };
        check_observe(&config.observe, &at)?;
        let (suite, suite_sha256) = check.suite()?;
        let measure = check.measure(&output)?;
        let baseline = check.side(SideName::Baseline, &config.baseline, measure.is_some())?;
        let candidate = check.side(SideName::Candidate, &config.candidate, measure.is_some())?;
        if config.observe.samples > 1
            && baseline.generation.samples == 1
            && candidate.generation.samples == 1
        {
            check.warn(format!(
                "observe.samples = {} has no effect: both sides decode greedily, so every sample would be the same; set temperature (in [observe], or in [baseline]/[candidate])",
                config.observe.samples
            ));
        }
        let judges = check.judges()?;
        let scorers = check.plugins("scorers", &config.scorers)?;
        let claim_mappers = check.plugins("claim_mappers", &config.claim_mappers)?;
        // Recordings may hold their own scores (an imported eval's), which
        // the report compares without a scorer.
        let recorded = replay
            || (baseline.backend == ExecutorKind::Replay
                && candidate.backend == ExecutorKind::Replay);
        if scorers.is_empty() && !recorded {
            return Err(at(
                "scorers",
                "no scorers: add at least one `[[scorers]]` (e.g. `plugin = \"refusal\"`)".into(),
            ));
        }
        if config.report.formats.is_empty() {
            return Err(at(
                "report.formats",
                "empty; list at least one of \"json\", \"md\", \"html\"".into(),
            ));
        }
        check.gates(&suite)?;
        let report_direction = match &config.report.direction {
            Some(d) => Some((
                direction_ref(
                    d,
                    "report.direction",
                    &|key, p| check.resolve(key, p),
                    &at,
                    measure.is_some(),
                    replay,
                )?,
                config.report.direction_tensor.clone(),
            )),
            None => candidate
                .transform
                .as_ref()
                .and_then(|t| t.direction.clone().map(|d| (d, t.tensor.clone()))),
        };
        let redacted = suite
            .prompts
            .iter()
            .filter(|p| p.redaction != Redaction::Safe)
            .count();
        tracing::debug!("{redacted} prompts are redacted or omitted in examples");

        let warnings = check.warnings.into_inner();
        Ok(Plan {
            config_path: path.to_path_buf(),
            config_text: text,
            config,
            output,
            suite,
            suite_sha256,
            baseline,
            candidate,
            measure,
            judges,
            judge_record: None,
            scorers,
            claim_mappers,
            report_direction,
            warnings,
        })
    }

    /// The access level the observe settings can reach at best (the run's
    /// traces decide the real one).
    pub fn expected_level(&self) -> AccessLevel {
        let o = &self.config.observe;
        let remote = [&self.baseline, &self.candidate]
            .iter()
            .any(|s| s.backend == ExecutorKind::Http);
        if remote {
            // An endpoint gives text and, at best, top-k logprobs.
            return match o.logprobs {
                true => AccessLevel::Logprobs,
                false => AccessLevel::BlackBox,
            };
        }
        if o.weights && !o.layers.is_empty() {
            // weights of both plus activations of both
            return AccessLevel::BaseAndTransformed;
        }
        if !o.layers.is_empty() {
            AccessLevel::Activations
        } else if o.logprobs {
            AccessLevel::Logprobs
        } else {
            AccessLevel::BlackBox
        }
    }

    /// A warning when `report.claim_strength` asks for more than the
    /// observe settings can give.
    pub fn claim_strength_warning(&self) -> Option<String> {
        let wanted = self.config.report.claim_strength?;
        let best = self.expected_level().strongest_claim();
        (wanted > best)
            .then(|| claim_gap(wanted, best, "the `[observe]` settings can reach at most"))
    }
}

/// What the checks of one config share: the file (every error names it,
/// with the key at fault), the folder its relative paths resolve against,
/// whether the sides are replayed (`vauban diff`: models and directions
/// need not exist here), and the warnings said so far.
struct Checker<'a> {
    path: &'a Path,
    base: PathBuf,
    config: &'a ConfigFile,
    replay: bool,
    warnings: std::cell::RefCell<Vec<String>>,
}

impl<'a> Checker<'a> {
    fn new(path: &'a Path, config: &'a ConfigFile, replay: bool) -> Self {
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Checker {
            path,
            base,
            config,
            replay,
            warnings: Default::default(),
        }
    }

    /// The error `e` at `key` of this config.
    fn at(&self, key: &str, e: String) -> anyhow::Error {
        anyhow::anyhow!("{}: {key}: {e}", self.path.display())
    }

    /// `p`, given at `key`, resolved against the config's folder.
    fn resolve(&self, key: &str, p: &Path) -> anyhow::Result<PathBuf> {
        file::resolve(&self.base, p).map_err(|e| self.at(key, e))
    }

    /// A warning about this config (`validate` says it, `run` logs it).
    fn warn(&self, w: String) {
        self.warnings
            .borrow_mut()
            .push(format!("{}: {w}", self.path.display()));
    }

    /// The suite (its file or inline prompts) and its sha256; prompt ids
    /// that can name trace files.
    fn suite(&self) -> anyhow::Result<(Suite, String)> {
        let (config, path) = (self.config, self.path);
        let at = |key: &str, e: String| self.at(key, e);
        let resolve = |key: &str, p: &Path| self.resolve(key, p);
        let (suite, suite_sha256) = match (&config.suite.file, config.suite.prompts.is_empty()) {
            (Some(f), true) => {
                let p = resolve("suite.file", f)?;
                let suite = Suite::load(&p)?;
                let (sha, _) = crate::hash::sha256_file(&p)
                    .with_context(|| format!("cannot hash {}", p.display()))?;
                (suite, sha)
            }
            (None, false) => {
                let suite = Suite::new(
                    config.suite.prompts.clone(),
                    &format!("{}: suite.prompts", path.display()),
                )?;
                let json = serde_json::to_vec(&suite.prompts)?;
                (suite, crate::hash::sha256_hex(&json))
            }
            (Some(_), false) => {
                return Err(at(
                    "suite",
                    "give either `file` or `prompts`, not both".into(),
                ));
            }
            (None, true) => {
                return Err(at(
                    "suite",
                    "no prompts: set `file = \"prompts.jsonl\"` or add `[[suite.prompts]]` tables"
                        .into(),
                ));
            }
        };
        for p in &suite.prompts {
            if !p
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(at(
                    "suite",
                    format!(
                        "prompt id `{}`: use letters, digits, `-`, `_` and `.` only (ids name trace files)",
                        p.id
                    ),
                ));
            }
        }
        Ok((suite, suite_sha256))
    }

    /// The `[measure]` section: its suites load, its output is a
    /// .safetensors file.
    fn measure(&self, output: &Path) -> anyhow::Result<Option<MeasurePlan>> {
        let (config, path, replay) = (self.config, self.path, self.replay);
        let at = |key: &str, e: String| self.at(key, e);
        let resolve = |key: &str, p: &Path| self.resolve(key, p);
        let measure = match &config.measure {
            None => None,
            Some(m) if m.out.extension().is_none_or(|e| e != "safetensors") => {
                // The run reads the chosen direction back from its file
                // (`direction`); a control vector holds only per-layer ones.
                return Err(at(
                    "measure.out",
                    format!(
                        "`{}`: a run's measured direction is saved as .safetensors (the chosen direction and every layer's); \
                         `vauban measure --out FILE.gguf` writes a llama.cpp control vector",
                        m.out.display()
                    ),
                ));
            }
            Some(m) => Some(MeasurePlan {
                harmful: resolve("measure.harmful", &m.harmful)?,
                harmless: resolve("measure.harmless", &m.harmless)?,
                out: if m.out.is_absolute() {
                    m.out.clone()
                } else {
                    output.join(&m.out)
                },
                holdout: m.holdout,
                max_kl: m.max_kl,
                layers: m.layers.clone(),
                layer: m.layer,
                reuse_only: false,
            }),
        };
        if let Some(m) = measure.as_ref().filter(|_| !replay) {
            for (key, p) in [
                ("measure.harmful", &m.harmful),
                ("measure.harmless", &m.harmless),
            ] {
                Suite::load(p).with_context(|| format!("{}: {key}", path.display()))?;
            }
        }
        Ok(measure)
    }

    /// One side: its executor and the settings that executor takes, its
    /// model (or bundle, or served name), device, transformation, and
    /// what the model's shape allows (layers, directions).
    fn side(
        &self,
        name: SideName,
        s: &ModelSection,
        has_measure: bool,
    ) -> anyhow::Result<SidePlan> {
        let (config, replay) = (self.config, self.replay);
        let at = |key: &str, e: String| self.at(key, e);
        let resolve = |key: &str, p: &Path| self.resolve(key, p);
        let key = name.as_str();
        let generation = GenerationSettings::resolve(&config.observe, s, key, &at)?;
        let backend = self.executor(key, s)?;
        let http = http_spec(s, backend, key, &resolve, &at)?;
        let (batch, kv_cache, dtype) = self.executor_settings(key, s)?;
        let primitive = match (s.primitive, s.executor) {
            (None, _) => PrimitivePath::default(),
            (Some(p), ExecutorKind::Candle) => p,
            (Some(_), other) => {
                return Err(at(
                    &format!("{key}.primitive"),
                    format!(
                        "`primitive` is a setting of executor = \"candle\", and this side's executor is `{other}`"
                    ),
                ));
            }
        };
        if backend == ExecutorKind::Http && !replay {
            self.served_as_is(name, s, has_measure)?;
        }
        // A replayed side needs its bundle, not a model or directions;
        // an http side names a model the server serves, not a file.
        let recorded = replay || backend == ExecutorKind::Replay;
        let remote = backend == ExecutorKind::Http;
        let model = match remote && !replay {
            true => s.model.clone(),
            false => resolve(&format!("{key}.model"), &s.model)?,
        };
        if backend == ExecutorKind::Replay && !replay && !model.join("manifest.json").is_file() {
            return Err(at(
                &format!("{key}.model"),
                format!(
                    "{} is not a trace bundle (a folder with manifest.json); with `executor = \"replay\"`, `model` names the bundle to replay: record it first (`vauban run` writes each side's bundle under its output's traces/, `vauban trace --out` writes one)",
                    model.display()
                ),
            ));
        }
        if !recorded && !remote && !model.exists() {
            return Err(at(
                &format!("{key}.model"),
                format!(
                    "{} does not exist (a .gguf file or an HF folder): make or fetch it first (a recipe's header lists the commands that make its models; `bash scripts/fetch-model.sh` fetches the demo model)",
                    model.display()
                ),
            ));
        }
        let device: DeviceSpec = s
            .device
            .parse()
            .map_err(|e: String| at(&format!("{key}.device"), e))?;
        let weights = s.weights;
        let adapter = self.adapter(key, s, &model, recorded || remote)?;
        let transform = match &s.transform {
            None => None,
            Some(t) => Some(transform(
                t,
                &format!("{key}.transform"),
                &resolve,
                &at,
                has_measure,
                recorded,
            )?),
        };
        if !recorded && !remote {
            // What `run` would refuse, refused here: a device this build
            // or machine cannot open, layers the model does not have.
            match backend {
                ExecutorKind::Torch => crate::executor::check_torch_device(device),
                ExecutorKind::Mlx => crate::executor::check_mlx_device(device),
                _ => crate::executor::check_device(device),
            }
            .map_err(|e| at(&format!("{key}.device"), e))?;
            let shape = crate::model::read_config(&model)
                .map_err(|e| at(&format!("{key}.model"), e.to_string()))?;
            let measures = name == SideName::Baseline;
            let checked = ModelCheck {
                config,
                model: &model,
                side: name,
                transform: transform.as_ref(),
                measures,
            };
            if let Some(w) = checked.against(&shape, &at)? {
                self.warn(w);
            }
        }
        let label = s.label.clone().unwrap_or_else(|| {
            model
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| key.to_owned())
        });
        Ok(SidePlan {
            name,
            backend,
            model,
            label,
            device,
            weights,
            system: s.system.clone().or_else(|| config.observe.system.clone()),
            generation,
            transform,
            adapter,
            http,
            batch,
            kv_cache,
            dtype,
            primitive,
        })
    }

    /// The side's adapter, read and checked against its model's shape
    /// now, so a mismatch is named before anything runs; refused on a side
    /// whose model vauban does not hold.
    fn adapter(
        &self,
        key: &str,
        s: &ModelSection,
        model: &Path,
        not_held: bool,
    ) -> anyhow::Result<Option<PathBuf>> {
        let Some(given) = &s.adapter else {
            return Ok(None);
        };
        let at_key = format!("{key}.adapter");
        if self.replay {
            // The recording holds the adapted model's runs already.
            return Ok(None);
        }
        if not_held {
            return Err(self.at(
                &at_key,
                format!(
                    "an adapter is applied to a model vauban holds (executor = \"candle\", \"torch\" or \"mlx\"), and this side's executor is `{}`: serve the adapted model (`llama-server -m MODEL.gguf --lora ADAPTER.gguf`), or record it and replay the bundle",
                    s.executor
                ),
            ));
        }
        let path = self.resolve(&at_key, given)?;
        let shape = crate::model::read_config(model)
            .map_err(|e| self.at(&format!("{key}.model"), e.to_string()))?;
        crate::model::lora::Adapter::read(&path, &shape)
            .map_err(|e| self.at(&at_key, e.to_string()))?;
        Ok(Some(path))
    }

    /// The side's executor, refused when this build lacks it (a replayed
    /// side, `vauban diff`, needs no libtorch and no MLX).
    fn executor(&self, key: &str, s: &ModelSection) -> anyhow::Result<ExecutorKind> {
        let missing = |why: &str| self.at(&format!("{key}.executor"), why.into());
        match s.executor {
            ExecutorKind::Torch if !crate::executor::TORCH_BUILT && !self.replay => {
                Err(missing(crate::executor::TORCH_MISSING))
            }
            ExecutorKind::Mlx if !crate::executor::MLX_BUILT && !self.replay => {
                Err(missing(crate::executor::MLX_MISSING))
            }
            executor => Ok(executor),
        }
    }

    /// The settings one executor takes (`batch`, `kv_cache`: candle's;
    /// `dtype`: torch's, and MLX's f32), each refused by name on a side
    /// whose executor does not take it.
    fn executor_settings(
        &self,
        key: &str,
        s: &ModelSection,
    ) -> anyhow::Result<(usize, KvType, Dtype)> {
        let at = |key: &str, e: String| self.at(key, e);
        let backend = s.executor;
        // Settings of the embedded model, refused on other executors.
        let candle_only = |setting: &str| {
            at(
                &format!("{key}.{setting}"),
                format!(
                    "`{setting}` is a setting of executor = \"candle\", and this side's executor is `{}`",
                    s.executor,
                ),
            )
        };
        let batch = match (s.batch, backend) {
            (None, _) => crate::executor::candle::DEFAULT_BATCH,
            (Some(0), _) => {
                return Err(at(
                    &format!("{key}.batch"),
                    "0: a batch holds at least 1 prompt (1 traces them one at a time)".into(),
                ));
            }
            // The local executors trace prompts in ragged batches.
            (Some(n), ExecutorKind::Candle | ExecutorKind::Torch | ExecutorKind::Mlx) => n,
            (Some(_), _) => {
                return Err(at(
                    &format!("{key}.batch"),
                    format!(
                        "`batch` is a setting of the local executors (candle, torch, mlx), and this side's executor is `{}`{}",
                        s.executor,
                        if backend == ExecutorKind::Http {
                            " (an endpoint's requests in flight are `concurrency`)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        };
        let kv_cache = match (s.kv_cache, backend) {
            (None, _) => KvType::F32,
            (Some(k), ExecutorKind::Candle) => k,
            (Some(_), _) => return Err(candle_only("kv_cache")),
        };
        let dtype = match (s.dtype, backend) {
            (None, _) => Dtype::F32,
            (Some(d), ExecutorKind::Torch | ExecutorKind::Mlx) => d,
            (Some(_), _) => {
                return Err(at(
                    &format!("{key}.dtype"),
                    format!(
                        "`dtype` is a setting of the torch and mlx executors, and this side's executor is `{}`",
                        s.executor
                    ),
                ));
            }
        };
        Ok((batch, kv_cache, dtype))
    }

    /// What a side served over http cannot do: be transformed (vauban
    /// holds no weights or activations of it), or give the baseline's
    /// activations to measure a direction from.
    fn served_as_is(
        &self,
        name: SideName,
        s: &ModelSection,
        has_measure: bool,
    ) -> anyhow::Result<()> {
        let at = |key: &str, e: String| self.at(key, e);
        let key = name.as_str();
        if s.transform.is_some() {
            return Err(at(
                &format!("{key}.transform"),
                "an http side is served as it is: a transformation needs the weights or \
                 activations (serve the transformed model with `vauban serve --intervene`, \
                 or run it locally with executor = \"candle\")"
                    .into(),
            ));
        }
        if name == SideName::Baseline && has_measure {
            return Err(at(
                "measure",
                "measuring a direction needs the baseline's activations, and the baseline \
                 is served over http; measure on a local copy with `vauban measure --model`"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Each plugin of a list (`scorers`, `claim_mappers`), found and checked.
    fn plugins(&self, list: &str, sections: &[PluginSection]) -> anyhow::Result<Vec<PluginPlan>> {
        sections
            .iter()
            .enumerate()
            .map(|(i, s)| self.plugin(&format!("{list}[{i}]"), s))
            .collect()
    }

    /// One plugin: a first-party one by name or a file, its sandbox
    /// limits, its data folder.
    fn plugin(&self, key: &str, s: &PluginSection) -> anyhow::Result<PluginPlan> {
        let at = |key: &str, e: String| self.at(key, e);
        let resolve = |key: &str, p: &Path| self.resolve(key, p);
        let (name, file) = match (&s.plugin, &s.path) {
            (Some(n), None) => (
                n.clone(),
                first_party(n).map_err(|e| at(key, e.to_string()))?,
            ),
            (None, Some(p)) => {
                let p = resolve(key, p)?;
                if !p.is_file() {
                    return Err(at(key, format!("{} does not exist", p.display())));
                }
                let stem = p
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (stem, p)
            }
            _ => {
                return Err(at(
                    key,
                    "give either `plugin = \"NAME\"` (first-party) or `path = \"FILE.wasm\"`"
                        .into(),
                ));
            }
        };
        crate::plugin::sandbox::check_limits(s.deadline_ms, s.memory_mib)
            .map_err(|(field, e)| at(&format!("{key}.{field}"), e))?;
        let data_dir = match &s.data_dir {
            Some(d) => {
                let d = resolve(&format!("{key}.data_dir"), d)?;
                if !d.is_dir() {
                    return Err(at(
                        &format!("{key}.data_dir"),
                        format!("{} is not a folder", d.display()),
                    ));
                }
                Some(d)
            }
            None => None,
        };
        // Bindings name judges of the config; whether the plugin asks
        // them by these names is checked when it is loaded (`validate`,
        // and `run` before anything is traced).
        for (asked, judge) in &s.judges {
            if !self.config.judges.contains_key(judge) {
                return Err(at(
                    &format!("{key}.judges.{asked}"),
                    format!(
                        "no `[judges.{judge}]` in this config (it declares: {}); declare the judge, or bind `{asked}` to one it declares",
                        names_or_none(self.config.judges.keys())
                    ),
                ));
            }
        }
        let judge_budget = match &s.judge_budget {
            None => crate::judge::service::Budget::default(),
            Some(b) => {
                let d = crate::judge::service::Budget::default();
                let budget = crate::judge::service::Budget {
                    requests: b.requests.unwrap_or(d.requests),
                    tokens: b.tokens.unwrap_or(d.tokens),
                    prompt_bytes: b.prompt_bytes.unwrap_or(d.prompt_bytes),
                };
                if budget.requests == 0 || budget.tokens == 0 || budget.prompt_bytes == 0 {
                    return Err(at(
                        &format!("{key}.judge_budget"),
                        "0 allows nothing: give a judged scorer at least 1 request, 1 token and 1 byte of prompt (or no judge_budget for the defaults)".into(),
                    ));
                }
                budget
            }
        };
        if s.judges.is_empty() && s.judge_budget.is_some() {
            return Err(at(
                &format!("{key}.judge_budget"),
                "a budget without judges: bind the scorer's judges with `judges = { NAME = \"JUDGE\" }`".into(),
            ));
        }
        let calibration = match &s.calibration {
            None => None,
            Some(c) => Some(self.calibration(&format!("{key}.calibration"), c, &s.judges)?),
        };
        Ok(PluginPlan {
            name,
            path: file,
            config_json: file::plugin_config_json(s.config.as_ref()),
            data_dir,
            deadline_ms: s.deadline_ms,
            memory_mib: s.memory_mib,
            judges: s.judges.clone(),
            judge_budget,
            calibration,
        })
    }

    /// A judged metric's calibration: a labelled set read and checked
    /// now (its size, its labels), or stated rates a correction can use.
    fn calibration(
        &self,
        key: &str,
        c: &file::CalibrationSection,
        judges: &std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<CalibrationPlan> {
        let at = |k: &str, e: String| self.at(k, e);
        if judges.is_empty() {
            return Err(at(
                key,
                "a calibration is of a judged scorer's metric: bind its judges with `judges = { NAME = \"JUDGE\" }`".into(),
            ));
        }
        let source = match (&c.labelled, c.sensitivity, c.specificity) {
            (Some(path), None, None) => {
                let path = self.resolve(&format!("{key}.labelled"), path)?;
                let items = crate::judge::calibration::read_labelled(&path)
                    .map_err(|e| at(&format!("{key}.labelled"), e.to_string()))?;
                CalibrationSource::Labelled {
                    path,
                    items,
                    expected_behavior: c.expected_behavior.clone(),
                }
            }
            (None, Some(se), Some(sp)) => {
                if !((0.0..=1.0).contains(&se) && (0.0..=1.0).contains(&sp)) || se + sp <= 1.0 {
                    return Err(at(
                        key,
                        format!(
                            "sensitivity {se} and specificity {sp}: each in [0, 1], and together above 1 (a judge no better than chance corrects nothing)"
                        ),
                    ));
                }
                if c.expected_behavior.is_some() {
                    return Err(at(
                        &format!("{key}.expected_behavior"),
                        "a setting of a labelled calibration (`labelled = \"FILE.jsonl\"`)".into(),
                    ));
                }
                CalibrationSource::Stated {
                    sensitivity: se,
                    specificity: sp,
                }
            }
            _ => {
                return Err(at(
                    key,
                    "give either `labelled = \"FILE.jsonl\"` (measured in the run) or both `sensitivity` and `specificity` (known)".into(),
                ));
            }
        };
        Ok(CalibrationPlan {
            metric: c.metric.clone(),
            source,
        })
    }

    /// Every `[judges.NAME]`: its executor, model, device and adapter
    /// checked as a side's are; what only a side has (a transformation,
    /// generation settings: a judge answers greedily, with the request's
    /// own system message) refused by name.
    fn judges(&self) -> anyhow::Result<std::collections::BTreeMap<String, JudgePlan>> {
        let mut out = std::collections::BTreeMap::new();
        for (name, s) in &self.config.judges {
            let key = format!("judges.{name}");
            let at = |k: &str, e: String| self.at(k, e);
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
            if !valid {
                return Err(at(
                    &key,
                    "a judge's name is 1-64 letters, digits, '-' and '_'".into(),
                ));
            }
            let side_only = [
                ("label", s.label.is_some()),
                ("transform", s.transform.is_some()),
                ("system", s.system.is_some()),
                ("temperature", s.temperature.is_some()),
                ("top_p", s.top_p.is_some()),
                ("top_k", s.top_k.is_some()),
                ("seed", s.seed.is_some()),
                ("max_tokens", s.max_tokens.is_some()),
                ("stop", s.stop.is_some()),
                ("primitive", s.primitive.is_some()),
            ];
            if let Some((k, _)) = side_only.iter().find(|(_, on)| *on) {
                return Err(at(
                    &format!("{key}.{k}"),
                    format!(
                        "`{k}` is a setting of a compared side, not of a judge: a judge answers greedily, and each request carries its own system message"
                    ),
                ));
            }
            let backend = self.executor(&key, s)?;
            if backend == ExecutorKind::Replay {
                return Err(at(
                    &format!("{key}.executor"),
                    "a judge is a model vauban runs or an endpoint (candle, torch, mlx or http); a recorded judge is replayed from its answers by `vauban diff` and `vauban plugin test --judges`".into(),
                ));
            }
            let resolve = |k: &str, p: &Path| self.resolve(k, p);
            let http = http_spec(s, backend, &key, &resolve, &at)?;
            let (_, kv_cache, dtype) = self.executor_settings(&key, s)?;
            let remote = backend == ExecutorKind::Http;
            let model = match remote || self.replay {
                true => s.model.clone(),
                false => resolve(&format!("{key}.model"), &s.model)?,
            };
            if !remote && !self.replay && !model.exists() {
                return Err(at(
                    &format!("{key}.model"),
                    format!(
                        "{} does not exist (a .gguf file or an HF folder)",
                        model.display()
                    ),
                ));
            }
            let device: DeviceSpec = s
                .device
                .parse()
                .map_err(|e: String| at(&format!("{key}.device"), e))?;
            if !remote && !self.replay {
                match backend {
                    ExecutorKind::Torch => crate::executor::check_torch_device(device),
                    ExecutorKind::Mlx => crate::executor::check_mlx_device(device),
                    _ => crate::executor::check_device(device),
                }
                .map_err(|e| at(&format!("{key}.device"), e))?;
            }
            let adapter = self.adapter(&key, s, &model, remote)?;
            out.insert(
                name.clone(),
                JudgePlan {
                    name: name.clone(),
                    backend,
                    model,
                    device,
                    weights: s.weights,
                    kv_cache,
                    dtype,
                    adapter,
                    http,
                },
            );
        }
        Ok(out)
    }

    /// Every gate bounds its metric, and names a category the suite has.
    fn gates(&self, suite: &Suite) -> anyhow::Result<()> {
        let config = self.config;
        let at = |key: &str, e: String| self.at(key, e);
        for (i, g) in config.gates.iter().enumerate() {
            if g.min_delta.is_none() && g.max_delta.is_none() {
                return Err(at(
                    &format!("gates[{i}]"),
                    "a gate needs `min_delta`, `max_delta` or both".into(),
                ));
            }
            if let Some(c) = &g.category
                && !suite.categories().contains(c.as_str())
            {
                return Err(at(
                    &format!("gates[{i}].category"),
                    format!(
                        "no prompt of the suite has category `{c}` (categories: {})",
                        suite
                            .categories()
                            .into_iter()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The sentence for a requested strength above what the evidence allows.
pub fn claim_gap(wanted: ClaimStrength, best: ClaimStrength, what: &str) -> String {
    format!(
        "report.claim_strength asks for {wanted}, but {what} {best}; {wanted} needs {}",
        wanted.needs()
    )
}

type Resolve<'a> = dyn Fn(&str, &Path) -> anyhow::Result<PathBuf> + 'a;
type At<'a> = dyn Fn(&str, String) -> anyhow::Error + 'a;

fn direction_ref(
    raw: &str,
    key: &str,
    resolve: &Resolve<'_>,
    at: &At<'_>,
    has_measure: bool,
    replay: bool,
) -> anyhow::Result<DirectionRef> {
    if raw == "measured" {
        if !has_measure {
            return Err(at(
                key,
                "`measured` names the `[measure]` section's output, but the config has no `[measure]`"
                    .into(),
            ));
        }
        return Ok(DirectionRef::Measured);
    }
    let p = resolve(key, Path::new(raw))?;
    if !replay && !p.is_file() {
        return Err(at(
            key,
            format!(
                "{} does not exist (compute one with `vauban measure`, or write `measured` with a `[measure]` section)",
                p.display()
            ),
        ));
    }
    Ok(DirectionRef::File(p))
}

/// How a config names a direction file's tensor, for errors.
pub const PICK_IN_CONFIG: &str = "`tensor = \"NAME\"` in the transform table";

/// The largest steering or ablation coefficient a config may give.
pub const MAX_ALPHA: f32 = 1e4;
/// The most new tokens per prompt, whatever the model's context.
pub const MAX_NEW_TOKENS: usize = 131_072;

/// The `[observe]` values `run` could not honour, refused with their key.
/// The most tokens `observe.top_logprobs` may keep per position.
pub const MAX_TOP_LOGPROBS: usize = 4096;

fn check_observe(o: &crate::config::file::ObserveSection, at: &At<'_>) -> anyhow::Result<()> {
    if !(1..=MAX_TOP_LOGPROBS).contains(&o.top_logprobs) {
        return Err(at(
            "observe.top_logprobs",
            format!(
                "{} is outside 1..={MAX_TOP_LOGPROBS}: the KL needs at least the most likely token, and each kept token costs 8 bytes per position in the traces",
                o.top_logprobs
            ),
        ));
    }
    if !(1..=MAX_SAMPLES).contains(&o.samples) {
        return Err(at(
            "observe.samples",
            format!("{} is outside 1..={MAX_SAMPLES}", o.samples),
        ));
    }
    Ok(())
}

/// Most generations per prompt and side (`observe.samples`).
pub const MAX_SAMPLES: usize = 1000;

/// How one side generates: `observe`'s keys, each overridden by the side's
/// own (`[baseline]`/`[candidate]`), checked with the key that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationSettings {
    /// 0 is greedy.
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: Option<usize>,
    /// The first sample's seed; sample k uses `seed + k`.
    pub seed: u64,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Generations per prompt: `observe.samples` when sampling, 1 when
    /// greedy (every sample would be the same).
    pub samples: usize,
}

impl GenerationSettings {
    /// The side's generation settings, checked.
    pub fn resolve(
        o: &crate::config::file::ObserveSection,
        side: &crate::config::file::ModelSection,
        key: &str,
        at: &At<'_>,
    ) -> anyhow::Result<GenerationSettings> {
        // The key a value came from: the side's when it sets it.
        let from = |name: &str, own: bool| match own {
            true => format!("{key}.{name}"),
            false => format!("observe.{name}"),
        };
        let temperature = side.temperature.unwrap_or(o.temperature);
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(at(
                &from("temperature", side.temperature.is_some()),
                format!(
                    "{temperature} is not a temperature: give 0 (greedy) or a finite positive number"
                ),
            ));
        }
        let top_p = side.top_p.unwrap_or(o.top_p);
        if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
            return Err(at(
                &from("top_p", side.top_p.is_some()),
                format!("{top_p} is outside (0, 1]"),
            ));
        }
        let top_k = side.top_k.or(o.top_k);
        if top_k == Some(0) {
            return Err(at(
                &from("top_k", side.top_k.is_some()),
                "0 keeps no token; give at least 1, or leave it out".into(),
            ));
        }
        let max_tokens = side.max_tokens.unwrap_or(o.max_tokens);
        let max_key = from("max_tokens", side.max_tokens.is_some());
        if max_tokens == 0 {
            return Err(at(
                &max_key,
                "0 generates nothing, so no metric has data; give at least 1".into(),
            ));
        }
        if max_tokens > MAX_NEW_TOKENS {
            return Err(at(
                &max_key,
                format!("{max_tokens} is over the limit of {MAX_NEW_TOKENS}"),
            ));
        }
        let stop = side.stop.clone().unwrap_or_else(|| o.stop.clone());
        if let Some(i) = stop.iter().position(String::is_empty) {
            return Err(at(
                &format!("{}[{i}]", from("stop", side.stop.is_some())),
                "an empty stop string would stop before the first token; remove it".into(),
            ));
        }
        Ok(GenerationSettings {
            temperature,
            top_p,
            top_k,
            seed: side.seed.unwrap_or(o.seed),
            max_tokens,
            stop,
            samples: if temperature == 0.0 { 1 } else { o.samples },
        })
    }
}

/// What of a side's config depends on its model's shape.
struct ModelCheck<'a> {
    config: &'a crate::config::file::ConfigFile,
    model: &'a Path,
    side: SideName,
    transform: Option<&'a TransformPlan>,
    /// Whether `[measure]` runs on this side's model (the baseline).
    measures: bool,
}

impl ModelCheck<'_> {
    /// Layers and lengths checked against the model's shape (read from its
    /// header or config.json, without the weights). An error for what `run`
    /// would refuse; a warning for what it would do short of the config.
    fn against(
        &self,
        shape: &crate::model::config::ModelConfig,
        at: &At<'_>,
    ) -> anyhow::Result<Option<String>> {
        let (config, key) = (self.config, self.side.as_str());
        let depth = shape.layers;
        let out_of_range = |field: String, layer: usize| {
            at(
                &field,
                format!(
                    "layer {layer} is out of range: {} has {depth} layers (0-{})",
                    self.model.display(),
                    depth.saturating_sub(1)
                ),
            )
        };
        if let Some(&l) = config.observe.layers.iter().find(|&&l| l >= depth) {
            return Err(out_of_range("observe.layers".into(), l));
        }
        if let Some(t) = self.transform {
            if let Some(&l) = t.layers.iter().find(|&&l| l >= depth) {
                return Err(out_of_range(format!("{key}.transform.layers"), l));
            }
            if let Some((i, spec)) = t
                .interventions
                .iter()
                .enumerate()
                .find(|(_, spec)| spec.layer >= depth)
            {
                return Err(out_of_range(
                    format!("{key}.transform.interventions[{i}]"),
                    spec.layer,
                ));
            }
            self.directions(t, shape, at)?;
            if t.kind == TransformKind::Orthogonalize
                && let Some(why) = shape.weight_edit_limitation()
            {
                return Ok(Some(format!("{key}.transform (orthogonalize): {why}")));
            }
        }
        if let Some(m) = config.measure.as_ref().filter(|_| self.measures) {
            if let Some(&l) = m.layers.iter().find(|&&l| l >= depth) {
                return Err(out_of_range("measure.layers".into(), l));
            }
            if let Some(l) = m.layer.filter(|&l| l >= depth) {
                return Err(out_of_range("measure.layer".into(), l));
            }
        }
        let max_tokens = match self.side {
            SideName::Baseline => config.baseline.max_tokens,
            SideName::Candidate => config.candidate.max_tokens,
        }
        .unwrap_or(config.observe.max_tokens);
        if let Some(ctx) = shape.context_length
            && max_tokens >= ctx
        {
            return Ok(Some(format!(
                "max_tokens: {} new tokens do not fit {}'s context of {ctx} positions; generation stops when the context is full",
                max_tokens,
                self.model.display()
            )));
        }
        Ok(None)
    }

    /// Every direction file the transformation reads, read as `run` reads
    /// it (the tensor and row each layer takes) and checked against the
    /// model's width: a file that is missing, unreadable, lacks the tensor
    /// or has the wrong width is refused at its key. Direction files are
    /// small (one row or one per layer), so this costs milliseconds.
    fn directions(
        &self,
        t: &TransformPlan,
        shape: &crate::model::config::ModelConfig,
        at: &At<'_>,
    ) -> anyhow::Result<()> {
        let key = self.side.as_str();
        let width_error = |file: &Path, width: usize| {
            format!(
                "{} has width {width} but {} has hidden size {}; measure the direction on this model",
                file.display(),
                self.model.display(),
                shape.hidden
            )
        };
        if let Some(DirectionRef::File(file)) = &t.direction {
            let field = format!("{key}.transform.direction");
            let layers: Vec<usize> = match t.layers.is_empty() {
                true => (0..shape.layers).collect(),
                false => t.layers.clone(),
            };
            for layer in layers {
                let d = crate::intervene::load_direction(file, t.tensor.as_deref(), None, layer)
                    .map_err(|e| at(&field, e.picked_with(PICK_IN_CONFIG).to_string()))?;
                if d.width() != shape.hidden {
                    return Err(at(&field, width_error(file, d.width())));
                }
                // Ablating, orthogonalizing and steering each take one
                // vector per layer; a matrix (a basis, or `vauban measure`'s
                // `per_layer`) is refused here rather than at load.
                if d.rows() != 1 {
                    return Err(at(
                        &field,
                        format!(
                            "{} (tensor {}) holds {} rows, and a transform takes one vector per layer; name a one-row tensor with `tensor` (`direction` in a file `vauban measure` wrote)",
                            file.display(),
                            d.tensor,
                            d.rows()
                        ),
                    ));
                }
                // Only a control vector (`direction.L`) differs by layer;
                // any other tensor is the same for all, so once is enough.
                if d.tensor != format!("direction.{layer}") {
                    break;
                }
            }
        }
        for (i, spec) in t.interventions.iter().enumerate() {
            let field = format!("{key}.transform.interventions[{i}]");
            let d = crate::intervene::load_direction(
                &spec.direction,
                spec.tensor.as_deref(),
                spec.row,
                spec.layer,
            )
            .map_err(|e| at(&field, e.to_string()))?;
            if d.width() != shape.hidden {
                return Err(at(&field, width_error(&spec.direction, d.width())));
            }
        }
        Ok(())
    }
}

fn transform(
    t: &TransformSection,
    key: &str,
    resolve: &Resolve<'_>,
    at: &At<'_>,
    has_measure: bool,
    replay: bool,
) -> anyhow::Result<TransformPlan> {
    let direction = match (&t.direction, t.kind) {
        (Some(d), TransformKind::Ablate | TransformKind::Orthogonalize | TransformKind::Steer) => {
            Some(direction_ref(
                d,
                &format!("{key}.direction"),
                resolve,
                at,
                has_measure,
                replay,
            )?)
        }
        (None, TransformKind::Ablate | TransformKind::Orthogonalize | TransformKind::Steer) => {
            return Err(at(
                key,
                format!(
                    "kind `{}` needs `direction` (a file, or `measured`)",
                    t.kind.as_str()
                ),
            ));
        }
        (Some(_), TransformKind::Intervene) => {
            return Err(at(
                &format!("{key}.direction"),
                "kind `intervene` takes its directions inside `interventions`".into(),
            ));
        }
        (None, TransformKind::Intervene) => None,
    };
    if t.kind == TransformKind::Steer && t.layers.is_empty() {
        // Adding a direction after every block compounds it through the
        // whole stack; steering is a choice of block, so it is named.
        return Err(at(
            &format!("{key}.layers"),
            "kind `steer` needs `layers`: the blocks after which the direction is added (usually one, e.g. the layer `vauban measure` chose)".into(),
        ));
    }
    if !(t.alpha.is_finite() && t.alpha.abs() <= MAX_ALPHA) {
        return Err(at(
            &format!("{key}.alpha"),
            format!(
                "{} is outside [-{MAX_ALPHA}, {MAX_ALPHA}]: a larger coefficient overflows the residual stream",
                t.alpha
            ),
        ));
    }
    let interventions = match t.kind {
        TransformKind::Intervene => {
            if t.interventions.is_empty() {
                return Err(at(
                    key,
                    "kind `intervene` needs `interventions = [\"layer=L,mode=MODE,direction=FILE\"]`"
                        .into(),
                ));
            }
            t.interventions
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut spec: crate::intervene::InterventionSpec = s
                        .parse()
                        .map_err(|e| at(&format!("{key}.interventions[{i}]"), format!("{e}")))?;
                    spec.direction =
                        resolve(&format!("{key}.interventions[{i}]"), &spec.direction)?;
                    Ok(spec)
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        }
        _ => {
            if !t.interventions.is_empty() {
                return Err(at(
                    &format!("{key}.interventions"),
                    format!(
                        "only kind `intervene` takes interventions, not `{}`",
                        t.kind.as_str()
                    ),
                ));
            }
            Vec::new()
        }
    };
    Ok(TransformPlan {
        kind: t.kind,
        direction,
        tensor: t.tensor.clone(),
        layers: t.layers.clone(),
        alpha: t.alpha,
        interventions,
    })
}

/// The endpoint of an `executor = "http"` side, checked; the http keys
/// on any other side are an error naming the key.
fn http_spec(
    s: &ModelSection,
    backend: ExecutorKind,
    key: &str,
    resolve: &dyn Fn(&str, &Path) -> anyhow::Result<PathBuf>,
    at: &dyn Fn(&str, String) -> anyhow::Error,
) -> anyhow::Result<Option<crate::executor::http::HttpSpec>> {
    let set = [
        ("url", s.url.is_some()),
        ("api_key_env", s.api_key_env.is_some()),
        ("concurrency", s.concurrency.is_some()),
        ("requests_per_second", s.requests_per_second.is_some()),
        ("timeout_s", s.timeout_s.is_some()),
        ("retries", s.retries.is_some()),
        ("tokenizer", s.tokenizer.is_some()),
    ];
    if backend != ExecutorKind::Http {
        return match set.iter().find(|(_, on)| *on) {
            Some((k, _)) => Err(at(
                &format!("{key}.{k}"),
                format!(
                    "`{k}` is a setting of executor = \"http\", and this side's executor is `{}`",
                    s.executor
                ),
            )),
            None => Ok(None),
        };
    }
    let Some(url) = &s.url else {
        return Err(at(
            &format!("{key}.url"),
            "executor = \"http\" needs the endpoint's base URL, e.g. url = \"http://127.0.0.1:8080/v1\"".into(),
        ));
    };
    // `${VAR:-default}` as in paths, so a CI job can point a config at its
    // endpoint without editing it.
    let url = crate::config::file::expand(url).map_err(|e| at(&format!("{key}.url"), e))?;
    let mut spec = crate::executor::http::HttpSpec::new(&url, &s.model.to_string_lossy());
    spec.base_url().map_err(|e| at(&format!("{key}.url"), e))?;
    if spec.model.is_empty() {
        return Err(at(
            &format!("{key}.model"),
            "the name of the model the endpoint serves (its `/v1/models` lists them)".into(),
        ));
    }
    if let Some(env) = &s.api_key_env {
        let valid = !env.is_empty()
            && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !env.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(at(
                &format!("{key}.api_key_env"),
                format!(
                    "`{env}` is not an environment variable's name: name the variable that holds the key (e.g. OPENAI_API_KEY), never the key itself"
                ),
            ));
        }
        spec.api_key_env = Some(env.clone());
    }
    if let Some(n) = s.concurrency {
        if n == 0 {
            return Err(at(
                &format!("{key}.concurrency"),
                "0: at least 1 request must be in flight".into(),
            ));
        }
        spec.concurrency = n;
    }
    if let Some(r) = s.requests_per_second {
        if !(r.is_finite() && r > 0.0) {
            return Err(at(
                &format!("{key}.requests_per_second"),
                format!("{r}: a positive number of requests per second"),
            ));
        }
        spec.requests_per_second = Some(r);
    }
    if let Some(t) = s.timeout_s {
        if !(t.is_finite() && t > 0.0) {
            return Err(at(
                &format!("{key}.timeout_s"),
                format!("{t}: a positive number of seconds"),
            ));
        }
        spec.timeout = std::time::Duration::from_secs_f64(t);
    }
    if let Some(r) = s.retries {
        spec.retries = r;
    }
    if let Some(t) = &s.tokenizer {
        let p = resolve(&format!("{key}.tokenizer"), t)?;
        if !p.exists() {
            return Err(at(
                &format!("{key}.tokenizer"),
                format!(
                    "{} does not exist (a .gguf file, an HF folder or a tokenizer.json)",
                    p.display()
                ),
            ));
        }
        spec.tokenizer = Some(p);
    }
    Ok(Some(spec))
}

/// `a, b` or `none`.
fn names_or_none<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    match v.is_empty() {
        true => "none".into(),
        false => v.join(", "),
    }
}
