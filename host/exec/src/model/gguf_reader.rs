//! vauban's own GGUF reader: the header (metadata, tensor table) parsed
//! and checked at open, a tensor's bytes as stored, and its values as f32
//! whatever vauban can dequantize.
//!
//! candle's reader refuses a whole file when one tensor has a type it does
//! not know (`IQ4_NL`, `IQ4_XS`, ...), so a file people ship could not even
//! be opened. Here every ggml type id is in one table ([`GgmlType`]), an
//! id outside it still parses (the tensor is recorded as "unknown type N",
//! and only reading it is refused), and the block formats are whatever
//! `vauban_kernels::Format::from_ggml` says vauban has kernels for, so a
//! format added there is read here without an edit.
//!
//! Every problem a file can have is found at open, before any forward
//! pass, and names the tensor it concerns (the caller adds the file:
//! [`GgufError::in_file`]): a row that is not whole blocks, data past the
//! end of the file, an unaligned offset, a duplicate name. A length or a
//! count the rest of the file cannot hold is an error, never an
//! allocation.

use std::collections::HashMap;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use vauban_kernels::Format;

use super::ModelError;

/// The file's first four bytes.
const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Arrays nested deeper are refused: it bounds the parser's recursion,
/// and no writer nests them at all in practice.
const MAX_DEPTH: usize = 64;
/// The fewest bytes a metadata entry (key length, value type, one byte)
/// and a tensor info (name length, rank, type, offset) take: what bounds
/// the counts the header declares by the file's size.
const MIN_ENTRY: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;

/// Every ggml type: id (ggml.h's `enum ggml_type`), name (the enum's
/// `GGML_TYPE_` suffix, as llama.cpp's gguf-py spells it), values per
/// block and bytes per block, as ggml.c's `type_traits` has them (the
/// size of each `block_*` struct). gguf-py's `GGML_QUANT_SIZES` (the copy
/// `scripts/setup.sh` installs with llama.cpp's converter) agrees but for
/// `Q8_1`, where it keeps the 40 bytes of the old f32 `d` and `s`: ggml's
/// block has been two f16 and 32 quants, 36 bytes, since 2023 (and
/// candle's writer writes that). Ids 4 and 5 (the removed `Q4_2`, `Q4_3`)
/// and 31 to 33 (removed `Q4_0_4_4` and kin) are gone from ggml.
static TYPES: [(u32, &str, usize, usize); 35] = [
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
    (42, "Q2_0", 64, 18),
];

/// A tensor's type, by the id its GGUF header stores: one of ggml's
/// (named and sized by the table above) or an id vauban does not know,
/// which a file may hold for a tensor vauban never reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(u32);

impl GgmlType {
    /// 32-bit floats.
    pub const F32: GgmlType = GgmlType(0);
    /// IEEE half floats.
    pub const F16: GgmlType = GgmlType(1);
    /// bfloat16.
    pub const BF16: GgmlType = GgmlType(30);

    /// The type a tensor header's id stands for.
    pub fn from_id(id: u32) -> GgmlType {
        GgmlType(id)
    }

    /// The id as the file stores it.
    pub fn id(self) -> u32 {
        self.0
    }

    fn entry(self) -> Option<&'static (u32, &'static str, usize, usize)> {
        TYPES.iter().find(|t| t.0 == self.0)
    }

    /// ggml's name (`Q4_K`, `IQ4_XS`); `None` for an id vauban does not know.
    pub fn name(self) -> Option<&'static str> {
        self.entry().map(|t| t.1)
    }

    /// `(values, bytes)` of one block; `None` for an id vauban does not know.
    pub fn block(self) -> Option<(usize, usize)> {
        self.entry().map(|t| (t.2, t.3))
    }

    /// The block format vauban's kernels run, if they run this type.
    pub fn format(self) -> Option<Format> {
        Format::from_ggml(self.0)
    }

    /// Whether [`GgufReader::read_f32`] reads it: the float types
    /// directly, every kernel format through its dequantization.
    pub fn reads_as_f32(self) -> bool {
        matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || self.format().is_some()
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown type {}", self.0),
        }
    }
}

/// The types vauban reads as f32 and runs, for messages: `F32, F16, BF16`
/// and every format vauban's kernels have (`Format::ALL`), each once.
pub fn supported_types() -> String {
    let mut names = vec!["F32", "F16", "BF16"];
    for f in Format::ALL {
        if !names.contains(&f.name()) {
            names.push(f.name());
        }
    }
    names.join(", ")
}

