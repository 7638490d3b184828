//! A generation session on libtorch: the KV cache, and the block hook that
//! applies interventions, runs a policy and keeps observed activations
//! (what candle's session does, on libtorch tensors).

use std::collections::HashMap;
use std::time::Instant;

use tch::{Kind, Tensor};

use super::intervene::{Torch, apply_with, basis_tensor};
use super::model::{BlockHook, BlockView, PassTiming, TorchCache, TorchLlama};
use crate::executor::candle::Site;
use crate::executor::{Effect, ExecutorError, InferenceSession, StepOutput};
use crate::intervene::Intervention;
use crate::intervene::policy::{PolicyLog, StepPolicy};
use crate::intervene::policy_step;
use crate::model::ModelError;

/// An activation kept by the hook, `[tokens, hidden]` on the model's device.
pub struct Kept {
    pub layer: usize,
    pub site: Site,
    pub tensor: Tensor,
}

/// Applies interventions and a policy after their blocks and keeps
/// observed activations.
pub struct TorchHook<'a> {
    pub interventions: &'a [Intervention],
    pub effects: Vec<Effect>,
    /// Layers whose activations to keep (empty in plain generation).
    pub observe: Vec<usize>,
    /// Also keep attention and MLP outputs at the observed layers.
    pub block_outputs: bool,
    /// Keep only each pass's last position of what is observed.
    pub last_only: bool,
    pub kept: Vec<Kept>,
    pub intervene_ns: u64,
    pub policy: Option<&'a mut dyn StepPolicy>,
    pub policy_log: PolicyLog,
    pub(crate) prefill: bool,
    /// Each intervention's basis on the model's device, made on first use.
    bases: Vec<Option<Tensor>>,
    policy_bases: HashMap<String, Tensor>,
}

impl<'a> TorchHook<'a> {
    pub fn new(interventions: &'a [Intervention]) -> Self {
        TorchHook {
            interventions,
            effects: vec![Effect::default(); interventions.len()],
            observe: Vec::new(),
            block_outputs: false,
            last_only: false,
            kept: Vec::new(),
            intervene_ns: 0,
            policy: None,
            policy_log: PolicyLog::default(),
            prefill: true,
            bases: (0..interventions.len()).map(|_| None).collect(),
            policy_bases: HashMap::new(),
        }
    }
}

impl BlockHook for TorchHook<'_> {
    fn after_block(
        &mut self,
        v: &BlockView<'_>,
        resid: &Tensor,
    ) -> Result<Option<Tensor>, ModelError> {
        let hook_error = |e| ModelError::Hook(format!("intervention at layer {}: {e}", v.layer));
        // The primitive takes `[batch, tokens, hidden]`.
        let mut replaced: Option<Tensor> = None;
        let start = Instant::now();
        for (i, iv) in self.interventions.iter().enumerate() {
            if iv.layer != v.layer {
                continue;
            }
            let current = replaced.as_ref().unwrap_or(resid).unsqueeze(0);
            let basis =
                self.bases[i].get_or_insert_with(|| basis_tensor(&iv.direction, current.device()));
            let out = apply_with(iv, basis, &current, v.offset).map_err(hook_error)?;
            self.effects[i].add(&out, v.offset, self.prefill);
            if let Some(h) = out.hidden {
                replaced = Some(h.squeeze_dim(0));
            }
        }
        if let Some(policy) = self.policy.as_deref_mut() {
            let current = replaced.as_ref().unwrap_or(resid).unsqueeze(0);
            let changed = policy_step(
                &Torch,
                policy,
                &mut self.policy_log,
                &mut self.policy_bases,
                (v.layer, v.offset, self.prefill),
                &current,
            )
            .map_err(|e| ModelError::Hook(format!("policy at layer {}: {e}", v.layer)))?;
            if let Some(h) = changed {
                replaced = Some(h.squeeze_dim(0));
            }
        }
        self.intervene_ns += start.elapsed().as_nanos() as u64;
        if self.observe.contains(&v.layer) {
            let resid = replaced.as_ref().unwrap_or(resid);
            let keep = |t: &Tensor| match self.last_only {
                true => {
                    let n = t.size()[0];
                    t.narrow(0, n - 1, 1).copy()
                }
                false => t.shallow_clone(),
            };
            self.kept.push(Kept {
                layer: v.layer,
                site: Site::ResidPost,
                tensor: keep(resid),
            });
            if self.block_outputs {
                for (site, t) in [(Site::AttnOut, v.attn_out), (Site::MlpOut, v.mlp_out)] {
                    self.kept.push(Kept {
                        layer: v.layer,
                        site,
                        tensor: keep(t),
                    });
                }
            }
        }
        Ok(replaced)
    }
}

/// A single-sequence session over a KV cache.
pub struct TorchSession<'a> {
    pub(crate) model: &'a TorchLlama,
    pub(crate) cache: TorchCache,
    pub(crate) hook: TorchHook<'a>,
    /// Timing of the last pass.
    pub(crate) timing: PassTiming,
}

impl<'a> TorchSession<'a> {
    pub(crate) fn new(model: &'a TorchLlama, interventions: &'a [Intervention]) -> Self {
        TorchSession {
            model,
            cache: model.new_cache(),
            hook: TorchHook::new(interventions),
            timing: PassTiming::default(),
        }
    }

    /// Runs `ids` after what the cache holds, as prompt tokens (`prefill`)
    /// or a decode step; the logits from position `from` of the pass on.
    pub(crate) fn pass(
        &mut self,
        ids: &[u32],
        prefill: bool,
        from: usize,
    ) -> Result<Tensor, ExecutorError> {
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
}

/// The last row of `[positions, vocab]` f32 logits, on the host.
pub(crate) fn last_row(logits: &Tensor) -> Result<Vec<f32>, ExecutorError> {
    let n = logits.size()[0];
    Vec::<f32>::try_from(logits.get(n - 1).to_kind(Kind::Float))
        .map_err(|e| ModelError::from(e).into())
}

impl InferenceSession for TorchSession<'_> {
    fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        if !self.cache.is_empty() {
            return Err(ExecutorError::Request(
                "prefill on a session that already holds tokens; start a new session".into(),
            ));
        }
        let logits = self.pass(ids, true, ids.len().saturating_sub(1))?;
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
        let logits = self.pass(&[id], false, 0)?;
        Ok(StepOutput {
            logits: last_row(&logits)?,
        })
    }

    fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
        let logits = self.pass(ids, true, ids.len().saturating_sub(1))?;
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
