//! The evidence vocabulary the host, claim mappers and the report share:
//! access levels and claim strengths (weakest first), metric polarity, the
//! paired metric deltas and findings a claim may cite, each with the id it
//! is cited by, and a claim as a mapper proposes it.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::trace::ArtifactKind;

/// How much of the models the evidence reaches, weakest first.
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
pub enum AccessLevel {
    /// One model's outputs: a profile, no change.
    SingleSnapshot,
    /// Paired text outputs of both models.
    #[serde(alias = "paired_outputs")]
    BlackBox,
    /// Next-token logits or logprobs of both models.
    Logprobs,
    /// Weight snapshots of both models.
    Weights,
    /// Runtime activations of both models.
    Activations,
    /// Weights and activations of both the base and the transformed model.
    BaseAndTransformed,
}

impl AccessLevel {
    /// Every level, weakest first.
    pub const ALL: [AccessLevel; 6] = [
        AccessLevel::SingleSnapshot,
        AccessLevel::BlackBox,
        AccessLevel::Logprobs,
        AccessLevel::Weights,
        AccessLevel::Activations,
        AccessLevel::BaseAndTransformed,
    ];

    /// The name used in JSON and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessLevel::SingleSnapshot => "single_snapshot",
            AccessLevel::BlackBox => "black_box",
            AccessLevel::Logprobs => "logprobs",
            AccessLevel::Weights => "weights",
            AccessLevel::Activations => "activations",
            AccessLevel::BaseAndTransformed => "base_and_transformed",
        }
    }

    /// The strongest claim this level allows (the inverse of
    /// [`ClaimStrength::required_level`]).
    pub fn strongest_claim(self) -> ClaimStrength {
        match self {
            AccessLevel::SingleSnapshot => ClaimStrength::BehavioralProfile,
            AccessLevel::BlackBox => ClaimStrength::BlackBoxBehavioralDiff,
            AccessLevel::Logprobs => ClaimStrength::DistributionalDiff,
            AccessLevel::Weights => ClaimStrength::WeightDiff,
            AccessLevel::Activations => ClaimStrength::ActivationDiagnostic,
            AccessLevel::BaseAndTransformed => ClaimStrength::ModelChangeAudit,
        }
    }
}

impl fmt::Display for AccessLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How strong a claim about the models may be, weakest first.
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
pub enum ClaimStrength {
    /// How one model behaves; says nothing about a change.
    BehavioralProfile,
    /// The models' outputs differ on paired prompts.
    BlackBoxBehavioralDiff,
    /// The models' next-token distributions differ.
    DistributionalDiff,
    /// The models' weights differ, and where.
    WeightDiff,
    /// The models' internal activations differ, and where.
    ActivationDiagnostic,
    /// What the transformation changed, inside and out.
    ModelChangeAudit,
}

impl ClaimStrength {
    /// Every strength, weakest first.
    pub const ALL: [ClaimStrength; 6] = [
        ClaimStrength::BehavioralProfile,
        ClaimStrength::BlackBoxBehavioralDiff,
        ClaimStrength::DistributionalDiff,
        ClaimStrength::WeightDiff,
        ClaimStrength::ActivationDiagnostic,
        ClaimStrength::ModelChangeAudit,
    ];

    /// The name used in JSON and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimStrength::BehavioralProfile => "behavioral_profile",
            ClaimStrength::BlackBoxBehavioralDiff => "black_box_behavioral_diff",
            ClaimStrength::DistributionalDiff => "distributional_diff",
            ClaimStrength::WeightDiff => "weight_diff",
            ClaimStrength::ActivationDiagnostic => "activation_diagnostic",
            ClaimStrength::ModelChangeAudit => "model_change_audit",
        }
    }

    /// The weakest access level that allows this claim.
    pub fn required_level(self) -> AccessLevel {
        match self {
            ClaimStrength::BehavioralProfile => AccessLevel::SingleSnapshot,
            ClaimStrength::BlackBoxBehavioralDiff => AccessLevel::BlackBox,
            ClaimStrength::DistributionalDiff => AccessLevel::Logprobs,
            ClaimStrength::WeightDiff => AccessLevel::Weights,
            ClaimStrength::ActivationDiagnostic => AccessLevel::Activations,
            ClaimStrength::ModelChangeAudit => AccessLevel::BaseAndTransformed,
        }
    }

    /// The evidence this claim needs, in words.
    pub fn needs(self) -> &'static str {
        match self {
            ClaimStrength::BehavioralProfile => "traces of one model with its text outputs",
            ClaimStrength::BlackBoxBehavioralDiff => {
                "paired text outputs of the baseline and the candidate on the same prompts"
            }
            ClaimStrength::DistributionalDiff => {
                "next-token logits or logprobs of both models in every paired trace"
            }
            ClaimStrength::WeightDiff => "weight snapshots of both models in every paired trace",
            ClaimStrength::ActivationDiagnostic => {
                "runtime activation traces of both models in every paired trace"
            }
            ClaimStrength::ModelChangeAudit => {
                "weight snapshots and runtime activation traces of both the base and the \
                 transformed model in every paired trace"
            }
        }
    }
}

