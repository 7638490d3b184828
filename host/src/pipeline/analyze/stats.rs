//! Paired statistics: each prompt's mean over its samples, the paired
//! delta of every metric overall and per category, and the adjustment of
//! their p-values for the family of tests.

use std::collections::HashMap;

use crate::config::Suite;
use crate::plugin::scorer::{MetricSpec, Polarity};
use crate::report::deltas::{Pair, paired_delta, paired_test};
use crate::report::document::{
    Adjustment, IntervalMethod, MultipleComparisons, PairedTest, ReportDelta,
};
use crate::report::stats::{Better, Z95, adjust_p_values, quality, wilson};
use crate::trace::ArtifactKind as K;

/// One side's metric values: (prompt id, metric) → value (the mean over
/// the prompt's samples when there are several).
pub type Values = HashMap<(String, String), f64>;

/// One side's metric values per sample: (prompt id, metric) → every
/// sample's value, in sample order.
pub type Samples = HashMap<(String, String), Vec<f64>>;

/// Each prompt's mean over its samples (what the paired statistics
/// compare: the prompt is the unit, not the sample), and the sample
/// standard deviation where it has two samples or more.
pub fn per_prompt(samples: &Samples) -> (Values, Values) {
    let mut means = Values::new();
    let mut spread = Values::new();
    for (k, v) in samples {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        means.insert(k.clone(), mean);
        if v.len() > 1 {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
            spread.insert(k.clone(), var.sqrt());
        }
    }
    (means, spread)
}

/// A metric a scorer declared, with the scorer's name.
#[derive(Debug, Clone)]
pub struct Declared {
    pub scorer: String,
    pub spec: MetricSpec,
    /// The artifact kinds the scorer reads: what its metrics rest on.
    pub needs: Vec<K>,
    /// The judges behind its values (a judged scorer), by config name.
    pub judged_by: Vec<String>,
    /// The judge's accuracy on this metric, and where it comes from in
    /// words, when the config calibrates it: the report corrects its rate.
    pub accuracy: Option<(crate::report::judged::Accuracy, String)>,
}

fn better(p: Polarity) -> Better {
    match p {
        Polarity::HigherIsBetter => Better::Higher,
        Polarity::LowerIsBetter => Better::Lower,
        Polarity::Neutral => Better::Neither,
    }
}

/// The id claims cite: `metric` overall, `metric@category` in a category.
pub fn delta_id(metric: &str, category: Option<&str>) -> String {
    match category {
        Some(c) => format!("{metric}@{c}"),
        None => metric.to_owned(),
    }
}

/// Paired deltas for every declared metric, overall then per category
/// (categories with at least one pair), in declaration order.
pub fn deltas(
    suite: &Suite,
    declared: &[Declared],
    baseline: &Values,
    candidate: &Values,
    seed: u64,
) -> Vec<ReportDelta> {
    let mut out = Vec::new();
    let mut groups: Vec<Option<&str>> = vec![None];
    groups.extend(suite.categories().into_iter().map(Some));
    for d in declared {
        let m = &d.spec.name;
        for &cat in &groups {
            let pairs: Vec<Pair> = suite
                .prompts
                .iter()
                .filter(|p| cat.is_none() || p.category.as_deref() == cat)
                .filter_map(|p| {
                    let k = (p.id.clone(), m.clone());
                    Some(Pair {
                        baseline: *baseline.get(&k)?,
                        candidate: *candidate.get(&k)?,
                    })
                })
                .collect();
            let id = delta_id(m, cat);
            let Some(md) = paired_delta(&id, m, cat, d.spec.polarity, &pairs, seed) else {
                continue;
            };
            let test = paired_test(&pairs);
            let binary = test == PairedTest::McnemarExact;
            let n = pairs.len() as u64;
            let rate_ci = |ones: usize| wilson(ones as u64, n, Z95).map(|(a, b)| [a, b]);
            let ci = md.ci_low.zip(md.ci_high);
            let rd = ReportDelta {
                id: id.clone(),
                metric: m.clone(),
                category: cat.map(str::to_owned),
                scorer: d.scorer.clone(),
                unit: d.spec.unit.clone(),
                polarity: d.spec.polarity,
                n: pairs.len(),
                baseline_mean: md.baseline_mean,
                candidate_mean: md.candidate_mean,
                delta: md.delta,
                percent_change: (md.baseline_mean != 0.0)
                    .then(|| 100.0 * md.delta / md.baseline_mean.abs()),
                ci_low: md.ci_low,
                ci_high: md.ci_high,
                baseline_rate_ci: binary
                    .then(|| rate_ci(pairs.iter().filter(|p| p.baseline == 1.0).count()))
                    .flatten(),
                candidate_rate_ci: binary
                    .then(|| rate_ci(pairs.iter().filter(|p| p.candidate == 1.0).count()))
                    .flatten(),
                interval: IntervalMethod::PairedBootstrap,
                rate_interval: binary.then_some(IntervalMethod::Wilson),
                test,
                p_value: md.p_value,
                // Set with `significant` once the whole family is known.
                p_adjusted: None,
                significant: false,
                quality: quality(md.delta, ci, better(d.spec.polarity)),
                rests_on: d.needs.clone(),
                judged_by: d.judged_by.clone(),
                corrected: None,
                corrected_unavailable: None,
            };
            let rd = match &d.accuracy {
                Some((accuracy, words)) => corrected(rd, &pairs, accuracy, words, seed),
                None => rd,
            };
            out.push(rd);
        }
    }
    out
}

