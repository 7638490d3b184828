//! One answer recorded as a trace, through the shared recorder: the
//! prompt's text, the completion's text, its token ids and top-k
//! log-probabilities where the server gave them, and one `decode` span
//! whose profile holds the round trip's wall time and the exact request
//! body (the key travels in a header and is never part of it).

use std::time::Duration;

use serde_json::json;

use super::wire::Finish;
use super::{Fetched, HttpExecutor};
use crate::executor::recorder::Recorder;
use crate::executor::{Executor, ExecutorError, ReferenceContinuation, RunOptions, TraceOutput};
use crate::trace::{ArtifactKind as K, Stage, StageProfile, TraceRequest};

pub(super) fn record(
    exec: &HttpExecutor,
    request: &TraceRequest,
    options: &RunOptions,
    f: Fetched,
    echoed: Option<Fetched>,
) -> Result<TraceOutput, ExecutorError> {
    let url = exec.transport.url(match options.prompt {
        crate::executor::PromptForm::Raw => "completions",
        crate::executor::PromptForm::Chat { .. } => "chat/completions",
    });
    let a = &f.answer;
    let lp = a.logprobs.as_deref().unwrap_or_default();
    // Token ids only where the server gave one for every token.
    let ids: Option<Vec<u32>> = match lp.is_empty() {
        true => None,
        false => lp.iter().map(|t| t.id).collect(),
    };
    if let (Some(ids), Some(tok)) = (&ids, exec.tokenizer()) {
        check_ids(tok, ids, lp.iter().map(|t| t.token.as_str()), &url)?;
    }
    let caps = exec.capabilities();
    let mut rec = Recorder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        caps.clone(),
        exec.device_name(),
        request,
    );
    let tokens = a.completion_tokens.map(|n| n as usize).unwrap_or(lp.len());
    let mut p = answer_profile(exec, request, options, &f, &url, tokens);
    // The reference continuation: scored through echo, or why not.
    let scored = match (&options.reference, echoed.as_ref()) {
        (Some(r), Some(e)) => Some(align(e, r).map(|rows| (r, e, rows))),
        (Some(_), None) => Some(Err(match exec.probe.prompt_logprobs {
            false => "the endpoint cannot score a given continuation (it returns no prompt log-probabilities)".to_owned(),
            true => "echo needs a raw prompt, token ids and a declared `tokenizer`".to_owned(),
        })),
        (None, _) => None,
    };
    if let Some(Err(why)) = &scored {
        p.notes.insert(
            "reference_continuation".into(),
            format!(
                "not scored: {why}; the KL is over the generated positions the two sides share"
            ),
        );
    }
    let span = rec.span(Stage::Decode, p);
    let text = request.text.as_deref().unwrap_or_default();
    rec.prompt(&span, Ok(text), None, None);
    let chosen: Vec<f32> = lp.iter().map(|t| t.logprob).collect();
    rec.completion(&span, &a.text, ids.as_deref(), &chosen);
    // The top-k rows, as wide as the narrowest position (a server may
    // return fewer at some); their ids only when every one has an id.
    let k = lp.iter().map(|t| t.top.len()).min().unwrap_or(0);
    if k > 0 {
        let values: Vec<f32> = lp
            .iter()
            .flat_map(|t| t.top[..k].iter().map(|x| x.logprob))
            .collect();
        let top_ids: Option<Vec<u32>> = lp
            .iter()
            .flat_map(|t| t.top[..k].iter().map(|x| x.id))
            .collect();
        rec.continuation_top_k(&span, lp.len(), k, &values, top_ids.as_deref());
    }
    if let Some(Ok((r, e, rows))) = &scored {
        let mut p = round_trip(exec, e, e.answer.prompt_tokens.unwrap_or(0));
        p.notes.insert(
            "reference_continuation".into(),
            format!(
                "scored by echo: the prompt and the reference's {} tokens sent as text, the echoed token ids checked against the reference's, this model's top {} kept at each of {} positions",
                r.completion.len(),
                rows.k,
                rows.rows
            ),
        );
        let forward = rec.span(Stage::Forward, p);
        rec.reference_own_top_k(&forward, r, rows.rows, rows.k, &rows.values, &rows.ids);
    }
    account(
        &mut rec,
        &span,
        request,
        &caps,
        &f,
        &url,
        ids.is_none(),
        tokens,
    );
    rec.finish(None)
}