impl fmt::Display for ClaimStrength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which direction of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Polarity {
    /// An increase is an improvement (`higher_is_better`).
    HigherIsBetter,
    /// A decrease is an improvement (`lower_is_better`), e.g. a refusal
    /// rate on harmless prompts.
    LowerIsBetter,
    /// Neither direction is better (`neutral`): a change is reported, not
    /// judged.
    Neutral,
}

/// One metric's paired comparison, as claims cite it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricDelta {
    /// The id claims cite it by: the metric's name overall,
    /// `metric@category` within a category.
    pub id: String,
    /// The metric's name, as its scorer declares it.
    pub metric: String,
    /// The suite category the pairs are drawn from; `None` (JSON null or
    /// absent) for all prompts.
    #[serde(default)]
    pub category: Option<String>,
    /// Mean of the baseline's values over the pairs.
    pub baseline_mean: f64,
    /// Mean of the candidate's values over the pairs.
    pub candidate_mean: f64,
    /// `candidate_mean − baseline_mean`.
    pub delta: f64,
    /// Lower bound of the 95% paired-bootstrap interval of `delta`; `None`
    /// when no interval was computed.
    #[serde(default)]
    pub ci_low: Option<f64>,
    /// Upper bound of the 95% paired-bootstrap interval of `delta`; `None`
    /// when no interval was computed.
    #[serde(default)]
    pub ci_high: Option<f64>,
    /// Two-sided p-value of the paired test (McNemar's exact test when
    /// every value is 0 or 1, a sign-flip permutation test otherwise),
    /// adjusted for every test of the report (Holm-Bonferroni unless the
    /// config's `report.multiple_comparisons` says otherwise; the report's
    /// delta keeps the raw value too); `None` when no test was run.
    #[serde(default)]
    pub p_value: Option<f64>,
    /// Paired prompts: prompts with a value on both sides.
    pub n: u32,
    /// `higher_is_better`, `lower_is_better` or `neutral`.
    pub polarity: Polarity,
    /// The artifact kinds the scorer that made the metric read (its
    /// declared needs): what the delta rests on. Empty: text only.
    #[serde(default)]
    pub rests_on: Vec<ArtifactKind>,
    /// The judges (their config names) whose verdicts the values are,
    /// when a judged scorer made the metric: a claim resting on it rests
    /// on a model's reading of the replies, and says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judged_by: Vec<String>,
}

/// A next-token distribution shift between the two models (KL divergence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DistributionEvidence {
    /// `kl:first_token` or `kl:continuation`.
    pub id: String,
    /// What was measured, in words.
    pub measure: String,
    /// Mean KL(baseline ‖ candidate) in nats.
    pub value: f64,
    /// Prompts it is a mean over.
    pub prompts: u32,
}

/// The mean projection of the last prompt token's residual onto a
/// direction at one layer, per side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivationEvidence {
    /// `projection:layer{N}`.
    pub id: String,
    /// The transformer block whose output was projected.
    pub layer: u32,
    /// The direction (file and tensor).
    pub direction: String,
    /// The baseline's mean projection over its prompts.
    pub baseline_mean: f64,
    /// The candidate's mean projection over its prompts.
    pub candidate_mean: f64,
    /// Prompts the baseline's mean is over.
    pub prompts: u32,
}

/// One weight matrix both models' traces recorded, compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightEvidence {
    /// `weights:layer{N}.{matrix}`.
    pub id: String,
    /// The transformer block the matrix belongs to.
    pub layer: u32,
    /// The matrix (`attn_output`, `ffn_down`).
    pub matrix: String,
    /// The L2 (Frobenius) norm of the baseline's matrix, from its recorded
    /// summary.
    pub baseline_l2_norm: f64,
    /// The L2 (Frobenius) norm of the candidate's matrix, from its
    /// recorded summary.
    pub candidate_l2_norm: f64,
    /// Whether the two recorded summaries (norm, mean, spread, range)
    /// differ: a change, when true; equal summaries do not prove equal weights.
    pub summaries_differ: bool,
}

/// One recorded intervention: the scope a causal statement citing it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterventionEvidence {
    /// `side:trace:artifact`.
    pub id: String,
    /// `baseline` or `candidate`.
    pub side: String,
    /// The prompt (suite id, or the trace id when the prompt has none).
    pub prompt: String,
    /// `subtract`, `project`, ... or the policy's name.
    pub mode: String,
    /// The transformer block whose output the intervention changed, when
    /// recorded (a policy's record has none).
    #[serde(default)]
    pub layer: Option<u32>,
    /// The direction's source and tensor, when recorded.
    #[serde(default)]
    pub direction: Option<String>,
    /// The scale α the intervention applied, when recorded.
    #[serde(default)]
    pub alpha: Option<f64>,
}

