//! GGUF as a file format, for the parts of vauban that are not the candle
//! backend: a model's shape and tokenizer (every backend that loads a GGUF
//! needs them) and f32 values of a direction or control-vector file.
//!
//! Reading goes through vauban's own reader
//! ([`crate::model::gguf_reader`]); what this module exposes holds no
//! candle type ([`GgufFile`], [`Meta`], `Vec<f32>`). Writing ([`write_f32`])
//! uses `candle_core`'s GGUF writer as a library; no backend is involved,
//! so the model description, every backend and the measure commands use
//! this module without reaching into another backend's folder.

use std::io::{Read, Seek};

use candle_core::Device;
use candle_core::quantized::gguf_file::Value as CandleValue;

use crate::model::gguf_reader::{GgufError, GgufReader, Value};

/// An open GGUF file: its header read, its tensor data read on demand.
pub struct GgufFile<R> {
    reader: GgufReader<R>,
}

/// One metadata value, converted on request; a wrong type is an error
/// message saying what the value is.
#[derive(Clone, Copy)]
pub struct Meta<'a>(&'a Value);

/// The message of a value that is not of the type asked for.
fn wrong(expected: &str, found: &Value) -> String {
    format!("expected {expected}, found {}", found.describe())
}

impl<'a> Meta<'a> {
    /// A string value.
    pub fn to_str(self) -> Result<&'a str, String> {
        self.0.as_str().ok_or_else(|| wrong("a string", self.0))
    }

    /// An unsigned integer that fits u32 (u8, u16, u32 and u64 are
    /// accepted).
    pub fn to_u32(self) -> Result<u32, String> {
        match self.0 {
            Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_) => {
                self.0.as_u64().and_then(|v| u32::try_from(v).ok())
            }
            _ => None,
        }
        .ok_or_else(|| wrong("an unsigned integer that fits u32", self.0))
    }

    /// A float value.
    pub fn to_f32(self) -> Result<f32, String> {
        match self.0 {
            Value::F32(v) => Ok(*v),
            v => Err(wrong("an f32", v)),
        }
    }

    /// A boolean value.
    pub fn to_bool(self) -> Result<bool, String> {
        match self.0 {
            Value::Bool(v) => Ok(*v),
            v => Err(wrong("a bool", v)),
        }
    }

    /// The length of an array value; `None` for a scalar.
    pub fn array_len(self) -> Option<usize> {
        self.0.as_array().map(<[Value]>::len)
    }

    /// The elements of an array, each converted by `f`, or the first
    /// element `f` refuses.
    fn each<T>(self, what: &str, f: impl Fn(&'a Value) -> Option<T>) -> Result<Vec<T>, String> {
        let values = self
            .0
            .as_array()
            .ok_or_else(|| wrong(&format!("an array of {what}"), self.0))?;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| f(v).ok_or_else(|| format!("element {i}: {}", wrong(what, v))))
            .collect()
    }

    /// An array of strings.
    pub fn strings(self) -> Result<Vec<String>, String> {
        self.each("string", |v| v.as_str().map(str::to_owned))
    }

    /// An array of f32.
    pub fn f32s(self) -> Result<Vec<f32>, String> {
        self.each("f32", |v| match v {
            Value::F32(x) => Some(*x),
            _ => None,
        })
    }

    /// An array of i32.
    pub fn i32s(self) -> Result<Vec<i32>, String> {
        self.each("i32", |v| match v {
            Value::I32(x) => Some(*x),
            _ => None,
        })
    }
}

impl<R: Read + Seek> GgufFile<R> {
    /// Reads the header (metadata and tensor table) and checks every
    /// tensor against the file's size; no tensor data.
    pub fn read(reader: R) -> Result<Self, String> {
        let reader = GgufReader::open(reader).map_err(|e| e.to_string())?;
        Ok(GgufFile { reader })
    }

    /// The metadata value under `key`.
    pub fn meta(&self, key: &str) -> Option<Meta<'_>> {
        self.reader.metadata(key).map(Meta)
    }

    /// Every metadata key, sorted.
    pub fn meta_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.reader.metadata_keys().map(str::to_owned).collect();
        keys.sort();
        keys
    }

    /// Whether the file holds tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.reader.tensor(name).is_some()
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .reader
            .tensors()
            .iter()
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The shape of tensor `name`, as the header states it (row-major:
    /// slowest dimension first).
    pub fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.reader.tensor(name).map(|t| t.shape.clone())
    }

    /// Tensor `name` as f32 values in row-major order, dequantized on the
    /// CPU by vauban whatever its stored type (F32, F16, BF16 and every
    /// format vauban's kernels run; others are refused naming the type).
    /// The message does not repeat the tensor's name: callers name it.
    pub fn read_f32(&mut self, name: &str) -> Result<Vec<f32>, String> {
        match self.reader.read_f32(name) {
            Ok(Some(values)) => Ok(values),
            Ok(None) => Err("is not in the file".into()),
            Err(GgufError::Tensor { problem, .. }) => Err(problem.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The reader itself, for the model loaders (tensor bytes as stored).
    pub(crate) fn into_reader(self) -> GgufReader<R> {
        self.reader
    }
}

/// A metadata value to write.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Str(String),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
}

impl MetaValue {
    fn to_candle(&self) -> CandleValue {
        match self {
            MetaValue::Str(s) => CandleValue::String(s.clone()),
            MetaValue::U32(v) => CandleValue::U32(*v),
            MetaValue::I32(v) => CandleValue::I32(*v),
            MetaValue::F32(v) => CandleValue::F32(*v),
            MetaValue::Bool(v) => CandleValue::Bool(*v),
        }
    }
}

/// Writes a GGUF file of f32 tensors (`(name, shape, row-major values)`)
/// with the given metadata: the form of llama.cpp's control vectors.
pub fn write_f32<W: std::io::Write + Seek>(
    w: &mut W,
    metadata: &[(&str, MetaValue)],
    tensors: &[(&str, &[usize], &[f32])],
) -> Result<(), String> {
    use candle_core::Tensor;
    use candle_core::quantized::{GgmlDType, QTensor};
    let values: Vec<(&str, CandleValue)> =
        metadata.iter().map(|(k, v)| (*k, v.to_candle())).collect();
    let quantized = tensors
        .iter()
        .map(|(name, shape, data)| {
            Tensor::from_slice(data, *shape, &Device::Cpu)
                .and_then(|t| QTensor::quantize(&t, GgmlDType::F32))
                .map(|q| (*name, q))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let meta: Vec<(&str, &CandleValue)> = values.iter().map(|(k, v)| (*k, v)).collect();
    let refs: Vec<(&str, &QTensor)> = quantized.iter().map(|(n, q)| (*n, q)).collect();
    candle_core::quantized::gguf_file::write(w, &meta, &refs).map_err(|e| e.to_string())
}
