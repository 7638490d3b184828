//! Matrices repacked at load for the 512-bit kernels: rows interleaved 16
//! at a time, so one `vpdpbusd` on a 512-bit register advances the dot
//! products of 16 weight rows at once, each in its own 32-bit lane, and the
//! 16 outputs of a group land in one vector: no horizontal sums, and one
//! vector of 16 block scales multiplies them (where the row kernels reduce
//! every dot product to a scalar and scale it alone). llama.cpp's AVX-512
//! kernels gain their prompt speed on Q4_0, IQ4_NL and Q4_K the same way
//! (`ggml/src/ggml-cpu/repack.cpp`, 8 rows); this layout is vauban's own.
//!
//! The layout of a 32-value format, per group of 16 rows (the last one
//! padded with zero rows) and per block index `i`, in that order: the 16
//! rows' f16 scales `d` (32 bytes), then their quants 4 bytes at a time:
//! unit `u` holds bytes `4u..4u + 4` of each of the 16 rows' quants, row
//! after row (64 bytes: one 512-bit load). A group's block takes 16 times
//! the row layout's bytes, so the packed matrix is no larger than the
//! file's, padding aside. The K-quants' layout is below ([`K_D`] and the
//! offsets after it).
//!
//! On which CPUs matrices are packed: [`packs`]. Every format is, the
//! floats as "blocks" of one value (16 rows' value `j`, then `j + 1`).

use crate::Isa;
use crate::blocks::{
    Format, IQ4XS_QS, IQ4XS_SH, IQ4XS_SL, Q2K_D, Q2K_QS, Q2K_SC, Q3K_D, Q3K_HM, Q3K_QS, Q3K_SC,
    Q4K_QS, Q4K_SC, Q5K_QH, Q5K_QS, Q6K_D, Q6K_QH, Q6K_QL, Q6K_SC, iq4xs_scale, q3k_scales,
    q4k_scale_min,
};

/// Rows per group: one 32-bit lane each of a 512-bit register.
pub(crate) const LANES: usize = 16;

/// Whether matrices are packed for `isa`'s kernels (every format is, for
/// the 512-bit ones).
pub(crate) fn packs(isa: Isa) -> bool {
    isa == Isa::Avx512Vnni
}

/// Bytes of a 32-value block's f16 factors: `d`, and `m` for `Q4_1` and
/// `Q5_1`. Packed, each factor's 16 rows are one run of 32 bytes.
fn factor_bytes(format: Format) -> usize {
    match format {
        Format::Q4_1 | Format::Q5_1 => 4,
        _ => 2,
    }
}

/// Whether a 32-value format has a fifth bit per value (`Q5_0`, `Q5_1`).
/// Packed, its 16 rows' 32-bit masks become eight 64-bit masks after the
/// factors, mask `c` holding bits `4c..4c + 4` of row `r`'s mask at bits
/// `4r..4r + 4`: byte `4r + j` of the quants' unit `c` takes bit `4r + j`,
/// so one `vpmovm2b` spreads a unit's fifth bits (the same 64 bytes as the
/// rows' masks, their bits rearranged).
fn fifth_bits(format: Format) -> bool {
    matches!(format, Format::Q5_0 | Format::Q5_1)
}

/// Offsets inside a packed `Q4_K` or `Q5_K` block of 16 rows: the rows'
/// `d`, `dmin` (f16), their 6-bit scales and mins decoded to a byte each
/// (sub-block `s`'s 16 rows at `16·s`: one 128-bit load widens to a
/// vector), the nibbles (pair of sub-blocks `g`, unit `u` at `512·g +
/// 64·u`), and `Q5_K`'s high bits (unit `u` at `64·u`).
pub(crate) const K_D: usize = 0;
pub(crate) const K_DMIN: usize = 32;
pub(crate) const K_SC: usize = 64;
pub(crate) const K_MIN: usize = 192;
pub(crate) const K_QS: usize = 320;
pub(crate) const K_QH: usize = K_QS + 2048;

/// Offsets inside a packed `Q6_K` block of 16 rows: the rows' `d`, their
/// 16 signed scales (sub-block `s`'s 16 rows at `16·s`), the low 4 bits
/// (half `h`, run `j` of 32 bytes, unit `u` at `1024·h + 512·j + 64·u`) and
/// the high 2 bits (half `h`, unit `u` at `512·h + 64·u`). Exactly the row
/// layout's bytes, rearranged.
pub(crate) const Q6_D: usize = 0;
pub(crate) const Q6_SC: usize = 32;
pub(crate) const Q6_QL: usize = 288;
pub(crate) const Q6_QH: usize = Q6_QL + 2048;

/// Offsets inside a packed `Q2_K` block of 16 rows: `d`, `dmin`, the
/// rows' scale-and-min bytes as stored (sub-block `s` at `16·s`), the
/// 2-bit quants (half `h`, unit `u` at `512·h + 64·u`). The row layout's
/// bytes, rearranged.
pub(crate) const Q2_D: usize = 0;
pub(crate) const Q2_DMIN: usize = 32;
pub(crate) const Q2_SC: usize = 64;
pub(crate) const Q2_QS: usize = 320;