/// The decode span's profile of an answer: its round trip, with what the
/// endpoint said of it (served model, cached prefix, fewer top
/// log-probabilities than asked) in its notes.
fn answer_profile(
    exec: &HttpExecutor,
    request: &TraceRequest,
    options: &RunOptions,
    f: &Fetched,
    url: &str,
    tokens: usize,
) -> StageProfile {
    let a = &f.answer;
    let mut p = round_trip(exec, f, tokens as u64);
    let notes = [
        ("endpoint", url.to_owned()),
        (
            "prompt_form",
            match options.prompt {
                crate::executor::PromptForm::Raw => {
                    "raw: sent to /completions as given, no chat template".to_owned()
                }
                crate::executor::PromptForm::Chat { .. } => {
                    "chat: sent to /chat/completions, rendered by the server's own template"
                        .to_owned()
                }
            },
        ),
        (
            "timing",
            match f.from_cache {
                true => "the recorded round trip of an answer read from the response cache".into(),
                false => {
                    "wall time of the HTTP round trip (network and server queue included)".into()
                }
            },
        ),
        ("attempts", f.attempts.to_string()),
        ("finish_reason", finish(&a.finish)),
    ];
    p.notes
        .extend(notes.into_iter().map(|(k, v)| (k.to_owned(), v)));
    for (k, v) in [
        ("served_model", a.model.clone()),
        ("system_fingerprint", a.system_fingerprint.clone()),
    ] {
        if let Some(v) = v {
            p.notes.insert(k.into(), v);
        }
    }
    if let Some(n) = a.cached_prompt_tokens.filter(|&n| n > 0) {
        // Measured on llama-server: a prefix reused from its prompt cache
        // gives other log-probabilities than the same prompt run afresh.
        p.notes.insert(
            "cached_prompt_tokens".into(),
            format!(
                "{n}: the server reused a cached prompt prefix, which can change log-probabilities from run to run (llama-server: start it with --no-cache-prompt for reproducible audits)"
            ),
        );
    }
    let asked = options.generate.top_logprobs;
    if request.wants(K::Logprobs) && asked > exec.probe.top_logprobs {
        p.notes.insert(
            "top_logprobs".into(),
            format!(
                "{asked} asked; the endpoint returns at most {} per position",
                exec.probe.top_logprobs
            ),
        );
    }
    p
}

/// What the answer lacks of what the request asked (missing, with the
/// reason, where the probe promised it), and the run's profile record.
#[allow(clippy::too_many_arguments)]
fn account(
    rec: &mut Recorder,
    span: &str,
    request: &TraceRequest,
    caps: &crate::trace::Capabilities,
    f: &Fetched,
    url: &str,
    no_ids: bool,
    tokens: usize,
) {
    let a = &f.answer;
    let no_logprobs = a.logprobs.as_deref().unwrap_or_default().is_empty();
    // A kind declared unsupported is listed as such by the recorder; one
    // the probe found and this answer lacks is missing, with the reason.
    let declared = |k| caps.support(k) != crate::trace::SupportLevel::Unsupported;
    if request.wants(K::Logprobs) && no_logprobs && declared(K::Logprobs) {
        rec.missing(
            K::Logprobs,
            &format!("{url} returned no log-probabilities with this answer"),
        );
    }
    if request.wants(K::Tokens) && no_ids && declared(K::Tokens) {
        rec.missing(
            K::Tokens,
            &format!("{url} returned no token ids with this answer"),
        );
    }
    if request.wants(K::Profile) {
        let secs = f.elapsed.max(Duration::from_nanos(1)).as_secs_f64();
        rec.record(
            span,
            K::Profile,
            json!({
                "prompt_tokens": a.prompt_tokens,
                "completion_tokens": tokens,
                "round_trip_s": f.elapsed.as_secs_f64(),
                "tokens_per_s": tokens as f64 / secs,
                "server_prompt_ms": a.server_prompt_ms,
                "server_predicted_ms": a.server_predicted_ms,
                "from_cache": f.from_cache,
            }),
        );
    }
}

