//! GGUF as a file format, for the parts of vauban that are not the candle
//! backend: a model's shape and tokenizer (every backend that loads a GGUF
//! needs them) and f32 values of a direction or control-vector file.
//!
//! The parser is candle's (`candle_core::quantized::gguf_file`), so this
//! module lives with the candle backend; what it exposes holds no candle
//! type ([`GgufFile`], [`Meta`], `Vec<f32>`), and a backend built without
//! candle would swap the reader behind the same functions.

use std::io::{Read, Seek};

use candle_core::Device;
use candle_core::quantized::gguf_file::{Content, Value};

/// An open GGUF file: its header read, its tensor data read on demand.
pub struct GgufFile<R> {
    content: Content,
    reader: R,
}

/// One metadata value, converted on request; a wrong type is an error
/// message saying what the value is.
#[derive(Clone, Copy)]
pub struct Meta<'a>(&'a Value);

impl<'a> Meta<'a> {
    /// A string value.
    pub fn to_str(self) -> Result<&'a str, String> {
        self.0
            .to_string()
            .map(String::as_str)
            .map_err(|e| e.to_string())
    }

    /// An unsigned integer that fits u32 (u8, u16 and u32 are accepted).
    pub fn to_u32(self) -> Result<u32, String> {
        self.0.to_u32().map_err(|e| e.to_string())
    }

    /// A float value.
    pub fn to_f32(self) -> Result<f32, String> {
        self.0.to_f32().map_err(|e| e.to_string())
    }

    /// A boolean value.
    pub fn to_bool(self) -> Result<bool, String> {
        self.0.to_bool().map_err(|e| e.to_string())
    }

    /// The length of an array value; `None` for a scalar.
    pub fn array_len(self) -> Option<usize> {
        self.0.to_vec().ok().map(Vec::len)
    }

    /// An array of strings.
    pub fn strings(self) -> Result<Vec<String>, String> {
        self.0
            .to_vec()
            .and_then(|v| v.iter().map(|s| s.to_string().cloned()).collect())
            .map_err(|e| e.to_string())
    }

    /// An array of f32.
    pub fn f32s(self) -> Result<Vec<f32>, String> {
        self.0
            .to_vec()
            .and_then(|v| v.iter().map(Value::to_f32).collect())
            .map_err(|e| e.to_string())
    }

    /// An array of i32.
    pub fn i32s(self) -> Result<Vec<i32>, String> {
        self.0
            .to_vec()
            .and_then(|v| v.iter().map(Value::to_i32).collect())
            .map_err(|e| e.to_string())
    }
}

impl<R: Read + Seek> GgufFile<R> {
    /// Reads the header (metadata and tensor table); no tensor data.
    pub fn read(mut reader: R) -> Result<Self, String> {
        let content = Content::read(&mut reader).map_err(|e| e.to_string())?;
        Ok(GgufFile { content, reader })
    }

    /// The metadata value under `key`.
    pub fn meta(&self, key: &str) -> Option<Meta<'_>> {
        self.content.metadata.get(key).map(Meta)
    }

    /// Every metadata key, sorted.
    pub fn meta_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.content.metadata.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Whether the file holds tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.content.tensor_infos.keys().cloned().collect();
        names.sort();
        names
    }

    /// The shape of tensor `name`, as the header states it.
    pub fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.content
            .tensor_infos
            .get(name)
            .map(|t| t.shape.dims().to_vec())
    }

    /// Tensor `name` as f32 values in row-major order, dequantized on the
    /// CPU whatever its stored type.
    pub fn read_f32(&mut self, name: &str) -> Result<Vec<f32>, String> {
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .and_then(|q| q.dequantize(&Device::Cpu))
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| e.to_string())
    }

    /// The parsed header and the reader, for the candle loader.
    pub(crate) fn into_parts(self) -> (Content, R) {
        (self.content, self.reader)
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
    fn to_candle(&self) -> Value {
        match self {
            MetaValue::Str(s) => Value::String(s.clone()),
            MetaValue::U32(v) => Value::U32(*v),
            MetaValue::I32(v) => Value::I32(*v),
            MetaValue::F32(v) => Value::F32(*v),
            MetaValue::Bool(v) => Value::Bool(*v),
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
    let values: Vec<(&str, Value)> = metadata.iter().map(|(k, v)| (*k, v.to_candle())).collect();
    let quantized = tensors
        .iter()
        .map(|(name, shape, data)| {
            Tensor::from_slice(data, *shape, &Device::Cpu)
                .and_then(|t| QTensor::quantize(&t, GgmlDType::F32))
                .map(|q| (*name, q))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let meta: Vec<(&str, &Value)> = values.iter().map(|(k, v)| (*k, v)).collect();
    let refs: Vec<(&str, &QTensor)> = quantized.iter().map(|(n, q)| (*n, q)).collect();
    candle_core::quantized::gguf_file::write(w, &meta, &refs).map_err(|e| e.to_string())
}
