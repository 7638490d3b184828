//! The portable kernels: integer dot products of one weight row with one
//! quantized activation row, in plain Rust. Every CPU runs them; the SIMD
//! kernels must agree with them (the same integer sums, so the results
//! differ only in the order of the f32 additions).

use crate::act::{Q8x32, Q8x256};
use crate::blocks::{
    Format, IQ4_VALUES, IQ4XS_QS, Q2K_D, Q2K_QS, Q2K_SC, Q3K_D, Q3K_HM, Q3K_QS, Q3K_SC, Q4K_QS,
    Q4K_SC, Q5K_QH, Q5K_QS, Q6K_D, Q6K_QH, Q6K_QL, Q6K_SC, bf16_at, f16_at, iq4xs_scale,
    q3k_scales, q4k_scale_min, q5_offsets, q5_quant,
};

/// Value `v`'s 2-bit quant in `Q2_K`'s and `Q3_K`'s 64 quant bytes: value
/// `32j + l` of half `h` is bits `2j, 2j + 1` of byte `32h + l`.
fn q2k_quant(qs: &[u8], v: usize) -> i32 {
    let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
    ((qs[32 * h + l] >> (2 * j)) & 3) as i32
}

/// `Σ IQ4_VALUES[q]·a` over one 16-byte run of `IQ4` nibbles (low nibbles
/// against `a[..16]`, high against `a[16..32]`).
fn iq4_dot(q: &[u8], a: &[i8]) -> i32 {
    let mut i = 0i32;
    for j in 0..16 {
        i += IQ4_VALUES[(q[j] & 0xF) as usize] as i32 * a[j] as i32
            + IQ4_VALUES[(q[j] >> 4) as usize] as i32 * a[j + 16] as i32;
    }
    i
}

pub(crate) fn dot32(format: Format, w: &[u8], a: &[Q8x32]) -> f32 {
    let bytes = format.block_bytes();
    let mut s = 0f32;
    for (b, a) in w.chunks_exact(bytes).zip(a) {
        s += match format {
            Format::Q4_0 => {
                let mut i = 0i32;
                for j in 0..16 {
                    i += (b[2 + j] & 0xF) as i32 * a.qs[j] as i32
                        + (b[2 + j] >> 4) as i32 * a.qs[j + 16] as i32;
                }
                let d = f16_at(b, 0);
                d * a.d * i as f32 - 8.0 * d * a.ds
            }
            Format::Q4_1 => {
                let mut i = 0i32;
                for j in 0..16 {
                    i += (b[4 + j] & 0xF) as i32 * a.qs[j] as i32
                        + (b[4 + j] >> 4) as i32 * a.qs[j + 16] as i32;
                }
                f16_at(b, 0) * a.d * i as f32 + f16_at(b, 2) * a.ds
            }
            Format::Q5_0 | Format::Q5_1 => {
                let at = q5_offsets(format);
                let mut i = 0i32;
                for j in 0..32 {
                    i += q5_quant(b, at, j) as i32 * a.qs[j] as i32;
                }
                let d = f16_at(b, 0);
                let m = match format {
                    Format::Q5_0 => -16.0 * d,
                    _ => f16_at(b, 2),
                };
                d * a.d * i as f32 + m * a.ds
            }
            Format::Q8_0 => {
                let mut i = 0i32;
                for j in 0..32 {
                    i += b[2 + j] as i8 as i32 * a.qs[j] as i32;
                }
                f16_at(b, 0) * a.d * i as f32
            }
            Format::IQ4_NL => f16_at(b, 0) * a.d * iq4_dot(&b[2..18], &a.qs) as f32,
            _ => unreachable!("256-value formats pair with 256-value blocks"),
        };
    }
    s
}

