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
//! file's, padding aside.
//!
//! Which formats are packed, and on which CPUs: [`packs`].

use crate::Isa;
use crate::blocks::Format;

/// Rows per group: one 32-bit lane each of a 512-bit register.
pub(crate) const LANES: usize = 16;

/// Whether matrices of `format` are packed for `isa`'s kernels.
pub(crate) fn packs(format: Format, isa: Isa) -> bool {
    isa == Isa::Avx512Vnni && matches!(format, Format::Q4_0 | Format::IQ4_NL | Format::Q8_0)
}

/// Bytes of a block's scale in the formats [`packs`] accepts (`d`, f16).
const FACTOR: usize = 2;

/// `rows × cols` of `format` in the row layout, repacked.
pub(crate) fn pack(format: Format, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let (bytes, blocks) = (format.block_bytes(), cols / format.block_len());
    let units = (bytes - FACTOR) / 4;
    let groups = rows.div_ceil(LANES);
    let mut out = vec![0u8; groups * blocks * LANES * bytes];
    for r in 0..rows {
        let (g, lane) = (r / LANES, r % LANES);
        for i in 0..blocks {
            let src = &data[(r * blocks + i) * bytes..][..bytes];
            let dst = &mut out[(g * blocks + i) * LANES * bytes..][..LANES * bytes];
            dst[FACTOR * lane..][..FACTOR].copy_from_slice(&src[..FACTOR]);
            for u in 0..units {
                let at = LANES * FACTOR + u * 4 * LANES + 4 * lane;
                dst[at..at + 4].copy_from_slice(&src[FACTOR + 4 * u..][..4]);
            }
        }
    }
    out
}

/// Row `r` of a packed matrix in the row layout: what [`pack`] took.
pub(crate) fn unpack_row(format: Format, cols: usize, packed: &[u8], r: usize) -> Vec<u8> {
    let (bytes, blocks) = (format.block_bytes(), cols / format.block_len());
    let units = (bytes - FACTOR) / 4;
    let (g, lane) = (r / LANES, r % LANES);
    let mut out = vec![0u8; blocks * bytes];
    for i in 0..blocks {
        let src = &packed[(g * blocks + i) * LANES * bytes..][..LANES * bytes];
        let dst = &mut out[i * bytes..][..bytes];
        dst[..FACTOR].copy_from_slice(&src[FACTOR * lane..][..FACTOR]);
        for u in 0..units {
            let at = LANES * FACTOR + u * 4 * LANES + 4 * lane;
            dst[FACTOR + 4 * u..][..4].copy_from_slice(&src[at..at + 4]);
        }
    }
    out
}

/// Bytes of one group's rows (all blocks) in the packed layout.
#[cfg(target_arch = "x86_64")]
pub(crate) fn group_bytes(format: Format, cols: usize) -> usize {
    cols / format.block_len() * LANES * format.block_bytes()
}

#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::product_group;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{FACTOR, LANES};
    use crate::act::Q8x32;
    use crate::blocks::{Format, IQ4_VALUES};

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
            let bytes = format.block_bytes();
            let stride = LANES * bytes;
            let blocks = group.len() / stride;
            let offset = match format {
                Format::Q4_0 => -8.0,
                _ => -128.0,
            };
            let m4 = _mm512_set1_epi8(0x0F);
            let mut table = [0u8; 16];
            for (t, v) in table.iter_mut().zip(IQ4_VALUES) {
                *t = (v as i16 + 128) as u8;
            }
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(table.as_ptr().cast()));
            let mut acc = [_mm512_setzero_ps(); N];
            for i in 0..blocks {
                let b = group.as_ptr().add(i * stride);
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(b.cast()));
                let q = b.add(LANES * FACTOR);
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
            let mask: __mmask16 = if valid >= LANES {
                !0
            } else {
                (1u16 << valid) - 1
            };
            for n in 0..N {
                _mm512_mask_storeu_ps(out[n], mask, acc[n]);
            }
        }
    }
}
