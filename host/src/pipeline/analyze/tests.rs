use crate::config::file::{GateSection, Severity};
use crate::config::{Prompt, Redaction, Suite};
use crate::plugin::scorer::{MetricSpec, Polarity};
use crate::report::document::{Adjustment, PairedTest, ReportDelta};
use crate::report::stats::{Z95, wilson};
use crate::trace::{ArtifactKind as K, Role, Trace};

use super::*;

fn suite() -> Suite {
    let p = |id: &str, cat: &str| Prompt {
        id: id.into(),
        text: format!("text {id}"),
        category: Some(cat.into()),
        expected_behavior: None,
        redaction: Redaction::Safe,
        tags: vec![],
    };
    Suite::new(
        vec![p("a", "x"), p("b", "x"), p("c", "y"), p("d", "y")],
        "t",
    )
    .unwrap()
}

fn values(v: &[(&str, f64)]) -> Values {
    v.iter()
        .map(|(id, x)| ((id.to_string(), "m".to_string()), *x))
        .collect()
}

fn declared(polarity: Polarity) -> Vec<Declared> {
    vec![Declared {
        scorer: "s".into(),
        spec: MetricSpec {
            name: "m".into(),
            unit: "rate".into(),
            polarity,
            family: "f".into(),
            description: "d".into(),
        },
        needs: vec![K::Text, K::Logprobs],
        judged_by: Vec::new(),
        accuracy: None,
    }]
}

#[test]
fn deltas_are_overall_then_per_category_with_rate_intervals() {
    let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
    let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 1.0)]);
    let d = deltas(&suite(), &declared(Polarity::LowerIsBetter), &b, &c, 7);
    let ids: Vec<&str> = d.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["m", "m@x", "m@y"]);
    // Each delta rests on what its scorer reads (claims are checked on it).
    assert!(
        d.iter()
            .all(|x| x.for_claims().rests_on == [K::Text, K::Logprobs])
    );
    let overall = &d[0];
    assert_eq!((overall.baseline_mean, overall.candidate_mean), (0.5, 0.25));
    assert_eq!(overall.test, PairedTest::McnemarExact);
    // b = 2 discordant down, c = 1 up: p = 1 (two-sided exact, n = 3)
    assert_eq!(overall.p_value, Some(1.0));
    assert_eq!(overall.percent_change, Some(-50.0));
    let w = overall.baseline_rate_ci.unwrap();
    let (lo, hi) = wilson(2, 4, Z95).unwrap();
    assert_eq!(w, [lo, hi]);
    assert!(!overall.significant);
    let x = &d[1];
    assert_eq!((x.delta, x.n), (-1.0, 2));
}

