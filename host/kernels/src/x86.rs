//! x86-64 kernels: one weight row against `N` activation rows at once, so
//! each weight block is unpacked once and used `N` times (the tile that
//! makes a prompt's product a GEMM rather than `N` matrix-vector products).
//!
//! The byte products go through [`Mac`]: AVX2's `vpmaddubsw` + `vpmaddwd`,
//! or AVX-512 VNNI's `vpdpbusd` (one instruction, no 16-bit
//! intermediate). The same source is compiled twice, once per
//! instruction set, and chosen at run time.

use std::arch::x86_64::*;

use crate::act::{Q8x32, Q8x256};
use crate::blocks::{Format, Q4K_QS, Q4K_SC, Q6K_D, Q6K_QH, Q6K_QL, Q6K_SC, f16_at, q4k_scale_min};

/// Unsigned × signed byte products summed into 8 i32 lanes, lane `k`
/// holding bytes `4k..4k+4`.
pub(crate) trait Mac {
    /// `Σ u·s` per lane.
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i;
    /// `Σ u·s` per lane, bytes 0..16 times `lo`, bytes 16..32 times `hi`.
    /// The unsigned bytes are at most 63 here (6-bit quants), so AVX2's
    /// 16-bit pair sums cannot saturate.
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i;
}

pub(crate) struct Avx2;
pub(crate) struct Vnni;

impl Mac for Avx2 {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }
    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        unsafe {
            let sc = _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16));
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc)
        }
    }
}

