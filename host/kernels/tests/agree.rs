//! Every kernel against the plain dequantize-then-f32 product, on random
//! blocks whose bytes are drawn over their whole range (quants at 0 and 15,
//! −128 and 127; scales from 0 and f16 subnormals to the thousands), and
//! the SIMD kernels against the portable ones.
//!
//! The only loss a kernel may have is the rounding of each activation to
//! its 8-bit block (at most half a step, `amax / 254`), so the tolerance
//! for output `(i, r)` is the bound `Σ_j |w_rj| · step_ij / 2` computed
//! from the same numbers, not a fixed epsilon.

use half::f16;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vauban_kernels::blocks::dequantize_row;
use vauban_kernels::{Format, Isa, Pairing, QMatrix};

/// A random finite f16 scale: zero, subnormal, tiny, ordinary or large.
fn scale(rng: &mut ChaCha8Rng) -> [u8; 2] {
    let v = match rng.random_range(0..8) {
        0 => 0.0,
        1 => f16::from_bits(rng.random_range(1..0x400)).to_f32(), // subnormal
        2 => rng.random_range(1e-4..1e-3),
        3 => rng.random_range(1e2..4e3),
        _ => rng.random_range(1e-3..0.1),
    };
    let v = if rng.random_bool(0.5) { -v } else { v };
    f16::from_f32(v).to_le_bytes()
}

/// A block of `format` with random quants and random scales where the
/// format keeps them.
fn block(format: Format, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = vec![0u8; format.block_bytes()];
    rng.fill_bytes(&mut b);
    // Some blocks hold only the extreme quants: every byte from where the
    // quant bits start (high bits included) to where they end.
    if rng.random_bool(0.1) {
        let fill = if rng.random_bool(0.5) { 0x00 } else { 0xFF };
        let (start, end) = match format {
            Format::Q4_0 | Format::Q5_0 | Format::Q8_0 | Format::IQ4_NL => (2, b.len()),
            Format::Q4_1 | Format::Q5_1 => (4, b.len()),
            Format::Q4_K | Format::Q5_K => (16, b.len()),
            Format::Q2_K => (16, 80),
            Format::Q3_K => (0, 96),
            Format::Q6_K => (0, 192),
            Format::IQ4_XS => (8, b.len()),
            // A float is its own factor, set below.
            Format::F16 | Format::BF16 => (0, 0),
        };
        b[start..end].fill(fill);
    }
    if format == Format::Q8_0 && rng.random_bool(0.2) {
        b[2..34].fill(0x80); // −128, which ggml never writes but a file may hold
    }
    for &at in format.factor_offsets() {
        b[at..at + 2].copy_from_slice(&scale(rng));
    }
    b
}

fn matrix(format: Format, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> QMatrix {
    let blocks = rows * cols / format.block_len();
    let data: Vec<u8> = (0..blocks).flat_map(|_| block(format, rng)).collect();
    QMatrix::new(format, rows, cols, data).unwrap()
}

fn activations(m: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..m * k)
        .map(|i| match rng.random_range(0..20) {
            0 => 0.0,
            1 => rng.random_range(-100.0..100.0), // an outlier in its block
            _ => rng.random_range(-2.0..2.0) * if i % 7 == 0 { 0.01 } else { 1.0 },
        })
        .collect()
}

/// The reference product and, for each output, the bound on what rounding
/// the activations to 8-bit blocks of `block` values can change.
/// `block` is `None` for a float format, whose activations are not rounded.
fn reference(w: &QMatrix, x: &[f32], m: usize, block: Option<usize>) -> (Vec<f32>, Vec<f32>) {
    let (n, k) = (w.rows(), w.cols());
    let dense = w.dequantize();
    let steps: Vec<f32> = match block {
        Some(block) => x
            .chunks(block)
            .flat_map(|b| {
                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
                std::iter::repeat_n(amax / 127.0, b.len())
            })
            .collect(),
        None => vec![0.0; x.len()],
    };
    let (mut y, mut bound) = (vec![0f32; m * n], vec![0f32; m * n]);
    for i in 0..m {
        for r in 0..n {
            let (mut s, mut e, mut mag) = (0f64, 0f64, 0f64);
            for j in 0..k {
                let (wv, xv) = (dense[r * k + j] as f64, x[i * k + j] as f64);
                s += wv * xv;
                e += wv.abs() * steps[i * k + j] as f64 / 2.0;
                mag += (wv * xv).abs();
            }
            y[i * n + r] = s as f32;
            // The rounding bound, plus f32 summation error on the magnitudes.
            bound[i * n + r] = (e * 1.001 + mag * 1e-5 + 1e-30) as f32;
        }
    }
    (y, bound)
}

