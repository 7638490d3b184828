//! Host-side tensors as the trace sees them: a dtype, a shape, little-endian
//! bytes, and the summary every tensor artifact carries.
//!
//! This is deliberately not a compute tensor (that is the executor's job):
//! it is the boundary form in which a backend hands a tensor to the trace,
//! and in which the bundle stores it.

use std::fmt;

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// Element types a trace can store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float (`f32`).
    F32,
    /// 16-bit IEEE half-precision float (`f16`).
    F16,
    /// 16-bit brain float: f32's exponent range, 8 bits of mantissa (`bf16`).
    Bf16,
    /// 64-bit IEEE float (`f64`).
    F64,
    /// 32-bit signed integer (`i32`).
    I32,
    /// 64-bit signed integer (`i64`).
    I64,
    /// 32-bit unsigned integer (`u32`), e.g. token ids.
    U32,
    /// 8-bit unsigned integer (`u8`).
    U8,
}

impl DType {
    /// Whether values of this type are integers (token ids, counts).
    pub fn is_integer(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U32 | DType::U8)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// The matching safetensors dtype.
    pub fn to_safetensors(self) -> safetensors::Dtype {
        use safetensors::Dtype as S;
        match self {
            DType::F32 => S::F32,
            DType::F16 => S::F16,
            DType::Bf16 => S::BF16,
            DType::F64 => S::F64,
            DType::I32 => S::I32,
            DType::I64 => S::I64,
            DType::U32 => S::U32,
            DType::U8 => S::U8,
        }
    }

    /// The dtype for a safetensors dtype, if a trace can hold it.
    pub fn from_safetensors(dtype: safetensors::Dtype) -> Option<DType> {
        use safetensors::Dtype as S;
        Some(match dtype {
            S::F32 => DType::F32,
            S::F16 => DType::F16,
            S::BF16 => DType::Bf16,
            S::F64 => DType::F64,
            S::I32 => DType::I32,
            S::I64 => DType::I64,
            S::U32 => DType::U32,
            S::U8 => DType::U8,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U32 => "u32",
            DType::U8 => "u8",
        })
    }
}

/// A tensor's byte length does not match its dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tensor of dtype {dtype} and shape {shape:?} needs {expected} bytes but has {actual}")]
pub struct ShapeMismatch {
    /// The tensor's element type.
    pub dtype: DType,
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// The byte length the dtype and shape call for.
    pub expected: usize,
    /// The byte length given.
    pub actual: usize,
}

/// Borrowed tensor bytes with their dtype and shape (from memory or from a
/// memory-mapped bundle).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorRef<'a> {
    /// The element type.
    pub dtype: DType,
    /// The dimensions, outermost first.
    pub shape: &'a [usize],
    /// The elements, row-major and little-endian; `numel × dtype.size()`
    /// bytes.
    pub bytes: &'a [u8],
}

/// An owned tensor handed to the trace by a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    /// The element type.
    pub dtype: DType,
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The elements, row-major and little-endian; [`TensorData::new`]
    /// checks the length against the dtype and shape.
    pub bytes: Vec<u8>,
}

impl TensorData {
    /// A tensor from raw little-endian bytes; the length must match.
    pub fn new(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Result<Self, ShapeMismatch> {
        let expected = shape.iter().product::<usize>() * dtype.size();
        if expected != bytes.len() {
            return Err(ShapeMismatch {
                dtype,
                shape,
                expected,
                actual: bytes.len(),
            });
        }
        Ok(TensorData {
            dtype,
            shape,
            bytes,
        })
    }

    /// An f32 tensor from values; the count must match the shape.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self, ShapeMismatch> {
        // Little-endian hosts hold f32s as the format stores them: one copy.
        #[cfg(target_endian = "little")]
        let bytes = bytemuck::cast_slice::<f32, u8>(values).to_vec();
        #[cfg(not(target_endian = "little"))]
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData::new(DType::F32, shape, bytes)
    }

