//! Direction files: `.safetensors`, `.npy`, and `.gguf` control vectors as
//! llama.cpp writes them (one tensor `direction.N` per layer N, f32 of
//! width d_model; llama.cpp applies `direction.N` to the output of block N,
//! the residual vauban observes at layer N).
//!
//! A quantized GGUF tensor is dequantized to f32 like any other; the hash
//! still names the exact bytes.
//!
//! The file is read once into memory, hashed, and parsed from those same
//! bytes, so the recorded sha256 is the hash of exactly what was used.
//! Direction files are small (k × d_model floats).

use std::io::Cursor;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::InterveneError;
use super::primitive::Direction;
use crate::gguf::GgufFile;

/// The formats a direction file can have, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Safetensors,
    Npy,
    Gguf,
}

impl Format {
    fn of(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "safetensors" => Some(Format::Safetensors),
            "npy" => Some(Format::Npy),
            "gguf" => Some(Format::Gguf),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::Npy => "npy",
            Format::Gguf => "GGUF",
        }
    }
}

/// Loads a direction (or basis) from `path`, as f32.
///
/// Tensor choice: `tensor` when given; else the file's only tensor; else
/// `direction.{layer}` when the file holds it (a control vector); else an
/// error listing the names. `row` keeps one row of a `[k, d_model]` tensor.
pub fn load_direction(
    path: &Path,
    tensor: Option<&str>,
    row: Option<usize>,
    layer: usize,
) -> Result<Direction, InterveneError> {
    let (format, bytes) = read(path)?;
    let sha = crate::hash::sha256_hex(&bytes);
    let unreadable = |message: String| InterveneError::Format {
        path: path.to_path_buf(),
        format: format.name(),
        message,
    };
    let (name, values, shape): (String, Vec<f32>, Vec<usize>) = match format {
        Format::Safetensors => {
            let st = SafeTensors::deserialize(&bytes)
                .map_err(|e| unreadable(safetensors_problem(&bytes, e)))?;
            let names: Vec<String> = st.names().into_iter().map(str::to_owned).collect();
            let name = choose(path, &names, tensor, layer)?;
            let view = st.tensor(&name).map_err(|e| unreadable(e.to_string()))?;
            if !matches!(
                view.dtype(),
                Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64
            ) {
                return Err(InterveneError::BadTensor {
                    path: path.to_path_buf(),
                    tensor: name,
                    problem: format!(
                        "has dtype {:?}; a direction must be float (f16, bf16, f32, f64)",
                        view.dtype()
                    ),
                });
            }
            let values = floats(view.dtype(), view.data()).map_err(unreadable)?;
            (name, values, view.shape().to_vec())
        }
        Format::Npy => {
            if let Some(t) = tensor {
                return Err(InterveneError::NoSuchTensor {
                    path: path.to_path_buf(),
                    tensor: t.to_owned(),
                    available: "one unnamed array (a .npy file has no names)".into(),
                    pick: "none: drop the tensor name",
                });
            }
            let (values, shape) = npy(&bytes).map_err(unreadable)?;
            (String::new(), values, shape)
        }
        Format::Gguf => {
            let mut file = GgufFile::read(Cursor::new(&bytes[..])).map_err(unreadable)?;
            let names = file.tensor_names();
            let name = choose(path, &names, tensor, layer)?;
            // Bound the tensor by the file before the reader sizes it (no
            // ggml type packs more than 8 values a byte).
            let dims = file.tensor_shape(&name).unwrap_or_default();
            let count = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if count.is_none_or(|c| c / 8 > bytes.len()) {
                return Err(unreadable(format!(
                    "tensor `{name}` claims shape {dims:?}, more than the file holds"
                )));
            }
            let values = file
                .read_f32(&name)
                .map_err(|e| unreadable(format!("tensor `{name}`: {e}")))?;
            (name, values, dims)
        }
    };
    let source = path.display().to_string();
    Direction::new(source, name, sha, row, &values, &shape)
}

