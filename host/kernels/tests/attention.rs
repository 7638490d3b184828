//! The batched CPU attention against a plain reference: rotary embedding,
//! causal softmax attention and grouped-query heads written out in f64,
//! one sequence at a time, over the whole history (or the sliding window),
//! with the score's scale and soft-cap as the layer's [`Scoring`] says.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vauban_kernels::attention::{
    Heads, KvType, LayerCache, RopeTable, Rotary, Scoring, SeqRows, attend,
};

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()
}

fn inv_freqs(d: usize) -> Vec<f32> {
    (0..d / 2)
        .map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / d as f32))
        .collect()
}

/// The frequencies of a head whose first `rotary` dimensions rotate.
fn partial_freqs(rotary: usize) -> Vec<f32> {
    inv_freqs(rotary)
}

/// `x` rotated on its first `2 · freqs.len()` dimensions, the rest as is.
fn rotate(style: Rotary, x: &[f32], pos: usize, freqs: &[f32]) -> Vec<f64> {
    let h = freqs.len();
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (i, &f) in freqs.iter().enumerate() {
        let a = pos as f64 * f as f64;
        let (c, s) = (a.cos(), a.sin());
        let (p, q) = match style {
            Rotary::Interleaved => (2 * i, 2 * i + 1),
            Rotary::Half => (i, i + h),
        };
        let (x0, x1) = (x[p] as f64, x[q] as f64);
        out[p] = x0 * c - x1 * s;
        out[q] = x0 * s + x1 * c;
    }
    out
}

