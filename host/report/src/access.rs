//! The access level and the strongest claim a set of traces allows
//!.
//!
//! The level is computed from the artifacts the traces actually hold, never
//! from what a config asked for or a backend promised. A kind counts as
//! evidence on a side only when every trace on that side holds it; partial
//! coverage narrows the claim and is reported in words, and an artifact
//! that its own executor declares it cannot produce is refused outright.

use std::collections::{BTreeMap, BTreeSet};

pub use vauban_format::document::{Access, InterventionRef, KindCoverage, Side, Unclaimable};
pub use vauban_format::evidence::{AccessLevel, ClaimStrength};

use crate::text::excerpt;
use crate::trace::{ArtifactKind, SupportLevel, Trace, TraceError, TraceRequest};

/// The traces to judge: one model's, or a baseline's and a candidate's
/// paired by position (trace `i` of each side ran the same prompt).
#[derive(Debug, Clone, Copy)]
pub enum Evidence<'a> {
    /// Traces of one model.
    Single(&'a [&'a Trace]),
    /// Traces of two models on the same prompts, in the same order.
    Paired {
        baseline: &'a [&'a Trace],
        candidate: &'a [&'a Trace],
    },
}

/// Why an access level cannot be computed from the given traces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// [`Evidence::Single`] with no traces.
    #[error("no traces were given; record at least one trace before asking what it allows")]
    NoTraces,
    /// One side of [`Evidence::Paired`] is empty.
    #[error(
        "the {side} side has no traces; record the {side} model on the same prompts as the other side"
    )]
    EmptySide { side: Side },
    /// The sides hold different numbers of traces, so they cannot be paired.
    #[error(
        "the baseline has {baseline} traces but the candidate has {candidate}; traces are paired by \
         position, so give both sides one trace per prompt, in the same order"
    )]
    UnequalSides { baseline: usize, candidate: usize },
    /// The traces at one position ran different prompts.
    #[error(
        "baseline trace `{baseline}` and candidate trace `{candidate}` (pair {index}, 0-based) are not \
         the same prompt: {detail}; traces are paired by position, so list both sides in the same \
         prompt order"
    )]
    PromptMismatch {
        /// The 0-based position of the pair.
        index: usize,
        baseline: String,
        candidate: String,
        /// What differs.
        detail: String,
    },
    /// A trace holds an artifact its own executor declares it cannot produce.
    #[error(
        "trace `{trace}` holds artifact `{artifact}` of kind `{kind}`, which its executor \
         `{executor}` does not declare as supported; evidence an executor says it cannot produce \
         is not counted: fix the executor's capability declaration or re-record the trace"
    )]
    UndeclaredEvidence {
        trace: String,
        artifact: String,
        kind: ArtifactKind,
        executor: String,
    },
    /// A trace breaks the trace rules.
    #[error("{side} {source}")]
    InvalidTrace { side: Side, source: TraceError },
    /// Paired traces that reach no access level at all.
    #[error(
        "the paired traces hold no evidence the models can be compared on ({detail}); record text \
         outputs (`text` in the request's `observe`) of both models on the same prompts"
    )]
    NoEvidence {
        /// What is missing, in words.
        detail: String,
    },
}

