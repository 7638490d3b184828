//! The closed vocabularies of a trace: artifact kinds and span stages.
//!
//! Both are enums, not strings: an unknown kind in a bundle or a request is
//! a deserialisation error naming the valid kinds, never a value that slips
//! through and is silently ignored downstream.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What an artifact is. The order is the order reports list them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    Text,
    Tokens,
    Logits,
    Logprobs,
    Activation,
    InterventionResult,
    WeightSnapshot,
    Metric,
    ReportEvidence,
    Profile,
}

impl ArtifactKind {
    /// Every kind, in report order.
    pub const ALL: [ArtifactKind; 10] = [
        ArtifactKind::Text,
        ArtifactKind::Tokens,
        ArtifactKind::Logits,
        ArtifactKind::Logprobs,
        ArtifactKind::Activation,
        ArtifactKind::InterventionResult,
        ArtifactKind::WeightSnapshot,
        ArtifactKind::Metric,
        ArtifactKind::ReportEvidence,
        ArtifactKind::Profile,
    ];

    /// The name used in JSON, TOML and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Text => "text",
            ArtifactKind::Tokens => "tokens",
            ArtifactKind::Logits => "logits",
            ArtifactKind::Logprobs => "logprobs",
            ArtifactKind::Activation => "activation",
            ArtifactKind::InterventionResult => "intervention_result",
            ArtifactKind::WeightSnapshot => "weight_snapshot",
            ArtifactKind::Metric => "metric",
            ArtifactKind::ReportEvidence => "report_evidence",
            ArtifactKind::Profile => "profile",
        }
    }

    /// Whether artifacts of this kind carry a tensor (summary, optionally raw data).
    pub fn is_tensor(self) -> bool {
        matches!(
            self,
            ArtifactKind::Logits
                | ArtifactKind::Logprobs
                | ArtifactKind::Activation
                | ArtifactKind::WeightSnapshot
        )
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An artifact kind name that is not in the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown artifact kind `{given}`; expected one of: {}", valid_kinds())]
pub struct UnknownKind {
    pub given: String,
}

fn valid_kinds() -> String {
    ArtifactKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for ArtifactKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ArtifactKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind {
                given: s.to_owned(),
            })
    }
}

/// The stage a span records. Spans appear in a trace in execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Load,
    Tokenize,
    PrepareBatch,
    Prefill,
    Forward,
    Observe,
    Intervene,
    LmHead,
    Decode,
    Score,
    Render,
}

impl Stage {
    /// The name used in JSON and in printed summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Load => "load",
            Stage::Tokenize => "tokenize",
            Stage::PrepareBatch => "prepare_batch",
            Stage::Prefill => "prefill",
            Stage::Forward => "forward",
            Stage::Observe => "observe",
            Stage::Intervene => "intervene",
            Stage::LmHead => "lm_head",
            Stage::Decode => "decode",
            Stage::Score => "score",
            Stage::Render => "render",
        }
    }

    /// Stages that push tokens through the model; their token counts are the
    /// tokens a trace processed (tokenize or observe spans count the same
    /// tokens again and are left out).
    pub fn runs_model(self) -> bool {
        matches!(self, Stage::Prefill | Stage::Forward | Stage::Decode)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip_through_json_and_from_str() {
        for kind in ArtifactKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<ArtifactKind>(&json).unwrap(), kind);
            assert_eq!(kind.as_str().parse::<ArtifactKind>().unwrap(), kind);
        }
    }

    #[test]
    fn unknown_kind_is_an_error_naming_it_and_the_valid_kinds() {
        let err = "attention_map".parse::<ArtifactKind>().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`attention_map`"), "{text}");
        assert!(text.contains("intervention_result"), "{text}");

        let err = serde_json::from_str::<ArtifactKind>("\"attention_map\"").unwrap_err();
        assert!(err.to_string().contains("attention_map"), "{err}");
    }
}