/// A row width for `format`'s tests: two 256-value blocks, three 32-value
/// ones, or (a float format) a width with a tail past the SIMD loops'
/// sixteen.
fn width(format: Format) -> usize {
    match format.pairing() {
        Pairing::Q8x256 => 512,
        Pairing::Q8x32 => 96,
        Pairing::F32 => 100,
    }
}

/// `w` repacked for the 512-bit kernels, where this CPU has them and they
/// take its format.
fn packed(w: &QMatrix) -> Option<QMatrix> {
    let bytes = (0..w.rows()).flat_map(|r| w.row(r).into_owned()).collect();
    let p = QMatrix::new(w.format(), w.rows(), w.cols(), bytes)
        .unwrap()
        .packed();
    p.is_packed().then_some(p)
}

/// `w` in each layout this CPU's kernels take.
fn layouts(w: QMatrix) -> Vec<QMatrix> {
    let p = packed(&w);
    std::iter::once(w).chain(p).collect()
}

fn check(format: Format, isa: Isa, m: usize, rows: usize, cols: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let w = matrix(format, rows, cols, &mut rng);
    let x = activations(m, cols, &mut rng);
    let act_block = match format.pairing() {
        Pairing::Q8x256 => Some(256),
        Pairing::Q8x32 => Some(32),
        Pairing::F32 => None,
    };
    let (want, bound) = reference(&w, &x, m, act_block);
    for w in layouts(w) {
        let mut got = vec![f32::NAN; m * rows];
        w.matmul_on(isa, &x, m, &mut got);
        let packed = if w.is_packed() { " packed" } else { "" };
        for (at, ((g, w), b)) in got.iter().zip(&want).zip(&bound).enumerate() {
            assert!(
                (g - w).abs() <= *b,
                "{format}{packed} on {}: y[{}, {}] = {g}, reference {w}, allowed ±{b} (m {m}, {rows}×{cols}, seed {seed})",
                isa.name(),
                at / rows,
                at % rows
            );
        }
    }
}

/// A packed matrix gives back the rows it was made of, whole or in part.
#[test]
fn packing_keeps_every_row() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut packs = 0;
    for format in Format::ALL {
        let w = matrix(format, 37, width(format), &mut rng);
        let Some(p) = packed(&w) else { continue };
        packs += 1;
        for r in 0..w.rows() {
            assert_eq!(w.row(r), p.row(r), "{format} row {r}");
        }
        assert_eq!(w.dequantize(), p.dequantize(), "{format}");
        let part = p.row_range(17, 19).unwrap();
        assert!(!part.is_packed());
        assert_eq!(part.row(0), w.row(17), "{format}");
        assert!(p.row_range(30, 8).is_none());
    }
    // (Every format packs for the 512-bit kernels.)
    if Isa::available().contains(&Isa::Avx512Vnni) {
        assert_eq!(packs, Format::ALL.len());
    }
}

#[test]
fn every_kernel_agrees_with_the_dequantized_product() {
    for format in Format::ALL {
        let cols = width(format);
        for &isa in Isa::available() {
            // One row (decode), a tile of four plus a remainder, and a
            // prompt-sized block.
            for (m, seed) in [(1, 1), (7, 2), (16, 3)] {
                check(format, isa, m, 37, cols, seed);
            }
        }
    }
}

