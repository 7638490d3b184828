//! Paired statistics for baseline-versus-candidate comparisons: Wilson
//! intervals for rates, McNemar's exact test for paired binary outcomes, a
//! seeded paired bootstrap for continuous metrics, and the KL divergence
//! between next-token distributions.

use rand::{Rng as _, SeedableRng as _};
pub use vauban_format::document::Quality;

/// The two-sided 95% normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Wilson score interval for `successes` out of `n` at normal quantile `z`.
/// `None` when `n` is 0 or `successes > n`.
pub fn wilson(successes: u64, n: u64, z: f64) -> Option<(f64, f64)> {
    if n == 0 || successes > n {
        return None;
    }
    let (k, n) = (successes as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    // At 0 or n successes the bound is exactly 0 or 1; the formula leaves
    // rounding residue (2.8e-17) there.
    let low = if successes == 0 {
        0.0
    } else {
        (center - margin).max(0.0)
    };
    let high = if k == n {
        1.0
    } else {
        (center + margin).min(1.0)
    };
    Some((low, high))
}

/// McNemar's exact test: the two-sided binomial p-value of `b` pairs that
/// went one way (baseline 1, candidate 0) against `c` that went the other,
/// under p = 1/2. 1 when there are no discordant pairs.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    // Σ_{i ≤ min(b, c)} C(n, i) / 2^n, in log space so large n stays finite.
    let k = b.min(c);
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_c = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_c + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

/// Paired bootstrap percentile interval of the mean of `candidate − baseline`
/// at `level` (0.95), from `resamples` resamples drawn with a ChaCha8
/// stream seeded by `seed` (the same inputs and seed give the same interval).
/// `None` for unequal or empty inputs.
pub fn paired_bootstrap(
    baseline: &[f64],
    candidate: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<(f64, f64)> {
    if baseline.len() != candidate.len() || baseline.is_empty() || resamples == 0 {
        return None;
    }
    let diffs: Vec<f64> = candidate.iter().zip(baseline).map(|(c, b)| c - b).collect();
    let n = diffs.len();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| diffs[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - level) / 2.0;
    let at = |q: f64| means[((q * resamples as f64).floor() as usize).min(resamples - 1)];
    Some((at(alpha), at(1.0 - alpha)))
}

/// KL(P ‖ Q) in nats between two distributions given as log-probabilities
/// over the same support. `None` when the lengths differ or a value is NaN.
pub fn kl_divergence(p_log: &[f32], q_log: &[f32]) -> Option<f64> {
    if p_log.len() != q_log.len() || p_log.iter().chain(q_log).any(|v| v.is_nan()) {
        return None;
    }
    Some(
        p_log
            .iter()
            .zip(q_log)
            .filter(|(p, _)| p.is_finite())
            .map(|(&p, &q)| {
                let (p, q) = (f64::from(p), f64::from(q));
                p.exp() * (p - q)
            })
            .sum(),
    )
}

/// KL(P ‖ Q) over a partition of the vocabulary into the tokens whose
/// log-probabilities are given (`p_log`, `q_log`, the same tokens in the
/// same order) and one bucket for every other token, holding the mass the
/// given ones leave. By the data-processing inequality this is at most the
/// full KL, and equal to it when the rest of the vocabulary is
/// proportionally distributed under both. Also returns P's mass outside the
/// given tokens. `None` for mismatched lengths or NaN.
pub fn kl_divergence_with_rest(p_log: &[f32], q_log: &[f32]) -> Option<(f64, f64)> {
    let kept = kl_divergence(p_log, q_log)?;
    let mass = |v: &[f32]| v.iter().map(|&l| f64::from(l).exp()).sum::<f64>();
    // Rounding can push a sum just over 1; the rest is then empty.
    let p_rest = (1.0 - mass(p_log)).max(0.0);
    let q_rest = (1.0 - mass(q_log)).max(0.0);
    let rest = match (p_rest, q_rest) {
        (p, _) if p <= f64::EPSILON => 0.0,
        // P keeps mass where Q (to rounding) has none: the KL is as large
        // as the floor makes it, which stands for "very large".
        (p, q) => p * (p.ln() - q.max(1e-12).ln()),
    };
    Some((kept + rest, p_rest))
}

/// A lower bound of KL(P ‖ Q) at one position when each side kept its own
/// top k (an endpoint's log-probabilities), from:
/// - `shared`: (log P, log Q) of the tokens in both top-k lists;
/// - `p_only`: log P of the baseline's top-k tokens missing from Q's top k;
/// - `q_topk`: every log Q of Q's own top k.
///
/// The vocabulary is cut into the shared tokens, one cell B for the
/// tokens only P kept, and the rest. Q(B) is unknown, but those tokens are
/// below Q's k-th, so `Q(B) ≤ |B|·q_k` and `Q(B) ≤ 1 − Q(top k)`. The
/// partition's KL is at most the full KL for any Q(B) (data processing);
/// its smallest value over the feasible Q(B) (convex, at the proportional
/// split, clipped to the bound) is therefore a lower bound whatever Q(B)
/// was. Disjoint top-k lists give a large figure, not zero. Also returns
/// P's mass outside the shared tokens. `None` on NaN.
pub fn kl_lower_bound_own_top_k(
    shared: &[(f32, f32)],
    p_only: &[f32],
    q_topk: &[f32],
) -> Option<(f64, f64)> {
    let all = shared
        .iter()
        .flat_map(|&(a, b)| [a, b])
        .chain(p_only.iter().copied())
        .chain(q_topk.iter().copied());
    if all.clone().any(f32::is_nan) {
        return None;
    }
    let e = |l: f32| f64::from(l).exp();
    let term = |p: f64, q: f64| match p {
        p if p <= f64::EPSILON => 0.0,
        p => p * (p.ln() - q.max(1e-12).ln()),
    };
    let p_s: f64 = shared.iter().map(|&(a, _)| e(a)).sum();
    let q_s: f64 = shared.iter().map(|&(_, b)| e(b)).sum();
    let p_b: f64 = p_only.iter().map(|&l| e(l)).sum();
    let p_r = (1.0 - p_s - p_b).max(0.0);
    let q_free = (1.0 - q_s).max(0.0);
    let q_k = q_topk.iter().copied().fold(f32::INFINITY, f32::min);
    let q_outside = (1.0 - q_topk.iter().map(|&l| e(l)).sum::<f64>()).max(0.0);
    let q_b_max = match p_only.len() {
        0 => 0.0,
        n => (n as f64 * e(q_k)).min(q_outside).min(q_free),
    };
    let q_b = match p_b + p_r {
        t if t <= f64::EPSILON => 0.0,
        t => (q_free * p_b / t).min(q_b_max),
    };
    let kept: f64 = shared.iter().map(|&(a, b)| term(e(a), e(b))).sum();
    Some((
        kept + term(p_b, q_b) + term(p_r, q_free - q_b),
        (1.0 - p_s).max(0.0),
    ))
}

/// How a family of p-values is adjusted for multiple comparisons.
pub use vauban_format::document::Adjustment;

/// The p-values of one family adjusted by `method`, in the input's order.
///
/// - Holm-Bonferroni (step-down): the i-th smallest p becomes
///   `max over j ≤ i of min(1, (m − j + 1)·p(j))`; rejecting where the
///   adjusted value is below α keeps the family-wise error rate at α under
///   any dependence between the tests.
/// - Benjamini-Hochberg (step-up): the i-th smallest p becomes
///   `min over j ≥ i of min(1, m·p(j)/j)`; rejecting below α keeps the
///   false discovery rate at α for independent or positively dependent
///   tests (an overall delta and its categories' deltas are positively
///   dependent).
/// - None: the raw values.
///
/// NaN stays NaN and is not counted in `m`.
pub fn adjust_p_values(p: &[f64], method: Adjustment) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let m = order.len() as f64;
    let mut out = p.to_vec();
    match method {
        Adjustment::None => {}
        Adjustment::Holm => {
            let mut running = 0.0f64;
            for (rank, &i) in order.iter().enumerate() {
                running = running.max(((m - rank as f64) * p[i]).min(1.0));
                out[i] = running;
            }
        }
        Adjustment::BenjaminiHochberg => {
            let mut running = 1.0f64;
            for (rank, &i) in order.iter().enumerate().rev() {
                running = running.min((m * p[i] / (rank + 1) as f64).min(1.0));
                out[i] = running;
            }
        }
    }
    out
}

/// The direction of a metric that is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
    Neither,
}