/// Attention output of every position of one sequence whose rows are
/// `q`, `k`, `v` from position 0.
fn reference(
    h: &Heads,
    scoring: &Scoring,
    freqs: &[f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Vec<f64> {
    let (style, scale) = (scoring.rotary, scoring.scale as f64);
    let d = h.head_dim;
    let (qw, kw) = (h.heads * d, h.kv_heads * d);
    let n = q.len() / qw;
    let rep = h.heads / h.kv_heads;
    let mut out = vec![0f64; n * qw];
    for pos in 0..n {
        for qh in 0..h.heads {
            let kh = qh / rep;
            let qr = rotate(style, &q[pos * qw + qh * d..][..d], pos, freqs);
            // Keys less than `window` positions back, as HF's sliding mask.
            let first = scoring.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let scores: Vec<f64> = (first..=pos)
                .map(|j| {
                    let kr = rotate(style, &k[j * kw + kh * d..][..d], j, freqs);
                    let s = qr.iter().zip(&kr).map(|(a, b)| a * b).sum::<f64>() * scale;
                    match scoring.softcap {
                        Some(cap) => cap as f64 * (s / cap as f64).tanh(),
                        None => s,
                    }
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = w.iter().sum();
            for (j, wj) in (first..).zip(&w) {
                for e in 0..d {
                    out[pos * qw + qh * d + e] += wj / sum * v[j * kw + kh * d + e] as f64;
                }
            }
        }
    }
    out
}

#[test]
fn a_ragged_batch_in_two_passes_matches_the_reference_per_sequence() {
    let worst = ragged_batch_against_the_reference(KvType::F32);
    assert!(worst < 1e-4, "f32 cache: max |Δ| {worst}");
}

/// An f16 cache rounds every key and value to 11 significant bits; with
/// inputs in ±2 and up to 301 keys that moved outputs by up to 8.5e-4.
#[test]
fn an_f16_cache_matches_the_reference_to_f16_rounding() {
    let worst = ragged_batch_against_the_reference(KvType::F16);
    eprintln!("f16 cache: max |Δ| {worst:.2e}");
    assert!(worst < 3e-3, "f16 cache: max |Δ| {worst}");
    // Not the f32 cache by another name: the rounding shows.
    assert!(worst > 1e-5, "f16 cache: max |Δ| {worst}");
}

#[test]
fn an_f16_cache_takes_half_the_bytes() {
    let h = Heads {
        heads: 2,
        kv_heads: 1,
        head_dim: 8,
    };
    let (q, k) = (vec![0.5f32; 3 * 16], vec![0.5f32; 3 * 8]);
    let table = RopeTable::new(&inv_freqs(8), 0..3);
    let mut bytes = Vec::new();
    for kind in [KvType::F32, KvType::F16] {
        let mut cache = LayerCache::new(kind);
        let mut out = vec![0f32; 3 * 16];
        let mut rows = [SeqRows {
            first: 0,
            rows: 3,
            offset: 0,
            cache: &mut cache,
        }];
        attend(
            &h,
            &Scoring::standard(Rotary::Half, h.head_dim),
            &table,
            &q,
            &k,
            &k,
            &mut rows,
            &mut out,
        );
        assert_eq!(cache.kind(), kind);
        bytes.push(cache.bytes());
    }
    // 256 positions (the first capacity) of keys and values, 8 wide.
    assert_eq!(bytes, [2 * 256 * 8 * 4, 2 * 256 * 8 * 2]);
}

/// Three sequences in two passes each against the f64 reference: the
/// largest |Δ| over both rotary styles, and over a Gemma-like layer (a
/// configured scale, soft-capped scores, a sliding window shorter than
/// the longest sequence).
fn ragged_batch_against_the_reference(kind: KvType) -> f64 {
    let mut worst_all = 0f64;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let gemma = Scoring {
        rotary: Rotary::Half,
        scale: 0.3,
        softcap: Some(2.5),
        window: Some(37),
    };
    for (scoring, h, freqs) in [
        (
            Scoring::standard(Rotary::Interleaved, 64),
            Heads {
                heads: 6,
                kv_heads: 2,
                head_dim: 64,
            },
            inv_freqs(64),
        ),
        (
            Scoring::standard(Rotary::Half, 20),
            Heads {
                heads: 4,
                kv_heads: 4,
                head_dim: 20,
            },
            inv_freqs(20),
        ),
        (
            gemma,
            Heads {
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
            },
            inv_freqs(16),
        ),
        // Partial rotary: 24 of 32 dimensions rotate (Phi-4-mini's 3/4).
        (
            Scoring::standard(Rotary::Half, 32),
            Heads {
                heads: 4,
                kv_heads: 2,
                head_dim: 32,
            },
            partial_freqs(24),
        ),
    ] {
        let style = scoring.rotary;
        let d = h.head_dim;
        let (qw, kw) = (h.heads * d, h.kv_heads * d);
        // Three sequences: a prompt pass of different lengths, then a
        // second pass (one decode token, or several) after each.
        let lens = [(5usize, 1usize), (300, 1), (1, 7)];
        let seqs: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = lens
            .iter()
            .map(|&(a, b)| {
                let n = a + b;
                (
                    random(&mut rng, n * qw),
                    random(&mut rng, n * kw),
                    random(&mut rng, n * kw),
                )
            })
            .collect();
        let mut caches = vec![LayerCache::new(kind); lens.len()];
        let mut got: Vec<Vec<f32>> = lens
            .iter()
            .map(|&(a, b)| vec![0f32; (a + b) * qw])
            .collect();
        for pass in 0..2 {
            // Rows of this pass: (sequence, first position, count).
            let parts: Vec<(usize, usize, usize)> = lens
                .iter()
                .enumerate()
                .map(|(s, &(a, b))| if pass == 0 { (s, 0, a) } else { (s, a, b) })
                .collect();
            let (mut q, mut k, mut v, mut positions) = (vec![], vec![], vec![], vec![]);
            for &(s, from, n) in &parts {
                q.extend_from_slice(&seqs[s].0[from * qw..(from + n) * qw]);
                k.extend_from_slice(&seqs[s].1[from * kw..(from + n) * kw]);
                v.extend_from_slice(&seqs[s].2[from * kw..(from + n) * kw]);
                positions.extend(from..from + n);
            }
            let table = RopeTable::new(&freqs, positions);
            let mut out = vec![0f32; q.len()];
            let mut first = 0;
            let mut rows: Vec<SeqRows<'_>> = Vec::new();
            for (cache, &(_, from, n)) in caches.iter_mut().zip(&parts) {
                rows.push(SeqRows {
                    first,
                    rows: n,
                    offset: from,
                    cache,
                });
                first += n;
            }
            attend(&h, &scoring, &table, &q, &k, &v, &mut rows, &mut out);
            let mut at = 0;
            for &(s, from, n) in &parts {
                got[s][from * qw..(from + n) * qw].copy_from_slice(&out[at * qw..(at + n) * qw]);
                at += n;
            }
        }
        for (s, (q, k, v)) in seqs.iter().enumerate() {
            let want = reference(&h, &scoring, &freqs, q, k, v);
            let worst = want
                .iter()
                .zip(&got[s])
                .map(|(a, b)| (a - *b as f64).abs())
                .fold(0f64, f64::max);
            eprintln!("{kind:?} {style:?} sequence {s}: max |Δ| {worst:.2e}");
            worst_all = worst_all.max(worst);
        }
    }
    worst_all
}

#[test]
#[should_panic(expected = "tile the pass in order")]
fn sequences_whose_rows_overlap_are_refused() {
    let h = Heads {
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
    };
    // Four rows in all, as the shapes say; the second sequence claims
    // rows 1..3 instead of 2..4.
    let (q, k) = (vec![0.5f32; 4 * 8], vec![0.5f32; 4 * 4]);
    let table = RopeTable::new(&inv_freqs(4), 0..4);
    let mut out = vec![0f32; 4 * 8];
    let (mut a, mut b) = (LayerCache::default(), LayerCache::default());
    // Rows 0..2 and 1..3: two tasks would write row 1 at once.
    let mut rows = vec![
        SeqRows {
            first: 0,
            rows: 2,
            offset: 0,
            cache: &mut a,
        },
        SeqRows {
            first: 1,
            rows: 2,
            offset: 0,
            cache: &mut b,
        },
    ];
    attend(
        &h,
        &Scoring::standard(Rotary::Half, h.head_dim),
        &table,
        &q,
        &k,
        &k,
        &mut rows,
        &mut out,
    );
}
