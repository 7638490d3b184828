//! The Universal Scalability Law (Gunther) fitted to a controlled
//! concurrency sweep: throughput at concurrency N (a batch size, a queue
//! depth) as
//!
//! ```text
//! X(N) = λN / (1 + σ(N−1) + κN(N−1))
//! ```
//!
//! λ is the throughput of one unit of work alone, σ the share of work
//! serialised by contention, κ the cost of keeping units coherent with each
//! other (what makes throughput fall past a peak, at N* = √((1−σ)/κ)).
//!
//! The fit starts from the model's linear form (N/X is a quadratic in N:
//! `1/λ + (σ/λ)(N−1) + (κ/λ)N(N−1)`, solved by least squares), then
//! minimises the squared error of X itself by Levenberg–Marquardt. The
//! intervals are a residual bootstrap (each resample refitted); the
//! residuals are reported with the fit so a reader can judge it.

use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

/// Points a fit of three parameters needs before it says anything: with
/// three it would pass through them exactly.
pub const MIN_POINTS: usize = 4;

/// Bootstrap resamples behind the intervals.
pub const RESAMPLES: usize = 1000;

/// A parameter with its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Estimate {
    pub value: f64,
    /// 2.5th percentile of the bootstrap refits.
    pub ci_low: f64,
    /// 97.5th percentile of the bootstrap refits.
    pub ci_high: f64,
}

/// One point of the sweep with the fit's value there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residual {
    /// The concurrency.
    pub n: f64,
    /// The measured throughput.
    pub observed: f64,
    /// The fitted throughput.
    pub fitted: f64,
    /// `observed − fitted`.
    pub residual: f64,
}

/// A USL fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UslFit {
    /// Throughput of one unit alone (the units of the throughput given).
    pub lambda: Estimate,
    /// Contention: the serialised share of the work.
    pub sigma: Estimate,
    /// Coherency: the pairwise cost of keeping units consistent.
    pub kappa: Estimate,
    /// The concurrency of the highest modelled throughput, √((1−σ)/κ),
    /// when κ > 0 and σ < 1 (without coherency cost throughput never falls).
    pub peak_n: Option<f64>,
    /// Root mean square of the residuals.
    pub rmse: f64,
    /// Share of the throughput's variance across the points the fit explains.
    pub r_squared: f64,
    /// Each point, measured and fitted.
    pub residuals: Vec<Residual>,
    /// Bootstrap resamples behind the intervals, and their seed.
    pub resamples: usize,
    pub seed: u64,
}

/// Why a sweep cannot be fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UslError {
    #[error(
        "a USL fit has three parameters and needs at least {MIN_POINTS} concurrency levels; this sweep has {have}: record {} more (for example batch sizes 1, 2, 4, 8, 16)",
        MIN_POINTS - .have
    )]
    TooFewPoints { have: usize },
    #[error(
        "the concurrency levels must be distinct, at least 1, and ascending; got {0:?}: a controlled sweep varies one level at a time"
    )]
    NotAscending(Vec<f64>),
    #[error(
        "the throughput at N = {n} is {x}: every point needs a positive, finite throughput (did its traces run any tokens?)"
    )]
    BadThroughput { n: f64, x: f64 },
    #[error("the points do not determine the model ({0}); vary the concurrency more widely")]
    Degenerate(&'static str),
}

