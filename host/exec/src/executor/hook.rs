//! The block hook every local backend runs after each block: applies the
//! interventions and a step policy and keeps the observed activations,
//! over the library's tensors ([`TensorOps`]). Written once for candle,
//! torch and MLX.

use std::collections::HashMap;
use std::time::Instant;

use crate::executor::Effect;
use crate::intervene::policy::{PolicyLog, StepPolicy};
use crate::intervene::{Intervention, Primitive, policy_step};
use crate::model::ModelError;
use crate::trace::Site;

/// A tensor library's operations, beyond the activation primitive, that
/// the shared hook (and the tensor-library executor's session and trace)
/// use. A library's residual stream is `[tokens, hidden]` or, as candle
/// keeps it, already `[1, tokens, hidden]`; `batched` and `unbatched`
/// convert between it and the primitive's `[1, tokens, hidden]`.
pub trait TensorOps: Primitive + Default {
    /// The residual stream as `[1, tokens, hidden]` (the primitive's input).
    fn batched(&self, t: &Self::Tensor) -> Result<Self::Tensor, ModelError>;
    /// `[1, tokens, hidden]` back in the library's layout.
    fn unbatched(&self, t: &Self::Tensor) -> Result<Self::Tensor, ModelError>;
    /// Another handle on the same values (no copy).
    fn share(&self, t: &Self::Tensor) -> Self::Tensor;
    /// The last position of an activation as a tensor of its own (a view
    /// would keep every position alive).
    fn last_row(&self, t: &Self::Tensor) -> Result<Self::Tensor, ModelError>;
    /// The shape, and the values as f32 on the host in row-major order.
    fn host(&self, t: &Self::Tensor) -> Result<(Vec<usize>, Vec<f32>), ModelError>;
    /// `a`'s positions then `b`'s: the two joined along the positions
    /// axis (the second to last: `[.., positions, width]`).
    fn join(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor, ModelError>;
    /// How this library applies the activation primitive, for the
    /// intervene span's `primitive` note.
    fn primitive_note(&self) -> String {
        "the library's tensor operations".into()
    }
}

/// What a hook sees of a block after it ran.
pub struct BlockView<'a, T> {
    pub layer: usize,
    /// Absolute position of the pass's first token.
    pub offset: usize,
    /// What the attention added to the residual stream.
    pub attn_out: &'a T,
    /// What the MLP added to the residual stream.
    pub mlp_out: &'a T,
    /// A mixture of experts' router probabilities, one row per token, f32
    /// (each token used the experts with the highest).
    pub router: Option<&'a T>,
}

/// Called after every block with the residual stream; a returned tensor
/// of the same shape and dtype replaces it for the rest of the pass (an
/// intervention).
pub trait BlockHook<T> {
    fn after_block(&mut self, view: &BlockView<'_, T>, resid: &T) -> Result<Option<T>, ModelError>;
}

/// A hook that does nothing.
pub struct NoHook;

impl<T> BlockHook<T> for NoHook {
    fn after_block(&mut self, _: &BlockView<'_, T>, _: &T) -> Result<Option<T>, ModelError> {
        Ok(None)
    }
}

/// An activation kept by the hook, on the model's device, in the
/// library's layout of the residual stream.
#[derive(Clone)]
pub struct Kept<T> {
    pub layer: usize,
    pub site: Site,
    pub tensor: T,
}

/// Applies interventions and a policy after their blocks and keeps
/// observed activations: the one hook of every local backend, over its
/// library's [`TensorOps`].
pub struct RunHook<'a, O: TensorOps> {
    ops: O,
    pub interventions: &'a [Intervention],
    pub effects: Vec<Effect>,
    /// Layers whose activations to keep (empty in plain generation).
    pub observe: Vec<usize>,
    /// Also keep attention and MLP outputs at the observed layers.
    pub block_outputs: bool,
    /// Keep only each pass's last position of what is observed.
    pub last_only: bool,
    pub kept: Vec<Kept<O::Tensor>>,
    pub intervene_ns: u64,
    pub policy: Option<&'a mut dyn StepPolicy>,
    pub policy_log: PolicyLog,
    pub(crate) prefill: bool,
    /// Each intervention's basis on the model's device, made on first use.
    bases: Vec<Option<O::Tensor>>,
    policy_bases: HashMap<String, O::Tensor>,
}

