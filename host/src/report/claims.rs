//! The epistemic rule, enforced (DESIGN.md section 5): every claim a claim
//! mapper proposes is checked against the evidence set it was shown. Cited
//! evidence must exist; a claim's strength must be within what the traces
//! allow and what its kinds of evidence support; a causal claim must cite
//! an intervention record. A failing claim is narrowed (downgraded, with
//! each reason) or rejected; it never passes silently.

use serde::Serialize;

use crate::plugin::claims::{EvidenceSet, ProposedClaim};
use crate::trace::ArtifactKind;

use super::access::ClaimStrength;

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

/// A claim after the host's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckedClaim {
    pub statement: String,
    /// The strength the host allows (the proposed one when accepted).
    pub strength: ClaimStrength,
    pub proposed_strength: ClaimStrength,
    pub status: ClaimStatus,
    /// The cited evidence that exists.
    pub evidence: Vec<String>,
    pub limitations: Vec<String>,
    /// Why the claim was downgraded or rejected, one line each.
    pub reasons: Vec<String>,
}

/// The artifact kinds (in both models' traces) a strength needs, beyond the
/// access level's cap: any one of each inner list.
fn kinds_needed(s: ClaimStrength) -> &'static [&'static [ArtifactKind]] {
    use ArtifactKind as K;
    match s {
        ClaimStrength::BehavioralProfile | ClaimStrength::BlackBoxBehavioralDiff => &[&[K::Text]],
        ClaimStrength::DistributionalDiff => &[&[K::Logprobs, K::Logits]],
        ClaimStrength::WeightDiff => &[&[K::WeightSnapshot]],
        ClaimStrength::ActivationDiagnostic => &[&[K::Activation]],
        ClaimStrength::ModelChangeAudit => &[&[K::WeightSnapshot], &[K::Activation]],
    }
}

fn kinds_met(s: ClaimStrength, have: &[ArtifactKind]) -> bool {
    kinds_needed(s)
        .iter()
        .all(|any| any.iter().any(|k| have.contains(k)))
}

