//! The run config as written (TOML), with errors that point at the file,
//! line and key, and suggest the nearest valid key for a typo.
//!
//! Paths in the file are relative to the file's folder; `~/` and
//! `${VAR}` / `${VAR:-default}` are expanded (so a config can name
//! `${VAUBAN_MODELS:-~/.cache/vauban/models}/…`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::suite::Prompt;
use crate::model::{Dtype, KvType, PrimitivePath, WeightMode};

/// The whole config file.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Where reports and traces go (relative to the config file).
    pub output: PathBuf,
    /// Seeds the bootstrap, the permutation tests and plugin sandboxes.
    #[serde(default)]
    pub seed: u64,
    pub suite: SuiteSection,
    #[serde(default)]
    pub observe: ObserveSection,
    pub baseline: ModelSection,
    pub candidate: ModelSection,
    /// Measures a refusal direction before the run (`vauban measure`).
    #[serde(default)]
    pub measure: Option<MeasureSection>,
    /// Judges judged scorers may ask, by name: a model any executor runs
    /// (a local file on candle, torch or MLX, or an OpenAI-compatible
    /// endpoint), answering at temperature 0 (issue 37, docs/judges.md).
    #[serde(default)]
    pub judges: BTreeMap<String, ModelSection>,
    #[serde(default)]
    pub scorers: Vec<PluginSection>,
    #[serde(default)]
    pub claim_mappers: Vec<PluginSection>,
    #[serde(default)]
    pub gates: Vec<GateSection>,
    #[serde(default)]
    pub report: ReportSection,
}

/// The prompts: a file, or inline.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuiteSection {
    /// A `.jsonl` or `.toml` suite file.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub prompts: Vec<Prompt>,
}

/// What to record of each run.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveSection {
    /// Record per-token log-probabilities (and logits) of the prompt and the
    /// completion's tokens; enables the distributional diff and KL.
    #[serde(default)]
    pub logprobs: bool,
    /// With `logprobs`: the baseline's most likely tokens kept at each
    /// generated position, and scored under the candidate. The KL is
    /// computed over these tokens plus one bucket for the rest of the
    /// vocabulary (a lower bound of the full KL; the report gives the
    /// baseline's mass outside them).
    #[serde(default = "default_top_logprobs")]
    pub top_logprobs: usize,
    /// Blocks whose residual stream is recorded (activation evidence).
    #[serde(default)]
    pub layers: Vec<usize>,
    /// Keep raw tensors (needed for activation findings), not only summaries.
    #[serde(default)]
    pub raw_tensors: bool,
    /// Record the observed blocks' weights (weight evidence).
    #[serde(default)]
    pub weights: bool,
    /// New tokens per prompt.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// `chat` (the model's template) or `raw`.
    #[serde(default)]
    pub prompt_form: PromptFormName,
    #[serde(default)]
    pub system: Option<String>,
    /// 0 is greedy.
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "one")]
    pub top_p: f32,
    #[serde(default)]
    pub top_k: Option<usize>,
    /// The sampling seed.
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub stop: Vec<String>,
    /// Generations per prompt and side (with sampling on): seeds `seed`,
    /// `seed + 1`, …; each metric is averaged over a prompt's samples
    /// before the paired statistics, and the report shows each prompt's
    /// spread. A greedy side is recorded once (its samples would be equal).
    #[serde(default = "one_sample")]
    pub samples: usize,
}

fn one_sample() -> usize {
    1
}

fn default_max_tokens() -> usize {
    crate::executor::generate::DEFAULT_MAX_TOKENS
}
fn default_top_logprobs() -> usize {
    1024
}
fn one() -> f32 {
    1.0
}

impl Default for ObserveSection {
    fn default() -> Self {
        ObserveSection {
            logprobs: false,
            top_logprobs: default_top_logprobs(),
            layers: Vec::new(),
            raw_tensors: false,
            weights: false,
            max_tokens: default_max_tokens(),
            prompt_form: PromptFormName::Chat,
            system: None,
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            seed: 0,
            stop: Vec::new(),
            samples: 1,
        }
    }
}

/// How prompt text becomes tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptFormName {
    #[default]
    Chat,
    Raw,
}

