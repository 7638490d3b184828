//! Reading a bundle: the manifest and the trace files are verified against
//! their hashes when the bundle is opened; tensor files are memory-mapped
//! and only their headers are read, so a bundle of many GB opens in
//! milliseconds. A raw tensor is hashed when it is first read;
//! [`Bundle::verify_all`] hashes everything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use memmap2::Mmap;

use super::BundleError;
use super::manifest::{FileEntry, MANIFEST_FILE, Manifest, SCHEMA_VERSION, TensorFileEntry};
use crate::hash::{sha256_file, sha256_hex};
use crate::trace::{ArtifactData, DType, TensorData, TensorRef, Trace, is_sha256_hex};

/// An opened, verified bundle.
#[derive(Debug)]
pub struct Bundle {
    root: PathBuf,
    manifest: Manifest,
    traces: Vec<Trace>,
    /// Per trace (same order), its memory-mapped tensor file, if any.
    tensor_files: Vec<Option<TensorFile>>,
    /// Trace id → index, and per trace artifact id → index: a tensor read
    /// is a lookup, not a scan (reading every tensor stays linear).
    trace_index: HashMap<String, usize>,
    artifact_index: Vec<HashMap<String, usize>>,
}

/// What [`Bundle::verify_all`] checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Files hashed: every file the manifest lists.
    pub files: usize,
    /// Bytes hashed over those files.
    pub bytes: u64,
    /// Raw tensors checked against their own hashes.
    pub tensors: usize,
}

#[derive(Debug)]
struct TensorFile {
    path: PathBuf,
    mmap: Mmap,
    tensors: BTreeMap<String, StoredTensor>,
    /// Tensors whose hash has been checked since the bundle was opened.
    verified: Mutex<HashSet<String>>,
}

#[derive(Debug)]
struct StoredTensor {
    dtype: DType,
    shape: Vec<usize>,
    range: Range<usize>,
    sha256: String,
}

