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
use crate::blocks::{
    Format, IQ4_VALUES, IQ4XS_QS, Q2K_D, Q2K_QS, Q2K_SC, Q3K_D, Q3K_HM, Q3K_QS, Q3K_SC, Q4K_QS,
    Q4K_SC, Q5K_QH, Q5K_QS, Q6K_D, Q6K_QH, Q6K_QL, Q6K_SC, iq4xs_scale, q3k_scales, q4k_scale_min,
};

/// Unsigned × signed byte products summed into 8 i32 lanes, lane `k`
/// holding bytes `4k..4k+4`.
pub(crate) trait Mac {
    /// `Σ u·s` per lane.
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i;
    /// `Σ u·s` per lane, bytes 0..16 times `lo`, bytes 16..32 times `hi`.
    /// The unsigned bytes are at most 127 and the signed ones at least
    /// −127 (activations are quantized to ±127), so AVX2's 16-bit pair sums
    /// (at most 2·127·127 = 32258) cannot saturate.
    unsafe fn dot_scaled(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i;
    /// The 32 bits of the little-endian `u32` at the start of `p` as 32
    /// bytes, byte `k` 16 where bit `k` is set, else 0: a 5-bit block's
    /// fifth bits, in the nibbles' order.
    unsafe fn fifth_bits(p: &[u8]) -> __m256i;
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
    #[inline(always)]
    unsafe fn fifth_bits(p: &[u8]) -> __m256i {
        unsafe { spread_bits(p) }
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
    /// One `vpmovm2b` from the mask (AVX-512 BW), where AVX2 takes a
    /// shuffle and a compare.
    #[inline(always)]
    unsafe fn fifth_bits(p: &[u8]) -> __m256i {
        unsafe {
            let bits = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            _mm256_and_si256(_mm256_movm_epi8(bits), _mm256_set1_epi8(16))
        }
    }
}

/// The sum of the eight lanes (the kernels', the attention's and the
/// softmax's horizontal reduction).
///
/// # Safety
/// The CPU has AVX.
#[inline(always)]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
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

/// [`Mac::fifth_bits`] on AVX2.
#[inline(always)]
unsafe fn spread_bits(p: &[u8]) -> __m256i {
    unsafe {
        let bits = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
        // Byte k holds byte k / 8 of the bits (each 128-bit lane holds all
        // four), then is tested against bit k % 8.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    }
}

/// The four f16 at the start of `p` (eight bytes, which `p` holds) as f32.
///
/// Written as one `vcvtph2ps` from memory: from intrinsics the compiler
/// narrows the load to `vpinsrw`, which merges into whatever register it
/// picks, and it picked the accumulator of the offsets, which chained every
/// block to the previous one's sum (Q4_0 and Q8_0 ran at half Q4_1's block
/// rate until this).
#[inline(always)]
unsafe fn f16x4(p: &[u8]) -> __m128 {
    debug_assert!(p.len() >= 8);
    let out: __m128;
    // SAFETY: reads the eight bytes `p` holds; F16C is in every caller's
    // target features.
    unsafe {
        std::arch::asm!(
            "vcvtph2ps {o}, qword ptr [{p}]",
            p = in(reg) p.as_ptr(),
            o = out(xmm_reg) out,
            options(pure, readonly, nostack, preserves_flags)
        );
    }
    out
}

/// Lanes 0 and 1 of [`f16x4`].
#[inline(always)]
unsafe fn f16x2(p: &[u8]) -> (f32, f32) {
    unsafe {
        let v = f16x4(p);
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }
}

/// Lane 0 of [`f16x4`].
#[inline(always)]
unsafe fn f16x1(p: &[u8]) -> f32 {
    unsafe { _mm_cvtss_f32(f16x4(p)) }
}

/// One weight row of a 32-value format against `N` activation rows.
#[inline(always)]
unsafe fn dot32<M: Mac, const N: usize>(format: Format, w: &[u8], a: [&[Q8x32]; N]) -> [f32; N] {
    unsafe {
        match format {
            Format::Q4_0 => dot_q4::<M, N, false, false>(w, a),
            Format::Q4_1 => dot_q4::<M, N, true, false>(w, a),
            Format::Q5_0 => dot_q4::<M, N, false, true>(w, a),
            Format::Q5_1 => dot_q4::<M, N, true, true>(w, a),
            Format::Q8_0 => dot_q8::<M, N, false>(w, a),
            Format::IQ4_NL => dot_q8::<M, N, true>(w, a),
            _ => unreachable!("256-value formats pair with 256-value blocks"),
        }
    }
}

/// `Q4_0` (`Q4_1` false: `x = d·(q − 8)`) or `Q4_1` (`x = d·q + m`);
/// with `Q5`, their 5-bit kin `Q5_0` (`x = d·(q − 16)`) and `Q5_1`, whose
/// fifth bits are ORed onto the nibbles. The quants go in unsigned (at
/// most 31: AVX2's 16-bit pair sums cannot saturate); the offset comes
/// back through the activations' precomputed `d·Σq`. Blocks go two at a
/// time into two sets of accumulators: with one, each block waited for
/// the previous one's multiply-add (4 cycles), which bounded a single
/// row's rate.
#[inline(always)]
unsafe fn dot_q4<M: Mac, const N: usize, const Q4_1: bool, const Q5: bool>(
    w: &[u8],
    a: [&[Q8x32]; N],
) -> [f32; N] {
    unsafe {
        // (block bytes, where the nibbles start, where the fifth bits do)
        let (bytes, quants, high) = match (Q4_1, Q5) {
            (false, false) => (18, 2, 0),
            (true, false) => (20, 4, 0),
            (false, true) => (22, 6, 2),
            (true, true) => (24, 8, 4),
        };
        let offset = if Q5 { -16.0 } else { -8.0 };
        let mut acc = [[_mm256_setzero_ps(); N]; 2];
        let mut extra = [[0f32; N]; 2];
        let blocks = w.len() / bytes;
        // A macro, not a closure: a closure does not take the caller's
        // target features, and its intrinsics became calls.
        macro_rules! step {
            ($i:expr, $k:expr) => {{
                let (i, k) = ($i, $k);
                let b = w.get_unchecked(i * bytes..(i + 1) * bytes);
                let (dw, m) = if Q4_1 {
                    f16x2(b)
                } else {
                    let d = f16x1(b);
                    (d, offset * d)
                };
                let u = match Q5 {
                    true => _mm256_or_si256(nibbles16(&b[quants..]), M::fifth_bits(&b[high..])),
                    false => nibbles16(&b[quants..]),
                };
                for n in 0..N {
                    let a = a[n].get_unchecked(i);
                    let p = M::dot(u, load_i8(&a.qs));
                    acc[k][n] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[k][n]);
                    extra[k][n] += m * a.ds;
                }
            }};
        }
        let mut i = 0;
        while i + 2 <= blocks {
            step!(i, 0);
            step!(i + 1, 1);
            i += 2;
        }
        if i < blocks {
            step!(i, 0);
        }
        std::array::from_fn(|n| {
            hsum(_mm256_add_ps(acc[0][n], acc[1][n])) + extra[0][n] + extra[1][n]
        })
    }
}

/// `Q8_0`, or with `IQ4` `IQ4_NL` (each block's nibbles looked up in
/// [`IQ4_VALUES`] by one `vpshufb`): signed weights, `|w|` as the unsigned
/// operand and `a·sign(w)` as the signed one; two blocks at a time, as
/// above.
#[inline(always)]
unsafe fn dot_q8<M: Mac, const N: usize, const IQ4: bool>(w: &[u8], a: [&[Q8x32]; N]) -> [f32; N] {
    unsafe {
        let table = iq4_table();
        let bytes = if IQ4 { 18 } else { 34 };
        let mut acc = [[_mm256_setzero_ps(); N]; 2];
        let blocks = w.len() / bytes;
        macro_rules! step {
            ($i:expr, $k:expr) => {{
                let (i, k) = ($i, $k);
                let b = w.get_unchecked(i * bytes..(i + 1) * bytes);
                let dw = f16x1(b);
                let q = match IQ4 {
                    true => iq4_values(table, &b[2..]),
                    false => load(&b[2..]),
                };
                let u = _mm256_sign_epi8(q, q);
                for n in 0..N {
                    let a = a[n].get_unchecked(i);
                    let p = M::dot(u, _mm256_sign_epi8(load_i8(&a.qs), q));
                    acc[k][n] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(p), acc[k][n]);
                }
            }};
        }
        let mut i = 0;
        while i + 2 <= blocks {
            step!(i, 0);
            step!(i + 1, 1);
            i += 2;
        }
        if i < blocks {
            step!(i, 0);
        }
        std::array::from_fn(|n| hsum(_mm256_add_ps(acc[0][n], acc[1][n])))
    }
}

/// [`IQ4_VALUES`] in both 128-bit lanes, for `vpshufb` to look nibbles up.
#[inline(always)]
unsafe fn iq4_table() -> __m256i {
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_VALUES.as_ptr().cast())) }
}

