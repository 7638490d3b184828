//! `vauban serve`: an OpenAI-compatible endpoint over a white-box
//! executor, with activation interventions or a steering policy applied
//! in prefill and every decode step. Any OpenAI client (promptfoo,
//! Inspect, lm-eval's `local-completions`, vauban's own http executor)
//! can then query the transformed model: steering as a service.
//!
//! Routes: `GET /health`, `GET /v1/models`, `POST /v1/completions`,
//! `POST /v1/chat/completions` (each with `"stream": true` as server-sent
//! events). Generations run one at a time on the executor, in a blocking
//! task; the HTTP side stays on a small tokio runtime.

mod openai;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};

use crate::executor::{
    Executor, GenerateOptions, LocalBackend, LocalModel, PromptForm, RunOptions, TopLogprobs,
};
use crate::intervene::Intervention;
use crate::intervene::policy::StepPolicy;
use crate::trace::{ArtifactKind as K, Role, TraceRequest};

pub use openai::Params;

/// A policy that starts a fresh, bound instance for each generation.
pub trait PolicySource: Send + Sync {
    /// A new instance for one generation.
    fn start(&self) -> anyhow::Result<Box<dyn StepPolicy + '_>>;
    /// Who decides (`name version`), for the fingerprint and the log.
    fn describe(&self) -> String;
}

/// What the server serves.
pub struct Served {
    pub exec: LocalBackend,
    /// Applied in prefill and every decode step of every request.
    pub interventions: Vec<Intervention>,
    pub policy: Option<Box<dyn PolicySource>>,
    /// The model id clients name (`/v1/models` lists it).
    pub name: String,
}

impl Served {
    /// `system_fingerprint`: changes whenever the weights, the
    /// interventions or the policy change, so a client's cache keyed on
    /// it (vauban's http executor's is) never mixes two transformations.
    pub fn fingerprint(&self) -> String {
        let what = serde_json::json!({
            "vauban": env!("CARGO_PKG_VERSION"),
            "weights": self.exec.model_ref().sha256,
            "model": self.exec.model_ref().name,
            "interventions": self.interventions.iter().map(Intervention::record).collect::<Vec<_>>(),
            "policy": self.policy.as_ref().map(|p| p.describe()),
        });
        let sha = crate::hash::sha256_hex(what.to_string().as_bytes());
        format!("vauban-{}-{}", env!("CARGO_PKG_VERSION"), &sha[..12])
    }
}

/// A finished generation, as the responses need it.
pub struct Completion {
    /// With `echo`: the prompt, and (with `logprobs`) its tokens' scores.
    pub echoed: Option<Echoed>,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub text: String,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Per generated token: its text, id, log-probability and the top
    /// alternatives (text, id, log-probability), when asked for.
    pub tokens: Vec<TokenInfo>,
}

/// The prompt as `echo` returns it.
pub struct Echoed {
    pub text: String,
    /// Per prompt token (empty without `logprobs`); the first has no
    /// distribution before it, so its scores are not meaningful.
    pub tokens: Vec<TokenInfo>,
}

/// One generated token with its log-probabilities.
pub struct TokenInfo {
    pub text: String,
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(String, u32, f32)>,
}

/// Why a request could not be served: a status and an OpenAI-style error.
#[derive(Debug)]
pub struct ServeError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

impl ServeError {
    pub fn bad_request(message: impl Into<String>) -> ServeError {
        ServeError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
        }
    }
    fn internal(message: impl Into<String>) -> ServeError {
        ServeError {
            status: 500,
            kind: "server_error",
            message: message.into(),
        }
    }
}

/// Generates for `p` on the served model; `on_text` receives the text as
/// it becomes final (what a stream sends).
pub fn complete(
    served: &Served,
    p: &Params,
    on_text: &mut dyn FnMut(&str),
) -> Result<Completion, ServeError> {
    let exec = &served.exec;
    let ids = match &p.prompt_ids {
        Some(ids) => {
            let vocab = exec.dims().vocab;
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ServeError::bad_request(format!(
                    "token id {bad} is outside the model's vocabulary of {vocab}"
                )));
            }
            ids.clone()
        }
        None => exec
            .tokenize(&p.prompt, &p.form)
            .map_err(|e| ServeError::bad_request(format!("cannot tokenize the prompt: {e}")))?,
    };
    if ids.is_empty() {
        return Err(ServeError::bad_request("the prompt is empty"));
    }
    let echoed = match p.echo {
        true => Some(echo(served, &ids, p)?),
        false => None,
    };
    let mut policy = match &served.policy {
        Some(s) => Some(
            s.start()
                .map_err(|e| ServeError::internal(format!("the policy: {e:#}")))?,
        ),
        None => None,
    };
    let mut session = exec.session(&served.interventions);
    if let Some(pol) = policy.as_mut() {
        session.set_policy(pol.as_mut());
    }
    let options = GenerateOptions {
        max_tokens: p.max_tokens,
        sampling: p.sampling.clone(),
        stop: p.stop.clone(),
        top_logprobs: match p.logprobs {
            true => p.top_logprobs.max(1),
            false => 0,
        },
    };
    let g = exec
        .generate_in(&mut session, &ids, &options, on_text)
        .map_err(|e| ServeError::internal(format!("generation failed: {e}")))?;
    let piece = |id: u32| exec.detokenize(&[id]).unwrap_or_default();
    let tokens = match p.logprobs {
        false => Vec::new(),
        true => g
            .ids
            .iter()
            .zip(&g.logprobs)
            .zip(&g.top)
            .map(|((&id, &logprob), top)| TokenInfo {
                text: piece(id),
                id,
                logprob,
                top: top
                    .ids
                    .iter()
                    .zip(&top.logprobs)
                    .take(p.top_logprobs)
                    .map(|(&t, &l)| (piece(t), t, l))
                    .collect(),
            })
            .collect(),
    };
    use crate::executor::StopReason;
    Ok(Completion {
        echoed,
        prompt_tokens: ids.len(),
        completion_tokens: g.ids.len(),
        text: g.text,
        finish_reason: match g.stop {
            StopReason::Eos { .. } | StopReason::StopString { .. } => "stop",
            StopReason::MaxTokens | StopReason::ContextFull { .. } => "length",
        },
        tokens,
    })
}

