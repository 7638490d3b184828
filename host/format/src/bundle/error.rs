//! Everything that can go wrong reading or writing a bundle, phrased to
//! name the file and the fix.

use std::io;
use std::path::PathBuf;

use crate::trace::{ArtifactKind, TraceError};

/// A bundle that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The path given as a bundle does not exist or is not a folder; holds
    /// that path.
    #[error("no trace bundle at {0}: the folder does not exist")]
    NotFound(PathBuf),
    /// The folder exists but holds no `manifest.json`; holds the folder.
    #[error("{0} is not a trace bundle: it has no manifest.json")]
    NoManifest(PathBuf),
    /// Reading, writing, renaming or syncing a file or folder failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder the operation was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The manifest or a trace file is not valid JSON, or does not have
    /// the expected shape (an unknown or missing field, a wrong type, a
    /// plugin hash that is not sha256 hex).
    #[error("{path} is not a valid {what}: {message}")]
    Json {
        /// The file that could not be parsed.
        path: PathBuf,
        /// What the file should have been: `bundle manifest` or `trace`.
        what: &'static str,
        /// The parser's message, with the path of the offending field
        /// when there is one.
        message: String,
    },
    /// The manifest's `schema_version` is newer than this build reads.
    #[error(
        "bundle {path} has schema version {found}, newer than this vauban reads ({supported}); upgrade vauban to read it"
    )]
    NewerSchema {
        /// The bundle's folder.
        path: PathBuf,
        /// The `schema_version` the manifest holds.
        found: u64,
        /// The version this build reads and writes
        /// ([`SCHEMA_VERSION`](super::SCHEMA_VERSION)).
        supported: u32,
    },
    /// The manifest's `schema_version` is older than this build reads.
    #[error(
        "bundle {path} has schema version {found}, which this vauban does not read (it reads {supported})"
    )]
    UnsupportedSchema {
        /// The bundle's folder.
        path: PathBuf,
        /// The `schema_version` the manifest holds.
        found: u64,
        /// The version this build reads and writes
        /// ([`SCHEMA_VERSION`](super::SCHEMA_VERSION)).
        supported: u32,
    },
    /// The manifest names a file by a path that is empty, absolute, or
    /// holds `.` or `..`: it could point outside the bundle.
    #[error(
        "the manifest of {bundle} names `{file}`, which is not a plain path inside the bundle; a bundle's files must stay inside its folder"
    )]
    UnsafePath {
        /// The bundle's folder.
        bundle: PathBuf,
        /// The path as the manifest writes it.
        file: String,
    },
    /// A trace entry refers to a file that has no entry (size and hash)
    /// under the manifest's `files`.
    #[error(
        "the manifest of {bundle} refers to `{file}` but does not list it under `files`, so it cannot be verified"
    )]
    Unlisted {
        /// The bundle's folder.
        bundle: PathBuf,
        /// The path, relative to the bundle's root, as the manifest writes it.
        file: String,
    },
    /// A file is larger than the bound for its kind, and was refused
    /// before it was read.
    #[error(
        "{path} is {bytes} bytes, over the {limit}-byte limit for {what}; a bundle this large is damaged or was not written by vauban"
    )]
    TooLarge {
        /// The file refused.
        path: PathBuf,
        /// What the file is (`a bundle manifest`, `a trace file`).
        what: &'static str,
        /// The file's size, in bytes.
        bytes: u64,
        /// The largest size read for this kind of file, in bytes.
        limit: u64,
    },
    /// A file the manifest lists is not in the bundle's folder; holds the
    /// file's full path.
    #[error("{0} is listed in the manifest but missing from the bundle")]
    FileMissing(PathBuf),
    /// A bundle file is a symlink, FIFO, device or other non-regular file;
    /// holds its full path.
    #[error(
        "{0} is not a regular file (a symlink, FIFO or device); a bundle holds only plain files"
    )]
    NotRegularFile(PathBuf),
    /// [`Bundle::verify_all`](super::Bundle::verify_all) found a file in the
    /// bundle's folder that is neither the manifest nor listed in it;
    /// holds its full path.
    #[error(
        "{0} is in the bundle's folder but not listed in its manifest, so it cannot be verified; the bundle was changed after it was written"
    )]
    UnlistedFile(PathBuf),
    /// The manifest lists an executor or a model that no trace of the
    /// bundle ran with.
    #[error(
        "the manifest of {bundle} lists {what}, which no trace uses; the manifest was changed after the bundle was written"
    )]
    ManifestUnused {
        /// The bundle's folder.
        bundle: PathBuf,
        /// The unused entry, in words (``executor `candle` ``, ``model `name` ``).
        what: String,
    },
    /// A file's size differs from the size the manifest records for it.
    #[error(
        "{path} is {actual} bytes but the manifest records {expected}: the file was truncated or changed after the bundle was written"
    )]
    SizeMismatch {
        /// The file's full path.
        path: PathBuf,
        /// The size the manifest records, in bytes.
        expected: u64,
        /// The file's size on disk, in bytes.
        actual: u64,
    },
    /// A file's or a raw tensor's sha256 differs from the one the
    /// manifest records.
    #[error(
        "{path} does not match its sha256 in the manifest (expected {expected}, found {actual}): the file was changed or corrupted after the bundle was written"
    )]
    HashMismatch {
        /// The file's full path; for a raw tensor, the tensor file's path
        /// joined with the artifact id.
        path: PathBuf,
        /// The sha256 the manifest records, lowercase hex.
        expected: String,
        /// The sha256 of the bytes read, lowercase hex.
        actual: String,
    },
    /// A trace breaks the trace rules, when read from a bundle or added to
    /// one.
    #[error("{path}: {source}")]
    InvalidTrace {
        /// The trace file read; when writing, the target bundle's folder.
        path: PathBuf,
        /// Every rule the trace breaks.
        #[source]
        source: TraceError,
    },
    /// A trace file holds a trace whose id differs from the id its
    /// manifest entry gives.
    #[error("{path} holds trace `{found}` but the manifest lists it as `{listed}`")]
    TraceIdMismatch {
        /// The trace file's full path.
        path: PathBuf,
        /// The id in the manifest's trace entry.
        listed: String,
        /// The id in the trace file.
        found: String,
    },
    /// Two traces of one bundle (read or being written) share an id; holds
    /// that id.
    #[error("trace id `{0}` appears more than once; trace ids must be unique within a bundle")]
    DuplicateTrace(String),
    /// A trace's executor capabilities or model are not among those the
    /// manifest lists (or are listed with a different declaration).
    #[error(
        "the manifest of {bundle} does not list {what} used by trace `{trace}`; the manifest and the traces disagree"
    )]
    ManifestDisagrees {
        /// The bundle's folder.
        bundle: PathBuf,
        /// The id of the trace whose executor or model is not listed.
        trace: String,
        /// What is not listed, in words (``the capabilities of executor `candle` ``,
        /// ``model `name` ``).
        what: String,
    },
    /// A tensor file cannot be written, or its header cannot be read.
    #[error("{path} is not a readable safetensors file: {message}")]
    Safetensors {
        /// The tensor file's full path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Raw tensor data and a trace's tensor artifacts disagree: data for
    /// an artifact that is not a raw tensor, no data for one that is, or a
    /// dtype, shape or byte range that does not match the summary.
    #[error("trace `{trace}`, artifact `{artifact}`: {detail}")]
    TensorMismatch {
        /// The trace's id.
        trace: String,
        /// The artifact's id (the tensor's key in the tensor file).
        artifact: String,
        /// What disagrees, in words.
        detail: String,
    },
    /// [`Bundle::tensor`](super::Bundle::tensor) was asked for a trace
    /// id the bundle does not hold; holds that id.
    #[error("the bundle has no trace `{0}`")]
    NoSuchTrace(String),
    /// [`Bundle::tensor`](super::Bundle::tensor) was asked for an artifact
    /// id the trace does not hold.
    #[error("trace `{trace}` has no artifact `{artifact}`")]
    NoSuchArtifact {
        /// The trace's id.
        trace: String,
        /// The artifact id asked for.
        artifact: String,
    },
    /// The tensor artifact exists but only its summary was stored
    /// (`raw: false`).
    #[error(
        "trace `{trace}` has no raw tensor for artifact `{artifact}`: only its summary was kept (record with raw tensors to keep the data)"
    )]
    NoRawTensor {
        /// The trace's id.
        trace: String,
        /// The artifact's id.
        artifact: String,
    },
    /// Raw data was asked for an artifact that does not carry a tensor.
    #[error(
        "artifact `{artifact}` of trace `{trace}` is `{kind}`, not a tensor; only tensor artifacts have raw data"
    )]
    NotATensor {
        /// The trace's id.
        trace: String,
        /// The artifact's id.
        artifact: String,
        /// The artifact's kind.
        kind: ArtifactKind,
    },
    /// The target of a [`WriteMode::CreateNew`](super::WriteMode::CreateNew)
    /// write already exists; holds the target path.
    #[error(
        "a bundle already exists at {0}; choose another path, or replace it (`--replace` on the command line, `WriteMode::Replace` in the library)"
    )]
    Exists(PathBuf),
    /// The target of a [`WriteMode::Replace`](super::WriteMode::Replace)
    /// write exists but is not a bundle, so it is left alone; holds the
    /// target path.
    #[error(
        "{0} exists and is not a trace bundle (it has no manifest.json); vauban replaces only bundles, so choose another path"
    )]
    NotABundleToReplace(PathBuf),
}

impl BundleError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> BundleError {
        let path = path.into();
        move |source| BundleError::Io { path, source }
    }
}
