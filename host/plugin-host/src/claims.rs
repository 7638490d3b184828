//! Claim mappers: the host hands over an evidence set and gets proposed
//! claims back. This module checks their shape; whether the evidence
//! supports them is the report's check.

use vauban_format::evidence::ClaimStrength;

use crate::trace::ArtifactKind;

pub use vauban_format::evidence::{
    ActivationEvidence, DistributionEvidence, EvidenceSet, InterventionEvidence, MetricDelta,
    ProposedClaim, Support, WeightEvidence,
};

use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::SandboxOptions;
use super::scorer::PluginInfo;
use super::wit::current::claims as b;
use super::wit::{ClaimMapperInstance, ClaimMapperPre};
use super::{Live, World, check_info, provisional_info, typed_pre};

use b::exports::vauban::plugin::claim_mapper as wc;

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
                judged_by: d.judged_by.clone(),
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
