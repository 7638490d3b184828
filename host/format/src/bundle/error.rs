//! Everything that can go wrong reading or writing a bundle, phrased to
//! name the file and the fix.

use std::io;
use std::path::PathBuf;

use crate::trace::{ArtifactKind, TraceError};

/// A bundle that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("no trace bundle at {0}: the folder does not exist")]
    NotFound(PathBuf),
    #[error("{0} is not a trace bundle: it has no manifest.json")]
    NoManifest(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a valid {what}: {message}")]
    Json {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
    #[error(
        "bundle {path} has schema version {found}, newer than this vauban reads ({supported}); upgrade vauban to read it"
    )]
    NewerSchema {
        path: PathBuf,
        found: u64,
        supported: u32,
    },
    #[error(
        "bundle {path} has schema version {found}, which this vauban does not read (it reads {supported})"
    )]
    UnsupportedSchema {
        path: PathBuf,
        found: u64,
        supported: u32,
    },
    #[error(
        "the manifest of {bundle} names `{file}`, which is not a plain path inside the bundle; a bundle's files must stay inside its folder"
    )]
    UnsafePath { bundle: PathBuf, file: String },
    #[error(
        "the manifest of {bundle} refers to `{file}` but does not list it under `files`, so it cannot be verified"
    )]
    Unlisted { bundle: PathBuf, file: String },
    #[error(
        "{path} is {bytes} bytes, over the {limit}-byte limit for {what}; a bundle this large is damaged or was not written by vauban"
    )]
    TooLarge {
        path: PathBuf,
        what: &'static str,
        bytes: u64,
        limit: u64,
    },
    #[error("{0} is listed in the manifest but missing from the bundle")]
    FileMissing(PathBuf),
    #[error(
        "{0} is not a regular file (a symlink, FIFO or device); a bundle holds only plain files"
    )]
    NotRegularFile(PathBuf),
    #[error(
        "{0} is in the bundle's folder but not listed in its manifest, so it cannot be verified; the bundle was changed after it was written"
    )]
    UnlistedFile(PathBuf),
    #[error(
        "the manifest of {bundle} lists {what}, which no trace uses; the manifest was changed after the bundle was written"
    )]
    ManifestUnused { bundle: PathBuf, what: String },
    #[error(
        "{path} is {actual} bytes but the manifest records {expected}: the file was truncated or changed after the bundle was written"
    )]
    SizeMismatch {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error(
        "{path} does not match its sha256 in the manifest (expected {expected}, found {actual}): the file was changed or corrupted after the bundle was written"
    )]
    HashMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path}: {source}")]
    InvalidTrace {
        path: PathBuf,
        #[source]
        source: TraceError,
    },
    #[error("{path} holds trace `{found}` but the manifest lists it as `{listed}`")]
    TraceIdMismatch {
        path: PathBuf,
        listed: String,
        found: String,
    },
    #[error("trace id `{0}` appears more than once; trace ids must be unique within a bundle")]
    DuplicateTrace(String),
    #[error(
        "the manifest of {bundle} does not list {what} used by trace `{trace}`; the manifest and the traces disagree"
    )]
    ManifestDisagrees {
        bundle: PathBuf,
        trace: String,
        what: String,
    },
    #[error("{path} is not a readable safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("trace `{trace}`, artifact `{artifact}`: {detail}")]
    TensorMismatch {
        trace: String,
        artifact: String,
        detail: String,
    },
    #[error("the bundle has no trace `{0}`")]
    NoSuchTrace(String),
    #[error("trace `{trace}` has no artifact `{artifact}`")]
    NoSuchArtifact { trace: String, artifact: String },
    #[error(
        "trace `{trace}` has no raw tensor for artifact `{artifact}`: only its summary was kept (record with raw tensors to keep the data)"
    )]
    NoRawTensor { trace: String, artifact: String },
    #[error(
        "artifact `{artifact}` of trace `{trace}` is `{kind}`, not a tensor; only tensor artifacts have raw data"
    )]
    NotATensor {
        trace: String,
        artifact: String,
        kind: ArtifactKind,
    },
    #[error(
        "a bundle already exists at {0}; choose another path, or replace it (`--replace` on the command line, `WriteMode::Replace` in the library)"
    )]
    Exists(PathBuf),
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