/// One side of the comparison.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A `.gguf` file or an HF folder.
    pub model: PathBuf,
    /// The name the report uses (default: the file name).
    #[serde(default)]
    pub label: Option<String>,
    /// Who serves this side: `candle` (the default), `torch`, `mlx`,
    /// `http` or `replay`.
    #[serde(default)]
    pub executor: ExecutorKind,
    /// `executor = "http"`: the endpoint's base URL as OpenAI clients take
    /// it (`http://127.0.0.1:8080/v1`; a bare host gets `/v1`); `${VAR}`
    /// and `${VAR:-default}` are expanded.
    #[serde(default)]
    pub url: Option<String>,
    /// `executor = "http"`: the environment variable holding the API key
    /// (the key itself is never written to a config, trace or report).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// `executor = "http"`: requests in flight at once (default 4).
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// `executor = "http"`: at most this many requests started per second
    /// (default: no limit).
    #[serde(default)]
    pub requests_per_second: Option<f64>,
    /// `executor = "http"`: seconds one attempt may take (default 120).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// `executor = "http"`: attempts after the first on a refused or reset
    /// connection, a timeout, a 5xx or a 429, with exponential backoff and
    /// jitter (default 4).
    #[serde(default)]
    pub retries: Option<u32>,
    /// `executor = "http"`: the tokenizer of the served model (a `.gguf`,
    /// an HF folder or a `tokenizer.json`). It names the vocabulary the
    /// server's token ids index, which the next-token KL against another
    /// side needs; the ids the server returns are checked against it.
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// `executor = "candle"`, `"torch"` or `"mlx"`: prompts traced
    /// together in one batched pass (default 8; 1 traces them one at a
    /// time). A batch shares each weight read among its sequences; each
    /// trace records what it would alone.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub batch: Option<usize>,
    /// `executor = "candle"`: how the KV cache stores keys and values:
    /// `f32` (as computed, the default) or `f16` (half the memory and half
    /// the bytes each decode step reads, every key and value rounded to
    /// f16; a trace records which).
    #[serde(default)]
    pub kv_cache: Option<KvType>,
    /// `executor = "candle"`: how the activation primitive runs on CPU
    /// activations: `fused` (vauban-kernels' one pass per token, the
    /// default) or `tensor` (candle's tensor operations, the reference
    /// path it is checked against). The intervene span's `primitive` note
    /// records which ran.
    #[serde(default)]
    pub primitive: Option<PrimitivePath>,
    /// `executor = "torch"`: the dtype of the weights and activations:
    /// `f32` (the default), `bf16` or `f16` (for a GPU; norms and the
    /// softmax are computed in f32 whatever it is). `executor = "mlx"`
    /// runs `f32` only.
    #[serde(default)]
    pub dtype: Option<Dtype>,
    /// `cpu`, `cuda`, `cuda:N`, `metal` (candle, mlx), `mps` (torch).
    #[serde(default = "cpu")]
    pub device: String,
    /// `native` (as the file stores them, the default) or `f32`
    /// (dequantized at load).
    #[serde(default)]
    pub weights: WeightMode,
    /// A LoRA adapter applied on top of `model` (candle, torch, mlx): a
    /// PEFT adapter folder or a llama.cpp LoRA `.gguf`, as `vauban model
    /// lora` and `vauban model orthogonalize --lora` write them. Its shapes
    /// and targets are checked against the model when the config is.
    #[serde(default)]
    pub adapter: Option<PathBuf>,
    /// This side's system message (overrides `observe.system`).
    #[serde(default)]
    pub system: Option<String>,
    /// This side's sampling temperature (overrides `observe.temperature`):
    /// a greedy-versus-sampled or a temperature change is a candidate too.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Overrides `observe.top_p`.
    #[serde(default)]
    pub top_p: Option<f32>,
    /// Overrides `observe.top_k`.
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Overrides `observe.seed`.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Overrides `observe.max_tokens`.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Overrides `observe.stop`.
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// A change the host applies to the loaded model.
    #[serde(default)]
    pub transform: Option<TransformSection>,
}

fn cpu() -> String {
    "cpu".into()
}

