//! The bundle manifest: `manifest.json` at the bundle's root.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::trace::{Capabilities, ModelRef};

/// The schema version this build writes and reads. A bundle with a newer
/// version is refused with a message asking for a newer vauban.
pub const SCHEMA_VERSION: u32 = 1;

/// The manifest's file name.
pub const MANIFEST_FILE: &str = "manifest.json";

/// What a bundle holds, and the hash of every file in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The bundle format's version ([`SCHEMA_VERSION`] when written by
    /// this build); checked before anything else is read.
    pub schema_version: u32,
    /// The program and version that wrote the bundle.
    pub tool: ToolRef,
    /// When the bundle was written (RFC 3339 in JSON, UTC).
    pub created_at: DateTime<Utc>,
    /// The capabilities of every executor whose traces the bundle holds.
    pub executors: Vec<Capabilities>,
    /// Every model a trace ran on.
    pub models: Vec<ModelRef>,
    /// Plugins whose output the bundle holds (scorers' metrics...).
    #[serde(default)]
    pub plugins: Vec<PluginRef>,
    /// The traces, in the order they were recorded.
    pub traces: Vec<TraceEntry>,
    /// Every file of the bundle but the manifest, by path relative to the root.
    pub files: BTreeMap<String, FileEntry>,
    /// Where the traces come from when another tool ran the eval
    /// (`vauban import`); none for vauban's own runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<ImportedFrom>,
    /// The traces were recorded in shards (`vauban run --shard K/N`) and
    /// merged (`vauban merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharded: Option<Sharded>,
    /// What the run did to its model, in words (`directional ablation
    /// ...`), when it transformed it: what a replay of the bundle says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformation: Option<String>,
}

/// How a merged bundle's traces were recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sharded {
    /// The number of shards.
    pub shards: u32,
    /// The prompts each shard traced, shard 1 first.
    pub prompts: Vec<usize>,
}

/// The log a bundle was imported from, and what of it did not become a
/// trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedFrom {
    /// The tool that ran the eval (`inspect`, `lm-eval`, `promptfoo`).
    pub tool: String,
    /// Its version, as the log records it (none when it does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// The log's format version, as the log records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_version: Option<String>,
    /// The log file, as given to `vauban import`.
    pub file: String,
    /// sha256 of the log file, lowercase hex.
    pub sha256: String,
    /// The task or eval the log is of.
    pub task: String,
    /// The model, as the log names it.
    pub model: String,
    /// The samples are known by their position in the log, not by an id
    /// of their own (`vauban import --by-position`): a comparison pairs
    /// them by order, and the report says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_position: bool,
    /// Samples of the log (each epoch or repeat counted) that became no
    /// trace, with the reason (an error, no output).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<ImportMissing>,
}

/// A sample of an imported log that is not in the bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportMissing {
    /// The sample's id in the log.
    pub sample: String,
    /// Its epoch or repeat (1-based), when the log has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u32>,
    /// Why it is not a trace.
    pub reason: String,
}

/// The tool that wrote a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRef {
    /// The program's name (`vauban`).
    pub name: String,
    /// The program's version, as built (`CARGO_PKG_VERSION`).
    pub version: String,
}

impl ToolRef {
    /// This build of vauban.
    pub fn current() -> Self {
        ToolRef {
            name: "vauban".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// A plugin, identified by what the report identifies it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    /// The plugin's name, as it describes itself.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The `vauban:plugin` WIT version the plugin was built against;
    /// absent when not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wit_version: Option<String>,
    /// sha256 of the plugin's component file, 64 lowercase hex digits
    /// (checked when the manifest is read).
    pub sha256: String,
}

/// One trace: its JSON file and, when raw tensors were kept, its tensor file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceEntry {
    /// The trace's id; must equal the id inside the trace file.
    pub id: String,
    /// The trace's JSON file, relative to the bundle's root
    /// (`traces/000000.json`).
    pub file: String,
    /// The trace's raw tensors; absent when none were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<TensorFileEntry>,
}

/// A safetensors file holding a trace's raw tensors, keyed by artifact id,
/// with the sha256 of each tensor's bytes so one tensor can be verified
/// without reading the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorFileEntry {
    /// The safetensors file, relative to the bundle's root
    /// (`tensors/000000.safetensors`).
    pub file: String,
    /// Artifact id → sha256 (lowercase hex) of that tensor's raw bytes.
    pub sha256: BTreeMap<String, String>,
}

/// A file's length and sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// The file's length, in bytes.
    pub bytes: u64,
    /// sha256 of the file's contents, lowercase hex.
    pub sha256: String,
}
