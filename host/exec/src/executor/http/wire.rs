//! The OpenAI-compatible wire format: the request bodies vauban sends and
//! the answers it reads back, in both shapes servers return log-probabilities in.
//!
//! - the legacy completions shape: `choices[].logprobs` with parallel
//!   arrays `tokens`, `token_logprobs` and `top_logprobs` (a map per
//!   position); vLLM with `--return-tokens-as-token-ids` writes each token
//!   as `token_id:N`;
//! - the chat shape: `choices[].logprobs.content[]`, one entry per token
//!   with `token`, `logprob`, `bytes` and `top_logprobs` (a list);
//!   llama.cpp's `llama-server` returns it on `/v1/completions` too, and
//!   adds each token's `id`.
//!
//! Parsing never guesses: a field of the wrong type is an error naming it,
//! and what the server left out stays `None`.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// Which endpoint a side is served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `/v1/completions`: the prompt text is sent as given; the server
    /// applies no chat template.
    Completions,
    /// `/v1/chat/completions`: the prompt is one user message (with an
    /// optional system message) rendered with the server's own template.
    Chat,
}

impl Endpoint {
    /// The path under the base URL (which ends in `/v1`).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "completions",
            Endpoint::Chat => "chat/completions",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Completions => "completions",
            Endpoint::Chat => "chat",
        }
    }
}

/// What one request asks for, before it becomes a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask<'a> {
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub prompt: &'a str,
    /// Only with [`Endpoint::Chat`].
    pub system: Option<&'a str>,
    pub max_tokens: usize,
    pub temperature: f32,
    pub top_p: f32,
    /// Not part of the OpenAI API: sent only when the config sets it
    /// (llama.cpp, vLLM and SGLang read it; a hosted API may refuse it).
    pub top_k: Option<usize>,
    pub seed: u64,
    pub stop: &'a [String],
    /// Top log-probabilities per generated position (0: none asked).
    pub top_logprobs: usize,
}

impl<'a> Ask<'a> {
    /// A greedy `/v1/completions` request for `prompt` as given: what the
    /// probe, the echo scoring and the benchmark send.
    pub fn greedy_completion(
        model: &'a str,
        prompt: &'a str,
        max_tokens: usize,
        top_logprobs: usize,
    ) -> Ask<'a> {
        Ask {
            endpoint: Endpoint::Completions,
            model,
            prompt,
            system: None,
            max_tokens,
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            seed: 0,
            stop: &[],
            top_logprobs,
        }
    }
}

/// The request body for `ask`: `max_tokens`, `temperature`, `top_p`,
/// `seed` and neutral penalties always, so the server's defaults never
/// decide an audit's settings.
pub fn body(ask: &Ask<'_>) -> Value {
    let mut b = json!({
        "model": ask.model,
        "max_tokens": ask.max_tokens,
        "temperature": ask.temperature,
        "top_p": ask.top_p,
        "seed": ask.seed,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "stream": false,
    });
    let o = b.as_object_mut().expect("an object");
    match ask.endpoint {
        Endpoint::Completions => {
            o.insert("prompt".into(), ask.prompt.into());
            if ask.top_logprobs > 0 {
                o.insert("logprobs".into(), ask.top_logprobs.into());
            }
        }
        Endpoint::Chat => {
            let mut messages = Vec::new();
            if let Some(s) = ask.system {
                messages.push(json!({"role": "system", "content": s}));
            }
            messages.push(json!({"role": "user", "content": ask.prompt}));
            o.insert("messages".into(), messages.into());
            if ask.top_logprobs > 0 {
                o.insert("logprobs".into(), true.into());
                o.insert("top_logprobs".into(), ask.top_logprobs.into());
            }
        }
    }
    if !ask.stop.is_empty() {
        o.insert("stop".into(), ask.stop.into());
    }
    if let Some(k) = ask.top_k {
        o.insert("top_k".into(), k.into());
    }
    b
}

/// One generated token as the server described it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's text as the server wrote it.
    pub token: String,
    /// Its id, where the server gave one (`id`, or `token_id:N`).
    pub id: Option<u32>,
    pub logprob: f32,
    /// The most likely tokens at this position, most likely first (may
    /// include the chosen token).
    pub top: Vec<TopToken>,
}

/// One of the top tokens at a position.
#[derive(Debug, Clone, PartialEq)]
pub struct TopToken {
    pub token: String,
    pub id: Option<u32>,
    pub logprob: f32,
}

/// Why the server stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-sequence token or a stop string (`stop`).
    Stop,
    /// The token budget (`length`).
    Length,
    /// Anything else, as written.
    Other(String),
    /// The server said nothing.
    Unknown,
}

