//! Writing a bundle: traces stream into a hidden folder beside the target,
//! and the folder is renamed into place only once the manifest is written,
//! so a reader never sees half a bundle and a crash leaves the old one intact.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use safetensors::tensor::View;

use super::BundleError;
use super::manifest::{
    FileEntry, MANIFEST_FILE, Manifest, PluginRef, SCHEMA_VERSION, TensorFileEntry, ToolRef,
    TraceEntry,
};
use crate::hash::sha256_hex;
use crate::trace::{ArtifactData, Capabilities, ModelRef, TensorData, Trace};
use sha2::{Digest, Sha256};

/// What to do when the target folder already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Refuse to touch an existing bundle.
    CreateNew,
    /// Replace it, atomically, once the new bundle is complete.
    Replace,
}

/// A bundle being written. Call [`BundleWriter::finish`] to publish it;
/// dropping the writer without finishing removes the partial folder.
#[derive(Debug)]
pub struct BundleWriter {
    target: PathBuf,
    staging: PathBuf,
    mode: WriteMode,
    created_at: DateTime<Utc>,
    executors: Vec<Capabilities>,
    models: Vec<ModelRef>,
    plugins: Vec<PluginRef>,
    traces: Vec<TraceEntry>,
    trace_ids: HashSet<String>,
    files: BTreeMap<String, FileEntry>,
    imported: Option<super::manifest::ImportedFrom>,
    sharded: Option<super::manifest::Sharded>,
    transformation: Option<String>,
    finished: bool,
}

impl BundleWriter {
    /// Starts a bundle that will be published at `target`.
    pub fn create(target: impl AsRef<Path>, mode: WriteMode) -> Result<Self, BundleError> {
        let target = target.as_ref().to_path_buf();
        check_target(&target, mode)?;
        let parent = parent_of(&target).to_path_buf();
        fs::create_dir_all(&parent).map_err(BundleError::io(&parent))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bundle".into());
        let staging = parent.join(format!(".{name}.partial-{}", unique_suffix()));
        // `create_dir`, not `create_dir_all`: a staging folder is never shared.
        for dir in [&staging, &staging.join("traces"), &staging.join("tensors")] {
            fs::create_dir(dir).map_err(BundleError::io(dir))?;
        }
        tracing::debug!(staging = %staging.display(), "writing bundle");
        Ok(BundleWriter {
            target,
            staging,
            mode,
            created_at: Utc::now(),
            executors: Vec::new(),
            models: Vec::new(),
            plugins: Vec::new(),
            traces: Vec::new(),
            trace_ids: HashSet::new(),
            files: BTreeMap::new(),
            imported: None,
            sharded: None,
            transformation: None,
            finished: false,
        })
    }

    /// Sets the creation time recorded in the manifest (for reproducible fixtures).
    pub fn created_at(&mut self, at: DateTime<Utc>) {
        self.created_at = at;
    }

    /// Records the log the traces were imported from.
    pub fn imported(&mut self, from: super::manifest::ImportedFrom) {
        self.imported = Some(from);
    }

    /// Records what the run did to its model, in words.
    pub fn transformation(&mut self, describe: String) {
        self.transformation = Some(describe);
    }

    /// Records that the traces were recorded in shards and merged.
    pub fn sharded(&mut self, sharded: super::manifest::Sharded) {
        self.sharded = Some(sharded);
    }

    /// Records a plugin whose output the bundle holds.
    pub fn add_plugin(&mut self, plugin: PluginRef) {
        self.plugins.push(plugin);
    }

