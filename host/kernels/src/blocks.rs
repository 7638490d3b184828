//! The GGUF block formats vauban runs without dequantizing, byte for byte
//! as ggml lays them out, and their plain dequantization: the reference
//! every fast kernel is checked against.
//!
//! Formats with 32-value blocks (`Q4_0`, `Q4_1`, `Q8_0`) hold one or two
//! f16 factors and the quants; the K-quants (`Q4_K`, `Q6_K`) hold 256 values
//! in sub-blocks with their own 6- or 8-bit scales.

use half::f16;

/// A block-quantized weight format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Format {
    /// 32 values: `d` (f16), 16 bytes of 4-bit quants; `x = d·(q − 8)`.
    Q4_0,
    /// 32 values: `d`, `m` (f16), 16 bytes of 4-bit quants; `x = d·q + m`.
    Q4_1,
    /// 32 values: `d` (f16), 4 bytes of high bits (bit `j` of the
    /// little-endian `u32` is value `j`'s fifth bit), 16 bytes of low
    /// nibbles; `x = d·(q − 16)`.
    Q5_0,
    /// 32 values: `d`, `m` (f16), 4 bytes of high bits, 16 bytes of low
    /// nibbles; `x = d·q + m`.
    Q5_1,
    /// 32 values: `d` (f16), 32 signed bytes; `x = d·q`.
    Q8_0,
    /// 256 values in 8 sub-blocks of 32 with 6-bit scales and mins:
    /// `x = d·sc·q − dmin·m`.
    Q4_K,
    /// `Q4_K`'s layout with a fifth bit per value: `d`, `dmin`, 12 bytes of
    /// scales and mins, 32 bytes of high bits (value `l` of group `g`'s
    /// first half takes bit `2g` of byte `l`, of its second half bit
    /// `2g + 1`), 128 bytes of nibbles: `x = d·sc·q − dmin·m`.
    Q5_K,
    /// 256 values in 16 sub-blocks of 16 with 8-bit scales, 6-bit quants:
    /// `x = d·sc·(q − 32)`.
    Q6_K,
}

impl Format {
    pub const ALL: [Format; 8] = [
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
    ];

    /// The format of ggml type id `id` (the number a GGUF tensor header
    /// stores), if vauban has kernels for it.
    pub fn from_ggml(id: u32) -> Option<Format> {
        Some(match id {
            2 => Format::Q4_0,
            3 => Format::Q4_1,
            6 => Format::Q5_0,
            7 => Format::Q5_1,
            8 => Format::Q8_0,
            12 => Format::Q4_K,
            13 => Format::Q5_K,
            14 => Format::Q6_K,
            _ => return None,
        })
    }