/// Computes what `evidence` allows a report to claim, from the artifacts the
/// traces hold.
///
/// Every trace is checked first: it must hold no artifact its executor
/// declares unsupported, and it must pass [`Trace::validate`]. Paired sides
/// must be non-empty, of equal length, and run the same prompt at each
/// position.
pub fn access_from_evidence(evidence: Evidence<'_>) -> Result<Access, AccessError> {
    let sides: Vec<(Side, &[&Trace])> = match evidence {
        Evidence::Single(traces) => {
            if traces.is_empty() {
                return Err(AccessError::NoTraces);
            }
            vec![(Side::Snapshot, traces)]
        }
        Evidence::Paired {
            baseline,
            candidate,
        } => {
            for (side, traces) in [(Side::Baseline, baseline), (Side::Candidate, candidate)] {
                if traces.is_empty() {
                    return Err(AccessError::EmptySide { side });
                }
            }
            if baseline.len() != candidate.len() {
                return Err(AccessError::UnequalSides {
                    baseline: baseline.len(),
                    candidate: candidate.len(),
                });
            }
            vec![(Side::Baseline, baseline), (Side::Candidate, candidate)]
        }
    };
    for &(side, traces) in &sides {
        for trace in traces {
            check_trace(side, trace)?;
        }
    }
    if let [(_, baseline), (_, candidate)] = sides.as_slice() {
        for (index, (b, c)) in baseline.iter().zip(candidate.iter()).enumerate() {
            if let Some(detail) = prompt_difference(&b.request, &c.request) {
                return Err(AccessError::PromptMismatch {
                    index,
                    baseline: b.id.clone(),
                    candidate: c.id.clone(),
                    detail,
                });
            }
        }
    }

    let paired = sides.len() == 2;
    let mut missing_evidence = Vec::new();
    let level = if paired {
        let unmet: Vec<Requirement> = [TEXT, DISTRIBUTION, WEIGHTS, ACTIVATIONS]
            .into_iter()
            .filter(|r| !r.met(&sides))
            .collect();
        let level = AccessLevel::ALL.into_iter().rev().find(|l| {
            !requirements(*l).is_empty() && requirements(*l).iter().all(|r| !unmet.contains(r))
        });
        let gaps: Vec<String> = unmet.iter().flat_map(|r| r.gaps(&sides)).collect();
        let Some(level) = level else {
            return Err(AccessError::NoEvidence {
                detail: gaps.join("; "),
            });
        };
        missing_evidence.extend(gaps);
        level
    } else {
        missing_evidence
            .push("no paired candidate traces: a change between models cannot be claimed".into());
        if !TEXT.met(&sides) {
            missing_evidence.extend(TEXT.gaps(&sides));
        }
        AccessLevel::SingleSnapshot
    };

    let interventions = interventions(&sides);
    let causal_scope = match interventions.len() {
        0 => {
            missing_evidence.push("no intervention was run: causal claims are not allowed".into());
            None
        }
        1 => Some("causal claims limited to the 1 recorded intervention".into()),
        n => Some(format!(
            "causal claims limited to the {n} recorded interventions"
        )),
    };

    // Each claim needs its own evidence: the ladder caps the strength, but
    // activations alone do not allow a distributional claim below them.
    let met = |strength: ClaimStrength| match strength {
        ClaimStrength::BehavioralProfile => true,
        _ => {
            paired
                && requirements(strength.required_level())
                    .iter()
                    .all(|r| r.met(&sides))
        }
    };
    let (can_claim, cannot): (Vec<ClaimStrength>, Vec<ClaimStrength>) =
        ClaimStrength::ALL.into_iter().partition(|&s| met(s));
    let cannot_claim = cannot
        .into_iter()
        .map(|strength| Unclaimable {
            strength,
            reason: unclaimable_reason(strength, &sides),
        })
        .collect();
    Ok(Access {
        level,
        claim_strength: level.strongest_claim(),
        can_claim,
        cannot_claim,
        missing_evidence,
        coverage: coverage(&sides),
        interventions,
        causal_scope,
    })
}

/// Refuses evidence the trace's executor disowns, then the trace's own rules.
/// The capability check runs first: [`Trace::validate`] would report the
/// same artifact among its problems, but this is the error to act on.
fn check_trace(side: Side, trace: &Trace) -> Result<(), AccessError> {
    let caps = &trace.capabilities;
    if let Some(a) = trace
        .artifacts
        .iter()
        .find(|a| caps.support(a.kind) == SupportLevel::Unsupported)
    {
        return Err(AccessError::UndeclaredEvidence {
            trace: trace.id.clone(),
            artifact: a.id.clone(),
            kind: a.kind,
            executor: caps.executor.clone(),
        });
    }
    trace
        .validate()
        .map_err(|source| AccessError::InvalidTrace { side, source })
}

