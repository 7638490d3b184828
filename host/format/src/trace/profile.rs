//! Per-span cost counters: what a stage cost in time, memory, bytes moved,
//! copies and synchronisation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The profile of one span. Every counter is unsigned, so a negative value
/// in a bundle is refused when it is read; a counter the backend could not
/// measure is `None` (memory) or left at zero with a note saying so.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageProfile {
    /// Wall-clock duration of the stage, in nanoseconds.
    pub duration_ns: u64,
    /// The device the stage ran on, as the backend names it (`cpu`, `cuda:0`).
    pub device: String,
    /// Sequences the stage processed together (1 for a single prompt).
    pub batch_size: u32,
    /// Tokens the stage handled (per sequence; see `vauban::profile` for how
    /// a trace total is formed).
    pub token_count: u64,
    /// Memory in use at the end of the stage (or the stage's peak, where the
    /// backend can measure it), in bytes; `None` when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Bytes of data the stage consumed (token ids, activations...), as the
    /// backend counts them; 0 when not counted.
    pub input_bytes: u64,
    /// Bytes of data the stage produced (token ids, tensors...), as the
    /// backend counts them; 0 when not counted.
    pub output_bytes: u64,
    /// Copies the stage made between the host's memory and a device's own
    /// (a GPU's) for the tokens, logits and tensors it moves; 0 on a CPU
    /// and on MLX, whose arrays the host reads in place. Reads an
    /// intervention or a policy makes during a pass are not counted
    /// (docs/profiles.md).
    pub host_device_copies: u64,
    /// Points where the host waited for the device.
    pub sync_points: u64,
    /// Requests waiting behind this one when the stage ran.
    pub queue_depth: u32,
    /// Backend-specific notes (`kernel = "q4_1 matmul"`, `memory = "not measured"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, String>,
}