/// One metadata value, of any GGUF value type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// The elements, one type for all as the file declares (nested arrays
    /// included).
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// GGUF's name of its type (`u32`, `string`, `array`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// The value for an error message: its type and, for a scalar, the
    /// value itself (a long string cut short).
    pub fn describe(&self) -> String {
        match self {
            Value::U8(v) => format!("u8 {v}"),
            Value::I8(v) => format!("i8 {v}"),
            Value::U16(v) => format!("u16 {v}"),
            Value::I16(v) => format!("i16 {v}"),
            Value::U32(v) => format!("u32 {v}"),
            Value::I32(v) => format!("i32 {v}"),
            Value::F32(v) => format!("f32 {v}"),
            Value::Bool(v) => format!("bool {v}"),
            Value::U64(v) => format!("u64 {v}"),
            Value::I64(v) => format!("i64 {v}"),
            Value::F64(v) => format!("f64 {v}"),
            Value::String(s) if s.chars().count() > 40 => {
                format!("string {:?}…", s.chars().take(40).collect::<String>())
            }
            Value::String(s) => format!("string {s:?}"),
            Value::Array(v) => match v.first() {
                Some(first) => format!("array of {} {}", v.len(), first.type_name()),
                None => "empty array".into(),
            },
        }
    }

    /// The value of an integer type if it is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::U64(v) => v,
            Value::I8(v) => u64::try_from(v).ok()?,
            Value::I16(v) => u64::try_from(v).ok()?,
            Value::I32(v) => u64::try_from(v).ok()?,
            Value::I64(v) => u64::try_from(v).ok()?,
            _ => return None,
        })
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Row-major dimensions, slowest first (`[rows, cols]` for a matrix):
    /// the file's `ne` reversed, as every loader in vauban reads shapes.
    pub shape: Vec<usize>,
    /// How its values are stored.
    pub ggml_type: GgmlType,
    /// Bytes from the start of the tensor data.
    pub offset: u64,
}

impl TensorInfo {
    /// How many values it holds (checked not to overflow at open).
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The length of one row, the fastest-varying dimension (GGUF's
    /// `ne[0]`), which must be whole blocks.
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Its size in the file; `None` for a type vauban does not know.
    pub fn byte_len(&self) -> Option<usize> {
        let (values, bytes) = self.ggml_type.block()?;
        Some(self.elements() / values * bytes)
    }
}

/// A file that is not a GGUF vauban can read, or a tensor it cannot.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("reading failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("it does not start with GGUF's magic `GGUF` (its first bytes are {found:02x?})")]
    Magic { found: [u8; 4] },
    #[error(
        "it is a big-endian GGUF (version {version}); vauban reads little-endian files, which llama.cpp's converter writes unless told otherwise"
    )]
    BigEndian { version: u32 },
    #[error(
        "it is GGUF version {version}; vauban reads versions 2 and 3 (convert the model again with a current llama.cpp)"
    )]
    Version { version: u32 },
    #[error("the file ends at byte {len}, inside {within}")]
    Truncated { within: String, len: u64 },
    #[error("{within}: {what} would need {needed} bytes, but only {remaining} remain in the file")]
    TooLong {
        within: String,
        what: String,
        needed: u64,
        remaining: u64,
    },
    #[error("{within} has value type {id}, which GGUF does not define (0 to 12)")]
    ValueType { within: String, id: u32 },
    #[error("{within} holds bool {found}; a GGUF bool is 0 or 1")]
    Bool { within: String, found: u8 },
    #[error("{within} nests arrays more than {MAX_DEPTH} deep")]
    Depth { within: String },
    #[error("metadata key `{key}` appears twice")]
    DuplicateKey { key: String },
    #[error("`general.alignment` is {found}; it must be a power of two")]
    Alignment { found: String },
    #[error("tensor `{tensor}` {problem}")]
    Tensor {
        tensor: String,
        problem: TensorProblem,
    },
}

/// What is wrong with one tensor (the [`GgufError::Tensor`] that names it).
#[derive(Debug, thiserror::Error)]
pub enum TensorProblem {
    #[error("appears twice in the tensor table")]
    Duplicate,
    #[error("has {0} dimensions; GGUF allows at most {MAX_DIMS}")]
    Rank(u32),
    #[error("has dimensions {0:?} (GGUF's order): too many values to count or address")]
    Overflow(Vec<u64>),
    #[error("is {ty} with rows of {cols} values, not a whole number of its {block}-value blocks")]
    RaggedRow {
        ty: GgmlType,
        cols: usize,
        block: usize,
    },
    #[error(
        "starts at offset {offset} of the tensor data, not a multiple of the file's alignment {alignment}"
    )]
    Misaligned { offset: u64, alignment: u64 },
    #[error("needs {len} bytes from byte {start}, past the end of the file ({file_len} bytes)")]
    PastEnd { start: u64, len: u64, file_len: u64 },
    #[error("is stored as {0}, whose layout vauban does not know, so it cannot be read")]
    UnknownType(GgmlType),
    #[error(
        "is stored as {0}, which vauban cannot read as f32 (it reads {types})",
        types = supported_types()
    )]
    NotReadable(GgmlType),
    #[error("could not be read: {0}")]
    Read(std::io::Error),
}