/// What an answer holds, read from a server's response body.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub finish: Finish,
    /// Per generated token, when the server returned log-probabilities.
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// The model id the server says answered.
    pub model: Option<String>,
    pub system_fingerprint: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the server reused from its prompt cache
    /// (`usage.prompt_tokens_details.cached_tokens`).
    pub cached_prompt_tokens: Option<u64>,
    /// llama.cpp's own timings (`timings.prompt_ms`, `predicted_ms`).
    pub server_prompt_ms: Option<f64>,
    pub server_predicted_ms: Option<f64>,
}

/// A response body that is not an answer, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

fn bad(what: impl Into<String>) -> Malformed {
    Malformed(what.into())
}

/// Reads the answer to `endpoint` from `body` (the response's bytes).
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<Answer, Malformed> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let start: String = String::from_utf8_lossy(&body[..body.len().min(80)]).into();
        bad(format!("the body is not JSON ({e}); it begins {start:?}"))
    })?;
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| bad("no `choices[0]` in the response"))?;
    let text = match endpoint {
        Endpoint::Completions => choice.get("text").and_then(Value::as_str),
        Endpoint::Chat => choice
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str),
    }
    .ok_or_else(|| {
        bad(match endpoint {
            Endpoint::Completions => "no string `choices[0].text` in the response",
            Endpoint::Chat => "no string `choices[0].message.content` in the response",
        })
    })?
    .to_owned();
    let finish = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") | Some("eos") => Finish::Stop,
        Some("length") => Finish::Length,
        Some(other) => Finish::Other(other.to_owned()),
        None => Finish::Unknown,
    };
    let logprobs = match choice.get("logprobs") {
        None | Some(Value::Null) => None,
        Some(lp) => Some(logprobs(lp)?),
    };
    let usage = v.get("usage");
    let count = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
    let timing = |k: &str| {
        v.get("timings")
            .and_then(|t| t.get(k))
            .and_then(Value::as_f64)
    };
    let string = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(Answer {
        text,
        finish,
        logprobs,
        model: string("model"),
        system_fingerprint: string("system_fingerprint"),
        prompt_tokens: count("prompt_tokens"),
        completion_tokens: count("completion_tokens"),
        cached_prompt_tokens: usage
            .and_then(|u| u.get("prompt_tokens_details"))
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64),
        server_prompt_ms: timing("prompt_ms"),
        server_predicted_ms: timing("predicted_ms"),
    })
}

/// Either shape of `choices[0].logprobs`.
fn logprobs(lp: &Value) -> Result<Vec<TokenLogprob>, Malformed> {
    if let Some(content) = lp.get("content") {
        let entries = content
            .as_array()
            .ok_or_else(|| bad("`logprobs.content` is not a list"))?;
        return entries
            .iter()
            .enumerate()
            .map(|(i, e)| chat_entry(e).map_err(|m| bad(format!("logprobs.content[{i}]: {m}"))))
            .collect();
    }
    if lp.get("tokens").is_some() {
        return legacy(lp);
    }
    Err(bad(
        "`logprobs` has neither `content` (chat shape) nor `tokens` (completions shape)",
    ))
}

/// A token's text and id from an entry: `id` when given; vLLM's
/// `token_id:N` form read as the id.
fn token_and_id(e: &Value) -> Result<(String, Option<u32>), Malformed> {
    let token = e
        .get("token")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no string `token`"))?;
    let id = match e.get("id") {
        Some(v) => Some(as_id(v).ok_or_else(|| bad(format!("`id` {v} is not a token id")))?),
        None => token.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
    };
    Ok((token.to_owned(), id))
}

fn as_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn as_logprob(e: &Value, key: &str) -> Result<f32, Malformed> {
    match e.get(key) {
        Some(v) => v
            .as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| bad(format!("`{key}` {v} is not a number"))),
        None => Err(bad(format!("no `{key}`"))),
    }
}

fn chat_entry(e: &Value) -> Result<TokenLogprob, Malformed> {
    let (token, id) = token_and_id(e)?;
    let logprob = as_logprob(e, "logprob")?;
    let mut top = match e.get("top_logprobs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(j, t)| {
                let (token, id) =
                    token_and_id(t).map_err(|m| bad(format!("top_logprobs[{j}]: {m}")))?;
                let logprob =
                    as_logprob(t, "logprob").map_err(|m| bad(format!("top_logprobs[{j}]: {m}")))?;
                Ok(TopToken { token, id, logprob })
            })
            .collect::<Result<Vec<_>, Malformed>>()?,
        Some(other) => return Err(bad(format!("`top_logprobs` {other} is not a list"))),
    };
    sort_top(&mut top);
    Ok(TokenLogprob {
        token,
        id,
        logprob,
        top,
    })
}