/// Labels a delta: unchanged when the interval (if any) contains 0 or the
/// delta is 0; otherwise improved or regressed by polarity.
pub fn quality(delta: f64, interval: Option<(f64, f64)>, better: Better) -> Quality {
    let unchanged = delta == 0.0 || interval.is_some_and(|(lo, hi)| lo <= 0.0 && hi >= 0.0);
    match (better, unchanged) {
        (Better::Neither, _) => Quality::Neutral,
        (_, true) => Quality::Unchanged,
        (Better::Higher, false) if delta > 0.0 => Quality::Improved,
        (Better::Lower, false) if delta < 0.0 => Quality::Improved,
        _ => Quality::Regressed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_softmax(logits: &[f64]) -> Vec<f32> {
        let lse = logits.iter().map(|l| l.exp()).sum::<f64>().ln();
        logits.iter().map(|l| (l - lse) as f32).collect()
    }

    #[test]
    fn kl_with_rest_is_the_full_kl_over_every_token_and_a_lower_bound_over_fewer() {
        let p = log_softmax(&[2.0, 1.0, 0.5, -1.0, -3.0, 0.0]);
        let q = log_softmax(&[1.0, 1.5, 0.0, 0.5, -1.0, -2.0]);
        let full = kl_divergence(&p, &q).unwrap();
        let (all, rest) = kl_divergence_with_rest(&p, &q).unwrap();
        assert!((all - full).abs() < 1e-6, "{all} vs {full}");
        assert!(rest < 1e-6);
        // P's three most likely tokens (ids 0, 1, 5) and one bucket.
        let pick = |v: &[f32]| [v[0], v[1], v[5]];
        let (top, rest) = kl_divergence_with_rest(&pick(&p), &pick(&q)).unwrap();
        assert!(top <= full + 1e-9 && top > 0.0, "{top} vs {full}");
        let p_rest: f64 = [2, 3, 4].iter().map(|&i| f64::from(p[i]).exp()).sum();
        assert!((rest - p_rest).abs() < 1e-6);
        // Equal distributions: zero, whatever the tokens kept.
        assert!(
            kl_divergence_with_rest(&pick(&p), &pick(&p))
                .unwrap()
                .0
                .abs()
                < 1e-9
        );
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() < tol
    }

    #[test]
    fn wilson_matches_the_hand_computed_interval() {
        // 8/10: p̂ = 0.8, z² = 3.8415; centre 0.99207/1.38415 = 0.71674,
        // margin 1.96·√0.0256037/1.38415 = 0.22658 → [0.49016, 0.94332].
        let (lo, hi) = wilson(8, 10, Z95).unwrap();
        assert!(
            close(lo, 0.490_16, 1e-4) && close(hi, 0.943_32, 1e-4),
            "{lo} {hi}"
        );
        // 0/20 keeps a non-zero upper bound: z²/(n + z²) = 0.16113.
        let (lo, hi) = wilson(0, 20, Z95).unwrap();
        assert_eq!(lo, 0.0);
        assert!(close(hi, 0.161_13, 1e-4), "{hi}");
        // all successes: the upper bound is exactly 1, the lower symmetric
        let (lo, hi) = wilson(20, 20, Z95).unwrap();
        assert_eq!(hi, 1.0);
        assert!(close(lo, 1.0 - 0.161_13, 1e-4), "{lo}");
        assert_eq!(wilson(1, 0, Z95), None);
        assert_eq!(wilson(3, 2, Z95), None);
    }

    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        // b = 1, c = 9: 2·(C(10,0) + C(10,1))/2^10 = 22/1024.
        assert!(close(mcnemar_exact(1, 9), 22.0 / 1024.0, 1e-12));
        assert!(close(mcnemar_exact(9, 1), 22.0 / 1024.0, 1e-12));
        // b = 0, c = 5: 2/32.
        assert!(close(mcnemar_exact(0, 5), 0.0625, 1e-12));
        assert_eq!(mcnemar_exact(4, 4), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // Large n stays finite: b = 400, c = 600 is far in the tail.
        let p = mcnemar_exact(400, 600);
        assert!(p > 0.0 && p < 1e-9, "{p}");
    }

    #[test]
    fn bootstrap_is_seeded_and_matches_a_case_worked_by_hand() {
        // Differences [0, 1]: resampled means are 0, 0.5, 1 with
        // probabilities 1/4, 1/2, 1/4, so the 95% percentile interval is [0, 1].
        let (lo, hi) = paired_bootstrap(&[0.0, 0.0], &[0.0, 1.0], 4000, 0.95, 7).unwrap();
        assert_eq!((lo, hi), (0.0, 1.0));
        // A constant difference gives a point interval at that difference.
        let b = [1.0, 2.0, 3.0, 4.0];
        let c = [1.5, 2.5, 3.5, 4.5];
        assert_eq!(paired_bootstrap(&b, &c, 500, 0.95, 1), Some((0.5, 0.5)));
        // Same seed, same interval; it brackets the observed mean difference.
        let b: Vec<f64> = (0..50).map(|i| (i % 7) as f64).collect();
        let c: Vec<f64> = (0..50)
            .map(|i| (i % 7) as f64 + ((i * 37) % 101) as f64 / 101.0 - 0.3)
            .collect();
        let x = paired_bootstrap(&b, &c, 2000, 0.95, 42).unwrap();
        assert_eq!(x, paired_bootstrap(&b, &c, 2000, 0.95, 42).unwrap());
        assert_ne!(x, paired_bootstrap(&b, &c, 2000, 0.95, 43).unwrap());
        let mean = c.iter().zip(&b).map(|(c, b)| c - b).sum::<f64>() / 50.0;
        assert!(x.0 < mean && mean < x.1, "{x:?} {mean}");
        assert_eq!(paired_bootstrap(&b, &c[..3], 10, 0.95, 0), None);
    }

    #[test]
    fn kl_matches_the_hand_computed_value() {
        // P = (0.5, 0.5), Q = (0.9, 0.1): 0.5·ln(0.5/0.9) + 0.5·ln(0.5/0.1) = 0.5108256.
        let p = [0.5f32.ln(), 0.5f32.ln()];
        let q = [0.9f32.ln(), 0.1f32.ln()];
        assert!(close(kl_divergence(&p, &q).unwrap(), 0.510_825_6, 1e-6));
        assert!(close(kl_divergence(&p, &p).unwrap(), 0.0, 1e-12));
        // A token P never emits (log 0) contributes nothing.
        let p0 = [0.0f32, f32::NEG_INFINITY];
        assert!(close(kl_divergence(&p0, &q).unwrap(), -(0.9f64.ln()), 1e-6));
        assert_eq!(kl_divergence(&p, &q[..1]), None);
        assert_eq!(kl_divergence(&[f32::NAN, 0.0], &q), None);
    }

    #[test]
    fn holm_and_bh_match_r_p_adjust() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005, 0.2), "holm") and "BH".
        let p = [0.01, 0.04, 0.03, 0.005, 0.2];
        let holm = adjust_p_values(&p, Adjustment::Holm);
        for (got, want) in holm.iter().zip([0.04, 0.09, 0.09, 0.025, 0.2]) {
            assert!(close(*got, want, 1e-12), "holm {holm:?}");
        }
        let bh = adjust_p_values(&p, Adjustment::BenjaminiHochberg);
        for (got, want) in bh.iter().zip([0.025, 0.05, 0.05, 0.025, 0.2]) {
            assert!(close(*got, want, 1e-12), "bh {bh:?}");
        }
        assert_eq!(adjust_p_values(&p, Adjustment::None), p.to_vec());
        // 0.029 alone stays 0.029; among 40 tests Holm lifts it above 0.05.
        assert_eq!(adjust_p_values(&[0.029], Adjustment::Holm), vec![0.029]);
        let mut many = vec![0.5; 39];
        many.push(0.029);
        assert!(adjust_p_values(&many, Adjustment::Holm)[39] > 0.05);
        // Adjusted values never fall below the raw ones and stay ≤ 1.
        let big = [0.9, 0.8, 0.7];
        for method in [Adjustment::Holm, Adjustment::BenjaminiHochberg] {
            let a = adjust_p_values(&big, method);
            assert!(
                a.iter().zip(&big).all(|(a, p)| a >= p && *a <= 1.0),
                "{a:?}"
            );
        }
        let with_nan = adjust_p_values(&[f64::NAN, 0.01, 0.02], Adjustment::Holm);
        assert!(with_nan[0].is_nan());
        assert!(close(with_nan[1], 0.02, 1e-12) && close(with_nan[2], 0.02, 1e-12));
    }

    #[test]
    fn quality_follows_polarity_and_the_interval() {
        assert_eq!(
            quality(0.2, Some((0.1, 0.3)), Better::Higher),
            Quality::Improved
        );
        assert_eq!(
            quality(0.2, Some((0.1, 0.3)), Better::Lower),
            Quality::Regressed
        );
        assert_eq!(quality(-0.2, None, Better::Lower), Quality::Improved);
        assert_eq!(
            quality(0.2, Some((-0.1, 0.3)), Better::Higher),
            Quality::Unchanged
        );
        assert_eq!(quality(0.0, None, Better::Higher), Quality::Unchanged);
        assert_eq!(quality(0.2, None, Better::Neither), Quality::Neutral);
    }

    #[test]
    fn the_own_top_k_bound_is_a_lower_bound_and_sees_disjoint_lists() {
        // A 6-token vocabulary, both distributions known.
        let lp = |v: &[f64]| -> Vec<f32> {
            let z: f64 = v.iter().sum();
            v.iter().map(|x| (x / z).ln() as f32).collect()
        };
        let p = lp(&[8.0, 4.0, 2.0, 1.0, 0.5, 0.5]);
        let q = lp(&[1.0, 4.0, 8.0, 0.5, 2.0, 0.5]);
        let full = kl_divergence(&p, &q).unwrap();
        // Top 3: P keeps {0, 1, 2}, Q keeps {2, 1, 4}.
        let shared = [(p[1], q[1]), (p[2], q[2])];
        let (bound, rest) =
            kl_lower_bound_own_top_k(&shared, &[p[0]], &[q[2], q[1], q[4]]).unwrap();
        assert!(bound > 0.0 && bound <= full + 1e-9, "{bound} vs {full}");
        assert!((rest - (1.0 - (p[1] as f64).exp() - (p[2] as f64).exp())).abs() < 1e-6);
        // Identical distributions: zero.
        let same = [(p[0], p[0]), (p[1], p[1]), (p[2], p[2])];
        let (zero, _) = kl_lower_bound_own_top_k(&same, &[], &[p[0], p[1], p[2]]).unwrap();
        assert!(zero.abs() < 1e-9, "{zero}");
        // Disjoint top k: far from zero, still below the full KL.
        let (far, _) = kl_lower_bound_own_top_k(&[], &[p[0], p[1]], &[q[2], q[4]]).unwrap();
        assert!(far > 0.3 && far <= full + 1e-9, "{far} vs {full}");
    }
}
