//! The http executor: any OpenAI-compatible endpoint (llama.cpp's
//! `llama-server`, vLLM, SGLang, MAX serve, a hosted API) as a traced
//! backend.
//!
//! A black box yields text and, at best, top-k log-probabilities of the
//! tokens it generated. The executor probes the endpoint when it connects
//! (which models it serves, whether it returns log-probabilities, how many,
//! with token ids or not) and declares exactly that as its capabilities;
//! what an answer lacks is recorded as missing, never filled in. Raw
//! prompts go to `/v1/completions` as given; chat prompts to
//! `/v1/chat/completions`, rendered by the server's own template (each
//! trace says which).
//!
//! The async runtime lives inside the executor: callers stay synchronous
//! and reach it through the same [`Executor`](super::Executor) trait, plus
//! [`HttpExecutor::trace_all`], which keeps up to `concurrency` requests
//! in flight and hands each trace back as it completes.

pub mod cache;
pub mod client;
mod trace;
pub mod wire;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use self::cache::ResponseCache;
use self::client::{ApiKey, HttpError, RetryPolicy, Transport};
use self::wire::{Answer, Ask, Endpoint};
use super::{Executor, ExecutorError, ModelDims, PromptForm, RunOptions, TraceOutput};
use crate::intervene::policy::StepPolicy;
use crate::trace::{
    ArtifactKind as K, Capabilities, DeviceKind, ModelRef, SupportLevel, TraceRequest,
};

const NAME: &str = "http";

/// The most top log-probabilities the probe asks for (the OpenAI API's
/// limit for chat, and vLLM's default `--max-logprobs`).
pub const PROBE_TOP_LOGPROBS: usize = 20;

fn unsupported(what: &'static str) -> ExecutorError {
    ExecutorError::Unsupported {
        backend: NAME,
        what,
    }
}

/// Where the endpoint is and how to talk to it.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    /// The base URL as OpenAI clients take it (`http://127.0.0.1:8080/v1`);
    /// a URL with no path gets `/v1`.
    pub url: String,
    /// The model name sent in every request.
    pub model: String,
    /// The environment variable holding the API key (never the key).
    pub api_key_env: Option<String>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// At most this many requests started per second.
    pub requests_per_second: Option<f64>,
    /// Deadline of one attempt.
    pub timeout: Duration,
    /// Attempts after the first on a refused or reset connection, a
    /// timeout, a 5xx or a 429.
    pub retries: u32,
    /// The first retry's backoff (doubling, with jitter).
    pub backoff: Duration,
    /// The tokenizer the server's model uses (a `.gguf`, an HF folder or a
    /// `tokenizer.json`), declared by the config: it names the vocabulary
    /// the server's token ids index, which the next-token KL needs.
    pub tokenizer: Option<PathBuf>,
    /// Where answers are kept (none: not kept).
    pub cache: Option<PathBuf>,
}

impl HttpSpec {
    /// A spec with the defaults: 4 in flight, no rate limit, 120 s per
    /// attempt, 4 retries from 0.5 s.
    pub fn new(url: &str, model: &str) -> HttpSpec {
        HttpSpec {
            url: url.to_owned(),
            model: model.to_owned(),
            api_key_env: None,
            concurrency: 4,
            requests_per_second: None,
            timeout: Duration::from_secs(120),
            retries: 4,
            backoff: Duration::from_millis(500),
            tokenizer: None,
            cache: None,
        }
    }

    /// The base URL, checked: `http` or `https`, a host, no query; `/v1`
    /// added to a bare host; no trailing slash.
    pub fn base_url(&self) -> Result<String, String> {
        let u = reqwest::Url::parse(&self.url).map_err(|e| {
            format!(
                "`{}` is not a URL ({e}); write it as OpenAI clients take it, e.g. http://127.0.0.1:8080/v1",
                self.url
            )
        })?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
            return Err(format!(
                "`{}` is not an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1",
                self.url
            ));
        }
        if u.query().is_some() || u.fragment().is_some() {
            return Err(format!(
                "`{}`: the base URL takes no query or fragment",
                self.url
            ));
        }
        let mut s = u.as_str().trim_end_matches('/').to_owned();
        if u.path() == "/" {
            s.push_str("/v1");
        }
        Ok(s)
    }
}

