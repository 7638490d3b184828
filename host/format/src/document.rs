//! The Model Behavior Change Report as data: what `report.json` holds, and
//! what the Markdown and HTML renderers read. The sections are in the
//! order both renderers show them; names users of the upstream tool
//! know (`access.level`, `access.claim_strength`, `access.can_claim`,
//! `access.cannot_claim`, `claims[].strength`, `claims[].status`,
//! `claims[].evidence`, `metric_deltas[]`) are kept.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::evidence::{AccessLevel, ClaimStrength, MetricDelta, Polarity};
use crate::trace::ArtifactKind;

/// The version of the report's JSON shape (`docs/report.schema.json`).
pub const REPORT_SCHEMA: &str = "vauban.report/1";

/// The JSON Schema of `report.json` (draft 2020-12), generated from
/// [`Report`], pretty-printed with a final newline: the text of
/// `docs/report.schema.json`, which a test keeps in step with the types.
pub fn schema() -> String {
    let mut schema = schemars::schema_for!(Report);
    schema.insert(
        "title".into(),
        format!("vauban Model Behavior Change Report ({REPORT_SCHEMA})").into(),
    );
    serde_json::to_string_pretty(&schema).expect("a schema serialises") + "\n"
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The version of the report's JSON shape: `vauban.report/1` ([`REPORT_SCHEMA`]).
    pub schema: String,
    /// The report's title (the config's `report.title`).
    pub title: String,
    /// When the report was built (RFC 3339, UTC).
    pub created_at: String,
    /// The one-screen summary.
    pub summary: Summary,
    /// The change under audit and the two models compared.
    pub target_change: TargetChange,
    /// What the evidence allows this report to claim.
    pub access: Access,
    /// What the traces hold and which plugins ran on them.
    pub evidence: EvidenceSection,
    /// Every claim the mappers proposed, after the host's check.
    pub claims: Vec<ReportClaim>,
    /// Every finding a claim can cite, under the id claims cite it by,
    /// exactly as the claim mappers were shown it and the host checked
    /// their claims against it: paired metric deltas, distribution shifts,
    /// projections, weight matrices, interventions. Absent in reports
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_set: Option<crate::evidence::EvidenceSet>,
    /// Per metric, overall and per category.
    pub metric_deltas: Vec<ReportDelta>,
    /// Next-token distribution shift, when both sides recorded logprobs.
    pub distribution: Option<DistributionShift>,
    /// Why there is no distribution shift, when logprobs were recorded but
    /// the KL cannot be computed from the traces (different tokenizers...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution_unavailable: Option<String>,
    /// Per-layer projections onto the report's direction, when both sides
    /// recorded raw activations and a direction was given.
    pub activation_findings: Option<ActivationFindings>,
    /// How a mixture of experts' routing moved, when both sides recorded
    /// raw router probabilities at the same layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingFindings>,
    /// What the recorded interventions and transformations were.
    pub interventions: Vec<InterventionSummary>,
    /// Prompts shown side by side, those whose metrics changed most first.
    pub examples: Vec<Example>,
    /// Every prompt of the suite in suite order, with both outputs and
    /// every metric on both sides (redaction honoured: omitted prompts are
    /// absent). Empty in reports written before it existed.
    #[serde(default)]
    pub prompts: Vec<PromptRow>,
    /// One outcome per configured regression gate, in the config's order.
    pub gates: Vec<GateResult>,
    /// How the deltas' p-values were adjusted for being tested together.
    #[serde(default)]
    pub multiple_comparisons: MultipleComparisons,
    /// What the report cannot say and why, one sentence each.
    pub limitations: Vec<String>,
    /// What is needed to repeat the run.
    pub reproducibility: Reproducibility,
}

/// The one-screen summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// One sentence.
    pub headline: String,
    /// Short lines, most important first.
    pub lines: Vec<String>,
    /// Prompts in the suite, each run on both models.
    pub prompts: usize,
    /// Claims kept as proposed.
    pub claims_accepted: usize,
    /// Claims kept at a weaker strength or with fewer citations.
    pub claims_downgraded: usize,
    /// Claims not kept.
    pub claims_rejected: usize,
    /// Gates that fail the run: outcome `fail`, or `no_data` with severity
    /// `fail`.
    pub gates_failed: usize,
    /// Gates that warn: outcome `warn`, or `no_data` with severity `warn`.
    pub gates_warned: usize,
    /// Plugin calls that gave no result (the entries of
    /// [`EvidenceSection::plugin_failures`]).
    pub plugin_failures: usize,
}

