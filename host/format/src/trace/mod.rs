//! The trace: the evidence-bearing record of one run of one prompt on one
//! model. Every later stage (scoring, statistics, claims, the report)
//! reads traces; nothing reads an executor directly.
//!
//! | level | type |
//! |---|---|
//! | the run | [`Trace`], asked for by a [`TraceRequest`] |
//! | a stage | [`Span`], with its [`StageProfile`] |
//! | a value | [`Artifact`] of an [`ArtifactKind`] |
//! | what the executor can produce | [`Capabilities`] |

mod artifact;
mod builder;
mod capability;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixture;
mod kind;
mod profile;
mod tensor;
mod validate;

use serde::{Deserialize, Serialize};

pub use artifact::{Artifact, ArtifactData, MissingArtifact, ModelRef, Span, is_sha256_hex};
pub use builder::TraceBuilder;
pub use capability::{Capabilities, DeviceKind, SupportLevel};
pub use kind::{ArtifactKind, Role, Site, Stage, UnknownKind};
pub use profile::StageProfile;
pub use tensor::{DType, ShapeMismatch, TensorData, TensorRef, TensorSummary, summarize_f32};
pub use validate::{Problem, TraceError};

/// What a caller asks of a run: the input and the observations wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// The suite's id for the prompt, used to pair baseline and candidate traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    /// The suite's category for the prompt (scorers and the report group by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// What the suite expects the model to do (`refuse`, `comply`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_behavior: Option<String>,
    /// The prompt as text (the executor tokenizes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The prompt as token ids (used as given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// The artifact kinds asked for, each once.
    pub observe: Vec<ArtifactKind>,
    /// The transformer blocks to observe activations after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<usize>,
    /// Keep raw tensors in the bundle, not only their summaries.
    #[serde(default)]
    pub raw_tensors: bool,
    /// With `raw_tensors`: only these kinds keep their raw data (empty:
    /// every kind). An audit that reads activations need not hold every
    /// position's logits, a vocabulary wide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raw_kinds: Vec<ArtifactKind>,
}

impl TraceRequest {
    /// Whether the request asks for `kind`.
    pub fn wants(&self, kind: ArtifactKind) -> bool {
        self.observe.contains(&kind)
    }

    /// Whether a tensor artifact of `kind` keeps its raw data.
    pub fn keeps_raw(&self, kind: ArtifactKind) -> bool {
        self.raw_tensors && (self.raw_kinds.is_empty() || self.raw_kinds.contains(&kind))
    }
}

/// The record of one run of one prompt on one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// Unique within a bundle.
    pub id: String,
    /// The model the run used.
    pub model: ModelRef,
    /// What the executor that recorded this trace declares it can produce.
    pub capabilities: Capabilities,
    /// The device the run used, as the backend names it.
    pub device: String,
    /// What the run was asked to do: the prompt and the kinds to observe.
    pub request: TraceRequest,
    /// Stages in execution order.
    pub spans: Vec<Span>,
    /// Everything the run produced or consumed, in the order recorded; each
    /// names the span that produced it.
    pub artifacts: Vec<Artifact>,
    /// Requested kinds the executor supports but did not produce, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<MissingArtifact>,
    /// Requested kinds the executor declares unsupported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<ArtifactKind>,
}

impl Trace {
    /// The artifact with this id.
    pub fn artifact(&self, id: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|a| a.id == id)
    }

    /// Artifacts of one kind, in trace order.
    pub fn artifacts_of(&self, kind: ArtifactKind) -> impl Iterator<Item = &Artifact> {
        self.artifacts.iter().filter(move |a| a.kind == kind)
    }

    /// Whether the trace holds at least one artifact of `kind`.
    pub fn has(&self, kind: ArtifactKind) -> bool {
        self.artifacts_of(kind).next().is_some()
    }

    /// The distinct kinds the trace holds, in report order.
    pub fn coverage(&self) -> std::collections::BTreeSet<ArtifactKind> {
        self.artifacts.iter().map(|a| a.kind).collect()
    }
}