impl GgufError {
    fn tensor(tensor: &str, problem: TensorProblem) -> GgufError {
        GgufError::Tensor {
            tensor: tensor.to_owned(),
            problem,
        }
    }

    /// Says where in the header a truncation or a bad value happened,
    /// unless the error already says it.
    fn within(mut self, what: impl FnOnce() -> String) -> GgufError {
        match &mut self {
            GgufError::Truncated { within, .. }
            | GgufError::TooLong { within, .. }
            | GgufError::ValueType { within, .. }
            | GgufError::Bool { within, .. }
            | GgufError::Depth { within }
                if within.is_empty() =>
            {
                *within = what();
            }
            _ => {}
        }
        self
    }

    /// The error as a model loader reports it, naming the file: a tensor's
    /// problem as [`ModelError::Tensor`], anything else as
    /// [`ModelError::Gguf`].
    pub fn in_file(self, path: &Path) -> ModelError {
        match self {
            GgufError::Tensor { tensor, problem } => ModelError::Tensor {
                path: path.to_path_buf(),
                tensor,
                problem: problem.to_string(),
            },
            e => ModelError::Gguf {
                path: path.to_path_buf(),
                message: e.to_string(),
            },
        }
    }
}

/// An open GGUF file: its header parsed and checked, the tensor data read
/// on demand from `R` (the whole file, from byte 0).
pub struct GgufReader<R> {
    version: u32,
    metadata: HashMap<String, Value>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
    reader: R,
}