    /// An f32 tensor of `shape` whose values `fill` writes, straight into
    /// the bytes the tensor keeps where they are aligned for f32 (a large
    /// allocation always is), so a tensor computed on the host is not
    /// copied again.
    pub fn f32_filled(shape: Vec<usize>, fill: impl FnOnce(&mut [f32])) -> Self {
        let n: usize = shape.iter().product();
        let mut bytes = vec![0u8; n * 4];
        match bytemuck::try_cast_slice_mut::<u8, f32>(&mut bytes) {
            Ok(values) => {
                fill(values);
                #[cfg(not(target_endian = "little"))]
                for v in values.iter_mut() {
                    *v = f32::from_bits(v.to_bits().to_le());
                }
                TensorData::new(DType::F32, shape, bytes).expect("n values of 4 bytes")
            }
            Err(_) => {
                let mut values = vec![0f32; n];
                fill(&mut values);
                TensorData::from_f32(shape, &values).expect("n values")
            }
        }
    }

    /// A u32 tensor (token ids) from values; the count must match the shape.
    pub fn from_u32(shape: Vec<usize>, values: &[u32]) -> Result<Self, ShapeMismatch> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData::new(DType::U32, shape, bytes)
    }

    /// A borrowed view.
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.bytes,
        }
    }
}

impl TensorRef<'_> {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Element `i` widened to f64.
    fn value(&self, i: usize) -> f64 {
        let b = &self.bytes[i * self.dtype.size()..(i + 1) * self.dtype.size()];
        match self.dtype {
            DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::F16 => f16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            DType::Bf16 => bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::U8 => b[0] as f64,
        }
    }

    /// All elements widened to f32 (for small tensors and tests).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.value(i) as f32).collect()
    }

    /// Element `i` widened to f64, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<f64> {
        (i < self.numel()).then(|| self.value(i))
    }

    /// Calls `f` with every element widened to f64, in order; the dtype is
    /// matched once, not per element.
    fn for_each_value(&self, mut f: impl FnMut(f64)) {
        fn each<const N: usize>(bytes: &[u8], mut g: impl FnMut([u8; N])) {
            for chunk in bytes.chunks_exact(N) {
                g(chunk.try_into().expect("chunks_exact yields N bytes"));
            }
        }
        match self.dtype {
            DType::F32 => each(self.bytes, |b| f(f32::from_le_bytes(b) as f64)),
            DType::F16 => each(self.bytes, |b| f(f16::from_le_bytes(b).to_f64())),
            DType::Bf16 => each(self.bytes, |b| f(bf16::from_le_bytes(b).to_f64())),
            DType::F64 => each(self.bytes, |b| f(f64::from_le_bytes(b))),
            DType::I32 => each(self.bytes, |b| f(i32::from_le_bytes(b) as f64)),
            DType::I64 => each(self.bytes, |b| f(i64::from_le_bytes(b) as f64)),
            DType::U32 => each(self.bytes, |b| f(u32::from_le_bytes(b) as f64)),
            DType::U8 => self.bytes.iter().for_each(|&b| f(b as f64)),
        }
    }

    /// Shape, dtype and statistics over the finite values, in f64. The
    /// values are taken in chunks of 1024: each chunk's mean and squared
    /// deviations in two passes, the chunks merged with Chan's update. That
    /// stays accurate when the mean is large next to the spread (a plain
    /// sum of squares would cancel) and, unlike Welford's per-element
    /// update, has no division per element (a division's latency made
    /// summarising 64 positions of logits cost about as much as the forward).
    pub fn summarize(&self) -> TensorSummary {
        // f32 bytes that are aligned on a little-endian host are the values.
        #[cfg(target_endian = "little")]
        if self.dtype == DType::F32
            && let Ok(values) = bytemuck::try_cast_slice::<u8, f32>(self.bytes)
        {
            return summarize_f32(self.shape, values);
        }
        let mut all = Chunked::default();
        self.for_each_value(|v| all.push(v));
        all.finish(self.shape.to_vec(), self.dtype, self.numel())
    }
}