/// The change under audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetChange {
    /// The user's words for the change (`report.target_change`).
    pub description: Option<String>,
    /// `fine_tune`, `quantize`, `merge`, `steer`, `abliterate`...
    pub transformation_kind: Option<String>,
    /// The transformation in words: the config's
    /// `report.transformation_summary`, else the candidate's host-applied
    /// transformation; null when neither is known.
    pub transformation_summary: Option<String>,
    /// The model before the change.
    pub baseline: ModelSide,
    /// The model after the change.
    pub candidate: ModelSide,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSide {
    /// `baseline` or `candidate`.
    pub label: String,
    /// The model's name, as its traces record it.
    pub model_name: String,
    /// sha256 of the weights as loaded, when known.
    pub model_sha256: Option<String>,
    /// The executor that ran the model (`candle`...).
    pub executor: String,
    /// The device the model ran on, as the backend names it (`cpu`, `cuda:0`).
    pub device: String,
    /// The host-applied transformation, in words (none: the model as loaded).
    pub transformation: Option<String>,
}

/// What the traces hold and what ran on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSection {
    /// Paired prompts.
    pub prompts: usize,
    /// Prompts per category.
    pub categories: BTreeMap<String, usize>,
    /// Kinds both sides hold in every trace.
    pub kinds_in_both: Vec<ArtifactKind>,
    /// The scorer plugins that ran.
    pub scorers: Vec<PluginRecord>,
    /// The claim-mapper plugins that ran.
    pub claim_mappers: Vec<PluginRecord>,
    /// Plugins that failed; the run carried on without their output.
    pub plugin_failures: Vec<PluginFailure>,
    /// The judges judged scorers asked (docs/judges.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<ReportJudge>,
}

/// A judge as the report names it: the model behind every judged metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportJudge {
    /// The judge's name in the config (`[judges.NAME]`).
    pub name: String,
    /// The model as its executor names it (an endpoint: the model it serves).
    pub model: String,
    /// sha256 of the model's weights, where vauban holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Who ran it (`candle`, `torch`, `mlx`, an endpoint's URL).
    pub executor: String,
    /// The scorers that asked it, by the config's name.
    pub scorers: Vec<String>,
    /// Requests asked of it (answered, run or read from the record, or
    /// refused).
    pub requests: usize,
    /// Those refused (budget, prompt too long, not recorded, failed).
    pub refused: usize,
    /// Where its answers are kept: the run's `traces/judges/`, or the
    /// record a replay read.
    pub record: String,
    /// Why it answered nothing, when it could not load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// A plugin as the report identifies it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginRecord {
    /// The plugin's name, as it describes itself.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The `vauban:plugin` WIT version the plugin was built against.
    pub wit_version: String,
    /// sha256 of the plugin's component file, lowercase hex.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub sha256: String,
    /// `scorer`, `claim-mapper` or `intervention-policy`.
    pub world: String,
    /// Where it was loaded from.
    pub path: String,
}

/// A plugin call that did not give a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginFailure {
    /// The plugin, by the name the config gives it (its first-party name
    /// or its file's stem).
    pub plugin: String,
    /// What it was doing: `load`, `score baseline`, `propose`...
    pub stage: String,
    /// The typed failure (`timeout`, `trap`...), when the call started.
    pub failure: Option<String>,
    /// The full error message.
    pub message: String,
}

/// A claim after the host's check, with the mapper that proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportClaim {
    /// The claim, in the mapper's words.
    pub statement: String,
    /// The strength the host allows; null when the claim is rejected. Read
    /// this, not `proposed_strength`, for what the evidence supports.
    pub strength: Option<ClaimStrength>,
    /// What the claim mapper proposed.
    pub proposed_strength: ClaimStrength,
    /// Whether the claim was accepted, downgraded or rejected.
    pub status: ClaimStatus,
    /// Ids of the evidence the claim cites that exists (metric deltas,
    /// distribution, activation and weight findings, intervention records).
    pub evidence: Vec<String>,
    /// The mapper's caveats, followed by the causal scope in one sentence
    /// when the claim cites intervention records.
    pub limitations: Vec<String>,
    /// Why the host downgraded or rejected it.
    pub reasons: Vec<String>,
    /// When the claim cites intervention records: the sides, modes, layers,
    /// directions and prompts they cover, beyond which it says nothing causal.
    pub scope: Option<CausalScope>,
    /// The claim mapper's name.
    pub mapper: String,
}

