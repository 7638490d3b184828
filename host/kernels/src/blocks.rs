//! The GGUF block formats vauban runs without dequantizing, byte for byte
//! as ggml lays them out, and their plain dequantization: the reference
//! every fast kernel is checked against.
//!
//! Formats with 32-value blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`,
//! `IQ4_NL`) hold one or two f16 factors and the quants; the K-quants
//! (`Q2_K` to `Q6_K`) and `IQ4_XS` hold 256 values in sub-blocks with their
//! own 4-, 6- or 8-bit scales. The `IQ4` formats' nibbles index a fixed
//! table of 16 signed values ([`IQ4_VALUES`]) rather than counting steps.
//! The float formats `F16` and `BF16` are kept as stored too (half the
//! bytes of f32), each value a "block" of its own.

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
    /// 32 values: `d` (f16), 16 bytes of nibbles as `Q4_0`'s, each an index
    /// into [`IQ4_VALUES`]: `x = d·IQ4_VALUES[q]`.
    IQ4_NL,
    /// 256 values in 16 sub-blocks of 16: 16 bytes of scales (low nibble)
    /// and mins (high nibble), 64 bytes of 2-bit quants (value `32j + l` of
    /// half `h` takes bits `2j, 2j + 1` of byte `32h + l`), `d`, `dmin`:
    /// `x = d·sc·q − dmin·m`.
    Q2_K,
    /// 256 values in 16 sub-blocks of 16: 32 bytes of high bits (value
    /// `32j + l` of half `h` takes bit `4h + j` of byte `l`), 64 bytes of
    /// 2-bit quants laid out as `Q2_K`'s, 12 bytes of 6-bit scales, `d`:
    /// `x = d·(sc − 32)·(q − 4)`, where the high bit set adds the 4 back.
    Q3_K,
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
    /// 256 values in 8 sub-blocks of 32: `d`, 2 bytes of the scales' high
    /// bits, 4 bytes of their low nibbles, then each sub-block's 16 bytes
    /// of nibbles as `IQ4_NL`'s: `x = d·(sc − 32)·IQ4_VALUES[q]`.
    IQ4_XS,
    /// IEEE half precision, one value per "block" of 2 bytes.
    F16,
    /// bfloat16 (an f32's top 16 bits), one value per "block" of 2 bytes.
    BF16,
}

/// The form a format's kernels take the activations in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// 8-bit blocks of 32 values (`Q8x32`).
    Q8x32,
    /// 8-bit blocks of 256 values with sums per 16 (`Q8x256`).
    Q8x256,
    /// The f32 values themselves: a float format's products are exact to
    /// f32 rounding.
    F32,
}

