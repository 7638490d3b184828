//! Rates measured by an imperfect judge, corrected for its errors.
//!
//! A judge (a model asked "does this reply refuse?") calls a true positive
//! positive with probability `Se` (sensitivity) and a true negative
//! negative with probability `Sp` (specificity). The rate it observes is
//! then `p_obs = Se·π + (1 − Sp)·(1 − π)` for a true rate `π`, so
//!
//! `π = (p_obs + Sp − 1) / (Se + Sp − 1)` (Rogan and Gladen, 1978),
//!
//! defined when the judge beats chance (`J = Se + Sp − 1 > 0`, Youden's
//! index) and clipped to `[0, 1]`. A paired difference of two rates judged
//! by the same judge is the observed difference over `J` (the `Sp` terms
//! cancel).
//!
//! The intervals carry both uncertainties: the prompts (a paired bootstrap
//! over them) and, when the accuracy was measured on a labelled
//! calibration set, the calibration's (each resample redraws the
//! calibration's counts from a binomial at the measured rates, a
//! bootstrap of the calibration set). Accuracy stated in a config is
//! taken as exact, and the result says so.

use rand::Rng as _;
use rand::SeedableRng as _;
use rand_distr::{Binomial, Distribution as _};

/// What is known of a judge's accuracy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accuracy {
    /// Measured on a labelled set: of `positives` true positives the judge
    /// called `true_positives` positive; of `negatives` true negatives it
    /// called `true_negatives` negative.
    Measured {
        true_positives: u64,
        positives: u64,
        true_negatives: u64,
        negatives: u64,
    },
    /// Given as numbers (in a config), taken as exact.
    Stated { sensitivity: f64, specificity: f64 },
}

/// Why a correction cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CorrectionError {
    #[error(
        "the judge does no better than chance (sensitivity {sensitivity:.3} + specificity {specificity:.3} ≤ 1): its verdicts carry no information to correct"
    )]
    NoBetterThanChance { sensitivity: f64, specificity: f64 },
    #[error("the calibration has no {0} examples: its {1} cannot be estimated")]
    EmptyCalibration(&'static str, &'static str),
    #[error("{0}")]
    Input(String),
    #[error(
        "{failed} of {resamples} calibration resamples made the judge no better than chance: the calibration set is too small to bound the corrected rate; label more examples"
    )]
    TooUncertain { failed: usize, resamples: usize },
}

impl Accuracy {
    /// The point estimates `(Se, Sp)`.
    pub fn rates(&self) -> Result<(f64, f64), CorrectionError> {
        match *self {
            Accuracy::Measured {
                true_positives,
                positives,
                true_negatives,
                negatives,
            } => {
                if positives == 0 {
                    return Err(CorrectionError::EmptyCalibration("positive", "sensitivity"));
                }
                if negatives == 0 {
                    return Err(CorrectionError::EmptyCalibration("negative", "specificity"));
                }
                if true_positives > positives || true_negatives > negatives {
                    return Err(CorrectionError::Input(format!(
                        "{true_positives} of {positives} positives or {true_negatives} of {negatives} negatives: more hits than examples"
                    )));
                }
                Ok((
                    true_positives as f64 / positives as f64,
                    true_negatives as f64 / negatives as f64,
                ))
            }
            Accuracy::Stated {
                sensitivity,
                specificity,
            } => {
                let unit = |v: f64| (0.0..=1.0).contains(&v);
                if !(unit(sensitivity) && unit(specificity)) {
                    return Err(CorrectionError::Input(format!(
                        "sensitivity {sensitivity} and specificity {specificity} must lie in [0, 1]"
                    )));
                }
                Ok((sensitivity, specificity))
            }
        }
    }

    /// One draw of `(Se, Sp)` for a resample: the calibration's counts
    /// redrawn, or the stated values.
    fn draw(&self, rng: &mut rand_chacha::ChaCha8Rng) -> (f64, f64) {
        match *self {
            Accuracy::Measured {
                true_positives,
                positives,
                true_negatives,
                negatives,
            } => {
                let redraw = |hits: u64, n: u64, rng: &mut rand_chacha::ChaCha8Rng| {
                    let p = hits as f64 / n as f64;
                    let b = Binomial::new(n, p).expect("p is a rate");
                    b.sample(rng) as f64 / n as f64
                };
                (
                    redraw(true_positives, positives, rng),
                    redraw(true_negatives, negatives, rng),
                )
            }
            Accuracy::Stated {
                sensitivity,
                specificity,
            } => (sensitivity, specificity),
        }
    }

    /// Whether the interval carries the calibration's uncertainty.
    pub fn measured(&self) -> bool {
        matches!(self, Accuracy::Measured { .. })
    }
}

/// The Rogan–Gladen estimate of the true rate behind an observed one,
/// clipped to `[0, 1]`; `None` when `Se + Sp ≤ 1`.
pub fn rogan_gladen(observed: f64, sensitivity: f64, specificity: f64) -> Option<f64> {
    let j = sensitivity + specificity - 1.0;
    (j > 0.0).then(|| ((observed + specificity - 1.0) / j).clamp(0.0, 1.0))
}