/// One metric's paired comparison, overall (`category` null) or in one
/// category: the one value the run carries for it. Claim mappers see it
/// through [`ReportDelta::for_claims`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportDelta {
    /// Stable id claims cite: `metric` or `metric@category`.
    pub id: String,
    /// The metric's name, as its scorer declares it.
    pub metric: String,
    /// The category the pairs are drawn from; null for all prompts.
    pub category: Option<String>,
    /// The scorer that produced the metric.
    pub scorer: String,
    /// The metric's unit, as its scorer declares it.
    pub unit: String,
    /// Which direction of the metric is better.
    pub polarity: Polarity,
    /// Paired prompts with a value on both sides.
    pub n: usize,
    /// Mean of the baseline's values over the pairs.
    pub baseline_mean: f64,
    /// Mean of the candidate's values over the pairs.
    pub candidate_mean: f64,
    /// `candidate_mean − baseline_mean`.
    pub delta: f64,
    /// `delta / |baseline_mean|` in percent; null when the baseline is 0.
    pub percent_change: Option<f64>,
    /// 95% paired bootstrap interval of the delta.
    pub ci_low: Option<f64>,
    /// Upper bound of the same interval (`ci_low` is the lower).
    pub ci_high: Option<f64>,
    /// Wilson 95% intervals of each side's rate (0/1 metrics only).
    pub baseline_rate_ci: Option<[f64; 2]>,
    /// The candidate's interval, as `baseline_rate_ci` is the baseline's:
    /// `[low, high]`, 0/1 metrics only.
    pub candidate_rate_ci: Option<[f64; 2]>,
    /// How `ci_low` and `ci_high` were computed (`paired_bootstrap`).
    #[serde(default)]
    pub interval: IntervalMethod,
    /// How `baseline_rate_ci` and `candidate_rate_ci` were computed
    /// (`wilson`); null when there are none.
    #[serde(default)]
    pub rate_interval: Option<IntervalMethod>,
    /// The paired test behind `p_value`.
    pub test: PairedTest,
    /// Two-sided p-value of `test`, before any adjustment; null when no
    /// test was run.
    pub p_value: Option<f64>,
    /// `p_value` adjusted for the report's family of tests
    /// ([`Report::multiple_comparisons`]); null when no test was run.
    #[serde(default)]
    pub p_adjusted: Option<f64>,
    /// The adjusted p-value is below 0.05 and the interval excludes 0.
    pub significant: bool,
    /// How the change reads given the metric's polarity and interval.
    pub quality: Quality,
    /// The artifact kinds the scorer that made the metric read (its
    /// declared needs): what the delta rests on, which the claim check
    /// holds claims citing it to. Empty: text only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rests_on: Vec<ArtifactKind>,
    /// The judges (config names) behind the metric, when a judged scorer
    /// made it: its values are a model's verdicts, not observations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judged_by: Vec<String>,
    /// The judged rate corrected for its judge's errors, where the judge's
    /// accuracy is known (the scorer's `calibration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected: Option<CorrectedRate>,
    /// Why a calibrated metric has no corrected rate here (a judge no
    /// better than chance, values that are not 0/1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected_unavailable: Option<String>,
}

/// A judged rate corrected for its judge's errors: the Rogan–Gladen
/// estimate `(p + Sp − 1) / (Se + Sp − 1)` of each side's true rate
/// (clipped to [0, 1]), and a paired bootstrap interval of the corrected
/// difference that also redraws a measured calibration's counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectedRate {
    /// The judge's sensitivity and specificity the correction used.
    pub sensitivity: f64,
    /// See `sensitivity`.
    pub specificity: f64,
    /// Where they come from, in words (`measured on 30 labelled replies
    /// (…)`, or `stated in the config`).
    pub accuracy: String,
    /// The corrected rates, baseline and candidate.
    pub baseline: f64,
    /// See `baseline`.
    pub candidate: f64,
    /// `candidate − baseline`, corrected.
    pub delta: f64,
    /// 95% interval of the corrected difference.
    pub ci_low: f64,
    /// See `ci_low`.
    pub ci_high: f64,
    /// Whether the interval carries the calibration's own uncertainty (a
    /// measured accuracy; a stated one is taken as exact).
    pub calibration_in_interval: bool,
}

