//! The direction file: a `.safetensors` file with the chosen direction,
//! every layer's direction, and where they came from in its metadata; or
//! the same per-layer directions as a llama.cpp control vector (`.gguf`),
//! the form llama.cpp (`--control-vector`), repeng and cvector-generator
//! share directions in.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::Serialize;

use super::{KIND, METHOD, MeasureError, Measurement};
use crate::executor::{Executor, LocalBackend, LocalModel};

/// What a measurement was made from: the model's weights and the two
/// prompt files, by sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// The model's short name (file or folder name), for readers.
    pub model: String,
    /// The model's architecture (`llama`, `qwen2`...), when the executor
    /// knows it: a control vector's `controlvector.model_hint`.
    pub architecture: Option<String>,
    /// The weights' sha256; `None` when unknown (weights changed in
    /// memory), and then no saved file [`matches`](Provenance::matches).
    pub model_sha256: Option<String>,
    /// sha256 of the harmful prompt file.
    pub harmful_sha256: String,
    /// sha256 of the harmless prompt file.
    pub harmless_sha256: String,
}

impl Provenance {
    /// The provenance of a measurement of `exec`'s model from the prompt
    /// files `harmful` and `harmless` (each hashed here).
    pub fn of_files(
        exec: &LocalBackend,
        harmful: &Path,
        harmless: &Path,
    ) -> Result<Provenance, MeasureError> {
        let hash = |path: &Path| {
            crate::hash::sha256_file(path)
                .map(|(h, _)| h)
                .map_err(|source| MeasureError::Io {
                    path: path.to_path_buf(),
                    source,
                })
        };
        Ok(Provenance {
            model: exec.model_ref().name,
            architecture: Some(exec.architecture()),
            model_sha256: exec.model_ref().sha256,
            harmful_sha256: hash(harmful)?,
            harmless_sha256: hash(harmless)?,
        })
    }

    /// Whether a saved file's metadata ([`read_metadata`]) describes a
    /// refusal direction measured the same way from the same weights and
    /// prompt files, so it can be reused instead of measured again. The
    /// measure options (layers, holdout, KL bound) are in `vauban.scores`
    /// for a caller that also wants those to agree.
    pub fn matches(&self, metadata: &BTreeMap<String, String>) -> bool {
        let is = |key: &str, value: &str| metadata.get(key).map(String::as_str) == Some(value);
        self.model_sha256
            .as_deref()
            .is_some_and(|m| is("vauban.model_sha256", m))
            && is("vauban.kind", KIND)
            && is("vauban.method", METHOD)
            && is("vauban.harmful_sha256", &self.harmful_sha256)
            && is("vauban.harmless_sha256", &self.harmless_sha256)
    }
}