/// What probing the endpoint found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Probe {
    /// What `/v1/models` listed (none: the endpoint has no such list).
    pub models: Option<Vec<String>>,
    /// The model id the server says answered.
    pub served_model: Option<String>,
    pub system_fingerprint: Option<String>,
    /// Top log-probabilities returned per position (0: none).
    pub top_logprobs: usize,
    /// Whether the server gives token ids with its tokens.
    pub token_ids: bool,
    /// Whether `echo` returns the prompt's log-probabilities too (vLLM,
    /// MAX with `--enable-echo`; llama-server ignores it): what a
    /// teacher-forced KL over an endpoint would need. Recorded, not used yet.
    pub prompt_logprobs: bool,
}

/// A connected endpoint.
pub struct HttpExecutor {
    spec: HttpSpec,
    runtime: tokio::runtime::Runtime,
    transport: Arc<Transport>,
    probe: Probe,
    /// The declared tokenizer, with its vocabulary hash.
    tokenizer: Option<(tokenizers::Tokenizer, String)>,
    cache: Option<ResponseCache>,
    /// Requests in flight now (each span's queue depth).
    in_flight: Arc<AtomicU32>,
}

/// An answer, with what it cost and whether it came from the cache.
pub(crate) struct Fetched {
    pub body: Value,
    pub answer: Answer,
    pub attempts: u32,
    pub elapsed: Duration,
    pub response_bytes: usize,
    pub from_cache: bool,
    pub queue_depth: u32,
}

impl HttpExecutor {
    /// Connects to the endpoint and probes it: the model must be served
    /// (when the server lists its models), and what a tiny request returns
    /// decides the declared capabilities.
    pub fn connect(spec: &HttpSpec) -> Result<HttpExecutor, ExecutorError> {
        let base = spec.base_url().map_err(ExecutorError::Request)?;
        if spec.concurrency == 0 {
            return Err(ExecutorError::Request(
                "concurrency must be at least 1".into(),
            ));
        }
        let key = spec
            .api_key_env
            .as_deref()
            .map(ApiKey::from_env)
            .transpose()
            .map_err(ExecutorError::Request)?;
        let retry = RetryPolicy {
            retries: spec.retries,
            base_delay: spec.backoff,
            max_delay: Duration::from_secs(30),
        };
        let transport = Transport::new(base, key, spec.timeout, retry, spec.requests_per_second)
            .map_err(ExecutorError::Request)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("vauban-http")
            .enable_all()
            .build()
            .map_err(|e| ExecutorError::Request(format!("cannot start the HTTP runtime: {e}")))?;
        let tokenizer = match &spec.tokenizer {
            None => None,
            Some(p) => {
                let t = crate::model::tokenizer::load(p)?;
                let sha = crate::model::tokenizer::vocabulary_sha256(&t);
                Some((t, sha))
            }
        };
        let transport = Arc::new(transport);
        let probe = runtime
            .block_on(probe(&transport, &spec.model))
            .map_err(|e| ExecutorError::Http(format!("probing the endpoint: {e}")))?;
        tracing::debug!("probed {}: {probe:?}", transport.base);
        Ok(HttpExecutor {
            spec: spec.clone(),
            runtime,
            transport,
            probe,
            tokenizer,
            cache: spec.cache.as_deref().map(ResponseCache::new),
            in_flight: Arc::new(AtomicU32::new(0)),
        })
    }

