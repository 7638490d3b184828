//! aarch64 kernels on baseline NEON (every aarch64 CPU has it): widening
//! `i8 × i8 → i16` multiplies (`smull`, `smull2`) and pairwise adds into
//! `i32` lanes. NEON multiplies signed by signed, so the quants go in as
//! they are (nibbles and 6-bit values fit `i8`) and no sign trick is
//! needed. The `sdot` instruction of the dot-product extension would halve
//! the multiply work; it is not used yet.
//!
//! Checked like the x86 kernels (`tests/agree.rs`), under `qemu-aarch64`
//! on the development machine (docs/executor.md says how).

use std::arch::aarch64::*;

use crate::act::{Q8x32, Q8x256};
use crate::blocks::{
    Format, IQ4_VALUES, IQ4XS_QS, Q2K_D, Q2K_QS, Q2K_SC, Q3K_D, Q3K_HM, Q3K_QS, Q3K_SC, Q4K_QS,
    Q4K_SC, Q5K_QH, Q5K_QS, Q6K_D, Q6K_QH, Q6K_QL, Q6K_SC, f16_at, iq4xs_scale, q3k_scales,
    q4k_scale_min, q5_offsets,
};

/// `Σ w·a` over 16 signed bytes, in four `i32` lanes.
#[inline(always)]
unsafe fn dot16(w: int8x16_t, a: int8x16_t) -> int32x4_t {
    unsafe {
        let lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
        let hi = vmull_high_s8(w, a);
        vaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))
    }
}

#[inline(always)]
unsafe fn load_u8(p: &[u8]) -> uint8x16_t {
    debug_assert!(p.len() >= 16);
    unsafe { vld1q_u8(p.as_ptr()) }
}

#[inline(always)]
unsafe fn load_i8(p: &[i8]) -> int8x16_t {
    debug_assert!(p.len() >= 16);
    unsafe { vld1q_s8(p.as_ptr()) }
}

#[inline(always)]
unsafe fn low_nibbles(q: uint8x16_t) -> int8x16_t {
    unsafe { vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF))) }
}

#[inline(always)]
unsafe fn high_nibbles(q: uint8x16_t) -> int8x16_t {
    unsafe { vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)) }
}

/// One weight row of a 32-value format against `N` activation rows.
pub(crate) unsafe fn neon_dot32<const N: usize>(
    format: Format,
    w: &[u8],
    a: [&[Q8x32]; N],
) -> [f32; N] {
    unsafe {
        let mut acc = [0f32; N];
        match format {
            Format::Q4_0 | Format::Q4_1 => {
                let q4_1 = format == Format::Q4_1;
                let (bytes, off) = if q4_1 { (20, 4) } else { (18, 2) };
                for (i, b) in w.chunks_exact(bytes).enumerate() {
                    let d = f16_at(b, 0);
                    let m = if q4_1 { f16_at(b, 2) } else { -8.0 * d };
                    let q = load_u8(&b[off..]);
                    let (lo, hi) = (low_nibbles(q), high_nibbles(q));
                    for n in 0..N {
                        let a = &a[n][i];
                        let s =
                            vaddq_s32(dot16(lo, load_i8(&a.qs)), dot16(hi, load_i8(&a.qs[16..])));
                        acc[n] += d * a.d * vaddvq_s32(s) as f32 + m * a.ds;
                    }
                }
            }
            Format::Q8_0 => {
                for (i, b) in w.chunks_exact(34).enumerate() {
                    let d = f16_at(b, 0);
                    let w0 = vreinterpretq_s8_u8(load_u8(&b[2..]));
                    let w1 = vreinterpretq_s8_u8(load_u8(&b[18..]));
                    for n in 0..N {
                        let a = &a[n][i];
                        let s =
                            vaddq_s32(dot16(w0, load_i8(&a.qs)), dot16(w1, load_i8(&a.qs[16..])));
                        acc[n] += d * a.d * vaddvq_s32(s) as f32;
                    }
                }
            }
            Format::Q5_0 | Format::Q5_1 => {
                let q5_1 = format == Format::Q5_1;
                let (high, off) = q5_offsets(format);
                for (i, b) in w.chunks_exact(format.block_bytes()).enumerate() {
                    let d = f16_at(b, 0);
                    let m = if q5_1 { f16_at(b, 2) } else { -16.0 * d };
                    let q = load_u8(&b[off..]);
                    let bits = u32::from_le_bytes([b[high], b[high + 1], b[high + 2], b[high + 3]]);
                    let lo = vorrq_s8(low_nibbles(q), fifth_bits(bits as u16));
                    let hi = vorrq_s8(high_nibbles(q), fifth_bits((bits >> 16) as u16));
                    for n in 0..N {
                        let a = &a[n][i];
                        let s =
                            vaddq_s32(dot16(lo, load_i8(&a.qs)), dot16(hi, load_i8(&a.qs[16..])));
                        acc[n] += d * a.d * vaddvq_s32(s) as f32 + m * a.ds;
                    }
                }
            }
            Format::IQ4_NL => {
                let table = vld1q_s8(IQ4_VALUES.as_ptr());
                for (i, b) in w.chunks_exact(18).enumerate() {
                    let d = f16_at(b, 0);
                    let (lo, hi) = iq4_values(table, load_u8(&b[2..]));
                    for n in 0..N {
                        let a = &a[n][i];
                        let s =
                            vaddq_s32(dot16(lo, load_i8(&a.qs)), dot16(hi, load_i8(&a.qs[16..])));
                        acc[n] += d * a.d * vaddvq_s32(s) as f32;
                    }
                }
            }
            _ => unreachable!("256-value formats pair with 256-value blocks"),
        }
        acc
    }
}