/// 16 bytes of `IQ4` nibbles as the 32 signed values they stand for, in
/// the nibbles' order (low nibbles, then high).
#[inline(always)]
unsafe fn iq4_values(table: __m256i, p: &[u8]) -> __m256i {
    unsafe { _mm256_shuffle_epi8(table, nibbles16(p)) }
}

/// Bits `2j, 2j + 1` of every byte of `q`: group `j` of a `Q2_K` or
/// `Q3_K` half-block's 2-bit quants.
#[inline(always)]
unsafe fn crumbs(q: __m256i, j: usize) -> __m256i {
    unsafe {
        let shifted = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j as i32));
        _mm256_and_si256(shifted, _mm256_set1_epi8(3))
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
                // Q5_K: Q4_K's with a fifth bit per value, from bit 2g
                // (first half of group g) or 2g + 1 of its high-bit byte.
                Format::Q4_K | Format::Q5_K => {
                    let five = format == Format::Q5_K;
                    let (d, dmin) = f16x2(b);
                    let sc = &b[Q4K_SC..Q4K_SC + 12];
                    let sm: [(u8, u8); 8] = std::array::from_fn(|j| q4k_scale_min(j, sc));
                    let qs = if five { Q5K_QS } else { Q4K_QS };
                    let qh = if five {
                        load(&b[Q5K_QH..])
                    } else {
                        _mm256_setzero_si256()
                    };
                    let one = _mm256_set1_epi8(1);
                    for g in 0..4 {
                        let q = load(&b[qs + 32 * g..]);
                        let mut lo = _mm256_and_si256(q, m4);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                        if five {
                            // Bit 2g (2g + 1) of each byte to bit 4; the
                            // 16-bit shift's spill from the next byte is
                            // masked off.
                            let shift = _mm_cvtsi32_si128(2 * g as i32);
                            let b_lo = _mm256_and_si256(_mm256_srl_epi16(qh, shift), one);
                            let shift = _mm_cvtsi32_si128(2 * g as i32 + 1);
                            let b_hi = _mm256_and_si256(_mm256_srl_epi16(qh, shift), one);
                            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b_lo, 4));
                            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b_hi, 4));
                        }
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
                    // `d` is the block's last two bytes: read the eight ending there.
                    let v = f16x4(&b[Q6K_D - 6..]);
                    let d = _mm_cvtss_f32(_mm_shuffle_ps(v, v, 0xFF));
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
                Format::Q2_K => {
                    // `d` and `dmin` are the block's last four bytes: read
                    // the eight ending there.
                    let v = f16x4(&b[Q2K_D - 4..]);
                    let d = _mm_cvtss_f32(_mm_shuffle_ps(v, v, 0xAA));
                    let dmin = _mm_cvtss_f32(_mm_shuffle_ps(v, v, 0xFF));
                    let sm = &b[Q2K_SC..Q2K_SC + 16];
                    for h in 0..2 {
                        let q = load(&b[Q2K_QS + 32 * h..]);
                        for j in 0..4 {
                            let u = crumbs(q, j);
                            let s = 8 * h + 2 * j;
                            let (lo, hi) = ((sm[s] & 0xF) as i32, (sm[s + 1] & 0xF) as i32);
                            for n in 0..N {
                                let qa = load_i8(&a[n][i].qs[128 * h + 32 * j..]);
                                isum[n] = _mm256_add_epi32(isum[n], M::dot_scaled(u, qa, lo, hi));
                            }
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        let mins: i32 = (0..16)
                            .map(|s| (sm[s] >> 4) as i32 * a.bsums[s] as i32)
                            .sum();
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * a.d),
                            _mm256_cvtepi32_ps(isum[n]),
                            acc[n],
                        );
                        extra[n] -= dmin * a.d * mins as f32;
                    }
                }
                Format::Q3_K => {
                    let v = f16x4(&b[Q3K_D - 6..]);
                    let d = _mm_cvtss_f32(_mm_shuffle_ps(v, v, 0xFF));
                    let sc = q3k_scales(&b[Q3K_SC..Q3K_SC + 12]);
                    let hm = load(&b[Q3K_HM..]);
                    for h in 0..2 {
                        let q = load(&b[Q3K_QS + 32 * h..]);
                        for j in 0..4 {
                            // The quant with its high bit (bit 4h + j of
                            // each byte; the 16-bit shift's spill from the
                            // next byte is masked off) as bit 2: 0..8, the
                            // value plus 4.
                            let shift = _mm_cvtsi32_si128((4 * h + j) as i32);
                            let high =
                                _mm256_and_si256(_mm256_srl_epi16(hm, shift), _mm256_set1_epi8(1));
                            let u = _mm256_or_si256(crumbs(q, j), _mm256_slli_epi16(high, 2));
                            let s = 8 * h + 2 * j;
                            for n in 0..N {
                                let qa = load_i8(&a[n][i].qs[128 * h + 32 * j..]);
                                let p = M::dot_scaled(u, qa, sc[s], sc[s + 1]);
                                isum[n] = _mm256_add_epi32(isum[n], p);
                            }
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        // Take 4·Σ sc·(Σ a) back out.
                        let offset: i32 = (0..16).map(|s| sc[s] * a.bsums[s] as i32).sum();
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * a.d),
                            _mm256_cvtepi32_ps(isum[n]),
                            acc[n],
                        );
                        extra[n] -= d * a.d * (4 * offset) as f32;
                    }
                }
                Format::IQ4_XS => {
                    let table = iq4_table();
                    let d = f16x1(b);
                    for j in 0..8 {
                        let q = iq4_values(table, &b[IQ4XS_QS + 16 * j..]);
                        let u = _mm256_sign_epi8(q, q);
                        let s = iq4xs_scale(b, j);
                        for n in 0..N {
                            let qa = _mm256_sign_epi8(load_i8(&a[n][i].qs[32 * j..]), q);
                            isum[n] = _mm256_add_epi32(isum[n], M::dot_scaled(u, qa, s, s));
                        }
                    }
                    for n in 0..N {
                        acc[n] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * a[n][i].d),
                            _mm256_cvtepi32_ps(isum[n]),
                            acc[n],
                        );
                    }
                }
                _ => unreachable!("32-value formats pair with 32-value blocks"),
            }
        }
        std::array::from_fn(|n| hsum(acc[n]) + extra[n])
    }
}

