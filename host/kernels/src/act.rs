//! Activations quantized to 8-bit blocks, once per product, so the inner
//! loops are integer dot products (as llama.cpp does): 32-value blocks for
//! the formats with 32-value blocks, 256-value blocks with sums per 16 for
//! the K-quants. The scale is kept in f32 (ggml keeps f16 for `Q8_0`), so
//! the only loss is the rounding of each activation to 1/127 of its
//! block's largest magnitude. The float formats take the f32 values as
//! they are.

use crate::blocks::Pairing;

/// 32 activations: `x ≈ d·q`, with `ds = d·Σq` for the formats whose
/// quants carry an offset (`Q4_0`'s −8, `Q5_0`'s −16, `Q4_1`'s and
/// `Q5_1`'s `m`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q8x32 {
    pub d: f32,
    pub ds: f32,
    pub qs: [i8; 32],
}

/// 256 activations: `x ≈ d·q`, with the sum of every 16 quants.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q8x256 {
    pub d: f32,
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
}

/// One row of `m` activation rows, in a kernel's form.
#[derive(Clone, Copy)]
pub(crate) enum ActRow<'a> {
    B32(&'a [Q8x32]),
    B256(&'a [Q8x256]),
    F32(&'a [f32]),
}

/// `m` rows of `k` activations, quantized for one weight format's kernels.
pub struct Activations {
    rows: usize,
    blocks: Blocks,
}

enum Blocks {
    B32(Vec<Q8x32>),
    B256(Vec<Q8x256>),
    F32(Vec<f32>),
}

/// The largest magnitude and the scale that maps it to 127.
#[inline(always)]
fn scale_of(x: &[f32]) -> (f32, f32) {
    // Eight running maxima, so the loop vectorises.
    let mut mx = [0f32; 8];
    for c in x.chunks_exact(8) {
        for i in 0..8 {
            mx[i] = mx[i].max(c[i].abs());
        }
    }
    let amax = mx.iter().fold(0f32, |a, &b| a.max(b));
    let d = amax / 127.0;
    (d, if d > 0.0 { 1.0 / d } else { 0.0 })
}

#[inline(always)]
fn quantize_into(x: &[f32], id: f32, qs: &mut [i8]) {
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
}

#[inline(always)]
fn quantize32(x: &[f32], out: &mut [Q8x32]) {
    for (x, b) in x.chunks_exact(32).zip(out) {
        let (d, id) = scale_of(x);
        quantize_into(x, id, &mut b.qs);
        b.d = d;
        b.ds = d * b.qs.iter().map(|&q| q as i32).sum::<i32>() as f32;
    }
}

#[inline(always)]
fn quantize256(x: &[f32], out: &mut [Q8x256]) {
    for (x, b) in x.chunks_exact(256).zip(out) {
        let (d, id) = scale_of(x);
        quantize_into(x, id, &mut b.qs);
        b.d = d;
        for (s, q) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = q.iter().map(|&q| q as i16).sum();
        }
    }
}

// The same loops compiled with AVX2, so the rounding and the maxima run 8
// lanes wide (the baseline x86-64 target has no packed rounding).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn quantize32_avx2(x: &[f32], out: &mut [Q8x32]) {
    quantize32(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn quantize256_avx2(x: &[f32], out: &mut [Q8x256]) {
    quantize256(x, out)
}

impl Activations {
    /// `x`, `rows × k` row-major, in the form `pairing` names: quantized
    /// into 256- or 32-value blocks, or kept as f32. `k` must be a multiple
    /// of the block length (the weight's row length is).
    pub fn quantize(x: &[f32], rows: usize, k: usize, pairing: Pairing, simd: bool) -> Self {
        assert_eq!(x.len(), rows * k, "activations are not rows × k");
        #[cfg(not(target_arch = "x86_64"))]
        let _ = simd;
        // SAFETY (both calls): the caller passes `simd` only where AVX2 and
        // FMA were detected.
        let blocks = if pairing == Pairing::F32 {
            Blocks::F32(x.to_vec())
        } else if pairing == Pairing::Q8x256 {
            assert_eq!(k % 256, 0);
            let zero = Q8x256 {
                d: 0.0,
                qs: [0; 256],
                bsums: [0; 16],
            };
            let mut v = vec![zero; x.len() / 256];
            match simd {
                #[cfg(target_arch = "x86_64")]
                true => unsafe { quantize256_avx2(x, &mut v) },
                _ => quantize256(x, &mut v),
            }
            Blocks::B256(v)
        } else {
            assert_eq!(k % 32, 0);
            let zero = Q8x32 {
                d: 0.0,
                ds: 0.0,
                qs: [0; 32],
            };
            let mut v = vec![zero; x.len() / 32];
            match simd {
                #[cfg(target_arch = "x86_64")]
                true => unsafe { quantize32_avx2(x, &mut v) },
                _ => quantize32(x, &mut v),
            }
            Blocks::B32(v)
        };
        Activations { rows, blocks }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn row(&self, i: usize) -> ActRow<'_> {
        match &self.blocks {
            Blocks::B32(v) => {
                let n = v.len() / self.rows;
                ActRow::B32(&v[i * n..(i + 1) * n])
            }
            Blocks::B256(v) => {
                let n = v.len() / self.rows;
                ActRow::B256(&v[i * n..(i + 1) * n])
            }
            Blocks::F32(v) => {
                let n = v.len() / self.rows;
                ActRow::F32(&v[i * n..(i + 1) * n])
            }
        }
    }
}