impl ReportDelta {
    /// The delta as claim mappers see it (the evidence set's view): its
    /// p-value the one adjusted for the report's family of tests, so that
    /// a mapper comparing it with its alpha needs no correction of its
    /// own.
    pub fn for_claims(&self) -> MetricDelta {
        MetricDelta {
            id: self.id.clone(),
            metric: self.metric.clone(),
            category: self.category.clone(),
            baseline_mean: self.baseline_mean,
            candidate_mean: self.candidate_mean,
            delta: self.delta,
            ci_low: self.ci_low,
            ci_high: self.ci_high,
            p_value: self.p_adjusted,
            n: u32::try_from(self.n).unwrap_or(u32::MAX),
            polarity: self.polarity,
            rests_on: self.rests_on.clone(),
            judged_by: self.judged_by.clone(),
        }
    }
}

/// KL(baseline ‖ candidate) between next-token distributions on the same
/// prefix, from recorded logprobs, in nats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DistributionShift {
    /// Over the vocabulary entries both sides recorded: `full`; `top_k`
    /// (the baseline's top k, scored by the candidate); or `top_k_shared`
    /// (the tokens in both sides' own top k, where a side is an endpoint).
    pub support: String,
    /// Which positions are compared: the baseline's continuation scored
    /// by the candidate (teacher-forced), or, where a side cannot score a
    /// given continuation (an endpoint), the generated positions both
    /// sides share.
    #[serde(default)]
    pub positions: KlPositions,
    /// With `top_k`: the baseline's most likely tokens kept per position;
    /// the rest of the vocabulary is one bucket, so the KL is a lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// With `top_k`: the baseline's mean probability mass outside the kept
    /// tokens (how much of the distribution the bucket holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_rest_mass: Option<f64>,
    /// At the first generated position, mean over prompts.
    pub first_token_kl_mean: f64,
    /// Mean over prompts of the mean over teacher-forced positions.
    pub mean_kl: f64,
    /// Per prompt.
    pub per_prompt: Vec<PromptKl>,
    /// Mean KL by position (0 = the first generated token), for the plot.
    pub by_position: Vec<f64>,
    /// Per category: mean first-token KL.
    pub by_category: BTreeMap<String, f64>,
}

/// The positions a KL compares.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum KlPositions {
    /// Along the baseline's continuation, the candidate teacher-forced on
    /// it after its own prompt: every position the baseline generated.
    #[default]
    TeacherForced,
    /// Each side's own generated positions, up to and including the first
    /// one where the two completions differ (before it, both sides saw the
    /// same tokens); each side's top-k tokens, compared on the tokens in
    /// both sides' top k.
    SharedGenerated,
}

/// One prompt's KL figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptKl {
    /// The prompt's id in the suite.
    pub prompt_id: String,
    /// The prompt's category; null when it has none.
    pub category: Option<String>,
    /// KL at the first generated position, in nats.
    pub first_token_kl: f64,
    /// Mean KL over the compared positions, in nats.
    pub mean_kl: f64,
    /// Positions compared.
    pub positions: usize,
}

/// Mean projection of the last prompt token's residual onto a direction,
/// per layer, per category and side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivationFindings {
    /// Where the direction came from (file and tensor), and its sha256.
    pub direction: String,
    /// sha256 of the direction file, lowercase hex.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub direction_sha256: String,
    /// The layers projected, ascending; every series has one value per layer.
    pub layers: Vec<usize>,
    /// One series per (side, category).
    pub series: Vec<ProjectionSeries>,
    /// Sentences the host derived (largest separation, largest change).
    pub findings: Vec<String>,
}

/// A mixture of experts' routing, baseline against candidate, over the
/// prompt tokens both sides saw alike (the same prompt tokens).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutingFindings {
    /// Experts each token used.
    pub experts_per_token: usize,
    /// The layers compared, ascending.
    pub layers: Vec<usize>,
    /// Per layer: the share of prompt tokens whose chosen experts differ.
    pub changed_choices: Vec<f64>,
    /// Per layer: the mean total variation distance between the two
    /// sides' router distributions, per token (0: the same, 1: disjoint).
    pub mean_total_variation: Vec<f64>,
    /// Prompt tokens compared at each layer.
    pub tokens: usize,
    /// Prompts compared (those whose prompt tokens both sides share).
    pub prompts: usize,
    /// Sentences the host derived.
    pub findings: Vec<String>,
}