/// The statistics of an f32 tensor held as values (what a host copy of a
/// model's tensor is), as [`TensorRef::summarize`] gives for its bytes.
/// Chunks whose values are all finite (nearly always) take a path the
/// compiler vectorises: eight independent accumulators per statistic.
///
/// A tensor of more than [`SUMMARY_PART`] values (a vocabulary's logits at
/// every position: 3M values) is summarised in parts of that size on the
/// machine's threads, the parts' moments merged in order. The parts are
/// fixed by the length alone, so the figures do not depend on the threads.
pub fn summarize_f32(shape: &[usize], values: &[f32]) -> TensorSummary {
    let parts: Vec<&[f32]> = values.chunks(SUMMARY_PART).collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len());
    // Each thread takes a run of consecutive parts; the runs come back in
    // order. One part (nearly every tensor) starts no thread.
    let per_thread = parts.len().div_ceil(threads.max(1));
    let moments: Vec<Moments> = if threads <= 1 {
        parts.iter().map(|p| moments_f32(p)).collect()
    } else {
        std::thread::scope(|s| {
            let runs: Vec<_> = parts
                .chunks(per_thread.max(1))
                .map(|run| s.spawn(move || run.iter().map(|p| moments_f32(p)).collect::<Vec<_>>()))
                .collect();
            runs.into_iter()
                .flat_map(|h| h.join().expect("a summary thread does not panic"))
                .collect()
        })
    };
    let mut all = Chunked::default();
    for m in &moments {
        all.all.merge(m);
    }
    all.finish(shape.to_vec(), DType::F32, values.len())
}

/// The values a summary takes in one part (see [`summarize_f32`]): 256 Ki
/// (small enough that 3M values split evenly over two threads), a whole
/// number of [`Chunked::CHUNK`]s.
pub const SUMMARY_PART: usize = 1 << 18;

/// The moments of the finite values among `values`.
fn moments_f32(values: &[f32]) -> Moments {
    let mut all = Chunked::default();
    for chunk in values.chunks(Chunked::CHUNK) {
        match chunk.iter().all(|v| v.is_finite()) {
            true => all.all.merge(&Moments::of_finite_f32(chunk)),
            false => {
                for &v in chunk {
                    all.push(v as f64);
                }
            }
        }
    }
    all.all.merge(&Moments::of(&all.chunk));
    all.all
}

/// Finite values taken in chunks of 1024, each chunk's moments merged.
struct Chunked {
    all: Moments,
    chunk: Vec<f64>,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            all: Moments::default(),
            chunk: Vec::with_capacity(Self::CHUNK),
        }
    }
}

impl Chunked {
    const CHUNK: usize = 1024;

    #[inline]
    fn push(&mut self, v: f64) {
        if v.is_finite() {
            self.chunk.push(v);
            if self.chunk.len() == Self::CHUNK {
                self.all.merge(&Moments::of(&self.chunk));
                self.chunk.clear();
            }
        }
    }

    fn finish(mut self, shape: Vec<usize>, dtype: DType, numel: usize) -> TensorSummary {
        self.all.merge(&Moments::of(&self.chunk));
        let all = self.all;
        let finite = all.count > 0;
        TensorSummary {
            shape,
            dtype,
            numel: numel as u64,
            non_finite: numel as u64 - all.count,
            mean: finite.then_some(all.mean),
            std: finite.then(|| (all.m2 / all.count as f64).sqrt()),
            min: finite.then_some(all.min),
            max: finite.then_some(all.max),
            l2_norm: finite.then(|| all.sum_sq.sqrt()),
        }
    }
}

/// Count, mean, squared deviations from the mean, sum of squares and range
/// of some finite values.
#[derive(Debug, Clone, Copy)]
struct Moments {
    count: u64,
    mean: f64,
    m2: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
}