impl Mac for Vnni {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s) }
    }
    #[inline(always)]
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
        unsafe {
            let sc = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
            _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), sc)
        }
    }
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
unsafe fn load(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

#[inline(always)]
unsafe fn load_i8(p: &[i8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// 16 bytes of 4-bit quants as 32 bytes: low nibbles (values 0..16) then
/// high nibbles (values 16..32).
#[inline(always)]
unsafe fn nibbles16(p: &[u8]) -> __m256i {
    unsafe {
        let q = _mm_loadu_si128(p.as_ptr().cast());
        let m = _mm_set1_epi8(0xF);
        let lo = _mm_and_si128(q, m);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
        _mm256_set_m128i(hi, lo)
    }
}

/// One weight row of a 32-value format against `N` activation rows.
#[inline(always)]
unsafe fn dot32<M: Mac, const N: usize>(format: Format, w: &[u8], a: [&[Q8x32]; N]) -> [f32; N] {
    unsafe {
        let bytes = format.block_bytes();
        let mut acc = [_mm256_setzero_ps(); N];
        let mut extra = [0f32; N];
        for (i, b) in w.chunks_exact(bytes).enumerate() {
            let dw = f16_at(b, 0);
            match format {
                Format::Q4_0 | Format::Q4_1 => {
                    let off = if format == Format::Q4_0 { 2 } else { 4 };
                    let u = nibbles16(&b[off..]);
                    let m = if format == Format::Q4_1 {
                        f16_at(b, 2)
                    } else {
                        -8.0 * dw
                    };
                    for n in 0..N {
                        let a = &a[n][i];
                        let p = M::dot(u, load_i8(&a.qs));
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(dw * a.d),
                            _mm256_cvtepi32_ps(p),
                            acc[n],
                        );
                        extra[n] += m * a.d * a.sum as f32;
                    }
                }
                Format::Q8_0 => {
                    // |w| as unsigned and a·sign(w): the same products, with
                    // the unsigned operand the instruction wants.
                    let q = load(&b[2..]);
                    let u = _mm256_sign_epi8(q, q);
                    for n in 0..N {
                        let a = &a[n][i];
                        let s = _mm256_sign_epi8(load_i8(&a.qs), q);
                        let p = M::dot(u, s);
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(dw * a.d),
                            _mm256_cvtepi32_ps(p),
                            acc[n],
                        );
                    }
                }
                Format::Q4_K | Format::Q6_K => unreachable!("K-quants pair with 256-value blocks"),
            }
        }
        std::array::from_fn(|n| hsum(acc[n]) + extra[n])
    }
}

/// One weight row of a K-quant against `N` activation rows.
#[inline(always)]
unsafe fn dot256<M: Mac, const N: usize>(format: Format, w: &[u8], a: [&[Q8x256]; N]) -> [f32; N] {
    unsafe {
        let bytes = format.block_bytes();
        let mut acc = [_mm256_setzero_ps(); N];
        let mut extra = [0f32; N];
        let m4 = _mm256_set1_epi8(0xF);
        for (i, b) in w.chunks_exact(bytes).enumerate() {
            let mut isum = [_mm256_setzero_si256(); N];
            match format {
                Format::Q4_K => {
                    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                    let sc = &b[Q4K_SC..Q4K_SC + 12];
                    let sm: [(u8, u8); 8] = std::array::from_fn(|j| q4k_scale_min(j, sc));
                    for g in 0..4 {
                        let q = load(&b[Q4K_QS + 32 * g..]);
                        let lo = _mm256_and_si256(q, m4);
                        let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                        let (s1, s2) = (sm[2 * g].0 as i32, sm[2 * g + 1].0 as i32);
                        for n in 0..N {
                            let qa = &a[n][i].qs;
                            let p = _mm256_add_epi32(
                                M::dot_scaled(lo, load_i8(&qa[64 * g..]), s1, s1),
                                M::dot_scaled(hi, load_i8(&qa[64 * g + 32..]), s2, s2),
                            );
                            isum[n] = _mm256_add_epi32(isum[n], p);
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        let mins: i32 = (0..8)
                            .map(|j| {
                                sm[j].1 as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32)
                            })
                            .sum();
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * a.d),
                            _mm256_cvtepi32_ps(isum[n]),
                            acc[n],
                        );
                        extra[n] -= dmin * a.d * mins as f32;
                    }
                }
                Format::Q6_K => {
                    let d = f16_at(b, Q6K_D);
                    let sc: [i32; 16] = std::array::from_fn(|s| b[Q6K_SC + s] as i8 as i32);
                    for h in 0..2 {
                        let ql0 = load(&b[Q6K_QL + 64 * h..]);
                        let ql1 = load(&b[Q6K_QL + 64 * h + 32..]);
                        let qh = load(&b[Q6K_QH + 32 * h..]);
                        let q = [
                            _mm256_or_si256(
                                _mm256_and_si256(ql0, m4),
                                _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(ql1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                _mm256_and_si256(qh, _mm256_set1_epi8(0x30)),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                _mm256_srli_epi16(
                                    _mm256_and_si256(qh, _mm256_set1_epi8(0xC0u8 as i8)),
                                    2,
                                ),
                            ),
                        ];
                        for (g, &u) in q.iter().enumerate() {
                            let (lo, hi) = (sc[8 * h + 2 * g], sc[8 * h + 2 * g + 1]);
                            for n in 0..N {
                                let qa = &a[n][i].qs[128 * h + 32 * g..];
                                isum[n] = _mm256_add_epi32(
                                    isum[n],
                                    M::dot_scaled(u, load_i8(qa), lo, hi),
                                );
                            }
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        // The quants are stored +32; take 32·Σ sc·(Σ a) back out.
                        let offset: i32 = (0..16).map(|s| sc[s] * a.bsums[s] as i32).sum();
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * a.d),
                            _mm256_cvtepi32_ps(isum[n]),
                            acc[n],
                        );
                        extra[n] -= d * a.d * (32 * offset) as f32;
                    }
                }
                _ => unreachable!("32-value formats pair with 32-value blocks"),
            }
        }
        std::array::from_fn(|n| hsum(acc[n]) + extra[n])
    }
}

macro_rules! entry {
    ($name32:ident, $name256:ident, $mac:ty, $features:literal) => {
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name32<const N: usize>(
            format: Format,
            w: &[u8],
            a: [&[Q8x32]; N],
        ) -> [f32; N] {
            unsafe { dot32::<$mac, N>(format, w, a) }
        }
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name256<const N: usize>(
            format: Format,
            w: &[u8],
            a: [&[Q8x256]; N],
        ) -> [f32; N] {
            unsafe { dot256::<$mac, N>(format, w, a) }
        }
    };
}

entry!(avx2_dot32, avx2_dot256, Avx2, "avx2,fma");
entry!(
    vnni_dot32,
    vnni_dot256,
    Vnni,
    "avx2,fma,avx512vnni,avx512vl"
);
