//! A judge behind an OpenAI-compatible endpoint (llama-server, vLLM, a
//! hosted API), asked through its chat completions at temperature 0. A
//! closed set is scored by the first token of the reply: the endpoint
//! returns its 20 most likely first tokens, and each answer is looked up
//! among them exactly (`Yes`, `No`). An answer outside the 20 is kept as
//! an upper bound (the least likely returned), marked `bounded`; a request
//! none of whose answers is returned (an answer of several tokens, say) is
//! refused rather than guessed.

use serde_json::{Value, json};

use super::{Ask, Choice, JudgeAnswer, JudgeError, JudgeRequest};
use crate::executor::http::HttpExecutor;

/// The first tokens an endpoint is asked for.
const TOP: u32 = 20;

pub struct HttpJudge {
    exec: HttpExecutor,
}

impl HttpJudge {
    pub fn new(exec: HttpExecutor) -> HttpJudge {
        HttpJudge { exec }
    }

    /// The endpoint's identity (its URL, the model it serves, its
    /// fingerprint): part of every record's key.
    pub fn identity(&self) -> Value {
        json!({ "endpoint": self.exec.identity() })
    }

    pub fn answer(&self, r: &JudgeRequest) -> Result<JudgeAnswer, JudgeError> {
        if r.raw {
            return Err(JudgeError::Request(
                "an endpoint judge takes chat requests: drop `raw`".into(),
            ));
        }
        let mut messages = Vec::new();
        if let Some(s) = &r.system {
            messages.push(json!({ "role": "system", "content": s }));
        }
        messages.push(json!({ "role": "user", "content": r.prompt }));
        let mut body = json!({
            "model": self.exec.model_name(),
            "messages": messages,
            "temperature": 0.0,
        });
        match &r.ask {
            Ask::Generate { max_tokens } => body["max_tokens"] = (*max_tokens).into(),
            Ask::Choices { .. } => {
                body["max_tokens"] = 1.into();
                body["logprobs"] = true.into();
                body["top_logprobs"] = TOP.into();
            }
        }
        let reply = self.exec.post_json("chat/completions", &body)?;
        let malformed = |what: &str| {
            JudgeError::Request(format!(
                "the endpoint's answer has no {what}: {}",
                crate::text::excerpt(&reply.to_string(), 200)
            ))
        };
        let usage = |key: &str| reply["usage"][key].as_u64().unwrap_or(0) as u32;
        let choice = &reply["choices"][0];
        match &r.ask {
            Ask::Generate { .. } => Ok(JudgeAnswer {
                text: Some(
                    choice["message"]["content"]
                        .as_str()
                        .ok_or_else(|| malformed("message content"))?
                        .to_owned(),
                ),
                choices: Vec::new(),
                prompt_tokens: usage("prompt_tokens"),
                answer_tokens: usage("completion_tokens"),
            }),
            Ask::Choices { options } => {
                let top = choice["logprobs"]["content"][0]["top_logprobs"]
                    .as_array()
                    .ok_or_else(|| malformed("top log-probabilities"))?;
                // An answer outside the returned tokens is at most as likely
                // as the least likely one returned: kept as that bound, and
                // marked. None returned at all is no answer.
                let floor = top
                    .iter()
                    .filter_map(|t| t["logprob"].as_f64())
                    .fold(f64::INFINITY, f64::min);
                let mut logprobs = Vec::new();
                let mut bounded = Vec::new();
                for o in options {
                    let found = top
                        .iter()
                        .find(|t| t["token"].as_str() == Some(o.as_str()))
                        .and_then(|t| t["logprob"].as_f64());
                    bounded.push(found.is_none());
                    logprobs.push(found.unwrap_or(floor));
                }
                if bounded.iter().all(|&b| b) {
                    let seen: Vec<&str> = top.iter().filter_map(|t| t["token"].as_str()).collect();
                    return Err(JudgeError::Request(format!(
                        "none of the answers {options:?} is among the endpoint's {TOP} most likely first tokens ({seen:?}); an endpoint scores a closed set by the reply's first token: give one-token answers, such as Yes and No"
                    )));
                }
                let max = logprobs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = logprobs.iter().map(|l| (l - max).exp()).sum();
                Ok(JudgeAnswer {
                    text: None,
                    choices: options
                        .iter()
                        .zip(logprobs.iter().zip(&bounded))
                        .map(|(o, (&l, &b))| Choice {
                            option: o.clone(),
                            logprob: l,
                            probability: (l - max).exp() / sum,
                            bounded: b,
                        })
                        .collect(),
                    prompt_tokens: usage("prompt_tokens"),
                    answer_tokens: options.len() as u32,
                })
            }
        }
    }
}
