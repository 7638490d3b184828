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
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData::new(DType::F32, shape, bytes)
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
    /// variance uses Welford's update, which stays accurate when the mean is
    /// large next to the spread (a plain sum of squares would cancel).
    pub fn summarize(&self) -> TensorSummary {
        let n = self.numel();
        let (mut count, mut mean, mut m2, mut sum_sq) = (0u64, 0.0f64, 0.0f64, 0.0f64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        self.for_each_value(|v| {
            if !v.is_finite() {
                return;
            }
            count += 1;
            let delta = v - mean;
            mean += delta / count as f64;
            m2 += delta * (v - mean);
            sum_sq += v * v;
            min = min.min(v);
            max = max.max(v);
        });
        let finite = count > 0;
        TensorSummary {
            shape: self.shape.to_vec(),
            dtype: self.dtype,
            numel: n as u64,
            non_finite: n as u64 - count,
            mean: finite.then_some(mean),
            std: finite.then(|| (m2 / count as f64).sqrt()),
            min: finite.then_some(min),
            max: finite.then_some(max),
            l2_norm: finite.then(|| sum_sq.sqrt()),
        }
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

    #[test]
    fn byte_length_must_match_shape() {
        let err = TensorData::new(DType::F32, vec![2, 3], vec![0; 20]).unwrap_err();
        assert!(
            err.to_string().contains("needs 24 bytes but has 20"),
            "{err}"
        );
    }
}
