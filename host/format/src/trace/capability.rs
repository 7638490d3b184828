//! What an executor can honestly produce.
//!
//! Capabilities are data, not assumptions: a trace carries the capabilities
//! of the executor that recorded it, so the report can tell "not collected"
//! from "cannot be collected by this backend", and the host can refuse a
//! trace that holds an artifact its executor says it cannot produce.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::ArtifactKind;

/// How fully an executor supports producing one artifact kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SupportLevel {
    /// The executor cannot produce the kind at all (`unsupported`).
    Unsupported,
    /// Produced in some configurations only (some layers, some devices, top-k
    /// logprobs instead of the full distribution...); the backend notes say which.
    Partial,
    /// Produced whenever asked, in every configuration (`full`).
    Full,
}

impl fmt::Display for SupportLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SupportLevel::Unsupported => "unsupported",
            SupportLevel::Partial => "partial",
            SupportLevel::Full => "full",
        })
    }
}

/// A kind of device an executor can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The host CPU (`cpu`).
    Cpu,
    /// An NVIDIA GPU through CUDA (`cuda`).
    Cuda,
    /// An Apple GPU through Metal (`metal`).
    Metal,
    /// An Apple GPU through PyTorch's Metal Performance Shaders backend (`mps`).
    Mps,
    /// A model behind a network endpoint: the host does not see the device.
    Remote,
    /// No device at all (replayed traces).
    None,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Metal => "metal",
            DeviceKind::Mps => "mps",
            DeviceKind::Remote => "remote",
            DeviceKind::None => "none",
        })
    }
}

/// An executor's declared support, per artifact kind, plus the devices it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// The executor's name (`candle`, `torch`, `http`, `replay`...).
    pub executor: String,
    /// The kinds of device the executor can run on.
    pub device_kinds: Vec<DeviceKind>,
    /// Support per artifact kind. Every kind must be listed: an executor
    /// states what it cannot do instead of leaving it to a default.
    pub artifacts: BTreeMap<ArtifactKind, SupportLevel>,
}

impl Capabilities {
    /// Capabilities with every kind at `level`; adjust with [`Capabilities::with`].
    pub fn uniform(
        executor: impl Into<String>,
        devices: &[DeviceKind],
        level: SupportLevel,
    ) -> Self {
        Capabilities {
            executor: executor.into(),
            device_kinds: devices.to_vec(),
            artifacts: ArtifactKind::ALL.iter().map(|&k| (k, level)).collect(),
        }
    }

    /// The same capabilities with `kind` set to `level`.
    pub fn with(mut self, kind: ArtifactKind, level: SupportLevel) -> Self {
        self.artifacts.insert(kind, level);
        self
    }

    /// The declared support for `kind`; a kind left out counts as unsupported
    /// (and [`Capabilities::unlisted_kinds`] reports it as a validation problem).
    pub fn support(&self, kind: ArtifactKind) -> SupportLevel {
        self.artifacts
            .get(&kind)
            .copied()
            .unwrap_or(SupportLevel::Unsupported)
    }

    /// Kinds the declaration does not mention.
    pub fn unlisted_kinds(&self) -> Vec<ArtifactKind> {
        ArtifactKind::ALL
            .into_iter()
            .filter(|k| !self.artifacts.contains_key(k))
            .collect()
    }
}
