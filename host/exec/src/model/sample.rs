//! Next-token choice: greedy, or temperature / top-k / top-p sampling from
//! a seeded generator.
//!
//! Reproducibility contract: the same [`Sampling`] (seed included) and the
//! same sequence of logits give the same tokens. A sampler draws exactly one
//! `f64` per token from `ChaCha8Rng::seed_from_u64(seed)` and walks the kept
//! tokens in id order; which tokens top-k / top-p keep is defined by a total
//! order and exact integer sums, not by what a sort or select happens to do.
//! So the contract rests on rand_chacha's stream and rand's `f64`
//! conversion, both pinned by Cargo.lock (rand 0.9.5, rand_chacha 0.9.0);
//! changing either may change sampled tokens.

use std::cmp::Ordering;

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// Parameters or logits a sampler cannot use.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("{name} = {value} is out of range: {valid}")]
    InvalidParameter {
        name: &'static str,
        value: String,
        valid: &'static str,
    },
    #[error("no logits to sample from (an empty vocabulary)")]
    EmptyLogits,
    #[error("logits has {0} entries; token ids must fit in u32")]
    VocabTooLarge(usize),
    #[error("logit of token {index} is NaN; the forward pass produced invalid numbers")]
    NanLogit { index: usize },
    #[error("every logit is -inf; no token can be chosen")]
    AllMasked,
}

/// How to sample; recorded with a run so it can be replayed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// Picks next tokens, greedily or by seeded sampling.
#[derive(Clone, Debug)]
pub struct Sampler {
    /// `None` = greedy.
    mode: Option<(Sampling, ChaCha8Rng)>,
}

/// Fixed-point scale of the probability mass top-p counts: weights are at
/// most 1 (the max logit's), so a vocabulary of up to 2^64 tokens sums
/// without overflow in u128, and integer sums do not depend on order.
const MASS_SCALE: f64 = (1u64 << 62) as f64;

impl Sampler {
    /// Argmax decoding: deterministic without a seed.
    pub fn greedy() -> Self {
        Self { mode: None }
    }

    /// A seeded sampler. `temperature` must be finite and > 0 (temperature
    /// 0 means argmax: use [`Sampler::greedy`]), `top_p` in (0, 1] (1 keeps
    /// every token), `top_k` ≥ 1 when set.
    pub fn new(sampling: Sampling) -> Result<Self, SampleError> {
        let invalid =
            |name, value: String, valid| SampleError::InvalidParameter { name, value, valid };
        let t = sampling.temperature;
        if !(t.is_finite() && t > 0.0) {
            return Err(invalid(
                "temperature",
                t.to_string(),
                "must be finite and > 0 (for temperature 0, argmax, use greedy decoding)",
            ));
        }
        let p = sampling.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(invalid("top_p", p.to_string(), "must be in (0, 1]"));
        }
        if sampling.top_k == Some(0) {
            return Err(invalid("top_k", "0".into(), "must be >= 1 when set"));
        }
        let rng = ChaCha8Rng::seed_from_u64(sampling.seed);
        Ok(Self {
            mode: Some((sampling, rng)),
        })
    }

    pub fn is_greedy(&self) -> bool {
        self.mode.is_none()
    }

    /// The sampling parameters, `None` when greedy.
    pub fn sampling(&self) -> Option<&Sampling> {
        self.mode.as_ref().map(|(s, _)| s)
    }

    /// Picks the next token id from one position's logits (f32, one per
    /// vocabulary entry). Greedy: argmax, ties to the lowest id. NaN logits
    /// are refused; -inf logits (masked tokens) are never chosen, and all
    /// -inf is refused; +inf logits share all the probability.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        if u32::try_from(logits.len()).is_err() {
            return Err(SampleError::VocabTooLarge(logits.len()));
        }
        let mut best = 0;
        for (i, &x) in logits.iter().enumerate() {
            if x.is_nan() {
                return Err(SampleError::NanLogit { index: i });
            }
            if x > logits[best] {
                best = i;
            }
        }
        let max = logits[best];
        if max == f32::NEG_INFINITY {
            return Err(SampleError::AllMasked);
        }
        let Some((sampling, rng)) = &mut self.mode else {
            return Ok(best as u32);
        };
        let t = f64::from(sampling.temperature);
        let max = f64::from(max);
        // softmax(logits / t) up to its normaliser, in f64 with the max
        // subtracted; a +inf logit takes all the mass (shared among ties).
        let weights: Vec<f64> = logits
            .iter()
            .map(|&x| {
                let x = f64::from(x);
                if x == max { 1.0 } else { ((x - max) / t).exp() }
            })
            .collect();
        let cut = cut(&weights, sampling.top_k, f64::from(sampling.top_p));
        let order = by_rank(&weights);
        let kept = (0..weights.len() as u32)
            .filter(|i| cut.is_none_or(|c| order(i, &c) != Ordering::Greater))
            .map(|i| (i, weights[i as usize]));
        Ok(draw(rng.random(), kept))
    }
}