/// Offsets inside a packed `Q3_K` block of 16 rows: `d`, the 16 scales
/// decoded less their 32 (signed bytes, sub-block `s` at `16·s`), the high
/// bits (unit `u` at `64·u`), the 2-bit quants as `Q2_K`'s.
pub(crate) const Q3_D: usize = 0;
pub(crate) const Q3_SC: usize = 32;
pub(crate) const Q3_HM: usize = 288;
pub(crate) const Q3_QS: usize = 800;

/// Offsets inside a packed `IQ4_XS` block of 16 rows: `d`, the 8 scales
/// decoded less their 32 (signed bytes, sub-block `s` at `16·s`), the
/// nibbles (sub-block `s`, unit `u` at `256·s + 64·u`).
pub(crate) const XS_D: usize = 0;
pub(crate) const XS_SC: usize = 32;
pub(crate) const XS_QS: usize = 160;

/// Bytes of one packed block of 16 rows: 16 row blocks, and more where the
/// scales are decoded to a byte each (re-encoded exactly for a row).
pub(crate) fn block_bytes(format: Format) -> usize {
    LANES * format.block_bytes()
        + match format {
            Format::Q4_K | Format::Q5_K | Format::Q3_K => 64,
            Format::IQ4_XS => 32,
            _ => 0,
        }
}

/// Copies one row's block `src` into lane `lane` of a packed block.
fn scatter(format: Format, src: &[u8], dst: &mut [u8], lane: usize) {
    let unit = |u: usize| 64 * u + 4 * lane;
    let mut copy = |to: usize, from: usize, n: usize| {
        dst[to..to + n].copy_from_slice(&src[from..from + n]);
    };
    match format {
        Format::Q2_K => {
            copy(Q2_D + 2 * lane, Q2K_D, 2);
            copy(Q2_DMIN + 2 * lane, Q2K_D + 2, 2);
            for sb in 0..16 {
                copy(Q2_SC + 16 * sb + lane, Q2K_SC + sb, 1);
            }
            for h in 0..2 {
                for u in 0..8 {
                    copy(Q2_QS + 512 * h + unit(u), Q2K_QS + 32 * h + 4 * u, 4);
                }
            }
        }
        Format::Q3_K => {
            copy(Q3_D + 2 * lane, Q3K_D, 2);
            for (sb, sc) in q3k_scales(&src[Q3K_SC..Q3K_SC + 12])
                .into_iter()
                .enumerate()
            {
                dst[Q3_SC + 16 * sb + lane] = sc as i8 as u8;
            }
            let mut copy = |to: usize, from: usize| {
                dst[to..to + 4].copy_from_slice(&src[from..from + 4]);
            };
            for u in 0..8 {
                copy(Q3_HM + unit(u), Q3K_HM + 4 * u);
                for h in 0..2 {
                    copy(Q3_QS + 512 * h + unit(u), Q3K_QS + 32 * h + 4 * u);
                }
            }
        }
        Format::IQ4_XS => {
            copy(XS_D + 2 * lane, 0, 2);
            for sb in 0..8 {
                dst[XS_SC + 16 * sb + lane] = iq4xs_scale(src, sb) as i8 as u8;
            }
            for sb in 0..8 {
                for u in 0..4 {
                    let at = XS_QS + 256 * sb + unit(u);
                    dst[at..at + 4].copy_from_slice(&src[IQ4XS_QS + 16 * sb + 4 * u..][..4]);
                }
            }
        }
        Format::Q6_K => {
            dst[Q6_D + 2 * lane..][..2].copy_from_slice(&src[Q6K_D..Q6K_D + 2]);
            for sb in 0..16 {
                dst[Q6_SC + 16 * sb + lane] = src[Q6K_SC + sb];
            }
            for h in 0..2 {
                for u in 0..8 {
                    for j in 0..2 {
                        let at = Q6_QL + 1024 * h + 512 * j + unit(u);
                        let from = Q6K_QL + 64 * h + 32 * j + 4 * u;
                        dst[at..at + 4].copy_from_slice(&src[from..from + 4]);
                    }
                    let at = Q6_QH + 512 * h + unit(u);
                    let from = Q6K_QH + 32 * h + 4 * u;
                    dst[at..at + 4].copy_from_slice(&src[from..from + 4]);
                }
            }
        }
        Format::Q4_K | Format::Q5_K => {
            dst[K_D + 2 * lane..][..2].copy_from_slice(&src[..2]);
            dst[K_DMIN + 2 * lane..][..2].copy_from_slice(&src[2..4]);
            for sb in 0..8 {
                let (sc, m) = q4k_scale_min(sb, &src[Q4K_SC..Q4K_SC + 12]);
                dst[K_SC + 16 * sb + lane] = sc;
                dst[K_MIN + 16 * sb + lane] = m;
            }
            let qs = if format == Format::Q5_K {
                Q5K_QS
            } else {
                Q4K_QS
            };
            for g in 0..4 {
                for u in 0..8 {
                    let at = K_QS + 512 * g + unit(u);
                    dst[at..at + 4].copy_from_slice(&src[qs + 32 * g + 4 * u..][..4]);
                }
            }
            if format == Format::Q5_K {
                for u in 0..8 {
                    let at = K_QH + unit(u);
                    dst[at..at + 4].copy_from_slice(&src[Q5K_QH + 4 * u..][..4]);
                }
            }
        }
        _ => {
            let f = factor_bytes(format);
            for k in 0..f / 2 {
                dst[32 * k + 2 * lane..][..2].copy_from_slice(&src[2 * k..2 * k + 2]);
            }
            let (mut from, mut to) = (f, LANES * f);
            if fifth_bits(format) {
                let high = u32::from_le_bytes(src[f..f + 4].try_into().unwrap());
                for c in 0..8 {
                    let bits = ((high >> (4 * c)) & 0xF) as u8;
                    dst[to + 8 * c + lane / 2] |= bits << (4 * (lane % 2));
                }
                (from, to) = (from + 4, to + 64);
            }
            for u in 0..(format.block_bytes() - from) / 4 {
                let at = to + unit(u);
                dst[at..at + 4].copy_from_slice(&src[from + 4 * u..][..4]);
            }
        }
    }
}