/// The model's throughput at `n`.
pub fn throughput(lambda: f64, sigma: f64, kappa: f64, n: f64) -> f64 {
    lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// Fits the USL to `(concurrency, throughput)` points, ascending in
/// concurrency; the intervals come from [`RESAMPLES`] residual-bootstrap
/// refits seeded with `seed`.
pub fn fit(points: &[(f64, f64)], seed: u64) -> Result<UslFit, UslError> {
    if points.len() < MIN_POINTS {
        return Err(UslError::TooFewPoints { have: points.len() });
    }
    let ns: Vec<f64> = points.iter().map(|p| p.0).collect();
    if ns.iter().any(|&n| !(n >= 1.0 && n.is_finite())) || ns.windows(2).any(|w| w[0] >= w[1]) {
        return Err(UslError::NotAscending(ns));
    }
    if let Some(&(n, x)) = points.iter().find(|p| !(p.1 > 0.0 && p.1.is_finite())) {
        return Err(UslError::BadThroughput { n, x });
    }
    let start = linear_start(points)?;
    let best = refine(points, start);
    let fitted: Vec<f64> = ns.iter().map(|&n| model(best, n)).collect();
    let residuals: Vec<f64> = points.iter().zip(&fitted).map(|(p, f)| p.1 - f).collect();
    // Residual bootstrap: the fitted curve plus resampled residuals, refitted.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut draws: [Vec<f64>; 3] = Default::default();
    for _ in 0..RESAMPLES {
        let resample: Vec<(f64, f64)> = ns
            .iter()
            .zip(&fitted)
            .map(|(&n, f)| (n, f + residuals[rng.random_range(0..residuals.len())]))
            .collect();
        let p = refine(&resample, best);
        for (d, v) in draws.iter_mut().zip(p) {
            d.push(v);
        }
    }
    let mut estimate = |k: usize| {
        let d = &mut draws[k];
        d.sort_by(f64::total_cmp);
        Estimate {
            value: best[k],
            ci_low: percentile(d, 0.025),
            ci_high: percentile(d, 0.975),
        }
    };
    let (lambda, sigma, kappa) = (estimate(0), estimate(1), estimate(2));
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let total: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let sse: f64 = residuals.iter().map(|r| r * r).sum();
    Ok(UslFit {
        peak_n: (best[2] > 0.0 && best[1] < 1.0).then(|| ((1.0 - best[1]) / best[2]).sqrt()),
        lambda,
        sigma,
        kappa,
        rmse: (sse / points.len() as f64).sqrt(),
        r_squared: if total > 0.0 { 1.0 - sse / total } else { 1.0 },
        residuals: points
            .iter()
            .zip(&fitted)
            .map(|(&(n, observed), &fitted)| Residual {
                n,
                observed,
                fitted,
                residual: observed - fitted,
            })
            .collect(),
        resamples: RESAMPLES,
        seed,
    })
}

/// `[λ, σ, κ]`.
type Params = [f64; 3];

fn model(p: Params, n: f64) -> f64 {
    throughput(p[0], p[1], p[2], n)
}

/// The least-squares solution of the model's linear form, N/X =
/// a + b(N−1) + cN(N−1), as `[1/a, b/a, c/a]`.
fn linear_start(points: &[(f64, f64)]) -> Result<Params, UslError> {
    let mut ata = [[0.0f64; 3]; 3];
    let mut aty = [0.0f64; 3];
    for &(n, x) in points {
        let row = [1.0, n - 1.0, n * (n - 1.0)];
        let y = n / x;
        for i in 0..3 {
            aty[i] += row[i] * y;
            for j in 0..3 {
                ata[i][j] += row[i] * row[j];
            }
        }
    }
    let [a, b, c] = solve3(ata, aty).ok_or(UslError::Degenerate("its linear form is singular"))?;
    if a.is_nan() || a <= 0.0 {
        return Err(UslError::Degenerate(
            "the throughput of one unit comes out non-positive",
        ));
    }
    Ok([1.0 / a, b / a, c / a])
}

/// Levenberg–Marquardt on the squared error of X, from `start`.
fn refine(points: &[(f64, f64)], start: Params) -> Params {
    let sse = |p: Params| -> f64 { points.iter().map(|&(n, x)| (x - model(p, n)).powi(2)).sum() };
    let mut p = start;
    let mut err = sse(p);
    let mut damping = 1e-3;
    for _ in 0..200 {
        // Normal equations of the linearised problem: (JᵀJ + μ·diag) δ = Jᵀr.
        let mut jtj = [[0.0f64; 3]; 3];
        let mut jtr = [0.0f64; 3];
        for &(n, x) in points {
            let d = 1.0 + p[1] * (n - 1.0) + p[2] * n * (n - 1.0);
            let f = p[0] * n / d;
            let j = [n / d, -f * (n - 1.0) / d, -f * n * (n - 1.0) / d];
            for a in 0..3 {
                jtr[a] += j[a] * (x - f);
                for b in 0..3 {
                    jtj[a][b] += j[a] * j[b];
                }
            }
        }
        let mut improved = false;
        while damping < 1e12 {
            let mut m = jtj;
            for (k, row) in m.iter_mut().enumerate() {
                row[k] += damping * jtj[k][k].max(1e-300);
            }
            let Some(step) = solve3(m, jtr) else {
                damping *= 10.0;
                continue;
            };
            let next = [p[0] + step[0], p[1] + step[1], p[2] + step[2]];
            let e = sse(next);
            if e.is_finite() && e < err {
                let relative = (err - e) / err.max(f64::MIN_POSITIVE);
                (p, err) = (next, e);
                damping = (damping / 10.0).max(1e-12);
                improved = relative > 1e-15;
                break;
            }
            damping *= 10.0;
        }
        if !improved {
            break;
        }
    }
    p
}

/// The solution of a 3×3 system by Gaussian elimination with partial
/// pivoting; `None` when it is singular.
fn solve3(mut m: [[f64; 3]; 3], mut v: [f64; 3]) -> Option<[f64; 3]> {
    let scale = m
        .iter()
        .flatten()
        .fold(0.0f64, |a, &x| a.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..3 {
        let pivot = (col..3).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() <= scale * 1e-14 {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let (head, rest) = m.split_at_mut(col + 1);
        let pivot_row = head[col];
        for (offset, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row.iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            v[col + 1 + offset] -= f * v[col];
        }
    }
    let mut x = [0.0f64; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (v[row] - tail) / m[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// The `q` quantile of sorted values (linear between the two nearest).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let at = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(lambda: f64, sigma: f64, kappa: f64, ns: &[f64]) -> Vec<(f64, f64)> {
        ns.iter()
            .map(|&n| (n, throughput(lambda, sigma, kappa, n)))
            .collect()
    }

    #[test]
    fn exact_points_give_back_the_parameters_that_made_them() {
        let points = sweep(1000.0, 0.05, 0.002, &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
        let f = fit(&points, 7).unwrap();
        for (got, want) in [
            (f.lambda.value, 1000.0),
            (f.sigma.value, 0.05),
            (f.kappa.value, 0.002),
        ] {
            assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
        }
        let peak = ((1.0 - 0.05) / 0.002f64).sqrt();
        assert!((f.peak_n.unwrap() - peak).abs() < 1e-3);
        assert!(f.rmse < 1e-6 && f.r_squared > 0.999_999, "{f:?}");
    }

    #[test]
    fn noisy_points_give_intervals_that_hold_the_truth() {
        // A fixed ±2% pattern of measurement noise on a known curve.
        let noise = [0.02, -0.015, 0.01, -0.02, 0.015, -0.01, 0.005];
        let ns = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0];
        let points: Vec<(f64, f64)> = sweep(500.0, 0.1, 0.003, &ns)
            .into_iter()
            .zip(noise)
            .map(|((n, x), e)| (n, x * (1.0 + e)))
            .collect();
        let f = fit(&points, 1).unwrap();
        for (e, truth) in [(f.lambda, 500.0), (f.sigma, 0.1), (f.kappa, 0.003)] {
            assert!(
                e.ci_low <= truth && truth <= e.ci_high,
                "{truth} outside [{}, {}]",
                e.ci_low,
                e.ci_high
            );
            assert!(e.ci_low <= e.value && e.value <= e.ci_high, "{e:?}");
        }
        // The same seed gives the same intervals.
        assert_eq!(fit(&points, 1).unwrap(), f);
    }

    #[test]
    fn linear_scaling_has_no_peak() {
        let f = fit(&sweep(100.0, 0.0, 0.0, &[1.0, 2.0, 3.0, 4.0, 5.0]), 0).unwrap();
        assert!(
            f.sigma.value.abs() < 1e-9 && f.kappa.value.abs() < 1e-9,
            "{f:?}"
        );
        assert_eq!(f.peak_n, None);
    }

    #[test]
    fn a_sweep_that_cannot_be_fitted_is_refused_saying_why() {
        let three = sweep(1.0, 0.1, 0.01, &[1.0, 2.0, 4.0]);
        let e = fit(&three, 0).unwrap_err();
        assert_eq!(e, UslError::TooFewPoints { have: 3 });
        assert!(e.to_string().contains("record 1 more"), "{e}");
        let unordered = [(1.0, 1.0), (4.0, 3.0), (2.0, 1.9), (8.0, 4.0)];
        assert!(matches!(fit(&unordered, 0), Err(UslError::NotAscending(_))));
        let zero = [(1.0, 1.0), (2.0, 0.0), (4.0, 3.0), (8.0, 4.0)];
        assert!(matches!(fit(&zero, 0), Err(UslError::BadThroughput { .. })));
    }
}