    /// What the probe found.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.transport.base
    }

    /// The model name every request sends.
    pub fn model_name(&self) -> &str {
        &self.spec.model
    }

    /// POSTs `body` to `path` under the base URL and reads the answer as
    /// JSON: a blocking call on the executor's runtime, with its retries and
    /// deadlines, for callers that speak the OpenAI API themselves (judges).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value, ExecutorError> {
        let reply = self
            .runtime
            .block_on(self.transport.post(path, body))
            .map_err(|e| ExecutorError::Http(e.to_string()))?;
        serde_json::from_slice(&reply.body).map_err(|e| {
            ExecutorError::Http(format!(
                "{}: the answer is not JSON: {e}",
                self.transport.url(path)
            ))
        })
    }

    /// What identifies the endpoint in cache keys and trace fingerprints:
    /// a server that starts serving another model (or the same name from
    /// other weights, where it reports a fingerprint) is another endpoint.
    pub fn identity(&self) -> Value {
        json!({
            "url": self.transport.base,
            "model": self.spec.model,
            "served_model": self.probe.served_model,
            "system_fingerprint": self.probe.system_fingerprint,
        })
    }

    /// Traces every job with up to `concurrency` requests in flight,
    /// handing each result to `on_done` (with the job's index) on the
    /// caller's thread as it completes, in completion order. `on_done`
    /// returning `Break` stops: requests in flight are dropped unanswered.
    /// `with_policy` refuses every job (an endpoint runs no policy).
    fn run_jobs(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        with_policy: bool,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        let mut prepared = Vec::with_capacity(jobs.len());
        for (i, (request, options)) in jobs.iter().enumerate() {
            match self.prepare(request, options, with_policy) {
                Ok(body) => prepared.push((i, body)),
                Err(e) => {
                    if on_done(i, Err(e)).is_break() {
                        return;
                    }
                }
            }
        }
        self.runtime.block_on(async {
            let permits = Arc::new(tokio::sync::Semaphore::new(self.spec.concurrency));
            let mut set = tokio::task::JoinSet::new();
            let identity = self.identity();
            for (i, (endpoint, body)) in prepared {
                let transport = self.transport.clone();
                let permits = permits.clone();
                let cache = self.cache.clone();
                let identity = identity.clone();
                let in_flight = self.in_flight.clone();
                let echo = self.echo_body(&jobs[i].0, &jobs[i].1);
                set.spawn(async move {
                    let _permit = permits.acquire_owned().await.expect("never closed");
                    let key = ResponseCache::key(&identity, &body);
                    let main =
                        fetch(&transport, cache.as_ref(), &key, endpoint, body, &in_flight).await;
                    // The reference continuation scored by echo, after the answer.
                    let echoed = match (main.is_ok(), echo) {
                        (true, Some(body)) => {
                            let key = ResponseCache::key(&identity, &body);
                            let e = Endpoint::Completions;
                            Some(fetch(&transport, cache.as_ref(), &key, e, body, &in_flight).await)
                        }
                        _ => None,
                    };
                    (i, main, echoed)
                });
            }
            while let Some(joined) = set.join_next().await {
                let (i, fetched, echoed) = joined.expect("a request task does not panic");
                let (request, options) = &jobs[i];
                let http = |e: HttpError| ExecutorError::Http(e.to_string());
                let r = fetched.map_err(http).and_then(|f| {
                    let echoed = echoed.transpose().map_err(http)?;
                    trace::record(self, request, options, f, echoed)
                });
                if on_done(i, r).is_break() {
                    set.abort_all();
                    return;
                }
            }
        });
    }
}

impl Executor for HttpExecutor {
    /// Declared after probing: text and a profile always; top-k
    /// log-probabilities and completion token ids only when the probe got
    /// them (`partial`: generated positions only, top k); nothing else.
    fn capabilities(&self) -> Capabilities {
        let level = |yes: bool| match yes {
            true => SupportLevel::Partial,
            false => SupportLevel::Unsupported,
        };
        Capabilities::uniform(NAME, &[DeviceKind::Remote], SupportLevel::Unsupported)
            .with(K::Text, SupportLevel::Full)
            .with(K::Profile, SupportLevel::Full)
            .with(K::Logprobs, level(self.probe.top_logprobs > 0))
            .with(K::Tokens, level(self.probe.token_ids))
    }

    fn model_ref(&self) -> ModelRef {
        ModelRef {
            name: format!("{} at {}", self.spec.model, self.transport.base),
            path: None,
            sha256: None,
            tokenizer_sha256: self.tokenizer.as_ref().map(|(_, sha)| sha.clone()),
        }
    }

    fn device_name(&self) -> String {
        "remote".into()
    }

    fn device_kind(&self) -> DeviceKind {
        DeviceKind::Remote
    }

    /// The endpoint does not say how deep or wide its model is; layers
    /// only matter for activations, which a black box never gives (a
    /// request for them is recorded as unsupported in the trace).
    fn known_dims(&self) -> Option<ModelDims> {
        None
    }

