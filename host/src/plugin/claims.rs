//! Claim mappers: the host hands over an evidence set and gets proposed
//! claims back. This module checks their shape; whether the evidence
//! supports them is the report's check (DESIGN.md section 5).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::report::access::ClaimStrength;
use crate::trace::ArtifactKind;

use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::SandboxOptions;
use super::scorer::PluginInfo;
use super::wit::current::claims as b;
use super::wit::{ClaimMapperInstance, ClaimMapperPre};
use super::{Live, World, check_info, provisional_info, typed_pre};

use b::exports::vauban::plugin::claim_mapper as wc;

/// One metric's paired comparison, as claims cite it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricDelta {
    pub id: String,
    pub metric: String,
    #[serde(default)]
    pub category: Option<String>,
    pub baseline_mean: f64,
    pub candidate_mean: f64,
    pub delta: f64,
    #[serde(default)]
    pub ci_low: Option<f64>,
    #[serde(default)]
    pub ci_high: Option<f64>,
    #[serde(default)]
    pub p_value: Option<f64>,
    pub n: u32,
    /// `higher_is_better`, `lower_is_better` or `neutral`.
    pub polarity: super::scorer::Polarity,
    /// The artifact kinds the scorer that made the metric read (its
    /// declared needs): what the delta rests on. Empty: text only.
    #[serde(default)]
    pub rests_on: Vec<ArtifactKind>,
}

/// A next-token distribution shift between the two models (KL divergence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationEvidence {
    /// `projection:layer{N}`.
    pub id: String,
    pub layer: u32,
    /// The direction (file and tensor).
    pub direction: String,
    pub baseline_mean: f64,
    pub candidate_mean: f64,
    pub prompts: u32,
}

/// One weight matrix both models' traces recorded, compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightEvidence {
    /// `weights:layer{N}.{matrix}`.
    pub id: String,
    pub layer: u32,
    /// The matrix (`attn_output`, `ffn_down`).
    pub matrix: String,
    pub baseline_l2_norm: f64,
    pub candidate_l2_norm: f64,
    /// Whether the two recorded summaries (norm, mean, spread, range)
    /// differ: a change, when true; equal summaries do not prove equal weights.
    pub summaries_differ: bool,
}

/// One recorded intervention: the scope a causal statement citing it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default)]
    pub layer: Option<u32>,
    /// The direction's source and tensor, when recorded.
    #[serde(default)]
    pub direction: Option<String>,
    #[serde(default)]
    pub alpha: Option<f64>,
}

/// What a claim mapper is shown: every piece of evidence with the id claims
/// cite, grouped by what it can support.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSet {
    pub access_level: String,
    pub claim_strength: ClaimStrength,
    pub kinds_in_both: Vec<ArtifactKind>,
    pub deltas: Vec<MetricDelta>,
    #[serde(default)]
    pub distribution: Vec<DistributionEvidence>,
    #[serde(default)]
    pub activations: Vec<ActivationEvidence>,
    #[serde(default)]
    pub weights: Vec<WeightEvidence>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposedClaim {
    pub statement: String,
    pub strength: ClaimStrength,
    pub evidence: Vec<String>,
    pub limitations: Vec<String>,
}

/// A loaded, configured claim mapper.
pub struct ClaimMapper {
    plugin: Plugin,
    pre: ClaimMapperPre,
    info: PluginInfo,
    config_json: String,
    sandbox: SandboxOptions,
}

/// Most claims one call may propose.
const MAX_CLAIMS: usize = 1000;
/// Most bytes of a claim's statement or of one limitation.
const MAX_TEXT: usize = 2048;
/// Most limitations, and most cited ids, of one claim.
const MAX_LIST: usize = 256;
/// Most bytes of one cited id.
const MAX_ID: usize = 256;

impl ClaimMapper {
    /// Configures and describes the plugin once, so a bad config fails here.
    pub fn new(
        plugin: Plugin,
        config_json: &str,
        sandbox: SandboxOptions,
    ) -> Result<ClaimMapper, PluginError> {
        plugin.expect_world(World::ClaimMapper)?;
        let version = plugin.facts.wit;
        let pre = typed_pre(&plugin, |p| ClaimMapperPre::new(p, version))?;
        let mut m = ClaimMapper {
            info: provisional_info(&plugin),
            plugin,
            pre,
            config_json: config_json.to_owned(),
            sandbox,
        };
        let mut live = m.start()?;
        let info: PluginInfo = live.call("describe", |s, i| i.describe(s))?.into();
        check_info(&info).map_err(|msg| live.fail("describe", Failure::Malformed(msg)))?;
        m.info = info;
        Ok(m)
    }

    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Proposes claims from `evidence` in a fresh instance.
    pub fn propose(&self, evidence: &EvidenceSet) -> Result<Vec<ProposedClaim>, PluginError> {
        let mut live = self.start()?;
        let wire = to_wire(evidence);
        let claims = live.call_checked("propose", |s, i| i.propose(s, &wire))?;
        let malformed = if claims.len() > MAX_CLAIMS {
            Some(format!("{} claims (at most {MAX_CLAIMS})", claims.len()))
        } else if claims
            .iter()
            .any(|c| c.statement.trim().is_empty() || c.statement.len() > MAX_TEXT)
        {
            Some(format!("a claim's statement must be 1-{MAX_TEXT} bytes"))
        } else if claims.iter().any(|c| {
            c.limitations.len() > MAX_LIST || c.limitations.iter().any(|l| l.len() > MAX_TEXT)
        }) {
            Some(format!(
                "a claim has at most {MAX_LIST} limitations of at most {MAX_TEXT} bytes each"
            ))
        } else if claims
            .iter()
            .any(|c| c.evidence.len() > MAX_LIST || c.evidence.iter().any(|e| e.len() > MAX_ID))
        {
            Some(format!(
                "a claim cites at most {MAX_LIST} evidence ids of at most {MAX_ID} bytes each"
            ))
        } else {
            None
        };
        if let Some(m) = malformed {
            return Err(live.fail("propose", Failure::Malformed(m)));
        }
        Ok(claims
            .into_iter()
            .map(|c| ProposedClaim {
                statement: c.statement,
                strength: strength_from(c.strength),
                evidence: c.evidence,
                limitations: c.limitations,
            })
            .collect())
    }