/// Checks one proposed claim against the evidence set it was made from.
pub fn check(claim: &ProposedClaim, evidence: &EvidenceSet) -> CheckedClaim {
    let mut reasons = Vec::new();
    let known = |id: &str| {
        evidence.deltas.iter().any(|d| d.id == id) || evidence.interventions.iter().any(|i| i == id)
    };
    let mut cited = Vec::new();
    for id in &claim.evidence {
        if known(id) {
            if !cited.contains(id) {
                cited.push(id.clone());
            }
        } else {
            reasons.push(format!(
                "cites `{id}`, which the evidence set does not contain"
            ));
        }
    }
    let rejected = |reasons: Vec<String>| CheckedClaim {
        statement: claim.statement.clone(),
        strength: claim.strength,
        proposed_strength: claim.strength,
        status: ClaimStatus::Rejected,
        evidence: Vec::new(),
        limitations: claim.limitations.clone(),
        reasons,
    };
    if claim.statement.trim().is_empty() {
        reasons.push("the statement is empty".into());
        return rejected(reasons);
    }
    if cited.is_empty() {
        reasons.push("no cited evidence exists: a claim must rest on evidence".into());
        return rejected(reasons);
    }

    let mut strength = claim.strength;
    if strength > evidence.claim_strength {
        reasons.push(format!(
            "{strength} needs {}; these traces ({}) allow at most {}",
            strength.needs(),
            evidence.access_level,
            evidence.claim_strength
        ));
        strength = evidence.claim_strength;
    }
    while strength > ClaimStrength::BehavioralProfile
        && !kinds_met(strength, &evidence.kinds_in_both)
    {
        let missing: Vec<&str> = kinds_needed(strength)
            .iter()
            .filter(|any| !any.iter().any(|k| evidence.kinds_in_both.contains(k)))
            .map(|any| any[0].as_str())
            .collect();
        let weaker = ClaimStrength::ALL[ClaimStrength::ALL
            .iter()
            .position(|s| *s == strength)
            .unwrap_or(1)
            - 1];
        reasons.push(format!(
            "{strength} needs {} in both models' traces, which they lack; lowered to {weaker}",
            missing.join(" and ")
        ));
        strength = weaker;
    }
    if strength == ClaimStrength::ModelChangeAudit
        && !cited.iter().any(|id| evidence.interventions.contains(id))
    {
        reasons.push(
            "a causal claim (model_change_audit) needs an intervention record among its evidence; lowered to activation_diagnostic"
                .into(),
        );
        strength = ClaimStrength::ActivationDiagnostic;
    }
    CheckedClaim {
        statement: claim.statement.clone(),
        strength,
        proposed_strength: claim.strength,
        status: if reasons.is_empty() {
            ClaimStatus::Accepted
        } else {
            ClaimStatus::Downgraded
        },
        evidence: cited,
        limitations: claim.limitations.clone(),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::claims::MetricDelta;
    use crate::plugin::scorer::Polarity;

    fn evidence(cap: ClaimStrength, kinds: &[ArtifactKind], interventions: &[&str]) -> EvidenceSet {
        EvidenceSet {
            access_level: "test".into(),
            claim_strength: cap,
            kinds_in_both: kinds.to_vec(),
            deltas: vec![MetricDelta {
                id: "d1".into(),
                metric: "refusal_rate".into(),
                category: None,
                baseline_mean: 0.9,
                candidate_mean: 0.1,
                delta: -0.8,
                ci_low: None,
                ci_high: None,
                p_value: Some(0.001),
                n: 20,
                polarity: Polarity::Neutral,
            }],
            interventions: interventions.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn claim(strength: ClaimStrength, cites: &[&str]) -> ProposedClaim {
        ProposedClaim {
            statement: "refusal fell".into(),
            strength,
            evidence: cites.iter().map(|s| s.to_string()).collect(),
            limitations: vec![],
        }
    }

    #[test]
    fn a_claim_within_the_evidence_is_accepted() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &[],
        );
        let c = check(&claim(ClaimStrength::BlackBoxBehavioralDiff, &["d1"]), &e);
        assert_eq!(c.status, ClaimStatus::Accepted);
        assert!(c.reasons.is_empty());
    }

    #[test]
    fn text_only_evidence_never_yields_more_than_a_black_box_diff() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &["iv1"],
        );
        for s in ClaimStrength::ALL {
            let c = check(&claim(s, &["d1", "iv1"]), &e);
            assert!(
                c.strength <= ClaimStrength::BlackBoxBehavioralDiff,
                "{s}: {c:?}"
            );
            assert_eq!(
                c.status == ClaimStatus::Downgraded,
                s > ClaimStrength::BlackBoxBehavioralDiff
            );
        }
    }

    #[test]
    fn an_overclaim_is_downgraded_with_every_reason() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &[],
        );
        let c = check(
            &claim(ClaimStrength::ModelChangeAudit, &["d1", "no-such-evidence"]),
            &e,
        );
        assert_eq!(c.status, ClaimStatus::Downgraded);
        assert_eq!(c.strength, ClaimStrength::BlackBoxBehavioralDiff);
        assert_eq!(c.evidence, ["d1"]);
        assert!(
            c.reasons[0].contains("`no-such-evidence`"),
            "{:?}",
            c.reasons
        );
        assert!(
            c.reasons[1].contains("allow at most black_box_behavioral_diff"),
            "{:?}",
            c.reasons
        );
    }

    #[test]
    fn kinds_and_interventions_bound_strong_claims() {
        use ArtifactKind as K;
        // The cap allows an audit, but without an intervention record cited
        // the causal claim is lowered.
        let all = [K::Text, K::Logprobs, K::WeightSnapshot, K::Activation];
        let e = evidence(ClaimStrength::ModelChangeAudit, &all, &["iv1"]);
        let c = check(&claim(ClaimStrength::ModelChangeAudit, &["d1"]), &e);
        assert_eq!(c.strength, ClaimStrength::ActivationDiagnostic);
        let c = check(&claim(ClaimStrength::ModelChangeAudit, &["d1", "iv1"]), &e);
        assert_eq!(
            (c.status, c.strength),
            (ClaimStatus::Accepted, ClaimStrength::ModelChangeAudit)
        );
        // A cap that claims activations while the kinds lack them is not trusted.
        let e = evidence(
            ClaimStrength::ActivationDiagnostic,
            &[K::Text, K::Logprobs],
            &[],
        );
        let c = check(&claim(ClaimStrength::ActivationDiagnostic, &["d1"]), &e);
        assert_eq!(c.strength, ClaimStrength::DistributionalDiff);
        assert!(c.reasons[0].contains("needs activation"), "{:?}", c.reasons);
    }

    #[test]
    fn claims_without_existing_evidence_or_text_are_rejected() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &[],
        );
        let c = check(&claim(ClaimStrength::BehavioralProfile, &["ghost"]), &e);
        assert_eq!(c.status, ClaimStatus::Rejected);
        assert!(
            c.reasons
                .iter()
                .any(|r| r.contains("no cited evidence exists"))
        );
        let mut empty = claim(ClaimStrength::BehavioralProfile, &["d1"]);
        empty.statement = "  ".into();
        assert_eq!(check(&empty, &e).status, ClaimStatus::Rejected);
    }
}