/// The profile of one request's round trip over `tokens` tokens, with the
/// exact request body in its notes (the key is a header, never part of it).
fn round_trip(exec: &HttpExecutor, f: &Fetched, tokens: u64) -> StageProfile {
    let body = f.body.to_string();
    let mut p = StageProfile {
        duration_ns: f.elapsed.as_nanos() as u64,
        device: exec.device_name(),
        batch_size: 1,
        token_count: tokens,
        input_bytes: body.len() as u64,
        output_bytes: f.response_bytes as u64,
        queue_depth: f.queue_depth,
        ..Default::default()
    };
    p.notes.insert("request_body".into(), body);
    p
}

fn finish(f: &Finish) -> String {
    match f {
        Finish::Stop => "stop".into(),
        Finish::Length => "length".into(),
        Finish::Other(s) => s.clone(),
        Finish::Unknown => "(not given)".into(),
    }
}

/// The server's token ids must name the tokens it wrote in the declared
/// tokenizer's vocabulary: otherwise the config declared the wrong
/// tokenizer, and a KL over ids would compare different tokens.
fn check_ids<'a>(
    tok: &tokenizers::Tokenizer,
    ids: &[u32],
    texts: impl Iterator<Item = &'a str>,
    url: &str,
) -> Result<(), ExecutorError> {
    for (&id, text) in ids.iter().zip(texts) {
        // A control token (`<|im_end|>`) is written as "" by llama-server.
        if tok.decode(&[id], true).is_ok_and(|t| t.is_empty()) && text.is_empty() {
            continue;
        }
        let Ok(ours) = tok.decode(&[id], false) else {
            return Err(ExecutorError::Request(format!(
                "{url} returned token id {id}, which the declared tokenizer does not have: `tokenizer` names another model's vocabulary"
            )));
        };
        // A token that is part of a UTF-8 character decodes to U+FFFD on
        // its own; only whole pieces are compared.
        if !ours.contains('\u{FFFD}') && !text.contains('\u{FFFD}') && ours != text {
            return Err(ExecutorError::Request(format!(
                "{url} returned token id {id} as {text:?}, but the declared tokenizer reads it as {ours:?}: `tokenizer` names another model's vocabulary"
            )));
        }
    }
    Ok(())
}

/// The candidate's own top-k rows along a reference continuation, read
/// from an echoed answer.
struct EchoRows {
    rows: usize,
    k: usize,
    values: Vec<f32>,
    ids: Vec<u32>,
}

/// The last `n + 1` scored entries of an echo answer are the reference's
/// `n` tokens and the one new token: the distributions at every position
/// of the continuation and after it. Refused when the server split the
/// text into other tokens than the reference's (then the positions would
/// not be the reference's).
fn align(e: &Fetched, r: &ReferenceContinuation) -> Result<EchoRows, String> {
    let lp = e.answer.logprobs.as_deref().unwrap_or_default();
    let n = r.completion.len();
    if lp.len() < n + 1 {
        return Err(format!(
            "the echoed answer holds {} scored tokens, fewer than the reference's {n} and one new token",
            lp.len()
        ));
    }
    let tail = &lp[lp.len() - (n + 1)..];
    let echoed: Option<Vec<u32>> = tail[..n].iter().map(|t| t.id).collect();
    if echoed.as_deref() != Some(r.completion.as_slice()) {
        return Err(
            "the server tokenized the reference continuation's text into other tokens than the reference's"
                .into(),
        );
    }
    let rows = r.support.len().min(n + 1);
    let k = tail[..rows].iter().map(|t| t.top.len()).min().unwrap_or(0);
    let ids: Option<Vec<u32>> = tail[..rows]
        .iter()
        .flat_map(|t| t.top[..k].iter().map(|x| x.id))
        .collect();
    match (k, ids) {
        (0, _) | (_, None) => {
            Err("the echoed answer's top log-probabilities carry no token ids".into())
        }
        (k, Some(ids)) => Ok(EchoRows {
            rows,
            k,
            values: tail[..rows]
                .iter()
                .flat_map(|t| t.top[..k].iter().map(|x| x.logprob))
                .collect(),
            ids,
        }),
    }
}