/// [`scatter`]'s inverse: lane `lane` of a packed block as the row's block.
fn gather(format: Format, src: &[u8], lane: usize, dst: &mut [u8]) {
    let unit = |u: usize| 64 * u + 4 * lane;
    let mut copy = |to: usize, from: usize, n: usize| {
        dst[to..to + n].copy_from_slice(&src[from..from + n]);
    };
    match format {
        Format::Q2_K => {
            copy(Q2K_D, Q2_D + 2 * lane, 2);
            copy(Q2K_D + 2, Q2_DMIN + 2 * lane, 2);
            for sb in 0..16 {
                copy(Q2K_SC + sb, Q2_SC + 16 * sb + lane, 1);
            }
            for h in 0..2 {
                for u in 0..8 {
                    copy(Q2K_QS + 32 * h + 4 * u, Q2_QS + 512 * h + unit(u), 4);
                }
            }
        }
        Format::Q3_K => {
            copy(Q3K_D, Q3_D + 2 * lane, 2);
            for u in 0..8 {
                copy(Q3K_HM + 4 * u, Q3_HM + unit(u), 4);
                for h in 0..2 {
                    copy(Q3K_QS + 32 * h + 4 * u, Q3_QS + 512 * h + unit(u), 4);
                }
            }
            // The 16 6-bit scales back in their 12 bytes (`q3k_scales`'s
            // inverse: every bit is a scale's).
            let mut s = [0u8; 12];
            for i in 0..16 {
                let v = (src[Q3_SC + 16 * i + lane] as i8 as i32 + 32) as u8;
                s[i % 8] |= (v & 0xF) << (4 * (i / 8));
                s[8 + i % 4] |= (v >> 4) << (2 * (i / 4));
            }
            dst[Q3K_SC..Q3K_SC + 12].copy_from_slice(&s);
        }
        Format::IQ4_XS => {
            copy(0, XS_D + 2 * lane, 2);
            // The 8 6-bit scales back as 2 bytes of high bits and 4 of low
            // nibbles (every bit is a scale's).
            let (mut high, mut low) = (0u16, [0u8; 4]);
            for sb in 0..8 {
                let v = (src[XS_SC + 16 * sb + lane] as i8 as i32 + 32) as u8;
                low[sb / 2] |= (v & 0xF) << (4 * (sb % 2));
                high |= ((v >> 4) as u16) << (2 * sb);
            }
            for sb in 0..8 {
                for u in 0..4 {
                    copy(IQ4XS_QS + 16 * sb + 4 * u, XS_QS + 256 * sb + unit(u), 4);
                }
            }
            dst[IQ4XS_SH..IQ4XS_SH + 2].copy_from_slice(&high.to_le_bytes());
            dst[IQ4XS_SL..IQ4XS_SL + 4].copy_from_slice(&low);
        }
        Format::Q6_K => {
            dst[Q6K_D..Q6K_D + 2].copy_from_slice(&src[Q6_D + 2 * lane..][..2]);
            for sb in 0..16 {
                dst[Q6K_SC + sb] = src[Q6_SC + 16 * sb + lane];
            }
            for h in 0..2 {
                for u in 0..8 {
                    for j in 0..2 {
                        let at = Q6_QL + 1024 * h + 512 * j + unit(u);
                        let to = Q6K_QL + 64 * h + 32 * j + 4 * u;
                        dst[to..to + 4].copy_from_slice(&src[at..at + 4]);
                    }
                    let at = Q6_QH + 512 * h + unit(u);
                    let to = Q6K_QH + 32 * h + 4 * u;
                    dst[to..to + 4].copy_from_slice(&src[at..at + 4]);
                }
            }
        }
        Format::Q4_K | Format::Q5_K => {
            dst[..2].copy_from_slice(&src[K_D + 2 * lane..][..2]);
            dst[2..4].copy_from_slice(&src[K_DMIN + 2 * lane..][..2]);
            let sc: [u8; 8] = std::array::from_fn(|sb| src[K_SC + 16 * sb + lane]);
            let m: [u8; 8] = std::array::from_fn(|sb| src[K_MIN + 16 * sb + lane]);
            dst[Q4K_SC..Q4K_SC + 12].copy_from_slice(&q4k_encode_scales(sc, m));
            let qs = if format == Format::Q5_K {
                Q5K_QS
            } else {
                Q4K_QS
            };
            for g in 0..4 {
                for u in 0..8 {
                    let at = K_QS + 512 * g + unit(u);
                    dst[qs + 32 * g + 4 * u..][..4].copy_from_slice(&src[at..at + 4]);
                }
            }
            if format == Format::Q5_K {
                for u in 0..8 {
                    let at = K_QH + unit(u);
                    dst[Q5K_QH + 4 * u..][..4].copy_from_slice(&src[at..at + 4]);
                }
            }
        }
        _ => {
            let f = factor_bytes(format);
            for k in 0..f / 2 {
                dst[2 * k..2 * k + 2].copy_from_slice(&src[32 * k + 2 * lane..][..2]);
            }
            let (mut to, mut from) = (f, LANES * f);
            if fifth_bits(format) {
                let mut high = 0u32;
                for c in 0..8 {
                    let bits = (src[from + 8 * c + lane / 2] >> (4 * (lane % 2))) & 0xF;
                    high |= (bits as u32) << (4 * c);
                }
                dst[to..to + 4].copy_from_slice(&high.to_le_bytes());
                (to, from) = (to + 4, from + 64);
            }
            for u in 0..(format.block_bytes() - to) / 4 {
                let at = from + unit(u);
                dst[to + 4 * u..][..4].copy_from_slice(&src[at..at + 4]);
            }
        }
    }
}