/// Who serves a side's traces (`executor` in a side's section).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// The embedded model, run by vauban on candle on the configured device.
    #[default]
    Candle,
    /// The same model run by libtorch (a build with `--features torch`).
    Torch,
    /// The same model run by MLX (a build with `--features mlx`).
    Mlx,
    /// An OpenAI-compatible endpoint; `model` is then the model name it
    /// serves.
    Http,
    /// A recorded bundle (`model` names it; `vauban diff` replays both
    /// sides).
    Replay,
}

impl ExecutorKind {
    /// The name a config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Candle => "candle",
            ExecutorKind::Torch => "torch",
            ExecutorKind::Mlx => "mlx",
            ExecutorKind::Http => "http",
            ExecutorKind::Replay => "replay",
        }
    }
}

impl std::fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host-applied transformation of one side's model.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformSection {
    pub kind: TransformKind,
    /// The direction file (`ablate`, `orthogonalize`, `steer`); `measured`
    /// names the `[measure]` section's output.
    #[serde(default)]
    pub direction: Option<String>,
    /// The tensor in the direction file (default: `direction`, or the file's only tensor).
    #[serde(default)]
    pub tensor: Option<String>,
    /// Blocks to act on (default: all; `steer` needs them named).
    #[serde(default)]
    pub layers: Vec<usize>,
    /// Scale of the removal (`ablate`) or of the added direction (`steer`).
    #[serde(default = "one")]
    pub alpha: f32,
    /// Intervention specs (`intervene`), as `--intervene` takes them.
    #[serde(default)]
    pub interventions: Vec<String>,
}

/// What a transformation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransformKind {
    /// Remove the direction's component from the residual stream after
    /// every listed block, in prefill and every decode step (activations).
    Ablate,
    /// Orthogonalize the weights writing into the residual stream against
    /// the direction (`W ← W − r̂(r̂ᵀW)`), in memory.
    Orthogonalize,
    /// Add the direction, as the file holds it (not normalised), times
    /// `alpha` to the residual stream after every listed block, in prefill
    /// and every decode step (activation addition).
    Steer,
    /// Explicit activation interventions.
    Intervene,
}

impl TransformKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransformKind::Ablate => "ablate",
            TransformKind::Orthogonalize => "orthogonalize",
            TransformKind::Steer => "steer",
            TransformKind::Intervene => "intervene",
        }
    }
}

/// The `[measure]` stage: a refusal direction from two prompt sets.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasureSection {
    pub harmful: PathBuf,
    pub harmless: PathBuf,
    /// Where the direction is saved (relative to the output folder).
    #[serde(default = "direction_file")]
    pub out: PathBuf,
    /// Held-out fraction of each set for layer selection.
    #[serde(default)]
    pub holdout: Option<f64>,
    /// Largest mean KL on held-out harmless prompts a chosen layer may cause.
    #[serde(default)]
    pub max_kl: Option<f64>,
    /// Candidate layers (default: the measure command's default).
    #[serde(default)]
    pub layers: Vec<usize>,
    /// Use this layer's direction, no selection.
    #[serde(default)]
    pub layer: Option<usize>,
}

fn direction_file() -> PathBuf {
    PathBuf::from("refusal_direction.safetensors")
}

/// A plugin, by first-party name or by path, with its config and grants.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    /// A first-party plugin's name (`refusal`, `behavior`, `logprob`,
    /// `claims-default`).
    #[serde(default)]
    pub plugin: Option<String>,
    /// A component file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The plugin's own config, passed as JSON.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub config: Option<toml::Table>,
    /// A folder the plugin may read, mounted read-only at `/data`.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    #[serde(default)]
    pub memory_mib: Option<u64>,
    /// A judged scorer's judges: the name it asks by → a `[judges.NAME]`
    /// of the config (`judges = { judge = "referee" }`).
    #[serde(default)]
    pub judges: BTreeMap<String, String>,
    /// What a judged scorer may spend on its judges in one run.
    #[serde(default)]
    pub judge_budget: Option<JudgeBudgetSection>,
    /// A judged scorer's accuracy on one of its 0/1 metrics, for the
    /// report's corrected rate: measured in the run on a labelled set, or
    /// stated.
    #[serde(default)]
    pub calibration: Option<CalibrationSection>,
}