/// Most probable first, ties to the lower id: a total order, so "the k most
/// probable" and "the smallest most-probable set" are single sets.
fn by_rank(weights: &[f64]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    |&a, &b| {
        weights[b as usize]
            .total_cmp(&weights[a as usize])
            .then(a.cmp(&b))
    }
}

/// The last token, in [`by_rank`] order, that top-k and top-p keep (all
/// tokens ranked at or before it are kept); `None` keeps every token.
///
/// top-k first, then top-p over the survivors' renormalised mass, as
/// transformers applies its warpers. Both are linear-time selects, no sort:
/// top-p halves the candidate range each round, moving into the half where
/// the cumulative mass crosses `top_p`.
fn cut(weights: &[f64], top_k: Option<usize>, top_p: f64) -> Option<u32> {
    let vocab = weights.len();
    let top_k = top_k.filter(|&k| k < vocab);
    if top_k.is_none() && top_p >= 1.0 {
        return None;
    }
    let order = by_rank(weights);
    let mut ids: Vec<u32> = (0..vocab as u32).collect();
    let mut len = vocab;
    if let Some(k) = top_k {
        ids.select_nth_unstable_by(k - 1, &order);
        if top_p >= 1.0 {
            return Some(ids[k - 1]);
        }
        len = k;
    }
    let mass = |i: &u32| (weights[*i as usize] * MASS_SCALE) as u128;
    let total: u128 = ids[..len].iter().map(mass).sum();
    // The smallest most-probable set whose mass reaches this (at least one token).
    let target = (top_p * total as f64) as u128;
    // ids[..lo] rank before ids[lo..hi] and hold `before` < target (or are empty).
    let (mut lo, mut hi, mut before) = (0, len, 0u128);
    loop {
        let mid = (hi - lo) / 2;
        let (left, pivot, _) = ids[lo..hi].select_nth_unstable_by(mid, &order);
        let pivot = *pivot;
        let left_mass: u128 = left.iter().map(mass).sum();
        if mid > 0 && before + left_mass >= target {
            hi = lo + mid;
            continue;
        }
        before += left_mass + mass(&pivot);
        lo += mid + 1;
        if before >= target || lo == hi {
            return Some(pivot);
        }
    }
}