/// The 16 values an `IQ4_NL` or `IQ4_XS` nibble stands for (ggml's
/// `kvalues_iq4nl`): spaced for the bell-shaped weights of a trained
/// matrix, not evenly.
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl Format {
    pub const ALL: [Format; 14] = [
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::IQ4_NL,
        Format::Q2_K,
        Format::Q3_K,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
        Format::IQ4_XS,
        Format::F16,
        Format::BF16,
    ];

    /// The format of ggml type id `id` (the number a GGUF tensor header
    /// stores), if vauban has kernels for it.
    pub fn from_ggml(id: u32) -> Option<Format> {
        Some(match id {
            1 => Format::F16,
            2 => Format::Q4_0,
            3 => Format::Q4_1,
            6 => Format::Q5_0,
            7 => Format::Q5_1,
            8 => Format::Q8_0,
            10 => Format::Q2_K,
            11 => Format::Q3_K,
            12 => Format::Q4_K,
            13 => Format::Q5_K,
            14 => Format::Q6_K,
            20 => Format::IQ4_NL,
            23 => Format::IQ4_XS,
            30 => Format::BF16,
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
            Format::IQ4_NL => "IQ4_NL",
            Format::Q2_K => "Q2_K",
            Format::Q3_K => "Q3_K",
            Format::Q4_K => "Q4_K",
            Format::Q5_K => "Q5_K",
            Format::Q6_K => "Q6_K",
            Format::IQ4_XS => "IQ4_XS",
            Format::F16 => "F16",
            Format::BF16 => "BF16",
        }
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            Format::Q4_0
            | Format::Q4_1
            | Format::Q5_0
            | Format::Q5_1
            | Format::Q8_0
            | Format::IQ4_NL => 32,
            Format::Q2_K
            | Format::Q3_K
            | Format::Q4_K
            | Format::Q5_K
            | Format::Q6_K
            | Format::IQ4_XS => 256,
            Format::F16 | Format::BF16 => 1,
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
            Format::IQ4_NL => 18,
            Format::Q2_K => 84,
            Format::Q3_K => 110,
            Format::Q4_K => 144,
            Format::Q5_K => 176,
            Format::Q6_K => 210,
            Format::IQ4_XS => 136,
            Format::F16 | Format::BF16 => 2,
        }
    }

    /// Where a block keeps its f16 factors (`d`, and `m` or `dmin` where
    /// the format has one), as byte offsets: what a test or a benchmark
    /// filling blocks with random bytes must keep finite.
    pub fn factor_offsets(self) -> &'static [usize] {
        match self {
            Format::Q4_0 | Format::Q5_0 | Format::Q8_0 | Format::IQ4_NL | Format::IQ4_XS => &[0],
            Format::Q4_1 | Format::Q5_1 | Format::Q4_K | Format::Q5_K => &[0, 2],
            Format::Q2_K => &[Q2K_D, Q2K_D + 2],
            Format::Q3_K => &[Q3K_D],
            Format::Q6_K => &[Q6K_D],
            // Every value is a float: none may be NaN for a comparison.
            Format::F16 | Format::BF16 => &[0],
        }
    }

    /// The activations its kernels take: 8-bit blocks of its own block
    /// length for the quantized formats, f32 for the float ones.
    pub fn pairing(self) -> Pairing {
        match self.block_len() {
            256 => Pairing::Q8x256,
            32 => Pairing::Q8x32,
            _ => Pairing::F32,
        }
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

/// The bf16 at byte `at` of `b`.
#[inline(always)]
pub(crate) fn bf16_at(b: &[u8], at: usize) -> f32 {
    f32::from_bits((u16::from_le_bytes([b[at], b[at + 1]]) as u32) << 16)
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

/// Offsets inside a `Q2_K` block: scales and mins, quants, `d` (`dmin`
/// follows it).
pub(crate) const Q2K_SC: usize = 0;
pub(crate) const Q2K_QS: usize = 16;
pub(crate) const Q2K_D: usize = 80;

/// Offsets inside a `Q3_K` block: high bits, quants, scales, `d`.
pub(crate) const Q3K_HM: usize = 0;
pub(crate) const Q3K_QS: usize = 32;
pub(crate) const Q3K_SC: usize = 96;
pub(crate) const Q3K_D: usize = 108;

/// Offsets inside an `IQ4_XS` block: the scales' high bits (a `u16`),
/// their low nibbles, the quants.
pub(crate) const IQ4XS_SH: usize = 2;
pub(crate) const IQ4XS_SL: usize = 4;
pub(crate) const IQ4XS_QS: usize = 8;

/// The 16 scales of a `Q3_K` block's 12 scale bytes, less their 32: bytes
/// 0..8 hold the low nibbles (scale `s` in byte `s % 8`, high nibble from
/// `s = 8` on), bytes 8..12 the high two bits (scale `s` at bits
/// `2·(s / 4)` of byte `8 + s % 4`).
#[inline(always)]
pub(crate) fn q3k_scales(s: &[u8]) -> [i32; 16] {
    std::array::from_fn(|i| {
        let lo = (s[i % 8] >> (4 * (i / 8))) & 0xF;
        let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        (lo | (hi << 4)) as i32 - 32
    })
}

/// Sub-block `j`'s scale of an `IQ4_XS` block, less its 32.
#[inline(always)]
pub(crate) fn iq4xs_scale(b: &[u8], j: usize) -> i32 {
    let high = u16::from_le_bytes([b[IQ4XS_SH], b[IQ4XS_SH + 1]]);
    let lo = (b[IQ4XS_SL + j / 2] >> (4 * (j % 2))) & 0xF;
    let hi = ((high >> (2 * j)) & 3) as u8;
    (lo | (hi << 4)) as i32 - 32
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
        Format::IQ4_NL => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                out[j] = d * IQ4_VALUES[(b[2 + j] & 0xF) as usize] as f32;
                out[j + 16] = d * IQ4_VALUES[(b[2 + j] >> 4) as usize] as f32;
            }
        }
        Format::Q2_K => {
            let (d, dmin) = (f16_at(b, Q2K_D), f16_at(b, Q2K_D + 2));
            for (v, y) in out.iter_mut().enumerate().take(256) {
                let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
                let q = (b[Q2K_QS + 32 * h + l] >> (2 * j)) & 3;
                let sm = b[Q2K_SC + v / 16];
                *y = d * (sm & 0xF) as f32 * q as f32 - dmin * (sm >> 4) as f32;
            }
        }
        Format::Q3_K => {
            let d = f16_at(b, Q3K_D);
            let sc = q3k_scales(&b[Q3K_SC..Q3K_SC + 12]);
            for (v, y) in out.iter_mut().enumerate().take(256) {
                let (h, j, l) = (v / 128, v % 128 / 32, v % 32);
                let q = (b[Q3K_QS + 32 * h + l] >> (2 * j)) & 3;
                let high = (b[Q3K_HM + l] >> (4 * h + j)) & 1;
                let q = q as i32 - if high == 1 { 0 } else { 4 };
                *y = d * sc[v / 16] as f32 * q as f32;
            }
        }
        Format::IQ4_XS => {
            let d = f16_at(b, 0);
            for j in 0..8 {
                let dl = d * iq4xs_scale(b, j) as f32;
                let q = &b[IQ4XS_QS + 16 * j..IQ4XS_QS + 16 * j + 16];
                let y = &mut out[32 * j..32 * j + 32];
                for l in 0..16 {
                    y[l] = dl * IQ4_VALUES[(q[l] & 0xF) as usize] as f32;
                    y[l + 16] = dl * IQ4_VALUES[(q[l] >> 4) as usize] as f32;
                }
            }
        }
        Format::F16 => out[0] = f16_at(b, 0),
        Format::BF16 => out[0] = bf16_at(b, 0),
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
    // The float formats: one conversion per value, without a block's match.
    match format {
        Format::F16 => {
            for (b, y) in row.chunks_exact(2).zip(out) {
                *y = f16_at(b, 0);
            }
            return;
        }
        Format::BF16 => {
            for (b, y) in row.chunks_exact(2).zip(out) {
                *y = bf16_at(b, 0);
            }
            return;
        }
        _ => {}
    }
    let (n, bytes) = (format.block_len(), format.block_bytes());
    for (b, y) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(n)) {
        dequantize_block(format, b, y);
    }
}
