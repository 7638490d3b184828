//! A generation session of a tensor-library executor: the KV cache and
//! the block hook, behind the [`InferenceSession`] contract.

use super::{LibCache, LibHook, LibModel, LibRow, PassTiming, TensorOf, TensorOps};
use crate::executor::hook::{RunHook, shared_opening};
use crate::executor::{Effect, ExecutorError, InferenceSession, StepOutput};
use crate::intervene::Intervention;
use crate::intervene::policy::StepPolicy;

/// A single-sequence session over a KV cache.
pub struct LibSession<'a, M: LibModel> {
    pub(crate) model: &'a M,
    pub(crate) cache: M::Cache,
    pub hook: LibHook<'a, M::Ops>,
    /// Timing of the last pass.
    pub(crate) timing: PassTiming,
}

impl<'a, M: LibModel> LibSession<'a, M> {
    pub(crate) fn new(model: &'a M, interventions: &'a [Intervention]) -> Self {
        LibSession {
            model,
            cache: model.new_cache(),
            hook: LibHook::new(interventions),
            timing: PassTiming::default(),
        }
    }

    /// Runs `ids` after what the cache holds, as prompt tokens (`prefill`)
    /// or a decode step; the logits from position `from` of the pass on.
    pub fn pass(
        &mut self,
        ids: &[u32],
        prefill: bool,
        from: usize,
    ) -> Result<TensorOf<M>, ExecutorError> {
        self.hook.prefill = prefill;
        let run = self.model.run(ids, &mut self.cache, &mut self.hook, from);
        self.hook.prefill = false;
        if prefill {
            self.hook.observe.clear();
        }
        let (logits, timing) = run?;
        self.timing = timing;
        Ok(logits)
    }

    /// Lets `policy` decide ops after the blocks it watches, in every pass.
    pub fn set_policy(&mut self, policy: &'a mut dyn StepPolicy) {
        self.hook.policy = Some(policy);
    }

    /// What each intervention did so far.
    pub fn effects(&self) -> &[Effect] {
        &self.hook.effects
    }

    /// Bytes held by the KV cache.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// The next-token logits of the pass's last position, on the host.
    fn step(&mut self, ids: &[u32], prefill: bool) -> Result<StepOutput, ExecutorError> {
        let logits = self.pass(ids, prefill, ids.len().saturating_sub(1))?;
        Ok(StepOutput {
            logits: last_logits(&M::Ops::default(), &logits)?,
        })
    }
}

/// The last row of `[positions, vocab]` logits, on the host.
pub(crate) fn last_logits<O: TensorOps>(
    ops: &O,
    logits: &O::Tensor,
) -> Result<Vec<f32>, ExecutorError> {
    Ok(ops.host(&ops.last_row(logits)?)?.1)
}

impl<M: LibModel> InferenceSession for LibSession<'_, M> {
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        if !self.cache.is_empty() {
            return Err(ExecutorError::Request(
                "prefill on a session that already holds tokens; start a new session".into(),
            ));
        }
        self.step(ids, true)
    }

    fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError> {
        if self.cache.is_empty() {
            return Err(ExecutorError::Request(
                "decode_step before prefill: the session holds no prompt".into(),
            ));
        }
        self.step(&[id], false)
    }

    fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        self.step(ids, true)
    }

    fn rewind(&mut self, to: usize) -> Result<(), ExecutorError> {
        rewind(&mut self.cache, to)
    }

    fn position(&self) -> usize {
        self.cache.len()
    }

    fn capacity(&self) -> Option<usize> {
        self.model.config().context_length
    }
}