    /// Validates `trace` and writes it, with the raw data of every tensor
    /// artifact marked `raw` (keyed by artifact id), to the staging folder.
    pub fn add_trace(
        &mut self,
        trace: &Trace,
        tensors: &HashMap<String, TensorData>,
    ) -> Result<(), BundleError> {
        trace
            .validate()
            .map_err(|source| BundleError::InvalidTrace {
                path: self.target.clone(),
                source,
            })?;
        if self.trace_ids.contains(&trace.id) {
            return Err(BundleError::DuplicateTrace(trace.id.clone()));
        }
        check_raw_tensors(trace, tensors)?;
        self.trace_ids.insert(trace.id.clone());

        let n = self.traces.len();
        let json = serde_json::to_vec_pretty(trace).expect("a trace always serialises");
        let file = format!("traces/{n:06}.json");
        self.write_file(&file, &json)?;

        let tensor_entry = if tensors.is_empty() {
            None
        } else {
            let file = format!("tensors/{n:06}.safetensors");
            let path = self.staging.join(&file);
            let mut meta = HashMap::new();
            meta.insert("trace".to_string(), trace.id.clone());
            let (header, ordered) =
                safetensors_layout(tensors, meta).map_err(|message| BundleError::Safetensors {
                    path: path.clone(),
                    message,
                })?;
            let parts: Vec<&[u8]> = std::iter::once(header.as_slice())
                .chain(ordered.iter().map(|(_, t)| t.bytes.as_slice()))
                .collect();
            // The file goes out part by part from the tensors' own memory
            // (no copy of it is assembled), while two threads take the
            // file's hash and each tensor's from the same memory: no pass
            // reads the file back. Assembling the file first cost a full
            // trace's 25 MB in a copy and fresh pages, a third of writing it.
            let (written, file_sha256, sha256) = std::thread::scope(|s| {
                let file_hash = s.spawn(|| {
                    let mut h = Sha256::new();
                    parts.iter().for_each(|p| h.update(p));
                    hex::encode(h.finalize())
                });
                let tensor_hashes = s.spawn(|| {
                    ordered
                        .iter()
                        .map(|(id, t)| ((*id).clone(), sha256_hex(&t.bytes)))
                        .collect()
                });
                let written = write_parts_synced(&path, &parts);
                let join = "a hash thread does not panic";
                (
                    written,
                    file_hash.join().expect(join),
                    tensor_hashes.join().expect(join),
                )
            });
            written?;
            let entry = FileEntry {
                bytes: parts.iter().map(|p| p.len() as u64).sum(),
                sha256: file_sha256,
            };
            self.files.insert(file.clone(), entry);
            Some(TensorFileEntry { file, sha256 })
        };

        self.traces.push(TraceEntry {
            id: trace.id.clone(),
            file,
            tensors: tensor_entry,
        });
        if !self.executors.contains(&trace.capabilities) {
            self.executors.push(trace.capabilities.clone());
        }
        if !self.models.contains(&trace.model) {
            self.models.push(trace.model.clone());
        }
        Ok(())
    }

    /// Writes the manifest and moves the bundle into place.
    pub fn finish(mut self) -> Result<Manifest, BundleError> {
        let manifest = Manifest {
            schema_version: SCHEMA_VERSION,
            tool: ToolRef::current(),
            created_at: self.created_at,
            executors: self.executors.clone(),
            models: self.models.clone(),
            plugins: self.plugins.clone(),
            traces: self.traces.clone(),
            files: self.files.clone(),
            imported: self.imported.clone(),
            sharded: self.sharded.clone(),
            transformation: self.transformation.clone(),
        };
        let json = serde_json::to_vec_pretty(&manifest).expect("a manifest always serialises");
        let path = self.staging.join(MANIFEST_FILE);
        write_synced(&path, &json)?;
        for dir in ["traces", "tensors", ""] {
            fsync(&self.staging.join(dir))?;
        }
        self.publish()?;
        self.finished = true;
        tracing::info!(bundle = %self.target.display(), traces = manifest.traces.len(), "bundle written");
        Ok(manifest)
    }