impl<R: Read + Seek> GgufReader<R> {
    /// Parses the header (metadata and tensor table) and checks every
    /// tensor against the file; reads no tensor data.
    pub fn open(mut reader: R) -> Result<Self, GgufError> {
        let file_len = reader.seek(SeekFrom::End(0))?;
        reader.seek(SeekFrom::Start(0))?;
        // Buffered: a vocabulary is hundreds of thousands of short strings.
        let mut h = Header {
            r: BufReader::new(&mut reader),
            pos: 0,
            len: file_len,
        };
        let magic: [u8; 4] = h.take().map_err(|e| e.within(|| "the magic".into()))?;
        if magic != MAGIC {
            return Err(GgufError::Magic { found: magic });
        }
        let version = h.u32().map_err(|e| e.within(|| "the version".into()))?;
        match version {
            2 | 3 => {}
            // A big-endian file's version, read little-endian, has its
            // value in the high bytes (how gguf-py tells the byte order).
            v if v & 0xFFFF == 0 && (1..=3).contains(&v.swap_bytes()) => {
                return Err(GgufError::BigEndian {
                    version: v.swap_bytes(),
                });
            }
            v => return Err(GgufError::Version { version: v }),
        }
        let counts = || "the header".to_owned();
        let tensor_count = h.u64().map_err(|e| e.within(counts))?;
        let kv_count = h.u64().map_err(|e| e.within(counts))?;
        let needed = kv_count
            .saturating_mul(MIN_ENTRY)
            .saturating_add(tensor_count.saturating_mul(MIN_TENSOR_INFO));
        if needed > h.remaining() {
            return Err(GgufError::TooLong {
                within: counts(),
                what: format!("{tensor_count} tensors and {kv_count} metadata entries"),
                needed,
                remaining: h.remaining(),
            });
        }

        let mut metadata = HashMap::new();
        for i in 0..kv_count {
            let key = h
                .string()
                .map_err(|e| e.within(|| format!("metadata entry {i}'s key")))?;
            let at = || format!("metadata key `{key}`");
            let value = h
                .u32()
                .and_then(|ty| h.value(ty, 0))
                .map_err(|e| e.within(at))?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::DuplicateKey { key });
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                _ => {
                    return Err(GgufError::Alignment {
                        found: v.describe(),
                    });
                }
            },
        };

        let mut tensors = Vec::new();
        for i in 0..tensor_count {
            let name = h
                .string()
                .map_err(|e| e.within(|| format!("tensor info {i}'s name")))?;
            let at = || format!("tensor info {i} (`{name}`)");
            let rank = h.u32().map_err(|e| e.within(at))?;
            if rank > MAX_DIMS {
                return Err(GgufError::tensor(&name, TensorProblem::Rank(rank)));
            }
            let mut ne = Vec::with_capacity(rank as usize);
            for _ in 0..rank {
                ne.push(h.u64().map_err(|e| e.within(at))?);
            }
            let id = h.u32().map_err(|e| e.within(at))?;
            let offset = h.u64().map_err(|e| e.within(at))?;
            let count = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let shape: Option<Vec<usize>> = count
                .and_then(|c| usize::try_from(c).ok())
                .and_then(|_| ne.iter().rev().map(|&d| usize::try_from(d).ok()).collect());
            let Some(shape) = shape else {
                return Err(GgufError::tensor(&name, TensorProblem::Overflow(ne)));
            };
            tensors.push(TensorInfo {
                name,
                shape,
                ggml_type: GgmlType(id),
                offset,
            });
        }
        let header_end = h.pos;
        drop(h);
        let data_start = header_end.div_ceil(alignment) * alignment;

        let mut index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(GgufError::tensor(&t.name, TensorProblem::Duplicate));
            }
            check(t, alignment, data_start, file_len)
                .map_err(|problem| GgufError::tensor(&t.name, problem))?;
        }
        Ok(GgufReader {
            version,
            metadata,
            tensors,
            index,
            alignment,
            data_start,
            reader,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of the tensor data (`general.alignment`, else 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the tensor data starts: the header's end, aligned.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// The metadata value under `key`.
    pub fn metadata(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// Every metadata key, in no particular order.
    pub fn metadata_keys(&self) -> impl Iterator<Item = &str> {
        self.metadata.keys().map(String::as_str)
    }

    /// The tensor table's entry for `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor table, in the file's order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Tensor `name`'s bytes as stored (what vauban's kernels run); `None`
    /// when the file has no such tensor. A type vauban does not know is
    /// refused: its size is unknown.
    pub fn read_bytes(&mut self, name: &str) -> Result<Option<Vec<u8>>, GgufError> {
        let Some(info) = self.tensor(name) else {
            return Ok(None);
        };
        let Some(len) = info.byte_len() else {
            return Err(GgufError::tensor(
                name,
                TensorProblem::UnknownType(info.ggml_type),
            ));
        };
        let start = self.data_start + info.offset;
        let mut data = vec![0u8; len];
        self.reader
            .seek(SeekFrom::Start(start))
            .and_then(|_| self.reader.read_exact(&mut data))
            .map_err(|e| GgufError::tensor(name, TensorProblem::Read(e)))?;
        Ok(Some(data))
    }

    /// Tensor `name` as f32 values in row-major order: F32, F16 and BF16
    /// converted, every format vauban's kernels run dequantized as they
    /// dequantize it; any other type refused naming it. `None` when the
    /// file has no such tensor.
    pub fn read_f32(&mut self, name: &str) -> Result<Option<Vec<f32>>, GgufError> {
        let Some(info) = self.tensor(name) else {
            return Ok(None);
        };
        let (ty, n) = (info.ggml_type, info.elements());
        if !ty.reads_as_f32() {
            return Err(GgufError::tensor(name, TensorProblem::NotReadable(ty)));
        }
        let Some(bytes) = self.read_bytes(name)? else {
            return Ok(None);
        };
        Ok(Some(to_f32(ty, &bytes, n)))
    }
}

/// `n` values of type `ty` (one [`GgmlType::reads_as_f32`]) as f32.
fn to_f32(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let pairs = || bytes.chunks_exact(2).map(|b| [b[0], b[1]]);
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        GgmlType::F16 => pairs()
            .map(|b| half::f16::from_le_bytes(b).to_f32())
            .collect(),
        GgmlType::BF16 => pairs()
            .map(|b| half::bf16::from_le_bytes(b).to_f32())
            .collect(),
        _ => {
            let format = ty.format().expect("checked: a kernel format");
            let mut out = vec![0f32; n];
            // Rows are whole blocks (checked at open), so the tensor is one
            // run of blocks.
            vauban_kernels::blocks::dequantize_row(format, bytes, &mut out);
            out
        }
    }
}

/// The checks of one tensor against the file, at open.
fn check(
    t: &TensorInfo,
    alignment: u64,
    data_start: u64,
    file_len: u64,
) -> Result<(), TensorProblem> {
    if !t.offset.is_multiple_of(alignment) {
        return Err(TensorProblem::Misaligned {
            offset: t.offset,
            alignment,
        });
    }
    // A type vauban does not know has no known size; reading it is refused.
    let Some((block, bytes)) = t.ggml_type.block() else {
        return Ok(());
    };
    let cols = t.row_len();
    if !cols.is_multiple_of(block) {
        return Err(TensorProblem::RaggedRow {
            ty: t.ggml_type,
            cols,
            block,
        });
    }
    let Some(len) = ((t.elements() / block) as u64).checked_mul(bytes as u64) else {
        return Err(TensorProblem::Overflow(
            t.shape.iter().rev().map(|&d| d as u64).collect(),
        ));
    };
    let start = data_start.saturating_add(t.offset);
    if start.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(TensorProblem::PastEnd {
            start,
            len,
            file_len,
        });
    }
    Ok(())
}

/// The header as it is read: the position and the file's length, so that
/// every read is checked against what remains.
struct Header<'r, R: Read> {
    r: BufReader<&'r mut R>,
    pos: u64,
    len: u64,
}