/// The prompt with, when `p.logprobs`, each token's log-probability and
/// top alternatives under the served model (interventions and policy
/// applied), from one traced forward pass over the prompt's ids.
fn echo(served: &Served, ids: &[u32], p: &Params) -> Result<Echoed, ServeError> {
    let exec = &served.exec;
    let text = exec
        .detokenize(ids)
        .map_err(|e| ServeError::internal(format!("detokenizing the prompt: {e}")))?;
    if !p.logprobs {
        return Ok(Echoed {
            text,
            tokens: Vec::new(),
        });
    }
    let request = TraceRequest {
        prompt_id: None,
        category: None,
        expected_behavior: None,
        text: None,
        token_ids: Some(ids.to_vec()),
        observe: vec![K::Logprobs],
        layers: vec![],
        raw_tensors: true,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: "echo".into(),
        prompt: PromptForm::Raw,
        interventions: served.interventions.clone(),
        block_outputs: false,
        generate: GenerateOptions::default(),
        reference: None,
    };
    let mut policy = match &served.policy {
        Some(s) => Some(
            s.start()
                .map_err(|e| ServeError::internal(format!("the policy: {e:#}")))?,
        ),
        None => None,
    };
    let out = exec
        .trace(
            &request,
            &options,
            policy.as_mut().map(|b| &mut **b as &mut dyn StepPolicy),
        )
        .map_err(|e| ServeError::internal(format!("scoring the prompt: {e}")))?;
    let rows = out
        .trace
        .artifacts_of(K::Logprobs)
        .find(|a| a.role() == Some(Role::Prompt))
        .and_then(|a| out.tensors.get(&a.id))
        .ok_or_else(|| ServeError::internal("the prompt's log-probabilities were not recorded"))?;
    let vocab = *rows.shape.last().unwrap_or(&0);
    let values = rows.as_ref().to_f32_vec();
    let piece = |id: u32| exec.detokenize(&[id]).unwrap_or_default();
    let tokens = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| match i {
            // Nothing predicts the first token.
            0 => TokenInfo {
                text: piece(id),
                id,
                logprob: f32::NAN,
                top: Vec::new(),
            },
            i => {
                let row = &values[(i - 1) * vocab..i * vocab];
                let top = TopLogprobs::of(row, p.top_logprobs);
                TokenInfo {
                    text: piece(id),
                    id,
                    logprob: row[id as usize],
                    top: top
                        .ids
                        .iter()
                        .zip(&top.logprobs)
                        .map(|(&t, &l)| (piece(t), t, l))
                        .collect(),
                }
            }
        })
        .collect();
    Ok(Echoed { text, tokens })
}

/// What the handlers share: the model behind a lock (one generation at a
/// time: the executor already uses every core).
pub(crate) struct Shared {
    served: Mutex<Served>,
    pub name: String,
    pub fingerprint: String,
    /// Numbers the response ids.
    ids: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn next_id(&self, prefix: &str) -> String {
        let n = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}-{n}")
    }
}

/// The routes over `served`.
pub fn router(served: Served) -> Router {
    let shared = Arc::new(Shared {
        name: served.name.clone(),
        fingerprint: served.fingerprint(),
        served: Mutex::new(served),
        ids: Default::default(),
    });
    Router::new()
        .route("/health", get(openai::health))
        .route("/v1/models", get(openai::models))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat))
        .with_state(shared)
}

/// Serves `served` on `addr` until Ctrl-C; `ready` is told the bound
/// address (port 0 picks a free one) before the first request is taken.
pub fn serve(
    served: Served,
    addr: SocketAddr,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("vauban-serve")
        .enable_all()
        .build()
        .context("cannot start the server's runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        ready(listener.local_addr()?);
        axum::serve(listener, router(served))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the server stopped")
    })
}

/// Generates in a blocking task, holding the model's lock.
pub(crate) async fn run_blocking<T: Send + 'static>(
    shared: Arc<Shared>,
    job: impl FnOnce(&Served) -> Result<T, ServeError> + Send + 'static,
) -> Result<T, ServeError> {
    tokio::task::spawn_blocking(move || {
        let served = shared
            .served
            .lock()
            .map_err(|_| ServeError::internal("an earlier generation panicked"))?;
        job(&served)
    })
    .await
    .map_err(|e| ServeError::internal(format!("the generation task failed: {e}")))?
}
