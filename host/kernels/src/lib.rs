//! CPU kernels for GGUF block-quantized weights.
//!
//! A [`QMatrix`] holds a weight matrix as the GGUF file stores it
//! ([`Format`]: every block format llama.cpp's presets write, and `F16`,
//! `BF16`); [`QMatrix::matmul`] computes `y = x·Wᵀ` for `m` activation
//! rows. For a block format the activations are quantized once per product
//! to 8-bit blocks ([`act`]), so the inner loops are integer dot products;
//! a float format's are f32 products. Each weight row is unpacked once per
//! tile of activation rows; the weight rows are split across the threads
//! of [`pool::Pool`]. On AVX-512 VNNI the matrices are repacked at load
//! ([`QMatrix::packed`]), 16 rows interleaved, for 512-bit kernels whose
//! outputs land 16 to a vector (`packed.rs`).
//!
//! The instruction set is chosen at run time ([`Isa::detect`]): AVX-512
//! VNNI, AVX2, or the portable kernels on x86-64, so one binary runs
//! correctly on any x86-64; NEON on aarch64; the portable kernels
//! elsewhere. Every kernel is checked against the plain
//! dequantize-then-f32 product ([`blocks::dequantize_row`]) in this crate's
//! tests.

#[cfg(target_arch = "aarch64")]
mod aarch64;
pub mod act;
pub mod attention;
pub mod blocks;
pub mod gate;
mod packed;
pub mod pool;
mod portable;
pub mod primitive;
pub mod softmax;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use act::ActRow;
pub use act::Activations;
pub use blocks::{Format, Pairing};
use pool::Pool;

/// The kernels a product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust; every CPU.
    Portable,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 VNNI (used at 256 bits: `vpdpbusd`).
    Avx512Vnni,
    /// aarch64's baseline NEON.
    Neon,
}

impl Isa {
    /// The fastest kernels this CPU runs.
    pub fn detect() -> Isa {
        *Isa::available().last().unwrap_or(&Isa::Portable)
    }

    /// Every instruction set this CPU runs, slowest first; found once (every
    /// product checks its `isa` against it).
    pub fn available() -> &'static [Isa] {
        static AVAILABLE: OnceLock<Vec<Isa>> = OnceLock::new();
        AVAILABLE.get_or_init(|| {
            #[allow(unused_mut)]
            let mut v = vec![Isa::Portable];
            #[cfg(target_arch = "aarch64")]
            v.push(Isa::Neon);
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
                {
                    v.push(Isa::Avx2);
                    if is_x86_feature_detected!("avx512vnni")
                        && is_x86_feature_detected!("avx512vl")
                        && is_x86_feature_detected!("avx512bw")
                    {
                        v.push(Isa::Avx512Vnni);
                    }
                }
            }
            v
        })
    }

    /// A short name (`avx512-vnni`), as the bench and the trace print it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::Neon => "neon",
        }
    }

    /// Whether activations are quantized by the AVX2 build of the loop.
    fn avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512Vnni)
    }
}

/// A matrix that cannot be built from the bytes given.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("a {format} row of {cols} values is not a whole number of {block}-value blocks")]
    RaggedRow {
        format: Format,
        cols: usize,
        block: usize,
    },
    #[error("{rows} × {cols} {format} needs {expected} bytes; {found} were given")]
    Size {
        format: Format,
        rows: usize,
        cols: usize,
        expected: usize,
        found: usize,
    },
}

/// A block-quantized weight matrix, `[rows, cols]`, each row a run of
/// blocks, or those rows repacked for the 512-bit kernels ([`QMatrix::packed`]).
pub struct QMatrix {
    format: Format,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    /// Whether `data` holds the packed layout (`packed.rs`) rather than rows.
    packed: bool,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QMatrix({} × {} {})", self.rows, self.cols, self.format)
    }
}

