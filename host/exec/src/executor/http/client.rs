//! The transport: one request to an endpoint, with a deadline, retries
//! with exponential backoff and jitter on what a retry can fix (a refused
//! or reset connection, a timeout, a 5xx, a 429), an optional rate limit,
//! and a typed error naming the endpoint and the fix for what it cannot.
//!
//! The API key lives only here, in a header; no error, log line or
//! `Debug` output contains it.

use std::fmt;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::StatusCode;
use tokio::sync::Mutex;

use super::wire;

/// Why a request failed, with what names the endpoint; the prompt id is
/// added by the caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HttpError {
    #[error(
        "cannot connect to {url} after {attempts} attempt(s): {why}; is the server running, and is `url` right?"
    )]
    Connect {
        url: String,
        attempts: u32,
        why: String,
    },
    #[error(
        "{url} did not answer within {secs} s ({attempts} attempt(s)); raise `timeout_s` or lower `concurrency`"
    )]
    Timeout {
        url: String,
        secs: f64,
        attempts: u32,
    },
    #[error(
        "{url} refused the key ({status}): {message}; check the key in the environment variable {env}"
    )]
    Unauthorized {
        url: String,
        status: u16,
        message: String,
        env: String,
    },
    #[error("{url} rejected the request ({status}): {message}")]
    Rejected {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url} failed ({status}) on each of {attempts} attempt(s); last: {message}")]
    Server {
        url: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    #[error("{url} answered with a body vauban cannot read: {why}")]
    Malformed { url: String, why: String },
}

impl HttpError {
    /// Whether the server answered with a 4xx other than 429: the request
    /// itself is wrong, so every prompt will fail the same way.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            HttpError::Rejected { .. } | HttpError::Unauthorized { .. }
        )
    }
}

/// How many times, and how patiently, to retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// The first backoff; each next one doubles, up to `max_delay`, and a
    /// uniform jitter of up to the delay is added.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        let jitter = rand::rng().random_range(0.0..=1.0);
        exp + exp.mul_f64(jitter)
    }
}

/// The secret header value, never printed.
#[derive(Clone)]
pub struct ApiKey {
    pub env: String,
    value: String,
}

