//! Trace bundles: the on-disk form of a set of traces.
//!
//! ```text
//! BUNDLE/
//!   manifest.json            schema version, tool, creation time, executors'
//!                            capabilities, models, plugins, every file's sha256
//!   traces/000000.json       one trace each, tensor artifacts as summaries
//!   tensors/000000.safetensors  raw tensors of trace 0 (only when asked),
//!                            keyed by artifact id
//! ```
//!
//! Bundles are written atomically ([`BundleWriter`]) and verified on load
//! ([`Bundle::open`]); tensors are memory-mapped and read lazily.
//! The format is documented for users in `docs/trace-bundle.md`.

mod error;
mod manifest;
mod read;
mod write;

pub use error::BundleError;
pub use manifest::{
    FileEntry, ImportMissing, ImportedFrom, MANIFEST_FILE, Manifest, PluginRef, SCHEMA_VERSION,
    Sharded, TensorFileEntry, ToolRef, TraceEntry,
};
pub use read::{Bundle, Verified};
pub use write::{BundleWriter, WriteMode};