/// How accurate a judged scorer's 0/1 metric is: `labelled` (a JSON Lines
/// file of replies with known answers, scored by the scorer and its judge
/// in the run), or `sensitivity` and `specificity` as known numbers.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalibrationSection {
    /// The metric it calibrates (`judged_refusal_rate`).
    pub metric: String,
    /// Labelled replies (`{"id", "request", "reply", "positive"}` per
    /// line, at least 5 of each label; docs/judges.md).
    #[serde(default)]
    pub labelled: Option<PathBuf>,
    /// The expected behaviour each labelled request carries for the scorer
    /// (`comply`: harmless requests, which an over-refusal scorer scores).
    #[serde(default)]
    pub expected_behavior: Option<String>,
    /// Known sensitivity, in [0, 1].
    #[serde(default)]
    pub sensitivity: Option<f64>,
    /// Known specificity, in [0, 1].
    #[serde(default)]
    pub specificity: Option<f64>,
}

/// A judged scorer's budget, per run (both sides together). A request
/// beyond it is refused to the scorer, which scores without it.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeBudgetSection {
    /// Requests, answered or read from the record (default 10000).
    #[serde(default)]
    pub requests: Option<u64>,
    /// Prompt and answer tokens together (default 4000000).
    #[serde(default)]
    pub tokens: Option<u64>,
    /// Bytes of one request's prompt (default 65536).
    #[serde(default)]
    pub prompt_bytes: Option<usize>,
}

/// A regression gate on one metric's delta.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateSection {
    #[serde(default)]
    pub name: Option<String>,
    pub metric: String,
    /// One category's delta (default: over all prompts).
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub min_delta: Option<f64>,
    #[serde(default)]
    pub max_delta: Option<f64>,
    #[serde(default)]
    pub severity: Severity,
}

pub use vauban_format::document::Severity;

/// How the report reads.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportSection {
    #[serde(default = "default_title")]
    pub title: String,
    #[serde(default)]
    pub target_change: Option<String>,
    #[serde(default)]
    pub transformation_kind: Option<String>,
    #[serde(default)]
    pub transformation_summary: Option<String>,
    /// The claim strength the user hopes for; the report says whether the
    /// evidence reaches it.
    #[serde(default)]
    pub claim_strength: Option<crate::report::ClaimStrength>,
    /// Show model outputs in the examples.
    #[serde(default = "yes")]
    pub record_outputs: bool,
    #[serde(default = "default_examples")]
    pub max_examples: usize,
    /// Of `json`, `md`, `html`.
    #[serde(default = "all_formats")]
    pub formats: Vec<Format>,
    /// The direction activation findings project onto (default: the
    /// candidate's transformation direction).
    #[serde(default)]
    pub direction: Option<String>,
    #[serde(default)]
    pub direction_tensor: Option<String>,
    /// How the deltas' p-values are adjusted for being tested together:
    /// `holm` (family-wise error, the default), `benjamini_hochberg` (false
    /// discovery rate) or `none`.
    #[serde(default)]
    pub multiple_comparisons: crate::report::document::Adjustment,
}

fn default_title() -> String {
    "Model Behavior Change Report".into()
}
fn yes() -> bool {
    true
}
fn default_examples() -> usize {
    6
}
fn all_formats() -> Vec<Format> {
    vec![Format::Json, Format::Md, Format::Html]
}

impl Default for ReportSection {
    fn default() -> Self {
        ReportSection {
            title: default_title(),
            target_change: None,
            transformation_kind: None,
            transformation_summary: None,
            claim_strength: None,
            record_outputs: true,
            max_examples: default_examples(),
            formats: all_formats(),
            direction: None,
            direction_tensor: None,
            multiple_comparisons: Default::default(),
        }
    }
}

/// A report file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Json,
    Md,
    Html,
}