    /// Traces one request (a blocking call on the executor's runtime).
    fn trace(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        policy: Option<&mut dyn StepPolicy>,
    ) -> Result<TraceOutput, ExecutorError> {
        let mut out = None;
        self.run_jobs(
            std::slice::from_ref(&(request.clone(), options.clone())),
            policy.is_some(),
            &mut |_, r| {
                out = Some(r);
                ControlFlow::Break(())
            },
        );
        out.expect("one job, one result")
    }

    /// Up to the endpoint's `concurrency` requests in flight, results
    /// handed back as they complete (`batch` is the embedded model's).
    fn trace_all(
        &self,
        jobs: &[(TraceRequest, RunOptions)],
        _batch: usize,
        on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> ControlFlow<()>,
    ) {
        self.run_jobs(jobs, false, on_done)
    }
}

impl HttpExecutor {
    /// With a reference continuation to score, on an endpoint that echoes
    /// prompt log-probabilities with token ids, a raw prompt and a declared
    /// tokenizer: the body that sends the prompt followed by the
    /// continuation's text with `echo` and one new token, whose answer
    /// holds the candidate's top-k at every position of the continuation
    /// and after it (teacher forcing through the API).
    fn echo_body(&self, request: &TraceRequest, options: &RunOptions) -> Option<Value> {
        let r = options.reference.as_ref()?;
        let p = &self.probe;
        let usable = p.prompt_logprobs
            && p.token_ids
            && options.prompt == PromptForm::Raw
            && request.wants(K::Logprobs);
        let tok = self.tokenizer().filter(|_| usable)?;
        let continuation = tok.decode(&r.completion, false).ok()?;
        let prompt = format!("{}{continuation}", request.text.as_deref()?);
        let k = r.support.first().map_or(0, Vec::len).min(p.top_logprobs);
        let mut body = wire::body(&Ask::greedy_completion(&self.spec.model, &prompt, 1, k));
        body["echo"] = true.into();
        Some(body)
    }

    /// The endpoint and request body of a job, or why it cannot be asked.
    fn prepare(
        &self,
        request: &TraceRequest,
        options: &RunOptions,
        with_policy: bool,
    ) -> Result<(Endpoint, Value), ExecutorError> {
        if with_policy {
            return Err(unsupported(
                "running an intervention policy (a remote model exposes no activations)",
            ));
        }
        if !options.interventions.is_empty() {
            return Err(unsupported(
                "applying activation interventions (a remote model exposes no activations; serve the transformed model with `vauban serve --intervene`)",
            ));
        }
        let Some(text) = request.text.as_deref() else {
            return Err(unsupported("sending token ids (the endpoint takes text)"));
        };
        let (endpoint, system) = match &options.prompt {
            PromptForm::Raw => (Endpoint::Completions, None),
            PromptForm::Chat { system } => (Endpoint::Chat, system.as_deref()),
        };
        let g = &options.generate;
        let (temperature, top_p, top_k, seed) = match &g.sampling {
            Some(s) => (s.temperature, s.top_p, s.top_k, s.seed),
            None => (0.0, 1.0, None, 0),
        };
        let top_logprobs = match request.wants(K::Logprobs) {
            true => g.top_logprobs.min(self.probe.top_logprobs),
            false => 0,
        };
        let ask = Ask {
            endpoint,
            model: &self.spec.model,
            prompt: text,
            system,
            max_tokens: g.max_tokens,
            temperature,
            top_p,
            top_k,
            seed,
            stop: &g.stop,
            top_logprobs,
        };
        Ok((endpoint, wire::body(&ask)))
    }

    /// The declared tokenizer, when there is one.
    pub(crate) fn tokenizer(&self) -> Option<&tokenizers::Tokenizer> {
        self.tokenizer.as_ref().map(|(t, _)| t)
    }
}

