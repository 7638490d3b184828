//! The closed vocabularies of a trace: artifact kinds, span stages, and the
//! roles and sites of the artifacts vauban reads back.
//!
//! All are enums, not strings: an unknown kind in a bundle or a request is
//! a deserialisation error naming the valid kinds, never a value that slips
//! through and is silently ignored downstream; a role is written and read
//! through [`Role`], so a writer and a reader cannot disagree by a typo.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What an artifact is. The order is the order reports list them in.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// Text the run consumed or produced: the prompt, the rendered prompt,
    /// the completion (`text`; carried as text data).
    Text,
    /// Token ids: the prompt's or the completion's, or, as an integer
    /// tensor, the top-k token ids per position (`tokens`).
    Tokens,
    /// Next-token scores over the vocabulary, before softmax (`logits`;
    /// a tensor).
    Logits,
    /// Next-token log-probabilities, over the whole vocabulary or the top
    /// k tokens per position (`logprobs`; a tensor).
    Logprobs,
    /// A layer's activation (the residual stream after a transformer
    /// block), one artifact per observed layer (`activation`; a tensor).
    Activation,
    /// What an intervention or an intervention policy did: its parameters
    /// and effect (`intervention_result`; a record or a tensor).
    InterventionResult,
    /// One weight matrix of one layer, labelled with the matrix's name
    /// (`weight_snapshot`; a tensor).
    WeightSnapshot,
    /// A named number a scorer computed (`metric`; a scalar).
    Metric,
    /// A piece of evidence recorded for the report (`report_evidence`; a
    /// record).
    ReportEvidence,
    /// The run's cost figures (tokens, throughput, memory) as one record
    /// (`profile`).
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
    /// The name as given.
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
    /// Loading the model's weights and tokenizer (`load`).
    Load,
    /// Turning the prompt's text into token ids (`tokenize`).
    Tokenize,
    /// Preparing the inputs and caches for the forward passes
    /// (`prepare_batch`).
    PrepareBatch,
    /// The forward pass over the whole prompt, filling the key/value cache
    /// (`prefill`).
    Prefill,
    /// A forward pass outside generation, such as scoring a given
    /// continuation teacher-forced (`forward`).
    Forward,
    /// Copying activations or weights to the host and summarising them
    /// (`observe`).
    Observe,
    /// Applying interventions inside the forward passes (`intervene`).
    Intervene,
    /// Projecting the final hidden states to vocabulary logits (and
    /// log-probabilities) (`lm_head`).
    LmHead,
    /// Generating tokens one step at a time after prefill (`decode`).
    Decode,
    /// Computing metrics from the trace (`score`).
    Score,
    /// Producing output from the results (`render`).
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

/// A closed set of values of one artifact label: the enum, the label's
/// key, and each variant's value as the trace stores it. Gives `KEY`,
/// `ALL`, `as_str`, `from_label`, `valid` (the values, for messages) and
/// `Display`, the same for every such label.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        pub enum $name:ident in $key:literal {
            $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The label's key.
            pub const KEY: &'static str = $key;

            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The label's value, as the trace stores it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)+
                }
            }

            /// The variant whose label value is `s`, if any.
            pub fn from_label(s: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|r| r.as_str() == s)
            }

            /// The valid label values, for messages.
            pub fn valid() -> String {
                $name::ALL
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_values! {
    /// What a text, a list of token ids or a table of log-probabilities is in
    /// the run: the value of an artifact's `role` label. Labels stay strings in
    /// the trace (plugins and the schema see `role = "completion"`), but vauban
    /// writes and reads the ones it interprets through this enum only, and a
    /// bundle's artifact of kind `text`, `tokens` or `logprobs` whose role is
    /// none of these is refused when the trace is validated
    /// ([`super::Problem::UnknownRole`]): a misspelt `continuation` would
    /// otherwise read as "no next-token KL", not as an error.
    pub enum Role in "role" {
        /// The prompt as given: its text, its token ids, or the tensors
        /// computed at its positions.
        Prompt = "prompt",
        /// The prompt as the chat template rendered it.
        RenderedPrompt = "rendered_prompt",
        /// What the run generated: its text, its token ids and the chosen
        /// tokens' log-probabilities.
        Completion = "completion",
        /// The top-k log-probabilities of every distribution a generation
        /// sampled from; the next-token KL reads them.
        Continuation = "continuation",
        /// The token ids of [`Role::Continuation`]'s rows.
        ContinuationTopK = "continuation_top_k",
        /// The other side's continuation scored under this model: its
        /// log-probabilities and its tokens.
        ReferenceContinuation = "reference_continuation",
        /// The token ids of a reference continuation's rows where the
        /// backend returned its own top k instead of the reference's tokens.
        ReferenceContinuationTopK = "reference_continuation_top_k",
    }
}

label_values! {
    /// Where in a block an activation was read: the value of an `activation`
    /// artifact's `site` label. Like [`Role`], a label that stays a string in
    /// the trace, written and read through this enum, and refused by the
    /// trace's rules when an activation's `site` is none of these
    /// ([`super::Problem::UnknownSite`]): the analysis reads the residual
    /// stream by it, and a misspelt one would silently drop the activation.
    pub enum Site in "site" {
        /// The residual stream after the block (what `--layers` observes).
        ResidPost = "resid_post",
        /// The attention output the block added to the residual stream.
        AttnOut = "attn_out",
        /// The MLP output the block added to the residual stream.
        MlpOut = "mlp_out",
        /// A mixture of experts' router probabilities over its experts
        /// (which experts each token used: those with the highest).
        Router = "router",
    }
}