/// The layers a control vector holds a direction for (`direction.L`
/// tensors, sorted); `None` when the file is not one (a `.npy` file, or a
/// file without such tensors).
///
/// A control vector's missing layer means "leave this layer alone", as
/// llama.cpp reads it (it zero-fills layers the file lacks): a caller that
/// acts on every layer by default acts on these instead, while a layer
/// named explicitly and missing from the file stays an error.
pub fn control_vector_layers(path: &Path) -> Result<Option<Vec<usize>>, InterveneError> {
    let (format, bytes) = read(path)?;
    let unreadable = |message: String| InterveneError::Format {
        path: path.to_path_buf(),
        format: format.name(),
        message,
    };
    let names: Vec<String> = match format {
        Format::Npy => return Ok(None),
        Format::Safetensors => SafeTensors::deserialize(&bytes)
            .map_err(|e| unreadable(safetensors_problem(&bytes, e)))?
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        Format::Gguf => GgufFile::read(Cursor::new(&bytes[..]))
            .map_err(unreadable)?
            .tensor_names(),
    };
    let mut layers: Vec<usize> = names
        .iter()
        .filter_map(|n| n.strip_prefix("direction.")?.parse().ok())
        .collect();
    layers.sort_unstable();
    Ok((!layers.is_empty()).then_some(layers))
}

/// A direction file's format (by extension) and its bytes, bounded.
fn read(path: &Path) -> Result<(Format, Vec<u8>), InterveneError> {
    let format = Format::of(path).ok_or_else(|| InterveneError::UnknownFormat {
        path: path.to_path_buf(),
    })?;
    let bytes =
        crate::input::read_bounded(path, crate::input::MAX_DIRECTION_BYTES).map_err(|e| {
            InterveneError::Io {
                path: path.to_path_buf(),
                source: crate::input::io_error(e),
            }
        })?;
    Ok((format, bytes))
}

/// Why `bytes` is not a safetensors file, in words: the format starts with
/// an 8-byte little-endian header length, then that many bytes of JSON.
fn safetensors_problem(bytes: &[u8], e: safetensors::SafeTensorError) -> String {
    let Some(head) = bytes.get(..8) else {
        return format!(
            "it has {} bytes, fewer than the 8 that give a safetensors header's length",
            bytes.len()
        );
    };
    let header = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    if header > (bytes.len() - 8) as u64 {
        return format!(
            "its first 8 bytes give a header length of {header} bytes, and the file has {} \
             bytes after them",
            bytes.len() - 8
        );
    }
    match std::str::from_utf8(&bytes[8..8 + header as usize]) {
        Ok(json) if json.trim_start().starts_with('{') => {
            format!("its header is damaged: {e}")
        }
        _ => format!("its {header}-byte header is not a JSON object ({e})"),
    }
}