impl<'a, O: TensorOps> RunHook<'a, O> {
    pub fn new(interventions: &'a [Intervention]) -> Self {
        RunHook::with_ops(interventions, O::default())
    }

    /// A hook over `ops` (a library's operations with its settings).
    pub fn with_ops(interventions: &'a [Intervention], ops: O) -> Self {
        RunHook {
            ops,
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

    /// The library's operations.
    pub fn ops(&self) -> &O {
        &self.ops
    }

    /// Observes every one of `layers` blocks, keeping each pass's last
    /// position: what a direction measurement reads.
    pub fn observe_last_positions(&mut self, layers: usize) {
        self.observe = (0..layers).collect();
        self.last_only = true;
    }

    /// The residual stream kept after each block, in order, each as `row`
    /// makes it of the kept tensor (a mixture's router probabilities, kept
    /// beside, are left out).
    pub fn kept_residuals<T, E>(
        &self,
        row: impl Fn(&O::Tensor) -> Result<T, E>,
    ) -> Result<Vec<T>, E> {
        self.kept
            .iter()
            .filter(|k| k.site == Site::ResidPost)
            .map(|k| row(&k.tensor))
            .collect()
    }

    /// Joins what this hook kept over several passes (a shared opening's,
    /// then the prompt's rest): one entry per layer and site, positions in
    /// order.
    pub fn merge_kept(&mut self) -> Result<(), ModelError> {
        let kept = std::mem::take(&mut self.kept);
        let mut merged: Vec<Kept<O::Tensor>> = Vec::with_capacity(kept.len());
        for k in kept {
            match merged
                .iter_mut()
                .find(|m| m.layer == k.layer && m.site == k.site)
            {
                Some(m) => m.tensor = self.ops.join(&m.tensor, &k.tensor)?,
                None => merged.push(k),
            }
        }
        self.kept = merged;
        Ok(())
    }

    /// Takes on what `first` did over a shared opening: its kept
    /// activations and its interventions' records.
    pub fn continue_from(&mut self, first: &RunHook<'_, O>) {
        self.kept = first
            .kept
            .iter()
            .map(|k| Kept {
                layer: k.layer,
                site: k.site,
                tensor: self.ops.share(&k.tensor),
            })
            .collect();
        self.effects = first.effects.clone();
        self.intervene_ns = first.intervene_ns;
    }

    /// How the primitive was applied (the intervene span's note).
    pub fn primitive_note(&self) -> String {
        self.ops.primitive_note()
    }

    /// Applies the interventions at `v.layer`, then the policy, to
    /// `resid`; the changed activation, if any changed it.
    fn intervene(
        &mut self,
        v: &BlockView<'_, O::Tensor>,
        resid: &O::Tensor,
    ) -> Result<Option<O::Tensor>, ModelError> {
        let ops = &self.ops;
        let hook_error = |e| ModelError::Hook(format!("intervention at layer {}: {e}", v.layer));
        // The primitive takes `[batch, tokens, hidden]`.
        let mut replaced: Option<O::Tensor> = None;
        for (i, iv) in self.interventions.iter().enumerate() {
            if iv.layer != v.layer {
                continue;
            }
            let current = ops.batched(replaced.as_ref().unwrap_or(resid))?;
            if self.bases[i].is_none() {
                self.bases[i] = Some(ops.basis(&iv.direction, &current).map_err(hook_error)?);
            }
            let basis = self.bases[i].as_ref().expect("made above");
            let out = ops
                .apply(iv, basis, &current, v.offset)
                .map_err(hook_error)?;
            self.effects[i].add(&out, v.offset, self.prefill);
            if let Some(h) = out.hidden {
                replaced = Some(ops.unbatched(&h)?);
            }
        }
        if let Some(policy) = self.policy.as_deref_mut() {
            let current = ops.batched(replaced.as_ref().unwrap_or(resid))?;
            let changed = policy_step(
                ops,
                policy,
                &mut self.policy_log,
                &mut self.policy_bases,
                (v.layer, v.offset, self.prefill),
                &current,
            )
            .map_err(|e| ModelError::Hook(format!("policy at layer {}: {e}", v.layer)))?;
            if let Some(h) = changed {
                replaced = Some(ops.unbatched(&h)?);
            }
        }
        Ok(replaced)
    }
}

impl<O: TensorOps> BlockHook<O::Tensor> for RunHook<'_, O> {
    fn after_block(
        &mut self,
        v: &BlockView<'_, O::Tensor>,
        resid: &O::Tensor,
    ) -> Result<Option<O::Tensor>, ModelError> {
        let start = Instant::now();
        let replaced = self.intervene(v, resid)?;
        self.intervene_ns += start.elapsed().as_nanos() as u64;
        if self.observe.contains(&v.layer) {
            let ops = &self.ops;
            let keep = |t: &O::Tensor| match self.last_only {
                true => ops.last_row(t),
                false => Ok(ops.share(t)),
            };
            let resid = replaced.as_ref().unwrap_or(resid);
            self.kept.push(Kept {
                layer: v.layer,
                site: Site::ResidPost,
                tensor: keep(resid)?,
            });
            if self.block_outputs {
                for (site, t) in [(Site::AttnOut, v.attn_out), (Site::MlpOut, v.mlp_out)] {
                    self.kept.push(Kept {
                        layer: v.layer,
                        site,
                        tensor: keep(t)?,
                    });
                }
            }
            // A mixture of experts' routing at every observed layer, as
            // candle keeps it: which experts each token used.
            if let Some(r) = v.router {
                self.kept.push(Kept {
                    layer: v.layer,
                    site: Site::Router,
                    tensor: keep(r)?,
                });
            }
        }
        Ok(replaced)
    }
}

/// Tokens a batch's prompts must share before their opening runs once.
pub const MIN_SHARED_OPENING: usize = 8;

/// Tokens every prompt of a batch opens with, when their opening can run
/// once for all of them; 0 when it cannot. It can when there are several
/// fresh sessions (`fresh`) with the same hook (interventions, observed
/// layers and block outputs, no policy), no intervention acts on "the
/// last token of each call" (a split pass would move it), no logits are
/// asked from inside a prompt (`from_inside`: they would need shifting past
/// the opening), and the prompts share at least [`MIN_SHARED_OPENING`]
/// tokens. Each prompt still runs its last token.
pub fn shared_opening<O: TensorOps>(
    hooks: &[&RunHook<'_, O>],
    fresh: bool,
    ids: &[&[u32]],
    from_inside: bool,
) -> usize {
    let (Some(h), Some(first_ids)) = (hooks.first(), ids.first()) else {
        return 0;
    };
    let same_hook = hooks.iter().all(|o| {
        o.interventions == h.interventions
            && o.observe == h.observe
            && o.block_outputs == h.block_outputs
            && o.policy.is_none()
    });
    let moves = h
        .interventions
        .iter()
        .any(|i| i.positions == crate::intervene::Positions::Last);
    if hooks.len() < 2 || !fresh || !same_hook || moves || from_inside {
        return 0;
    }
    let mut shared = ids
        .iter()
        .map(|i| i.len().saturating_sub(1))
        .min()
        .unwrap_or(0);
    for i in &ids[1..] {
        let common = first_ids.iter().zip(*i).take_while(|(a, b)| a == b);
        shared = shared.min(common.count());
    }
    if shared < MIN_SHARED_OPENING {
        0
    } else {
        shared
    }
}
