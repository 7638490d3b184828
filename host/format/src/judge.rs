//! Judges' questions and answers, as scorers ask them and the bundle
//! records them (issue 37). A judge is a model the host runs to answer
//! questions about replies; these are the values that cross from a scorer
//! to the host and into the record, whichever model answers.

use serde::{Deserialize, Serialize};

/// What a judge is asked to return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ask {
    /// A greedy generation of at most `max_tokens` tokens.
    Generate {
        /// The most tokens to generate.
        max_tokens: u32,
    },
    /// The log-probability of each answer as the reply's opening, over the
    /// closed set (each answer's tokens scored one after another).
    Choices {
        /// The answers, at least two.
        options: Vec<String>,
    },
}

/// One question to a judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRequest {
    /// The question, sent as the user's message through the judge's chat
    /// template (or as it is, with `raw`).
    pub prompt: String,
    /// A system message for the chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Send `prompt` as plain text, without the chat template.
    #[serde(default)]
    pub raw: bool,
    /// What to return.
    pub ask: Ask,
}

/// A judge's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeAnswer {
    /// The generated text (`Generate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Each option with its total log-probability and its probability
    /// within the closed set (`Choices`), in the request's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<Choice>,
    /// The prompt's tokens and the tokens generated or scored: what the
    /// request cost, counted against a scorer's budget.
    pub prompt_tokens: u32,
    /// The tokens generated or scored.
    pub answer_tokens: u32,
}

/// One option of a closed set, scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The answer as the request gave it.
    pub option: String,
    /// `Σ log p(tᵢ | prompt, t₍<i₎)` over the option's tokens.
    pub logprob: f64,
    /// `exp(logprob)` renormalised over the set.
    pub probability: f64,
    /// `logprob` is an upper bound, not the value: an endpoint did not
    /// return this answer among its most likely first tokens, so it is at
    /// most as likely as the least likely one returned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bounded: bool,
}

impl JudgeAnswer {
    /// The most probable option of a closed set (an option scored exactly
    /// before a bounded one it ties with).
    pub fn verdict(&self) -> Option<&str> {
        self.choices
            .iter()
            .max_by(|a, b| {
                a.logprob
                    .total_cmp(&b.logprob)
                    .then(b.bounded.cmp(&a.bounded))
            })
            .map(|c| c.option.as_str())
    }
}