/// A config file that cannot be read or parsed, pointing at the place.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `{path}:{line}:{column}: message`, the offending line, and a hint.
    #[error("{path}:{line}:{column}: {message}\n{snippet}{hint}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        snippet: String,
        hint: String,
    },
    /// A value that parses but cannot be used.
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// Parses `text` (read from `path`, used in messages).
pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
    let error = |e: toml::de::Error, key: Option<String>| {
        let (line, column, snippet) = match e.span() {
            Some(span) => locate(text, span.start),
            None => (1, 1, String::new()),
        };
        let message = e.message().trim().to_owned();
        ConfigError::Parse {
            path: path.to_owned(),
            line,
            column,
            hint: hint(&message),
            // The key whose value is wrong (`baseline.kv_cache: unknown
            // variant ...`); an unknown key names itself.
            message: match key {
                Some(key) if !message.starts_with("unknown field") => format!("{key}: {message}"),
                _ => message,
            },
            snippet,
        }
    };
    let document = toml::Deserializer::parse(text).map_err(|e| error(e, None))?;
    serde_path_to_error::deserialize(document).map_err(|e| {
        let key = e.path().to_string();
        error(e.into_inner(), (key != ".").then_some(key))
    })
}

/// Reads and parses a config file.
/// The largest config file read.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

pub fn read(path: &Path) -> Result<(ConfigFile, String), ConfigError> {
    let text = crate::input::read_text(path, MAX_CONFIG_BYTES).map_err(|e| ConfigError::Read {
        path: path.to_owned(),
        source: crate::input::io_error(e),
    })?;
    Ok((parse(path, &text)?, text))
}

/// 1-based line and column of a byte offset, and the line with a caret.
fn locate(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[start..].chars().count() + 1;
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let src = &text[start..end];
    let snippet = format!(
        "  {line:>4} | {src}\n       | {}^\n",
        " ".repeat(column.saturating_sub(1))
    );
    (line, column, snippet)
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" (and the same
/// for variants): the nearest valid name, when one is close.
fn hint(message: &str) -> String {
    let (Some(bad), Some(expected)) = (
        between(message, "unknown field `", "`")
            .or_else(|| between(message, "unknown variant `", "`")),
        message.split("expected ").nth(1),
    ) else {
        return String::new();
    };
    let names: Vec<&str> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty())
        .collect();
    let best = names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(bad, n), *n))
        .min();
    match best {
        Some((d, name)) if d <= 2.max(bad.len() / 3) => {
            format!("help: did you mean `{name}`?")
        }
        _ => format!("help: valid names here: {}", names.join(", ")),
    }
}

fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let rest = &s[s.find(open)? + open.len()..];
    Some(&rest[..rest.find(close)?])
}

/// Expands `~/` and `${VAR}` / `${VAR:-default}` in a path from the config,
/// then resolves it against the config's folder.
pub fn resolve(base: &Path, raw: &Path) -> Result<PathBuf, String> {
    let s = raw.to_string_lossy();
    let expanded = expand(&s)?;
    let p = PathBuf::from(expanded);
    Ok(normalize(&if p.is_absolute() { p } else { base.join(p) }))
}

/// Removes `.` and `name/..` pairs without touching the file system, so
/// messages and reports show `out/x`, not `examples/../out/x`.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