/// Eight values of a float format at `p` (16 bytes) as f32: `vcvtph2ps`
/// for `F16`, a 16-bit shift for `BF16` (an f32's top half).
#[inline(always)]
unsafe fn widen<const BF16: bool>(p: *const u8) -> __m256 {
    unsafe {
        let h = _mm_loadu_si128(p.cast());
        match BF16 {
            true => _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)),
            false => _mm256_cvtph_ps(h),
        }
    }
}

/// A float format's row against `N` rows of f32 activations: each eight
/// weights widened once and multiplied into every row's sums, sixteen at a
/// time into two sets of sums (a decode step's one row would otherwise
/// wait on each multiply-add's latency).
#[inline(always)]
unsafe fn dot_float<const N: usize, const BF16: bool>(w: &[u8], a: [&[f32]; N]) -> [f32; N] {
    unsafe {
        let k = w.len() / 2;
        let mut acc = [[_mm256_setzero_ps(); N]; 2];
        let (wp, ap) = (w.as_ptr(), a.map(|a| a.as_ptr()));
        let mut j = 0;
        while j + 16 <= k {
            let (w0, w1) = (
                widen::<BF16>(wp.add(2 * j)),
                widen::<BF16>(wp.add(2 * j + 16)),
            );
            for n in 0..N {
                acc[0][n] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(ap[n].add(j)), acc[0][n]);
                acc[1][n] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(ap[n].add(j + 8)), acc[1][n]);
            }
            j += 16;
        }
        let rest = j;
        std::array::from_fn(|n| {
            let tail: f32 = (rest..k)
                .map(|j| {
                    let b = [w[2 * j], w[2 * j + 1]];
                    let v = match BF16 {
                        true => f32::from_bits((u16::from_le_bytes(b) as u32) << 16),
                        false => half::f16::from_le_bytes(b).to_f32(),
                    };
                    v * a[n][j]
                })
                .sum();
            hsum(_mm256_add_ps(acc[0][n], acc[1][n])) + tail
        })
    }
}

/// [`dot_float`] for `format`, built with AVX2, FMA and F16C (the VNNI
/// kernels' CPUs take it too: it has no integer products).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn avx2_dot_float<const N: usize>(
    format: Format,
    w: &[u8],
    a: [&[f32]; N],
) -> [f32; N] {
    unsafe {
        match format {
            Format::BF16 => dot_float::<N, true>(w, a),
            Format::F16 => dot_float::<N, false>(w, a),
            _ => unreachable!("block formats take quantized activations"),
        }
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

entry!(avx2_dot32, avx2_dot256, Avx2, "avx2,fma,f16c");
entry!(
    vnni_dot32,
    vnni_dot256,
    Vnni,
    "avx2,fma,avx512vnni,avx512vl,avx512bw"
);
