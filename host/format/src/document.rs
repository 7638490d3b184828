//! The Model Behavior Change Report as data: what `report.json` holds, and
//! what the Markdown and HTML renderers read . The
//! sections are in the design's order; names users of the upstream tool
//! know (`access.level`, `access.claim_strength`, `access.can_claim`,
//! `access.cannot_claim`, `claims[].strength`, `claims[].status`,
//! `claims[].evidence`, `metric_deltas[]`) are kept.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::evidence::{AccessLevel, ClaimStrength, Polarity};
use crate::trace::ArtifactKind;

/// The version of the report's JSON shape (`docs/report.schema.json`).
pub const REPORT_SCHEMA: &str = "vauban.report/1";

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: String,
    pub title: String,
    /// When the report was built (RFC 3339, UTC).
    pub created_at: String,
    pub summary: Summary,
    pub target_change: TargetChange,
    /// What the evidence allows this report to claim (DESIGN.md section 5).
    pub access: Access,
    pub evidence: EvidenceSection,
    /// Every claim the mappers proposed, after the host's check.
    pub claims: Vec<ReportClaim>,
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
    /// What the recorded interventions and transformations were.
    pub interventions: Vec<InterventionSummary>,
    pub examples: Vec<Example>,
    pub gates: Vec<GateResult>,
    pub limitations: Vec<String>,
    pub reproducibility: Reproducibility,
}

/// The one-screen summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// One sentence.
    pub headline: String,
    /// Short lines, most important first.
    pub lines: Vec<String>,
    pub prompts: usize,
    pub claims_accepted: usize,
    pub claims_downgraded: usize,
    pub claims_rejected: usize,
    pub gates_failed: usize,
    pub gates_warned: usize,
    pub plugin_failures: usize,
}

/// The change under audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetChange {
    /// The user's words for the change (`report.target_change`).
    pub description: Option<String>,
    /// `fine_tune`, `quantize`, `merge`, `steer`, `abliterate`...
    pub transformation_kind: Option<String>,
    pub transformation_summary: Option<String>,
    pub baseline: ModelSide,
    pub candidate: ModelSide,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSide {
    /// `baseline` or `candidate`.
    pub label: String,
    pub model_name: String,
    /// sha256 of the weights as loaded, when known.
    pub model_sha256: Option<String>,
    pub executor: String,
    pub device: String,
    /// The host-applied transformation, in words (none: the model as loaded).
    pub transformation: Option<String>,
}

/// What the traces hold and what ran on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSection {
    /// Paired prompts.
    pub prompts: usize,
    /// Prompts per category.
    pub categories: BTreeMap<String, usize>,
    /// Kinds both sides hold in every trace.
    pub kinds_in_both: Vec<ArtifactKind>,
    pub scorers: Vec<PluginRecord>,
    pub claim_mappers: Vec<PluginRecord>,
    /// Plugins that failed; the run carried on without their output.
    pub plugin_failures: Vec<PluginFailure>,
}

/// A plugin as the report identifies it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    pub wit_version: String,
    pub sha256: String,
    /// `scorer`, `claim-mapper` or `intervention-policy`.
    pub world: String,
    /// Where it was loaded from.
    pub path: String,
}

/// A plugin call that did not give a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginFailure {
    pub plugin: String,
    /// What it was doing: `load`, `score baseline`, `propose`...
    pub stage: String,
    /// The typed failure (`timeout`, `trap`...), when the call started.
    pub failure: Option<String>,
    pub message: String,
}

/// A claim after the host's check, with the mapper that proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportClaim {
    pub statement: String,
    /// The strength the host allows; null when the claim is rejected. Read
    /// this, not `proposed_strength`, for what the evidence supports.
    pub strength: Option<ClaimStrength>,
    /// What the claim mapper proposed.
    pub proposed_strength: ClaimStrength,
    pub status: ClaimStatus,
    /// Ids of the evidence the claim cites that exists (metric deltas,
    /// distribution, activation and weight findings, intervention records).
    pub evidence: Vec<String>,
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
/// category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportDelta {
    /// Stable id claims cite: `metric` or `metric@category`.
    pub id: String,
    pub metric: String,
    pub category: Option<String>,
    /// The scorer that produced the metric.
    pub scorer: String,
    pub unit: String,
    pub polarity: Polarity,
    /// Paired prompts with a value on both sides.
    pub n: usize,
    pub baseline_mean: f64,
    pub candidate_mean: f64,
    pub delta: f64,
    /// `delta / |baseline_mean|` in percent; null when the baseline is 0.
    pub percent_change: Option<f64>,
    /// 95% paired bootstrap interval of the delta.
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// Wilson 95% intervals of each side's rate (0/1 metrics only).
    pub baseline_rate_ci: Option<[f64; 2]>,
    pub candidate_rate_ci: Option<[f64; 2]>,
    /// `mcnemar_exact` (0/1 metrics) or `sign_flip_permutation`.
    pub test: String,
    pub p_value: Option<f64>,
    /// Significant at 0.05 and the interval excludes 0.
    pub significant: bool,
    pub quality: Quality,
}