pub(crate) fn dot256(format: Format, w: &[u8], a: &[Q8x256]) -> f32 {
    let bytes = format.block_bytes();
    let mut s = 0f32;
    for (b, a) in w.chunks_exact(bytes).zip(a) {
        s += match format {
            // Q5_K: Q4_K's with a fifth bit per value from its high bits.
            Format::Q4_K | Format::Q5_K => {
                let sc = &b[Q4K_SC..Q4K_SC + 12];
                let (qs, qh) = match format {
                    Format::Q4_K => (Q4K_QS, None),
                    _ => (Q5K_QS, Some(&b[Q5K_QH..Q5K_QH + 32])),
                };
                let (mut dots, mut mins) = (0i32, 0i32);
                for g in 0..4 {
                    let q = &b[qs + 32 * g..qs + 32 * g + 32];
                    let (s1, m1) = q4k_scale_min(2 * g, sc);
                    let (s2, m2) = q4k_scale_min(2 * g + 1, sc);
                    let (mut lo, mut hi) = (0i32, 0i32);
                    let (alo, ahi) = a.qs[64 * g..64 * g + 64].split_at(32);
                    for (l, ((&q, &x), &y)) in q.iter().zip(alo).zip(ahi).enumerate() {
                        let (fifth_lo, fifth_hi) = match qh {
                            Some(h) => ((h[l] >> (2 * g)) & 1, (h[l] >> (2 * g + 1)) & 1),
                            None => (0, 0),
                        };
                        lo += ((q & 0xF) | (fifth_lo << 4)) as i32 * x as i32;
                        hi += ((q >> 4) | (fifth_hi << 4)) as i32 * y as i32;
                    }
                    dots += s1 as i32 * lo + s2 as i32 * hi;
                    let bs = |j: usize| a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32;
                    mins += m1 as i32 * bs(2 * g) + m2 as i32 * bs(2 * g + 1);
                }
                f16_at(b, 0) * a.d * dots as f32 - f16_at(b, 2) * a.d * mins as f32
            }
            Format::Q6_K => {
                let mut dots = 0i32;
                for h in 0..2 {
                    let ql = &b[Q6K_QL + 64 * h..];
                    let qh = &b[Q6K_QH + 32 * h..];
                    let sc = &b[Q6K_SC + 8 * h..];
                    let qa = &a.qs[128 * h..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q = [
                            (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                            (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                            (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                        ];
                        for (g, q) in q.into_iter().enumerate() {
                            let s = sc[is + 2 * g] as i8 as i32;
                            dots += s * (q as i32 - 32) * qa[32 * g + l] as i32;
                        }
                    }
                }
                f16_at(b, Q6K_D) * a.d * dots as f32
            }
            Format::Q2_K => {
                let (mut dots, mut mins) = (0i32, 0i32);
                for (v, &x) in a.qs.iter().enumerate() {
                    let sm = b[Q2K_SC + v / 16];
                    dots += (sm & 0xF) as i32 * q2k_quant(&b[Q2K_QS..], v) * x as i32;
                }
                for (s, &sum) in a.bsums.iter().enumerate() {
                    mins += (b[Q2K_SC + s] >> 4) as i32 * sum as i32;
                }
                let (d, dmin) = (f16_at(b, Q2K_D), f16_at(b, Q2K_D + 2));
                d * a.d * dots as f32 - dmin * a.d * mins as f32
            }
            Format::Q3_K => {
                let sc = q3k_scales(&b[Q3K_SC..Q3K_SC + 12]);
                let mut dots = 0i32;
                for (v, &x) in a.qs.iter().enumerate() {
                    let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
                    let high = (b[Q3K_HM + l] >> (4 * h + j)) & 1;
                    let q = q2k_quant(&b[Q3K_QS..], v) - if high == 1 { 0 } else { 4 };
                    dots += sc[v / 16] * q * x as i32;
                }
                f16_at(b, Q3K_D) * a.d * dots as f32
            }
            Format::IQ4_XS => {
                let mut dots = 0i32;
                for j in 0..8 {
                    let q = &b[IQ4XS_QS + 16 * j..];
                    dots += iq4xs_scale(b, j) * iq4_dot(q, &a.qs[32 * j..]);
                }
                f16_at(b, 0) * a.d * dots as f32
            }
            _ => unreachable!("32-value formats pair with 32-value blocks"),
        };
    }
    s
}

/// A float format's row against f32 activations, in eight running sums
/// (the SIMD kernels' order, near enough, and a loop the compiler can
/// vectorise).
pub(crate) fn dot_float(format: Format, w: &[u8], a: &[f32]) -> f32 {
    let at = match format {
        Format::F16 => f16_at,
        Format::BF16 => bf16_at,
        _ => unreachable!("block formats take quantized activations"),
    };
    let mut s = [0f32; 8];
    let (wc, ac) = (w.chunks_exact(16), a.chunks_exact(8));
    let (wt, at_) = (wc.remainder(), ac.remainder());
    for (w, x) in wc.zip(ac) {
        for i in 0..8 {
            s[i] += at(w, 2 * i) * x[i];
        }
    }
    let tail: f32 = (0..at_.len()).map(|i| at(wt, 2 * i) * at_[i]).sum();
    s.iter().sum::<f32>() + tail
}