/// Why two requests are not the same prompt, or `None` when they are. The
/// suite's prompt ids decide when both have one; otherwise the texts, then
/// the token ids.
fn prompt_difference(b: &TraceRequest, c: &TraceRequest) -> Option<String> {
    let text = |r: &TraceRequest| r.text.clone().filter(|t| !t.is_empty());
    let ids = |r: &TraceRequest| r.token_ids.clone().filter(|t| !t.is_empty());
    if let (Some(x), Some(y)) = (&b.prompt_id, &c.prompt_id) {
        return (x != y).then(|| format!("prompt ids `{x}` and `{y}` differ"));
    }
    if let (Some(x), Some(y)) = (text(b), text(c)) {
        return (x != y).then(|| {
            format!(
                "prompt texts {} and {} differ",
                excerpt(&x, 60),
                excerpt(&y, 60)
            )
        });
    }
    if let (Some(x), Some(y)) = (ids(b), ids(c)) {
        return (x != y).then(|| {
            format!(
                "prompt token ids differ ({} and {} tokens, first difference at token {})",
                x.len(),
                y.len(),
                x.iter().zip(&y).take_while(|(a, b)| a == b).count()
            )
        });
    }
    Some(
        "one gives the prompt as text and the other as token ids, so they cannot be compared; \
         give both requests the suite's `prompt_id`"
            .into(),
    )
}

/// Evidence a level needs: every trace of every side holds one of `kinds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Requirement {
    kinds: &'static [ArtifactKind],
    /// The evidence when neither side has it ("paired text outputs").
    both: &'static str,
    /// The evidence on one side ("text outputs").
    one: &'static str,
}

const TEXT: Requirement = Requirement {
    kinds: &[ArtifactKind::Text],
    both: "paired text outputs",
    one: "text outputs",
};
const DISTRIBUTION: Requirement = Requirement {
    kinds: &[ArtifactKind::Logits, ArtifactKind::Logprobs],
    both: "next-token logits or logprobs",
    one: "next-token logits or logprobs",
};
const WEIGHTS: Requirement = Requirement {
    kinds: &[ArtifactKind::WeightSnapshot],
    both: "weight snapshots of both models",
    one: "weight snapshots",
};
const ACTIVATIONS: Requirement = Requirement {
    kinds: &[ArtifactKind::Activation],
    both: "runtime activation traces",
    one: "runtime activation traces",
};

impl Requirement {
    fn holds(&self, trace: &Trace) -> bool {
        self.kinds.iter().any(|&k| trace.has(k))
    }

    fn met(&self, sides: &[(Side, &[&Trace])]) -> bool {
        sides
            .iter()
            .all(|(_, traces)| traces.iter().all(|t| self.holds(t)))
    }

    /// What is missing, side by side, followed by the reasons the traces
    /// record for kinds that were requested and not produced.
    fn gaps(&self, sides: &[(Side, &[&Trace])]) -> Vec<String> {
        let counts: Vec<usize> = sides
            .iter()
            .map(|(_, traces)| traces.iter().filter(|t| self.holds(t)).count())
            .collect();
        let mut gaps = Vec::new();
        if counts.iter().all(|&n| n == 0) {
            gaps.push(format!("{} not collected", self.both));
        } else {
            for (&(side, traces), &held) in sides.iter().zip(&counts) {
                if held == 0 {
                    gaps.push(format!("{} not collected for the {side}", self.one));
                } else if held < traces.len() {
                    gaps.push(format!(
                        "{} collected for {held} of {} {side} traces only",
                        self.one,
                        traces.len()
                    ));
                }
            }
        }
        for &(side, traces) in sides {
            let lacking: Vec<&Trace> = traces.iter().copied().filter(|t| !self.holds(t)).collect();
            gaps.extend(self.recorded_reasons(side, &lacking));
        }
        gaps
    }

    /// The reasons `lacking` traces record for this requirement's kinds:
    /// unsupported by an executor, or missing with a reason. Grouped so
    /// many traces with one cause give one line.
    fn recorded_reasons(&self, side: Side, lacking: &[&Trace]) -> Vec<String> {
        let mut unsupported: BTreeMap<(ArtifactKind, &str), usize> = BTreeMap::new();
        let mut missing: BTreeMap<(ArtifactKind, &str), usize> = BTreeMap::new();
        for trace in lacking {
            for &kind in self.kinds {
                if trace.unsupported.contains(&kind) {
                    *unsupported
                        .entry((kind, trace.capabilities.executor.as_str()))
                        .or_default() += 1;
                }
                for m in trace.missing.iter().filter(|m| m.kind == kind) {
                    *missing.entry((kind, m.reason.as_str())).or_default() += 1;
                }
            }
        }
        let traces = |n: usize| if n == 1 { "trace" } else { "traces" };
        let mut reasons: Vec<String> = unsupported
            .into_iter()
            .map(|((kind, executor), n)| {
                format!(
                    "{kind} unsupported by executor `{executor}` (requested in {n} {side} {})",
                    traces(n)
                )
            })
            .collect();
        reasons.extend(missing.into_iter().map(|((kind, reason), n)| {
            format!(
                "{kind} requested but not produced in {n} {side} {}: {reason}",
                traces(n)
            )
        }));
        reasons
    }
}