impl Bundle {
    /// Opens the bundle at `path`, verifying the manifest, the trace files'
    /// hashes, every trace's rules, and the tensor files' sizes and headers.
    pub fn open(path: impl AsRef<Path>) -> Result<Bundle, BundleError> {
        let root = path.as_ref().to_path_buf();
        if !root.is_dir() {
            return Err(BundleError::NotFound(root));
        }
        let manifest = read_manifest(&root)?;
        let listed = Listed::of(&manifest);
        let mut traces = Vec::with_capacity(manifest.traces.len());
        let mut tensor_files = Vec::with_capacity(manifest.traces.len());
        let mut ids = HashSet::new();
        for entry in &manifest.traces {
            if !ids.insert(entry.id.as_str()) {
                return Err(BundleError::DuplicateTrace(entry.id.clone()));
            }
            let trace = read_trace(&root, &manifest, &entry.file, &entry.id)?;
            check_manifest_lists(&root, &listed, &trace)?;
            let tensors = match &entry.tensors {
                Some(t) => Some(open_tensor_file(&root, &manifest, t, &trace)?),
                None => None,
            };
            check_every_raw_tensor_stored(&trace, tensors.as_ref())?;
            traces.push(trace);
            tensor_files.push(tensors);
        }
        check_manifest_entries_used(&root, &manifest, &traces)?;
        tracing::debug!(bundle = %root.display(), traces = traces.len(), "bundle opened");
        let trace_index = traces
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        let artifact_index = traces
            .iter()
            .map(|t| {
                t.artifacts
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (a.id.clone(), i))
                    .collect()
            })
            .collect();
        Ok(Bundle {
            root,
            manifest,
            traces,
            tensor_files,
            trace_index,
            artifact_index,
        })
    }

    /// The bundle's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The traces, in recorded order.
    pub fn traces(&self) -> &[Trace] {
        &self.traces
    }

    /// The trace with this id.
    pub fn trace(&self, id: &str) -> Option<&Trace> {
        self.traces.iter().find(|t| t.id == id)
    }

    /// Every raw tensor of `trace` (its artifacts with `raw: true`), copied
    /// out of the bundle by artifact id: what a trace writer takes back.
    pub fn raw_tensors(&self, trace: &Trace) -> Result<HashMap<String, TensorData>, BundleError> {
        let mut out = HashMap::new();
        for a in &trace.artifacts {
            if let ArtifactData::Tensor { raw: true, .. } = a.data {
                let r = self.tensor(&trace.id, &a.id)?;
                let data = TensorData::new(r.dtype, r.shape.to_vec(), r.bytes.to_vec())
                    .expect("a verified tensor's bytes match its shape");
                out.insert(a.id.clone(), data);
            }
        }
        Ok(out)
    }

    /// The raw data of a tensor artifact, read from the memory map (only the
    /// pages of this tensor are touched) and checked against its hash the
    /// first time it is read.
    pub fn tensor(&self, trace: &str, artifact: &str) -> Result<TensorRef<'_>, BundleError> {
        let index = *self
            .trace_index
            .get(trace)
            .ok_or_else(|| BundleError::NoSuchTrace(trace.to_owned()))?;
        let t = &self.traces[index];
        let no_raw = || BundleError::NoRawTensor {
            trace: trace.to_owned(),
            artifact: artifact.to_owned(),
        };
        match self.artifact_index[index]
            .get(artifact)
            .map(|&i| &t.artifacts[i])
        {
            None => {
                return Err(BundleError::NoSuchArtifact {
                    trace: trace.to_owned(),
                    artifact: artifact.to_owned(),
                });
            }
            Some(a) if !matches!(a.data, ArtifactData::Tensor { .. }) => {
                return Err(BundleError::NotATensor {
                    trace: trace.to_owned(),
                    artifact: artifact.to_owned(),
                    kind: a.kind,
                });
            }
            Some(_) => {}
        }
        let file = self.tensor_files[index].as_ref().ok_or_else(no_raw)?;
        let stored = file.tensors.get(artifact).ok_or_else(no_raw)?;
        let bytes = &file.mmap[stored.range.clone()];
        let mut verified = file.verified.lock().expect("no panics while held");
        if !verified.contains(artifact) {
            let actual = sha256_hex(bytes);
            if actual != stored.sha256 {
                return Err(BundleError::HashMismatch {
                    path: file.path.join(artifact),
                    expected: stored.sha256.clone(),
                    actual,
                });
            }
            verified.insert(artifact.to_owned());
        }
        Ok(TensorRef {
            dtype: stored.dtype,
            shape: &stored.shape,
            bytes,
        })
    }

    /// How many values a tensor artifact holds, from its recorded summary
    /// (nothing is read from the tensor file).
    pub fn tensor_numel(&self, trace: &str, artifact: &str) -> Option<u64> {
        let t = *self.trace_index.get(trace)?;
        let a = &self.traces[t].artifacts[*self.artifact_index[t].get(artifact)?];
        match &a.data {
            ArtifactData::Tensor { summary, .. } => Some(summary.numel),
            _ => None,
        }
    }

    /// Hashes every file and every raw tensor against the manifest.
    pub fn verify_all(&self) -> Result<Verified, BundleError> {
        let mut bytes = 0;
        for (relative, entry) in &self.manifest.files {
            let path = self.root.join(relative);
            check_size(&path, entry)?;
            let (actual, len) = sha256_file(&path).map_err(BundleError::io(&path))?;
            check_hash(&path, &entry.sha256, actual)?;
            bytes += len;
        }
        self.check_no_unlisted_files()?;
        let mut tensors = 0;
        for (trace, file) in self.traces.iter().zip(&self.tensor_files) {
            for artifact in file.iter().flat_map(|f| f.tensors.keys()) {
                self.tensor(&trace.id, artifact)?;
                tensors += 1;
            }
        }
        Ok(Verified {
            files: self.manifest.files.len(),
            bytes,
            tensors,
        })
    }
}

