//! Paired metric deltas: the baseline's and the candidate's values of one
//! metric on the same prompts, summarised with an interval and a p-value,
//! as claim mappers see them.

use rand::{Rng as _, SeedableRng as _};

use crate::evidence::MetricDelta;
use crate::evidence::Polarity;
use vauban_format::document::PairedTest;

use super::stats::{mcnemar_exact, paired_bootstrap};

/// Resamples for the bootstrap interval and permutations for the p-value
/// of continuous metrics.
pub const RESAMPLES: usize = 10_000;

/// One prompt's value on each side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    pub baseline: f64,
    pub candidate: f64,
}

/// The paired test a metric's pairs take, the one rule for it: McNemar's
/// exact test when every value is 0 or 1 (a rate, which also gets Wilson
/// intervals), a sign-flip permutation test otherwise.
pub fn paired_test(pairs: &[Pair]) -> PairedTest {
    let binary = pairs.iter().all(|p| {
        (p.baseline == 0.0 || p.baseline == 1.0) && (p.candidate == 0.0 || p.candidate == 1.0)
    });
    match binary {
        true => PairedTest::McnemarExact,
        false => PairedTest::SignFlipPermutation,
    }
}

/// Two-sided p-value of a paired sign-flip permutation test on the mean
/// difference, seeded (the observed assignment counts as one permutation).
pub fn sign_flip_p(pairs: &[Pair], permutations: usize, seed: u64) -> f64 {
    let diffs: Vec<f64> = pairs.iter().map(|p| p.candidate - p.baseline).collect();
    let observed = diffs.iter().sum::<f64>().abs();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut as_extreme = 1usize;
    for _ in 0..permutations {
        let s: f64 = diffs
            .iter()
            .map(|d| if rng.random::<bool>() { *d } else { -*d })
            .sum();
        // A tolerance for float sums that equal the observed one.
        if s.abs() >= observed - 1e-12 * observed.max(1.0) {
            as_extreme += 1;
        }
    }
    as_extreme as f64 / (permutations + 1) as f64
}

/// The paired comparison of one metric (in one category, or overall):
/// means, delta, a 95% paired-bootstrap interval of the delta, and a
/// p-value: McNemar's exact test when every value is 0 or 1 (a rate),
/// a sign-flip permutation test otherwise. `None` without pairs.
pub fn paired_delta(
    id: &str,
    metric: &str,
    category: Option<&str>,
    polarity: Polarity,
    pairs: &[Pair],
    seed: u64,
) -> Option<MetricDelta> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let baseline_mean = pairs.iter().map(|p| p.baseline).sum::<f64>() / n;
    let candidate_mean = pairs.iter().map(|p| p.candidate).sum::<f64>() / n;
    let b: Vec<f64> = pairs.iter().map(|p| p.baseline).collect();
    let c: Vec<f64> = pairs.iter().map(|p| p.candidate).collect();
    let ci = paired_bootstrap(&b, &c, RESAMPLES, 0.95, seed);
    let p_value = match paired_test(pairs) {
        PairedTest::McnemarExact => {
            let down = pairs
                .iter()
                .filter(|p| p.baseline == 1.0 && p.candidate == 0.0)
                .count();
            let up = pairs
                .iter()
                .filter(|p| p.baseline == 0.0 && p.candidate == 1.0)
                .count();
            mcnemar_exact(down as u64, up as u64)
        }
        PairedTest::SignFlipPermutation => sign_flip_p(pairs, RESAMPLES, seed),
    };
    Some(MetricDelta {
        rests_on: Vec::new(),
        judged_by: Vec::new(),
        id: id.to_owned(),
        metric: metric.to_owned(),
        category: category.map(str::to_owned),
        baseline_mean,
        candidate_mean,
        delta: candidate_mean - baseline_mean,
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
        p_value: Some(p_value),
        n: pairs.len() as u32,
        polarity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(f64, f64)]) -> Vec<Pair> {
        v.iter()
            .map(|&(baseline, candidate)| Pair {
                baseline,
                candidate,
            })
            .collect()
    }

    #[test]
    fn a_rate_uses_mcnemar_on_the_discordant_pairs() {
        // 10 prompts: 9 refused before and not after, 1 the other way round.
        let mut v = vec![(1.0, 0.0); 9];
        v.push((0.0, 1.0));
        let d = paired_delta(
            "d1",
            "refusal_rate",
            Some("harmful"),
            Polarity::Neutral,
            &pairs(&v),
            0,
        )
        .unwrap();
        assert_eq!((d.baseline_mean, d.candidate_mean), (0.9, 0.1));
        assert!((d.delta + 0.8).abs() < 1e-12);
        assert!((d.p_value.unwrap() - 22.0 / 1024.0).abs() < 1e-12);
        let (lo, hi) = (d.ci_low.unwrap(), d.ci_high.unwrap());
        assert!(lo < -0.8 + 1e-9 && -0.8 < hi && hi < 0.0, "{lo} {hi}");
        assert_eq!((d.n, d.category.as_deref()), (10, Some("harmful")));
    }

    #[test]
    fn a_continuous_metric_uses_a_seeded_sign_flip_test() {
        // Every prompt rose by 1 to 2: all 8 signs positive, so only the
        // observed assignment and its mirror are as extreme: p ≈ 2/2^8.
        let v: Vec<(f64, f64)> = (0..8)
            .map(|i| (i as f64, i as f64 + 1.0 + (i % 2) as f64))
            .collect();
        let d = paired_delta(
            "d2",
            "output_length_words",
            None,
            Polarity::Neutral,
            &pairs(&v),
            3,
        )
        .unwrap();
        let p = d.p_value.unwrap();
        assert!((p - 2.0 / 256.0).abs() < 0.005, "{p}");
        assert_eq!(
            d.p_value,
            paired_delta("d2", "m", None, Polarity::Neutral, &pairs(&v), 3)
                .unwrap()
                .p_value
        );
        // No change at all: p = 1.
        let same = pairs(&[(1.5, 1.5), (2.5, 2.5)]);
        assert_eq!(
            paired_delta("d3", "m", None, Polarity::Neutral, &same, 0)
                .unwrap()
                .p_value,
            Some(1.0)
        );
        assert!(paired_delta("d4", "m", None, Polarity::Neutral, &[], 0).is_none());
    }
}
