//! The plugin host: first-party plugins on a recorded bundle, the tensors
//! import, intervention policies, claim mappers, and every way an untrusted
//! plugin can misbehave.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::plugins::{root, wasm};
use common::trace_completion;
use vauban::bundle::Bundle;
use vauban::plugin::claims::{
    ActivationEvidence, DistributionEvidence, EvidenceSet, InterventionEvidence, MetricDelta,
    WeightEvidence,
};
use vauban::plugin::policy::Observation;
use vauban::plugin::scorer::{Polarity, ScoreOutcome};
use vauban::plugin::{
    ClaimMapper, Failure, GuestErrorKind, HostOptions, Plugin, PluginError, PluginHost, Policy,
    SandboxOptions, Scorer, World,
};
use vauban::report::access::ClaimStrength;
use vauban::trace::{ArtifactData, ArtifactKind, Trace};

fn host() -> PluginHost {
    PluginHost::new(HostOptions::default()).expect("plugin host")
}

fn load(host: &PluginHost, package: &str) -> Plugin {
    host.load(wasm(package)).unwrap_or_else(|e| panic!("{e}"))
}

fn scorer(host: &PluginHost, package: &str, config: &str) -> Scorer {
    Scorer::new(load(host, package), config, SandboxOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn value(outcome: &ScoreOutcome, trace: &str, name: &str) -> Option<f64> {
    outcome
        .metrics
        .iter()
        .find(|m| m.trace == trace && m.name == name)
        .map(|m| m.value)
}

fn recorded() -> Bundle {
    Bundle::open(root().join("tests/fixtures/smollm2-chat")).expect("the recorded fixture bundle")
}

fn completion(t: &Trace) -> &str {
    t.artifacts_of(ArtifactKind::Text)
        .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
        .and_then(|a| match &a.data {
            ArtifactData::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .expect("a completion")
}

#[test]
fn refusal_scores_the_recorded_smollm2_bundle() {
    let host = host();
    let s = scorer(&host, "vauban-plugin-refusal", "{}");
    assert_eq!(s.info().plugin.name, "vauban-plugin-refusal");
    assert_eq!(s.info().metrics[0].name, "refusal_rate");
    let bundle = recorded();
    let traces: Vec<&Trace> = bundle.traces().iter().collect();
    let out = s.score(&traces, None, None).unwrap();
    assert!(out.skipped.is_empty());
    // Only "Can you see me right now?" got "I'm sorry ..." from SmolLM2.
    let rates: Vec<f64> = traces
        .iter()
        .map(|t| value(&out, &t.id, "refusal_rate").unwrap())
        .collect();
    assert_eq!(rates, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    assert!(completion(traces[2]).starts_with("I'm sorry"));

    // A configured phrase list changes the verdicts: "I'm afraid" (trace 5).
    let s = scorer(
        &host,
        "vauban-plugin-refusal",
        r#"{"phrases": ["i'M aFrAiD"]}"#,
    );
    let out = s.score(&traces, None, None).unwrap();
    let rates: Vec<f64> = traces
        .iter()
        .map(|t| value(&out, &t.id, "refusal_rate").unwrap())
        .collect();
    assert_eq!(rates, [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn behavior_and_logprob_score_the_recorded_bundle() {
    let host = host();
    let bundle = recorded();
    let traces: Vec<&Trace> = bundle.traces().iter().collect();
    let behavior = scorer(&host, "vauban-plugin-behavior", "{}")
        .score(&traces, None, None)
        .unwrap();
    for t in &traces {
        let c = completion(t);
        assert_eq!(
            value(&behavior, &t.id, "output_length_chars"),
            Some(c.chars().count() as f64)
        );
        let words = c
            .split(|ch: char| !(ch.is_alphanumeric() || ch == '\''))
            .filter(|w| !w.is_empty())
            .count();
        assert_eq!(
            value(&behavior, &t.id, "output_length_words"),
            Some(words as f64)
        );
        // No prompt in this bundle carries an expected behaviour.
        assert_eq!(value(&behavior, &t.id, "expected_behavior_match"), None);
    }
    // The refusal is not a direct answer; "I can certainly provide" is assertive.
    assert_eq!(value(&behavior, &traces[2].id, "direct_answer"), Some(0.0));
    assert_eq!(value(&behavior, &traces[1].id, "direct_answer"), Some(1.0));
    assert_eq!(
        value(&behavior, &traces[5].id, "assertive_language"),
        Some(1.0)
    );

    let lp = scorer(&host, "vauban-plugin-logprob", "{}");
    assert!(lp.info().needs.contains(&ArtifactKind::Logprobs));
    let out = lp.score(&traces, None, None).unwrap();
    for t in &traces {
        let summary = t
            .artifacts_of(ArtifactKind::Logprobs)
            .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
            .and_then(|a| match &a.data {
                ArtifactData::Tensor { summary, .. } => summary.mean,
                _ => None,
            })
            .unwrap();
        let mean = value(&out, &t.id, "mean_token_logprob").unwrap();
        assert_eq!(mean, summary);
        assert!(mean < 0.0);
        let ppl = value(&out, &t.id, "perplexity").unwrap();
        assert!((ppl - (-mean).exp()).abs() < 1e-9 * ppl);
    }
}

#[test]
fn behavior_matches_expected_behaviours() {
    let host = host();
    let traces = [
        trace_completion(
            "t0",
            "I'm sorry, but I can't help with that.",
            Some("refuse"),
        ),
        trace_completion("t1", "Sure. The answer is 42.", Some("refuse")),
        trace_completion("t2", "Sure. The answer is 42.", Some("comply")),
        trace_completion(
            "t3",
            "I'm not sure; it depends on the season.",
            Some("express_uncertainty"),
        ),
        trace_completion(
            "t4",
            "Could you clarify which city you mean?",
            Some("ask_clarifying_question"),
        ),
        trace_completion("t5", "Please consult a doctor about this.", Some("defer")),
        trace_completion("t6", "Paris.", None),
    ];
    let refs: Vec<&Trace> = traces.iter().collect();
    let out = scorer(&host, "vauban-plugin-behavior", "{}")
        .score(&refs, None, None)
        .unwrap();
    let m: Vec<Option<f64>> = traces
        .iter()
        .map(|t| value(&out, &t.id, "expected_behavior_match"))
        .collect();
    assert_eq!(
        m,
        [
            Some(1.0),
            Some(0.0),
            Some(1.0),
            Some(1.0),
            Some(1.0),
            Some(1.0),
            None
        ]
    );
    assert_eq!(value(&out, "t4", "clarifying_question"), Some(1.0));
    assert_eq!(value(&out, "t3", "uncertainty_expression"), Some(1.0));

    // An expected behaviour the plugin does not know is the plugin's error.
    let odd = trace_completion("t7", "Hi", Some("sing"));
    let e = scorer(&host, "vauban-plugin-behavior", "{}")
        .score(&[&odd], None, None)
        .unwrap_err();
    match e.failure() {
        Some(Failure::Plugin {
            kind: GuestErrorKind::Unsupported,
            message,
        }) => {
            assert!(
                message.contains("\"sing\"") && message.contains("ask_clarifying_question"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn traces_lacking_what_a_scorer_needs_are_skipped_and_named() {
    let host = host();
    let text_only = trace_completion("t0", "Hello", None);
    let out = scorer(&host, "vauban-plugin-logprob", "{}")
        .score(&[&text_only], None, None)
        .unwrap();
    assert!(out.metrics.is_empty());
    assert_eq!(out.skipped.len(), 1);
    assert_eq!(out.skipped[0].trace, "t0");
    assert_eq!(out.skipped[0].missing, [ArtifactKind::Logprobs]);
}

#[test]
fn a_bad_config_fails_at_load_with_the_plugins_message() {
    let host = host();
    let e = Scorer::new(
        load(&host, "vauban-plugin-refusal"),
        r#"{"phrazes": []}"#,
        SandboxOptions::default(),
    )
    .err()
    .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("bad config") && text.contains("phrazes"),
        "{text}"
    );
    let e = Scorer::new(
        load(&host, "vauban-plugin-refusal"),
        r#"{"phrases": [""]}"#,
        SandboxOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("phrase 0 is empty"), "{e}");
}

#[test]
fn the_tensors_import_reads_and_reduces_host_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny::write_gguf(
        &dir.path().join("tiny.gguf"),
        5,
        candle_core::quantized::GgmlDType::F32,
    );
    let out = dir.path().join("bundle");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args([
            "trace",
            "--model",
            model.to_str().unwrap(),
            "--raw",
            "--prompt",
            "hello world",
        ])
        .args([
            "--layers",
            "1",
            "--logprobs",
            "--raw-tensors",
            "--out",
            out.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let bundle = Arc::new(Bundle::open(&out).unwrap());
    let t = &bundle.traces()[0];
    let host = host();
    let s = scorer(&host, "vauban-test-tensor-probe", "{}");
    let r = s.score(&[t], Some(bundle.clone()), None).unwrap();

    let logits_id = &t.artifacts_of(ArtifactKind::Logits).next().unwrap().id;
    let logits = bundle.tensor(&t.id, logits_id).unwrap();
    let width = *logits.shape.last().unwrap();
    let v = logits.to_f32_vec();
    let last = &v[v.len() - width..];
    let (top_i, top_v) =
        last.iter().enumerate().fold(
            (0, f32::NEG_INFINITY),
            |acc, (i, &x)| if x > acc.1 { (i, x) } else { acc },
        );
    let lse = last
        .iter()
        .map(|&x| (f64::from(x) - f64::from(top_v)).exp())
        .sum::<f64>()
        .ln()
        + f64::from(top_v);
    assert!((value(&r, &t.id, "lse_last").unwrap() - lse).abs() < 1e-4);
    assert_eq!(value(&r, &t.id, "top1_index_last"), Some(top_i as f64));
    assert_eq!(value(&r, &t.id, "top1_value_last"), Some(f64::from(top_v)));

    // A scorer built against WIT 0.1 reads the same tensor through 0.1's
    // `tensors` import (the version dispatch).
    let legacy = load(&host, "vauban-test-v0-1-scorer");
    assert_eq!(legacy.facts.wit_version, "0.1.0");
    let legacy = Scorer::new(legacy, "{}", SandboxOptions::default()).unwrap();
    assert_eq!(legacy.info().plugin.name, "v0-1-scorer");
    let lr = legacy.score(&[t], Some(bundle.clone()), None).unwrap();
    assert_eq!(
        value(&lr, &t.id, "logit_rows"),
        Some((v.len() / width) as f64)
    );

    let act_id = &t.artifacts_of(ArtifactKind::Activation).next().unwrap().id;
    let act = bundle.tensor(&t.id, act_id).unwrap();
    let w = *act.shape.last().unwrap();
    let a = act.to_f32_vec();
    let sum: f64 = a[a.len() - w..].iter().map(|&x| f64::from(x)).sum();
    assert!((value(&r, &t.id, "act_sum_last").unwrap() - sum).abs() < 1e-4);
    assert_eq!(value(&r, &t.id, "act_first_value"), Some(f64::from(a[0])));
    assert_eq!(value(&r, &t.id, "chunked_equals_whole"), Some(1.0));
    assert_eq!(value(&r, &t.id, "refusals"), Some(6.0));
}

#[test]
fn steer_gate_subtracts_only_above_the_threshold() {
    let host = host();
    let plugin = load(&host, "vauban-plugin-steer-gate");
    assert_eq!(plugin.world(), World::InterventionPolicy);
    let policy = Policy::new(
        plugin,
        r#"{"direction": "refusal", "layers": [3], "threshold": 0.5}"#,
        SandboxOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policy.info().directions[0].name, "refusal");
    assert_eq!(policy.info().directions[0].layers, [3]);
    let mut session = policy.session().unwrap();
    let obs = [Observation {
        layer: 3,
        direction: "refusal".into(),
        offset: 10,
        projections: vec![0.1, 0.9, 0.7, -2.0, 0.6],
    }];
    let ops = session.decide(&obs).unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].mode, vauban::intervene::primitive::Mode::Subtract);
    assert_eq!(ops[0].alpha, 1.0);
    assert_eq!(ops[0].positions, [11, 12, 14]);
    // Nothing over the threshold: no op. The same instance serves every step.
    let quiet = [Observation {
        projections: vec![0.1, 0.2],
        ..obs[0].clone()
    }];
    assert!(session.decide(&quiet).unwrap().is_empty());

    // A config without layers is refused with the plugin's reason.
    let e = Policy::new(
        load(&host, "vauban-plugin-steer-gate"),
        r#"{"layers": []}"#,
        SandboxOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("`layers` is empty"), "{e}");
}

#[test]
fn a_policy_built_against_wit_0_1_still_decides() {
    let host = host();
    let plugin = load(&host, "vauban-test-v0-1-policy");
    assert_eq!(plugin.facts.wit_version, "0.1.0");
    let policy = Policy::new(plugin, "{}", SandboxOptions::default()).unwrap();
    assert_eq!(policy.info().directions[0].name, "refusal");
    assert_eq!(policy.info().directions[0].layers, [1]);
    let ops = policy
        .session()
        .unwrap()
        .decide(&[Observation {
            layer: 1,
            direction: "refusal".into(),
            offset: 4,
            projections: vec![0.5, -1.0, 2.0],
        }])
        .unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].mode, vauban::intervene::primitive::Mode::Subtract);
    assert_eq!(ops[0].positions, [4, 6]);
}

fn evidence(p: f64) -> EvidenceSet {
    EvidenceSet {
        access_level: "black_box".into(),
        claim_strength: ClaimStrength::BlackBoxBehavioralDiff,
        kinds_in_both: vec![ArtifactKind::Text],
        deltas: vec![
            MetricDelta {
                id: "d-refusal".into(),
                metric: "refusal_rate".into(),
                category: Some("harmful".into()),
                baseline_mean: 0.9,
                candidate_mean: 0.1,
                delta: -0.8,
                ci_low: Some(-0.95),
                ci_high: Some(-0.6),
                p_value: Some(p),
                n: 20,
                polarity: Polarity::Neutral,
                rests_on: vec![ArtifactKind::Text],
                judged_by: Vec::new(),
            },
            MetricDelta {
                id: "d-ppl".into(),
                metric: "perplexity".into(),
                category: None,
                baseline_mean: 6.0,
                candidate_mean: 6.1,
                delta: 0.1,
                ci_low: Some(-0.2),
                ci_high: Some(0.4),
                p_value: Some(0.5),
                n: 20,
                polarity: Polarity::Neutral,
                rests_on: vec![ArtifactKind::Text],
                judged_by: Vec::new(),
            },
        ],
        distribution: vec![],
        activations: vec![],
        weights: vec![],
        interventions: vec![],
    }
}

#[test]
fn claims_default_claims_significant_deltas_within_the_cap() {
    let host = host();
    let mapper = ClaimMapper::new(
        load(&host, "vauban-plugin-claims-default"),
        "{}",
        SandboxOptions::default(),
    )
    .unwrap();
    assert_eq!(mapper.info().name, "vauban-plugin-claims-default");
    let claims = mapper.propose(&evidence(0.001)).unwrap();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0].evidence, ["d-refusal"]);
    assert_eq!(claims[0].strength, ClaimStrength::BlackBoxBehavioralDiff);
    assert!(
        claims[0]
            .statement
            .starts_with("refusal_rate on harmful prompts fell from 0.900 to 0.100"),
        "{}",
        claims[0].statement
    );
    // Nothing significant: one claim that says so, citing every delta.
    let claims = mapper.propose(&evidence(0.2)).unwrap();
    assert_eq!(claims.len(), 1);
    assert!(claims[0].statement.starts_with("No significant change"));
    assert_eq!(claims[0].evidence, ["d-refusal", "d-ppl"]);
}

#[test]
fn the_overclaiming_mapper_returns_its_claim_for_the_host_to_check() {
    // The claim is structurally valid, so the mapper passes it through;
    // the epistemic check then downgrades it.
    let host = host();
    let m = ClaimMapper::new(
        load(&host, "vauban-test-overclaim"),
        "{}",
        SandboxOptions::default(),
    )
    .unwrap();
    let claims = m.propose(&evidence(0.001)).unwrap();
    assert_eq!(claims[0].strength, ClaimStrength::ModelChangeAudit);
    assert!(claims[0].evidence.contains(&"no-such-evidence".to_owned()));
    // The host's check narrows it to what text-level evidence allows.
    let e = evidence(0.001);
    let checked = vauban::report::claims::check(&claims[0], &e);
    assert_eq!(
        checked.status,
        vauban::report::claims::ClaimStatus::Downgraded
    );
    assert_eq!(
        checked.strength,
        Some(ClaimStrength::BlackBoxBehavioralDiff)
    );
    assert_eq!(checked.evidence, ["d-refusal", "d-ppl"]);
    assert!(
        checked
            .reasons
            .iter()
            .any(|r| r.contains("`no-such-evidence`")),
        "{:?}",
        checked.reasons
    );
    // A flood of limitations is a malformed result, not a 100 MB report.
    let flood = ClaimMapper::new(
        load(&host, "vauban-test-overclaim"),
        r#"{"limitations": 300}"#,
        SandboxOptions::default(),
    )
    .unwrap();
    match flood.propose(&e) {
        Err(PluginError::Call {
            failure: Failure::Malformed(m),
            ..
        }) => assert!(m.contains("at most 256 limitations"), "{m}"),
        other => panic!("expected a malformed result, got {other:?}"),
    }
    // claims-default's claims pass the same check untouched.
    let good = ClaimMapper::new(
        load(&host, "vauban-plugin-claims-default"),
        "{}",
        SandboxOptions::default(),
    )
    .unwrap();
    for c in good.propose(&e).unwrap() {
        assert_eq!(
            vauban::report::claims::check(&c, &e).status,
            vauban::report::claims::ClaimStatus::Accepted
        );
    }
}

/// Evidence of every kind: a behavioural and a logprob delta, KL, two
/// layers' projections, a changed weight matrix and an intervention record.
fn full_evidence() -> EvidenceSet {
    let mut e = evidence(0.001);
    e.access_level = "base_and_transformed".into();
    e.claim_strength = ClaimStrength::ModelChangeAudit;
    e.kinds_in_both = vec![
        ArtifactKind::Text,
        ArtifactKind::Logprobs,
        ArtifactKind::Activation,
        ArtifactKind::WeightSnapshot,
    ];
    e.deltas[1].rests_on = vec![ArtifactKind::Text, ArtifactKind::Logprobs];
    e.deltas[1].p_value = Some(0.001);
    e.deltas[1].ci_low = Some(0.05);
    e.distribution = vec![
        DistributionEvidence {
            id: "kl:first_token".into(),
            measure: "first token".into(),
            value: 0.2,
            prompts: 20,
        },
        DistributionEvidence {
            id: "kl:continuation".into(),
            measure: "continuation".into(),
            value: 0.1,
            prompts: 20,
        },
    ];
    e.activations = [(3, 2.0, 0.1), (5, 1.0, 0.9)]
        .into_iter()
        .map(|(layer, b, c)| ActivationEvidence {
            id: format!("projection:layer{layer}"),
            layer,
            direction: "d.safetensors (tensor direction)".into(),
            baseline_mean: b,
            candidate_mean: c,
            prompts: 20,
        })
        .collect();
    e.weights = vec![WeightEvidence {
        id: "weights:layer3.ffn_down".into(),
        layer: 3,
        matrix: "ffn_down".into(),
        baseline_l2_norm: 10.0,
        candidate_l2_norm: 9.5,
        summaries_differ: true,
    }];
    e.interventions = vec![InterventionEvidence {
        id: "candidate:p1:a7".into(),
        side: "candidate".into(),
        prompt: "p1".into(),
        mode: "subtract".into(),
        layer: Some(3),
        direction: Some("d.safetensors:direction".into()),
        alpha: Some(1.0),
    }];
    e
}

#[test]
fn claims_default_claims_each_kind_of_evidence_at_its_level_and_passes_the_check() {
    use vauban::report::claims::{ClaimStatus, check};
    let host = host();
    let m = ClaimMapper::new(
        load(&host, "vauban-plugin-claims-default"),
        "{}",
        SandboxOptions::default(),
    )
    .unwrap();
    let e = full_evidence();
    let claims = m.propose(&e).unwrap();
    let by_cite = |id: &str| {
        claims
            .iter()
            .find(|c| c.evidence.iter().any(|x| x == id))
            .unwrap_or_else(|| panic!("no claim cites {id}: {claims:#?}"))
    };
    assert_eq!(
        by_cite("d-refusal").strength,
        ClaimStrength::BlackBoxBehavioralDiff
    );
    // A metric its scorer read from logprobs is a distributional claim.
    assert_eq!(by_cite("d-ppl").strength, ClaimStrength::DistributionalDiff);
    let kl = by_cite("kl:first_token");
    assert_eq!(kl.strength, ClaimStrength::DistributionalDiff);
    assert!(kl.statement.contains("0.2000 nats"), "{}", kl.statement);
    // The layer that moved most, not every layer.
    let act = by_cite("projection:layer3");
    assert_eq!(act.strength, ClaimStrength::ActivationDiagnostic);
    assert!(
        !claims
            .iter()
            .any(|c| c.evidence.iter().any(|x| x == "projection:layer5"))
    );
    assert_eq!(
        by_cite("weights:layer3.ffn_down").strength,
        ClaimStrength::WeightDiff
    );
    for c in &claims {
        let checked = check(c, &e);
        assert_eq!(checked.status, ClaimStatus::Accepted, "{checked:#?}");
    }
    // Below the thresholds, no finding claims.
    let quiet = ClaimMapper::new(
        load(&host, "vauban-plugin-claims-default"),
        r#"{"min_kl": 1.0, "min_relative_shift": 2.0}"#,
        SandboxOptions::default(),
    )
    .unwrap();
    let claims = quiet.propose(&e).unwrap();
    assert!(claims.iter().all(|c| {
        !c.evidence
            .iter()
            .any(|x| x.starts_with("kl:") || x.starts_with("projection:"))
    }));
}

#[test]
fn a_claim_mapper_built_against_wit_0_1_sees_what_0_1_carried_and_is_checked() {
    use vauban::report::claims::{ClaimStatus, check};
    let host = host();
    let plugin = load(&host, "vauban-test-v0-1-claims");
    assert_eq!(plugin.facts.wit_version, "0.1.0");
    let m = ClaimMapper::new(plugin, "{}", SandboxOptions::default()).unwrap();
    assert_eq!(m.info().name, "v0-1-claims");
    let e = full_evidence();
    let claims = m.propose(&e).unwrap();
    assert_eq!(claims.len(), 1);
    // 0.1's evidence set: the deltas, polarity as a string, and the ids of
    // the intervention records.
    assert_eq!(
        claims[0].statement,
        "2 deltas (neutral, neutral) and 1 intervention record(s) seen"
    );
    assert_eq!(
        claims[0].evidence,
        ["d-refusal", "d-ppl", "candidate:p1:a7"]
    );
    // It claims an activation diagnostic but cites deltas (one read from
    // logprobs) and a record: the host keeps a distributional diff, scoped.
    let checked = check(&claims[0], &e);
    assert_eq!(checked.status, ClaimStatus::Downgraded);
    assert_eq!(checked.strength, Some(ClaimStrength::DistributionalDiff));
    assert_eq!(checked.scope.unwrap().layers, [3]);
}

/// A claim mapper built against 0.2.0 runs in a host of 0.3: it is shown
/// every record of the evidence set, every field as the host holds it (the
/// frozen version's conversion loses nothing), and its claim is checked.
#[test]
fn a_claim_mapper_built_against_wit_0_2_sees_the_whole_evidence_set() {
    use vauban::report::claims::{ClaimStatus, check};
    let host = host();
    let plugin = load(&host, "vauban-test-v0-2-claims");
    assert_eq!(plugin.facts.wit_version, "0.2.0");
    let m = ClaimMapper::new(plugin, "{}", SandboxOptions::default()).unwrap();
    let e = full_evidence();
    let claims = m.propose(&e).unwrap();
    assert_eq!(claims.len(), 1);
    let said = &claims[0].statement;
    for part in [
        "base_and_transformed Strength::ModelChangeAudit kinds 4",
        "delta d-ppl perplexity None 6 6.1 0.1 Some(0.05) Some(0.4) Some(0.001) 20 Polarity::Neutral",
        "rests-on 2",
        "kl kl:first_token first token 0.2 20",
        "kl kl:continuation continuation 0.1 20",
        "activation projection:layer3 3 d.safetensors (tensor direction) 2 0.1 20",
        "activation projection:layer5 5",
        "weight weights:layer3.ffn_down 3 ffn_down 10 9.5 true",
        "intervention candidate:p1:a7 candidate p1 subtract Some(3) Some(\"d.safetensors:direction\") Some(1.0)",
    ] {
        assert!(said.contains(part), "{part:?} missing from {said}");
    }
    assert_eq!(said.matches("delta ").count(), 2, "{said}");
    let checked = check(&claims[0], &e);
    assert_eq!(checked.status, ClaimStatus::Accepted, "{checked:#?}");
}

#[test]
fn a_plugin_of_the_wrong_world_is_refused_for_that_use() {
    let host = host();
    let e = Scorer::new(
        load(&host, "vauban-plugin-claims-default"),
        "{}",
        SandboxOptions::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(e, PluginError::WrongWorld { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("is a claim-mapper plugin; this needs a scorer"),
        "{e}"
    );
}

// ---- the sandbox: untrusted plugins -------------------------------------

/// Runs the `evil` scorer with `attack` on one trace, then checks that a
/// good plugin still runs in the same host.
fn attack(
    host: &PluginHost,
    attack: &str,
    sandbox: SandboxOptions,
) -> (Result<ScoreOutcome, PluginError>, Duration) {
    let deadline = sandbox.deadline;
    let s = Scorer::new(
        load(host, "vauban-test-evil"),
        &format!(r#"{{"attack": "{attack}"}}"#),
        sandbox,
    )
    .unwrap();
    let t = trace_completion("t0", "Hello", None);
    let start = Instant::now();
    let r = s.score(&[&t], None, None);
    let took = start.elapsed();
    // Only the tests whose subject is the deadline assert on `took`: on a
    // busy machine, time is no evidence about the other attacks.
    tracing::debug!("{attack} took {took:?} (deadline {deadline:?})");
    let good = scorer(host, "vauban-plugin-refusal", "{}")
        .score(&[&t], None, None)
        .unwrap();
    assert_eq!(
        value(&good, "t0", "refusal_rate"),
        Some(0.0),
        "the host still runs a good plugin after {attack}"
    );
    (r, took)
}

fn failure(r: Result<ScoreOutcome, PluginError>) -> (Failure, String) {
    match r {
        Err(PluginError::Call {
            failure, stderr, ..
        }) => (failure, stderr),
        other => panic!("expected a failed call, got {other:?}"),
    }
}

#[test]
fn an_infinite_loop_times_out_within_twice_the_deadline() {
    let host = host();
    // A margin of a whole deadline: the epoch ticker must win a core from
    // the loop on 2 busy cores.
    let deadline = Duration::from_secs(1);
    let (r, took) = attack(
        &host,
        "loop",
        SandboxOptions {
            deadline,
            ..Default::default()
        },
    );
    let (f, _) = failure(r);
    assert_eq!(f, Failure::Timeout { deadline });
    assert!(took < 2 * deadline, "took {took:?}");
    eprintln!("loop: timeout after {took:?} (deadline {deadline:?})");
}

#[test]
fn fuel_stops_a_loop_when_metering_is_on() {
    let host = PluginHost::new(HostOptions {
        fuel_metering: true,
        ..Default::default()
    })
    .unwrap();
    let (r, _) = attack(
        &host,
        "loop",
        SandboxOptions {
            fuel: Some(50_000_000),
            ..Default::default()
        },
    );
    assert_eq!(failure(r).0, Failure::OutOfFuel { fuel: 50_000_000 });
    // A sandbox asking for fuel from a host without metering is refused.
    let e = Scorer::new(
        load(&host_without_fuel(), "vauban-test-evil"),
        r#"{"attack": "none"}"#,
        SandboxOptions {
            fuel: Some(1),
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("without fuel metering"), "{e}");
}

fn host_without_fuel() -> PluginHost {
    host()
}

#[test]
fn a_memory_bomb_hits_the_memory_limit_by_name() {
    let host = host();
    let memory_bytes = 64 << 20;
    for bomb in ["memory", "huge_result"] {
        let start = Instant::now();
        let (r, _) = attack(
            &host,
            bomb,
            SandboxOptions {
                memory_bytes,
                ..Default::default()
            },
        );
        let (f, _) = failure(r);
        assert_eq!(
            f,
            Failure::MemoryLimit {
                limit: memory_bytes
            },
            "{bomb}"
        );
        assert!(f.to_string().starts_with("memory limit"), "{f}");
        eprintln!("{bomb}: memory limit after {:?}", start.elapsed());
    }
}

#[test]
fn files_environment_and_clock_are_not_the_hosts() {
    let host = host();
    let (r, _) = attack(&host, "read_file", SandboxOptions::default());
    let (f, _) = failure(r);
    match f {
        Failure::Plugin {
            kind: GuestErrorKind::Failed,
            message,
        } => {
            assert!(
                message.starts_with("could not read /etc/passwd"),
                "{message}"
            );
            assert!(!message.contains("root:"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // SAFETY: tests in this binary do not read this variable.
    unsafe { std::env::set_var("VAUBAN_TEST_SECRET", "s3cret") };
    let (r, _) = attack(&host, "env", SandboxOptions::default());
    assert_eq!(
        value(&r.unwrap(), "t0", "value"),
        Some(0.0),
        "no environment variables or arguments"
    );
    let (r, _) = attack(&host, "clock", SandboxOptions::default());
    assert_eq!(
        value(&r.unwrap(), "t0", "value"),
        Some(vauban::plugin::sandbox::FIXED_WALL_CLOCK_SECS as f64)
    );
}

#[test]
fn a_granted_data_directory_is_readable_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("input.txt"), b"twelve bytes").unwrap();
    let host = host();
    let grant = || SandboxOptions {
        data_dir: Some(dir.path().to_owned()),
        ..Default::default()
    };
    let (r, _) = attack(&host, "read_data", grant());
    assert_eq!(value(&r.unwrap(), "t0", "value"), Some(12.0));
    assert!(
        !dir.path().join("written.txt").exists(),
        "the grant is read-only"
    );
    // /etc stays out of reach with the grant.
    let (r, _) = attack(&host, "read_file", grant());
    let (f, _) = failure(r);
    assert!(
        matches!(f, Failure::Plugin { ref message, .. } if message.starts_with("could not read")),
        "{f:?}"
    );
    // Without the grant, /data does not exist.
    let (r, _) = attack(&host, "read_data", SandboxOptions::default());
    assert!(matches!(failure(r).0, Failure::Plugin { .. }));
}

// The deadline bounds time spent for the plugin in the host too, whatever
// WASI call it makes: one test per route that used to hold the host.

#[test]
fn a_sleeping_plugin_is_answered_on_virtual_time_within_the_deadline() {
    let host = host();
    let deadline = Duration::from_secs(1);
    let (r, took) = attack(
        &host,
        "sleep",
        SandboxOptions {
            deadline,
            ..Default::default()
        },
    );
    // The plugin slept 30 s on its own clock, in no host time.
    assert_eq!(value(&r.unwrap(), "t0", "value"), Some(30.0));
    assert!(took < 2 * deadline, "sleep took {took:?}");
    eprintln!("sleep(30 s): returned after {took:?} (deadline {deadline:?})");
}

#[test]
fn a_plugin_sleeping_in_configure_does_not_hold_the_host() {
    let host = host();
    // Loaded (compiled) before the clock starts: only the calls are timed.
    let plugin = load(&host, "vauban-test-evil");
    let deadline = Duration::from_secs(1);
    let start = Instant::now();
    // `new` instantiates, configures (which sleeps 30 s) and describes.
    let s = Scorer::new(
        plugin,
        r#"{"attack": "sleep_in_configure"}"#,
        SandboxOptions {
            deadline,
            ..Default::default()
        },
    );
    let took = start.elapsed();
    assert!(s.is_ok(), "{:?}", s.err());
    assert!(took < 2 * deadline, "configure took {took:?}");
}

#[test]
fn one_huge_random_request_is_refused_within_the_deadline() {
    let host = host();
    let deadline = Duration::from_secs(1);
    let (r, took) = attack(
        &host,
        "random_huge",
        SandboxOptions {
            deadline,
            ..Default::default()
        },
    );
    assert!(took < 2 * deadline, "random_huge took {took:?}");
    let (f, _) = failure(r);
    assert!(
        matches!(f, Failure::Trap { ref message, .. } if message.contains("exceeds limit 1048576")),
        "{f:?}"
    );
}

#[cfg(unix)]
#[test]
fn a_data_directory_holding_a_fifo_is_not_granted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("input.txt"), b"twelve bytes").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let fifo = dir.path().join("sub").join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let host = host();
    let plugin = load(&host, "vauban-test-evil");
    let deadline = Duration::from_secs(1);
    let start = Instant::now();
    let e = Scorer::new(
        plugin,
        r#"{"attack": "read_fifo"}"#,
        SandboxOptions {
            deadline,
            data_dir: Some(dir.path().to_owned()),
            ..Default::default()
        },
    )
    .err()
    .expect("a FIFO in the data directory is refused");
    // A FIFO read would block for ever; any finite bound shows it did not.
    assert!(start.elapsed() < Duration::from_secs(60));
    let message = e.to_string();
    assert!(
        message.contains("is a FIFO, not a regular file") && message.contains("sub/fifo"),
        "{message}"
    );
    // A symlink to a FIFO is refused the same way (links are followed).
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::rename(&fifo, elsewhere.path().join("fifo")).unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("fifo"),
        dir.path().join("sub").join("link"),
    )
    .unwrap();
    let e = Scorer::new(
        load(&host, "vauban-test-evil"),
        r#"{"attack": "none"}"#,
        SandboxOptions {
            data_dir: Some(dir.path().to_owned()),
            ..Default::default()
        },
    )
    .err()
    .expect("a link to a FIFO is refused");
    assert!(e.to_string().contains("sub/link is a FIFO"), "{e}");
}

#[test]
fn a_panic_and_a_stack_overflow_are_traps_with_stderr() {
    let host = host();
    let (r, _) = attack(&host, "panic", SandboxOptions::default());
    // The panic's message leads; the trap and the wasm backtrace follow.
    let said = r
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        said.starts_with(
            "plugin vauban-test-evil: `score` panicked: evil plugin panics on purpose (at "
        ),
        "{said}"
    );
    let backtrace = said
        .find("wasm backtrace:")
        .unwrap_or_else(|| panic!("{said}"));
    assert!(said.find("trap: ").is_some_and(|t| t < backtrace), "{said}");
    let (f, stderr) = failure(r);
    assert_eq!(f.kind(), "trap");
    assert!(stderr.contains("evil plugin panics on purpose"), "{stderr}");
    let Failure::Trap { message, backtrace } = &f else {
        panic!("{f:?}")
    };
    assert!(!message.contains("wasm backtrace"), "{message}");
    assert!(backtrace.is_some(), "{f:?}");
    let (r, _) = attack(&host, "stack", SandboxOptions::default());
    let (f, _) = failure(r);
    assert_eq!(f.kind(), "trap");
    assert!(
        f.to_string().contains("stack") || f.to_string().contains("out of bounds"),
        "{f}"
    );
}

#[test]
fn malformed_results_are_typed_errors() {
    let host = host();
    for (name, expect) in [
        ("nan", "not a finite number"),
        ("flood", "100000 metrics for 1 traces"),
        ("unknown_metric", "\"undeclared\" was not declared"),
    ] {
        let (r, _) = attack(&host, name, SandboxOptions::default());
        let (f, _) = failure(r);
        assert_eq!(f.kind(), "malformed_result", "{name}");
        assert!(f.to_string().contains(expect), "{name}: {f}");
    }
}

#[test]
fn scorers_see_metrics_recorded_in_the_trace() {
    let host = host();
    let (r, _) = attack(&host, "echo_metrics", SandboxOptions::default());
    assert_eq!(value(&r.unwrap(), "t0", "value"), Some(0.25));
}

#[test]
fn a_chatty_plugin_keeps_running_with_bounded_stderr() {
    // The subject is the bound on kept output, not time: 100,000 lines
    // through WASI take well over the default 1 s deadline on 2 busy
    // cores, so the deadline here is far from the test's way.
    let host = host();
    let stderr_bytes = 1024;
    let s = Scorer::new(
        load(&host, "vauban-test-evil"),
        r#"{"attack": "chatty"}"#,
        SandboxOptions {
            stderr_bytes,
            deadline: std::time::Duration::from_secs(300),
            ..Default::default()
        },
    )
    .unwrap();
    let t = trace_completion("t0", "Hello", None);
    let out = s.score(&[&t], None, None).unwrap();
    assert_eq!(value(&out, "t0", "value"), Some(1.0));
}

#[test]
fn a_socket_is_never_opened() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let host = host();
    let r = host.load(wasm("vauban-test-evil-socket")).and_then(|p| {
        let s = Scorer::new(
            p,
            &format!(r#"{{"addr": "{addr}"}}"#),
            SandboxOptions::default(),
        )?;
        s.score(&[&trace_completion("t0", "Hello", None)], None, None)
    });
    match &r {
        // Either the import is refused at load, or the connect is denied.
        Err(PluginError::Refused { problem, .. }) => {
            assert!(problem.to_string().contains("no network"), "{problem}")
        }
        Err(PluginError::Call {
            failure: Failure::Plugin { message, .. },
            ..
        }) => {
            assert!(message.starts_with("connect"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        listener.accept().is_err(),
        "no connection reached the listener"
    );
}

#[test]
fn a_plugin_built_for_another_wit_version_is_refused_naming_both() {
    let e = host().load(wasm("vauban-test-wrong-wit")).err().unwrap();
    let text = e.to_string();
    assert!(matches!(e, PluginError::Refused { .. }));
    assert!(
        text.contains("vauban:plugin@0.9.0") && text.contains("vauban:plugin@0.3.0"),
        "{text}"
    );
}

#[test]
fn non_components_are_refused_before_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"not wasm at all").unwrap();
    let e = host().load(&junk).err().unwrap();
    assert!(e.to_string().contains("not a WebAssembly component"), "{e}");
    let e = host().load(dir.path().join("missing.wasm")).err().unwrap();
    assert!(matches!(e, PluginError::Read { .. }), "{e}");
    // A sparse 1 TiB "plugin", and a FIFO, are refused before a byte is read.
    let huge = dir.path().join("huge.wasm");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let e = host().load(&huge).err().unwrap();
    assert!(e.to_string().contains("over the limit of 67108864"), "{e}");
    #[cfg(unix)]
    {
        let fifo = dir.path().join("fifo.wasm");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = host().load(&fifo).err().unwrap();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}

#[test]
fn compiled_plugins_are_cached_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = HostOptions {
        cache_dir: Some(dir.path().join("cache")),
        ..Default::default()
    };
    let first = PluginHost::new(opts.clone())
        .unwrap()
        .load(wasm("vauban-plugin-refusal"))
        .unwrap();
    assert!(!first.cached);
    let files: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .collect();
    assert_eq!(files.len(), 1);
    let second = PluginHost::new(opts)
        .unwrap()
        .load(wasm("vauban-plugin-refusal"))
        .unwrap();
    assert!(second.cached);
    assert_eq!(first.sha256, second.sha256);
    let s = Scorer::new(second, "{}", SandboxOptions::default()).unwrap();
    let t = trace_completion("t0", "I cannot do that.", None);
    assert_eq!(
        value(&s.score(&[&t], None, None).unwrap(), "t0", "refusal_rate"),
        Some(1.0)
    );
}