/// 16 bytes of `IQ4` nibbles as the 32 values they stand for (one table
/// lookup each half): low nibbles' values, high nibbles' values.
#[inline(always)]
unsafe fn iq4_values(table: int8x16_t, q: uint8x16_t) -> (int8x16_t, int8x16_t) {
    unsafe {
        let lo = vandq_u8(q, vdupq_n_u8(0xF));
        (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, vshrq_n_u8::<4>(q)))
    }
}

/// Bits `k, k + 1` of every byte: one group of 2-bit quants.
#[inline(always)]
unsafe fn crumbs(q: uint8x16_t, k: usize) -> uint8x16_t {
    unsafe { vandq_u8(vshlq_u8(q, vdupq_n_s8(-(k as i8))), vdupq_n_u8(3)) }
}

/// 16 bits as 16 bytes, byte `k` 16 where bit `k` is set, else 0: half a
/// 5-bit block's fifth bits, in the nibbles' order.
#[inline(always)]
unsafe fn fifth_bits(bits: u16) -> int8x16_t {
    unsafe {
        let [b0, b1] = bits.to_le_bytes();
        let spread = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
        let mask = vld1q_u8([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128].as_ptr());
        let set = vtstq_u8(spread, mask);
        vreinterpretq_s8_u8(vandq_u8(set, vdupq_n_u8(16)))
    }
}