/// Mean projections, one per layer of [`ActivationFindings::layers`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectionSeries {
    /// Which model: `baseline` or `candidate`.
    pub side: Side,
    /// The prompts' category (`all` for prompts without one).
    pub category: String,
    /// Prompts of the suite in this category.
    pub prompts: usize,
    /// The mean projection at each of [`ActivationFindings::layers`], in
    /// the same order (0 at a layer no trace of the series recorded).
    pub mean_projection: Vec<f64>,
}

/// One intervention or transformation the evidence records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterventionSummary {
    /// Which model: `baseline` or `candidate`.
    pub side: Side,
    /// What was done, in words: the side's transformation, or
    /// `<mode> intervention`.
    pub description: String,
    /// Traces holding an intervention record of it.
    pub traces: usize,
    /// The layers it acted on, ascending; empty when not recorded.
    pub layers: Vec<usize>,
    /// The labels of its records (`mode`, `policy`, or `kind` for a weight
    /// transformation).
    pub labels: BTreeMap<String, String>,
}

/// One prompt shown side by side; redaction honoured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// The prompt's id in the suite.
    pub prompt_id: String,
    /// The prompt's category; null when it has none.
    pub category: Option<String>,
    /// How the suite lets the report show the prompt.
    pub redaction: Redaction,
    /// The prompt (a placeholder when redacted; null when omitted).
    pub prompt: Option<String>,
    /// The baseline's completion; null when outputs are not recorded, the
    /// prompt is redacted, or the trace holds no completion.
    pub baseline_output: Option<String>,
    /// The candidate's completion; null when outputs are not recorded, the
    /// prompt is redacted, or the trace holds no completion.
    pub candidate_output: Option<String>,
    /// Metrics whose value differs between the sides: name → [baseline, candidate].
    pub changed_metrics: BTreeMap<String, [f64; 2]>,
    /// Why this example was picked.
    pub why: String,
}

/// One prompt of the suite as the prompt table shows it: its text and
/// outputs as the report may show them (redaction honoured, as in
/// [`Example`]), and every metric on both sides. A prompt whose redaction
/// is `omitted` has no row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRow {
    /// The prompt's id in the suite.
    pub prompt_id: String,
    /// The prompt's category; null when it has none.
    pub category: Option<String>,
    /// How the suite lets the report show the prompt: `safe` or `redacted`
    /// (an `omitted` prompt has no row).
    pub redaction: Redaction,
    /// The prompt; a placeholder naming the category when redacted.
    pub prompt: String,
    /// The baseline's completion; null when outputs are not recorded
    /// (`report.record_outputs = false`), the prompt is redacted, or the
    /// trace holds no completion.
    pub baseline_output: Option<String>,
    /// The candidate's completion; null as for `baseline_output`.
    pub candidate_output: Option<String>,
    /// Every metric with a value on at least one side: name →
    /// [baseline, candidate], null on a side without a value.
    pub metrics: BTreeMap<String, [Option<f64>; 2]>,
    /// With several samples per prompt (`observe.samples`): each metric's
    /// standard deviation over this prompt's samples, [baseline,
    /// candidate], null on a side with one sample (a greedy side). The
    /// values in `metrics` are then the means over the samples.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spread: BTreeMap<String, [Option<f64>; 2]>,
    /// Where the two outputs first differ, in characters (Unicode scalar
    /// values) from the start: the length of the shorter one when it is a
    /// prefix of the other. Null when they are equal or either is null.
    pub first_difference: Option<usize>,
}

/// Where `a` and `b` first differ, counted in characters (Unicode scalar
/// values, not bytes, so multi-byte text gives the offset a reader counts);
/// the shorter one's length when it is a prefix of the other; `None` when
/// they are equal. What [`PromptRow::first_difference`] holds.
pub fn first_difference(a: &str, b: &str) -> Option<usize> {
    let (mut left, mut right) = (a.chars(), b.chars());
    let mut at = 0;
    loop {
        match (left.next(), right.next()) {
            (None, None) => return None,
            (Some(x), Some(y)) if x == y => at += 1,
            _ => return Some(at),
        }
    }
}