    /// A fresh, configured instance.
    fn start(&self) -> Result<Live<ClaimMapperInstance>, PluginError> {
        let mut live = Live::start(&self.plugin, &self.info.name, &self.sandbox, |s| {
            self.pre.instantiate(s)
        })?;
        let json = &self.config_json;
        live.call_checked("configure", |s, i| i.configure(s, json))?;
        Ok(live)
    }
}

fn strength_to(s: ClaimStrength) -> wc::Strength {
    match s {
        ClaimStrength::BehavioralProfile => wc::Strength::BehavioralProfile,
        ClaimStrength::BlackBoxBehavioralDiff => wc::Strength::BlackBoxBehavioralDiff,
        ClaimStrength::DistributionalDiff => wc::Strength::DistributionalDiff,
        ClaimStrength::WeightDiff => wc::Strength::WeightDiff,
        ClaimStrength::ActivationDiagnostic => wc::Strength::ActivationDiagnostic,
        ClaimStrength::ModelChangeAudit => wc::Strength::ModelChangeAudit,
    }
}

fn strength_from(s: wc::Strength) -> ClaimStrength {
    match s {
        wc::Strength::BehavioralProfile => ClaimStrength::BehavioralProfile,
        wc::Strength::BlackBoxBehavioralDiff => ClaimStrength::BlackBoxBehavioralDiff,
        wc::Strength::DistributionalDiff => ClaimStrength::DistributionalDiff,
        wc::Strength::WeightDiff => ClaimStrength::WeightDiff,
        wc::Strength::ActivationDiagnostic => ClaimStrength::ActivationDiagnostic,
        wc::Strength::ModelChangeAudit => ClaimStrength::ModelChangeAudit,
    }
}

fn to_wire(e: &EvidenceSet) -> wc::EvidenceSet {
    use b::vauban::plugin::types::Polarity as W;
    let polarity = |p: super::scorer::Polarity| match p {
        super::scorer::Polarity::HigherIsBetter => W::HigherIsBetter,
        super::scorer::Polarity::LowerIsBetter => W::LowerIsBetter,
        super::scorer::Polarity::Neutral => W::Neutral,
    };
    let kind = kind_to_wire;
    wc::EvidenceSet {
        access_level: e.access_level.clone(),
        claim_strength: strength_to(e.claim_strength),
        kinds_in_both: e.kinds_in_both.iter().map(kind).collect(),
        deltas: e
            .deltas
            .iter()
            .map(|d| wc::MetricDelta {
                id: d.id.clone(),
                metric: d.metric.clone(),
                category: d.category.clone(),
                baseline_mean: d.baseline_mean,
                candidate_mean: d.candidate_mean,
                delta: d.delta,
                ci_low: d.ci_low,
                ci_high: d.ci_high,
                p_value: d.p_value,
                n: d.n,
                polarity: polarity(d.polarity),
                rests_on: d.rests_on.iter().map(kind).collect(),
            })
            .collect(),
        distribution: e
            .distribution
            .iter()
            .map(|d| wc::DistributionFinding {
                id: d.id.clone(),
                measure: d.measure.clone(),
                value: d.value,
                prompts: d.prompts,
            })
            .collect(),
        activations: e
            .activations
            .iter()
            .map(|a| wc::ActivationFinding {
                id: a.id.clone(),
                layer: a.layer,
                direction: a.direction.clone(),
                baseline_mean: a.baseline_mean,
                candidate_mean: a.candidate_mean,
                prompts: a.prompts,
            })
            .collect(),
        weights: e
            .weights
            .iter()
            .map(|w| wc::WeightFinding {
                id: w.id.clone(),
                layer: w.layer,
                matrix: w.matrix.clone(),
                baseline_l2_norm: w.baseline_l2_norm,
                candidate_l2_norm: w.candidate_l2_norm,
                summaries_differ: w.summaries_differ,
            })
            .collect(),
        interventions: e
            .interventions
            .iter()
            .map(|i| wc::InterventionRecord {
                id: i.id.clone(),
                side: i.side.clone(),
                prompt: i.prompt.clone(),
                mode: i.mode.clone(),
                layer: i.layer,
                direction: i.direction.clone(),
                alpha: i.alpha,
            })
            .collect(),
    }
}

/// The claim-mapper world's own binding of `artifact-kind`.
fn kind_to_wire(k: &ArtifactKind) -> b::vauban::plugin::types::ArtifactKind {
    use ArtifactKind as K;
    use b::vauban::plugin::types::ArtifactKind as W;
    match k {
        K::Text => W::Text,
        K::Tokens => W::Tokens,
        K::Logits => W::Logits,
        K::Logprobs => W::Logprobs,
        K::Activation => W::Activation,
        K::InterventionResult => W::InterventionResult,
        K::WeightSnapshot => W::WeightSnapshot,
        K::Metric => W::Metric,
        K::ReportEvidence => W::ReportEvidence,
        K::Profile => W::Profile,
    }
}