/// The evidence a claim needs and, for paired evidence, what of it is missing.
fn unclaimable_reason(strength: ClaimStrength, sides: &[(Side, &[&Trace])]) -> String {
    let needs = format!("needs {}", strength.needs());
    if sides.len() < 2 {
        return format!("{needs}; only one model was traced");
    }
    let gaps: Vec<String> = requirements(strength.required_level())
        .iter()
        .filter(|r| !r.met(sides))
        .flat_map(|r| r.gaps(sides))
        .collect();
    if gaps.is_empty() {
        needs
    } else {
        format!("{needs}; {}", gaps.join("; "))
    }
}

/// Per-kind trace counts for every kind present in any trace, in report order.
fn coverage(sides: &[(Side, &[&Trace])]) -> Vec<KindCoverage> {
    let present: BTreeSet<ArtifactKind> = sides
        .iter()
        .flat_map(|(_, traces)| traces.iter().flat_map(|t| t.coverage()))
        .collect();
    let count = |traces: &[&Trace], kind| traces.iter().filter(|t| t.has(kind)).count();
    let baseline = sides[0].1;
    let candidate = sides.get(1).map(|(_, traces)| *traces);
    present
        .into_iter()
        .map(|kind| KindCoverage {
            kind,
            baseline: count(baseline, kind),
            candidate: candidate.map(|c| count(c, kind)),
            of_baseline: baseline.len(),
            of_candidate: candidate.map(<[&Trace]>::len),
        })
        .collect()
}

/// Every `intervention_result` artifact, side by side, in trace order.
fn interventions(sides: &[(Side, &[&Trace])]) -> Vec<InterventionRef> {
    sides
        .iter()
        .flat_map(|&(side, traces)| {
            traces.iter().flat_map(move |t| {
                t.artifacts_of(ArtifactKind::InterventionResult)
                    .map(move |a| InterventionRef {
                        side,
                        trace: t.id.clone(),
                        artifact: a.id.clone(),
                        layer: a.layer,
                        labels: a.labels.clone(),
                    })
            })
        })
        .collect()
}

