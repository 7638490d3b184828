//! A generation session of a tensor-library executor: the KV cache and
//! the block hook, behind the [`InferenceSession`] contract.

use super::{LibCache, LibHook, LibModel, PassTiming, TensorOf, TensorOps};
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
