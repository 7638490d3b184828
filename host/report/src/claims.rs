//! The epistemic rule, enforced: every claim a claim
//! mapper proposes is checked against the evidence set it was shown. Cited
//! evidence must exist; a claim's strength must be within what the traces
//! allow (the access cap and the kinds in both models' traces) *and* within
//! what the evidence it cites supports: a distributional claim cites
//! distributional evidence, an activation claim activation evidence, a
//! weight claim weight evidence, and a causal claim (model_change_audit)
//! cites intervention records and is scoped to exactly what they record. A
//! failing claim is narrowed (downgraded, with each reason) or rejected; it
//! never passes silently.

use std::collections::{BTreeSet, HashMap, HashSet};
pub use vauban_format::document::{CausalScope, ClaimStatus};

use serde::Serialize;

use crate::evidence::{EvidenceSet, ProposedClaim, Support};
use crate::trace::ArtifactKind;

use super::access::ClaimStrength;

/// A claim after the host's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckedClaim {
    pub statement: String,
    /// The strength the host allows (the proposed one when accepted); none
    /// when the claim is rejected.
    pub strength: Option<ClaimStrength>,
    pub proposed_strength: ClaimStrength,
    pub status: ClaimStatus,
    /// The cited evidence that exists.
    pub evidence: Vec<String>,
    pub limitations: Vec<String>,
    /// Why the claim was downgraded or rejected, one line each.
    pub reasons: Vec<String>,
    /// When the claim cites intervention records: what they cover.
    pub scope: Option<CausalScope>,
}

impl CheckedClaim {
    /// The claim as the report lists it: the check's result and the mapper
    /// that proposed it (the check itself does not depend on who did).
    pub fn proposed_by(self, mapper: &str) -> crate::document::ReportClaim {
        crate::document::ReportClaim {
            statement: self.statement,
            strength: self.strength,
            proposed_strength: self.proposed_strength,
            status: self.status,
            evidence: self.evidence,
            limitations: self.limitations,
            reasons: self.reasons,
            scope: self.scope,
            mapper: mapper.to_owned(),
        }
    }
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

/// The cited evidence a strength rests on: every inner list needs one of
/// its kinds among the claim's citations.
fn support_needed(s: ClaimStrength) -> &'static [&'static [Support]] {
    use Support as S;
    match s {
        ClaimStrength::BehavioralProfile => &[],
        ClaimStrength::BlackBoxBehavioralDiff => {
            &[&[S::Behavioral, S::Distributional, S::Weight, S::Activation]]
        }
        ClaimStrength::DistributionalDiff => &[&[S::Distributional]],
        ClaimStrength::WeightDiff => &[&[S::Weight]],
        ClaimStrength::ActivationDiagnostic => &[&[S::Activation]],
        ClaimStrength::ModelChangeAudit => &[&[S::Weight], &[S::Activation], &[S::Intervention]],
    }
}

/// What [`support_needed`] asks for, in words.
fn support_words(s: ClaimStrength) -> &'static str {
    match s {
        ClaimStrength::BehavioralProfile => "any evidence",
        ClaimStrength::BlackBoxBehavioralDiff => {
            "a paired comparison (a metric delta, a distribution shift, an activation or weight finding)"
        }
        ClaimStrength::DistributionalDiff => {
            "distributional evidence (a KL finding, or a metric computed from logprobs or logits)"
        }
        ClaimStrength::WeightDiff => {
            "weight evidence (a weight finding, or a metric computed from weight snapshots)"
        }
        ClaimStrength::ActivationDiagnostic => {
            "activation evidence (an activation finding, or a metric computed from activations)"
        }
        ClaimStrength::ModelChangeAudit => {
            "weight evidence, activation evidence and an intervention record (a causal claim)"
        }
    }
}

fn supported(s: ClaimStrength, cited: &BTreeSet<Support>) -> bool {
    support_needed(s)
        .iter()
        .all(|any| any.iter().any(|k| cited.contains(k)))
}