/// Forgets every position of `cache` from `to` on; a position it does not
/// hold is refused.
pub(crate) fn rewind<C: LibCache>(cache: &mut C, to: usize) -> Result<(), ExecutorError> {
    if to > cache.len() {
        return Err(ExecutorError::Request(format!(
            "cannot rewind to position {to}: the session holds {}",
            cache.len()
        )));
    }
    cache.cut(to);
    Ok(())
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

/// The sessions' caches as the rows of one, with room for `extra` more
/// columns each; the sessions hold empty caches until
/// [`unstack_caches`] gives theirs back.
pub(crate) fn stack_caches<M: LibModel>(
    sessions: &mut [&mut LibSession<'_, M>],
    extra: usize,
) -> Result<M::Cache, ExecutorError> {
    let caches = sessions
        .iter_mut()
        .map(|s| std::mem::replace(&mut s.cache, s.model.new_cache()))
        .collect();
    Ok(M::Cache::stack(caches, extra)?)
}

/// Each session's row of `batch` back as its own cache.
pub(crate) fn unstack_caches<M: LibModel>(
    sessions: &mut [&mut LibSession<'_, M>],
    batch: M::Cache,
) -> Result<(), ExecutorError> {
    for (s, cache) in sessions.iter_mut().zip(batch.unstack()?) {
        s.cache = cache;
    }
    Ok(())
}

/// One ragged pass over the rows of `batch`: `ids[j]` run as the next
/// tokens of `sessions[j]` (none: it sits the pass out), with its logits
/// from `from[j]` on; each running session's timing is the pass's.
pub(crate) fn run_rows<M: LibModel>(
    model: &M,
    batch: &mut M::Cache,
    sessions: &mut [&mut LibSession<'_, M>],
    ids: &[&[u32]],
    from: &[usize],
    pass: Pass,
) -> Result<Vec<Option<TensorOf<M>>>, ExecutorError> {
    let prefill = pass != Pass::Decode;
    let mut rows: Vec<LibRow<'_, TensorOf<M>>> = sessions
        .iter_mut()
        .zip(ids.iter().zip(from))
        .map(|(s, (&ids, &from))| {
            s.hook.prefill = prefill;
            LibRow {
                ids,
                from,
                hook: &mut s.hook,
            }
        })
        .collect();
    let run = model.run_batch(batch, &mut rows);
    drop(rows);
    for s in sessions.iter_mut() {
        s.hook.prefill = false;
        if pass == Pass::Prompt {
            s.hook.observe.clear();
        }
    }
    let mut out = Vec::with_capacity(sessions.len());
    for (s, ran) in sessions.iter_mut().zip(run?) {
        out.push(ran.map(|(logits, timing)| {
            s.timing = timing;
            logits
        }));
    }
    Ok(out)
}

/// What [`prefill_batch`] did.
pub(crate) struct Prefilled<T> {
    /// Each session's logits: every position's where it asked for all
    /// (the opening's rows first), else its last position's.
    pub logits: Vec<T>,
    /// Tokens of the shared opening that ran once (0: none).
    pub opening: usize,
    /// The opening's pass: its hook and lm_head time.
    pub opening_timing: PassTiming,
}

/// Fresh sessions' prompts in one ragged pass (prefill), with logits at
/// every position where `all_logits[j]`, else at the last. An opening
/// every prompt shares (a chat template's system prompt) runs once, on
/// the first session; the others continue from a copy of its KV cache,
/// its kept activations and its interventions' records, so each session
/// ends as it would alone (to the library's rounding). Kept activations
/// are joined, one per layer and site.
pub(crate) fn prefill_batch<M: LibModel>(
    model: &M,
    sessions: &mut [&mut LibSession<'_, M>],
    ids: &[&[u32]],
    all_logits: &[bool],
) -> Result<Prefilled<TensorOf<M>>, ExecutorError> {
    let ops = M::Ops::default();
    let opening = {
        let hooks: Vec<&RunHook<'_, M::Ops>> = sessions.iter().map(|s| &s.hook).collect();
        let fresh = sessions.iter().all(|s| s.cache.is_empty());
        shared_opening(&hooks, fresh, ids, false)
    };
    let mut opening_logits = None;
    let mut opening_timing = PassTiming::default();
    if opening > 0 {
        let wide = all_logits.contains(&true);
        let (first, rest) = sessions.split_first_mut().expect("several sessions");
        let mut cache = std::mem::replace(&mut first.cache, model.new_cache());
        let from = if wide { 0 } else { opening - 1 };
        let ran = run_rows(
            model,
            &mut cache,
            &mut [&mut **first],
            &[&ids[0][..opening]],
            &[from],
            Pass::Opening,
        );
        first.cache = cache;
        let logits = ran?;
        opening_timing = first.timing;
        for s in rest {
            s.cache = first.cache.fork()?;
            s.hook.continue_from(&first.hook);
        }
        opening_logits = logits.into_iter().next().flatten().filter(|_| wide);
    }
    let rest: Vec<&[u32]> = ids.iter().map(|i| &i[opening..]).collect();
    let from: Vec<usize> = rest
        .iter()
        .zip(all_logits)
        .map(|(r, &all)| if all { 0 } else { r.len() - 1 })
        .collect();
    let mut batch = stack_caches(sessions, 0)?;
    let ran = run_rows(model, &mut batch, sessions, &rest, &from, Pass::Prompt);
    unstack_caches(sessions, batch)?;
    let mut logits = Vec::with_capacity(sessions.len());
    for ((s, l), &all) in sessions.iter_mut().zip(ran?).zip(all_logits) {
        s.hook.merge_kept()?;
        let l = l.expect("every prompt has tokens");
        logits.push(match (&opening_logits, all) {
            (Some(first), true) => ops.join(first, &l)?,
            _ => l,
        });
    }
    Ok(Prefilled {
        logits,
        opening,
        opening_timing,
    })
}