    fn publish(&self) -> Result<(), BundleError> {
        let target = &self.target;
        check_target(target, self.mode)?;
        if !target.exists() {
            fs::rename(&self.staging, target).map_err(BundleError::io(target))?;
            return fsync(parent_of(target));
        }
        // Swap: the old bundle steps aside, the new one takes its name, then
        // the old one goes. If the second rename fails the first is undone,
        // so the target always ends as the old bundle or the new one; a
        // reader arriving between the two renames finds no bundle and must retry.
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        let old = target.with_file_name(format!(".{name}.old-{}", unique_suffix()));
        fs::rename(target, &old).map_err(BundleError::io(target))?;
        if let Err(e) = fs::rename(&self.staging, target) {
            let _ = fs::rename(&old, target);
            return Err(BundleError::io(target)(e));
        }
        fsync(parent_of(target))?;
        fs::remove_dir_all(&old).map_err(BundleError::io(&old))
    }

    fn write_file(&mut self, relative: &str, bytes: &[u8]) -> Result<(), BundleError> {
        write_synced(&self.staging.join(relative), bytes)?;
        self.files.insert(
            relative.to_owned(),
            FileEntry {
                bytes: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            },
        );
        Ok(())
    }
}

impl Drop for BundleWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_dir_all(&self.staging);
        }
    }
}

/// Raw tensors are given exactly for the artifacts marked `raw`, and agree
/// with their summaries' dtype and shape.
fn check_raw_tensors(
    trace: &Trace,
    tensors: &HashMap<String, TensorData>,
) -> Result<(), BundleError> {
    let mismatch = |artifact: &str, detail: String| BundleError::TensorMismatch {
        trace: trace.id.clone(),
        artifact: artifact.to_owned(),
        detail,
    };
    for (id, tensor) in tensors {
        match trace.artifact(id).map(|a| &a.data) {
            Some(ArtifactData::Tensor { summary, raw: true }) => {
                if summary.dtype != tensor.dtype || summary.shape != tensor.shape {
                    return Err(mismatch(
                        id,
                        format!(
                            "raw data is {} {:?} but the summary says {} {:?}",
                            tensor.dtype, tensor.shape, summary.dtype, summary.shape
                        ),
                    ));
                }
            }
            Some(ArtifactData::Tensor { raw: false, .. }) => {
                return Err(mismatch(
                    id,
                    "raw data was given but the artifact is marked summary-only (`raw: false`)"
                        .into(),
                ));
            }
            Some(_) => {
                return Err(mismatch(
                    id,
                    "raw data was given for a non-tensor artifact".into(),
                ));
            }
            None => {
                return Err(mismatch(
                    id,
                    "raw data was given for an artifact the trace does not hold".into(),
                ));
            }
        }
    }
    for a in &trace.artifacts {
        if matches!(a.data, ArtifactData::Tensor { raw: true, .. }) && !tensors.contains_key(&a.id)
        {
            return Err(mismatch(
                &a.id,
                "the artifact is marked `raw: true` but no raw data was given".into(),
            ));
        }
    }
    Ok(())
}

/// Tensors by artifact id, in the order of their data in a file.
type Ordered<'a> = Vec<(&'a String, &'a TensorData)>;

/// The start of a safetensors file holding `tensors` (the header's length
/// and the header, as the safetensors crate writes them) and the tensors in
/// the order their data follows it.
///
/// The crate lays the header out from each tensor's length alone, so it is
/// asked for a file of tensors without data; the tensors are then taken in
/// the order of the offsets that header gives them.
fn safetensors_layout(
    tensors: &HashMap<String, TensorData>,
    meta: HashMap<String, String>,
) -> Result<(Vec<u8>, Ordered<'_>), String> {
    let views = tensors.iter().map(|(id, t)| {
        (
            id.clone(),
            TensorView {
                tensor: t,
                data: false,
            },
        )
    });
    let header = safetensors::serialize(views, Some(meta)).map_err(|e| e.to_string())?;
    let json_len = u64::from_le_bytes(header[..8].try_into().expect("8 bytes")) as usize;
    let json: serde_json::Value =
        serde_json::from_slice(&header[8..8 + json_len]).map_err(|e| e.to_string())?;
    let start = |id: &str| json[id]["data_offsets"][0].as_u64();
    let mut ordered: Ordered<'_> = tensors.iter().collect();
    if let Some((id, _)) = ordered.iter().find(|(id, _)| start(id).is_none()) {
        return Err(format!("the header places no tensor {id}"));
    }
    ordered.sort_by_key(|(id, _)| start(id));
    Ok((header, ordered))
}

