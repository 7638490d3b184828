//! Artifacts (what a run produced or consumed) and spans (the stages that
//! produced them).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ArtifactKind, Role, Site, Stage, StageProfile, TensorRef, TensorSummary};

/// One produced or consumed value, with its kind, its producer span and its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Unique within the trace; raw tensors in a bundle are keyed by it.
    pub id: String,
    /// What the artifact is; fixes which [`ArtifactData`] variant may carry it.
    pub kind: ArtifactKind,
    /// The id of the span that produced it.
    pub producer: String,
    /// The transformer block it was observed after, for per-layer kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<usize>,
    /// Free-form labels (`role = "completion"`, `mode = "subtract"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The value itself (JSON: an object tagged by `type`).
    pub data: ArtifactData,
}

impl Artifact {
    /// The label `role`, when set to one of the roles vauban reads
    /// ([`Role`]); `None` when unset or another value.
    pub fn role(&self) -> Option<Role> {
        self.role_label().and_then(Role::from_label)
    }

    /// The label `role` as stored, whatever its value.
    pub fn role_label(&self) -> Option<&str> {
        self.labels.get(Role::KEY).map(String::as_str)
    }

    /// The label `site`, when set to one of [`Site`]'s; `None` when unset
    /// or another value.
    pub fn site(&self) -> Option<Site> {
        self.labels.get(Site::KEY).and_then(|s| Site::from_label(s))
    }

    /// Whether the artifact is of `kind` with `role`.
    pub fn is(&self, kind: ArtifactKind, role: Role) -> bool {
        self.kind == kind && self.role() == Some(role)
    }

    /// Whether this is part of the rows the next-token KL is computed
    /// from: one side's top-k log-probabilities along its continuation
    /// (`logprobs`, `role = continuation`) and their token ids (`tokens`,
    /// `role = continuation_top_k`), or the other side's continuation
    /// scored under this model (`logprobs`, `role = reference_continuation`).
    /// Their raw values are always kept, whatever `raw_tensors` says: they
    /// are small (positions × k) and a summary cannot give a KL.
    pub fn is_kl_rows(&self) -> bool {
        match self.kind {
            ArtifactKind::Logprobs => matches!(
                self.role(),
                Some(Role::Continuation | Role::ReferenceContinuation)
            ),
            ArtifactKind::Tokens => matches!(
                self.role(),
                Some(Role::ContinuationTopK | Role::ReferenceContinuationTopK)
            ),
            _ => false,
        }
    }
}

/// The value an artifact carries. Which variant fits which kind is fixed
/// (see [`ArtifactData::fits`]); a mismatch is a validation problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArtifactData {
    /// Text (`"type": "text"`), for `text` artifacts.
    Text {
        /// The text, as produced or given.
        text: String,
    },
    /// Token ids (`"type": "token_ids"`), for `tokens` artifacts.
    TokenIds {
        /// The ids, in sequence order, in the model's vocabulary.
        ids: Vec<u32>,
    },
    /// A tensor: its summary always; `raw` says whether the bundle holds its data.
    Tensor {
        /// Shape, dtype and statistics of the tensor.
        summary: TensorSummary,
        /// Whether the bundle stores the raw values (keyed by the artifact's
        /// id in the trace's tensor file) beside the summary.
        raw: bool,
    },
    /// One named number (a metric).
    Scalar {
        /// The metric's name (`refusal_rate`).
        name: String,
        /// The value; must be finite.
        value: f64,
        /// The value's unit, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unit: Option<String>,
    },
    /// A small structured record (an intervention's parameters and effect,
    /// a piece of report evidence, a profile).
    Record {
        /// The record, as free-form JSON.
        value: serde_json::Value,
    },
}

impl ArtifactData {
    /// A tensor artifact's data from a tensor; `keep_raw` asks the bundle to
    /// store the raw values beside the summary.
    pub fn tensor(tensor: TensorRef<'_>, keep_raw: bool) -> Self {
        ArtifactData::Tensor {
            summary: tensor.summarize(),
            raw: keep_raw,
        }
    }

    /// The variant's name as it appears in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            ArtifactData::Text { .. } => "text",
            ArtifactData::TokenIds { .. } => "token_ids",
            ArtifactData::Tensor { .. } => "tensor",
            ArtifactData::Scalar { .. } => "scalar",
            ArtifactData::Record { .. } => "record",
        }
    }

    /// Whether this data may carry an artifact of `kind`.
    pub fn fits(&self, kind: ArtifactKind) -> bool {
        use ArtifactKind as K;
        match self {
            ArtifactData::Text { .. } => kind == K::Text,
            ArtifactData::TokenIds { .. } => kind == K::Tokens,
            // A table of token ids (top-k per position) is an integer tensor.
            ArtifactData::Tensor { summary, .. } => {
                kind.is_tensor()
                    || kind == K::InterventionResult
                    || (kind == K::Tokens && summary.dtype.is_integer())
            }
            ArtifactData::Scalar { .. } => kind == K::Metric,
            ArtifactData::Record { .. } => {
                matches!(kind, K::InterventionResult | K::ReportEvidence | K::Profile)
            }
        }
    }
}

/// One stage of a run. A trace lists its spans in execution order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// Unique within the trace; artifacts name their producer by it
    /// ([`TraceBuilder`](super::TraceBuilder) writes `s<n>-<stage>`).
    pub id: String,
    /// The stage the span records.
    pub stage: Stage,
    /// Artifacts the stage consumed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// Artifacts the stage produced; each names this span as its producer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// What the stage cost.
    pub profile: StageProfile,
}

/// The model a trace ran on.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// The model's name, as the executor reports it (with the host's
    /// transformation appended when the weights were modified).
    pub name: String,
    /// Where the weights were loaded from, when local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// sha256 of the weights file(s), lowercase hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// sha256 of the vocabulary (every token's text, in id order): two
    /// traces with equal hashes index the same tokens, so their
    /// distributions can be compared position by position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_sha256: Option<String>,
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sha256 {
            Some(sha) => {
                let short: String = sha.chars().take(12).collect();
                write!(f, "{} (sha256 {short})", self.name)
            }
            None => write!(f, "{} (no hash)", self.name),
        }
    }
}

/// A requested artifact kind the trace does not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissingArtifact {
    /// The requested kind that was not produced.
    pub kind: ArtifactKind,
    /// For per-layer kinds: the one requested layer that is missing (the
    /// others are present); absent when the whole kind is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<usize>,
    /// Why it was not produced, in words; must not be blank.
    pub reason: String,
}

/// Whether `s` is a sha256 digest in lowercase hex.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