/// Asks `body` of `endpoint`, or reads its answer from the cache; an
/// answer is kept only once it parsed.
async fn fetch(
    transport: &Transport,
    cache: Option<&ResponseCache>,
    key: &str,
    endpoint: Endpoint,
    body: Value,
    in_flight: &AtomicU32,
) -> Result<Fetched, HttpError> {
    let url = transport.url(endpoint.path());
    if let Some(e) = cache.and_then(|c| c.get(key))
        && let Ok(answer) = wire::parse(endpoint, e.response.as_bytes())
    {
        return Ok(Fetched {
            body,
            answer,
            attempts: e.attempts,
            elapsed: Duration::from_secs_f64(e.elapsed_ms / 1e3),
            response_bytes: e.response.len(),
            from_cache: true,
            queue_depth: 0,
        });
    }
    let depth = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let reply = transport.post(endpoint.path(), &body).await;
    in_flight.fetch_sub(1, Ordering::SeqCst);
    let reply = reply?;
    let answer = wire::parse(endpoint, &reply.body).map_err(|m| HttpError::Malformed {
        url: url.clone(),
        why: m.0,
    })?;
    if let Some(c) = cache {
        let entry = cache::Entry {
            url,
            request: body.clone(),
            response: String::from_utf8_lossy(&reply.body).into_owned(),
            attempts: reply.attempts,
            elapsed_ms: reply.elapsed.as_secs_f64() * 1e3,
        };
        if let Err(e) = c.put(key, &entry) {
            tracing::warn!("cannot keep an answer in the response cache: {e}");
        }
    }
    Ok(Fetched {
        body,
        response_bytes: reply.body.len(),
        answer,
        attempts: reply.attempts,
        elapsed: reply.elapsed,
        from_cache: false,
        queue_depth: depth,
    })
}

/// Lists the served models and sends one tiny completion asking for top
/// log-probabilities, to learn what the endpoint returns.
async fn probe(t: &Transport, model: &str) -> Result<Probe, HttpError> {
    let models = match t.get("models").await {
        Ok(r) => Some(wire::model_ids(&r.body).map_err(|m| HttpError::Malformed {
            url: t.url("models"),
            why: m.0,
        })?),
        // No model list (404, 405): not every server has one.
        Err(HttpError::Rejected {
            status: 404 | 405, ..
        }) => None,
        Err(e) => return Err(e),
    };
    if let Some(list) = &models
        && !list.is_empty()
        && !list.iter().any(|m| m == model)
    {
        return Err(HttpError::Rejected {
            url: t.url("models"),
            status: 404,
            message: format!(
                "the server does not serve `{model}`; it serves {}: set `model` to one of them",
                list.iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let mut asked = PROBE_TOP_LOGPROBS;
    loop {
        let ask = Ask::greedy_completion(model, "Hello", 1, asked);
        let reply = match t
            .post(Endpoint::Completions.path(), &wire::body(&ask))
            .await
        {
            // A server that caps `logprobs` (OpenAI's completions: 5) refuses more.
            Err(HttpError::Rejected {
                status: 400 | 422, ..
            }) if asked > 5 => {
                asked = 5;
                continue;
            }
            r => r?,
        };
        let a =
            wire::parse(Endpoint::Completions, &reply.body).map_err(|m| HttpError::Malformed {
                url: t.url(Endpoint::Completions.path()),
                why: m.0,
            })?;
        let lp = a.logprobs.unwrap_or_default();
        let top_logprobs = lp.first().map_or(0, |t| t.top.len().min(asked));
        let prompt_logprobs = top_logprobs > 0 && echoes(t, model).await;
        return Ok(Probe {
            models,
            served_model: a.model,
            system_fingerprint: a.system_fingerprint,
            top_logprobs,
            token_ids: lp.first().is_some_and(|t| t.id.is_some()),
            prompt_logprobs,
        });
    }
}

/// Whether `echo` gives log-probabilities for the prompt's tokens too: more
/// entries than tokens generated. A server that refuses `echo` or ignores
/// it (llama-server) does not.
async fn echoes(t: &Transport, model: &str) -> bool {
    let mut body = wire::body(&Ask::greedy_completion(model, "Hello world", 1, 1));
    body["echo"] = true.into();
    let Ok(reply) = t.post(Endpoint::Completions.path(), &body).await else {
        return false;
    };
    match wire::parse(Endpoint::Completions, &reply.body) {
        Ok(a) => {
            let generated = a.completion_tokens.unwrap_or(1) as usize;
            a.logprobs.is_some_and(|lp| lp.len() > generated)
        }
        Err(_) => false,
    }
}
