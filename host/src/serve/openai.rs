//! The OpenAI API as `vauban serve` speaks it: request parameters read and
//! checked (an unsupported one is a 400 naming it, never ignored), the
//! responses and stream chunks written.
//!
//! Completions' log-probabilities come in the legacy shape (`tokens`,
//! `token_logprobs`, `top_logprobs`, `text_offset`) that lm-eval and other
//! OpenAI clients read, plus the chat shape's `content` list with each
//! token's `id` (as llama.cpp's server adds), so a client that wants token
//! ids finds them. Chat uses the chat shape.

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Completion, Echoed, ServeError, Shared, TokenInfo, run_blocking};
use crate::executor::PromptForm;
use crate::model::sample::{Sampler, Sampling};

/// Default new tokens: OpenAI's 16 for completions; chat has no limit
/// there, so a generous one here.
const COMPLETIONS_MAX_TOKENS: usize = 16;
const CHAT_MAX_TOKENS: usize = 512;
/// The most top log-probabilities per position.
const MAX_TOP_LOGPROBS: usize = 20;

/// A request's parameters, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub model: Option<String>,
    /// The prompt's text (for token ids, empty until detokenized).
    pub prompt: String,
    /// The prompt as token ids, used as given (completions only).
    pub prompt_ids: Option<Vec<u32>>,
    /// Completions: answer with the prompt first, and with `logprobs`,
    /// each prompt token's log-probability and top alternatives (the
    /// first token's are null), as lm-eval's loglikelihood requests ask.
    pub echo: bool,
    pub form: PromptForm,
    pub max_tokens: usize,
    /// `None`: greedy (temperature 0).
    pub sampling: Option<Sampling>,
    pub stop: Vec<String>,
    pub logprobs: bool,
    pub top_logprobs: usize,
    pub stream: bool,
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let body =
            json!({"error": {"message": self.message, "type": self.kind, "code": self.status}});
        (
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Json(body),
        )
            .into_response()
    }
}

fn object(body: &Bytes) -> Result<Map<String, Value>, ServeError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ServeError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ServeError::bad_request(format!(
            "the body is not JSON: {e}"
        ))),
    }
}

fn number(m: &Map<String, Value>, key: &str) -> Result<Option<f64>, ServeError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| ServeError::bad_request(format!("`{key}` must be a number, not {v}"))),
    }
}

fn count(m: &Map<String, Value>, key: &str) -> Result<Option<usize>, ServeError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            ServeError::bad_request(format!("`{key}` must be a non-negative integer, not {v}"))
        }),
    }
}

/// Whether a parameter's value is the one vauban implements.
type IsNeutral = fn(&Value) -> bool;

/// What both endpoints share: sampling, stop, length, stream; and the
/// parameters vauban does not implement, refused by name.
fn common(
    m: &Map<String, Value>,
    default_max: usize,
) -> Result<(Option<Sampling>, Vec<String>, usize, bool), ServeError> {
    let neutral: [(&str, IsNeutral); 7] = [
        ("n", |v: &Value| v.as_u64() == Some(1)),
        ("best_of", |v: &Value| v.as_u64() == Some(1)),
        ("frequency_penalty", |v: &Value| v.as_f64() == Some(0.0)),
        ("presence_penalty", |v: &Value| v.as_f64() == Some(0.0)),
        ("logit_bias", |v: &Value| {
            v.as_object().is_some_and(Map::is_empty)
        }),
        ("tools", |v: &Value| v.as_array().is_some_and(Vec::is_empty)),
        ("response_format", |v: &Value| {
            v.get("type").and_then(Value::as_str) == Some("text")
        }),
    ];
    for (key, fine) in neutral {
        if let Some(v) = m.get(key).filter(|v| !v.is_null() && !fine(v)) {
            return Err(ServeError::bad_request(format!(
                "`{key}` = {v} is not supported by vauban serve (leave it out, or set it to its neutral value)"
            )));
        }
    }
    let temperature = number(m, "temperature")?.unwrap_or(1.0) as f32;
    let top_p = number(m, "top_p")?.unwrap_or(1.0) as f32;
    let top_k = count(m, "top_k")?;
    let seed = match m.get("seed") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_i64().map(|i| i as u64))
            .ok_or_else(|| {
                ServeError::bad_request(format!("`seed` must be an integer, not {v}"))
            })?,
    };
    let sampling = Sampling {
        temperature: if temperature == 0.0 { 1.0 } else { temperature },
        top_p,
        top_k,
        seed,
    };
    Sampler::new(sampling.clone()).map_err(|e| ServeError::bad_request(e.to_string()))?;
    let sampling = (temperature != 0.0).then_some(Sampling {
        temperature,
        ..sampling
    });
    let stop = match m.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str().map(str::to_owned).ok_or_else(|| {
                    ServeError::bad_request("`stop` must be a string or a list of strings")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ServeError::bad_request(
                "`stop` must be a string or a list of strings",
            ));
        }
    };
    if stop.iter().any(String::is_empty) {
        return Err(ServeError::bad_request(
            "an empty `stop` string would end every generation at once",
        ));
    }
    let max_tokens = count(m, "max_completion_tokens")?
        .or(count(m, "max_tokens")?)
        .unwrap_or(default_max);
    let stream = m.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok((sampling, stop, max_tokens, stream))
}