/// A calibrated judged rate is corrected: each side's rate by the
/// Rogan–Gladen formula (worked here by hand), the interval around the
/// corrected difference; values that are not 0/1 say why they are not.
#[test]
fn a_calibrated_judged_rate_is_corrected_for_the_judges_errors() {
    use crate::report::judged::Accuracy;
    let mut d = declared(Polarity::Neutral);
    d[0].judged_by = vec!["referee".into()];
    d[0].accuracy = Some((
        Accuracy::Stated {
            sensitivity: 0.9,
            specificity: 0.95,
        },
        "stated".into(),
    ));
    let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
    let c = values(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 0.0)]);
    let out = deltas(&suite(), &d, &b, &c, 7);
    let k = out[0].corrected.as_ref().expect("corrected");
    // (0.5 + 0.95 - 1) / (0.9 + 0.95 - 1) = 0.45 / 0.85; 0.75 → 0.70 / 0.85.
    assert!((k.baseline - 0.45 / 0.85).abs() < 1e-12, "{k:?}");
    assert!((k.candidate - 0.70 / 0.85).abs() < 1e-12, "{k:?}");
    assert!((k.delta - 0.25 / 0.85).abs() < 1e-12);
    assert!(k.ci_low <= k.delta && k.delta <= k.ci_high, "{k:?}");
    assert!(!k.calibration_in_interval, "a stated accuracy is exact");
    assert_eq!(out[0].judged_by, ["referee"]);
    // Means of several samples are not verdicts: no correction, and why.
    let halves = values(&[("a", 0.5), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
    let out = deltas(&suite(), &d, &halves, &c, 7);
    assert!(out[0].corrected.is_none());
    assert!(
        out[0]
            .corrected_unavailable
            .as_deref()
            .is_some_and(|w| w.contains("not one 0/1 verdict per prompt")),
        "{:?}",
        out[0].corrected_unavailable
    );
}

#[test]
fn significance_is_decided_on_the_p_value_adjusted_for_the_family() {
    // Every prompt went 1 → 0: the interval excludes 0.
    let b = values(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]);
    let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
    let one = deltas(&suite(), &declared(Polarity::Neutral), &b, &c, 7).remove(0);
    assert!(one.ci_high.unwrap() < 0.0);
    // 40 tests; the one that moved has p = 0.029, the others 0.5.
    let family = |method| {
        let mut d: Vec<_> = (0..40)
            .map(|i| {
                let mut x = one.clone();
                let p = if i == 7 { 0.029 } else { 0.5 };
                x.p_value = Some(p);
                x
            })
            .collect();
        let m = adjust(&mut d, method, 2);
        (d, m)
    };
    let (d, m) = family(Adjustment::Holm);
    assert_eq!((m.method, m.tests, m.alpha), (Adjustment::Holm, 40, 0.05));
    assert!(m.family.contains("in each of 2 categories"), "{}", m.family);
    // Holm: 40 × 0.029 > 1, capped at 1: not significant.
    assert_eq!(d[7].p_value, Some(0.029));
    assert_eq!(d[7].p_adjusted, Some(1.0));
    assert!(d.iter().all(|x| !x.significant));
    // Claim mappers see the adjusted value.
    assert_eq!(d[7].for_claims().p_value, Some(1.0));
    let (d, _) = family(Adjustment::BenjaminiHochberg);
    assert!(!d[7].significant);
    assert!(d[7].p_adjusted.unwrap() > 0.05);
    // Unadjusted, the same delta is significant (the old behaviour).
    let (d, m) = family(Adjustment::None);
    assert_eq!(m.tests, 40);
    assert!(d[7].significant && d[7].p_adjusted == Some(0.029));
    assert_eq!(d.iter().filter(|x| x.significant).count(), 1);
    // A delta without a test is outside the family and never significant.
    let mut d = vec![one.clone(), one.clone()];
    d[1].p_value = None;
    d[0].p_value = Some(0.001);
    let m = adjust(&mut d, Adjustment::Holm, 0);
    assert_eq!(m.tests, 1);
    assert_eq!(d[0].p_adjusted, Some(0.001));
    assert!(d[0].significant && !d[1].significant);
    assert_eq!(d[1].p_adjusted, None);
}

#[test]
fn gates_pass_fail_and_count_missing_data() {
    let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0)]);
    let c = values(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
    let d: Vec<ReportDelta> = deltas(&suite(), &declared(Polarity::Neutral), &b, &c, 7);
    let g = |metric: &str, cat: Option<&str>, min: Option<f64>, max: Option<f64>, severity| {
        GateSection {
            name: None,
            metric: metric.into(),
            category: cat.map(Into::into),
            min_delta: min,
            max_delta: max,
            severity,
        }
    };
    let r = gates(
        &[
            g("m", Some("x"), None, Some(-0.5), Severity::Fail),
            g("m", None, Some(0.0), None, Severity::Warn),
            g("m", None, Some(0.0), None, Severity::Fail),
            g("nope", None, Some(0.0), None, Severity::Fail),
        ],
        &d,
    );
    let outcomes: Vec<&str> = r.iter().map(|g| g.outcome.as_str()).collect();
    assert_eq!(outcomes, ["pass", "warn", "fail", "no_data"]);
    let fails: Vec<bool> = r.iter().map(gate_fails).collect();
    assert_eq!(fails, [false, false, true, true]);
    assert!(
        r[2].message.contains("-0.5000 is not >= 0"),
        "{}",
        r[2].message
    );
}

/// One side's traces of `suite()`'s prompts, each with `completion`.
fn traces(side: &str, completions: &[(&str, &str)]) -> Vec<Trace> {
    completions
        .iter()
        .map(|(id, text)| {
            crate::trace::fixture::TraceFixture::new(format!("{side}-{id}"))
                .prompt_id(id)
                .text(Role::Completion, text)
                .trace()
        })
        .collect()
}