/// One regression gate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateResult {
    /// The gate's name from the config, or `gate N: <delta id>`.
    pub name: String,
    /// The metric the gate bounds.
    pub metric: String,
    /// The category whose delta is bounded; null for the overall delta.
    pub category: Option<String>,
    /// What a failure of this gate does.
    pub severity: Severity,
    /// The smallest delta that passes, when bounded below.
    pub min_delta: Option<f64>,
    /// The largest delta that passes, when bounded above.
    pub max_delta: Option<f64>,
    /// The observed delta; null when the metric was not measured.
    pub observed_delta: Option<f64>,
    /// How the gate came out (`no_data` counts as its severity).
    pub outcome: GateOutcome,
    /// The outcome in words: the delta against the bounds, or why there
    /// is no data.
    pub message: String,
}

/// What is needed to repeat the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reproducibility {
    /// The command line, as run.
    pub command: String,
    /// The version of vauban that built the report.
    pub tool_version: String,
    /// The config file's path, as given.
    pub config_path: String,
    /// sha256 of the config file, lowercase hex.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub config_sha256: String,
    /// The config file's text, as read.
    pub config_text: String,
    /// sha256 of the suite as the run saw it: the suite file, or the
    /// config's inline prompts as JSON.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub suite_sha256: String,
    /// `baseline`/`candidate` → sha256 of the weights as loaded.
    pub models: BTreeMap<String, String>,
    /// Every plugin that ran.
    pub plugins: Vec<PluginRecord>,
    /// `baseline`/`candidate` → the bundle folder and its manifest's sha256.
    pub bundles: BTreeMap<String, BundleRecord>,
    /// Named seeds (sampling, bootstrap, plugin sandbox).
    pub seeds: BTreeMap<String, u64>,
    /// Pipeline stages in order, with their wall time.
    pub stages: Vec<StageRecord>,
}

/// One recorded bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleRecord {
    /// The bundle's folder.
    pub path: String,
    /// sha256 of the bundle's `manifest.json`, which holds the hash of every
    /// other file in it.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub manifest_sha256: String,
    /// Traces the bundle holds.
    pub traces: usize,
    /// Traces reused from an earlier run (found by content hash).
    pub reused: usize,
}

/// One pipeline stage's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageRecord {
    /// The stage's name (`load baseline`, `score`, `statistics`, `render`...).
    pub stage: String,
    /// Wall-clock time the stage took, in seconds.
    pub seconds: f64,
    /// What the stage did, in words; may be empty.
    pub note: String,
}

/// One line of `scores.jsonl`: one metric's value for one prompt on one
/// side. The file beside the report holds every value the statistics were
/// computed from (the report's examples are a selection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreRow {
    /// The prompt's id in the suite.
    pub prompt_id: String,
    /// The prompt's category; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Which model: `baseline` or `candidate`.
    pub side: Side,
    /// The scorer plugin's name.
    pub scorer: String,
    /// The metric's name, as the scorer declares it.
    pub metric: String,
    /// The metric's value for this prompt on this side.
    pub value: f64,
}

/// Which set of traces something refers to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The only set, when one model's traces are judged alone
    /// (`vauban_report::Evidence::Single`).
    Snapshot,
    /// The model before the change.
    Baseline,
    /// The model after the change.
    Candidate,
}

impl Side {
    /// The name used in JSON and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Snapshot => "snapshot",
            Side::Baseline => "baseline",
            Side::Candidate => "candidate",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the evidence allows a report to claim, and what it does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// The highest access level the traces reach.
    pub level: AccessLevel,
    /// The strongest claim allowed: `level.strongest_claim()`.
    pub claim_strength: ClaimStrength,
    /// Every claim strength whose own evidence is present, weakest first
    /// (never above `claim_strength`).
    pub can_claim: Vec<ClaimStrength>,
    /// Every other claim strength, with the evidence it needs.
    pub cannot_claim: Vec<Unclaimable>,
    /// Evidence that is absent or incomplete, in words.
    pub missing_evidence: Vec<String>,
    /// For every artifact kind present in any trace: how many traces hold it.
    pub coverage: Vec<KindCoverage>,
    /// The recorded interventions, the only scope a causal statement may have.
    pub interventions: Vec<InterventionRef>,
    /// What causal statements are allowed; `None` when none are.
    pub causal_scope: Option<String>,
}

