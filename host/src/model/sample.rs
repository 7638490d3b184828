//! Next-token choice: greedy, or temperature / top-k / top-p sampling from
//! a seeded generator.
//!
//! Reproducibility contract: the same [`Sampling`] (seed included) and the
//! same sequence of logits give the same tokens. A sampler draws exactly one
//! `f64` per token from `ChaCha8Rng::seed_from_u64(seed)` and walks the kept
//! tokens in a fixed order (by id when nothing is cut, else by probability,
//! ties to the lower id), so the contract rests on rand_chacha's stream and
//! rand's `f64` conversion, both pinned by Cargo.lock (rand 0.9.5,
//! rand_chacha 0.9.0); changing either may change sampled tokens.

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

/// Tokens examined per round when top-p finds its nucleus without top-k;
/// the nucleus of a trained model is usually far smaller than the vocabulary.
const NUCLEUS_CHUNK: usize = 64;

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
    /// are refused; -inf logits (masked tokens) are never chosen.
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
        let kept = keep(&weights, sampling.top_k, f64::from(sampling.top_p));
        let u: f64 = rng.random();
        Ok(match kept {
            None => draw(
                u,
                (0..weights.len() as u32).map(|i| (i, weights[i as usize])),
            ),
            Some(ids) => draw(u, ids.into_iter().map(|i| (i, weights[i as usize]))),
        })
    }
}

/// Most probable first, ties to the lower id: a total order, so top-k and
/// top-p keep the same set whatever the selection algorithm does.
fn by_weight(weights: &[f64]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    |&a, &b| {
        weights[b as usize]
            .total_cmp(&weights[a as usize])
            .then(a.cmp(&b))
    }
}

/// The ids top-k and top-p keep, most probable first; `None` keeps all
/// (no sort at all when nothing is cut).
fn keep(weights: &[f64], top_k: Option<usize>, top_p: f64) -> Option<Vec<u32>> {
    let vocab = weights.len();
    let top_k = top_k.filter(|&k| k < vocab);
    if top_k.is_none() && top_p >= 1.0 {
        return None;
    }
    let order = by_weight(weights);
    let mut ids: Vec<u32> = (0..vocab as u32).collect();
    // top-k first (one linear-time select), then top-p over the renormalised
    // survivors, as transformers applies its warpers.
    let (mut sorted, total) = match top_k {
        Some(k) => {
            ids.select_nth_unstable_by(k - 1, &order);
            ids.truncate(k);
            ids.sort_unstable_by(&order);
            let total: f64 = ids.iter().map(|&i| weights[i as usize]).sum();
            (k, total)
        }
        None => (0, weights.iter().sum::<f64>()),
    };
    if top_p >= 1.0 {
        return Some(ids);
    }
    // The smallest most-probable prefix whose mass reaches top_p (at least
    // one token); without top-k, sorted a chunk at a time so a small
    // nucleus costs a few linear selects rather than a full sort.
    let target = top_p * total;
    let mut mass = 0.0;
    let mut n = 0;
    loop {
        if n == sorted {
            if sorted == ids.len() {
                break;
            }
            let chunk = NUCLEUS_CHUNK.max(sorted).min(ids.len() - sorted);
            let rest = &mut ids[sorted..];
            if chunk < rest.len() {
                rest.select_nth_unstable_by(chunk - 1, &order);
            }
            rest[..chunk].sort_unstable_by(&order);
            sorted += chunk;
        }
        mass += weights[ids[n] as usize];
        n += 1;
        if mass >= target {
            break;
        }
    }
    ids.truncate(n);
    Some(ids)
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
        // A nucleus larger than one chunk.
        let wide = vec![0.0f32; 1000];
        let mut s = sampler(1.0, 0.5, None, 6);
        assert!(draws(&mut s, &wide, 500).iter().all(|&t| t < 500));
        // top_k beyond the vocabulary keeps everything.
        let mut s = sampler(1.0, 1.0, Some(100), 7);
        assert!(draws(&mut s, &logits, 50).iter().all(|&t| t < 6));
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