#[test]
fn the_prompt_table_has_every_prompt_as_the_examples_show_it() {
    let mut suite = suite();
    suite.prompts[1].redaction = Redaction::Redacted;
    suite.prompts[2].redaction = Redaction::Omitted;
    let base = traces(
        "b",
        &[
            ("a", "Héllo wörld"),
            ("b", "secret"),
            ("c", "x"),
            ("d", "same"),
        ],
    );
    let cand = traces(
        "c",
        &[
            ("a", "Héllo wärld"),
            ("b", "secret!"),
            ("c", "y"),
            ("d", "same"),
        ],
    );
    let (base, cand): (Vec<&Trace>, Vec<&Trace>) = (base.iter().collect(), cand.iter().collect());
    let b = values(&[("a", 1.0), ("b", 1.0), ("c", 0.0)]);
    let c = values(&[("a", 0.0), ("b", 1.0), ("c", 1.0), ("d", 0.5)]);
    let metrics = ["m".to_string(), "never".to_string()];
    let none = Values::new();
    let rows = prompt_rows(
        &suite,
        &base,
        &cand,
        (&b, &c),
        (&none, &none),
        &metrics,
        true,
    );
    // Suite order, the omitted prompt absent.
    let ids: Vec<&str> = rows.iter().map(|r| r.prompt_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "d"]);
    let a = &rows[0];
    assert_eq!(a.prompt, "text a");
    assert_eq!(a.baseline_output.as_deref(), Some("Héllo wörld"));
    assert_eq!(a.metrics["m"], [Some(1.0), Some(0.0)]);
    // A metric no side has is not listed.
    assert!(!a.metrics.contains_key("never"));
    // Counted in characters: `é` before the difference is one, not two bytes.
    assert_eq!(a.first_difference, Some(7));
    // Redacted: the placeholder, no outputs, no offset computed from them.
    let r = &rows[1];
    assert_eq!(r.redaction, Redaction::Redacted);
    assert_eq!(r.prompt, "[redacted x prompt]");
    assert_eq!((&r.baseline_output, &r.candidate_output), (&None, &None));
    assert_eq!(r.first_difference, None);
    // One side without a value; equal outputs have no difference.
    let d = &rows[2];
    assert_eq!(d.metrics["m"], [None, Some(0.5)]);
    assert_eq!(d.first_difference, None);
    // The examples show the same texts for the same prompts.
    let ex = examples(&suite, &base, &cand, (&b, &c), &metrics, 10, true);
    for e in &ex {
        let row = rows.iter().find(|r| r.prompt_id == e.prompt_id).unwrap();
        assert_eq!(e.prompt.as_deref(), Some(row.prompt.as_str()));
        assert_eq!(e.baseline_output, row.baseline_output);
        assert_eq!(e.candidate_output, row.candidate_output);
    }
    assert!(ex.iter().all(|e| e.prompt_id != "c"));
    // Outputs not recorded: texts null everywhere, prompts still shown.
    let rows = prompt_rows(
        &suite,
        &base,
        &cand,
        (&b, &c),
        (&none, &none),
        &metrics,
        false,
    );
    assert!(rows.iter().all(|r| r.baseline_output.is_none()
        && r.candidate_output.is_none()
        && r.first_difference.is_none()));
    assert_eq!(rows[0].prompt, "text a");
}

#[test]
fn kl_by_position_averages_the_prompts_present() {
    assert_eq!(by_position(&[vec![1.0, 3.0], vec![3.0]]), vec![2.0, 3.0]);
    let p = &suite().prompts[0];
    let same = vec![vec![(0.5f32).ln(), (0.5f32).ln()]];
    let other = vec![vec![(0.9f32).ln(), (0.1f32).ln()]];
    let (k, per, rest) = prompt_kl(p, &same, &other).unwrap();
    assert!((k.first_token_kl - 0.510_825_6).abs() < 1e-5, "{k:?}");
    assert_eq!(per.len(), 1);
    assert!(rest[0].abs() < 1e-6);
    assert_eq!(prompt_kl(p, &same, &same).unwrap().0.mean_kl, 0.0);
}