/// Most likely first; ties by token text so the order is stable.
fn sort_top(top: &mut [TopToken]) {
    top.sort_by(|a, b| b.logprob.total_cmp(&a.logprob).then(a.token.cmp(&b.token)));
}

fn legacy(lp: &Value) -> Result<Vec<TokenLogprob>, Malformed> {
    let list = |k: &str| {
        lp.get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("`logprobs.{k}` is not a list")))
    };
    let tokens = list("tokens")?;
    let chosen = list("token_logprobs")?;
    let tops = match lp.get("top_logprobs") {
        None | Some(Value::Null) => None,
        Some(_) => Some(list("top_logprobs")?),
    };
    if chosen.len() != tokens.len() || tops.is_some_and(|t| t.len() != tokens.len()) {
        return Err(bad(format!(
            "`logprobs` arrays differ in length ({} tokens, {} token_logprobs{})",
            tokens.len(),
            chosen.len(),
            tops.map(|t| format!(", {} top_logprobs", t.len()))
                .unwrap_or_default()
        )));
    }
    // With `echo`, the prompt's first token has nothing before it: its
    // log-probability is null, and it is left out (no distribution).
    let first = usize::from(chosen.first().is_some_and(Value::is_null));
    tokens
        .iter()
        .enumerate()
        .skip(first)
        .map(|(i, t)| {
            let at = |m: String| bad(format!("logprobs position {i}: {m}"));
            let token = t
                .as_str()
                .ok_or_else(|| at(format!("token {t} is not a string")))?;
            let id = token.strip_prefix("token_id:").and_then(|n| n.parse().ok());
            let logprob = chosen[i]
                .as_f64()
                .ok_or_else(|| at(format!("token_logprob {} is not a number", chosen[i])))?
                as f32;
            let mut top = match tops.map(|t| &t[i]) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Object(m)) => legacy_top(m).map_err(|m| at(m.0))?,
                Some(other) => return Err(at(format!("top_logprobs {other} is not a map"))),
            };
            sort_top(&mut top);
            Ok(TokenLogprob {
                token: token.to_owned(),
                id,
                logprob,
                top,
            })
        })
        .collect()
}

fn legacy_top(m: &Map<String, Value>) -> Result<Vec<TopToken>, Malformed> {
    m.iter()
        .map(|(token, lp)| {
            let logprob = lp
                .as_f64()
                .ok_or_else(|| bad(format!("top logprob of {token:?} is not a number")))?
                as f32;
            Ok(TopToken {
                token: token.clone(),
                id: token.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
                logprob,
            })
        })
        .collect()
}

/// The model ids a `/v1/models` body lists.
pub fn model_ids(body: &[u8]) -> Result<Vec<String>, Malformed> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("the `/models` body is not JSON ({e})")))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the `/models` body has no `data` list"))?;
    Ok(data
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect())
}