/// One weight row of a K-quant against `N` activation rows.
pub(crate) unsafe fn neon_dot256<const N: usize>(
    format: Format,
    w: &[u8],
    a: [&[Q8x256]; N],
) -> [f32; N] {
    unsafe {
        let mut acc = [0f32; N];
        let bytes = format.block_bytes();
        for (i, b) in w.chunks_exact(bytes).enumerate() {
            let mut isum = [0i32; N];
            match format {
                // Q5_K: Q4_K's with a fifth bit per value, from bit 2g
                // (first half of group g) or 2g + 1 of its high-bit byte.
                Format::Q4_K | Format::Q5_K => {
                    let five = format == Format::Q5_K;
                    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                    let sm: [(u8, u8); 8] =
                        std::array::from_fn(|j| q4k_scale_min(j, &b[Q4K_SC..Q4K_SC + 12]));
                    let qs = if five { Q5K_QS } else { Q4K_QS };
                    let (h0, h1) = match five {
                        true => (load_u8(&b[Q5K_QH..]), load_u8(&b[Q5K_QH + 16..])),
                        false => (vdupq_n_u8(0), vdupq_n_u8(0)),
                    };
                    // Bit `k` of each high-bit byte as 16 (or 0).
                    let fifth = |h: uint8x16_t, k: usize| {
                        let bit = vandq_u8(vshlq_u8(h, vdupq_n_s8(-(k as i8))), vdupq_n_u8(1));
                        vreinterpretq_s8_u8(vshlq_n_u8::<4>(bit))
                    };
                    for g in 0..4 {
                        let q0 = load_u8(&b[qs + 32 * g..]);
                        let q1 = load_u8(&b[qs + 32 * g + 16..]);
                        let (mut lo0, mut lo1) = (low_nibbles(q0), low_nibbles(q1));
                        let (mut hi0, mut hi1) = (high_nibbles(q0), high_nibbles(q1));
                        if five {
                            lo0 = vorrq_s8(lo0, fifth(h0, 2 * g));
                            lo1 = vorrq_s8(lo1, fifth(h1, 2 * g));
                            hi0 = vorrq_s8(hi0, fifth(h0, 2 * g + 1));
                            hi1 = vorrq_s8(hi1, fifth(h1, 2 * g + 1));
                        }
                        for n in 0..N {
                            let qa = &a[n][i].qs[64 * g..];
                            let lo =
                                vaddq_s32(dot16(lo0, load_i8(qa)), dot16(lo1, load_i8(&qa[16..])));
                            let hi = vaddq_s32(
                                dot16(hi0, load_i8(&qa[32..])),
                                dot16(hi1, load_i8(&qa[48..])),
                            );
                            isum[n] += sm[2 * g].0 as i32 * vaddvq_s32(lo)
                                + sm[2 * g + 1].0 as i32 * vaddvq_s32(hi);
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        let mins: i32 = (0..8)
                            .map(|j| {
                                sm[j].1 as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32)
                            })
                            .sum();
                        acc[n] += d * a.d * isum[n] as f32 - dmin * a.d * mins as f32;
                    }
                }
                Format::Q6_K => {
                    let d = f16_at(b, Q6K_D);
                    let sc: [i32; 16] = std::array::from_fn(|s| b[Q6K_SC + s] as i8 as i32);
                    let m4 = vdupq_n_u8(0xF);
                    let m2 = vdupq_n_u8(0x3);
                    for h in 0..2 {
                        for half in 0..2 {
                            // Elements 16·half .. 16·half + 16 of each group of 32.
                            let ql0 = load_u8(&b[Q6K_QL + 64 * h + 16 * half..]);
                            let ql1 = load_u8(&b[Q6K_QL + 64 * h + 32 + 16 * half..]);
                            let qh = load_u8(&b[Q6K_QH + 32 * h + 16 * half..]);
                            let bits = |shift: u8| -> uint8x16_t {
                                let s = match shift {
                                    0 => qh,
                                    2 => vshrq_n_u8::<2>(qh),
                                    4 => vshrq_n_u8::<4>(qh),
                                    _ => vshrq_n_u8::<6>(qh),
                                };
                                vshlq_n_u8::<4>(vandq_u8(s, m2))
                            };
                            let q = [
                                vorrq_u8(vandq_u8(ql0, m4), bits(0)),
                                vorrq_u8(vandq_u8(ql1, m4), bits(2)),
                                vorrq_u8(vshrq_n_u8::<4>(ql0), bits(4)),
                                vorrq_u8(vshrq_n_u8::<4>(ql1), bits(6)),
                            ];
                            for (g, &q) in q.iter().enumerate() {
                                let q = vreinterpretq_s8_u8(q);
                                let s = sc[8 * h + 2 * g + half];
                                for n in 0..N {
                                    let qa = &a[n][i].qs[128 * h + 32 * g + 16 * half..];
                                    isum[n] += s * vaddvq_s32(dot16(q, load_i8(qa)));
                                }
                            }
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        // The quants are stored +32; take 32·Σ sc·(Σ a) back out.
                        let offset: i32 = (0..16).map(|s| sc[s] * a.bsums[s] as i32).sum();
                        acc[n] += d * a.d * (isum[n] - 32 * offset) as f32;
                    }
                }
                // Value 32j + l of half h: bits 2j of byte 32h + l, scale
                // (v / 16) = 8h + 2j for l < 16, one more after.
                Format::Q2_K => {
                    let (d, dmin) = (f16_at(b, Q2K_D), f16_at(b, Q2K_D + 2));
                    let sm = &b[Q2K_SC..Q2K_SC + 16];
                    for h in 0..2 {
                        let q0 = load_u8(&b[Q2K_QS + 32 * h..]);
                        let q1 = load_u8(&b[Q2K_QS + 32 * h + 16..]);
                        for j in 0..4 {
                            let u0 = vreinterpretq_s8_u8(crumbs(q0, 2 * j));
                            let u1 = vreinterpretq_s8_u8(crumbs(q1, 2 * j));
                            let s = 8 * h + 2 * j;
                            for n in 0..N {
                                let qa = &a[n][i].qs[128 * h + 32 * j..];
                                isum[n] += (sm[s] & 0xF) as i32
                                    * vaddvq_s32(dot16(u0, load_i8(qa)))
                                    + (sm[s + 1] & 0xF) as i32
                                        * vaddvq_s32(dot16(u1, load_i8(&qa[16..])));
                            }
                        }
                    }
                    for n in 0..N {
                        let a = &a[n][i];
                        let mins: i32 = (0..16)
                            .map(|s| (sm[s] >> 4) as i32 * a.bsums[s] as i32)
                            .sum();
                        acc[n] += d * a.d * isum[n] as f32 - dmin * a.d * mins as f32;
                    }
                }
                // As Q2_K's, with the high bit (bit 4h + j of byte l)
                // clear taking 4 off: the values go in signed, −4..4.
                Format::Q3_K => {
                    let d = f16_at(b, Q3K_D);
                    let sc = q3k_scales(&b[Q3K_SC..Q3K_SC + 12]);
                    let hm = [load_u8(&b[Q3K_HM..]), load_u8(&b[Q3K_HM + 16..])];
                    for h in 0..2 {
                        let q = [
                            load_u8(&b[Q3K_QS + 32 * h..]),
                            load_u8(&b[Q3K_QS + 32 * h + 16..]),
                        ];
                        for j in 0..4 {
                            let v: [int8x16_t; 2] = std::array::from_fn(|half| {
                                let bit = vshlq_u8(hm[half], vdupq_n_s8(-((4 * h + j) as i8)));
                                let low = vshlq_n_u8::<2>(vandq_u8(bit, vdupq_n_u8(1)));
                                let u = vorrq_u8(crumbs(q[half], 2 * j), low);
                                vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(4))
                            });
                            let s = 8 * h + 2 * j;
                            for n in 0..N {
                                let qa = &a[n][i].qs[128 * h + 32 * j..];
                                isum[n] += sc[s] * vaddvq_s32(dot16(v[0], load_i8(qa)))
                                    + sc[s + 1] * vaddvq_s32(dot16(v[1], load_i8(&qa[16..])));
                            }
                        }
                    }
                    for n in 0..N {
                        acc[n] += d * a[n][i].d * isum[n] as f32;
                    }
                }
                Format::IQ4_XS => {
                    let table = vld1q_s8(IQ4_VALUES.as_ptr());
                    let d = f16_at(b, 0);
                    for j in 0..8 {
                        let (lo, hi) = iq4_values(table, load_u8(&b[IQ4XS_QS + 16 * j..]));
                        let s = iq4xs_scale(b, j);
                        for n in 0..N {
                            let qa = &a[n][i].qs[32 * j..];
                            let p =
                                vaddq_s32(dot16(lo, load_i8(qa)), dot16(hi, load_i8(&qa[16..])));
                            isum[n] += s * vaddvq_s32(p);
                        }
                    }
                    for n in 0..N {
                        acc[n] += d * a[n][i].d * isum[n] as f32;
                    }
                }
                _ => unreachable!("32-value formats pair with 32-value blocks"),
            }
        }
        acc
    }
}

