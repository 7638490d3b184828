//! A generation session on candle: the KV cache, and the block hook that
//! applies interventions and keeps observed activations.

use candle_core::{DType, Tensor};

use super::intervene::Candle;
use super::model::llama::{KvCache, Llama, LogitsAt, PassTiming, Seq};
use crate::executor::Effect;
use crate::executor::{ExecutorError, InferenceSession, StepOutput};
use crate::intervene::Intervention;
use crate::intervene::policy::{PolicyLog, StepPolicy};
use crate::model::ModelError;

/// Applies interventions after their block and keeps observed
/// activations: the hook every local backend shares, over candle's tensors.
pub type RunHook<'a> = crate::executor::hook::RunHook<'a, Candle>;

/// A single-sequence session over a KV cache.
pub struct CandleSession<'a> {
    pub(crate) model: &'a Llama,
    pub(crate) cache: KvCache,
    pub(crate) hook: RunHook<'a>,
    /// Timing of the last pass.
    pub(crate) timing: PassTiming,
}

impl<'a> CandleSession<'a> {
    pub(crate) fn new(
        model: &'a Llama,
        interventions: &'a [Intervention],
        ops: super::intervene::Candle,
    ) -> Self {
        CandleSession {
            model,
            cache: model.new_cache(),
            hook: RunHook::with_ops(interventions, ops),
            timing: PassTiming::default(),
        }
    }

    /// Runs the prompt with logits at `at`, returning them as a tensor
    /// (`[positions, vocab]`) for the trace.
    pub(crate) fn prefill_tensor(
        &mut self,
        ids: &[u32],
        at: LogitsAt,
    ) -> Result<Tensor, ExecutorError> {
        if !self.cache.is_empty() {
            return Err(ExecutorError::Request(
                "prefill on a session that already holds tokens; start a new session".into(),
            ));
        }
        self.hook.prefill = true;
        let (logits, timing) = self
            .model
            .run(ids, Some(&mut self.cache), &mut self.hook, at)?;
        self.timing = timing;
        self.hook.prefill = false;
        self.hook.observe.clear();
        Ok(logits)
    }

    /// Lets `policy` decide ops after the blocks it watches, in every pass.
    pub fn set_policy(&mut self, policy: &'a mut dyn StepPolicy) {
        self.hook.policy = Some(policy);
    }

    /// What the policy did so far, if there is one.
    pub fn policy_log(&self) -> Option<&PolicyLog> {
        self.hook.policy.as_ref().map(|_| &self.hook.policy_log)
    }

    /// What each intervention did so far.
    pub fn effects(&self) -> &[Effect] {
        &self.hook.effects
    }

    /// Bytes held by the KV cache.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }
}

/// What a pass over sessions is, for their hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// A prompt, or its rest after a shared opening: the interventions
    /// count its tokens as prefill, and observation ends after it.
    Prompt,
    /// The opening several prompts share, run once: prefill, and
    /// observation goes on into each prompt's rest.
    Opening,
    /// A decode step.
    Decode,
}