/// Eight 6-bit scales and mins in `Q4_K`'s 12 bytes: [`q4k_scale_min`]'s
/// inverse (every one of the 96 bits is a scale's or a min's, so the bytes
/// come back exactly).
fn q4k_encode_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    s
}

/// `rows × cols` of `format` in the row layout, repacked.
pub(crate) fn pack(format: Format, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let (bytes, blocks) = (format.block_bytes(), cols / format.block_len());
    let packed = block_bytes(format);
    let mut out = vec![0u8; rows.div_ceil(LANES) * blocks * packed];
    for r in 0..rows {
        let (g, lane) = (r / LANES, r % LANES);
        for i in 0..blocks {
            let src = &data[(r * blocks + i) * bytes..][..bytes];
            scatter(
                format,
                src,
                &mut out[(g * blocks + i) * packed..][..packed],
                lane,
            );
        }
    }
    out
}

/// Row `r` of a packed matrix in the row layout: what [`pack`] took.
pub(crate) fn unpack_row(format: Format, cols: usize, data: &[u8], r: usize) -> Vec<u8> {
    let (bytes, blocks) = (format.block_bytes(), cols / format.block_len());
    let packed = block_bytes(format);
    let (g, lane) = (r / LANES, r % LANES);
    let mut out = vec![0u8; blocks * bytes];
    for i in 0..blocks {
        let src = &data[(g * blocks + i) * packed..][..packed];
        gather(format, src, lane, &mut out[i * bytes..][..bytes]);
    }
    out
}

/// Bytes of one group's rows (all blocks) in the packed layout.
#[cfg(target_arch = "x86_64")]
pub(crate) fn group_bytes(format: Format, cols: usize) -> usize {
    cols / format.block_len() * block_bytes(format)
}

