//! MLX on this machine's CPU (issue 20's first step): the operations a
//! llama-family forward pass needs, through mlx-rs, against f64
//! references computed here: the matrix product (OpenBLAS, swapped into
//! the PyPI wheel by scripts/setup-mlx.sh), RMSNorm, rotary embedding in
//! both pairings, and grouped-query causal attention. Needs MLX
//! (`eval "$(bash scripts/setup-mlx.sh)"`) and `--features mlx`.
#![cfg(feature = "mlx")]

use mlx_rs::Array;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

fn array(v: &[f32], shape: &[i32]) -> Array {
    Array::from_slice(v, shape)
}

fn host(a: &Array) -> Vec<f32> {
    a.as_slice::<f32>().to_vec()
}

/// Largest |got − want| over the largest |want| (at least 1).
fn relative(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1f64, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs()))
        / scale
}

#[test]
fn the_matrix_product_matches_f64() {
    let (m, k, n) = (33, 70, 41);
    let (a, b) = (values(m * k, 1), values(k * n, 2));
    let got = array(&a, &[m as i32, k as i32])
        .matmul(array(&b, &[k as i32, n as i32]))
        .unwrap();
    assert_eq!(got.shape(), &[m as i32, n as i32]);
    let mut want = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
        }
    }
    let d = relative(&host(&got), &want);
    assert!(d < 1e-5, "relative {d}");
}

#[test]
fn rms_norm_matches_f64() {
    let (rows, width, eps) = (5, 64, 1e-5f32);
    let (x, w) = (values(rows * width, 3), values(width, 4));
    let got = fast::rms_norm(
        array(&x, &[rows as i32, width as i32]),
        Some(&array(&w, &[width as i32])),
        eps,
    )
    .unwrap();
    let mut want = Vec::new();
    for r in x.chunks(width) {
        let ms = r.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / width as f64;
        let inv = 1.0 / (ms + f64::from(eps)).sqrt();
        want.extend(
            r.iter()
                .zip(&w)
                .map(|(v, s)| f64::from(*v) * inv * f64::from(*s)),
        );
    }
    let d = relative(&host(&got), &want);
    assert!(d < 1e-5, "relative {d}");
}

/// Rotary embedding of `x` (`[tokens, dim]`) at positions `offset..`:
/// `traditional` pairs (2i, 2i + 1) (llama.cpp's layout), otherwise
/// (i, i + dim/2) (HF's).
fn rope_reference(x: &[f32], dim: usize, offset: usize, base: f64, traditional: bool) -> Vec<f64> {
    let half = dim / 2;
    let mut out = vec![0f64; x.len()];
    for (t, (row, o)) in x.chunks(dim).zip(out.chunks_mut(dim)).enumerate() {
        let pos = (offset + t) as f64;
        for i in 0..half {
            let theta = pos * base.powf(-2.0 * i as f64 / dim as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = match traditional {
                true => (2 * i, 2 * i + 1),
                false => (i, i + half),
            };
            let (xa, xb) = (f64::from(row[a]), f64::from(row[b]));
            o[a] = xa * c - xb * s;
            o[b] = xa * s + xb * c;
        }
    }
    out
}

#[test]
fn rotary_embedding_matches_f64_in_both_pairings() {
    let (tokens, dim, offset, base) = (6, 16, 3, 10_000f32);
    let x = values(tokens * dim, 5);
    for traditional in [true, false] {
        let got = fast::rope(
            array(&x, &[1, 1, tokens as i32, dim as i32]),
            dim as i32,
            traditional,
            base,
            1.0,
            offset as i32,
            None,
        )
        .unwrap();
        let want = rope_reference(&x, dim, offset, f64::from(base), traditional);
        let d = relative(&host(&got), &want);
        assert!(d < 1e-5, "traditional {traditional}: relative {d}");
    }
}

#[test]
fn grouped_query_causal_attention_matches_f64() {
    let (heads, kv_heads, tokens, dim) = (4, 2, 5, 8);
    let q = values(heads * tokens * dim, 6);
    let k = values(kv_heads * tokens * dim, 7);
    let v = values(kv_heads * tokens * dim, 8);
    let scale = 1.0 / (dim as f32).sqrt();
    let got = fast::scaled_dot_product_attention(
        array(&q, &[1, heads as i32, tokens as i32, dim as i32]),
        array(&k, &[1, kv_heads as i32, tokens as i32, dim as i32]),
        array(&v, &[1, kv_heads as i32, tokens as i32, dim as i32]),
        scale,
        ScaledDotProductAttentionMask::Causal,
        None,
    )
    .unwrap();
    let mut want = vec![0f64; q.len()];
    for h in 0..heads {
        // Query head h reads key-value head h / (heads / kv_heads).
        let g = h / (heads / kv_heads);
        for i in 0..tokens {
            let qi = &q[(h * tokens + i) * dim..][..dim];
            let scores: Vec<f64> = (0..=i)
                .map(|j| {
                    let kj = &k[(g * tokens + j) * dim..][..dim];
                    qi.iter()
                        .zip(kj)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        * f64::from(scale)
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let out = &mut want[(h * tokens + i) * dim..][..dim];
            for (j, w) in weights.iter().enumerate() {
                let vj = &v[(g * tokens + j) * dim..][..dim];
                for (o, x) in out.iter_mut().zip(vj) {
                    *o += w / total * f64::from(*x);
                }
            }
        }
    }
    let d = relative(&host(&got), &want);
    assert!(d < 1e-5, "relative {d}");
}