    /// ggml's name for it (`Q4_1`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Q4_0 => "Q4_0",
            Format::Q4_1 => "Q4_1",
            Format::Q5_0 => "Q5_0",
            Format::Q5_1 => "Q5_1",
            Format::Q8_0 => "Q8_0",
            Format::Q4_K => "Q4_K",
            Format::Q5_K => "Q5_K",
            Format::Q6_K => "Q6_K",
        }
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            Format::Q4_0 | Format::Q4_1 | Format::Q5_0 | Format::Q5_1 | Format::Q8_0 => 32,
            Format::Q4_K | Format::Q5_K | Format::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q4_0 => 18,
            Format::Q4_1 => 20,
            Format::Q5_0 => 22,
            Format::Q5_1 => 24,
            Format::Q8_0 => 34,
            Format::Q4_K => 144,
            Format::Q5_K => 176,
            Format::Q6_K => 210,
        }
    }

    /// Whether activations pair with it as 256-value blocks (the K-quants).
    pub(crate) fn is_k(self) -> bool {
        self.block_len() == 256
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The f16 at byte `at` of `b`.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Sub-block `j`'s 6-bit scale and min of a `Q4_K` block's 12 scale bytes.
#[inline(always)]
pub(crate) fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// A 5-bit block's layout: where its high bits and its nibbles start
/// (`Q5_0`: after `d`; `Q5_1`: after `d` and `m`).
#[inline(always)]
pub(crate) fn q5_offsets(format: Format) -> (usize, usize) {
    match format {
        Format::Q5_0 => (2, 6),
        _ => (4, 8),
    }
}

/// Value `j`'s quant (0..32) of a 5-bit block: its nibble and, as the
/// fifth bit, bit `j` of the high bits.
#[inline(always)]
pub(crate) fn q5_quant(b: &[u8], (qh, qs): (usize, usize), j: usize) -> u8 {
    let high = u32::from_le_bytes([b[qh], b[qh + 1], b[qh + 2], b[qh + 3]]);
    let nibble = match j < 16 {
        true => b[qs + j] & 0xF,
        false => b[qs + j - 16] >> 4,
    };
    nibble | ((((high >> j) & 1) as u8) << 4)
}

/// Offsets inside a `Q6_K` block: low 4 bits, high 2 bits, scales, `d`.
pub(crate) const Q6K_QL: usize = 0;
pub(crate) const Q6K_QH: usize = 128;
pub(crate) const Q6K_SC: usize = 192;
pub(crate) const Q6K_D: usize = 208;

/// Offsets inside a `Q4_K` block: `d`, `dmin`, scales, quants.
pub(crate) const Q4K_SC: usize = 4;
pub(crate) const Q4K_QS: usize = 16;

/// Offsets inside a `Q5_K` block (scales as `Q4_K`'s): high bits, nibbles.
pub(crate) const Q5K_QH: usize = 16;
pub(crate) const Q5K_QS: usize = 48;

/// Dequantizes one block of `format` into `out` (`format.block_len()`
/// values): the plain formula, no tricks.
pub fn dequantize_block(format: Format, b: &[u8], out: &mut [f32]) {
    debug_assert_eq!(b.len(), format.block_bytes());
    match format {
        Format::Q4_0 => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                out[j] = d * ((b[2 + j] & 0xF) as f32 - 8.0);
                out[j + 16] = d * ((b[2 + j] >> 4) as f32 - 8.0);
            }
        }
        Format::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for j in 0..16 {
                out[j] = d * (b[4 + j] & 0xF) as f32 + m;
                out[j + 16] = d * (b[4 + j] >> 4) as f32 + m;
            }
        }
        Format::Q5_0 => {
            let d = f16_at(b, 0);
            for (j, y) in out.iter_mut().enumerate().take(32) {
                *y = d * (q5_quant(b, (2, 6), j) as f32 - 16.0);
            }
        }
        Format::Q5_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for (j, y) in out.iter_mut().enumerate().take(32) {
                *y = d * q5_quant(b, (4, 8), j) as f32 + m;
            }
        }
        Format::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                out[j] = d * b[2 + j] as i8 as f32;
            }
        }
        // Q5_K: Q4_K's with a fifth bit per value from its high bits.
        Format::Q4_K | Format::Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let sc = &b[Q4K_SC..Q4K_SC + 12];
            let (qs, qh) = match format {
                Format::Q4_K => (Q4K_QS, None),
                _ => (Q5K_QS, Some(&b[Q5K_QH..Q5K_QH + 32])),
            };
            for g in 0..4 {
                let q = &b[qs + 32 * g..qs + 32 * g + 32];
                let (s1, m1) = q4k_scale_min(2 * g, sc);
                let (s2, m2) = q4k_scale_min(2 * g + 1, sc);
                let y = &mut out[64 * g..64 * g + 64];
                for l in 0..32 {
                    let (f1, f2) = match qh {
                        Some(h) => ((h[l] >> (2 * g)) & 1, (h[l] >> (2 * g + 1)) & 1),
                        None => (0, 0),
                    };
                    let (lo, hi) = ((q[l] & 0xF) | (f1 << 4), (q[l] >> 4) | (f2 << 4));
                    y[l] = d * s1 as f32 * lo as f32 - dmin * m1 as f32;
                    y[l + 32] = d * s2 as f32 * hi as f32 - dmin * m2 as f32;
                }
            }
        }
        Format::Q6_K => {
            let d = f16_at(b, Q6K_D);
            for h in 0..2 {
                let ql = &b[Q6K_QL + 64 * h..Q6K_QL + 64 * h + 64];
                let qh = &b[Q6K_QH + 32 * h..Q6K_QH + 32 * h + 32];
                let sc = &b[Q6K_SC + 8 * h..Q6K_SC + 8 * h + 8];
                let y = &mut out[128 * h..128 * h + 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    let s = |k: usize| sc[is + k] as i8 as f32;
                    y[l] = d * s(0) * q1 as f32;
                    y[l + 32] = d * s(2) * q2 as f32;
                    y[l + 64] = d * s(4) * q3 as f32;
                    y[l + 96] = d * s(6) * q4 as f32;
                }
            }
        }
    }
}

/// Dequantizes a whole row of blocks into `out`.
pub fn dequantize_row(format: Format, row: &[u8], out: &mut [f32]) {
    let (n, bytes) = (format.block_len(), format.block_bytes());
    for (b, y) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(n)) {
        dequantize_block(format, b, y);
    }
}