impl Bundle {
    /// Every file in the bundle's folder is the manifest or listed in it:
    /// a trace dropped from the manifest with its file left behind, or a
    /// file slipped in, is reported rather than ignored.
    fn check_no_unlisted_files(&self) -> Result<(), BundleError> {
        let mut pending = vec![self.root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).map_err(BundleError::io(&dir))? {
                let entry = entry.map_err(BundleError::io(&dir))?;
                let path = entry.path();
                if entry.file_type().map_err(BundleError::io(&path))?.is_dir() {
                    pending.push(path);
                    continue;
                }
                let relative = path
                    .strip_prefix(&self.root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace(std::path::MAIN_SEPARATOR, "/");
                if relative != MANIFEST_FILE && !self.manifest.files.contains_key(&relative) {
                    return Err(BundleError::UnlistedFile(path));
                }
            }
        }
        Ok(())
    }
}

/// The largest manifest read: one entry is a few hundred bytes, so this is
/// room for about a hundred thousand traces.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// The largest trace file read (its tensors are in separate files).
pub const MAX_TRACE_FILE_BYTES: u64 = 256 << 20;

/// A bundle file of at most `limit` bytes, refused before it is read.
fn read_bounded(path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, BundleError> {
    use crate::input::ReadProblem;
    crate::input::read_bounded(path, limit).map_err(|e| match e {
        ReadProblem::Io(source) => BundleError::io(path)(source),
        ReadProblem::NotRegular => BundleError::NotRegularFile(path.to_path_buf()),
        ReadProblem::TooLarge { bytes, limit } => BundleError::TooLarge {
            path: path.to_path_buf(),
            what,
            bytes,
            limit,
        },
    })
}

fn read_manifest(root: &Path) -> Result<Manifest, BundleError> {
    let path = root.join(MANIFEST_FILE);
    if !path.is_file() {
        return Err(BundleError::NoManifest(root.to_path_buf()));
    }
    let bytes = read_bounded(&path, "a bundle manifest", MAX_MANIFEST_BYTES)?;
    let json_error = |message: String| BundleError::Json {
        path: path.clone(),
        what: "bundle manifest",
        message,
    };
    // The version is read first, so a newer bundle gets "upgrade vauban"
    // rather than a complaint about a field this build does not know.
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| json_error(e.to_string()))?;
    let found = value
        .get("schema_version")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| json_error("`schema_version` is missing or not a whole number".into()))?;
    if found > u64::from(SCHEMA_VERSION) {
        return Err(BundleError::NewerSchema {
            path: root.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < u64::from(SCHEMA_VERSION) {
        return Err(BundleError::UnsupportedSchema {
            path: root.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let manifest: Manifest = parse_json(&bytes).map_err(json_error)?;
    if let Some(p) = manifest.plugins.iter().find(|p| !is_sha256_hex(&p.sha256)) {
        return Err(json_error(format!(
            "plugin `{}` has sha256 `{}`, which is not 64 lowercase hex digits",
            p.name, p.sha256
        )));
    }
    for file in manifest.files.keys() {
        check_relative(root, file)?;
    }
    Ok(manifest)
}

fn read_trace(
    root: &Path,
    manifest: &Manifest,
    relative: &str,
    listed_id: &str,
) -> Result<Trace, BundleError> {
    let (path, entry) = listed_file(root, manifest, relative)?;
    check_size(&path, entry)?;
    let bytes = read_bounded(&path, "a trace file", MAX_TRACE_FILE_BYTES)?;
    check_hash(&path, &entry.sha256, sha256_hex(&bytes))?;
    let trace: Trace = parse_json(&bytes).map_err(|message| BundleError::Json {
        path: path.clone(),
        what: "trace",
        message,
    })?;
    if trace.id != listed_id {
        return Err(BundleError::TraceIdMismatch {
            path,
            listed: listed_id.to_owned(),
            found: trace.id,
        });
    }
    trace
        .validate()
        .map_err(|source| BundleError::InvalidTrace { path, source })?;
    Ok(trace)
}

/// A value's JSON, to compare values without `Hash` through a set.
fn json_key<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("executor and model records serialise (string keys only)")
}

/// The executors and models a manifest lists, as [`json_key`]s.
struct Listed {
    executors: HashSet<String>,
    models: HashSet<String>,
}

impl Listed {
    fn of(manifest: &Manifest) -> Listed {
        Listed {
            executors: manifest.executors.iter().map(json_key).collect(),
            models: manifest.models.iter().map(json_key).collect(),
        }
    }
}

/// The manifest lists the trace's executor (with the same declaration) and model.
fn check_manifest_lists(root: &Path, listed: &Listed, trace: &Trace) -> Result<(), BundleError> {
    let disagrees = |what: String| BundleError::ManifestDisagrees {
        bundle: root.to_path_buf(),
        trace: trace.id.clone(),
        what,
    };
    if !listed.executors.contains(&json_key(&trace.capabilities)) {
        return Err(disagrees(format!(
            "the capabilities of executor `{}`",
            trace.capabilities.executor
        )));
    }
    if !listed.models.contains(&json_key(&trace.model)) {
        return Err(disagrees(format!("model `{}`", trace.model.name)));
    }
    Ok(())
}

/// Every executor and model the manifest lists is used by some trace.
fn check_manifest_entries_used(
    root: &Path,
    manifest: &Manifest,
    traces: &[Trace],
) -> Result<(), BundleError> {
    let unused = |what: String| BundleError::ManifestUnused {
        bundle: root.to_path_buf(),
        what,
    };
    // Compared by their JSON, through a set: linear in the bundle's size.
    let used_executors: HashSet<String> =
        traces.iter().map(|t| json_key(&t.capabilities)).collect();
    if let Some(e) = manifest
        .executors
        .iter()
        .find(|e| !used_executors.contains(&json_key(*e)))
    {
        return Err(unused(format!("executor `{}`", e.executor)));
    }
    let used_models: HashSet<String> = traces.iter().map(|t| json_key(&t.model)).collect();
    if let Some(m) = manifest
        .models
        .iter()
        .find(|m| !used_models.contains(&json_key(*m)))
    {
        return Err(unused(format!("model `{}`", m.name)));
    }
    Ok(())
}

fn open_tensor_file(
    root: &Path,
    manifest: &Manifest,
    entry: &TensorFileEntry,
    trace: &Trace,
) -> Result<TensorFile, BundleError> {
    let (path, file_entry) = listed_file(root, manifest, &entry.file)?;
    check_size(&path, file_entry)?;
    let file = File::open(&path).map_err(BundleError::io(&path))?;
    // SAFETY: the map is read-only; a bundle is immutable once published
    // (writers build a new folder and rename it), and every tensor is
    // checked against its hash before its bytes are handed out.
    let mmap = unsafe { Mmap::map(&file) }.map_err(BundleError::io(&path))?;
    let bad = |message: String| BundleError::Safetensors {
        path: path.clone(),
        message,
    };
    // Parsing the header touches only its own pages, never the tensor data.
    let header = read_header(&mmap).map_err(bad)?;
    let mut tensors = BTreeMap::new();
    for (name, info) in header.tensors {
        let mismatch = |detail: String| BundleError::TensorMismatch {
            trace: trace.id.clone(),
            artifact: name.clone(),
            detail,
        };
        let Some(ArtifactData::Tensor { summary, raw: true }) =
            trace.artifact(&name).map(|a| &a.data)
        else {
            return Err(mismatch(format!(
                "{} holds a tensor for it, but the trace has no raw tensor artifact of that id",
                path.display()
            )));
        };
        let dtype = DType::from_safetensors(info.dtype)
            .ok_or_else(|| mismatch(format!("unsupported dtype {:?}", info.dtype)))?;
        if dtype != summary.dtype || info.shape != summary.shape {
            return Err(mismatch(format!(
                "stored as {dtype} {:?} but the summary says {} {:?}",
                info.shape, summary.dtype, summary.shape
            )));
        }
        let sha256 = entry.sha256.get(&name).cloned().ok_or_else(|| {
            mismatch("the manifest records no sha256 for this tensor".to_string())
        })?;
        let (start, end) = info.data_offsets;
        let expected = info
            .shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d));
        let range = header.data_start.checked_add(start)..header.data_start.checked_add(end);
        let fits = match (expected, range.start, range.end) {
            (Some(bytes), Some(a), Some(b)) => a <= b && b - a == bytes && b <= mmap.len(),
            _ => false,
        };
        if !fits {
            return Err(mismatch(format!(
                "its byte range {start}..{end} does not fit its shape or the file; the file is damaged"
            )));
        }
        let (Some(start), Some(end)) = (range.start, range.end) else {
            unreachable!("checked above")
        };
        tensors.insert(
            name.clone(),
            StoredTensor {
                dtype,
                shape: info.shape.clone(),
                range: start..end,
                sha256,
            },
        );
    }
    Ok(TensorFile {
        path,
        mmap,
        tensors,
        verified: Mutex::new(HashSet::new()),
    })
}

/// A safetensors header: where the data starts, and each tensor's entry.
struct Header {
    data_start: usize,
    tensors: BTreeMap<String, safetensors::tensor::TensorInfo>,
}

/// Reads a safetensors header with checked arithmetic (the format's own
/// reader can overflow on hostile offsets): an 8-byte little-endian length,
/// then that many bytes of JSON.
fn read_header(file: &[u8]) -> Result<Header, String> {
    let len_bytes: [u8; 8] = file
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or("the file is shorter than a safetensors header")?;
    let header_len = usize::try_from(u64::from_le_bytes(len_bytes))
        .map_err(|_| "the header length does not fit in memory")?;
    let data_start = header_len
        .checked_add(8)
        .filter(|&end| end <= file.len())
        .ok_or("the header length runs past the end of the file")?;
    let mut entries: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&file[8..data_start]).map_err(|e| format!("bad header: {e}"))?;
    entries.remove("__metadata__");
    let tensors = entries
        .into_iter()
        .map(|(name, value)| {
            serde_json::from_value(value)
                .map(|info| (name.clone(), info))
                .map_err(|e| format!("bad header entry `{name}`: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Header {
        data_start,
        tensors,
    })
}

fn check_every_raw_tensor_stored(
    trace: &Trace,
    file: Option<&TensorFile>,
) -> Result<(), BundleError> {
    for a in &trace.artifacts {
        let stored = file.is_some_and(|f| f.tensors.contains_key(&a.id));
        if matches!(a.data, ArtifactData::Tensor { raw: true, .. }) && !stored {
            return Err(BundleError::TensorMismatch {
                trace: trace.id.clone(),
                artifact: a.id.clone(),
                detail: "marked `raw: true` but the bundle holds no data for it".into(),
            });
        }
    }
    Ok(())
}

/// A file the manifest refers to: inside the bundle and listed with a hash.
fn listed_file<'m>(
    root: &Path,
    manifest: &'m Manifest,
    relative: &str,
) -> Result<(PathBuf, &'m FileEntry), BundleError> {
    check_relative(root, relative)?;
    let entry = manifest
        .files
        .get(relative)
        .ok_or_else(|| BundleError::Unlisted {
            bundle: root.to_path_buf(),
            file: relative.to_owned(),
        })?;
    Ok((root.join(relative), entry))
}

fn check_relative(root: &Path, relative: &str) -> Result<(), BundleError> {
    let plain = !relative.is_empty()
        && Path::new(relative)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(BundleError::UnsafePath {
            bundle: root.to_path_buf(),
            file: relative.to_owned(),
        })
    }
}

/// The file is a regular file (not a symlink, FIFO or device, which could
/// point outside the bundle or never end) of the recorded size.
fn check_size(path: &Path, entry: &FileEntry) -> Result<(), BundleError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BundleError::FileMissing(path.to_path_buf()));
        }
        Err(e) => return Err(BundleError::io(path)(e)),
    };
    if !meta.file_type().is_file() {
        return Err(BundleError::NotRegularFile(path.to_path_buf()));
    }
    if meta.len() != entry.bytes {
        return Err(BundleError::SizeMismatch {
            path: path.to_path_buf(),
            expected: entry.bytes,
            actual: meta.len(),
        });
    }
    Ok(())
}

fn check_hash(path: &Path, expected: &str, actual: String) -> Result<(), BundleError> {
    if actual == expected {
        Ok(())
    } else {
        Err(BundleError::HashMismatch {
            path: path.to_path_buf(),
            expected: expected.to_owned(),
            actual,
        })
    }
}

/// JSON into a typed value; the error names the path of the offending field.
fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        if at == "." {
            inner.to_string()
        } else {
            format!("at `{at}`: {inner}")
        }
    })
}