/// Little-endian float values of `dtype` as f32.
fn floats(dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>, String> {
    let size = match dtype {
        Dtype::F16 | Dtype::BF16 => 2,
        Dtype::F32 => 4,
        Dtype::F64 => 8,
        other => return Err(format!("dtype {other:?} is not a float")),
    };
    if !bytes.len().is_multiple_of(size) {
        return Err(format!(
            "{} bytes of data is not a whole number of {dtype:?} values",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(size)
        .map(|b| match dtype {
            Dtype::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            Dtype::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
            Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            _ => f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32,
        })
        .collect())
}

/// Which tensor of a file holding `names` to use (see [`load_direction`]).
fn choose(
    path: &Path,
    names: &[String],
    tensor: Option<&str>,
    layer: usize,
) -> Result<String, InterveneError> {
    let mut sorted = names.to_vec();
    sorted.sort();
    let available = || crate::text::list(&sorted);
    if let Some(t) = tensor {
        return if names.iter().any(|n| n == t) {
            Ok(t.to_owned())
        } else {
            Err(InterveneError::NoSuchTensor {
                path: path.to_path_buf(),
                tensor: t.to_owned(),
                available: available(),
                pick: "tensor=NAME",
            })
        };
    }
    match names {
        [] => Err(InterveneError::Format {
            path: path.to_path_buf(),
            format: "direction",
            message: "it holds no tensors".into(),
        }),
        [only] => Ok(only.clone()),
        // A control vector (`direction.<layer>`, as llama.cpp and repeng
        // write them), then the file `vauban measure` writes (`direction`,
        // the chosen layer's, beside `per_layer`).
        _ => {
            let by_layer = format!("direction.{layer}");
            if names.contains(&by_layer) {
                Ok(by_layer)
            } else if names.iter().any(|n| n == "direction") {
                Ok("direction".to_owned())
            } else {
                Err(InterveneError::AmbiguousTensor {
                    path: path.to_path_buf(),
                    layer,
                    available: available(),
                    pick: "tensor=NAME",
                })
            }
        }
    }
}

/// The array in a `.npy` file (format versions 1 to 3): little-endian f16,
/// f32 or f64, C or Fortran order, 1-D or 2-D (others are refused later).
fn npy(bytes: &[u8]) -> Result<(Vec<f32>, Vec<usize>), String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("it does not start with the .npy magic bytes".into());
    }
    let (len, start): (usize, usize) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => {
            let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (len as usize, 12)
        }
        v => {
            return Err(format!(
                "format version {v} is not one this reader knows (1 to 3)"
            ));
        }
    };
    let header = bytes
        .get(start..start.saturating_add(len))
        .ok_or("the header runs past the end of the file")?;
    let header = std::str::from_utf8(header).map_err(|_| "the header is not text")?;
    let data = &bytes[start + len..];

    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}':"))
            .ok_or_else(|| format!("the header has no '{key}' entry"))?;
        Ok(header[at + key.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("the header's 'descr' is not a quoted string")?;
    let (dtype, size): (Dtype, usize) = match descr {
        "<f2" | "=f2" => (Dtype::F16, 2),
        "<f4" | "=f4" => (Dtype::F32, 4),
        "<f8" | "=f8" => (Dtype::F64, 8),
        d => {
            return Err(format!(
                "its dtype `{d}` is not a little-endian float (<f2, <f4, <f8); save the direction as float32"
            ));
        }
    };
    let fortran = field("fortran_order")?.starts_with("True");
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("the header's 'shape' is not a tuple")?;
    let dims = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("the header's shape ({shape}) is not a tuple of sizes"))?;
    let expected = dims.iter().try_fold(size, |a, &d| a.checked_mul(d));
    if expected != Some(data.len()) {
        return Err(format!(
            "shape {dims:?} of {descr} does not match the {} bytes of data",
            data.len()
        ));
    }
    let stored = floats(dtype, data)?;
    // Fortran order stores the transpose: element (i, j) of a 2-D array
    // sits at j * rows + i. 1-D arrays read the same either way; the rest
    // are refused by the direction's shape check.
    if fortran && dims.len() == 2 {
        let (rows, cols) = (dims[0], dims[1]);
        let c_order = (0..rows * cols)
            .map(|at| stored[(at % cols) * rows + at / cols])
            .collect();
        return Ok((c_order, dims));
    }
    Ok((stored, dims))
}

#[cfg(test)]
mod tests {
    use crate::gguf::{MetaValue, write_f32};

    use super::*;

    /// Writes a safetensors file of (name, dtype, shape, little-endian bytes).
    fn save(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views = tensors.iter().map(|(name, dtype, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap();
            (name.to_string(), view)
        });
        std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
    }

    fn bf16(values: &[f32]) -> Vec<u8> {
        values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect()
    }