/// Expands `${VAR}` / `${VAR:-default}` (and a leading `~/`) in a string
/// from the config: paths, and an endpoint's URL.
pub fn expand(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`{s}`: `${{` without a closing `}}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(name).ok().filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(&expand(d)?),
            (None, None) => {
                return Err(format!(
                    "`{s}`: the environment variable {name} is not set (write ${{{name}:-DEFAULT}} for a default)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if let Some(tail) = out.strip_prefix("~/") {
        let home = std::env::var("HOME").map_err(|_| format!("`{s}`: HOME is not set"))?;
        out = format!("{home}/{tail}");
    }
    Ok(out)
}

/// A plugin config table as the JSON string plugins receive.
pub fn plugin_config_json(table: Option<&toml::Table>) -> String {
    match table {
        Some(t) => serde_json::to_string(t).expect("a TOML table is valid JSON"),
        None => "{}".into(),
    }
}

/// Named seeds of a run (the report's reproducibility section).
pub fn seeds(config: &ConfigFile) -> BTreeMap<String, u64> {
    BTreeMap::from([
        ("statistics".to_owned(), config.seed),
        ("sampling".to_owned(), config.observe.seed),
        ("plugin_sandbox".to_owned(), config.seed),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"output = "out"
[suite]
prompts = [{ id = "a", text = "Hi" }]
[baseline]
model = "m.gguf"
[candidate]
model = "m.gguf"
"#;

    #[test]
    fn a_minimal_config_takes_the_defaults() {
        let c = parse(Path::new("c.toml"), MINIMAL).unwrap();
        assert_eq!(c.observe.max_tokens, 48);
        assert_eq!(c.baseline.executor, ExecutorKind::Candle);
        assert_eq!(c.report.formats.len(), 3);
        assert!(c.gates.is_empty());
    }

    #[test]
    fn a_bad_value_points_at_the_line_and_names_the_key() {
        let text = MINIMAL.replace(
            "[candidate]\nmodel",
            "[candidate]\nexecutor = \"torhc\"\nmodel",
        );
        let e = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "c.toml:7:12: candidate.executor: unknown variant `torhc`, expected one of \
                 `candle`, `torch`, `mlx`, `http`, `replay`"
            ),
            "{e}"
        );
        assert!(e.contains("did you mean `torch`?"), "{e}");
        for (key, value) in [("kv_cache", "q8"), ("dtype", "fp8"), ("weights", "q4")] {
            let text = MINIMAL.replace(
                "[baseline]\n",
                &format!("[baseline]\n{key} = \"{value}\"\n"),
            );
            let e = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "c.toml:5:{}: baseline.{key}: unknown variant `{value}`",
                    key.len() + 4
                )),
                "{e}"
            );
        }
        // Read as the enums the executors take.
        let text = MINIMAL.replace(
            "[baseline]\n",
            "[baseline]\nexecutor = \"torch\"\ndtype = \"bf16\"\nkv_cache = \"f16\"\nweights = \"f32\"\n",
        );
        let c = parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(c.baseline.executor, ExecutorKind::Torch);
        assert_eq!(c.baseline.dtype, Some(Dtype::Bf16));
        assert_eq!(c.baseline.kv_cache, Some(KvType::F16));
        assert_eq!(c.baseline.weights, WeightMode::F32);
        assert_eq!(c.candidate.weights, WeightMode::Native);
    }

    #[test]
    fn a_typo_points_at_the_line_and_suggests_the_key() {
        let text = MINIMAL.replace("[candidate]\nmodel", "[candidate]\nmodle");
        let e = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(e.starts_with("c.toml:7:1: unknown field `modle`"), "{e}");
        assert!(e.contains("did you mean `model`?"), "{e}");
        assert!(e.contains("   7 | modle = \"m.gguf\""), "{e}");
    }

    #[test]
    fn a_bad_variant_is_named_with_the_valid_ones() {
        let text = format!("{MINIMAL}[[gates]]\nmetric = \"x\"\nseverity = \"fatal\"\n");
        let e = parse(Path::new("c.toml"), &text).unwrap_err().to_string();
        assert!(e.contains(":10:") && e.contains("`fatal`"), "{e}");
        assert!(e.contains("warn") && e.contains("fail"), "{e}");
    }

    #[test]
    fn paths_expand_variables_and_home() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("VAUBAN_TEST_DIR_X", "/models") };
        let base = Path::new("/cfg");
        assert_eq!(
            resolve(base, Path::new("${VAUBAN_TEST_DIR_X}/m.gguf")).unwrap(),
            PathBuf::from("/models/m.gguf")
        );
        assert_eq!(
            resolve(base, Path::new("${VAUBAN_TEST_UNSET_Y:-/d}/m.gguf")).unwrap(),
            PathBuf::from("/d/m.gguf")
        );
        assert_eq!(
            resolve(base, Path::new("rel/m.gguf")).unwrap(),
            PathBuf::from("/cfg/rel/m.gguf")
        );
        assert_eq!(
            resolve(Path::new("examples"), Path::new("../out/./q")).unwrap(),
            PathBuf::from("out/q")
        );
        assert_eq!(
            resolve(Path::new("."), Path::new("../x")).unwrap(),
            PathBuf::from("../x")
        );
        let e = resolve(base, Path::new("${VAUBAN_TEST_UNSET_Y}/m")).unwrap_err();
        assert!(e.contains("VAUBAN_TEST_UNSET_Y is not set"), "{e}");
    }
}
