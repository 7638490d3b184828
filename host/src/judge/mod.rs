//! Judges: a model the host runs to answer questions about replies ("does
//! this reply refuse the request?"), for scorers that cannot decide by
//! phrase rules (issue 37). A request is a prompt and what to return: a
//! short generation, or the log-probabilities of a closed set of answers
//! ("yes", "no"). Every answer is kept under the sha256 of the judge's
//! identity and the request ([`store::JudgeStore`]), so a run asks each
//! question once, an interrupted run resumes, and a recorded run replays
//! without the judge model.
//!
//! This module answers on a model vauban holds ([`LocalJudge`]: candle,
//! torch, MLX). Scorers reach it through the host (the scorer world's
//! judge requests); they never hold a model.

pub mod calibration;
pub mod http;
pub mod service;
pub mod store;

use serde::{Deserialize, Serialize};

use crate::executor::{
    Executor, ExecutorError, GenerateOptions, LocalBackend, LocalModel, PromptForm, StopReason,
};

/// What a judge is asked to return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ask {
    /// A greedy generation of at most `max_tokens` tokens.
    Generate { max_tokens: u32 },
    /// The log-probability of each answer as the reply's opening, over the
    /// closed set (each answer's tokens scored one after another).
    Choices { options: Vec<String> },
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
    pub answer_tokens: u32,
}

/// One option of a closed set, scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
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

/// A request a judge refused to answer.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("{0}")]
    Request(String),
    #[error(transparent)]
    Executor(#[from] ExecutorError),
}

/// A judge on a model vauban holds.
pub struct LocalJudge {
    exec: LocalBackend,
}

impl LocalJudge {
    pub fn new(exec: LocalBackend) -> LocalJudge {
        LocalJudge { exec }
    }

    /// What identifies the judge's answers: the model (its name, weights and
    /// vocabulary digests), the executor and device. Part of every record's
    /// key, so another model or executor misses the store.
    pub fn identity(&self) -> serde_json::Value {
        let m = self.exec.model_ref();
        serde_json::json!({
            "model": m.name,
            "sha256": m.sha256,
            "tokenizer_sha256": m.tokenizer_sha256,
            "executor": self.exec.capabilities().executor,
            "device": self.exec.device_name(),
        })
    }

    /// Answers one request.
    pub fn answer(&self, r: &JudgeRequest) -> Result<JudgeAnswer, JudgeError> {
        let form = match r.raw {
            true => PromptForm::Raw,
            false => PromptForm::Chat {
                system: r.system.clone(),
            },
        };
        let prompt = self.exec.tokenize(&r.prompt, &form)?;
        let prompt_tokens = prompt.len() as u32;
        match &r.ask {
            Ask::Generate { max_tokens } => {
                if *max_tokens == 0 {
                    return Err(JudgeError::Request(
                        "a generation of 0 tokens: ask for at least 1".into(),
                    ));
                }
                let options = GenerateOptions {
                    max_tokens: *max_tokens as usize,
                    sampling: None,
                    stop: Vec::new(),
                    top_logprobs: 0,
                };
                let mut session = self.exec.session(&[]);
                let g = self
                    .exec
                    .generate_in(&mut session, &prompt, &options, &mut |_| {})?;
                let answer_tokens =
                    g.ids.len() as u32 + u32::from(matches!(g.stop, StopReason::Eos { .. }));
                Ok(JudgeAnswer {
                    text: Some(g.text),
                    choices: Vec::new(),
                    prompt_tokens,
                    answer_tokens,
                })
            }
            Ask::Choices { options } => self.choices(&prompt, options),
        }
    }

    /// Each option's log-probability after `prompt`: its tokens scored one
    /// after another, every prefix one prompt of a single batched call.
    fn choices(&self, prompt: &[u32], options: &[String]) -> Result<JudgeAnswer, JudgeError> {
        if options.len() < 2 {
            return Err(JudgeError::Request(format!(
                "a closed set of {} answer(s): give at least two",
                options.len()
            )));
        }
        let mut tokens = Vec::new();
        for o in options {
            let ids = self.exec.encode_plain(o)?;
            if ids.is_empty() {
                return Err(JudgeError::Request(format!(
                    "the answer {o:?} has no tokens: give each answer some text"
                )));
            }
            tokens.push(ids);
        }
        // One prefix per scored token: prompt + the option's tokens before it.
        let mut prefixes: Vec<Vec<u32>> = Vec::new();
        for ids in &tokens {
            for i in 0..ids.len() {
                let mut p = prompt.to_vec();
                p.extend_from_slice(&ids[..i]);
                prefixes.push(p);
            }
        }
        let refs: Vec<&[u32]> = prefixes.iter().map(Vec::as_slice).collect();
        let states = self.exec.last_token_states(&[], &refs);
        let mut states = states.into_iter();
        let mut logprobs = Vec::new();
        for ids in &tokens {
            let mut total = 0f64;
            for &t in ids {
                let s = states.next().expect("one state per prefix")?;
                total += log_softmax_at(&s.logits, t as usize);
            }
            logprobs.push(total);
        }
        let max = logprobs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logprobs.iter().map(|l| (l - max).exp()).sum();
        let choices = options
            .iter()
            .zip(&logprobs)
            .map(|(o, &l)| Choice {
                option: o.clone(),
                logprob: l,
                probability: (l - max).exp() / sum,
                bounded: false,
            })
            .collect();
        Ok(JudgeAnswer {
            text: None,
            choices,
            prompt_tokens: prompt.len() as u32,
            answer_tokens: tokens.iter().map(|t| t.len() as u32).sum(),
        })
    }
}

/// `log softmax(logits)[at]`, in f64.
fn log_softmax_at(logits: &[f32], at: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    logits[at] as f64 - lse
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_is_normalised() {
        let logits = [1.0f32, 2.0, 3.0];
        let total: f64 = (0..3).map(|i| log_softmax_at(&logits, i).exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        let want = 3.0 - (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((log_softmax_at(&logits, 2) - want).abs() < 1e-12);
    }

    #[test]
    fn the_verdict_is_the_most_probable_option() {
        let a = JudgeAnswer {
            text: None,
            choices: vec![
                Choice {
                    option: "yes".into(),
                    logprob: -2.0,
                    probability: 0.1,
                    bounded: false,
                },
                Choice {
                    option: "no".into(),
                    logprob: -0.1,
                    probability: 0.9,
                    bounded: false,
                },
            ],
            prompt_tokens: 3,
            answer_tokens: 2,
        };
        assert_eq!(a.verdict(), Some("no"));
        // A tie: the answer scored exactly, not the bound.
        let mut tie = a.clone();
        tie.choices[0].logprob = -0.1;
        tie.choices[1].bounded = true;
        assert_eq!(tie.verdict(), Some("yes"));
    }
}