impl QMatrix {
    /// `data` as the GGUF stores a `[rows, cols]` tensor of `format`.
    pub fn new(
        format: Format,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self, KernelError> {
        let block = format.block_len();
        if !cols.is_multiple_of(block) {
            return Err(KernelError::RaggedRow {
                format,
                cols,
                block,
            });
        }
        let expected = rows * cols / block * format.block_bytes();
        if data.len() != expected {
            return Err(KernelError::Size {
                format,
                rows,
                cols,
                expected,
                found: data.len(),
            });
        }
        Ok(QMatrix {
            format,
            rows,
            cols,
            data,
            packed: false,
        })
    }

    /// The matrix in the layout the fastest kernels of this CPU take:
    /// repacked, 16 rows interleaved, where those are the 512-bit kernels
    /// (AVX-512 VNNI); as it was otherwise.
    pub fn packed(self) -> QMatrix {
        self.packed_for(Isa::detect())
    }

    /// [`QMatrix::packed`] for `isa`'s kernels.
    pub fn packed_for(self, isa: Isa) -> QMatrix {
        if self.packed || !packed::packs(isa) {
            return self;
        }
        let data = packed::pack(self.format, self.rows, self.cols, &self.data);
        QMatrix {
            data,
            packed: true,
            ..self
        }
    }

    /// Whether the rows are held repacked ([`QMatrix::packed`]).
    pub fn is_packed(&self) -> bool {
        self.packed
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The bytes held (a packed matrix's include its padding rows).
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    fn row_bytes(&self) -> usize {
        self.cols / self.format.block_len() * self.format.block_bytes()
    }

    /// Row `r`'s bytes as the file stores them (gathered from the packed
    /// layout where the matrix is packed).
    pub fn row(&self, r: usize) -> Cow<'_, [u8]> {
        assert!(r < self.rows, "row {r} of {} rows", self.rows);
        match self.packed {
            true => Cow::Owned(packed::unpack_row(self.format, self.cols, &self.data, r)),
            false => {
                let n = self.row_bytes();
                Cow::Borrowed(&self.data[r * n..(r + 1) * n])
            }
        }
    }

    /// Rows `start..start + n` as a matrix of their own, bytes as stored
    /// (a fused QKV matrix split into Q, K and V), in the row layout;
    /// `None` past the end.
    pub fn row_range(&self, start: usize, n: usize) -> Option<QMatrix> {
        if start + n > self.rows {
            return None;
        }
        let data = match self.packed {
            true => (start..start + n)
                .flat_map(|r| self.row(r).into_owned())
                .collect(),
            false => {
                let b = self.row_bytes();
                self.data[start * b..(start + n) * b].to_vec()
            }
        };
        Some(QMatrix {
            format: self.format,
            rows: n,
            cols: self.cols,
            data,
            packed: false,
        })
    }

    /// Row `r` dequantized into `out` (`cols` values): an embedding lookup.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        blocks::dequantize_row(self.format, &self.row(r), out)
    }

    /// The whole matrix dequantized, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (r, y) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_row(r, y);
        }
        out
    }

    /// `y = x·Wᵀ`: `x` is `m × cols`, `y` is `m × rows`, both row-major, on
    /// the fastest kernels this CPU has.
    pub fn matmul(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_on(Isa::detect(), x, m, y)
    }

    /// [`QMatrix::matmul`] on the kernels of `isa`.
    ///
    /// # Panics
    /// If `isa` is not in [`Isa::available`], or the shapes do not agree.
    pub fn matmul_on(&self, isa: Isa, x: &[f32], m: usize, y: &mut [f32]) {
        matmul_group_on(isa, &[self], x, m, &mut [y])
    }

    /// Rows `rows` of `y = x·Wᵀ` (`y` has `n` columns), `TILE` activation
    /// rows at a time: 8 with AVX-512's 32 vector registers, 4 with AVX2's
    /// 16, where 8 spills (`cargo bench -p vauban-kernels --bench kernels`:
    /// 8 gave VNNI 2-10% more and AVX2 up to 14% less).
    fn product_rows(
        &self,
        isa: Isa,
        acts: &Activations,
        rows: Range<usize>,
        y: &SharedOut,
        n: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.packed && packed::packs(isa) {
            return self.product_groups(acts, rows, y, n);
        }
        match isa {
            Isa::Avx512Vnni => self.product_tiles::<8>(isa, acts, rows, y, n),
            _ => self.product_tiles::<4>(isa, acts, rows, y, n),
        }
    }

    /// [`QMatrix::product_rows`] of a packed matrix on the 512-bit
    /// kernels: each group of 16 rows against tiles of 8 activation rows.
    /// `rows` starts at a group's first row.
    #[cfg(target_arch = "x86_64")]
    fn product_groups(&self, acts: &Activations, rows: Range<usize>, y: &SharedOut, n: usize) {
        const TILE: usize = 8;
        let lanes = packed::LANES;
        debug_assert_eq!(rows.start % lanes, 0);
        let gb = packed::group_bytes(self.format, self.cols);
        let m = acts.rows();
        // The activation rows in runs of ACT_RUN, each run passing over
        // every group of the task's rows before the next: the task's
        // groups and one run stay in L2 (a 2048-wide run of 64 rows is 160
        // KB of 8-bit blocks), where a prompt's every row for each group
        // in turn came from L3 once per group.
        for run in (0..m).step_by(ACT_RUN) {
            let run = run..(run + ACT_RUN).min(m);
            for g in rows.start / lanes..rows.end.div_ceil(lanes) {
                let group = &self.data[g * gb..(g + 1) * gb];
                let valid = (rows.end - g * lanes).min(lanes);
                // SAFETY (all): `packs` held, so the CPU has AVX-512 F, BW
                // and VNNI; the outputs (i, g·16 .. g·16 + valid) are
                // inside y, written by this task alone.
                let out = |i: usize| unsafe { y.0.add(i * n + g * lanes) };
                let mut i = run.start;
                while i + TILE <= run.end {
                    self.group_tile::<TILE>(acts, i, group, out, valid);
                    i += TILE;
                }
                for i in i..run.end {
                    self.group_tile::<1>(acts, i, group, out, valid);
                }
            }
        }
    }

    /// One packed group of rows against activation rows `i..i + K`.
    #[cfg(target_arch = "x86_64")]
    fn group_tile<const K: usize>(
        &self,
        acts: &Activations,
        i: usize,
        group: &[u8],
        out: impl Fn(usize) -> *mut f32,
        valid: usize,
    ) {
        let o: [*mut f32; K] = std::array::from_fn(|k| out(i + k));
        // SAFETY: as in `product_groups`, whose `out` these are.
        match acts.row(i) {
            ActRow::B32(_) => {
                let a = std::array::from_fn(|k| match acts.row(i + k) {
                    ActRow::B32(v) => v,
                    _ => unreachable!("one form of activations per product"),
                });
                unsafe { packed::product_group(self.format, group, a, o, valid) }
            }
            ActRow::B256(_) => {
                let a = std::array::from_fn(|k| match acts.row(i + k) {
                    ActRow::B256(v) => v,
                    _ => unreachable!("one form of activations per product"),
                });
                unsafe { packed::product_group_k(self.format, group, a, o, valid) }
            }
            ActRow::F32(_) => {
                let a = std::array::from_fn(|k| match acts.row(i + k) {
                    ActRow::F32(v) => v,
                    _ => unreachable!("one form of activations per product"),
                });
                unsafe { packed::product_group_float(self.format, group, a, o, valid) }
            }
        }
    }

    fn product_tiles<const TILE: usize>(
        &self,
        isa: Isa,
        acts: &Activations,
        rows: Range<usize>,
        y: &SharedOut,
        n: usize,
    ) {
        let m = acts.rows();
        let mut i = 0;
        while i + TILE <= m {
            let tile: [ActRow<'_>; TILE] = std::array::from_fn(|k| acts.row(i + k));
            for r in rows.clone() {
                let v = dot_rows(isa, self.format, &self.row(r), tile);
                for (k, v) in v.into_iter().enumerate() {
                    // SAFETY: (i + k, r) is inside y, and no other task writes column r.
                    unsafe { y.write((i + k) * n + r, v) };
                }
            }
            i += TILE;
        }
        for i in i..m {
            for r in rows.clone() {
                let [v] = dot_rows(isa, self.format, &self.row(r), [acts.row(i)]);
                // SAFETY: as above.
                unsafe { y.write(i * n + r, v) };
            }
        }
    }
}

