//! Softmax pieces for the CPU: a vector `exp`, and row-wise
//! log-probabilities of a logits matrix.
//!
//! With AVX2 the exponential is a polynomial eight lanes at a time
//! (`exp_shifted_matches_f64_exp` bounds its relative error: 7.7e-8 on a
//! grid over [-90, 0]); values that would be f32 subnormals become 0.
//! Elsewhere `f32::exp`.

use std::sync::Mutex;

use crate::Isa;
use crate::pool::Pool;

/// `x ← exp(x − max)` for every element, returning their sum: the
/// softmax's numerators.
pub(crate) fn exp_shifted(simd: bool, x: &mut [f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is set only where AVX2, FMA and F16C were detected.
        return unsafe { x86::exp_shifted(x, max) };
    }
    let _ = simd;
    // Summed in f64: one f32 accumulator over a vocabulary's 49k values
    // lost 3e-5 of the log-sum (aarch64's test caught it under qemu).
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    sum as f32
}

/// Rows a task of [`log_softmax_rows`] takes.
const ROWS_PER_TASK: usize = 4;

/// `out[r] = x[r] − logsumexp(x[r])` for every row of `width` values: the
/// log-probabilities of each row of logits, rows split across the threads.
/// The sum of exponentials is accumulated in f32 lanes and finished in f64.
///
/// # Panics
/// If `x` and `out` differ in length or are not whole rows.
pub fn log_softmax_rows(x: &[f32], width: usize, out: &mut [f32]) {
    assert_eq!(
        x.len(),
        out.len(),
        "logits and log-probabilities differ in length"
    );
    assert!(
        width > 0 && x.len().is_multiple_of(width),
        "not whole rows of {width}"
    );
    let simd = Isa::detect().avx2();
    let chunk = ROWS_PER_TASK * width;
    let outs: Vec<Mutex<&mut [f32]>> = out.chunks_mut(chunk).map(Mutex::new).collect();
    Pool::global().run(outs.len(), &|t| {
        // Each task locks only its own rows: never contended.
        let mut o = outs[t].lock().unwrap_or_else(|e| e.into_inner());
        let rows = &x[t * chunk..][..o.len()];
        for (row, o) in rows.chunks_exact(width).zip(o.chunks_exact_mut(width)) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            o.copy_from_slice(row);
            // exp(x - max) into `o` for the sum, then overwritten.
            let sum = match max.is_finite() {
                true => exp_shifted(simd, o, max) as f64,
                false => f64::NAN,
            };
            let lse = (max as f64 + sum.ln()) as f32;
            for (o, &v) in o.iter_mut().zip(row) {
                *o = v - lse;
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::x86::hsum;

    /// `exp(x)` in eight lanes for `x ≤ 0` (what a softmax shifted by its
    /// maximum passes): `x = n·ln 2 + r` with |r| ≤ ln 2 / 2, a degree-6
    /// polynomial for `e^r` (Cephes' `expf` coefficients), `2^n` built in
    /// the exponent bits. Below ln(f32::MIN_POSITIVE) the result is 0.
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x_in: __m256) -> __m256 {
        let x = x_in;
        let low = _mm256_set1_ps(-87.336_55);
        let kept = _mm256_cmp_ps::<_CMP_GE_OQ>(x, low);
        let x = _mm256_max_ps(x, low);
        let n = _mm256_floor_ps(_mm256_fmadd_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(0.5),
        ));
        // r = x − n·ln 2, with ln 2 split in two for precision.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            0.166_666_65,
            0.5,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let r2 = _mm256_mul_ps(r, r);
        let e = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
        let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let e = _mm256_and_ps(kept, _mm256_mul_ps(e, _mm256_castsi256_ps(pow2)));
        // NaN stays NaN (the comparisons above would have made it 0).
        _mm256_blendv_ps(e, x_in, _mm256_cmp_ps::<_CMP_UNORD_Q>(x_in, x_in))
    }

    /// `x ← exp(x − max)`, returning the sum.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted(x: &mut [f32], max: f32) -> f32 {
        let n = x.len();
        let m = _mm256_set1_ps(max);
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: every load and store touches 8 floats below `n`.
        unsafe {
            while i + 8 <= n {
                let p = x.as_mut_ptr().add(i);
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p), m));
                _mm256_storeu_ps(p, e);
                acc = _mm256_add_ps(acc, e);
                i += 8;
            }
        }
        // SAFETY: AVX2 is enabled here.
        let mut sum = unsafe { hsum(acc) };
        for v in &mut x[i..] {
            *v = (*v - max).exp();
            sum += *v;
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector exp against f64 over the range a shifted softmax passes,
    /// through every tail length.
    #[test]
    fn exp_shifted_matches_f64_exp() {
        let simd = Isa::detect().avx2();
        let xs: Vec<f32> = (0..=20_000).map(|i| -90.0 + i as f32 * 0.0045).collect();
        for len in [xs.len(), 7, 8, 9, 1] {
            let max = 0.5f32;
            // The last `len` values: near 0, where the sum is not tiny.
            let xs = &xs[xs.len() - len..];
            let mut got = xs.to_vec();
            let sum = exp_shifted(simd, &mut got, max);
            let mut want_sum = 0f64;
            let mut worst = 0f64;
            for (&x, &g) in xs.iter().zip(&got) {
                let want = ((x - max) as f64).exp();
                want_sum += want;
                // Relative where the value is a normal f32; below, within
                // the smallest normal (0 for what underflows).
                let err = (g as f64 - want).abs();
                match want >= f32::MIN_POSITIVE as f64 {
                    true => worst = worst.max(err / want),
                    false => assert!(err <= f32::MIN_POSITIVE as f64, "exp({x} - {max})"),
                }
            }
            eprintln!("len {len}: max relative error {worst:.1e}");
            assert!(worst < 1e-6, "len {len}: max relative error {worst:e}");
            assert!(
                ((sum as f64) - want_sum).abs() / want_sum < 1e-5,
                "len {len}: sum"
            );
        }
        // NaN stays NaN, in the vector lanes and the tail.
        let mut nan = vec![0.0f32; 11];
        nan[3] = f32::NAN;
        nan[10] = f32::NAN;
        assert!(exp_shifted(simd, &mut nan, 0.0).is_nan());
        assert!(nan[3].is_nan() && nan[10].is_nan() && nan[4] == 1.0);
        // Far below: 0, not a NaN or garbage from the exponent bits.
        let mut tiny = vec![-1e30f32; 9];
        assert_eq!(exp_shifted(simd, &mut tiny, 0.0), 0.0);
        assert!(tiny.iter().all(|&v| v == 0.0));
    }
}

