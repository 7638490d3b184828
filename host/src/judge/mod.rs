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

pub use vauban_format::judge::{Ask, Choice, JudgeAnswer, JudgeRequest};

use crate::executor::{
    Executor, ExecutorError, GenerateOptions, LocalBackend, LocalModel, PromptForm, StopReason,
};

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
        // Answers of one token all follow the prompt alone: each distinct
        // prefix is run once.
        let mut distinct: Vec<&[u32]> = Vec::new();
        let at: Vec<usize> = prefixes
            .iter()
            .map(|p| match distinct.iter().position(|d| *d == p.as_slice()) {
                Some(i) => i,
                None => {
                    distinct.push(p);
                    distinct.len() - 1
                }
            })
            .collect();
        let states = self
            .exec
            .last_token_states(&[], &distinct)
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let mut at = at.into_iter();
        let mut logprobs = Vec::new();
        for ids in &tokens {
            let mut total = 0f64;
            for &t in ids {
                let s = &states[at.next().expect("one state per prefix")];
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