impl Measurement {
    /// The file's `__metadata__`: kind, layer, provenance, method, tool
    /// version, and the scores as JSON.
    pub fn metadata(&self, provenance: &Provenance) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(format!("vauban.{k}"), v);
        };
        put("kind", KIND.to_owned());
        put("layer", self.chosen_layer().to_string());
        put("model", provenance.model.clone());
        if let Some(sha) = &provenance.model_sha256 {
            put("model_sha256", sha.clone());
        }
        put("harmful_sha256", provenance.harmful_sha256.clone());
        put("harmless_sha256", provenance.harmless_sha256.clone());
        put("method", METHOD.to_owned());
        put("tool_version", env!("CARGO_PKG_VERSION").to_owned());
        put(
            "scores",
            serde_json::to_string(&self.scores).expect("scores serialize"),
        );
        m
    }

    /// Writes the measurement to `path`, atomically (a reader never sees
    /// half a file), in the format its extension names:
    /// - `.safetensors`: `direction` (f32 `[d_model]`, the chosen unit
    ///   direction) and `per_layer` (f32 `[n_layers, d_model]`), with
    ///   [`Measurement::metadata`];
    /// - `.gguf`: a llama.cpp control vector, see [`Measurement::save_gguf`].
    pub fn save(&self, path: &Path, provenance: &Provenance) -> Result<(), MeasureError> {
        let bytes = match extension(path) {
            Some(FileFormat::Safetensors) => self.safetensors_bytes(path, provenance)?,
            Some(FileFormat::Gguf) => self.gguf_bytes(path, provenance)?,
            None => {
                return Err(MeasureError::Extension {
                    path: path.to_path_buf(),
                });
            }
        };
        crate::atomic_file::write(path, &bytes).map_err(|source| MeasureError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    fn safetensors_bytes(
        &self,
        path: &Path,
        provenance: &Provenance,
    ) -> Result<Vec<u8>, MeasureError> {
        let encode = |message: String| MeasureError::Encode {
            path: path.to_path_buf(),
            message,
        };
        let le = |v: &mut dyn Iterator<Item = &f32>| -> Vec<u8> {
            v.flat_map(|x| x.to_le_bytes()).collect()
        };
        let d_model = self.scores.d_model;
        let direction = le(&mut self.direction().iter());
        let per_layer = le(&mut self.per_layer.iter().flatten());
        let views = [
            (
                "direction",
                TensorView::new(Dtype::F32, vec![d_model], &direction)
                    .map_err(|e| encode(e.to_string()))?,
            ),
            (
                "per_layer",
                TensorView::new(Dtype::F32, vec![self.per_layer.len(), d_model], &per_layer)
                    .map_err(|e| encode(e.to_string()))?,
            ),
        ];
        let metadata: HashMap<String, String> = self.metadata(provenance).into_iter().collect();
        let bytes =
            safetensors::serialize(views, Some(metadata)).map_err(|e| encode(e.to_string()))?;
        with_sorted_metadata(bytes).map_err(encode)
    }

    /// A llama.cpp control vector: one f32 tensor `direction.L` of width
    /// d_model per layer L ≥ 1 (the residual after block L, as vauban
    /// numbers layers and llama.cpp applies `direction.L`), metadata
    /// `general.architecture = controlvector`, `controlvector.model_hint`
    /// (the model's architecture) and `controlvector.layer_count`, plus
    /// [`Measurement::metadata`] (llama.cpp ignores keys it does not know;
    /// vauban reads them back for reuse).
    ///
    /// Layer 0 is not written: llama.cpp refuses `direction.0` (it cannot
    /// steer the embedding output). The directions are the measured unit
    /// vectors, harmful minus harmless: a positive `--control-vector-scaled`
    /// factor pushes towards refusal, a negative one away from it.
    fn gguf_bytes(&self, path: &Path, provenance: &Provenance) -> Result<Vec<u8>, MeasureError> {
        use crate::gguf::MetaValue;
        let d_model = self.scores.d_model;
        let names: Vec<String> = (1..self.per_layer.len())
            .map(|l| format!("direction.{l}"))
            .collect();
        let shape = [d_model];
        let tensors: Vec<(&str, &[usize], &[f32])> = names
            .iter()
            .zip(&self.per_layer[1..])
            .map(|(n, v)| (n.as_str(), &shape[..], v.as_slice()))
            .collect();
        let layer_count = u32::try_from(names.len()).map_err(|_| MeasureError::Encode {
            path: path.to_path_buf(),
            message: format!("{} layers do not fit a GGUF u32", names.len()),
        })?;
        let mut metadata = vec![
            (
                "general.architecture".to_owned(),
                MetaValue::Str("controlvector".into()),
            ),
            (
                "controlvector.model_hint".to_owned(),
                MetaValue::Str(
                    provenance
                        .architecture
                        .clone()
                        .unwrap_or_else(|| "unknown".into()),
                ),
            ),
            (
                "controlvector.layer_count".to_owned(),
                MetaValue::U32(layer_count),
            ),
        ];
        metadata.extend(
            self.metadata(provenance)
                .into_iter()
                .map(|(k, v)| (k, MetaValue::Str(v))),
        );
        let metadata: Vec<(&str, MetaValue)> = metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let mut out = std::io::Cursor::new(Vec::new());
        crate::gguf::write_f32(&mut out, &metadata, &tensors).map_err(|message| {
            MeasureError::Encode {
                path: path.to_path_buf(),
                message,
            }
        })?;
        Ok(out.into_inner())
    }
}

/// The formats [`Measurement::save`] writes, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileFormat {
    Safetensors,
    Gguf,
}

fn extension(path: &Path) -> Option<FileFormat> {
    let e = path.extension()?.to_str()?.to_ascii_lowercase();
    match e.as_str() {
        "safetensors" => Some(FileFormat::Safetensors),
        "gguf" => Some(FileFormat::Gguf),
        _ => None,
    }
}

/// The same safetensors bytes with the `__metadata__` keys in sorted order.
/// `safetensors::serialize` writes them in a `HashMap`'s order, which
/// changes from run to run; the file's sha256 is part of cache keys and
/// provenance, so identical measurements must give identical bytes.
fn with_sorted_metadata(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    let bad = || "safetensors wrote a header it cannot read back".to_owned();
    let n = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(bad)?;
    let header = bytes.get(8..8 + n).ok_or_else(bad)?;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|e| format!("{}: {e}", bad()))?;
    if let Some(serde_json::Value::Object(meta)) = header.get_mut("__metadata__") {
        let sorted: BTreeMap<String, serde_json::Value> =
            std::mem::take(meta).into_iter().collect();
        meta.extend(sorted);
    }
    let mut json = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    // The data that follows starts 8-byte aligned, as safetensors writes it.
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + json.len() + bytes.len() - 8 - n);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[8 + n..]);
    Ok(out)
}

/// The metadata strings of a direction file (empty when it has none): a
/// `.safetensors` file's `__metadata__`, or a `.gguf` control vector's
/// string values; for [`Provenance::matches`] and `vauban.layer`.
pub fn read_metadata(path: &Path) -> Result<BTreeMap<String, String>, MeasureError> {
    let bytes =
        crate::input::read_bounded(path, crate::input::MAX_DIRECTION_BYTES).map_err(|e| {
            MeasureError::Io {
                path: path.to_path_buf(),
                source: crate::input::io_error(e),
            }
        })?;
    let read = |format: &'static str, message: String| MeasureError::Read {
        path: path.to_path_buf(),
        format,
        message,
    };
    if extension(path) == Some(FileFormat::Gguf) {
        let file = crate::gguf::GgufFile::read(std::io::Cursor::new(&bytes))
            .map_err(|m| read("GGUF", m))?;
        return Ok(file
            .meta_keys()
            .into_iter()
            .filter_map(|k| {
                let v = file.meta(&k)?.to_str().ok()?.to_owned();
                Some((k, v))
            })
            .collect());
    }
    let (_, meta) =
        SafeTensors::read_metadata(&bytes).map_err(|e| read("safetensors", e.to_string()))?;
    Ok(meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect())
}