/// `rd` with its rate corrected for the judge's errors, or the reason it
/// cannot be: the values must be 0/1 (one verdict per prompt), and the
/// judge better than chance.
fn corrected(
    mut rd: ReportDelta,
    pairs: &[Pair],
    accuracy: &crate::report::judged::Accuracy,
    words: &str,
    seed: u64,
) -> ReportDelta {
    use crate::report::document::CorrectedRate;
    let binary = |v: f64| v == 0.0 || v == 1.0;
    if !pairs
        .iter()
        .all(|p| binary(p.baseline) && binary(p.candidate))
    {
        rd.corrected_unavailable = Some(
            "not corrected: its values are not one 0/1 verdict per prompt (several samples per prompt average them)".into(),
        );
        return rd;
    }
    let b: Vec<bool> = pairs.iter().map(|p| p.baseline == 1.0).collect();
    let c: Vec<bool> = pairs.iter().map(|p| p.candidate == 1.0).collect();
    let result = crate::report::judged::corrected_delta(
        &b,
        &c,
        accuracy,
        crate::report::deltas::RESAMPLES,
        0.95,
        seed,
    )
    .and_then(|d| accuracy.rates().map(|rates| (d, rates)));
    match result {
        Ok((d, (sensitivity, specificity))) => {
            rd.corrected = Some(CorrectedRate {
                sensitivity,
                specificity,
                accuracy: words.to_owned(),
                baseline: d.corrected.0,
                candidate: d.corrected.1,
                delta: d.delta,
                ci_low: d.interval.0,
                ci_high: d.interval.1,
                calibration_in_interval: d.calibration_in_interval,
            });
        }
        Err(e) => rd.corrected_unavailable = Some(format!("not corrected: {e}")),
    }
    rd
}

/// The significance level adjusted p-values are compared with.
pub const ALPHA: f64 = 0.05;

/// Adjusts every delta's p-value for the family of all deltas with a
/// p-value (every metric, overall and per category: the tests one report
/// reads together), and decides `significant` on the adjusted value. The
/// claim mappers' view ([`ReportDelta::for_claims`]) carries the adjusted
/// value, so a mapper comparing it with its alpha needs no correction of
/// its own.
pub fn adjust(
    deltas: &mut [ReportDelta],
    method: Adjustment,
    categories: usize,
) -> MultipleComparisons {
    let tested: Vec<usize> = (0..deltas.len())
        .filter(|&i| deltas[i].p_value.is_some())
        .collect();
    let raw: Vec<f64> = tested
        .iter()
        .map(|&i| deltas[i].p_value.unwrap_or(f64::NAN))
        .collect();
    let adjusted = adjust_p_values(&raw, method);
    for (&i, &p) in tested.iter().zip(&adjusted) {
        deltas[i].p_adjusted = Some(p);
    }
    for rd in deltas.iter_mut() {
        let excludes_zero = rd
            .ci_low
            .zip(rd.ci_high)
            .is_some_and(|(lo, hi)| lo > 0.0 || hi < 0.0);
        rd.significant = rd.p_adjusted.is_some_and(|p| p < ALPHA) && excludes_zero;
    }
    let metrics = {
        let mut m: Vec<&str> = deltas.iter().map(|d| d.metric.as_str()).collect();
        m.sort_unstable();
        m.dedup();
        m.len()
    };
    let groups = match categories {
        0 => "over all prompts".to_owned(),
        1 => "over all prompts and in 1 category".to_owned(),
        c => format!("over all prompts and in each of {c} categories"),
    };
    MultipleComparisons {
        method,
        alpha: ALPHA,
        tests: tested.len(),
        family: format!(
            "every paired test of this report: {} metric(s) {groups}, {} test(s) with a p-value",
            metrics,
            tested.len()
        ),
    }
}