impl Access {
    /// Whether a claim of `strength` is allowed.
    pub fn allows(&self, strength: ClaimStrength) -> bool {
        self.can_claim.contains(&strength)
    }
}

/// A claim strength the evidence does not reach, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Unclaimable {
    /// The claim strength that cannot be claimed.
    pub strength: ClaimStrength,
    /// The evidence the claim needs and what of it is missing, in words.
    pub reason: String,
}

/// How many traces of each side hold at least one artifact of a kind.
/// For one model's traces judged alone (`vauban_report::Evidence::Single`),
/// `baseline` counts the single set and the candidate fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KindCoverage {
    /// The artifact kind counted.
    pub kind: ArtifactKind,
    /// Baseline (or snapshot) traces holding the kind.
    pub baseline: usize,
    /// Candidate traces holding the kind.
    pub candidate: Option<usize>,
    /// Baseline (or snapshot) traces in all.
    pub of_baseline: usize,
    /// Candidate traces in all.
    pub of_candidate: Option<usize>,
}

/// One recorded `intervention_result` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterventionRef {
    /// The set the trace belongs to.
    pub side: Side,
    /// The trace's id.
    pub trace: String,
    /// The artifact's id within the trace.
    pub artifact: String,
    /// The transformer block the intervention acted on, when recorded.
    pub layer: Option<usize>,
    /// The artifact's labels (mode, direction, alpha...).
    pub labels: BTreeMap<String, String>,
}

impl InterventionRef {
    /// What the intervention did: its mode (`subtract`, `clamp`...), or the
    /// policy that decided it, or `intervention` when the record says neither.
    pub fn mode(&self) -> String {
        self.labels
            .get("mode")
            .or_else(|| self.labels.get("policy"))
            .cloned()
            .unwrap_or_else(|| "intervention".into())
    }
}

/// What the host made of a proposed claim.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ClaimStatus {
    /// As proposed.
    Accepted,
    /// Kept at a weaker strength, or with fewer citations; `reasons` says why.
    Downgraded,
    /// Not kept; `reasons` says why.
    Rejected,
}

/// What the intervention records a claim cites cover: a causal statement
/// holds for this and nothing wider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CausalScope {
    /// The sides the records are on (`baseline`, `candidate`), sorted.
    pub sides: Vec<String>,
    /// The intervention modes or policy names, sorted.
    pub modes: Vec<String>,
    /// The layers intervened on, ascending; empty when none was recorded.
    pub layers: Vec<u32>,
    /// The directions used (`source:tensor`), sorted.
    pub directions: Vec<String>,
    /// The prompts the records come from (suite ids, or trace ids for
    /// prompts without one), sorted.
    pub prompts: Vec<String>,
}

impl CausalScope {
    /// The scope in one sentence.
    pub fn describe(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "unrecorded".to_owned()
            } else {
                v.join(", ")
            }
        };
        let layers: Vec<String> = self.layers.iter().map(u32::to_string).collect();
        format!(
            "causal only within the cited interventions: {} on the {} side at layer(s) {} along {}, on {} prompt(s)",
            list(&self.modes),
            list(&self.sides),
            list(&layers),
            list(&self.directions),
            self.prompts.len()
        )
    }
}

/// How a change reads, given which direction is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    /// The delta moved in the better direction and its interval, if any,
    /// excludes 0.
    Improved,
    /// The delta moved in the worse direction and its interval, if any,
    /// excludes 0.
    Regressed,
    /// The delta is 0, or its interval contains 0.
    Unchanged,
    /// The metric has no better direction.
    Neutral,
}

/// How the report may show a prompt and its completions.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Redaction {
    /// Shown as written.
    #[default]
    Safe,
    /// Shown as a placeholder with the category; completions hidden.
    Redacted,
    /// Never shown as an example.
    Omitted,
}

impl Redaction {
    /// The name used in JSON and configs.
    pub fn as_str(self) -> &'static str {
        match self {
            Redaction::Safe => "safe",
            Redaction::Redacted => "redacted",
            Redaction::Omitted => "omitted",
        }
    }
}

/// What a failed regression gate does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Reported; the run still succeeds.
    Warn,
    /// The run exits with code 3 (after writing every report).
    #[default]
    Fail,
}