impl<R: Read> Header<'_, R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        if N as u64 > self.remaining() {
            return Err(GgufError::Truncated {
                within: String::new(),
                len: self.len,
            });
        }
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        self.take().map(u64::from_le_bytes)
    }

    /// A length-prefixed string. Trailing NULs are dropped and invalid
    /// UTF-8 replaced, as llama.cpp's own reader tolerates both (some
    /// converters wrote NUL-terminated strings).
    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.u64()?;
        if n > self.remaining() {
            return Err(GgufError::TooLong {
                within: String::new(),
                what: format!("a string of {n} bytes"),
                needed: n,
                remaining: self.remaining(),
            });
        }
        let mut v = vec![0u8; n as usize];
        self.r.read_exact(&mut v)?;
        self.pos += n;
        while v.last() == Some(&0) {
            v.pop();
        }
        Ok(match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// A value of GGUF value type `ty`, arrays `depth` deep.
    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, GgufError> {
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.take()?)),
            1 => Value::I8(i8::from_le_bytes(self.take()?)),
            2 => Value::U16(u16::from_le_bytes(self.take()?)),
            3 => Value::I16(i16::from_le_bytes(self.take()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.take()?)),
            6 => Value::F32(f32::from_le_bytes(self.take()?)),
            7 => match self.take::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                found => {
                    return Err(GgufError::Bool {
                        within: String::new(),
                        found,
                    });
                }
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(GgufError::Depth {
                        within: String::new(),
                    });
                }
                let element = self.u32()?;
                let n = self.u64()?;
                let Some(size) = min_size(element) else {
                    return Err(GgufError::ValueType {
                        within: String::new(),
                        id: element,
                    });
                };
                let needed = n.saturating_mul(size);
                if needed > self.remaining() {
                    return Err(GgufError::TooLong {
                        within: String::new(),
                        what: format!("an array of {n} values"),
                        needed,
                        remaining: self.remaining(),
                    });
                }
                let mut values = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    values.push(self.value(element, depth + 1)?);
                }
                Value::Array(values)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.take()?)),
            12 => Value::F64(f64::from_le_bytes(self.take()?)),
            id => {
                return Err(GgufError::ValueType {
                    within: String::new(),
                    id,
                });
            }
        })
    }
}