/// `ys[j] = x·W_jᵀ` for matrices that read the same input (a block's
/// query, key and value; its gate and up projections), as one job: the
/// input is quantized once per block size, and the rows of all of them are
/// split across the threads together. A decode step's key and value
/// matrices are too small (69 KB for SmolLM2) to be worth a job each.
///
/// # Panics
/// If the matrices' widths differ or a shape does not agree.
pub fn matmul_group(ws: &[&QMatrix], x: &[f32], m: usize, ys: &mut [&mut [f32]]) {
    matmul_group_on(Isa::detect(), ws, x, m, ys)
}

/// [`matmul_group`] on the kernels of `isa`.
pub fn matmul_group_on(isa: Isa, ws: &[&QMatrix], x: &[f32], m: usize, ys: &mut [&mut [f32]]) {
    assert!(
        Isa::available().contains(&isa),
        "{} kernels do not run on this CPU",
        isa.name()
    );
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    let Some(k) = ws.first().map(|w| w.cols) else {
        return;
    };
    assert_eq!(x.len(), m * k, "x is not m × cols");
    for (w, y) in ws.iter().zip(ys.iter()) {
        assert_eq!(w.cols, k, "the matrices of a group have one width");
        assert_eq!(y.len(), m * w.rows, "y is not m × rows");
    }
    // The activations in each form the group's formats take, once each.
    let simd = isa.avx2();
    let forms = [Pairing::Q8x32, Pairing::Q8x256, Pairing::F32].map(|p| {
        ws.iter()
            .any(|w| w.format.pairing() == p)
            .then(|| Activations::quantize(x, m, k, p, simd))
    });
    // Decode (one row): enough tasks to keep every thread busy with some
    // left to take. A prompt: 16 weight rows per task, which stay in L1
    // while every tile of activation rows passes over them.
    let pool = Pool::global();
    let total: usize = ws.iter().map(|w| w.rows).sum();
    // (A multiple of 16: a packed matrix's tasks take whole groups.)
    let chunk = if m == 1 {
        total
            .div_ceil(pool.threads() * 4)
            .max(16)
            .next_multiple_of(16)
    } else if ws.iter().all(|w| w.packed) {
        // Packed: 64 rows (4 groups) a task, which each run of activation
        // rows serves in turn (`product_groups`).
        64
    } else {
        16
    };
    let mut tasks: Vec<(usize, Range<usize>)> = Vec::new();
    for (j, w) in ws.iter().enumerate() {
        tasks.extend(
            (0..w.rows)
                .step_by(chunk)
                .map(|r| (j, r..(r + chunk).min(w.rows))),
        );
    }
    let outs: Vec<SharedOut> = ys.iter_mut().map(|y| SharedOut(y.as_mut_ptr())).collect();
    pool.run(tasks.len(), &|t| {
        let (j, rows) = tasks[t].clone();
        let w = ws[j];
        let acts = match w.format.pairing() {
            Pairing::Q8x32 => forms[0].as_ref(),
            Pairing::Q8x256 => forms[1].as_ref(),
            Pairing::F32 => forms[2].as_ref(),
        };
        w.product_rows(isa, acts.expect("quantized above"), rows, &outs[j], w.rows);
    });
}