#[cfg(test)]
mod log_softmax_tests {
    use super::*;

    /// Rows of a vocabulary's width against f64, with the rows' NaN and
    /// infinite cases: probabilities that sum to 1, NaN where a row holds one.
    #[test]
    fn log_softmax_rows_match_f64() {
        let width = 49_157; // not a multiple of 8: the tail runs too
        let rows = 9;
        let x: Vec<f32> = (0..rows * width)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 10_000) as f32 / 400.0 - 12.0)
            .collect();
        let mut out = vec![0f32; x.len()];
        log_softmax_rows(&x, width, &mut out);
        let mut worst = 0f64;
        for (row, got) in x.chunks(width).zip(out.chunks(width)) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max
                + row
                    .iter()
                    .map(|&v| (v as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            for (&v, &g) in row.iter().zip(got) {
                worst = worst.max((g as f64 - (v as f64 - lse)).abs());
            }
        }
        assert!(worst < 1e-5, "max |Δ| {worst:e}");
        let mut bad = x[..2 * width].to_vec();
        bad[width + 17] = f32::NAN;
        let mut out = vec![0f32; bad.len()];
        log_softmax_rows(&bad, width, &mut out);
        assert!(out[..width].iter().all(|v| v.is_finite()));
        assert!(out[width..].iter().all(|v| v.is_nan()));
    }
}