/// A paired comparison of two judged rates, corrected.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrectedDelta {
    /// The rates the judge observed, baseline and candidate.
    pub observed: (f64, f64),
    /// Each corrected (Rogan–Gladen, clipped).
    pub corrected: (f64, f64),
    /// `corrected.1 − corrected.0`.
    pub delta: f64,
    /// Its percentile interval at the requested level.
    pub interval: (f64, f64),
    /// Whether the interval carries the calibration's uncertainty.
    pub calibration_in_interval: bool,
}

/// The paired difference `candidate − baseline` of the rates a judge
/// observed on the same prompts (`true`: judged positive), corrected for
/// the judge's errors, with a `level` interval from `resamples` paired
/// bootstrap resamples (each also redrawing a measured calibration),
/// seeded by `seed`.
pub fn corrected_delta(
    baseline: &[bool],
    candidate: &[bool],
    accuracy: &Accuracy,
    resamples: usize,
    level: f64,
    seed: u64,
) -> Result<CorrectedDelta, CorrectionError> {
    if baseline.len() != candidate.len() || baseline.is_empty() {
        return Err(CorrectionError::Input(format!(
            "paired verdicts of equal, non-zero length: {} baseline, {} candidate",
            baseline.len(),
            candidate.len()
        )));
    }
    if resamples == 0 || !(0.0..1.0).contains(&level) {
        return Err(CorrectionError::Input(format!(
            "{resamples} resamples at level {level}: at least one, at a level in (0, 1)"
        )));
    }
    let (se, sp) = accuracy.rates()?;
    let j = se + sp - 1.0;
    if j <= 0.0 {
        return Err(CorrectionError::NoBetterThanChance {
            sensitivity: se,
            specificity: sp,
        });
    }
    let n = baseline.len();
    let rate = |v: &[bool]| v.iter().filter(|&&x| x).count() as f64 / n as f64;
    let observed = (rate(baseline), rate(candidate));
    let correct = |p: f64, se: f64, sp: f64| ((p + sp - 1.0) / (se + sp - 1.0)).clamp(0.0, 1.0);
    let corrected = (correct(observed.0, se, sp), correct(observed.1, se, sp));

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut deltas = Vec::with_capacity(resamples);
    let mut failed = 0;
    for _ in 0..resamples {
        let (mut b, mut c) = (0u64, 0u64);
        for _ in 0..n {
            let i = rng.random_range(0..n);
            b += u64::from(baseline[i]);
            c += u64::from(candidate[i]);
        }
        let (se_r, sp_r) = accuracy.draw(&mut rng);
        if se_r + sp_r - 1.0 <= 0.0 {
            failed += 1;
            continue;
        }
        let (pb, pc) = (b as f64 / n as f64, c as f64 / n as f64);
        deltas.push(correct(pc, se_r, sp_r) - correct(pb, se_r, sp_r));
    }
    // A resample in which the judge looks no better than chance has no
    // corrected rate; past 1% of them, the interval would hide it.
    if failed * 100 > resamples {
        return Err(CorrectionError::TooUncertain { failed, resamples });
    }
    deltas.sort_by(f64::total_cmp);
    let m = deltas.len();
    let alpha = (1.0 - level) / 2.0;
    let at = |q: f64| deltas[((q * m as f64).floor() as usize).min(m - 1)];
    Ok(CorrectedDelta {
        observed,
        corrected,
        delta: corrected.1 - corrected.0,
        interval: (at(alpha), at(1.0 - alpha)),
        calibration_in_interval: accuracy.measured(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example, by hand: a judge of sensitivity 0.90 and
    /// specificity 0.95 observing 30% means (0.30 + 0.95 − 1) / (0.90 +
    /// 0.95 − 1) = 0.25 / 0.85 = 0.294117647…; observing 2% (below the
    /// false-positive rate of 5%) means 0 after clipping; a judge no better
    /// than chance corrects nothing.
    #[test]
    fn the_correction_is_rogan_and_gladens() {
        let p = rogan_gladen(0.30, 0.90, 0.95).unwrap();
        assert!((p - 0.25 / 0.85).abs() < 1e-15, "{p}");
        assert!((p - 0.294_117_647_058_823_5).abs() < 1e-15);
        assert_eq!(rogan_gladen(0.02, 0.90, 0.95), Some(0.0));
        assert_eq!(rogan_gladen(0.5, 0.5, 0.5), None);
        assert_eq!(rogan_gladen(0.5, 0.4, 0.5), None);
        // A perfect judge corrects nothing.
        assert!((rogan_gladen(0.37, 1.0, 1.0).unwrap() - 0.37).abs() < 1e-15);
        // A paired difference: the observed one over J (0.85 here), the
        // specificity cancelling: 30% → 45% observed is +0.15 / 0.85.
        let b: Vec<bool> = (0..100).map(|i| i < 30).collect();
        let c: Vec<bool> = (0..100).map(|i| i < 45).collect();
        let acc = Accuracy::Stated {
            sensitivity: 0.9,
            specificity: 0.95,
        };
        let d = corrected_delta(&b, &c, &acc, 200, 0.95, 1).unwrap();
        assert!((d.delta - 0.15 / 0.85).abs() < 1e-12, "{}", d.delta);
        assert!(d.interval.0 < d.delta && d.delta < d.interval.1);
        assert!(!d.calibration_in_interval);
    }

    /// Bad input is refused by name: a judge no better than chance, an
    /// empty side of the calibration, more hits than examples, unpaired
    /// verdicts; a calibration so small that resamples make the judge a
    /// coin is refused rather than bounded.
    #[test]
    fn what_cannot_be_corrected_is_refused() {
        let v = vec![true, false, true];
        let err = |acc: Accuracy| corrected_delta(&v, &v, &acc, 100, 0.95, 0).unwrap_err();
        assert!(matches!(
            err(Accuracy::Stated {
                sensitivity: 0.5,
                specificity: 0.5
            }),
            CorrectionError::NoBetterThanChance { .. }
        ));
        assert_eq!(
            err(Accuracy::Measured {
                true_positives: 0,
                positives: 0,
                true_negatives: 3,
                negatives: 4
            }),
            CorrectionError::EmptyCalibration("positive", "sensitivity")
        );
        assert!(matches!(
            err(Accuracy::Measured {
                true_positives: 5,
                positives: 4,
                true_negatives: 3,
                negatives: 4
            }),
            CorrectionError::Input(_)
        ));
        assert!(matches!(
            corrected_delta(
                &v,
                &v[..2],
                &Accuracy::Stated {
                    sensitivity: 0.9,
                    specificity: 0.9
                },
                10,
                0.95,
                0
            ),
            Err(CorrectionError::Input(_))
        ));
        // Three labelled examples a side at 2 of 3 right: J = 1/3, and a
        // redraw often makes it ≤ 0.
        assert!(matches!(
            err(Accuracy::Measured {
                true_positives: 2,
                positives: 3,
                true_negatives: 2,
                negatives: 3
            }),
            CorrectionError::TooUncertain { .. }
        ));
    }

    /// Coverage by simulation: true rates 0.30 → 0.45 on 200 paired
    /// prompts, a judge of sensitivity 0.85 and specificity 0.90 measured
    /// on 150 labelled positives and 150 negatives. Over 400 simulated
    /// audits the 95% interval of the corrected difference covers the true
    /// +0.15 in 91%–99% of them (400 draws put a 95% rate within that band
    /// with probability > 0.999), and the corrected estimate is unbiased
    /// to 0.01, where the judge's raw difference is biased by its factor
    /// J = 0.75 (+0.1125) and its own interval covers +0.15 in under 90%
    /// (here: corrected 96.8%, uncorrected 83.8%, mean corrected 0.1546).
    #[test]
    fn the_corrected_interval_covers_the_true_difference() {
        let (se, sp, pb, pc, n, cal) = (0.85, 0.90, 0.30, 0.45, 200, 150u64);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
        let (mut covered, mut naive_covered, mut sum) = (0, 0, 0.0);
        let sims = 400;
        for s in 0..sims {
            let judge = |truth: bool, rng: &mut rand_chacha::ChaCha8Rng| match truth {
                true => rng.random_bool(se),
                false => !rng.random_bool(sp),
            };
            let (mut b, mut c) = (Vec::new(), Vec::new());
            for _ in 0..n {
                // Paired truth: a prompt the baseline refuses, the
                // candidate refuses too (a 0.30 → 0.45 shift).
                let u: f64 = rng.random();
                b.push(judge(u < pb, &mut rng));
                c.push(judge(u < pc, &mut rng));
            }
            let tp = Binomial::new(cal, se).unwrap().sample(&mut rng);
            let tn = Binomial::new(cal, sp).unwrap().sample(&mut rng);
            let acc = Accuracy::Measured {
                true_positives: tp,
                positives: cal,
                true_negatives: tn,
                negatives: cal,
            };
            let d = corrected_delta(&b, &c, &acc, 400, 0.95, s).unwrap();
            covered += usize::from(d.interval.0 <= pc - pb && pc - pb <= d.interval.1);
            sum += d.delta;
            let perfect = Accuracy::Stated {
                sensitivity: 1.0,
                specificity: 1.0,
            };
            let raw = corrected_delta(&b, &c, &perfect, 400, 0.95, s).unwrap();
            naive_covered += usize::from(raw.interval.0 <= pc - pb && pc - pb <= raw.interval.1);
        }
        let coverage = covered as f64 / sims as f64;
        let naive = naive_covered as f64 / sims as f64;
        let mean = sum / sims as f64;
        println!("coverage {coverage:.3}, uncorrected {naive:.3}, mean corrected delta {mean:.4}");
        assert!((0.91..=0.99).contains(&coverage), "coverage {coverage}");
        assert!((mean - 0.15).abs() < 0.01, "mean {mean}");
        assert!(naive < 0.9, "uncorrected {naive} vs corrected {coverage}");
    }
}