fn weaker(s: ClaimStrength) -> ClaimStrength {
    let i = ClaimStrength::ALL.iter().position(|x| *x == s).unwrap_or(0);
    ClaimStrength::ALL[i.saturating_sub(1)]
}

/// Checks one proposed claim against the evidence set it was made from.
pub fn check(claim: &ProposedClaim, evidence: &EvidenceSet) -> CheckedClaim {
    check_indexed(claim, evidence, &evidence.supports_by_id())
}

/// Checks every claim a mapper proposed; the evidence is indexed once, so
/// the work is linear in the claims' citations, however many there are.
pub fn check_all(claims: &[ProposedClaim], evidence: &EvidenceSet) -> Vec<CheckedClaim> {
    let index = evidence.supports_by_id();
    claims
        .iter()
        .map(|c| check_indexed(c, evidence, &index))
        .collect()
}

fn check_indexed(
    claim: &ProposedClaim,
    evidence: &EvidenceSet,
    index: &HashMap<&str, Vec<Support>>,
) -> CheckedClaim {
    let mut reasons = Vec::new();
    let mut cited = Vec::new();
    let mut seen = HashSet::new();
    let mut supports = BTreeSet::new();
    for id in &claim.evidence {
        match index.get(id.as_str()) {
            Some(s) => {
                supports.extend(s.iter().copied());
                if seen.insert(id.as_str()) {
                    cited.push(id.clone());
                }
            }
            None => reasons.push(format!(
                "cites `{id}`, which the evidence set does not contain"
            )),
        }
    }
    let rejected = |reasons: Vec<String>| CheckedClaim {
        statement: claim.statement.clone(),
        strength: None,
        proposed_strength: claim.strength,
        status: ClaimStatus::Rejected,
        evidence: Vec::new(),
        limitations: claim.limitations.clone(),
        reasons,
        scope: None,
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
        let lower = weaker(strength);
        reasons.push(format!(
            "{strength} needs {} in both models' traces, which they lack; lowered to {lower}",
            missing.join(" and ")
        ));
        strength = lower;
    }
    // What the claim itself cites: the strongest level its evidence
    // supports that the traces also hold (the ladder does not nest: a
    // weight claim is below an activation claim but needs other kinds).
    if !supported(strength, &supports) {
        let from = strength;
        while strength > ClaimStrength::BehavioralProfile
            && !(supported(strength, &supports) && kinds_met(strength, &evidence.kinds_in_both))
        {
            strength = weaker(strength);
        }
        let kinds: Vec<&str> = supports.iter().map(|s| s.as_str()).collect();
        reasons.push(format!(
            "{from} needs cited {}; the claim cites only {} evidence; lowered to {strength}, the strongest level its evidence supports",
            support_words(from),
            kinds.join(" and ")
        ));
    }
    let scope = causal_scope(&cited, evidence);
    let mut limitations = claim.limitations.clone();
    if let Some(s) = &scope {
        limitations.push(s.describe());
    }
    limitations.extend(judged(&cited, evidence));
    CheckedClaim {
        statement: claim.statement.clone(),
        strength: Some(strength),
        proposed_strength: claim.strength,
        status: if reasons.is_empty() {
            ClaimStatus::Accepted
        } else {
            ClaimStatus::Downgraded
        },
        evidence: cited,
        limitations,
        reasons,
        scope,
    }
}

