//! The judges of one run, as a scorer reaches them: by the names the
//! config binds, within the scorer's budget, every answer kept in the
//! store and read from it first. A request the service refuses (an
//! undeclared judge, a budget spent, a prompt too long, a question with no
//! recorded answer on replay) gets a typed error of its own; the other
//! requests of the batch are answered.

use std::collections::BTreeMap;
use std::time::Instant;

use super::store::{JudgeRecord, JudgeStore};
use super::{JudgeAnswer, JudgeRequest, LocalJudge};

/// A judge of the run: a model vauban runs, or, on replay, only the
/// identity its recorded answers were kept under.
pub enum JudgeModel {
    Local(Box<LocalJudge>),
    /// An OpenAI-compatible endpoint.
    Http(Box<super::http::HttpJudge>),
    /// Answers come from the store alone (`vauban diff`, `plugin test`).
    Recorded {
        identity: serde_json::Value,
    },
}

impl JudgeModel {
    /// What identifies the judge's answers in the store.
    pub fn identity(&self) -> serde_json::Value {
        match self {
            JudgeModel::Local(j) => j.identity(),
            JudgeModel::Http(j) => j.identity(),
            JudgeModel::Recorded { identity } => identity.clone(),
        }
    }
}

/// What one scorer may spend on judges in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests, answered or read from the store.
    pub requests: u64,
    /// Prompt and answer tokens together.
    pub tokens: u64,
    /// Bytes of one request's prompt.
    pub prompt_bytes: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            requests: 10_000,
            tokens: 4_000_000,
            prompt_bytes: 64 * 1024,
        }
    }
}

/// Why one request got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("judge `{asked}` is not one this scorer may ask (it may ask: {allowed})")]
    Undeclared { asked: String, allowed: String },
    #[error(
        "the scorer's judge budget is spent ({what}: {limit}); raise it in the config or ask less"
    )]
    Budget { what: &'static str, limit: u64 },
    #[error("the prompt is {bytes} bytes, over the limit of {limit}")]
    TooLong { bytes: usize, limit: usize },
    #[error(
        "judge `{judge}` has no recorded answer to this request (replay answers only what the run asked)"
    )]
    NotRecorded { judge: String },
    #[error("judge `{judge}` could not answer: {reason}")]
    Failed { judge: String, reason: String },
}

/// The judges one scorer may ask, by the names it asks them by.
pub struct JudgeService<'a> {
    judges: BTreeMap<String, (String, &'a JudgeModel)>,
    store: &'a JudgeStore,
    budget: Budget,
    spent_requests: u64,
    spent_tokens: u64,
}

impl<'a> JudgeService<'a> {
    /// `bound`: the scorer's name for a judge → the run's judge name and
    /// model.
    pub fn new(
        bound: BTreeMap<String, (String, &'a JudgeModel)>,
        store: &'a JudgeStore,
        budget: Budget,
    ) -> JudgeService<'a> {
        JudgeService {
            judges: bound,
            store,
            budget,
            spent_requests: 0,
            spent_tokens: 0,
        }
    }

    /// What the scorer has spent: requests and tokens.
    pub fn spent(&self) -> (u64, u64) {
        (self.spent_requests, self.spent_tokens)
    }

    /// Answers a batch of `(judge, request)` pairs in order: each from the
    /// store when it holds it, else asked (and kept), each refused alone
    /// when it cannot be.
    pub fn answer(
        &mut self,
        requests: &[(String, JudgeRequest)],
    ) -> Vec<Result<JudgeAnswer, RequestError>> {
        requests
            .iter()
            .map(|(name, r)| self.answer_one(name, r))
            .collect()
    }

    fn answer_one(&mut self, name: &str, r: &JudgeRequest) -> Result<JudgeAnswer, RequestError> {
        let Some((judge, model)) = self.judges.get(name).cloned() else {
            return Err(RequestError::Undeclared {
                asked: name.to_owned(),
                allowed: match self.judges.is_empty() {
                    true => "none".into(),
                    false => self.judges.keys().cloned().collect::<Vec<_>>().join(", "),
                },
            });
        };
        if r.prompt.len() > self.budget.prompt_bytes {
            return Err(RequestError::TooLong {
                bytes: r.prompt.len(),
                limit: self.budget.prompt_bytes,
            });
        }
        if self.spent_requests >= self.budget.requests {
            return Err(RequestError::Budget {
                what: "requests",
                limit: self.budget.requests,
            });
        }
        if self.spent_tokens >= self.budget.tokens {
            return Err(RequestError::Budget {
                what: "tokens",
                limit: self.budget.tokens,
            });
        }
        self.spent_requests += 1;
        let identity = model.identity();
        let key = JudgeStore::key(&identity, r);
        let answer = match (self.store.get(&key), model) {
            (Some(kept), _) => kept.answer,
            (None, JudgeModel::Recorded { .. }) => {
                return Err(RequestError::NotRecorded { judge });
            }
            (None, asked) => {
                let start = Instant::now();
                let answer = match asked {
                    JudgeModel::Local(j) => j.answer(r),
                    JudgeModel::Http(j) => j.answer(r),
                    JudgeModel::Recorded { .. } => unreachable!("answered above"),
                }
                .map_err(|e| RequestError::Failed {
                    judge: judge.clone(),
                    reason: e.to_string(),
                })?;
                let record = JudgeRecord {
                    judge: judge.clone(),
                    identity,
                    request: r.clone(),
                    answer: answer.clone(),
                    elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
                };
                // An answer that cannot be kept is still an answer; the
                // replay will ask again and say so.
                if let Err(e) = self.store.put(&key, &record) {
                    tracing::warn!("judge `{judge}`: cannot keep an answer: {e}");
                }
                answer
            }
        };
        self.spent_tokens += u64::from(answer.prompt_tokens) + u64::from(answer.answer_tokens);
        Ok(answer)
    }
}

/// A judged scorer's judges are this service: each request answered or
/// refused alone, the refusal's words passed to the scorer.
impl crate::plugin::scorer::Judges for JudgeService<'_> {
    fn answer(&mut self, requests: &[(String, JudgeRequest)]) -> Vec<Result<JudgeAnswer, String>> {
        JudgeService::answer(self, requests)
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
    }
}