#[test]
fn simd_kernels_match_the_portable_ones() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for format in Format::ALL {
        let cols = 1024;
        let w = matrix(format, 24, cols, &mut rng);
        let x = activations(5, cols, &mut rng);
        let mut portable = vec![0f32; 5 * 24];
        w.matmul_on(Isa::Portable, &x, 5, &mut portable);
        for &isa in Isa::available() {
            let mut got = vec![0f32; 5 * 24];
            w.matmul_on(isa, &x, 5, &mut got);
            for (g, p) in got.iter().zip(&portable) {
                // The same integer sums; only the order of f32 additions differs.
                assert!(
                    (g - p).abs() <= 1e-4 * p.abs().max(1.0),
                    "{format} on {}: {g} against portable {p}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn dequantize_matches_ggml_on_known_blocks() {
    // Q4_0: d = 0.5; quants 0..15 → (q − 8)·0.5.
    let mut b = f16::from_f32(0.5).to_le_bytes().to_vec();
    b.extend((0..16u8).map(|j| j | (15 - j) << 4));
    let mut out = [0f32; 32];
    dequantize_row(Format::Q4_0, &b, &mut out);
    assert_eq!(out[0], -4.0);
    assert_eq!(out[15], 3.5);
    assert_eq!(out[16], 3.5);
    assert_eq!(out[31], -4.0);
    // Q4_1: d = 2, m = −1 → 2q − 1.
    let mut b = f16::from_f32(2.0).to_le_bytes().to_vec();
    b.extend(f16::from_f32(-1.0).to_le_bytes());
    b.extend([0x5Au8; 16]);
    dequantize_row(Format::Q4_1, &b, &mut out);
    assert_eq!((out[0], out[16]), (2.0 * 10.0 - 1.0, 2.0 * 5.0 - 1.0));
    // Q8_0: d = 0.25, quants −128 and 127.
    let mut b = f16::from_f32(0.25).to_le_bytes().to_vec();
    b.extend([0x80u8; 16]);
    b.extend([0x7Fu8; 16]);
    dequantize_row(Format::Q8_0, &b, &mut out);
    assert_eq!((out[0], out[31]), (-32.0, 31.75));
    // Q5_0: d = 1; the fifth bits of values 0 and 16 set (bits 0 and 16 of
    // the little-endian u32); nibbles 15 and 3 in byte 0, 0 elsewhere.
    let mut b = f16::from_f32(1.0).to_le_bytes().to_vec();
    b.extend(0x0001_0001u32.to_le_bytes());
    b.push(0x3F);
    b.extend([0u8; 15]);
    dequantize_row(Format::Q5_0, &b, &mut out);
    assert_eq!(
        (out[0], out[16], out[1], out[17]),
        (15.0, 3.0, -16.0, -16.0)
    );
    // Q5_1: d = 0.5, m = 1, the same quants: 0.5q + 1.
    let mut b = f16::from_f32(0.5).to_le_bytes().to_vec();
    b.extend(f16::from_f32(1.0).to_le_bytes());
    b.extend(0x0001_0001u32.to_le_bytes());
    b.push(0x3F);
    b.extend([0u8; 15]);
    dequantize_row(Format::Q5_1, &b, &mut out);
    assert_eq!((out[0], out[16], out[1]), (16.5, 10.5, 1.0));
}

#[test]
fn a_wrong_size_is_refused_with_the_sizes() {
    let e = QMatrix::new(Format::Q4_1, 2, 64, vec![0; 79])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs 80 bytes; 79 were given"), "{e}");
    let e = QMatrix::new(Format::Q4_K, 2, 64, vec![])
        .unwrap_err()
        .to_string();
    assert!(e.contains("256-value blocks"), "{e}");
}

#[test]
fn a_group_computes_what_each_matrix_computes_alone() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let ws = [
        matrix(Format::Q4_1, 40, 512, &mut rng),
        matrix(Format::Q6_K, 24, 512, &mut rng),
        matrix(Format::Q8_0, 8, 512, &mut rng),
        matrix(Format::BF16, 16, 512, &mut rng),
    ];
    for m in [1, 6] {
        let x = activations(m, 512, &mut rng);
        let mut group: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; m * w.rows()]).collect();
        let mut outs: Vec<&mut [f32]> = group.iter_mut().map(|y| y.as_mut_slice()).collect();
        vauban_kernels::matmul_group(&ws.iter().collect::<Vec<_>>(), &x, m, &mut outs);
        for (w, g) in ws.iter().zip(&group) {
            let mut alone = vec![0f32; m * w.rows()];
            w.matmul(&x, m, &mut alone);
            assert_eq!(&alone, g, "{}", w.format());
        }
    }
}

/// Each output row depends on its own activation row only: any number of
/// rows (whole tiles, remainders, several tasks) gives, row for row, what
/// that row alone gives, bit for bit. A prompt split into passes relies on it.
#[test]
fn a_row_comes_out_the_same_whatever_the_rows_around_it() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for format in Format::ALL {
        let cols = width(format);
        let x = activations(45, cols, &mut rng);
        for (w, &isa) in layouts(matrix(format, 40, cols, &mut rng))
            .iter()
            .flat_map(|w| Isa::available().iter().map(move |isa| (w, isa)))
        {
            let alone: Vec<Vec<f32>> = (0..45)
                .map(|i| {
                    let mut y = vec![0f32; 40];
                    w.matmul_on(isa, &x[i * cols..(i + 1) * cols], 1, &mut y);
                    y
                })
                .collect();
            for m in [2, 5, 8, 9, 16, 19, 20, 24, 44, 45] {
                let mut y = vec![f32::NAN; m * 40];
                w.matmul_on(isa, &x[..m * cols], m, &mut y);
                for i in 0..m {
                    assert_eq!(
                        &y[i * 40..(i + 1) * 40],
                        alone[i].as_slice(),
                        "{format} on {}: row {i} of {m}",
                        isa.name()
                    );
                }
            }
        }
    }
}