impl Default for Moments {
    fn default() -> Self {
        Moments {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            sum_sq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Moments {
    /// Two passes over `xs`: the mean, then the deviations from it.
    fn of(xs: &[f64]) -> Moments {
        if xs.is_empty() {
            return Moments::default();
        }
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let (mut m2, mut sum_sq) = (0.0, 0.0);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for &x in xs {
            m2 += (x - mean) * (x - mean);
            sum_sq += x * x;
            min = min.min(x);
            max = max.max(x);
        }
        Moments {
            count: xs.len() as u64,
            mean,
            m2,
            sum_sq,
            min,
            max,
        }
    }

    /// [`Moments::of`] for finite f32 values, in eight lanes: the sums are
    /// the same up to the order of f64 additions.
    fn of_finite_f32(xs: &[f32]) -> Moments {
        const L: usize = 8;
        if xs.is_empty() {
            return Moments::default();
        }
        let (body, tail) = xs.split_at(xs.len() - xs.len() % L);
        let mut sum = [0f64; L];
        for c in body.chunks_exact(L) {
            for i in 0..L {
                sum[i] += c[i] as f64;
            }
        }
        let total = sum.iter().sum::<f64>() + tail.iter().map(|&v| v as f64).sum::<f64>();
        let mean = total / xs.len() as f64;
        let (mut m2, mut sq) = ([0f64; L], [0f64; L]);
        let (mut lo, mut hi) = ([f32::INFINITY; L], [f32::NEG_INFINITY; L]);
        for c in body.chunks_exact(L) {
            for i in 0..L {
                let x = c[i] as f64;
                m2[i] += (x - mean) * (x - mean);
                sq[i] += x * x;
                lo[i] = if c[i] < lo[i] { c[i] } else { lo[i] };
                hi[i] = if c[i] > hi[i] { c[i] } else { hi[i] };
            }
        }
        let mut m = Moments {
            count: xs.len() as u64,
            mean,
            m2: m2.iter().sum(),
            sum_sq: sq.iter().sum(),
            min: lo.iter().fold(f64::INFINITY, |a, &b| a.min(b as f64)),
            max: hi.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64)),
        };
        for &v in tail {
            let x = v as f64;
            m.m2 += (x - mean) * (x - mean);
            m.sum_sq += x * x;
            m.min = m.min.min(x);
            m.max = m.max.max(x);
        }
        m
    }

    /// Adds `other`'s values (Chan, Golub and LeVeque's pairwise update).
    fn merge(&mut self, other: &Moments) {
        if other.count == 0 {
            return;
        }
        let (a, b) = (self.count as f64, other.count as f64);
        let n = a + b;
        let delta = other.mean - self.mean;
        self.mean += delta * (b / n);
        self.m2 += other.m2 + delta * delta * (a * b / n);
        self.sum_sq += other.sum_sq;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
    }
}

/// What every tensor artifact records, whether or not its raw data is kept.
/// Statistics are over the finite elements; `non_finite` counts the rest, and
/// the statistics are absent when no element is finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSummary {
    /// The tensor's dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The tensor's element type.
    pub dtype: DType,
    /// Number of elements: the product of `shape` (checked on validation).
    pub numel: u64,
    /// Elements that are NaN or infinite, left out of the statistics.
    pub non_finite: u64,
    /// Mean of the finite elements.
    pub mean: Option<f64>,
    /// Population standard deviation of the finite elements (divided by
    /// their count, not count − 1).
    pub std: Option<f64>,
    /// Smallest finite element.
    pub min: Option<f64>,
    /// Largest finite element.
    pub max: Option<f64>,
    /// Euclidean norm of the finite elements: the square root of their
    /// sum of squares.
    pub l2_norm: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_hand_computed_statistics() {
        // values 1, 2, 3, 4: mean 2.5, population std sqrt(1.25), l2 sqrt(30)
        let t = TensorData::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let s = t.as_ref().summarize();
        assert_eq!(s.shape, vec![2, 2]);
        assert_eq!(s.numel, 4);
        assert_eq!(s.mean, Some(2.5));
        assert!((s.std.unwrap() - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max), (Some(1.0), Some(4.0)));
        assert!((s.l2_norm.unwrap() - 30f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.non_finite, 0);
    }

    #[test]
    fn non_finite_values_are_counted_not_averaged() {
        let t = TensorData::from_f32(vec![3], &[1.0, f32::NAN, 3.0]).unwrap();
        let s = t.as_ref().summarize();
        assert_eq!(s.non_finite, 1);
        assert_eq!(s.mean, Some(2.0));
        let all_nan = TensorData::from_f32(vec![1], &[f32::NAN]).unwrap();
        assert_eq!(all_nan.as_ref().summarize().mean, None);
    }

    #[test]
    fn half_precision_values_are_widened() {
        let bytes = [f16::from_f32(1.5), f16::from_f32(-0.5)]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = TensorData::new(DType::F16, vec![2], bytes).unwrap();
        assert_eq!(t.as_ref().to_f32_vec(), vec![1.5, -0.5]);
    }

    #[test]
    fn the_spread_survives_a_large_mean() {
        // 1e9 + {0, 1, 2}: std sqrt(2/3); a sum of squares in f64 would lose it.
        let values = [1e9, 1e9 + 1.0, 1e9 + 2.0];
        let bytes = values.iter().flat_map(|v: &f64| v.to_le_bytes()).collect();
        let t = TensorData::new(DType::F64, vec![3], bytes).unwrap();
        let s = t.as_ref().summarize();
        assert!(
            (s.std.unwrap() - (2.0f64 / 3.0).sqrt()).abs() < 1e-9,
            "{:?}",
            s.std
        );
        assert_eq!(s.mean, Some(1e9 + 1.0));
    }

    /// Across many chunks, with non-finite values among them, the merged
    /// statistics equal a plain two-pass computation over all the values.
    #[test]
    fn chunked_statistics_match_a_two_pass_computation() {
        check_against_two_pass(100);
        // Several parts, summarised on the machine's threads and merged.
        check_against_two_pass(SUMMARY_PART * 3 / 100 + 77);
    }

    fn check_against_two_pass(rows: usize) {
        let len = rows * 100;
        // A deterministic spread around a large offset, a NaN every 777.
        let values: Vec<f32> = (0..len as u32)
            .map(|i| match i % 777 {
                5 => f32::NAN,
                _ => 300.0 + ((i.wrapping_mul(2_654_435_761) >> 16) % 1000) as f32 / 37.0,
            })
            .collect();
        let t = TensorData::from_f32(vec![rows, 100], &values).unwrap();
        let s = t.as_ref().summarize();
        assert_eq!(s, summarize_f32(&[rows, 100], &values));
        let finite: Vec<f64> = values
            .iter()
            .filter(|v| v.is_finite())
            .map(|&v| v as f64)
            .collect();
        // Compensated sums (Neumaier's): over 3M values a plain f64 sum
        // is itself off by about 1e-12, the tolerance below.
        let sum = |xs: &mut dyn Iterator<Item = f64>| {
            let (mut s, mut c) = (0f64, 0f64);
            for x in xs {
                let t = s + x;
                c += if s.abs() >= x.abs() {
                    (s - t) + x
                } else {
                    (x - t) + s
                };
                s = t;
            }
            s + c
        };
        let n = finite.len() as f64;
        let mean = sum(&mut finite.iter().copied()) / n;
        let var = sum(&mut finite.iter().map(|v| (v - mean) * (v - mean))) / n;
        let l2 = sum(&mut finite.iter().map(|v| v * v)).sqrt();
        assert_eq!(s.non_finite, (len - finite.len()) as u64);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
        assert!(close(s.mean.unwrap(), mean), "{:?} against {mean}", s.mean);
        assert!(
            close(s.std.unwrap(), var.sqrt()),
            "{:?} against {}",
            s.std,
            var.sqrt()
        );
        assert!(
            close(s.l2_norm.unwrap(), l2),
            "{:?} against {l2}",
            s.l2_norm
        );
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!((s.min, s.max), (Some(min), Some(max)));
    }

    #[test]
    fn a_filled_tensor_holds_what_was_written() {
        let t = TensorData::f32_filled(vec![2, 3], |v| {
            v.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = i as f32 - 2.5)
        });
        let want = TensorData::from_f32(vec![2, 3], &[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).unwrap();
        assert_eq!(t, want);
    }

    #[test]
    fn byte_length_must_match_shape() {
        let err = TensorData::new(DType::F32, vec![2, 3], vec![0; 20]).unwrap_err();
        assert!(
            err.to_string().contains("needs 24 bytes but has 20"),
            "{err}"
        );
    }
}