/// A tensor as safetensors sees it: dtype, shape and length, and its bytes
/// where `data` (the header alone needs none).
struct TensorView<'a> {
    tensor: &'a TensorData,
    data: bool,
}

impl View for TensorView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        self.tensor.dtype.to_safetensors()
    }
    fn shape(&self) -> &[usize] {
        &self.tensor.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        match self.data {
            true => Cow::Borrowed(&self.tensor.bytes),
            false => Cow::Borrowed(&[]),
        }
    }
    fn data_len(&self) -> usize {
        self.tensor.bytes.len()
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    write_parts_synced(path, &[bytes])
}

/// Writes `parts` one after another as the file at `path`, and syncs it.
fn write_parts_synced(path: &Path, parts: &[&[u8]]) -> Result<(), BundleError> {
    let mut f = File::create(path).map_err(BundleError::io(path))?;
    for part in parts {
        f.write_all(part).map_err(BundleError::io(path))?;
    }
    f.sync_all().map_err(BundleError::io(path))
}

/// fsync a file, or a directory (which makes its new entries durable
/// before the rename publishes them).
fn fsync(path: &Path) -> Result<(), BundleError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(BundleError::io(path))
}

/// The folder a target lives in (`.` for a bare name).
fn parent_of(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A target may be created when absent, and replaced only when it is a bundle.
fn check_target(target: &Path, mode: WriteMode) -> Result<(), BundleError> {
    if !target.exists() {
        return Ok(());
    }
    match mode {
        WriteMode::CreateNew => Err(BundleError::Exists(target.to_path_buf())),
        WriteMode::Replace if target.join(MANIFEST_FILE).is_file() => Ok(()),
        WriteMode::Replace => Err(BundleError::NotABundleToReplace(target.to_path_buf())),
    }
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::DType;

    #[test]
    fn the_streamed_file_is_the_one_safetensors_writes() {
        // Mixed alignments and names out of order, so the crate reorders.
        let mut tensors = HashMap::new();
        let specs = [
            ("a9", DType::U8, vec![3usize], 1usize),
            ("a10", DType::F32, vec![2, 3], 4),
            ("b", DType::F16, vec![5], 2),
            ("a2", DType::I64, vec![2], 8),
            ("z", DType::U32, vec![1, 4], 4),
            ("c", DType::Bf16, vec![0, 7], 2),
        ];
        for (i, (id, dtype, shape, size)) in specs.into_iter().enumerate() {
            let len = shape.iter().product::<usize>() * size;
            let bytes = (0..len).map(|b| (b * 31 + i * 7) as u8).collect();
            tensors.insert(
                id.to_string(),
                TensorData::new(dtype, shape, bytes).unwrap(),
            );
        }
        let meta = HashMap::from([("trace".to_string(), "t0".to_string())]);

        let (header, ordered) = safetensors_layout(&tensors, meta.clone()).unwrap();
        let mut streamed = header;
        for (_, t) in &ordered {
            streamed.extend_from_slice(&t.bytes);
        }
        let views = tensors.iter().map(|(id, t)| {
            let view = TensorView {
                tensor: t,
                data: true,
            };
            (id.clone(), view)
        });
        let reference = safetensors::serialize(views, Some(meta)).unwrap();
        assert_eq!(streamed, reference);
    }
}