impl Severity {
    /// The name used in JSON and configs.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

/// How a regression gate came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateOutcome {
    /// The delta is within the bounds.
    Pass,
    /// Out of bounds, severity `warn`.
    Warn,
    /// Out of bounds, severity `fail`.
    Fail,
    /// The metric was not measured; counts as the gate's severity.
    NoData,
}

impl GateOutcome {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            GateOutcome::Pass => "pass",
            GateOutcome::Warn => "warn",
            GateOutcome::Fail => "fail",
            GateOutcome::NoData => "no_data",
        }
    }
}

impl GateResult {
    /// Whether the gate failed: `fail`, or `no_data` with severity `fail`
    /// (the exit code 3 of `vauban run`).
    pub fn fails(&self) -> bool {
        self.outcome == GateOutcome::Fail
            || (self.outcome == GateOutcome::NoData && self.severity == Severity::Fail)
    }

    /// Whether the gate warned: `warn`, or `no_data` with severity `warn`.
    pub fn warns(&self) -> bool {
        self.outcome == GateOutcome::Warn
            || (self.outcome == GateOutcome::NoData && self.severity == Severity::Warn)
    }
}

/// The family of tests whose p-values were adjusted together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultipleComparisons {
    /// The adjustment (the config's `report.multiple_comparisons`).
    pub method: Adjustment,
    /// The significance level the adjusted p-values are compared with.
    pub alpha: f64,
    /// How many tests the family holds: every delta with a p-value.
    pub tests: usize,
    /// Which tests were counted together, in words.
    pub family: String,
}

impl Default for MultipleComparisons {
    /// A report from before adjustment existed: raw p-values, no family.
    fn default() -> Self {
        MultipleComparisons {
            method: Adjustment::None,
            alpha: 0.05,
            tests: 0,
            family: String::new(),
        }
    }
}

/// How p-values tested together are adjusted.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Adjustment {
    /// Holm-Bonferroni: controls the family-wise error rate (the chance of
    /// any false positive in the family) under any dependence.
    #[default]
    Holm,
    /// Benjamini-Hochberg: controls the false discovery rate (the expected
    /// share of false positives among the significant deltas); more power
    /// when many metrics moved.
    BenjaminiHochberg,
    /// No adjustment: each p-value as its test gave it.
    None,
}

impl Adjustment {
    /// The name used in JSON and configs.
    pub fn as_str(self) -> &'static str {
        match self {
            Adjustment::Holm => "holm",
            Adjustment::BenjaminiHochberg => "benjamini_hochberg",
            Adjustment::None => "none",
        }
    }

    /// The method's name in a sentence.
    pub fn name(self) -> &'static str {
        match self {
            Adjustment::Holm => "Holm-Bonferroni",
            Adjustment::BenjaminiHochberg => "Benjamini-Hochberg",
            Adjustment::None => "no adjustment",
        }
    }
}

/// How an interval of a report was computed, named in report.json so
/// that a program reading it need not take the Markdown legend's word.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMethod {
    /// The 2.5th and 97.5th percentiles of the mean paired difference
    /// over 10,000 seeded bootstrap resamples of the pairs.
    #[default]
    PairedBootstrap,
    /// Wilson's score interval of a binomial rate, at z = 1.96.
    Wilson,
}

/// The paired test behind a delta's p-value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PairedTest {
    /// McNemar's exact test on the discordant pairs (0/1 metrics).
    McnemarExact,
    /// A sign-flip permutation test on the paired differences (10,000
    /// seeded assignments plus the observed one).
    SignFlipPermutation,
}

impl PairedTest {
    /// The name used in JSON and in the report's tables.
    pub fn as_str(self) -> &'static str {
        match self {
            PairedTest::McnemarExact => "mcnemar_exact",
            PairedTest::SignFlipPermutation => "sign_flip_permutation",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_first_differ_at_a_character_offset() {
        assert_eq!(first_difference("abc", "abc"), None);
        assert_eq!(first_difference("", ""), None);
        assert_eq!(first_difference("abc", "abd"), Some(2));
        assert_eq!(first_difference("ab", "abc"), Some(2));
        assert_eq!(first_difference("", "x"), Some(0));
        // Multi-byte characters count once: 日本 then a difference.
        assert_eq!(first_difference("日本語", "日本人"), Some(2));
        assert_eq!(first_difference("🙂a", "🙂b"), Some(1));
    }
}
