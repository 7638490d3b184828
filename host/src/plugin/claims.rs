//! Claim mappers: the host hands over an evidence set and gets proposed
//! claims back. This module checks their shape; whether the evidence
//! supports them is the report's check (DESIGN.md section 5).

use serde::{Deserialize, Serialize};

use crate::report::access::ClaimStrength;
use crate::trace::ArtifactKind;

use super::bindings::claims as b;
use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::{SandboxOptions, SandboxState};
use super::scorer::PluginInfo;
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
}

/// What a claim mapper is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSet {
    pub access_level: String,
    pub claim_strength: ClaimStrength,
    pub kinds_in_both: Vec<ArtifactKind>,
    pub deltas: Vec<MetricDelta>,
    #[serde(default)]
    pub interventions: Vec<String>,
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
    pre: b::ClaimMapperPluginPre<SandboxState>,
    info: PluginInfo,
    config_json: String,
    sandbox: SandboxOptions,
}

/// Most claims one call may propose.
const MAX_CLAIMS: usize = 1000;

impl ClaimMapper {
    /// Configures and describes the plugin once, so a bad config fails here.
    pub fn new(
        plugin: Plugin,
        config_json: &str,
        sandbox: SandboxOptions,
    ) -> Result<ClaimMapper, PluginError> {
        plugin.expect_world(World::ClaimMapper)?;
        let pre = typed_pre(&plugin, b::ClaimMapperPluginPre::new)?;
        let mut m = ClaimMapper {
            info: provisional_info(&plugin),
            plugin,
            pre,
            config_json: config_json.to_owned(),
            sandbox,
        };
        let mut live = m.start()?;
        let info: PluginInfo = live
            .call("describe", |s, i| {
                i.vauban_plugin_claim_mapper().call_describe(s)
            })?
            .into();
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
        let claims = live.call_checked("propose", |s, i| {
            i.vauban_plugin_claim_mapper().call_propose(s, &wire)
        })?;
        let malformed = if claims.len() > MAX_CLAIMS {
            Some(format!("{} claims (at most {MAX_CLAIMS})", claims.len()))
        } else if claims
            .iter()
            .any(|c| c.statement.trim().is_empty() || c.statement.len() > 2048)
        {
            Some("a claim's statement must be 1-2048 bytes".to_owned())
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
    fn start(&self) -> Result<Live<b::ClaimMapperPlugin>, PluginError> {
        let mut live = Live::start(&self.plugin, &self.info.name, &self.sandbox, |s| {
            self.pre.instantiate(s)
        })?;
        let json = &self.config_json;
        live.call_checked("configure", |s, i| {
            i.vauban_plugin_claim_mapper().call_configure(s, json)
        })?;
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
    use ArtifactKind as K;
    use b::vauban::plugin::types::ArtifactKind as W;
    let kind = |k: &ArtifactKind| match k {
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
    };
    let polarity = |p: super::scorer::Polarity| match p {
        super::scorer::Polarity::HigherIsBetter => "higher-is-better",
        super::scorer::Polarity::LowerIsBetter => "lower-is-better",
        super::scorer::Polarity::Neutral => "neutral",
    };
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
                polarity: polarity(d.polarity).to_owned(),
            })
            .collect(),
        interventions: e.interventions.clone(),
    }
}