/// What a claim mapper is shown: every piece of evidence with the id claims
/// cite, grouped by what it can support.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSet {
    /// The access level the traces reach, by name (`black_box`,
    /// `logprobs`...; see [`AccessLevel::as_str`]).
    pub access_level: String,
    /// The strongest claim the traces allow; a claim above it is downgraded.
    pub claim_strength: ClaimStrength,
    /// Artifact kinds every trace of both sides holds.
    pub kinds_in_both: Vec<ArtifactKind>,
    /// Paired metric deltas, overall and per category.
    pub deltas: Vec<MetricDelta>,
    /// Next-token distribution shifts; empty when none was computed.
    #[serde(default)]
    pub distribution: Vec<DistributionEvidence>,
    /// Per-layer projections onto a direction; empty when none were computed.
    #[serde(default)]
    pub activations: Vec<ActivationEvidence>,
    /// Weight matrices both sides recorded, compared.
    #[serde(default)]
    pub weights: Vec<WeightEvidence>,
    /// Every recorded intervention: what a causal claim must cite, and the
    /// scope it is limited to.
    #[serde(default)]
    pub interventions: Vec<InterventionEvidence>,
}

/// What one piece of evidence can support by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Support {
    /// A paired metric computed from text (and tokens).
    Behavioral,
    /// A distribution shift, or a metric computed from logprobs or logits.
    Distributional,
    /// Weights of both models compared.
    Weight,
    /// Activations of both models compared.
    Activation,
    /// A recorded intervention: grounds a causal statement, within its scope.
    Intervention,
}

impl Support {
    /// The name used in the host's messages about a claim
    /// (`behavioural`, `distributional`, `weight`, `activation`,
    /// `intervention`).
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Behavioral => "behavioural",
            Support::Distributional => "distributional",
            Support::Weight => "weight",
            Support::Activation => "activation",
            Support::Intervention => "intervention",
        }
    }
}

impl MetricDelta {
    /// Every kind of evidence the metric rests on: one read from logprobs
    /// and activations supports distributional and activation claims.
    pub fn supports(&self) -> Vec<Support> {
        use ArtifactKind as K;
        let mut out = Vec::new();
        for k in &self.rests_on {
            let s = match k {
                K::Activation => Support::Activation,
                K::WeightSnapshot => Support::Weight,
                K::Logprobs | K::Logits => Support::Distributional,
                _ => Support::Behavioral,
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
        if out.is_empty() {
            out.push(Support::Behavioral);
        }
        out
    }
}

impl EvidenceSet {
    /// What each piece of evidence supports, by id (the first of a
    /// duplicated id wins; [`EvidenceSet::duplicate_ids`] names them).
    pub fn supports_by_id(&self) -> HashMap<&str, Vec<Support>> {
        let mut out: HashMap<&str, Vec<Support>> = HashMap::new();
        let findings = self
            .distribution
            .iter()
            .map(|d| (d.id.as_str(), Support::Distributional))
            .chain(
                self.activations
                    .iter()
                    .map(|a| (a.id.as_str(), Support::Activation)),
            )
            .chain(
                self.weights
                    .iter()
                    .map(|w| (w.id.as_str(), Support::Weight)),
            )
            .chain(
                self.interventions
                    .iter()
                    .map(|i| (i.id.as_str(), Support::Intervention)),
            );
        for d in &self.deltas {
            out.entry(&d.id).or_insert_with(|| d.supports());
        }
        for (id, s) in findings {
            out.entry(id).or_insert_with(|| vec![s]);
        }
        out
    }

    /// Ids that name more than one piece of evidence (none when the host
    /// built the set: finding ids hold a `:`, which metric names cannot).
    pub fn duplicate_ids(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        let mut dup = Vec::new();
        let ids = self
            .deltas
            .iter()
            .map(|d| &d.id)
            .chain(self.distribution.iter().map(|d| &d.id))
            .chain(self.activations.iter().map(|a| &a.id))
            .chain(self.weights.iter().map(|w| &w.id))
            .chain(self.interventions.iter().map(|i| &i.id));
        for id in ids {
            if !seen.insert(id) && !dup.contains(id) {
                dup.push(id.clone());
            }
        }
        dup
    }
}

/// A claim as the plugin proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposedClaim {
    /// The claim, in words.
    pub statement: String,
    /// The strength the mapper proposes; the host may lower it.
    pub strength: ClaimStrength,
    /// Ids of the evidence the claim cites (metric delta ids and finding
    /// ids of the [`EvidenceSet`] the mapper was shown).
    pub evidence: Vec<String>,
    /// The mapper's own caveats, in words.
    pub limitations: Vec<String>,
}