    fn npy_bytes(descr: &str, shape: &str, fortran: bool, data: &[u8]) -> Vec<u8> {
        let order = if fortran { "True" } else { "False" };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
        // Magic (6) + version (2) + length (2) + header, padded to 64 with '\n' last.
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn le(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn npy_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.npy");
        let bytes = npy_bytes("<f4", "(3,)", false, &le(&[0.0, 3.0, 4.0]));
        assert_eq!((bytes.len() - 12) % 64, 0);
        std::fs::write(&path, &bytes).unwrap();
        let d = load_direction(&path, None, None, 0).unwrap();
        assert_eq!(d.basis, [0.0, 3.0, 4.0]);
        assert_eq!(d.norms, vec![5.0]);
        assert_eq!(d.file_sha256, crate::hash::sha256_hex(&bytes));
        assert_eq!(d.source, path.display().to_string());
        assert_eq!(d.tensor, "");

        // [2, 3] in Fortran order stores columns first.
        let f = npy_bytes("<f4", "(2, 3)", true, &le(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        std::fs::write(&path, f).unwrap();
        let d = load_direction(&path, None, Some(1), 0).unwrap();
        assert_eq!(d.basis, [4.0, 5.0, 6.0]);
        assert_eq!(d.row, Some(1));

        // f64 is read and converted to f32.
        let data: Vec<u8> = [1f64, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, npy_bytes("<f8", "(2,)", false, &data)).unwrap();
        let d = load_direction(&path, None, None, 0).unwrap();
        assert_eq!(d.basis, [1.0, 0.0]);
    }

    #[test]
    fn npy_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.npy");
        let load = |bytes: Vec<u8>| {
            std::fs::write(&path, bytes).unwrap();
            load_direction(&path, None, None, 0)
                .unwrap_err()
                .to_string()
        };
        let ints: Vec<u8> = [1i32, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        let msg = load(npy_bytes("<i4", "(2,)", false, &ints));
        assert!(msg.contains("<i4") && msg.contains("d.npy"), "{msg}");
        let msg = load(npy_bytes("<f4", "(4,)", false, &le(&[1.0, 2.0])));
        assert!(msg.contains("8 bytes"), "{msg}");
        let msg = load(npy_bytes("<f4", "(1, 1, 2)", false, &le(&[1.0, 2.0])));
        assert!(msg.contains("[1, 1, 2]"), "{msg}");
        // A huge claimed shape is refused, not allocated.
        let msg = load(npy_bytes("<f4", "(99999999999999999,)", false, &le(&[1.0])));
        assert!(msg.contains("does not match"), "{msg}");
        let msg = load(npy_bytes("<f4", "(2,)", false, &le(&[1.0, f32::INFINITY])));
        assert!(msg.contains("inf") && msg.contains("index 1"), "{msg}");
        assert!(load(b"not an npy file".to_vec()).contains("magic"));
        std::fs::write(&path, npy_bytes("<f4", "(1,)", false, &le(&[1.0]))).unwrap();
        let err = load_direction(&path, Some("x"), None, 0).unwrap_err();
        assert!(err.to_string().contains("drop the tensor name"), "{err}");
    }

    #[test]
    fn the_file_vauban_measure_writes_gives_its_chosen_direction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("refusal.safetensors");
        save(
            &path,
            &[
                ("direction", Dtype::F32, vec![3], le(&[0.0, 0.0, 2.0])),
                (
                    "per_layer",
                    Dtype::F32,
                    vec![2, 3],
                    le(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
                ),
            ],
        );
        for layer in [0, 1, 5] {
            let d = load_direction(&path, None, None, layer).unwrap();
            assert_eq!(
                (d.tensor.as_str(), d.basis.as_slice()),
                ("direction", &[0.0, 0.0, 2.0][..])
            );
        }
        // Each layer's own row, asked for by name and row.
        let d = load_direction(&path, Some("per_layer"), Some(1), 0).unwrap();
        assert_eq!(d.basis, [0.0, 1.0, 0.0]);
    }

    #[test]
    fn safetensors_choice_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dirs.safetensors");
        let refusal = ("refusal", Dtype::F32, vec![3], le(&[0.0, 0.6, 0.8]));
        save(&path, std::slice::from_ref(&refusal));
        // The only tensor is used whatever the layer.
        let d = load_direction(&path, None, None, 7).unwrap();
        assert_eq!(d.tensor, "refusal");
        assert_eq!(d.rows(), 1);
        assert!((d.norms[0] - 1.0).abs() < 1e-6);
        assert_eq!(
            d.file_sha256,
            crate::hash::sha256_file(&path).unwrap().0,
            "the hash is the file's"
        );

        let basis = (
            "basis",
            Dtype::BF16,
            vec![2, 3],
            bf16(&[1.0, 0.0, 0.0, 0.0, 2.0, 0.0]),
        );
        save(&path, &[basis, refusal]);
        let err = load_direction(&path, None, None, 3).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("basis, refusal") && msg.contains("tensor=NAME"),
            "{msg}"
        );
        let e = load_direction(&path, None, None, 3)
            .unwrap_err()
            .picked_with("--tensor NAME")
            .to_string();
        assert!(e.ends_with("pick one with --tensor NAME"), "{e}");
        let d = load_direction(&path, Some("basis"), None, 3).unwrap();
        assert_eq!((d.rows(), d.width()), (2, 3));
        assert_eq!(d.basis, [1.0, 0.0, 0.0, 0.0, 2.0, 0.0]);
        assert_eq!(d.norms, vec![1.0, 2.0]);
        let err = load_direction(&path, Some("nope"), None, 3).unwrap_err();
        assert!(err.to_string().contains("`nope`"), "{err}");

        let ids: Vec<u8> = [1i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        save(&path, &[("ids", Dtype::I64, vec![3], ids)]);
        let err = load_direction(&path, None, None, 0).unwrap_err();
        assert!(err.to_string().contains("must be float"), "{err}");

        std::fs::write(&path, b"garbage").unwrap();
        let err = load_direction(&path, None, None, 0).unwrap_err();
        assert!(
            err.to_string().contains("not a readable safetensors file")
                && err.to_string().contains("fewer than the 8"),
            "{err}"
        );
        // A text file renamed: its first 8 bytes read as an absurd length.
        std::fs::write(&path, b"0.1 0.2 0.3 0.4\n").unwrap();
        let err = load_direction(&path, None, None, 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("its first 8 bytes give a header length of 2319967542282628656 bytes")
                && err.contains("8 bytes after them"),
            "{err}"
        );
    }

    #[test]
    fn gguf_control_vector_by_layer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cv.gguf");
        let mut file = std::fs::File::create(&path).unwrap();
        write_f32(
            &mut file,
            &[(
                "general.architecture",
                MetaValue::Str("controlvector".into()),
            )],
            &[
                ("direction.1", &[4], &[1.0, 0.0, 0.0, 0.0]),
                ("direction.2", &[4], &[0.0, 0.0, 0.5, 0.0]),
            ],
        )
        .unwrap();
        drop(file);

        let d = load_direction(&path, None, None, 2).unwrap();
        assert_eq!(d.tensor, "direction.2");
        assert_eq!(d.basis, [0.0, 0.0, 0.5, 0.0]);
        assert_eq!(d.norms, vec![0.5]);
        let d = load_direction(&path, None, None, 1).unwrap();
        assert_eq!(d.tensor, "direction.1");
        let err = load_direction(&path, None, None, 5).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("direction.5") && msg.contains("direction.1, direction.2"),
            "{msg}"
        );
    }

    #[test]
    fn missing_file_and_wrong_extension() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.safetensors");
        let err = load_direction(&path, None, None, 0).unwrap_err();
        assert!(matches!(err, InterveneError::Io { .. }));
        assert!(err.to_string().contains("absent.safetensors"), "{err}");
        let txt = dir.path().join("d.txt");
        std::fs::write(&txt, "0 1 0").unwrap();
        let err = load_direction(&txt, None, None, 0).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("d.txt") && msg.contains(".safetensors"),
            "{msg}"
        );
    }
}