fn model(m: &Map<String, Value>) -> Option<String> {
    m.get("model").and_then(Value::as_str).map(str::to_owned)
}

/// `/v1/completions`: `prompt` (a string, or a list of one), `logprobs` (top k).
pub fn completion_params(body: &Bytes) -> Result<Params, ServeError> {
    let m = object(body)?;
    let ids = |a: &[Value]| -> Option<Vec<u32>> {
        a.iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    let (prompt, prompt_ids) = match m.get("prompt") {
        Some(Value::String(s)) => (s.clone(), None),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            (a[0].as_str().unwrap().to_owned(), None)
        }
        Some(Value::Array(a)) if !a.is_empty() && ids(a).is_some() => (String::new(), ids(a)),
        Some(Value::Array(a))
            if a.len() == 1 && a[0].as_array().is_some_and(|x| ids(x).is_some()) =>
        {
            (String::new(), a[0].as_array().and_then(|x| ids(x)))
        }
        Some(Value::Array(_)) => {
            return Err(ServeError::bad_request(
                "`prompt` must be one string or one list of token ids (several prompts in one request are not supported; send one request each)",
            ));
        }
        _ => {
            return Err(ServeError::bad_request(
                "`prompt` (a string or token ids) is required",
            ));
        }
    };
    let echo = match m.get("echo") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ServeError::bad_request(format!(
                "`echo` must be true or false, not {v}"
            )));
        }
    };
    let (sampling, stop, max_tokens, stream) = common(&m, COMPLETIONS_MAX_TOKENS)?;
    let top = count(&m, "logprobs")?;
    if top.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
        return Err(ServeError::bad_request(format!(
            "`logprobs` is at most {MAX_TOP_LOGPROBS}"
        )));
    }
    if echo && stream {
        return Err(ServeError::bad_request(
            "`echo` with `stream` is not supported; ask without `stream`",
        ));
    }
    Ok(Params {
        model: model(&m),
        prompt,
        prompt_ids,
        echo,
        form: PromptForm::Raw,
        max_tokens,
        sampling,
        stop,
        logprobs: top.is_some(),
        top_logprobs: top.unwrap_or(0),
        stream,
    })
}

/// `/v1/chat/completions`: one user message with an optional system
/// message first; `logprobs` (bool) and `top_logprobs`.
pub fn chat_params(body: &Bytes) -> Result<Params, ServeError> {
    let m = object(body)?;
    let Some(messages) = m.get("messages").and_then(Value::as_array) else {
        return Err(ServeError::bad_request("`messages` (a list) is required"));
    };
    let content = |v: &Value| -> Result<String, ServeError> {
        v.get("content")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ServeError::bad_request("each message needs a string `content`"))
    };
    let role = |v: &Value| {
        v.get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if m.get("echo").is_some_and(|v| !v.is_null()) {
        return Err(ServeError::bad_request(
            "`echo` is a parameter of /v1/completions, not of chat",
        ));
    }
    let (system, user) = match messages.as_slice() {
        [u] if role(u) == "user" => (None, content(u)?),
        [s, u] if role(s) == "system" && role(u) == "user" => (Some(content(s)?), content(u)?),
        _ => {
            return Err(ServeError::bad_request(
                "vauban serve renders one user message, with an optional system message first, with the model's chat template; other conversations are not supported",
            ));
        }
    };
    let (sampling, stop, max_tokens, stream) = common(&m, CHAT_MAX_TOKENS)?;
    let logprobs = m.get("logprobs").and_then(Value::as_bool).unwrap_or(false);
    let top = count(&m, "top_logprobs")?.unwrap_or(0);
    if top > MAX_TOP_LOGPROBS {
        return Err(ServeError::bad_request(format!(
            "`top_logprobs` is at most {MAX_TOP_LOGPROBS}"
        )));
    }
    if top > 0 && !logprobs {
        return Err(ServeError::bad_request(
            "`top_logprobs` needs `logprobs: true`",
        ));
    }
    Ok(Params {
        model: model(&m),
        prompt: user,
        prompt_ids: None,
        echo: false,
        form: PromptForm::Chat { system },
        max_tokens,
        sampling,
        stop,
        logprobs,
        top_logprobs: top,
        stream,
    })
}