/// Activation rows a packed product takes at a time (`product_groups`).
#[cfg(target_arch = "x86_64")]
const ACT_RUN: usize = 64;

/// How far ahead of the weights it multiplies a one-row product (a decode
/// step) asks for the next ones: 8 KiB, 3-4 of a packed K-quant group's
/// blocks. The hardware's prefetcher alone kept the packed K-quant
/// kernels, which do the most work per byte, at 30-52 GB/s from memory;
/// asking ahead took them to 51-81 (`cargo bench -p vauban-kernels --bench
/// kernels`, the 16384 × 8192 matrix, median of 4 runs interleaved with 0,
/// 4 and 16 KiB ahead: Q2_K 30 → 81, Q4_K 52 → 77, Q5_K 35 → 68, Q6_K 39
/// → 51, IQ4_XS 54 → 75, Q4_0 60 → 69, Q8_0 51 → 58, F16 48 → 58 GB/s).
/// A prompt's products reread their weights from cache and ask nothing.
/// The row kernels (AVX2, and AVX-512 for a matrix left unpacked) ask
/// nothing either: asking for the rows 8 KiB ahead took their one-row
/// products from memory from 30-57 GB/s to 17-36 (the same bench, four
/// alternations, Q4_0, Q4_K, Q6_K and Q8_0), where the hardware's
/// prefetcher alone streams them.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_AHEAD: usize = 8 << 10;