/// The token whose cumulative-weight interval holds `u` (in [0, 1)) times
/// the total; rounding at the top end falls to the last positive weight.
fn draw(u: f64, candidates: impl Iterator<Item = (u32, f64)> + Clone) -> u32 {
    let total: f64 = candidates.clone().map(|(_, w)| w).sum();
    let target = u * total;
    let mut cum = 0.0;
    let mut last = None;
    for (id, w) in candidates {
        if w > 0.0 {
            cum += w;
            last = Some(id);
            if cum > target {
                return id;
            }
        }
    }
    // At least one weight is 1 (the max), so `last` is set.
    last.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_p: f32, top_k: Option<usize>, seed: u64) -> Sampling {
        Sampling {
            temperature,
            top_p,
            top_k,
            seed,
        }
    }

    fn sampler(temperature: f32, top_p: f32, top_k: Option<usize>, seed: u64) -> Sampler {
        Sampler::new(sampling(temperature, top_p, top_k, seed)).unwrap()
    }

    fn draws(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<u32> {
        (0..n).map(|_| s.sample(logits).unwrap()).collect()
    }

    fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
        let e: Vec<f64> = logits.iter().map(|&x| (f64::from(x) / t).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }

    fn frequencies(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<f64> {
        let mut counts = vec![0usize; logits.len()];
        for id in draws(s, logits, n) {
            counts[id as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn greedy_is_argmax_with_ties_to_the_lowest_id() {
        let mut g = Sampler::greedy();
        assert!(g.is_greedy());
        assert!(g.sampling().is_none());
        assert_eq!(g.sample(&[0.1, 2.0, -1.0, 1.9]).unwrap(), 1);
        assert_eq!(g.sample(&[0.0, 3.0, 1.0, 3.0, 3.0]).unwrap(), 1);
        assert_eq!(g.sample(&[f32::NEG_INFINITY, -5.0]).unwrap(), 1);
        assert_eq!(g.sample(&[7.0]).unwrap(), 0);
    }

    #[test]
    fn same_seed_same_draws_different_seed_different_draws() {
        let flat = vec![0.0f32; 1000];
        let a = draws(&mut sampler(1.0, 1.0, None, 7), &flat, 50);
        let b = draws(&mut sampler(1.0, 1.0, None, 7), &flat, 50);
        let c = draws(&mut sampler(1.0, 1.0, None, 8), &flat, 50);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // The same holds through the top-k / top-p paths.
        let logits: Vec<f32> = (0..5000).map(|i| ((i * 37 % 101) as f32) / 20.0).collect();
        let a = draws(&mut sampler(0.8, 0.9, Some(40), 3), &logits, 50);
        let b = draws(&mut sampler(0.8, 0.9, Some(40), 3), &logits, 50);
        assert_eq!(a, b);
        assert!(!sampler(0.8, 0.9, Some(40), 3).is_greedy());
    }

    /// The reproducibility contract, pinned: if this changes, so do sampled
    /// tokens in recorded runs (a rand / rand_chacha bump, or a change here).
    #[test]
    fn pinned_draws() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919 % 1009) as f32) / 100.0)
            .collect();
        let pinned: [(f32, f32, Option<usize>, [u32; 10]); 3] = [
            (
                1.0,
                1.0,
                None,
                [165, 983, 686, 898, 687, 504, 33, 310, 489, 851],
            ),
            (
                0.7,
                0.9,
                None,
                [165, 983, 686, 897, 686, 508, 33, 310, 495, 838],
            ),
            (
                1.0,
                0.95,
                Some(50),
                [132, 996, 686, 884, 686, 521, 33, 310, 508, 831],
            ),
        ];
        for (t, p, k, expected) in pinned {
            assert_eq!(draws(&mut sampler(t, p, k, 2024), &logits, 10), expected);
        }
    }

    #[test]
    fn tiny_top_p_and_top_k_one_are_argmax() {
        let logits = [0.5f32, 3.0, 1.0, 2.9, -2.0];
        let mut s = sampler(1.0, 0.01, None, 1);
        assert!(draws(&mut s, &logits, 200).iter().all(|&t| t == 1));
        let mut s = sampler(5.0, 1.0, Some(1), 2);
        assert!(draws(&mut s, &logits, 200).iter().all(|&t| t == 1));
    }

    #[test]
    fn top_k_and_top_p_keep_the_most_probable() {
        let logits = [0.0f32, 2.0, 1.0, 3.0, 2.5, -1.0];
        let mut s = sampler(1.0, 1.0, Some(2), 4);
        let seen = draws(&mut s, &logits, 500);
        assert!(seen.iter().all(|&t| t == 3 || t == 4));
        assert!(seen.contains(&3) && seen.contains(&4));
        // softmax: p(3) ≈ 0.47, p(4) ≈ 0.29; top_p 0.6 keeps exactly those two.
        let mut s = sampler(1.0, 0.6, None, 5);
        let seen = draws(&mut s, &logits, 500);
        assert!(seen.iter().all(|&t| t == 3 || t == 4));
        // Equal weights: top_p 0.5 of 1000 keeps exactly the 500 lowest ids.
        let wide = vec![0.0f32; 1000];
        let mut s = sampler(1.0, 0.5, None, 6);
        let seen = draws(&mut s, &wide, 2000);
        assert!(seen.iter().all(|&t| t < 500));
        assert!(seen.iter().any(|&t| t >= 490));
        // Exactly at the boundary: two of four equal tokens make 0.5.
        let mut s = sampler(1.0, 0.5, None, 6);
        let seen = draws(&mut s, &[1.0; 4], 200);
        assert!(seen.iter().all(|&t| t < 2) && seen.contains(&1));
        // top_k beyond the vocabulary keeps everything.
        let mut s = sampler(1.0, 1.0, Some(100), 7);
        assert!(draws(&mut s, &logits, 50).iter().all(|&t| t < 6));
    }

    /// The select-based cut agrees with sorting everything and walking the
    /// cumulative mass, over sizes, ties, top-k and top-p.
    #[test]
    fn cut_matches_a_full_sort() {
        let mut rng = ChaCha8Rng::seed_from_u64(99);
        for case in 0..300 {
            let vocab = 1 + case % 97;
            let weights: Vec<f64> = (0..vocab)
                .map(|_| match rng.random_range(0..4) {
                    0 => 0.0,
                    1 => 0.5, // ties
                    _ => rng.random::<f64>(),
                })
                .chain([1.0])
                .collect();
            let top_k = [None, Some(1), Some(3), Some(vocab / 2 + 1)][case % 4];
            let top_p = [1.0, 0.9, 0.5, 0.01, 1e-9][case % 5];
            let mut sorted: Vec<u32> = (0..weights.len() as u32).collect();
            sorted.sort_by(by_rank(&weights));
            let k = top_k.unwrap_or(sorted.len()).min(sorted.len());
            let mass = |i: u32| (weights[i as usize] * MASS_SCALE) as u128;
            let total: u128 = sorted[..k].iter().map(|&i| mass(i)).sum();
            let target = (top_p * total as f64) as u128;
            let mut cum = 0;
            let n = sorted[..k]
                .iter()
                .position(|&i| {
                    cum += mass(i);
                    cum >= target
                })
                .map_or(k, |p| p + 1);
            let expected = (top_p < 1.0 || k < sorted.len()).then(|| sorted[n - 1]);
            assert_eq!(cut(&weights, top_k, top_p), expected, "case {case}");
        }
    }

    #[test]
    fn masked_tokens_are_never_drawn() {
        let logits = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
        let mut s = sampler(1.0, 1.0, None, 9);
        assert!(
            draws(&mut s, &logits, 200)
                .iter()
                .all(|&t| t == 1 || t == 3)
        );
        let all = [f32::NEG_INFINITY; 3];
        assert!(matches!(s.sample(&all), Err(SampleError::AllMasked)));
    }

    #[test]
    fn empirical_frequencies_match_softmax() {
        let logits = [1.0f32, 0.5, -0.3, 2.0];
        let freq = frequencies(&mut sampler(1.0, 1.0, None, 42), &logits, 20_000);
        for (f, p) in freq.iter().zip(softmax(&logits, 1.0)) {
            assert!((f - p).abs() < 0.02, "{freq:?} vs softmax {p}");
        }
        // Through the sorted (top-p) path as well: top_p just under 1 cuts nothing here.
        let freq = frequencies(&mut sampler(1.0, 0.9999, None, 43), &logits, 20_000);
        for (f, p) in freq.iter().zip(softmax(&logits, 1.0)) {
            assert!((f - p).abs() < 0.02, "{freq:?} vs softmax {p}");
        }
    }

    #[test]
    fn high_temperature_flattens() {
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let cold = frequencies(&mut sampler(1.0, 1.0, None, 11), &logits, 20_000);
        let hot = frequencies(&mut sampler(100.0, 1.0, None, 11), &logits, 20_000);
        assert!(cold[0] > 0.6, "{cold:?}");
        for f in &hot {
            assert!((f - 0.25).abs() < 0.03, "{hot:?}");
        }
    }

    #[test]
    fn invalid_parameters_are_refused_naming_the_value() {
        let err = |s: Sampling| Sampler::new(s).unwrap_err().to_string();
        let e = err(sampling(0.0, 1.0, None, 0));
        assert!(e.contains("temperature = 0") && e.contains("greedy"), "{e}");
        let e = err(sampling(-1.5, 1.0, None, 0));
        assert!(e.contains("temperature = -1.5") && e.contains("> 0"), "{e}");
        let e = err(sampling(f32::NAN, 1.0, None, 0));
        assert!(e.contains("temperature = NaN"), "{e}");
        let e = err(sampling(f32::INFINITY, 1.0, None, 0));
        assert!(
            e.contains("temperature = inf") && e.contains("finite"),
            "{e}"
        );
        let e = err(sampling(1.0, 0.0, None, 0));
        assert!(e.contains("top_p = 0") && e.contains("(0, 1]"), "{e}");
        let e = err(sampling(1.0, 1.5, None, 0));
        assert!(e.contains("top_p = 1.5") && e.contains("(0, 1]"), "{e}");
        let e = err(sampling(1.0, f32::NAN, None, 0));
        assert!(e.contains("top_p = NaN"), "{e}");
        let e = err(sampling(1.0, 1.0, Some(0), 0));
        assert!(e.contains("top_k = 0") && e.contains(">= 1"), "{e}");
    }

    #[test]
    fn nan_and_empty_logits_are_refused() {
        for mut s in [Sampler::greedy(), sampler(1.0, 1.0, None, 0)] {
            let e = s.sample(&[0.0, f32::NAN, 1.0]).unwrap_err();
            assert!(matches!(e, SampleError::NanLogit { index: 1 }), "{e:?}");
            assert!(e.to_string().contains("token 1"), "{e}");
            assert!(matches!(s.sample(&[]), Err(SampleError::EmptyLogits)));
        }
    }

    #[test]
    fn positive_infinity_takes_all_the_mass() {
        let logits = [0.0f32, f32::INFINITY, 5.0];
        let mut s = sampler(1.0, 1.0, None, 12);
        assert!(draws(&mut s, &logits, 100).iter().all(|&t| t == 1));
    }
}