/// KL(baseline ‖ candidate) between next-token distributions on the same
/// prefix, from recorded logprobs, in nats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistributionShift {
    /// Over the vocabulary entries both sides recorded (`full` or `top_k`).
    pub support: String,
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

/// One prompt's KL figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptKl {
    pub prompt_id: String,
    pub category: Option<String>,
    pub first_token_kl: f64,
    pub mean_kl: f64,
    /// Positions compared.
    pub positions: usize,
}

/// Mean projection of the last prompt token's residual onto a direction,
/// per layer, per category and side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationFindings {
    /// Where the direction came from (file and tensor), and its sha256.
    pub direction: String,
    pub direction_sha256: String,
    pub layers: Vec<usize>,
    /// One series per (side, category).
    pub series: Vec<ProjectionSeries>,
    /// Sentences the host derived (largest separation, largest change).
    pub findings: Vec<String>,
}

/// Mean projections, one per layer of [`ActivationFindings::layers`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectionSeries {
    /// `baseline` or `candidate`.
    pub side: String,
    pub category: String,
    pub prompts: usize,
    pub mean_projection: Vec<f64>,
}

/// One intervention or transformation the evidence records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterventionSummary {
    /// `baseline` or `candidate`.
    pub side: String,
    pub description: String,
    /// Traces holding an intervention record of it.
    pub traces: usize,
    pub layers: Vec<usize>,
    pub labels: BTreeMap<String, String>,
}

/// One prompt shown side by side; redaction honoured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    pub prompt_id: String,
    pub category: Option<String>,
    /// `safe`, `redacted` or `omitted`.
    pub redaction: String,
    /// The prompt (a placeholder when redacted; null when omitted).
    pub prompt: Option<String>,
    pub baseline_output: Option<String>,
    pub candidate_output: Option<String>,
    /// Metrics whose value differs between the sides: name → [baseline, candidate].
    pub changed_metrics: BTreeMap<String, [f64; 2]>,
    /// Why this example was picked.
    pub why: String,
}

/// One regression gate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateResult {
    pub name: String,
    pub metric: String,
    pub category: Option<String>,
    /// `warn` or `fail`.
    pub severity: String,
    pub min_delta: Option<f64>,
    pub max_delta: Option<f64>,
    /// The observed delta; null when the metric was not measured.
    pub observed_delta: Option<f64>,
    /// `pass`, `warn`, `fail`, or `no_data` (counts as its severity).
    pub outcome: String,
    pub message: String,
}

/// What is needed to repeat the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reproducibility {
    /// The command line, as run.
    pub command: String,
    pub tool_version: String,
    pub config_path: String,
    pub config_sha256: String,
    /// The config file's text, as read.
    pub config_text: String,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleRecord {
    pub path: String,
    pub manifest_sha256: String,
    pub traces: usize,
    /// Traces reused from an earlier run (found by content hash).
    pub reused: usize,
}

/// One pipeline stage's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRecord {
    pub stage: String,
    pub seconds: f64,
    pub note: String,
}

/// One line of `scores.jsonl`: one metric's value for one prompt on one
/// side. The file beside the report holds every value the statistics were
/// computed from (the report's examples are a selection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreRow {
    pub prompt_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `baseline` or `candidate`.
    pub side: String,
    /// The scorer plugin's name.
    pub scorer: String,
    pub metric: String,
    pub value: f64,
}

/// Which set of traces something refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The only set, in [`Evidence::Single`].
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unclaimable {
    pub strength: ClaimStrength,
    /// The evidence the claim needs and what of it is missing, in words.
    pub reason: String,
}

/// How many traces of each side hold at least one artifact of a kind.
/// For [`Evidence::Single`], `baseline` counts the single set and the
/// candidate fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindCoverage {
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CausalScope {
    pub sides: Vec<String>,
    pub modes: Vec<String>,
    pub layers: Vec<u32>,
    pub directions: Vec<String>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    Improved,
    Regressed,
    Unchanged,
    /// The metric has no better direction.
    Neutral,
}