/// The output of a product, written by every task at disjoint columns.
struct SharedOut(*mut f32);

// SAFETY: tasks write disjoint elements (each owns a range of weight rows,
// i.e. of output columns), and the product returns only after every task.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `at` is in bounds and no other thread touches it.
    unsafe fn write(&self, at: usize, v: f32) {
        unsafe { *self.0.add(at) = v }
    }
}

/// One weight row against `N` activation rows, on `isa`'s kernels.
#[inline]
fn dot_rows<const N: usize>(isa: Isa, format: Format, w: &[u8], a: [ActRow<'_>; N]) -> [f32; N] {
    match a[0] {
        ActRow::B256(_) => {
            let a = a.map(|r| match r {
                ActRow::B256(v) => v,
                _ => unreachable!("a row of a tile has its tile's form"),
            });
            match isa {
                Isa::Portable => a.map(|a| portable::dot256(format, w, a)),
                // SAFETY: `matmul_on` checked that the CPU has these features.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { x86::avx2_dot256(format, w, a) },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe { x86::vnni_dot256(format, w, a) },
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => unsafe { aarch64::neon_dot256(format, w, a) },
                #[allow(unreachable_patterns)]
                _ => unreachable!("{} kernels on another target", isa.name()),
            }
        }
        ActRow::B32(_) => {
            let a = a.map(|r| match r {
                ActRow::B32(v) => v,
                _ => unreachable!("a row of a tile has its tile's form"),
            });
            match isa {
                Isa::Portable => a.map(|a| portable::dot32(format, w, a)),
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { x86::avx2_dot32(format, w, a) },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512Vnni => unsafe { x86::vnni_dot32(format, w, a) },
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => unsafe { aarch64::neon_dot32(format, w, a) },
                #[allow(unreachable_patterns)]
                _ => unreachable!("{} kernels on another target", isa.name()),
            }
        }
        ActRow::F32(_) => {
            let a = a.map(|r| match r {
                ActRow::F32(v) => v,
                _ => unreachable!("a row of a tile has its tile's form"),
            });
            match isa {
                Isa::Portable => a.map(|a| portable::dot_float(format, w, a)),
                // SAFETY: as above. (The float products have no integer
                // multiply-adds: the VNNI build is AVX2's.)
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::Avx512Vnni => unsafe { x86::avx2_dot_float(format, w, a) },
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => unsafe { aarch64::neon_dot_float(format, w, a) },
                #[allow(unreachable_patterns)]
                _ => unreachable!("{} kernels on another target", isa.name()),
            }
        }
    }
}