/// The fewest bytes a value of type `ty` takes (a string's or an array's
/// length prefix); `None` for a type GGUF does not define.
fn min_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A GGUF file written byte by byte, as the format describes it.
    #[derive(Default)]
    struct Builder {
        b: Vec<u8>,
    }

    impl Builder {
        fn header(version: u32, tensors: u64, entries: u64) -> Builder {
            let mut b = Builder::default();
            b.bytes(b"GGUF").u32(version).u64(tensors).u64(entries);
            b
        }
        fn bytes(&mut self, v: &[u8]) -> &mut Self {
            self.b.extend_from_slice(v);
            self
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }
        fn str(&mut self, s: &str) -> &mut Self {
            self.u64(s.len() as u64).bytes(s.as_bytes())
        }
        /// A metadata entry: key, value type, the value's bytes.
        fn kv(&mut self, key: &str, ty: u32, value: &[u8]) -> &mut Self {
            self.str(key).u32(ty).bytes(value)
        }
        /// A tensor info; `dims` in GGUF's order (`ne[0]` first).
        fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
            self.str(name).u32(dims.len() as u32);
            for &d in dims {
                self.u64(d);
            }
            self.u32(ty).u64(offset)
        }
        /// Zeros up to a multiple of `alignment`.
        fn align(&mut self, alignment: usize) -> &mut Self {
            let pad = self.b.len().next_multiple_of(alignment) - self.b.len();
            self.bytes(&vec![0; pad])
        }
        fn open(&self) -> Result<GgufReader<Cursor<Vec<u8>>>, GgufError> {
            GgufReader::open(Cursor::new(self.b.clone()))
        }
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = Builder::default();
        b.str(s);
        b.b
    }

    /// A Q8_0 block: `d` = 0.5, quants -16..16, so values -8.0..8.0 by 0.5.
    fn q8_0_block() -> Vec<u8> {
        let mut b = half::f16::from_f32(0.5).to_le_bytes().to_vec();
        b.extend((-16i8..16).map(|q| q as u8));
        b
    }

    /// Every value type, a nested array, alignment 64, float tensors, a
    /// Q8_0 tensor and one of a type vauban does not know (99).
    fn full() -> Builder {
        let mut f = Builder::header(3, 5, 15);
        f.kv("u8", 0, &[200])
            .kv("i8", 1, &(-5i8).to_le_bytes())
            .kv("u16", 2, &60000u16.to_le_bytes())
            .kv("i16", 3, &(-30000i16).to_le_bytes())
            .kv("u32", 4, &4_000_000_000u32.to_le_bytes())
            .kv("i32", 5, &(-2_000_000_000i32).to_le_bytes())
            .kv("f32", 6, &1.5f32.to_le_bytes())
            .kv("bool", 7, &[1])
            .kv("string", 8, &string("llama"))
            .kv("u64", 10, &u64::MAX.to_le_bytes())
            .kv("i64", 11, &i64::MIN.to_le_bytes())
            .kv("f64", 12, &0.25f64.to_le_bytes())
            .kv("general.alignment", 4, &64u32.to_le_bytes());
        // An array of two strings, and an array of arrays of i32.
        f.str("strings").u32(9).u32(8).u64(2).str("a").str("bc");
        f.str("nested").u32(9).u32(9).u64(2);
        f.u32(5).u64(2).u32(1).u32(2);
        f.u32(5).u64(1).bytes(&(-3i32).to_le_bytes());
        f.tensor("f32", &[3, 2], 0, 0)
            .tensor("f16", &[2], 1, 64)
            .tensor("bf16", &[2], 30, 128)
            .tensor("q8_0", &[32, 1], 8, 192)
            .tensor("mystery", &[7], 99, 256)
            .align(64);
        let data_start = f.b.len();
        for v in [1f32, 2., 3., 4., 5., 6.] {
            f.bytes(&v.to_le_bytes());
        }
        f.align(64);
        f.bytes(&half::f16::from_f32(-2.5).to_le_bytes())
            .bytes(&half::f16::from_f32(0.125).to_le_bytes())
            .align(64);
        f.bytes(&half::bf16::from_f32(3.0).to_le_bytes())
            .bytes(&half::bf16::from_f32(-0.5).to_le_bytes())
            .align(64);
        f.bytes(&q8_0_block()).align(64);
        f.bytes(&[0; 7]);
        assert_eq!(data_start % 64, 0);
        f
    }

    #[test]
    fn every_value_type_and_an_unknown_tensor_type_parse() {
        let mut g = full().open().unwrap();
        assert_eq!(g.version(), 3);
        assert_eq!(g.alignment(), 64);
        assert_eq!(g.data_start() % 64, 0);
        let m = |k: &str| g.metadata(k).unwrap().clone();
        assert_eq!(m("u8"), Value::U8(200));
        assert_eq!(m("i8"), Value::I8(-5));
        assert_eq!(m("u16"), Value::U16(60000));
        assert_eq!(m("i16"), Value::I16(-30000));
        assert_eq!(m("u32"), Value::U32(4_000_000_000));
        assert_eq!(m("i32"), Value::I32(-2_000_000_000));
        assert_eq!(m("f32"), Value::F32(1.5));
        assert_eq!(m("bool"), Value::Bool(true));
        assert_eq!(m("string"), Value::String("llama".into()));
        assert_eq!(m("u64"), Value::U64(u64::MAX));
        assert_eq!(m("i64"), Value::I64(i64::MIN));
        assert_eq!(m("f64"), Value::F64(0.25));
        assert_eq!(
            m("strings"),
            Value::Array(vec![Value::String("a".into()), Value::String("bc".into())])
        );
        assert_eq!(
            m("nested"),
            Value::Array(vec![
                Value::Array(vec![Value::I32(1), Value::I32(2)]),
                Value::Array(vec![Value::I32(-3)]),
            ])
        );
        assert_eq!(g.metadata_keys().count(), 15);

        // Shapes are row-major: the file's `ne` reversed.
        let t = g.tensor("f32").unwrap();
        assert_eq!((t.shape.clone(), t.ggml_type), (vec![2, 3], GgmlType::F32));
        assert_eq!(
            g.read_f32("f32").unwrap().unwrap(),
            [1., 2., 3., 4., 5., 6.]
        );
        assert_eq!(g.read_f32("f16").unwrap().unwrap(), [-2.5, 0.125]);
        assert_eq!(g.read_f32("bf16").unwrap().unwrap(), [3.0, -0.5]);
        let q = g.read_f32("q8_0").unwrap().unwrap();
        let want: Vec<f32> = (-16..16).map(|q| q as f32 * 0.5).collect();
        assert_eq!(q, want);
        assert_eq!(g.read_bytes("q8_0").unwrap().unwrap(), q8_0_block());
        assert_eq!(g.read_f32("absent").unwrap(), None);

        // The unknown type is recorded; reading it is refused, named.
        let t = g.tensor("mystery").unwrap();
        assert_eq!((t.ggml_type.id(), t.shape.clone()), (99, vec![7]));
        assert_eq!(t.ggml_type.to_string(), "unknown type 99");
        let e = g.read_bytes("mystery").unwrap_err().to_string();
        assert!(
            e.contains("`mystery`") && e.contains("unknown type 99"),
            "{e}"
        );
        let e = g.read_f32("mystery").unwrap_err().to_string();
        assert!(
            e.contains("`mystery`") && e.contains("unknown type 99"),
            "{e}"
        );
    }

    #[test]
    fn a_type_vauban_cannot_dequantize_is_refused_naming_what_it_reads() {
        let mut f = Builder::header(3, 1, 0);
        // Q8_1: 32 values in 36 bytes.
        f.tensor("act", &[32], 9, 0).align(32).bytes(&[0; 36]);
        let mut g = f.open().unwrap();
        assert_eq!(g.read_bytes("act").unwrap().unwrap().len(), 36);
        let e = g.read_f32("act").unwrap_err();
        assert!(
            matches!(
                e,
                GgufError::Tensor {
                    problem: TensorProblem::NotReadable(GgmlType(9)),
                    ..
                }
            ),
            "{e}"
        );
        let e = e.to_string();
        assert!(e.contains("`act` is stored as Q8_1"), "{e}");
        assert!(e.contains(&supported_types()), "{e}");
        let path = Path::new("m.gguf");
        let e = g.read_f32("act").unwrap_err().in_file(path).to_string();
        assert!(
            e.starts_with("m.gguf: tensor `act` is stored as Q8_1"),
            "{e}"
        );
    }

    /// Each kernel format reads through vauban's dequantization: the table
    /// and `Format` agree on every block size.
    #[test]
    fn the_type_table_agrees_with_the_kernel_formats() {
        for f in Format::ALL {
            let (id, name, len, bytes) = TYPES.iter().find(|t| t.1 == f.name()).unwrap();
            assert_eq!(Format::from_ggml(*id), Some(f), "{name}");
            assert_eq!((*len, *bytes), (f.block_len(), f.block_bytes()), "{name}");
        }
        for (id, name, ..) in TYPES {
            assert_eq!(GgmlType::from_id(id).to_string(), name);
            assert!(TYPES.iter().filter(|t| t.0 == id).count() == 1, "{name}");
        }
        assert!(supported_types().starts_with("F32, F16, BF16, "));
    }

    fn error(f: &Builder) -> GgufError {
        match f.open() {
            Ok(_) => panic!("a malformed file opened"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_truncated_file_is_refused_saying_where() {
        let full = full().b;
        // Cut inside the magic, the counts, a tensor info.
        for (cut, within) in [
            (2, "the magic"),
            (12, "the header"),
            (full.len() - 400, "tensor info"),
        ] {
            let f = Builder {
                b: full[..cut].to_vec(),
            };
            let e = error(&f);
            assert!(matches!(e, GgufError::Truncated { .. }), "{cut}: {e}");
            assert!(e.to_string().contains(within), "{cut}: {e}");
        }
        // Cut inside a value: a u64 of which 4 bytes are there.
        let mut f = Builder::header(3, 0, 1);
        f.kv("k", 10, &[0; 4]);
        let e = error(&f);
        assert!(matches!(e, GgufError::Truncated { len: 41, .. }), "{e}");
        assert!(e.to_string().contains("metadata key `k`"), "{e}");
        // Cut inside the tensor data: a tensor runs past the end.
        let f = Builder {
            b: full[..full.len() - 200].to_vec(),
        };
        let e = error(&f);
        assert!(
            matches!(
                e,
                GgufError::Tensor {
                    problem: TensorProblem::PastEnd { .. },
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_wrong_magic_or_version_is_refused() {
        let mut f = Builder::header(3, 0, 0);
        f.b[..4].copy_from_slice(b"GGML");
        assert!(matches!(error(&f), GgufError::Magic { found } if &found == b"GGML"));
        let e = error(&Builder::header(1, 0, 0));
        assert!(matches!(e, GgufError::Version { version: 1 }), "{e}");
        let e = error(&Builder::header(3u32.swap_bytes(), 0, 0));
        assert!(matches!(e, GgufError::BigEndian { version: 3 }), "{e}");
        assert!(e.to_string().contains("big-endian"), "{e}");
        assert!(Builder::header(2, 0, 0).open().is_ok());
    }

    #[test]
    fn lengths_and_counts_past_the_end_are_errors_not_allocations() {
        // A key claiming 2^60 bytes.
        let mut f = Builder::header(3, 0, 1);
        f.u64(1 << 60).bytes(b"a key and then some");
        let e = error(&f);
        assert!(
            matches!(&e, GgufError::TooLong { within, .. } if within.contains("metadata entry 0")),
            "{e}"
        );
        // A string value past the end.
        let mut f = Builder::header(3, 0, 1);
        f.str("name").u32(8).u64(100).bytes(b"short");
        let e = error(&f);
        assert!(
            matches!(&e, GgufError::TooLong { within, .. } if within.contains("`name`")),
            "{e}"
        );
        // An array of 2^40 u32.
        let mut f = Builder::header(3, 0, 1);
        f.str("a").u32(9).u32(4).u64(1 << 40);
        assert!(matches!(error(&f), GgufError::TooLong { .. }));
        // Counts the file cannot hold.
        let e = error(&Builder::header(3, u64::MAX, u64::MAX));
        assert!(matches!(e, GgufError::TooLong { .. }), "{e}");
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let mut f = Builder::header(3, 0, 1);
        f.kv("t", 13, &[0; 8]);
        let e = error(&f);
        assert!(matches!(e, GgufError::ValueType { id: 13, .. }), "{e}");
        assert!(e.to_string().contains("`t`"), "{e}");
        let mut f = Builder::header(3, 0, 1);
        f.kv("b", 7, &[2]);
        assert!(matches!(error(&f), GgufError::Bool { found: 2, .. }));
        let mut f = Builder::header(3, 0, 2);
        f.kv("k", 0, &[1]).kv("k", 0, &[2]);
        assert!(matches!(error(&f), GgufError::DuplicateKey { key } if key == "k"));
        let mut f = Builder::header(3, 0, 1);
        f.kv("general.alignment", 4, &48u32.to_le_bytes());
        assert!(matches!(error(&f), GgufError::Alignment { .. }));
        // Arrays nested past the bound.
        let mut f = Builder::header(3, 0, 1);
        f.str("deep").u32(9);
        for _ in 0..=MAX_DEPTH {
            f.u32(9).u64(1);
        }
        f.u32(0).u64(0);
        assert!(matches!(error(&f), GgufError::Depth { .. }));
    }

    fn tensor_problem(f: &Builder) -> (String, TensorProblem) {
        match error(f) {
            GgufError::Tensor { tensor, problem } => (tensor, problem),
            e => panic!("not a tensor's problem: {e}"),
        }
    }

    #[test]
    fn malformed_tensors_are_refused_at_open_naming_them() {
        // A Q4_0 row of 40 values: not whole 32-value blocks.
        let mut f = Builder::header(3, 1, 0);
        f.tensor("ragged", &[40, 2], 2, 0).align(32).bytes(&[0; 64]);
        let (name, p) = tensor_problem(&f);
        assert_eq!(name, "ragged");
        assert!(
            matches!(
                p,
                TensorProblem::RaggedRow {
                    cols: 40,
                    block: 32,
                    ..
                }
            ),
            "{p}"
        );
        assert!(p.to_string().contains("Q4_0"), "{p}");
        // 4 × 4 f32 needs 64 bytes; 60 follow.
        let mut f = Builder::header(3, 1, 0);
        f.tensor("w", &[4, 4], 0, 0).align(32).bytes(&[0; 60]);
        let (name, p) = tensor_problem(&f);
        assert_eq!(name, "w");
        assert!(matches!(p, TensorProblem::PastEnd { len: 64, .. }), "{p}");
        // An offset not on the alignment.
        let mut f = Builder::header(3, 1, 0);
        f.tensor("w", &[1], 0, 4).align(32).bytes(&[0; 8]);
        let (_, p) = tensor_problem(&f);
        assert!(
            matches!(p, TensorProblem::Misaligned { offset: 4, .. }),
            "{p}"
        );
        // Two tensors of one name.
        let mut f = Builder::header(3, 2, 0);
        f.tensor("w", &[1], 0, 0)
            .tensor("w", &[1], 0, 32)
            .align(32)
            .bytes(&[0; 36]);
        assert!(matches!(tensor_problem(&f).1, TensorProblem::Duplicate));
        // Five dimensions; dimensions whose product overflows.
        let mut f = Builder::header(3, 1, 0);
        f.tensor("w", &[1; 5], 0, 0);
        assert!(matches!(tensor_problem(&f).1, TensorProblem::Rank(5)));
        let mut f = Builder::header(3, 1, 0);
        f.tensor("w", &[u64::MAX, 2], 0, 0);
        assert!(matches!(tensor_problem(&f).1, TensorProblem::Overflow(_)));
        // An enormous tensor of an unknown type is not sized: it parses.
        let mut f = Builder::header(3, 1, 0);
        f.tensor("w", &[1 << 40], 77, 0);
        assert!(f.open().is_ok());
    }
}