/// One limitation per judge behind the cited metrics: their values are a
/// model's verdicts on the replies, as accurate as that judge is.
fn judged(cited: &[String], evidence: &EvidenceSet) -> Vec<String> {
    // judge → the metrics (not their categories) it scored, in order.
    let mut by_judge: Vec<(&str, Vec<&str>)> = Vec::new();
    for d in evidence.deltas.iter().filter(|d| cited.contains(&d.id)) {
        for j in &d.judged_by {
            let i = match by_judge.iter().position(|(name, _)| name == j) {
                Some(i) => i,
                None => {
                    by_judge.push((j, Vec::new()));
                    by_judge.len() - 1
                }
            };
            if !by_judge[i].1.contains(&d.metric.as_str()) {
                by_judge[i].1.push(&d.metric);
            }
        }
    }
    by_judge
        .into_iter()
        .map(|(judge, metrics)| {
            format!(
                "{} judged by the judge {judge}: a model's verdicts on the replies, as accurate as that judge is (see the report's judges)",
                match metrics.as_slice() {
                    [one] => format!("{one} is"),
                    many => format!("{} are", many.join(", ")),
                }
            )
        })
        .collect()
}

/// The union of what the cited intervention records cover, if any are cited.
fn causal_scope(cited: &[String], evidence: &EvidenceSet) -> Option<CausalScope> {
    let cited: HashSet<&str> = cited.iter().map(String::as_str).collect();
    let records: Vec<_> = evidence
        .interventions
        .iter()
        .filter(|i| cited.contains(i.id.as_str()))
        .collect();
    if records.is_empty() {
        return None;
    }
    let mut sides = BTreeSet::new();
    let mut modes = BTreeSet::new();
    let mut layers = BTreeSet::new();
    let mut directions = BTreeSet::new();
    let mut prompts = BTreeSet::new();
    for r in records {
        sides.insert(r.side.clone());
        modes.insert(r.mode.clone());
        layers.extend(r.layer);
        directions.extend(r.direction.clone());
        prompts.insert(r.prompt.clone());
    }
    Some(CausalScope {
        sides: sides.into_iter().collect(),
        modes: modes.into_iter().collect(),
        layers: layers.into_iter().collect(),
        directions: directions.into_iter().collect(),
        prompts: prompts.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Polarity;
    use crate::evidence::{
        ActivationEvidence, DistributionEvidence, InterventionEvidence, MetricDelta, WeightEvidence,
    };

    fn delta(id: &str, rests_on: &[ArtifactKind]) -> MetricDelta {
        MetricDelta {
            id: id.into(),
            metric: id.into(),
            category: None,
            baseline_mean: 0.9,
            candidate_mean: 0.1,
            delta: -0.8,
            ci_low: None,
            ci_high: None,
            p_value: Some(0.001),
            n: 20,
            polarity: Polarity::Neutral,
            rests_on: rests_on.to_vec(),
            judged_by: Vec::new(),
        }
    }

    fn intervention(id: &str, layer: u32, prompt: &str) -> InterventionEvidence {
        InterventionEvidence {
            id: id.into(),
            side: "candidate".into(),
            prompt: prompt.into(),
            mode: "subtract".into(),
            layer: Some(layer),
            direction: Some("d.safetensors:direction".into()),
            alpha: Some(1.0),
        }
    }

    /// A set with a behavioural delta `d1`, a logprob delta `lp`, KL `kl`,
    /// an activation finding `act`, a weight finding `w` and intervention
    /// records named by `interventions`.
    fn evidence(cap: ClaimStrength, kinds: &[ArtifactKind], interventions: &[&str]) -> EvidenceSet {
        EvidenceSet {
            access_level: "test".into(),
            claim_strength: cap,
            kinds_in_both: kinds.to_vec(),
            deltas: vec![
                delta("d1", &[ArtifactKind::Text]),
                delta("lp", &[ArtifactKind::Logprobs]),
            ],
            distribution: vec![DistributionEvidence {
                id: "kl".into(),
                measure: "first token".into(),
                value: 0.1,
                prompts: 20,
            }],
            activations: vec![ActivationEvidence {
                id: "act".into(),
                layer: 3,
                direction: "d".into(),
                baseline_mean: 1.0,
                candidate_mean: 0.0,
                prompts: 20,
            }],
            weights: vec![WeightEvidence {
                id: "w".into(),
                layer: 3,
                matrix: "ffn_down".into(),
                baseline_l2_norm: 2.0,
                candidate_l2_norm: 1.9,
                summaries_differ: true,
            }],
            interventions: interventions
                .iter()
                .enumerate()
                .map(|(k, id)| intervention(id, 3 + k as u32, &format!("p{k}")))
                .collect(),
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

    const ALL_KINDS: [ArtifactKind; 4] = [
        ArtifactKind::Text,
        ArtifactKind::Logprobs,
        ArtifactKind::WeightSnapshot,
        ArtifactKind::Activation,
    ];

    #[test]
    fn a_claim_resting_on_a_judged_metric_names_its_judge() {
        let mut e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &[],
        );
        e.deltas[0].judged_by = vec!["referee".into()];
        let judged = check(&claim(ClaimStrength::BlackBoxBehavioralDiff, &["d1"]), &e);
        assert_eq!(judged.status, ClaimStatus::Accepted, "{judged:?}");
        assert_eq!(judged.limitations.len(), 1, "{judged:?}");
        assert!(
            judged.limitations[0].contains("d1 is judged by the judge referee"),
            "{:?}",
            judged.limitations
        );
        // A claim citing only observed metrics carries no such limitation.
        let observed = check(&claim(ClaimStrength::BehavioralProfile, &["lp"]), &e);
        assert!(observed.limitations.is_empty(), "{observed:?}");
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
        assert_eq!(c.scope, None);
    }

    #[test]
    fn text_only_evidence_never_yields_more_than_a_black_box_diff() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &["iv1"],
        );
        for s in ClaimStrength::ALL {
            let c = check(&claim(s, &["d1", "iv1", "act", "w", "kl"]), &e);
            assert!(
                c.strength <= Some(ClaimStrength::BlackBoxBehavioralDiff),
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
        assert_eq!(c.strength, Some(ClaimStrength::BlackBoxBehavioralDiff));
        assert_eq!(c.proposed_strength, ClaimStrength::ModelChangeAudit);
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

    /// The review's cases: on a run whose traces hold everything, a claim is
    /// bounded by the kind of evidence it cites.
    #[test]
    fn a_claim_is_bounded_by_the_kind_of_evidence_it_cites() {
        use ClaimStrength as S;
        let e = evidence(S::ModelChangeAudit, &ALL_KINDS, &["iv1"]);
        let cases: [(S, &[&str], S); 9] = [
            // A behavioural metric and one intervention record are no audit.
            (
                S::ModelChangeAudit,
                &["d1", "iv1"],
                S::BlackBoxBehavioralDiff,
            ),
            // A refusal rate is no activation diagnostic.
            (S::ActivationDiagnostic, &["d1"], S::BlackBoxBehavioralDiff),
            // An output-length metric is no distributional diff.
            (S::DistributionalDiff, &["d1"], S::BlackBoxBehavioralDiff),
            (S::DistributionalDiff, &["lp"], S::DistributionalDiff),
            (S::DistributionalDiff, &["kl"], S::DistributionalDiff),
            (S::ActivationDiagnostic, &["w"], S::WeightDiff),
            (S::ActivationDiagnostic, &["act"], S::ActivationDiagnostic),
            // Without an intervention record, weights and activations make
            // an activation diagnostic, not a causal audit.
            (S::ModelChangeAudit, &["act", "w"], S::ActivationDiagnostic),
            (
                S::ModelChangeAudit,
                &["act", "w", "iv1"],
                S::ModelChangeAudit,
            ),
        ];
        for (proposed, cites, allowed) in cases {
            let c = check(&claim(proposed, cites), &e);
            assert_eq!(
                c.strength,
                Some(allowed),
                "{proposed} citing {cites:?}: {c:?}"
            );
            assert_eq!(
                c.status == ClaimStatus::Accepted,
                proposed == allowed,
                "{c:?}"
            );
            if proposed != allowed {
                assert!(
                    c.reasons
                        .iter()
                        .any(|r| r.contains("the strongest level its evidence supports")),
                    "{:?}",
                    c.reasons
                );
            }
        }
    }

    #[test]
    fn lowering_to_what_a_claim_cites_never_lands_on_kinds_the_traces_lack() {
        use ArtifactKind as K;
        // Activations in both traces, weight snapshots not: a claim citing
        // only a weight finding cannot be a weight diff.
        let e = evidence(
            ClaimStrength::ActivationDiagnostic,
            &[K::Text, K::Logprobs, K::Activation],
            &[],
        );
        let c = check(&claim(ClaimStrength::ActivationDiagnostic, &["w"]), &e);
        assert_eq!(
            c.strength,
            Some(ClaimStrength::BlackBoxBehavioralDiff),
            "{c:?}"
        );
        // Traces with no text at all: the walk ends at the bottom, not in a loop.
        let e = evidence(ClaimStrength::ModelChangeAudit, &[K::Tokens], &[]);
        let c = check(&claim(ClaimStrength::ModelChangeAudit, &["w"]), &e);
        assert_eq!(c.strength, Some(ClaimStrength::BehavioralProfile), "{c:?}");
    }

    #[test]
    fn a_metric_supports_every_kind_its_scorer_read() {
        let mut e = evidence(ClaimStrength::ModelChangeAudit, &ALL_KINDS, &[]);
        e.deltas.push(delta(
            "both",
            &[ArtifactKind::Activation, ArtifactKind::Logprobs],
        ));
        for s in [
            ClaimStrength::DistributionalDiff,
            ClaimStrength::ActivationDiagnostic,
        ] {
            let c = check(&claim(s, &["both"]), &e);
            assert_eq!(
                (c.status, c.strength),
                (ClaimStatus::Accepted, Some(s)),
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_causal_claim_is_scoped_to_the_records_it_cites() {
        let e = evidence(
            ClaimStrength::ModelChangeAudit,
            &ALL_KINDS,
            &["iv1", "iv2", "iv3"],
        );
        let c = check(
            &claim(ClaimStrength::ModelChangeAudit, &["act", "w", "iv1", "iv3"]),
            &e,
        );
        assert_eq!(c.status, ClaimStatus::Accepted);
        let scope = c.scope.expect("a scope");
        assert_eq!(scope.layers, [3, 5]);
        assert_eq!(scope.prompts, ["p0", "p2"]);
        assert_eq!(scope.modes, ["subtract"]);
        assert_eq!(scope.sides, ["candidate"]);
        assert!(
            c.limitations
                .iter()
                .any(|l| l.contains("at layer(s) 3, 5") && l.contains("on 2 prompt(s)")),
            "{:?}",
            c.limitations
        );
    }

    #[test]
    fn the_traces_kinds_still_bound_a_claim_whatever_it_cites() {
        use ArtifactKind as K;
        // A cap that claims activations while the kinds lack them is not trusted.
        let e = evidence(
            ClaimStrength::ActivationDiagnostic,
            &[K::Text, K::Logprobs],
            &[],
        );
        let c = check(
            &claim(ClaimStrength::ActivationDiagnostic, &["act", "lp"]),
            &e,
        );
        assert_eq!(c.strength, Some(ClaimStrength::DistributionalDiff));
        assert!(c.reasons[0].contains("needs activation"), "{:?}", c.reasons);
    }

    #[test]
    fn claims_without_existing_evidence_or_text_are_rejected_with_no_strength() {
        let e = evidence(
            ClaimStrength::BlackBoxBehavioralDiff,
            &[ArtifactKind::Text],
            &[],
        );
        let c = check(&claim(ClaimStrength::BehavioralProfile, &["ghost"]), &e);
        assert_eq!(c.status, ClaimStatus::Rejected);
        assert_eq!(c.strength, None);
        assert_eq!(c.proposed_strength, ClaimStrength::BehavioralProfile);
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