/// The evidence kinds both sides must hold in every trace to reach this
/// level (each entry is satisfied by any one of its kinds).
fn requirements(level: AccessLevel) -> &'static [Requirement] {
    match level {
        AccessLevel::SingleSnapshot => &[],
        AccessLevel::BlackBox => &[TEXT],
        AccessLevel::Logprobs => &[DISTRIBUTION],
        AccessLevel::Weights => &[WEIGHTS],
        AccessLevel::Activations => &[ACTIVATIONS],
        AccessLevel::BaseAndTransformed => &[WEIGHTS, ACTIVATIONS],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::ArtifactData;
    use crate::trace::fixture::TraceFixture;
    use ArtifactKind as K;

    /// A trace `id` of `prompt` asking for layer 1 and producing one
    /// artifact of each kind in `produce`; add missing or unsupported kinds
    /// to it before building.
    fn fixture(id: &str, prompt: &str, produce: &[ArtifactKind]) -> TraceFixture {
        let tensor = [0.5f32; 6];
        let record = |value| ArtifactData::Record { value };
        let mut f = TraceFixture::new(id)
            .prompt(prompt)
            .executor("test")
            .layers(&[1]);
        for &kind in produce {
            f = match kind {
                K::Text => f.artifact(kind, ArtifactData::Text { text: "ok".into() }, None, &[]),
                K::Tokens => {
                    f.artifact(kind, ArtifactData::TokenIds { ids: vec![1, 2] }, None, &[])
                }
                K::Metric => f.metric("refusal_rate", 0.5),
                K::InterventionResult => f.artifact(
                    kind,
                    record(serde_json::json!({ "alpha": 1.0 })),
                    Some(1),
                    &[("mode", "subtract")],
                ),
                K::ReportEvidence | K::Profile => {
                    f.artifact(kind, record(serde_json::json!({})), None, &[])
                }
                K::Activation => f.activation(1, vec![2, 3], &tensor, false),
                K::Logits | K::Logprobs | K::WeightSnapshot => {
                    f.tensor(kind, None, vec![2, 3], &tensor, false, &[])
                }
            };
        }
        f
    }

    /// `n` traces with ids `<prefix>0..`, prompts `p0..`, each producing `kinds`.
    fn side(prefix: &str, n: usize, kinds: &[ArtifactKind]) -> Vec<Trace> {
        (0..n)
            .map(|i| fixture(&format!("{prefix}{i}"), &format!("p{i}"), kinds).trace())
            .collect()
    }

    fn refs(traces: &[Trace]) -> Vec<&Trace> {
        traces.iter().collect()
    }

    fn paired(baseline: &[Trace], candidate: &[Trace]) -> Result<Access, AccessError> {
        let (baseline, candidate) = (refs(baseline), refs(candidate));
        let (baseline, candidate) = (&baseline[..], &candidate[..]);
        access_from_evidence(Evidence::Paired {
            baseline,
            candidate,
        })
    }

    fn assert_missing(access: &Access, needle: &str) {
        assert!(
            access.missing_evidence.iter().any(|m| m.contains(needle)),
            "expected missing evidence containing {needle:?}, got {:#?}",
            access.missing_evidence
        );
    }

    fn assert_error(result: Result<Access, AccessError>, needles: &[&str]) -> AccessError {
        let err = result.expect_err("expected an error");
        let text = err.to_string();
        for needle in needles {
            assert!(text.contains(needle), "expected {needle:?} in: {text}");
        }
        err
    }

    #[test]
    fn levels_and_claims_follow_the_design_table() {
        let claims: Vec<ClaimStrength> = AccessLevel::ALL
            .iter()
            .map(|l| l.strongest_claim())
            .collect();
        assert_eq!(claims, ClaimStrength::ALL);
        assert!(AccessLevel::ALL.is_sorted());
        assert!(ClaimStrength::ALL.is_sorted());
        for level in AccessLevel::ALL {
            assert_eq!(level.strongest_claim().required_level(), level);
            let json = serde_json::to_string(&level).unwrap();
            assert_eq!(json, format!("\"{level}\""));
            assert_eq!(serde_json::from_str::<AccessLevel>(&json).unwrap(), level);
        }
        for claim in ClaimStrength::ALL {
            assert_eq!(
                serde_json::to_string(&claim).unwrap(),
                format!("\"{claim}\"")
            );
        }
        assert_eq!(
            serde_json::from_str::<AccessLevel>("\"paired_outputs\"").unwrap(),
            AccessLevel::BlackBox
        );
    }

    #[test]
    fn a_single_model_allows_only_a_behavioral_profile() {
        let traces = side(
            "t",
            2,
            &[K::Text, K::Logits, K::Activation, K::WeightSnapshot],
        );
        let access = access_from_evidence(Evidence::Single(&refs(&traces))).unwrap();
        assert_eq!(access.level, AccessLevel::SingleSnapshot);
        assert_eq!(access.claim_strength, ClaimStrength::BehavioralProfile);
        assert_eq!(access.can_claim, vec![ClaimStrength::BehavioralProfile]);
        assert_eq!(access.cannot_claim.len(), 5);
        assert!(
            access.cannot_claim[0]
                .reason
                .contains("only one model was traced")
        );
        assert_missing(
            &access,
            "no paired candidate traces: a change between models cannot be claimed",
        );
        assert_eq!(access.coverage[0].candidate, None);
        assert_error(
            access_from_evidence(Evidence::Single(&[])),
            &["no traces were given"],
        );
    }

    #[test]
    fn paired_text_only_is_black_box() {
        let access = paired(&side("b", 3, &[K::Text]), &side("c", 3, &[K::Text])).unwrap();
        assert_eq!(access.level, AccessLevel::BlackBox);
        assert_eq!(access.claim_strength, ClaimStrength::BlackBoxBehavioralDiff);
        assert_eq!(
            access.can_claim,
            vec![
                ClaimStrength::BehavioralProfile,
                ClaimStrength::BlackBoxBehavioralDiff
            ]
        );
        assert_missing(&access, "runtime activation traces not collected");
        assert_missing(&access, "next-token logits or logprobs not collected");
        assert_missing(&access, "weight snapshots of both models not collected");
        let audit = access.cannot_claim.last().unwrap();
        assert_eq!(audit.strength, ClaimStrength::ModelChangeAudit);
        assert!(
            audit.reason.contains("weight snapshots"),
            "{}",
            audit.reason
        );
    }

    #[test]
    fn logits_or_logprobs_in_both_sides_reach_logprobs() {
        let baseline = side("b", 2, &[K::Text, K::Logits]);
        // The candidate's endpoint returns logprobs but not raw logits.
        let candidate: Vec<Trace> = (0..2)
            .map(|i| {
                fixture(&format!("c{i}"), &format!("p{i}"), &[K::Text, K::Logprobs])
                    .missing(K::Logits, "the endpoint returns top-k logprobs only")
                    .trace()
            })
            .collect();
        let access = paired(&baseline, &candidate).unwrap();
        assert_eq!(access.level, AccessLevel::Logprobs);
        assert_eq!(access.claim_strength, ClaimStrength::DistributionalDiff);
        assert!(
            !access
                .missing_evidence
                .iter()
                .any(|m| m.contains("top-k logprobs only")),
            "a met requirement reports no gap: {:#?}",
            access.missing_evidence
        );
    }

    #[test]
    fn weight_snapshots_in_both_sides_reach_weights() {
        let kinds = [K::Text, K::Logits, K::WeightSnapshot];
        let access = paired(&side("b", 2, &kinds), &side("c", 2, &kinds)).unwrap();
        assert_eq!(access.level, AccessLevel::Weights);
        assert_eq!(access.claim_strength, ClaimStrength::WeightDiff);
        assert_missing(&access, "runtime activation traces not collected");
    }

    #[test]
    fn activations_in_both_sides_reach_activations() {
        let kinds = [K::Text, K::Logits, K::Activation];
        let access = paired(&side("b", 2, &kinds), &side("c", 2, &kinds)).unwrap();
        assert_eq!(access.level, AccessLevel::Activations);
        assert_eq!(access.claim_strength, ClaimStrength::ActivationDiagnostic);
        assert_missing(&access, "weight snapshots of both models not collected");
    }

    #[test]
    fn each_claim_needs_its_own_evidence_below_the_cap() {
        // Activations only: the cap is an activation diagnostic, but with no
        // text or logits neither an output diff nor a distributional diff.
        let kinds = [K::Activation];
        let access = paired(&side("b", 2, &kinds), &side("c", 2, &kinds)).unwrap();
        assert_eq!(access.claim_strength, ClaimStrength::ActivationDiagnostic);
        assert_eq!(
            access.can_claim,
            vec![
                ClaimStrength::BehavioralProfile,
                ClaimStrength::ActivationDiagnostic
            ]
        );
        assert!(!access.allows(ClaimStrength::DistributionalDiff));
        let refused: Vec<ClaimStrength> = access.cannot_claim.iter().map(|u| u.strength).collect();
        assert!(
            refused.contains(&ClaimStrength::BlackBoxBehavioralDiff),
            "{refused:?}"
        );
        assert!(
            refused.contains(&ClaimStrength::DistributionalDiff),
            "{refused:?}"
        );
        let reason = &access.cannot_claim[0].reason;
        assert!(
            reason.contains("paired text outputs not collected"),
            "{reason}"
        );
    }

    #[test]
    fn weights_and_activations_reach_base_and_transformed() {
        let kinds = [K::Text, K::Logits, K::Activation, K::WeightSnapshot];
        let access = paired(&side("b", 2, &kinds), &side("c", 2, &kinds)).unwrap();
        assert_eq!(access.level, AccessLevel::BaseAndTransformed);
        assert_eq!(access.claim_strength, ClaimStrength::ModelChangeAudit);
        assert_eq!(access.can_claim, ClaimStrength::ALL);
        assert!(access.cannot_claim.is_empty());
    }

    #[test]
    fn partial_activation_coverage_is_not_counted() {
        let baseline = side("b", 5, &[K::Text, K::Activation]);
        let candidate: Vec<Trace> = (0..5)
            .map(|i| {
                let (id, prompt) = (format!("c{i}"), format!("p{i}"));
                match i {
                    0..3 => fixture(&id, &prompt, &[K::Text, K::Activation]),
                    _ => fixture(&id, &prompt, &[K::Text])
                        .missing(K::Activation, "layer 1 hook not reached"),
                }
                .trace()
            })
            .collect();
        let access = paired(&baseline, &candidate).unwrap();
        assert_eq!(access.level, AccessLevel::BlackBox);
        assert_missing(
            &access,
            "runtime activation traces collected for 3 of 5 candidate traces only",
        );
        assert_missing(
            &access,
            "activation requested but not produced in 2 candidate traces: layer 1 hook not reached",
        );
        let activation = access
            .coverage
            .iter()
            .find(|c| c.kind == K::Activation)
            .unwrap();
        assert_eq!((activation.baseline, activation.candidate), (5, Some(3)));
    }

    #[test]
    fn evidence_lacking_on_one_side_names_the_side() {
        let access = paired(
            &side("b", 2, &[K::Text, K::Activation]),
            &side("c", 2, &[K::Text]),
        )
        .unwrap();
        assert_eq!(access.level, AccessLevel::BlackBox);
        assert_missing(
            &access,
            "runtime activation traces not collected for the candidate",
        );
    }

    #[test]
    fn a_kind_declared_unsupported_gives_the_reason() {
        let candidate: Vec<Trace> = (0..2)
            .map(|i| {
                fixture(&format!("c{i}"), &format!("p{i}"), &[K::Text])
                    .executor("http")
                    .unsupported(K::Activation)
                    .trace()
            })
            .collect();
        let access = paired(&side("b", 2, &[K::Text, K::Activation]), &candidate).unwrap();
        assert_eq!(access.level, AccessLevel::BlackBox);
        assert_missing(&access, "activation unsupported by executor `http`");
        let diag = &access.cannot_claim[2];
        assert_eq!(diag.strength, ClaimStrength::ActivationDiagnostic);
        assert!(
            diag.reason.contains("unsupported by executor `http`"),
            "{}",
            diag.reason
        );
    }

    #[test]
    fn interventions_scope_causal_claims() {
        let access = paired(&side("b", 1, &[K::Text]), &side("c", 1, &[K::Text])).unwrap();
        assert!(access.interventions.is_empty());
        assert_eq!(access.causal_scope, None);
        assert_missing(
            &access,
            "no intervention was run: causal claims are not allowed",
        );

        let candidate = side("c", 1, &[K::Text, K::InterventionResult]);
        let access = paired(&side("b", 1, &[K::Text]), &candidate).unwrap();
        assert_eq!(
            access.interventions,
            vec![InterventionRef {
                side: Side::Candidate,
                trace: "c0".into(),
                artifact: "a1-intervention_result".into(),
                layer: Some(1),
                labels: BTreeMap::from([("mode".into(), "subtract".into())]),
            }]
        );
        assert_eq!(
            access.causal_scope.as_deref(),
            Some("causal claims limited to the 1 recorded intervention")
        );
        assert!(
            !access
                .missing_evidence
                .iter()
                .any(|m| m.contains("no intervention"))
        );
    }

    #[test]
    fn coverage_lists_every_kind_present() {
        let access = paired(
            &side("b", 2, &[K::Text, K::Tokens]),
            &side("c", 2, &[K::Text, K::Metric]),
        )
        .unwrap();
        let kinds: Vec<ArtifactKind> = access.coverage.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, vec![K::Text, K::Tokens, K::Metric]);
        assert_eq!(
            access.coverage[1],
            KindCoverage {
                kind: K::Tokens,
                baseline: 2,
                candidate: Some(0),
                of_baseline: 2,
                of_candidate: Some(2),
            }
        );
    }

    #[test]
    fn no_text_is_no_evidence() {
        let err = assert_error(
            paired(&side("b", 2, &[K::Tokens]), &side("c", 2, &[K::Tokens])),
            &["no evidence", "paired text outputs not collected", "`text`"],
        );
        assert!(matches!(err, AccessError::NoEvidence { .. }));
    }

    #[test]
    fn an_empty_side_is_an_error() {
        let traces = side("b", 1, &[K::Text]);
        assert_error(paired(&traces, &[]), &["the candidate side has no traces"]);
        assert_error(paired(&[], &traces), &["the baseline side has no traces"]);
    }

    #[test]
    fn sides_of_unequal_length_are_an_error() {
        assert_error(
            paired(&side("b", 3, &[K::Text]), &side("c", 2, &[K::Text])),
            &[
                "baseline has 3 traces but the candidate has 2",
                "paired by position",
            ],
        );
    }

    #[test]
    fn pairs_must_run_the_same_prompt() {
        let b = vec![fixture("b0", "hello", &[K::Text]).prompt_id("q1").trace()];
        let c = vec![fixture("c0", "hello", &[K::Text]).prompt_id("q2").trace()];
        assert_error(
            paired(&b, &c),
            &["`b0`", "`c0`", "prompt ids `q1` and `q2` differ"],
        );

        // Without prompt ids the texts decide.
        let c = vec![fixture("c0", "goodbye", &[K::Text]).trace()];
        let b = vec![fixture("b0", "hello", &[K::Text]).trace()];
        assert_error(
            paired(&b, &c),
            &[
                "`b0`",
                "`c0`",
                "prompt texts \"hello\" and \"goodbye\" differ",
            ],
        );

        // Equal prompt ids win over differing texts (e.g. chat templates).
        let b = vec![fixture("b0", "hello", &[K::Text]).prompt_id("q1").trace()];
        let c = vec![
            fixture("c0", "[INST] hello", &[K::Text])
                .prompt_id("q1")
                .trace(),
        ];
        assert!(paired(&b, &c).is_ok());

        // Token ids decide when there is no text.
        let mut b = side("b", 1, &[K::Text]);
        let mut c = side("c", 1, &[K::Text]);
        for (t, ids) in [(&mut b[0], vec![1, 2, 3]), (&mut c[0], vec![1, 2, 4])] {
            t.request.text = None;
            t.request.token_ids = Some(ids);
        }
        assert_error(paired(&b, &c), &["`b0`", "first difference at token 2"]);
    }

    #[test]
    fn evidence_the_executor_disowns_is_an_error_not_a_downgrade() {
        let baseline = side("b", 1, &[K::Text, K::Activation]);
        let mut candidate = side("c", 1, &[K::Text, K::Activation]);
        candidate[0].capabilities = candidate[0]
            .capabilities
            .clone()
            .with(K::Activation, SupportLevel::Unsupported);
        candidate[0].capabilities.executor = "http".into();
        let err = assert_error(
            paired(&baseline, &candidate),
            &["`c0`", "`a1-activation`", "`activation`", "`http`"],
        );
        assert_eq!(
            err,
            AccessError::UndeclaredEvidence {
                trace: "c0".into(),
                artifact: "a1-activation".into(),
                kind: K::Activation,
                executor: "http".into(),
            }
        );
    }

    #[test]
    fn an_invalid_trace_is_an_error_naming_it() {
        let baseline = side("b", 1, &[K::Text]);
        let mut candidate = side("c", 1, &[K::Text]);
        candidate[0].artifacts[0].producer = "s9-decode".into();
        let err = assert_error(
            paired(&baseline, &candidate),
            &["candidate trace `c0` is invalid", "`s9-decode`"],
        );
        assert!(matches!(
            err,
            AccessError::InvalidTrace {
                side: Side::Candidate,
                ..
            }
        ));
    }

    #[test]
    fn access_round_trips_through_json() {
        let access = paired(
            &side("b", 1, &[K::Text, K::InterventionResult]),
            &side("c", 1, &[K::Text]),
        )
        .unwrap();
        let json = serde_json::to_value(&access).unwrap();
        assert_eq!(json["level"], "black_box");
        assert_eq!(json["claim_strength"], "black_box_behavioral_diff");
        assert_eq!(json["can_claim"][1], "black_box_behavioral_diff");
        assert_eq!(json["cannot_claim"][0]["strength"], "distributional_diff");
        let back: Access = serde_json::from_value(json).unwrap();
        assert_eq!(back, access);
    }
}