/// The error message in an OpenAI-style error body (`error.message`, or
/// `error` as a string, or `message`), else the body's start.
pub fn error_message(body: &[u8]) -> String {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    let from_json = v.as_ref().and_then(|v| {
        v.get("error")
            .and_then(|e| e.get("message").and_then(Value::as_str).or(e.as_str()))
            .or_else(|| v.get("message").and_then(Value::as_str))
            .map(str::to_owned)
    });
    from_json.unwrap_or_else(|| {
        let s = String::from_utf8_lossy(&body[..body.len().min(200)])
            .trim()
            .to_owned();
        match s.is_empty() {
            true => "(empty body)".into(),
            false => s,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(endpoint: Endpoint, top: usize) -> Ask<'static> {
        Ask {
            endpoint,
            model: "m",
            prompt: "Hi",
            system: Some("Be brief."),
            max_tokens: 8,
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            seed: 7,
            stop: &[],
            top_logprobs: top,
        }
    }

    #[test]
    fn bodies_always_carry_the_settings_and_neutral_penalties() {
        let c = body(&ask(Endpoint::Completions, 5));
        assert_eq!(c["prompt"], "Hi");
        assert_eq!(c["logprobs"], 5);
        assert_eq!(c["max_tokens"], 8);
        assert_eq!(c["seed"], 7);
        assert_eq!(c["temperature"], 0.0);
        assert_eq!(c["frequency_penalty"], 0.0);
        assert_eq!(c["presence_penalty"], 0.0);
        assert!(c.get("messages").is_none() && c.get("top_k").is_none());
        let chat = body(&ask(Endpoint::Chat, 3));
        assert_eq!(chat["messages"][0]["role"], "system");
        assert_eq!(chat["messages"][1]["content"], "Hi");
        assert_eq!(chat["logprobs"], true);
        assert_eq!(chat["top_logprobs"], 3);
        let none = body(&ask(Endpoint::Chat, 0));
        assert!(none.get("logprobs").is_none());
    }

    #[test]
    fn reads_the_chat_shape_with_ids_as_llama_server_writes_it() {
        let body = br#"{"choices":[{"text":" Paris","finish_reason":"length","logprobs":{"content":[
            {"id":7042,"token":" Paris","bytes":[32,80],"logprob":-0.5,
             "top_logprobs":[{"id":1,"token":" the","logprob":-2.0},{"id":7042,"token":" Paris","logprob":-0.5}]}]}}],
            "model":"smol","system_fingerprint":"b1","usage":{"prompt_tokens":5,"completion_tokens":1},
            "timings":{"prompt_ms":1.5,"predicted_ms":2.5}}"#;
        let a = parse(Endpoint::Completions, body).unwrap();
        assert_eq!(a.text, " Paris");
        assert_eq!(a.finish, Finish::Length);
        let lp = a.logprobs.unwrap();
        assert_eq!(lp[0].id, Some(7042));
        // Sorted most likely first.
        assert_eq!(lp[0].top[0].token, " Paris");
        assert_eq!(lp[0].top[1].id, Some(1));
        assert_eq!(a.model.as_deref(), Some("smol"));
        assert_eq!(a.completion_tokens, Some(1));
        assert_eq!(a.server_predicted_ms, Some(2.5));
    }

    #[test]
    fn reads_the_legacy_shape_and_vllm_token_ids() {
        let body = br#"{"choices":[{"text":"ab","finish_reason":"stop","logprobs":{
            "tokens":["token_id:5","token_id:6"],"token_logprobs":[-0.1,-0.2],
            "top_logprobs":[{"token_id:5":-0.1,"token_id:9":-3.0},{"token_id:6":-0.2}]}}]}"#;
        let a = parse(Endpoint::Completions, body).unwrap();
        let lp = a.logprobs.unwrap();
        assert_eq!(lp.len(), 2);
        assert_eq!(lp[0].id, Some(5));
        assert_eq!(lp[0].top.len(), 2);
        assert_eq!(lp[0].top[1].id, Some(9));
        assert_eq!(a.finish, Finish::Stop);
        // Plain strings carry no id.
        let plain = br#"{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1.0],"top_logprobs":[{"a":-1.0}]}}]}"#;
        // An echoed prompt's first token has no distribution: left out.
        let echoed = br#"{"choices":[{"text":"ab","logprobs":{"tokens":["a","b"],"token_logprobs":[null,-0.5],"top_logprobs":[null,{"b":-0.5}]}}]}"#;
        let lp = parse(Endpoint::Completions, echoed)
            .unwrap()
            .logprobs
            .unwrap();
        assert_eq!((lp.len(), lp[0].token.as_str()), (1, "b"));
        let lp = parse(Endpoint::Completions, plain)
            .unwrap()
            .logprobs
            .unwrap();
        assert_eq!(lp[0].id, None);
    }

    #[test]
    fn malformed_bodies_name_what_is_wrong() {
        let e = |b: &[u8]| parse(Endpoint::Chat, b).unwrap_err().0;
        assert!(
            e(b"<html>oops").contains("not JSON"),
            "{}",
            e(b"<html>oops")
        );
        assert!(e(br#"{"choices":[]}"#).contains("choices[0]"));
        assert!(e(br#"{"choices":[{"text":"x"}]}"#).contains("message.content"));
        let bad_lp = br#"{"choices":[{"message":{"content":"x"},"logprobs":{"content":[{"token":"x","logprob":"high"}]}}]}"#;
        assert!(e(bad_lp).contains("logprobs.content[0]"), "{}", e(bad_lp));
        let uneven = br#"{"choices":[{"text":"x","logprobs":{"tokens":["a","b"],"token_logprobs":[-1.0]}}]}"#;
        assert!(
            parse(Endpoint::Completions, uneven)
                .unwrap_err()
                .0
                .contains("differ in length")
        );
    }

    #[test]
    fn error_messages_come_from_the_body() {
        assert_eq!(
            error_message(br#"{"error":{"message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(error_message(br#"{"error":"nope"}"#), "nope");
        assert_eq!(error_message(b""), "(empty body)");
        assert_eq!(
            model_ids(br#"{"data":[{"id":"a"},{"id":"b"}]}"#).unwrap(),
            ["a", "b"]
        );
    }
}