impl ApiKey {
    /// The key from the environment variable `env`.
    pub fn from_env(env: &str) -> Result<ApiKey, String> {
        match std::env::var(env) {
            Ok(v) if !v.is_empty() => Ok(ApiKey {
                env: env.to_owned(),
                value: v,
            }),
            Ok(_) => Err(format!(
                "the environment variable {env} (api_key_env) is empty"
            )),
            Err(_) => Err(format!(
                "the environment variable {env} (api_key_env) is not set; export it with the endpoint's key"
            )),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey(from ${}, redacted)", self.env)
    }
}

/// Spaces requests at least `interval` apart, across every task.
#[derive(Debug)]
struct RateLimit {
    interval: Duration,
    next: Mutex<Instant>,
}

impl RateLimit {
    async fn wait(&self) {
        let at = {
            let mut next = self.next.lock().await;
            let at = (*next).max(Instant::now());
            *next = at + self.interval;
            at
        };
        tokio::time::sleep_until(at.into()).await;
    }
}

/// A reply that arrived, with what it cost.
#[derive(Debug, Clone)]
pub struct Reply {
    pub body: Vec<u8>,
    /// Attempts made (1: no retry).
    pub attempts: u32,
    /// Wall time of the successful attempt.
    pub elapsed: Duration,
}

/// A client bound to one base URL.
#[derive(Debug)]
pub struct Transport {
    client: reqwest::Client,
    /// The base URL, ending in `/v1` (no trailing slash).
    pub base: String,
    key: Option<ApiKey>,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    limit: Option<RateLimit>,
}

impl Transport {
    pub fn new(
        base: String,
        key: Option<ApiKey>,
        timeout: Duration,
        retry: RetryPolicy,
        requests_per_second: Option<f64>,
    ) -> Result<Transport, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("vauban/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Transport {
            client,
            base,
            key,
            timeout,
            retry,
            limit: requests_per_second.map(|r| RateLimit {
                interval: Duration::from_secs_f64(1.0 / r),
                next: Mutex::new(Instant::now()),
            }),
        })
    }

    /// The URL of `path` under the base.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    /// POSTs `body` as JSON to `path`.
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> Result<Reply, HttpError> {
        let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
        self.send(path, Some(bytes)).await
    }

    /// GETs `path`.
    pub async fn get(&self, path: &str) -> Result<Reply, HttpError> {
        self.send(path, None).await
    }

    async fn send(&self, path: &str, body: Option<Vec<u8>>) -> Result<Reply, HttpError> {
        let url = self.url(path);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if let Some(l) = &self.limit {
                l.wait().await;
            }
            let mut req = match &body {
                Some(b) => self
                    .client
                    .post(&url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.clone()),
                None => self.client.get(&url),
            }
            .timeout(self.timeout);
            if let Some(k) = &self.key {
                req = req.bearer_auth(&k.value);
            }
            let start = Instant::now();
            let outcome = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    match resp.bytes().await {
                        Ok(b) => Ok((status, b.to_vec(), retry_after)),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            let elapsed = start.elapsed();
            let last = attempt > self.retry.retries;
            let (wait, failure) = match outcome {
                Ok((status, body, _)) if status.is_success() => {
                    return Ok(Reply {
                        body,
                        attempts: attempt,
                        elapsed,
                    });
                }
                Ok((status, body, retry_after))
                    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS =>
                {
                    (
                        retry_after,
                        HttpError::Server {
                            url: url.clone(),
                            status: status.as_u16(),
                            attempts: attempt,
                            message: wire::error_message(&body),
                        },
                    )
                }
                Ok((status, body, _))
                    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN =>
                {
                    return Err(HttpError::Unauthorized {
                        url,
                        status: status.as_u16(),
                        message: wire::error_message(&body),
                        env: self
                            .key
                            .as_ref()
                            .map(|k| format!("${}", k.env))
                            .unwrap_or_else(|| "named by `api_key_env` (none is set)".into()),
                    });
                }
                Ok((status, body, _)) => {
                    return Err(HttpError::Rejected {
                        url,
                        status: status.as_u16(),
                        message: wire::error_message(&body),
                    });
                }
                Err(e) if e.is_timeout() => (
                    None,
                    HttpError::Timeout {
                        url: url.clone(),
                        secs: self.timeout.as_secs_f64(),
                        attempts: attempt,
                    },
                ),
                Err(e) => (
                    None,
                    HttpError::Connect {
                        url: url.clone(),
                        attempts: attempt,
                        why: chain(&e),
                    },
                ),
            };
            if last {
                return Err(failure);
            }
            let wait = wait
                .map(|w| w.min(self.retry.max_delay))
                .unwrap_or_else(|| self.retry.delay(attempt - 1));
            tracing::debug!("{failure}; retrying in {:.2} s", wait.as_secs_f64());
            tokio::time::sleep(wait).await;
        }
    }
}

/// An error with its sources, which is where reqwest says "connection refused".
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let p = RetryPolicy {
            retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        for attempt in 0..6 {
            let exp = (100u64 << attempt).min(1000);
            let d = p.delay(attempt).as_millis() as u64;
            assert!((exp..=2 * exp).contains(&d), "attempt {attempt}: {d} ms");
        }
    }

    #[test]
    fn the_key_never_prints() {
        // SAFETY: a test-only variable no other test reads.
        unsafe { std::env::set_var("VAUBAN_TEST_KEY_DEBUG", "sk-secret-123") };
        let k = ApiKey::from_env("VAUBAN_TEST_KEY_DEBUG").unwrap();
        assert!(!format!("{k:?}").contains("sk-secret"));
        assert!(
            ApiKey::from_env("VAUBAN_TEST_KEY_UNSET_X")
                .unwrap_err()
                .contains("not set")
        );
    }
}