/// A float format's row against `N` rows of f32 activations: `BF16`
/// widened by a 16-bit shift, `F16` converted 64 values at a time by the
/// `half` crate (which uses the CPU's conversion instructions where it has
/// them), then four-lane multiply-adds.
pub(crate) unsafe fn neon_dot_float<const N: usize>(
    format: Format,
    w: &[u8],
    a: [&[f32]; N],
) -> [f32; N] {
    use half::slice::HalfFloatSliceExt;
    unsafe {
        let k = w.len() / 2;
        let mut acc = [vdupq_n_f32(0.0); N];
        let mut wide = [0f32; 64];
        let mut halves = [half::f16::ZERO; 64];
        let mut j = 0;
        while j < k {
            let len = (k - j).min(64);
            let bytes = &w[2 * j..2 * (j + len)];
            match format {
                Format::F16 => {
                    for (h, b) in halves.iter_mut().zip(bytes.chunks_exact(2)) {
                        *h = half::f16::from_le_bytes([b[0], b[1]]);
                    }
                    halves[..len].convert_to_f32_slice(&mut wide[..len]);
                }
                Format::BF16 => {
                    for (v, b) in wide.iter_mut().zip(bytes.chunks_exact(2)) {
                        *v = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
                    }
                }
                _ => unreachable!("block formats take quantized activations"),
            }
            let full = len / 4 * 4;
            for c in (0..full).step_by(4) {
                let wv = vld1q_f32(wide.as_ptr().add(c));
                for n in 0..N {
                    acc[n] = vfmaq_f32(acc[n], wv, vld1q_f32(a[n].as_ptr().add(j + c)));
                }
            }
            for c in full..len {
                let wv = vsetq_lane_f32::<0>(wide[c], vdupq_n_f32(0.0));
                for n in 0..N {
                    let x = vsetq_lane_f32::<0>(a[n][j + c], vdupq_n_f32(0.0));
                    acc[n] = vfmaq_f32(acc[n], wv, x);
                }
            }
            j += len;
        }
        acc.map(|v| vaddvq_f32(v))
    }
}