/// One pass over several sessions of one model: `ids[j]` run as the next
/// tokens of `sessions[j]`, with logits at `at[j]` (a ragged batch; see
/// [`Llama::run_batch`]).
pub(crate) fn run_sessions(
    sessions: &mut [&mut CandleSession<'_>],
    ids: &[&[u32]],
    at: &[LogitsAt],
    pass: Pass,
) -> Result<Vec<Tensor>, ExecutorError> {
    let prefill = pass != Pass::Decode;
    let Some(model) = sessions.first().map(|s| s.model) else {
        return Ok(Vec::new());
    };
    let mut seqs: Vec<Seq<'_>> = sessions
        .iter_mut()
        .zip(ids.iter().zip(at))
        .map(|(s, (&ids, &at))| {
            let CandleSession { cache, hook, .. } = &mut **s;
            hook.prefill = prefill;
            Seq {
                ids,
                cache: Some(cache),
                hook,
                at,
            }
        })
        .collect();
    let run = model.run_batch(&mut seqs);
    drop(seqs);
    for s in sessions.iter_mut() {
        s.hook.prefill = false;
        if pass == Pass::Prompt {
            s.hook.observe.clear();
        }
    }
    let mut logits = Vec::with_capacity(sessions.len());
    for (s, (l, timing)) in sessions.iter_mut().zip(run?) {
        s.timing = timing;
        logits.push(l);
    }
    Ok(logits)
}

/// Tokens every prompt of a batch opens with, when their opening can run
/// once for all of them (see [`crate::executor::hook::shared_opening`]).
fn shared_opening(sessions: &[&mut CandleSession<'_>], ids: &[&[u32]], at: &[LogitsAt]) -> usize {
    let hooks: Vec<&RunHook<'_>> = sessions.iter().map(|s| &s.hook).collect();
    let fresh = sessions.iter().all(|s| s.cache.is_empty());
    let from_inside = at.iter().any(|a| matches!(a, LogitsAt::From(_)));
    crate::executor::hook::shared_opening(&hooks, fresh, ids, from_inside)
}

/// What [`prefill_batch`] did.
pub(crate) struct Prefilled {
    /// Each session's logits at its `at` positions (the opening's rows
    /// first, where `at` is every position).
    pub logits: Vec<Tensor>,
    /// Tokens of the shared opening that ran once (0: none).
    pub opening: usize,
    /// The opening's pass: its hook and lm_head time.
    pub opening_timing: PassTiming,
}

/// Fresh sessions' prompts in one ragged pass (prefill). An opening every
/// prompt shares (a chat template's system prompt) runs once, on the first
/// session; the others start from a fork of its KV cache, its kept
/// activations and its interventions' records, so each session ends as it
/// would alone: on the CPU the same activations, logits and keys and
/// values bit for bit (every row of a pass is computed on its own); the
/// interventions' summed squared change to f64 rounding (two passes' norms
/// instead of one); the cache's capacity may differ (grown from the
/// opening's, in doublings). Kept activations are joined, one per layer
/// and site.
pub(crate) fn prefill_batch(
    sessions: &mut [&mut CandleSession<'_>],
    ids: &[&[u32]],
    at: &[LogitsAt],
) -> Result<Prefilled, ExecutorError> {
    let opening = shared_opening(sessions, ids, at);
    let mut opening_logits = None;
    let mut opening_timing = PassTiming::default();
    if opening > 0 {
        let wide = match at.contains(&LogitsAt::All) {
            true => LogitsAt::All,
            false => LogitsAt::Last,
        };
        let (first, rest) = sessions.split_first_mut().expect("several sessions");
        let logits = run_sessions(
            &mut [&mut **first],
            &[&ids[0][..opening]],
            &[wide],
            Pass::Opening,
        )?;
        opening_timing = first.timing;
        for s in rest {
            s.cache = first.cache.fork()?;
            s.hook.continue_from(&first.hook);
        }
        opening_logits = (wide == LogitsAt::All)
            .then(|| logits.into_iter().next())
            .flatten();
    }
    let rest: Vec<&[u32]> = ids.iter().map(|i| &i[opening..]).collect();
    let logits = run_sessions(sessions, &rest, at, Pass::Prompt)?;
    let mut joined = Vec::with_capacity(logits.len());
    for ((s, logits), &at) in sessions.iter_mut().zip(logits).zip(at) {
        s.hook.merge_kept()?;
        joined.push(match (&opening_logits, at) {
            (Some(first), LogitsAt::All) => {
                Tensor::cat(&[first, &logits], 0).map_err(ModelError::from)?
            }
            _ => logits,
        });
    }
    Ok(Prefilled {
        logits: joined,
        opening,
        opening_timing,
    })
}

/// The last row of `[positions, vocab]` logits, as f32 on the host.
pub(super) fn last_row(logits: &Tensor) -> Result<Vec<f32>, ExecutorError> {
    let n = logits.dim(0).map_err(ModelError::from)?;
    Ok(logits
        .get(n - 1)
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(ModelError::from)?)
}

impl InferenceSession for CandleSession<'_> {
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        let logits = self.prefill_tensor(ids, LogitsAt::Last)?;
        Ok(StepOutput {
            logits: last_row(&logits)?,
        })
    }

    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError> {
        if self.cache.is_empty() {
            return Err(ExecutorError::Request(
                "decode_step before prefill: the session holds no prompt".into(),
            ));
        }
        let (logits, timing) =
            self.model
                .run(&[id], Some(&mut self.cache), &mut self.hook, LogitsAt::Last)?;
        self.timing = timing;
        Ok(StepOutput {
            logits: last_row(&logits)?,
        })
    }

    fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        self.hook.prefill = true;
        let run = self
            .model
            .run(ids, Some(&mut self.cache), &mut self.hook, LogitsAt::Last);
        self.hook.prefill = false;
        let (logits, timing) = run?;
        self.timing = timing;
        self.hook.observe.clear();
        Ok(StepOutput {
            logits: last_row(&logits)?,
        })
    }

    fn rewind(&mut self, to: usize) -> Result<(), ExecutorError> {
        self.cache.truncate(to).map_err(ExecutorError::Request)
    }

    fn position(&self) -> usize {
        self.cache.len()
    }

    fn capacity(&self) -> Option<usize> {
        self.model.config().context_length
    }
}