pub(super) async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub(super) async fn models(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": s.name, "object": "model", "created": 0, "owned_by": "vauban"}],
    }))
}

fn check_model(s: &Shared, p: &Params) -> Result<(), ServeError> {
    match &p.model {
        Some(m) if *m != s.name => Err(ServeError {
            status: 404,
            kind: "invalid_request_error",
            message: format!(
                "the model `{m}` is not served here; this server serves `{}`",
                s.name
            ),
        }),
        _ => Ok(()),
    }
}

pub(super) async fn completions(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    respond(s, completion_params(&body), Kind::Completion).await
}

pub(super) async fn chat(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    respond(s, chat_params(&body), Kind::Chat).await
}

#[derive(Clone, Copy)]
enum Kind {
    Completion,
    Chat,
}

fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn respond(s: Arc<Shared>, p: Result<Params, ServeError>, kind: Kind) -> Response {
    let p = match p.and_then(|p| check_model(&s, &p).map(|_| p)) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let id = s.next_id(match kind {
        Kind::Completion => "cmpl",
        Kind::Chat => "chatcmpl",
    });
    if p.stream {
        return stream(s, p, kind, id);
    }
    let params = p.clone();
    match run_blocking(s.clone(), move |served| {
        super::complete(served, &params, &mut |_| {})
    })
    .await
    {
        Ok(c) => Json(body(&s, &p, kind, &id, &c)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A whole response.
fn body(s: &Shared, p: &Params, kind: Kind, id: &str, c: &Completion) -> Value {
    let usage = json!({
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "total_tokens": c.prompt_tokens + c.completion_tokens,
    });
    let choice = match kind {
        Kind::Completion => json!({
            "index": 0,
            "text": match &c.echoed {
                Some(e) => format!("{}{}", e.text, c.text),
                None => c.text.clone(),
            },
            "finish_reason": c.finish_reason,
            "logprobs": p.logprobs.then(|| legacy_logprobs(c.echoed.as_ref(), &c.tokens)),
        }),
        Kind::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": c.finish_reason,
            "logprobs": p.logprobs.then(|| json!({"content": content_logprobs(&c.tokens)})),
        }),
    };
    json!({
        "id": id,
        "object": match kind { Kind::Completion => "text_completion", Kind::Chat => "chat.completion" },
        "created": created(),
        "model": s.name,
        "system_fingerprint": s.fingerprint,
        "choices": [choice],
        "usage": usage,
    })
}

fn content_logprobs<'a>(tokens: impl IntoIterator<Item = &'a TokenInfo>) -> Value {
    tokens
        .into_iter()
        .map(|t| {
            json!({
                "id": t.id,
                "token": t.text,
                "bytes": t.text.as_bytes(),
                "logprob": t.logprob,
                "top_logprobs": t.top.iter().map(|(text, id, lp)| json!({
                    "id": id, "token": text, "bytes": text.as_bytes(), "logprob": lp,
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The legacy shape, and the chat shape's `content` list with ids. With
/// `echo`, the prompt's tokens come first: in the legacy arrays the first
/// one's log-probability and alternatives are null (nothing predicts it);
/// `content`, whose entries cannot hold a null, starts at the second.
fn legacy_logprobs(echoed: Option<&Echoed>, tokens: &[TokenInfo]) -> Value {
    let top = |t: &TokenInfo| {
        // Two tokens with the same text keep the likelier one.
        let mut m = Map::new();
        for (text, _, lp) in &t.top {
            m.entry(text.clone()).or_insert(json!(lp));
        }
        Value::Object(m)
    };
    let mut texts = Vec::new();
    let mut logprobs = Vec::new();
    let mut tops = Vec::new();
    if let Some(e) = echoed {
        for (i, t) in e.tokens.iter().enumerate() {
            texts.push(t.text.clone());
            logprobs.push(if i == 0 {
                Value::Null
            } else {
                json!(t.logprob)
            });
            tops.push(if i == 0 { Value::Null } else { top(t) });
        }
    }
    for t in tokens {
        texts.push(t.text.clone());
        logprobs.push(json!(t.logprob));
        tops.push(top(t));
    }
    let mut offset = 0;
    let offsets: Vec<usize> = texts
        .iter()
        .map(|t| {
            let at = offset;
            offset += t.len();
            at
        })
        .collect();
    let mut v = json!({
        "tokens": texts,
        "token_logprobs": logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    });
    let scored: Vec<&TokenInfo> = echoed
        .iter()
        .flat_map(|e| e.tokens.iter().skip(1))
        .chain(tokens)
        .collect();
    v["content"] = content_logprobs(scored);
    v
}

/// A server-sent event stream: text chunks as the model produces them,
/// then the finish reason, then `[DONE]`. Log-probabilities are not
/// streamed (ask without `stream` for them).
fn stream(s: Arc<Shared>, p: Params, kind: Kind, id: String) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(64);
    let chunk = {
        let (id, name, fp) = (id.clone(), s.name.clone(), s.fingerprint.clone());
        move |delta: Value, finish: Option<&str>| -> String {
            let choice = match kind {
                Kind::Completion => json!({
                    "index": 0,
                    "text": delta.get("content").and_then(Value::as_str).unwrap_or(""),
                    "finish_reason": finish,
                }),
                Kind::Chat => json!({"index": 0, "delta": delta, "finish_reason": finish}),
            };
            let v = json!({
                "id": id,
                "object": match kind { Kind::Completion => "text_completion", Kind::Chat => "chat.completion.chunk" },
                "created": created(),
                "model": name,
                "system_fingerprint": fp,
                "choices": [choice],
            });
            format!("data: {v}\n\n")
        }
    };
    let worker = s.clone();
    tokio::spawn(async move {
        let send = tx.clone();
        let chunk2 = chunk.clone();
        let r = run_blocking(worker, move |served| {
            if let Kind::Chat = kind {
                let first = json!({"role": "assistant", "content": ""});
                let _ = send.blocking_send(chunk2(first, None));
            }
            super::complete(served, &p, &mut |t| {
                let _ = send.blocking_send(chunk2(json!({"content": t}), None));
            })
        })
        .await;
        let last = match r {
            Ok(c) => chunk(json!({}), Some(c.finish_reason)),
            Err(e) => format!(
                "data: {}\n\n",
                json!({"error": {"message": e.message, "type": e.kind, "code": e.status}})
            ),
        };
        let _ = tx.send(last).await;
        let _ = tx.send("data: [DONE]\n\n".into()).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|s| (Ok::<_, std::convert::Infallible>(Bytes::from(s)), rx))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_parameters_are_read_and_unsupported_ones_refused_by_name() {
        let p = completion_params(&Bytes::from_static(
            br#"{"model":"m","prompt":"Hi","max_tokens":5,"temperature":0,"logprobs":3,"stop":"\n","seed":4}"#,
        ))
        .unwrap();
        assert_eq!(p.prompt, "Hi");
        assert_eq!(p.form, PromptForm::Raw);
        assert!(p.sampling.is_none(), "temperature 0 is greedy");
        assert_eq!((p.logprobs, p.top_logprobs, p.max_tokens), (true, 3, 5));
        assert_eq!(p.stop, ["\n"]);
        let bad = |b: &'static [u8]| {
            completion_params(&Bytes::from_static(b))
                .unwrap_err()
                .message
        };
        assert!(bad(br#"{"prompt":"x","echo":"yes"}"#).contains("`echo` must be"));
        assert!(
            bad(br#"{"prompt":"x","echo":true,"stream":true}"#).contains("`echo` with `stream`")
        );
        let ids =
            completion_params(&Bytes::from_static(br#"{"prompt":[1,2,3],"echo":true}"#)).unwrap();
        assert_eq!((ids.prompt_ids, ids.echo), (Some(vec![1, 2, 3]), true));
        assert!(bad(br#"{"prompt":"x","n":2}"#).contains("`n`"));
        assert!(bad(br#"{"prompt":["a","b"]}"#).contains("one string"));
        assert!(bad(br#"{"prompt":"x","temperature":-1}"#).contains("temperature"));
        assert!(bad(br#"{"prompt":"x","logprobs":99}"#).contains("at most 20"));
        // Neutral penalties, as vauban's own http executor sends them, are fine.
        completion_params(&Bytes::from_static(
            br#"{"prompt":"x","frequency_penalty":0.0,"presence_penalty":0}"#,
        ))
        .unwrap();
    }

    #[test]
    fn chat_takes_one_user_message_with_an_optional_system_message() {
        let p = chat_params(&Bytes::from_static(
            br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":2}"#,
        ))
        .unwrap();
        assert_eq!(
            p.form,
            PromptForm::Chat {
                system: Some("Be brief.".into())
            }
        );
        assert_eq!(p.max_tokens, CHAT_MAX_TOKENS);
        assert!(p.sampling.is_some(), "OpenAI's default temperature is 1");
        let e = chat_params(&Bytes::from_static(
            br#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#,
        ))
        .unwrap_err();
        assert!(e.message.contains("one user message"));
    }
}