#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::{product_group, product_group_float, product_group_k};

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{
        K_D, K_DMIN, K_MIN, K_QH, K_QS, K_SC, LANES, Q2_D, Q2_DMIN, Q2_QS, Q2_SC, Q3_D, Q3_HM,
        Q3_QS, Q3_SC, Q6_D, Q6_QH, Q6_QL, Q6_SC, XS_D, XS_QS, XS_SC, factor_bytes, fifth_bits,
    };
    use crate::PREFETCH_AHEAD;
    use crate::act::{Q8x32, Q8x256};
    use crate::blocks::{Format, IQ4_VALUES};

    /// Asks for the `bytes` bytes [`PREFETCH_AHEAD`] past `from`, one
    /// request a cache line. A prefetch never faults, so past the end of
    /// the matrix it is only wasted.
    #[inline(always)]
    fn prefetch(from: *const u8, bytes: usize) {
        let ahead = from.wrapping_add(PREFETCH_AHEAD);
        let mut off = 0;
        while off < bytes {
            // SAFETY: SSE is x86-64's baseline, and a prefetch reads nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off).cast()) };
            off += 64;
        }
    }

    /// Each activation row's 16 outputs to `out[n]`, the group's first
    /// `valid` rows only (the last group of a matrix may be short).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `out[n]` has `valid` floats to write.
    #[inline(always)]
    unsafe fn store<const N: usize>(out: [*mut f32; N], valid: usize, acc: [__m512; N]) {
        let mask: __mmask16 = if valid >= LANES {
            !0
        } else {
            (1u16 << valid) - 1
        };
        for n in 0..N {
            unsafe { _mm512_mask_storeu_ps(out[n], mask, acc[n]) };
        }
    }

    /// One group's 16 rows against `N` activation rows: `out[n]` receives
    /// the 16 outputs of activation row `n` (the first `valid` of them).
    ///
    /// The quants go in unsigned: Q4_0's nibbles as they are (its −8 comes
    /// back through the activations' block sums, as in the row kernels),
    /// IQ4_NL's looked up in [`IQ4_VALUES`] + 128 and Q8_0's with their
    /// sign bit flipped (+128), the 128 coming back the same way.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI; `group` is one group of a
    /// [`super::pack`]ed matrix of `format`, whose rows `a`'s blocks match.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    pub(crate) unsafe fn product_group<const N: usize>(
        format: Format,
        group: &[u8],
        a: [&[Q8x32]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        unsafe {
            let stride = super::block_bytes(format);
            let blocks = group.len() / stride;
            // The quants' offset (through the activations' block sums), or
            // for Q4_1 and Q5_1 their `m` (a vector of 16).
            let offset = match format {
                Format::Q4_0 => -8.0,
                Format::Q5_0 => -16.0,
                _ => -128.0,
            };
            let with_m = factor_bytes(format) == 4;
            let five = fifth_bits(format);
            let sixteen = _mm512_set1_epi8(16);
            let m4 = _mm512_set1_epi8(0x0F);
            let mut table = [0u8; 16];
            for (t, v) in table.iter_mut().zip(IQ4_VALUES) {
                *t = (v as i16 + 128) as u8;
            }
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(table.as_ptr().cast()));
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                if N == 1 {
                    prefetch(b, stride);
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(b.cast()));
                let high = b.add(LANES * factor_bytes(format));
                let q = if five { high.add(64) } else { high };
                // w[c]: values 4c..4c + 4 of each row, one row a lane.
                let mut w = [_mm512_setzero_si512(); 8];
                match format {
                    Format::Q8_0 => {
                        for (c, w) in w.iter_mut().enumerate() {
                            let v = _mm512_loadu_si512(q.add(64 * c).cast());
                            *w = _mm512_xor_si512(v, _mm512_set1_epi8(0x80u8 as i8));
                        }
                    }
                    _ => {
                        for p in 0..4 {
                            let v = _mm512_loadu_si512(q.add(64 * p).cast());
                            w[p] = _mm512_and_si512(v, m4);
                            w[4 + p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                        }
                        if format == Format::IQ4_NL {
                            for w in &mut w {
                                *w = _mm512_shuffle_epi8(table, *w);
                            }
                        }
                        if five {
                            for (c, w) in w.iter_mut().enumerate() {
                                let bits = high.add(8 * c).cast::<u64>().read_unaligned();
                                *w = _mm512_or_si512(*w, _mm512_maskz_mov_epi8(bits, sixteen));
                            }
                        }
                    }
                }
                let mut isum = [_mm512_setzero_si512(); N];
                for (c, &w) in w.iter().enumerate() {
                    for n in 0..N {
                        let qa = a[n].get_unchecked(i).qs.as_ptr().add(4 * c);
                        let x = _mm512_set1_epi32(qa.cast::<i32>().read_unaligned());
                        isum[n] = _mm512_dpbusd_epi32(isum[n], w, x);
                    }
                }
                if with_m {
                    let m = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(32).cast()));
                    for n in 0..N {
                        let a = a[n].get_unchecked(i);
                        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[n]), _mm512_set1_ps(a.d));
                        acc[n] = _mm512_fmadd_ps(d, v, acc[n]);
                        acc[n] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.ds), acc[n]);
                    }
                } else {
                    for n in 0..N {
                        let a = a[n].get_unchecked(i);
                        let v = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(isum[n]),
                            _mm512_set1_ps(a.d),
                            _mm512_set1_ps(offset * a.ds),
                        );
                        acc[n] = _mm512_fmadd_ps(d, v, acc[n]);
                    }
                }
            }
            store(out, valid, acc);
        }
    }

    /// [`product_group`] for `Q4_K` and `Q5_K` (256-value blocks, 8
    /// sub-blocks of 32 with their own scales and mins): per sub-block, the
    /// 16 rows' integer dot products times the rows' scales (a vector of
    /// 16, widened from bytes), summed over the block; the mins' part from
    /// the activations' sums per 16. `Q5_K`'s fifth bits (bit `s` of a
    /// high-bit byte for sub-block `s`) are shifted onto the nibbles.
    ///
    /// # Safety
    /// As [`product_group`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    pub(crate) unsafe fn product_group_k<const N: usize>(
        format: Format,
        group: &[u8],
        a: [&[Q8x256]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        match format {
            Format::Q6_K => return unsafe { product_group_q6k(group, a, out, valid) },
            Format::Q2_K | Format::Q3_K => {
                return unsafe { product_group_q2k(format, group, a, out, valid) };
            }
            Format::IQ4_XS => return unsafe { product_group_iq4xs(group, a, out, valid) },
            _ => {}
        }
        unsafe {
            let stride = super::block_bytes(format);
            let blocks = group.len() / stride;
            let five = format == Format::Q5_K;
            let m4 = _mm512_set1_epi8(0x0F);
            let one = _mm512_set1_epi8(1);
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                if N == 1 {
                    prefetch(b, stride);
                }
                // A macro, not a closure: a closure does not take the
                // function's target features, and its intrinsics become calls.
                macro_rules! widen {
                    ($at:expr) => {
                        _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add($at).cast()))
                    };
                }
                let mut itot = [_mm512_setzero_si512(); N];
                for sb in 0..8 {
                    let (g, high) = (sb / 2, sb % 2 == 1);
                    let mut w = [_mm512_setzero_si512(); 8];
                    for (c, w) in w.iter_mut().enumerate() {
                        let v = _mm512_loadu_si512(b.add(K_QS + 512 * g + 64 * c).cast());
                        let v = if high { _mm512_srli_epi16(v, 4) } else { v };
                        *w = _mm512_and_si512(v, m4);
                        if five {
                            // Bit sb of each high-bit byte, to bit 4 (the
                            // 16-bit shift's spill from the next byte is
                            // masked off).
                            let h = _mm512_loadu_si512(b.add(K_QH + 64 * c).cast());
                            let shift = _mm_cvtsi32_si128(sb as i32);
                            let bit = _mm512_and_si512(_mm512_srl_epi16(h, shift), one);
                            *w = _mm512_or_si512(*w, _mm512_slli_epi16(bit, 4));
                        }
                    }
                    let sc = widen!(K_SC + 16 * sb);
                    for n in 0..N {
                        let qa = a[n].get_unchecked(i).qs.as_ptr().add(32 * sb);
                        let mut isum = _mm512_setzero_si512();
                        for (c, &w) in w.iter().enumerate() {
                            let x = _mm512_set1_epi32(qa.add(4 * c).cast::<i32>().read_unaligned());
                            isum = _mm512_dpbusd_epi32(isum, w, x);
                        }
                        itot[n] = _mm512_add_epi32(itot[n], _mm512_mullo_epi32(isum, sc));
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(K_D).cast()));
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(K_DMIN).cast()));
                for n in 0..N {
                    let a = a[n].get_unchecked(i);
                    let mut msum = _mm512_setzero_si512();
                    for sb in 0..8 {
                        let bs = a.bsums[2 * sb] as i32 + a.bsums[2 * sb + 1] as i32;
                        let p = _mm512_mullo_epi32(widen!(K_MIN + 16 * sb), _mm512_set1_epi32(bs));
                        msum = _mm512_add_epi32(msum, p);
                    }
                    let ad = _mm512_set1_ps(a.d);
                    acc[n] =
                        _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(itot[n]), acc[n]);
                    acc[n] =
                        _mm512_fnmadd_ps(_mm512_mul_ps(dmin, ad), _mm512_cvtepi32_ps(msum), acc[n]);
                }
            }
            store(out, valid, acc);
        }
    }

    /// [`product_group_k`] for `Q6_K`: 16 sub-blocks of 16 with signed
    /// scales, 6-bit quants stored +32 (taken back out per sub-block
    /// through the activations' sums per 16).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    unsafe fn product_group_q6k<const N: usize>(
        group: &[u8],
        a: [&[Q8x256]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        unsafe {
            let stride = super::block_bytes(Format::Q6_K);
            let blocks = group.len() / stride;
            let m4 = _mm512_set1_epi8(0x0F);
            let m30 = _mm512_set1_epi8(0x30);
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                if N == 1 {
                    prefetch(b, stride);
                }
                let mut itot = [_mm512_setzero_si512(); N];
                // Values 128h + 32k + l: the low bits from run k % 2 of
                // half h (its high nibbles for k ≥ 2), the high bits 2k of
                // half h's high-bit bytes; sub-blocks 8h + 2k (l < 16) and
                // one more.
                for h in 0..2 {
                    for k in 0..4 {
                        let mut w = [_mm512_setzero_si512(); 8];
                        for (c, w) in w.iter_mut().enumerate() {
                            let lo = _mm512_loadu_si512(
                                b.add(Q6_QL + 1024 * h + 512 * (k % 2) + 64 * c).cast(),
                            );
                            let lo = if k >= 2 { _mm512_srli_epi16(lo, 4) } else { lo };
                            // Bits 2k, 2k + 1 of the high-bit byte moved
                            // straight to bits 4, 5 (one shift, one mask:
                            // what a 16-bit shift brings in from the next
                            // byte lands outside them).
                            let hi = _mm512_loadu_si512(b.add(Q6_QH + 512 * h + 64 * c).cast());
                            let hi = match k {
                                0 => _mm512_slli_epi16(hi, 4),
                                1 => _mm512_slli_epi16(hi, 2),
                                2 => hi,
                                _ => _mm512_srli_epi16(hi, 2),
                            };
                            *w = _mm512_or_si512(
                                _mm512_and_si512(lo, m4),
                                _mm512_and_si512(hi, m30),
                            );
                        }
                        let sb = 8 * h + 2 * k;
                        // (Not a closure: one does not take the function's
                        // target features.)
                        let mut sc = [_mm512_setzero_si512(); 2];
                        for (s, sc) in sc.iter_mut().enumerate() {
                            let at = b.add(Q6_SC + 16 * (sb + s));
                            *sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(at.cast()));
                        }
                        for n in 0..N {
                            let a = a[n].get_unchecked(i);
                            let qa = a.qs.as_ptr().add(128 * h + 32 * k);
                            for (s, &sc) in sc.iter().enumerate() {
                                // (Σ q·a) − 32·(Σ a) over the sub-block: Σ (q − 32)·a.
                                let bs = 32 * a.bsums[sb + s] as i32;
                                let mut isum = _mm512_set1_epi32(-bs);
                                for (c, &w) in w.iter().enumerate().skip(4 * s).take(4) {
                                    let x = _mm512_set1_epi32(
                                        qa.add(4 * c).cast::<i32>().read_unaligned(),
                                    );
                                    isum = _mm512_dpbusd_epi32(isum, w, x);
                                }
                                itot[n] = _mm512_add_epi32(itot[n], _mm512_mullo_epi32(isum, sc));
                            }
                        }
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(Q6_D).cast()));
                for n in 0..N {
                    let ad = _mm512_set1_ps(a[n].get_unchecked(i).d);
                    acc[n] =
                        _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(itot[n]), acc[n]);
                }
            }
            store(out, valid, acc);
        }
    }

    /// One group of 16 rows of `F16` or `BF16` (packed as value `j` of
    /// each of the 16 rows, then value `j + 1`: a float is a "block" of
    /// one) against `N` rows of f32 activations: each 16 weights widened
    /// once (`vcvtph2ps`, or a 16-bit shift for BF16) and multiplied into
    /// every row's sums with activation `j` broadcast. Even and odd `j` go
    /// into two sets of sums, for every `N` alike (a decode step's one row
    /// would otherwise wait on each multiply-add; the same order for every
    /// `N` keeps an output independent of the rows beside it, bit for bit).
    ///
    /// # Safety
    /// As [`product_group`]; `a`'s rows hold the matrix's `cols` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    pub(crate) unsafe fn product_group_float<const N: usize>(
        format: Format,
        group: &[u8],
        a: [&[f32]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        unsafe {
            let cols = group.len() / (2 * LANES);
            let bf16 = format == Format::BF16;
            let g = group.as_ptr();
            macro_rules! widen {
                ($j:expr) => {{
                    let h = _mm256_loadu_si256(g.add(2 * LANES * $j).cast());
                    if bf16 {
                        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                    } else {
                        _mm512_cvtph_ps(h)
                    }
                }};
            }
            let mut acc = [[_mm512_setzero_ps(); N]; 2];
            let mut j = 0;
            while j + 2 <= cols {
                if N == 1 {
                    // Two columns of 16 rows: one cache line.
                    prefetch(g.add(2 * LANES * j), 64);
                }
                let (w0, w1) = (widen!(j), widen!(j + 1));
                for n in 0..N {
                    let x = a[n].as_ptr().add(j);
                    acc[0][n] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*x), acc[0][n]);
                    acc[1][n] = _mm512_fmadd_ps(w1, _mm512_set1_ps(*x.add(1)), acc[1][n]);
                }
                j += 2;
            }
            if j < cols {
                let w0 = widen!(j);
                for n in 0..N {
                    acc[0][n] = _mm512_fmadd_ps(w0, _mm512_set1_ps(a[n][j]), acc[0][n]);
                }
            }
            let mut sum = acc[0];
            for (s, &odd) in sum.iter_mut().zip(&acc[1]) {
                *s = _mm512_add_ps(*s, odd);
            }
            store(out, valid, sum);
        }
    }

    /// [`product_group_k`] for `Q2_K` (`x = d·sc·q − dmin·m`, 2-bit quants)
    /// and `Q3_K` (`x = d·sc·(q − 4)` with the high bit adding the 4 back:
    /// its quant plus 4 goes in unsigned, the 4 comes back out through the
    /// activations' sums per 16).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    unsafe fn product_group_q2k<const N: usize>(
        format: Format,
        group: &[u8],
        a: [&[Q8x256]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        unsafe {
            let q3 = format == Format::Q3_K;
            let stride = super::block_bytes(format);
            let blocks = group.len() / stride;
            let (m2, one, m4) = (
                _mm512_set1_epi8(3),
                _mm512_set1_epi8(1),
                _mm512_set1_epi32(0xF),
            );
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                if N == 1 {
                    prefetch(b, stride);
                }
                macro_rules! bytes {
                    ($at:expr) => {
                        _mm_loadu_si128(b.add($at).cast())
                    };
                }
                let mut itot = [_mm512_setzero_si512(); N];
                for h in 0..2 {
                    for j in 0..4 {
                        let qs = if q3 { Q3_QS } else { Q2_QS };
                        let mut w = [_mm512_setzero_si512(); 8];
                        for (c, w) in w.iter_mut().enumerate() {
                            let q = _mm512_loadu_si512(b.add(qs + 512 * h + 64 * c).cast());
                            let shift = _mm_cvtsi32_si128(2 * j as i32);
                            *w = _mm512_and_si512(_mm512_srl_epi16(q, shift), m2);
                            if q3 {
                                let hm = _mm512_loadu_si512(b.add(Q3_HM + 64 * c).cast());
                                let shift = _mm_cvtsi32_si128((4 * h + j) as i32);
                                let bit = _mm512_and_si512(_mm512_srl_epi16(hm, shift), one);
                                *w = _mm512_or_si512(*w, _mm512_slli_epi16(bit, 2));
                            }
                        }
                        let sb = 8 * h + 2 * j;
                        let mut sc = [_mm512_setzero_si512(); 2];
                        for (s, sc) in sc.iter_mut().enumerate() {
                            *sc = match q3 {
                                true => _mm512_cvtepi8_epi32(bytes!(Q3_SC + 16 * (sb + s))),
                                false => _mm512_and_si512(
                                    _mm512_cvtepu8_epi32(bytes!(Q2_SC + 16 * (sb + s))),
                                    m4,
                                ),
                            };
                        }
                        for n in 0..N {
                            let a = a[n].get_unchecked(i);
                            let qa = a.qs.as_ptr().add(128 * h + 32 * j);
                            for (s, &sc) in sc.iter().enumerate() {
                                let start = if q3 { -4 * a.bsums[sb + s] as i32 } else { 0 };
                                let mut isum = _mm512_set1_epi32(start);
                                for (c, &w) in w.iter().enumerate().skip(4 * s).take(4) {
                                    let x = _mm512_set1_epi32(
                                        qa.add(4 * c).cast::<i32>().read_unaligned(),
                                    );
                                    isum = _mm512_dpbusd_epi32(isum, w, x);
                                }
                                itot[n] = _mm512_add_epi32(itot[n], _mm512_mullo_epi32(isum, sc));
                            }
                        }
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(
                    b.add(if q3 { Q3_D } else { Q2_D }).cast(),
                ));
                for n in 0..N {
                    let a = a[n].get_unchecked(i);
                    let ad = _mm512_set1_ps(a.d);
                    acc[n] =
                        _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(itot[n]), acc[n]);
                    if !q3 {
                        let mut msum = _mm512_setzero_si512();
                        for sb in 0..16 {
                            let m =
                                _mm512_srli_epi32(_mm512_cvtepu8_epi32(bytes!(Q2_SC + 16 * sb)), 4);
                            let p = _mm512_mullo_epi32(m, _mm512_set1_epi32(a.bsums[sb] as i32));
                            msum = _mm512_add_epi32(msum, p);
                        }
                        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(Q2_DMIN).cast()));
                        acc[n] = _mm512_fnmadd_ps(
                            _mm512_mul_ps(dmin, ad),
                            _mm512_cvtepi32_ps(msum),
                            acc[n],
                        );
                    }
                }
            }
            store(out, valid, acc);
        }
    }

    /// [`product_group_k`] for `IQ4_XS`: per sub-block of 32, the nibbles
    /// looked up in [`IQ4_VALUES`] + 128, the 128 taken back out through
    /// the activations' sums, times the rows' signed scales.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    unsafe fn product_group_iq4xs<const N: usize>(
        group: &[u8],
        a: [&[Q8x256]; N],
        out: [*mut f32; N],
        valid: usize,
    ) {
        unsafe {
            let stride = super::block_bytes(Format::IQ4_XS);
            let blocks = group.len() / stride;
            let m4 = _mm512_set1_epi8(0x0F);
            let mut table = [0u8; 16];
            for (t, v) in table.iter_mut().zip(IQ4_VALUES) {
                *t = (v as i16 + 128) as u8;
            }
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(table.as_ptr().cast()));
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                if N == 1 {
                    prefetch(b, stride);
                }
                let mut itot = [_mm512_setzero_si512(); N];
                for sb in 0..8 {
                    let mut w = [_mm512_setzero_si512(); 8];
                    for p in 0..4 {
                        let v = _mm512_loadu_si512(b.add(XS_QS + 256 * sb + 64 * p).cast());
                        w[p] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
                        let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                        w[4 + p] = _mm512_shuffle_epi8(table, hi);
                    }
                    let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(XS_SC + 16 * sb).cast()));
                    for n in 0..N {
                        let a = a[n].get_unchecked(i);
                        let qa = a.qs.as_ptr().add(32 * sb);
                        let sum = a.bsums[2 * sb] as i32 + a.bsums[2 * sb + 1] as i32;
                        let mut isum = _mm512_set1_epi32(-128 * sum);
                        for (c, &w) in w.iter().enumerate() {
                            let x = _mm512_set1_epi32(qa.add(4 * c).cast::<i32>().read_unaligned());
                            isum = _mm512_dpbusd_epi32(isum, w, x);
                        }
                        itot[n] = _mm512_add_epi32(itot[n], _mm512_mullo_epi32(isum, sc));
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(XS_D).cast()));
                for n in 0..N {
                    let ad = _mm512_set1_ps(a[n].get_unchecked(i).d);
                    acc[n] =
                        _mm512_fmadd_ps(_mm512_mul_ps(d, ad), _mm512_cvtepi32_ps(itot[n]), acc[n]);
                }
            }
            store(out, valid, acc);
        }
    }
}
