//! The decoder forward pass in libtorch, following the same model
//! description as candle's (`crate::model::config::ModelConfig`: sizes,
//! RoPE style, bases and scaling, QKV bias, tied embeddings, and the
//! family's [`BlockLayout`](crate::model::config::BlockLayout): Q/K norms,
//! post-norms, GeGLU, scaled embeddings, soft-caps, sliding windows,
//! experts) and the same GGUF tensor names, one small struct per part.
//!
//! Weights are read from a GGUF file and dequantized to f32 at load (the
//! Torch backend has no block kernels); the dtype on the device is a
//! setting (f32 on CPU; bf16 or f16 on a GPU).

use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::executor::kv_layout::{Attend, Layout, PassPlan, grown_capacity};
pub use crate::executor::tensor_lib::{BlockHook, BlockView, NoHook, PassTiming};
use crate::executor::tensor_lib::{
    LibCache, LibModel, LibRow, RowOutputs, Settled, TensorOf, plan_rows, split_logits,
};
use crate::executor::{DeviceSpec, ExecutorError, ModelSpec};
use crate::model::assets::ModelAssets;
use crate::model::config::{Activation, Experts, ModelConfig, QkNorm, RopeStyle};
use crate::model::host_weights::HostWeights;
use crate::model::routing::Routing;
use crate::model::{Dtype, Matrix, ModelError};
use crate::trace::DeviceKind;

impl From<tch::TchError> for ModelError {
    fn from(e: tch::TchError) -> Self {
        ModelError::Compute(Box::new(e))
    }
}

/// A linear map `y = x·Wᵀ (+ b)`.
struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// RMSNorm with a learned scale.
struct RmsNorm {
    scale: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// In f32 whatever the activations' dtype, as candle's.
    fn forward(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let var = xf.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
        (xf * (var + self.eps).rsqrt()).to_kind(x.kind()) * &self.scale
    }
}

/// `x` through the norm where the block has one.
fn norm_opt(norm: &Option<RmsNorm>, x: Tensor) -> Tensor {
    match norm {
        Some(n) => n.forward(&x),
        None => x,
    }
}

/// `cap · tanh(x / cap)`.
fn softcap(x: &Tensor, cap: f32) -> Tensor {
    (x / cap as f64).tanh() * cap as f64
}

/// Grouped-query self-attention with rotary positions.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// RMSNorm of the queries and keys before RoPE: per head (weight
    /// `[head_dim]`) or over the whole projection.
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    /// Whether those norms span the whole projection (OLMo 2) rather than
    /// each head.
    qk_norm_whole: bool,
    /// What multiplies `q·k`.
    scale: f64,
    softcap: Option<f32>,
    /// The layer's sliding window, if it slides.
    window: Option<usize>,
    /// Which of the model's RoPE tables the layer takes.
    rope: usize,
}

/// The gated MLP: `down(act(gate(x)) * up(x))`.
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
    activation: Activation,
}

impl Mlp {
    fn forward(&self, x: &Tensor) -> Tensor {
        let gated = activate(self.activation, self.gate.forward(x)) * self.up.forward(x);
        self.down.forward(&gated)
    }
}

/// The gate's activation.
fn activate(activation: Activation, gate: Tensor) -> Tensor {
    match activation {
        Activation::Silu => gate.silu(),
        Activation::GeluTanh => gate.gelu("tanh"),
    }
}

/// A mixture of experts, as candle's: the router's softmax over every
/// expert, the best ones per token (chosen by [`Routing`], the same for
/// every backend), their outputs weighted and summed.
struct Moe {
    router: Linear,
    /// Every expert's matrices stacked, `[experts, out, in]`, as GGUF
    /// holds them.
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    routing: Experts,
    activation: Activation,
}

impl Moe {
    /// The output for `x` (`[n, hidden]`) and the router's probabilities
    /// (`[n, experts]`, f32). The routing is decided on the host: each
    /// expert then runs its tokens alone, as transformers runs a mixture.
    fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
        let (n, hidden) = (x.size()[0], x.size()[1]);
        let probs = self.router.forward(x).softmax(-1, Kind::Float);
        let host = Vec::<f32>::try_from(probs.to_device(Device::Cpu).flatten(0, -1))?;
        let routing = Routing::of(&host, &self.routing);
        let on = |v: Vec<i64>| Tensor::from_slice(&v).to_device(x.device());
        let mut outputs = Vec::new();
        for (e, rows) in routing.rows.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let picked = x.index_select(0, &on(rows.iter().map(|&r| r as i64).collect()));
            let e = e as i64;
            let gate = activate(
                self.activation,
                picked.linear::<Tensor>(&self.gate.get(e), None),
            );
            let gated = gate * picked.linear::<Tensor>(&self.up.get(e), None);
            outputs.push(gated.linear::<Tensor>(&self.down.get(e), None));
        }
        // Each token's picks from the experts' outputs, weighted and
        // summed in f32.
        let (index, weight) = routing.gather();
        let used = self.routing.used as i64;
        let weight = Tensor::from_slice(&weight)
            .to_device(x.device())
            .view([n, used, 1]);
        let out = (Tensor::cat(&outputs, 0)
            .index_select(0, &on(index.into_iter().map(i64::from).collect()))
            .to_kind(Kind::Float)
            .view([n, used, hidden])
            * weight)
            .sum_dim_intlist(1, false, Kind::Float)
            .to_kind(x.kind());
        Ok((out, probs))
    }
}

/// A block's MLP: one, or a mixture of experts.
enum Ffn {
    Dense(Mlp),
    Experts(Moe),
}

/// One transformer block: attention and MLP, each after its norm (where
/// the family has one) and through its post-norm (where it has one),
/// added to the residual stream.
struct Block {
    attn_norm: Option<RmsNorm>,
    attn: Attention,
    post_attn_norm: Option<RmsNorm>,
    mlp_norm: Option<RmsNorm>,
    ffn: Ffn,
    post_mlp_norm: Option<RmsNorm>,
}

impl Block {
    /// The block's matrix `m`, `[out, in]`; a mixture's experts' `m`
    /// stacked by rows, `[experts · out, in]` (as candle gives it).
    fn matrix(&self, m: Matrix) -> Tensor {
        let a = &self.attn;
        let lin = match (m, &self.ffn) {
            (Matrix::AttnQ, _) => &a.q,
            (Matrix::AttnK, _) => &a.k,
            (Matrix::AttnV, _) => &a.v,
            (Matrix::AttnOutput, _) => &a.o,
            (Matrix::FfnGate, Ffn::Dense(f)) => &f.gate,
            (Matrix::FfnUp, Ffn::Dense(f)) => &f.up,
            (Matrix::FfnDown, Ffn::Dense(f)) => &f.down,
            (_, Ffn::Experts(moe)) => {
                let stack = match m {
                    Matrix::FfnGate => &moe.gate,
                    Matrix::FfnUp => &moe.up,
                    _ => &moe.down,
                };
                return stack.flatten(0, 1);
            }
        };
        lin.weight.shallow_clone()
    }
}

/// A llama-family model in libtorch.
pub struct TorchLlama {
    config: ModelConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: RmsNorm,
    output: Linear,
    /// Each kind of rotary embedding the layers take (the global one, then
    /// the sliding layers' own base where they have one: Gemma 3) as its
    /// inverse frequencies on the device and its magnitude, in LongRoPE's
    /// short and long sets (`ModelConfig::rope_set` picks one a pass).
    ropes: Vec<[(Tensor, f64); 2]>,
    device: Device,
    /// The weights' and activations' dtype.
    kind: Kind,
    /// How the file stored the weights read as f32 (a GGUF's `Q4_1/Q8_0`).
    dequantized: Option<String>,
}

/// Reads the weights a model's config implies (f32 on the host, shapes
/// checked) and puts them on the device in the model's dtype.
struct Reader<'a> {
    weights: HostWeights<'a>,
    device: Device,
    kind: Kind,
}

impl Reader<'_> {
    fn tensor(&self, shape: &[usize], values: &[f32]) -> Tensor {
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        Tensor::from_slice(values)
            .reshape(dims)
            .to_device(self.device)
            .to_kind(self.kind)
    }

    fn need(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let values = self.weights.need(name, shape)?;
        Ok(self.tensor(shape, &values))
    }

    /// Block `layer`'s linear map `m`, checked against the shape
    /// [`Matrix::shape`] gives it, with its bias
    /// `[out]` where [`Matrix::has_bias`] says
    /// the model has one (as candle's loader).
    fn linear(&mut self, layer: usize, m: Matrix, c: &ModelConfig) -> Result<Linear, ModelError> {
        let stem = format!("blk.{layer}.{}", m.gguf_stem());
        let (out, inp) = m.shape(c);
        Ok(Linear {
            weight: self.need(&format!("{stem}.weight"), &[out, inp])?,
            bias: match m.has_bias(c) {
                true => Some(self.need(&format!("{stem}.bias"), &[out])?),
                false => None,
            },
        })
    }
}

impl Reader<'_> {
    /// Block `layer`'s MLP: dense, or the router and experts' stacks of
    /// a mixture.
    fn ffn(&mut self, layer: usize, c: &ModelConfig) -> Result<Ffn, ModelError> {
        let activation = c.block.activation;
        let Some(e) = &c.experts else {
            return Ok(Ffn::Dense(Mlp {
                gate: self.linear(layer, Matrix::FfnGate, c)?,
                up: self.linear(layer, Matrix::FfnUp, c)?,
                down: self.linear(layer, Matrix::FfnDown, c)?,
                activation,
            }));
        };
        let name = |stem: &str| format!("blk.{layer}.{stem}.weight");
        Ok(Ffn::Experts(Moe {
            router: Linear {
                weight: self.need(&name("ffn_gate_inp"), &[e.count, c.hidden])?,
                bias: None,
            },
            gate: self.need(&name("ffn_gate_exps"), &[e.count, e.ffn, c.hidden])?,
            up: self.need(&name("ffn_up_exps"), &[e.count, e.ffn, c.hidden])?,
            down: self.need(&name("ffn_down_exps"), &[e.count, c.hidden, e.ffn])?,
            routing: e.clone(),
            activation,
        }))
    }
}

impl TorchLlama {
    /// Loads a GGUF file's weights (dequantized to f32) onto `device`, in
    /// f32: what the forward tests compare with candle's.
    pub fn from_gguf(path: &Path, device: Device) -> Result<TorchLlama, ModelError> {
        let assets = ModelAssets::load(path)?;
        TorchLlama::load(&assets, device, Kind::Float)
    }

    /// Loads the weights of the model `assets` describe (a GGUF file,
    /// dequantized; or an HF folder's safetensors) onto `device` as `kind`
    /// (a float kind; norms and softmax are computed in f32 whatever it is).
    pub fn load(
        assets: &ModelAssets,
        device: Device,
        kind: Kind,
    ) -> Result<TorchLlama, ModelError> {
        let weights = HostWeights::open(assets)?;
        let hf = weights.is_hf();
        let dequantized = weights.stored_types();
        let mut r = Reader {
            weights,
            device,
            kind,
        };
        let config = assets.config.clone();
        let model = tch::no_grad(|| TorchLlama::read(config, &mut r, device, kind));
        // An HF folder's tensors are named as HF names them.
        let mut model = model.map_err(|e| if hf { e.hf_names(&assets.config) } else { e })?;
        model.dequantized = dequantized;
        Ok(model)
    }

    fn read(
        config: ModelConfig,
        r: &mut Reader<'_>,
        device: Device,
        kind: Kind,
    ) -> Result<TorchLlama, ModelError> {
        let c = &config;
        let embed = r.need("token_embd.weight", &[c.vocab, c.hidden])?;
        let norm = |scale: Tensor| RmsNorm {
            scale,
            eps: c.rms_eps,
        };
        let layout = &c.block;
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            // The norms the family has, as `ModelConfig::norm_width` lists them.
            let mut norm_if = |part: &str| -> Result<_, ModelError> {
                Ok(match c.norm_width(part) {
                    Some(width) => Some(norm(r.need(&format!("blk.{i}.{part}.weight"), &[width])?)),
                    None => None,
                })
            };
            let (attn_norm, mlp_norm) = (norm_if("attn_norm")?, norm_if("ffn_norm")?);
            let (post_attn_norm, post_mlp_norm) =
                (norm_if("post_attention_norm")?, norm_if("post_ffw_norm")?);
            let (q_norm, k_norm) = (norm_if("attn_q_norm")?, norm_if("attn_k_norm")?);
            blocks.push(Block {
                attn_norm,
                attn: Attention {
                    q: r.linear(i, Matrix::AttnQ, c)?,
                    k: r.linear(i, Matrix::AttnK, c)?,
                    v: r.linear(i, Matrix::AttnV, c)?,
                    o: r.linear(i, Matrix::AttnOutput, c)?,
                    q_norm,
                    k_norm,
                    qk_norm_whole: layout.qk_norm == Some(QkNorm::Whole),
                    scale: f64::from(c.attn_scale()),
                    softcap: layout.attn_softcap,
                    window: c.windows[i],
                    rope: usize::from(c.local_rope(i)),
                },
                post_attn_norm,
                mlp_norm,
                ffn: r.ffn(i, c)?,
                post_mlp_norm,
            });
        }
        let final_norm = norm(r.need("output_norm.weight", &[c.hidden])?);
        let output = Linear {
            weight: match c.tied_embeddings {
                true => embed.shallow_clone(),
                false => r.need("output.weight", &[c.vocab, c.hidden])?,
            },
            bias: None,
        };
        let kinds = 1 + usize::from((0..c.layers).any(|i| c.local_rope(i)));
        let ropes = c
            .rope_sets(kinds)
            .into_iter()
            .map(|sets| {
                sets.map(|r| {
                    let f = Tensor::from_slice(&r.inv_freqs).to_device(device);
                    (f, f64::from(r.magnitude))
                })
            })
            .collect();
        Ok(TorchLlama {
            config,
            embed,
            blocks,
            norm: final_norm,
            output,
            ropes,
            device,
            kind,
            dequantized: None,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// How the file stored the weights that were dequantized at load.
    pub fn dequantized(&self) -> Option<&str> {
        self.dequantized.as_deref()
    }

    /// The weights' and activations' dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// An empty KV cache of one row for this model.
    pub fn new_cache(&self) -> TorchCache {
        TorchCache {
            layers: Vec::new(),
            capacity: 0,
            layout: Layout::new(1),
            shape: KvShape {
                layers: self.config.layers,
                kv_heads: self.config.kv_heads as i64,
                head_dim: self.config.head_dim as i64,
                kind: self.kind,
                device: self.device,
            },
        }
    }

    /// Logits at every position of `ids` run from position 0, `[n, vocab]`.
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor, ModelError> {
        self.forward_cached(ids, &mut self.new_cache())
    }

    /// Logits at every position of `ids` run after the positions `cache`
    /// holds, `[n, vocab]`; their keys and values are appended to it.
    pub fn forward_cached(
        &self,
        ids: &[u32],
        cache: &mut TorchCache,
    ) -> Result<Tensor, ModelError> {
        Ok(LibModel::run(self, ids, cache, &mut NoHook, 0)?.0)
    }

    /// Runs `ids` after the positions `cache` (one row) holds, calling
    /// `hook` after every block; the f32 logits from position `from` of
    /// the pass on (`[n - from, vocab]`).
    pub fn run(
        &self,
        ids: &[u32],
        cache: &mut TorchCache,
        hook: &mut dyn BlockHook<Tensor>,
        from: usize,
    ) -> Result<(Tensor, PassTiming), ModelError> {
        LibModel::run(self, ids, cache, hook, from)
    }

    /// One ragged pass over the rows of `cache` ([`LibModel::run_batch`]).
    /// Token ids outside the vocabulary and a hook's tensor of the wrong
    /// shape are refused, never handed to libtorch (whose errors would be
    /// panics in `tch`).
    pub fn run_batch(
        &self,
        cache: &mut TorchCache,
        rows: &mut [LibRow<'_, Tensor>],
    ) -> Result<RowOutputs<Tensor>, ModelError> {
        let plan = plan_rows(&cache.layout, &self.config, rows)?;
        if plan.width == 0 {
            return Ok(rows.iter().map(|_| None).collect());
        }
        cache.reserve(plan.keys());
        // The keys and values are written past the columns the layout
        // records: a failed pass leaves them unread.
        let out = tch::no_grad(|| self.run_planned(&plan, cache, rows))?;
        cache.layout.commit(&plan);
        Ok(out)
    }

    /// Each rotary kind's `(cos, sin)` at the plan's positions, `[rows, 1,
    /// width, rotary / 2]` (broadcast over heads), scaled by LongRoPE's
    /// magnitude where it has one; each row at its own set's frequencies.
    fn rope_angles(&self, plan: &PassPlan<'_>) -> Vec<(Tensor, Tensor)> {
        let (b, w) = (plan.rows() as i64, plan.width as i64);
        let positions = Tensor::from_slice(&plan.positions)
            .to_device(self.device)
            .to_kind(Kind::Float)
            .view([b, w, 1]);
        self.ropes
            .iter()
            .map(|sets| {
                let (angles, magnitude) = match plan.one_rope_set() {
                    Some(set) => {
                        let (f, m) = &sets[set];
                        (&positions * f.view([1, 1, -1]), Tensor::from(*m))
                    }
                    None => {
                        let f: Vec<Tensor> = plan
                            .rope_sets
                            .iter()
                            .map(|&s| sets[s].0.shallow_clone())
                            .collect();
                        let m: Vec<f64> = plan.rope_sets.iter().map(|&s| sets[s].1).collect();
                        let m = Tensor::from_slice(&m)
                            .to_device(self.device)
                            .view([b, 1, 1]);
                        (&positions * Tensor::stack(&f, 0).unsqueeze(1), m)
                    }
                };
                let magnitude = magnitude.to_device(self.device).to_kind(Kind::Float);
                let turn = |t: Tensor| (t * &magnitude).to_kind(self.kind).unsqueeze(1);
                (turn(angles.cos()), turn(angles.sin()))
            })
            .collect()
    }

    /// Which keys each query attends to in a layer of `window`, `[rows,
    /// 1, width, keys]` (`true`: attends), or causal, or every key.
    fn attention_mask(&self, layout: &Layout, plan: &PassPlan<'_>, window: Option<usize>) -> Mask {
        match layout.attend(plan, window) {
            Attend::All => Mask::All,
            Attend::Causal => Mask::Causal,
            Attend::Masked(m) => {
                let (b, w, k) = (plan.rows() as i64, plan.width as i64, plan.keys() as i64);
                Mask::Keys(
                    Tensor::from_slice(&m)
                        .to_device(self.device)
                        .view([b, 1, w, k]),
                )
            }
        }
    }

    fn run_planned(
        &self,
        plan: &PassPlan<'_>,
        cache: &mut TorchCache,
        rows: &mut [LibRow<'_, Tensor>],
    ) -> Result<RowOutputs<Tensor>, ModelError> {
        let c = &self.config;
        let (b, w) = (plan.rows() as i64, plan.width as i64);
        let hidden = c.hidden as i64;
        let tokens: Vec<i64> = plan.tokens().into_iter().map(i64::from).collect();
        let tokens = Tensor::from_slice(&tokens).to_device(self.device);
        let mut x = self.embed.index_select(0, &tokens).view([b, w, hidden]);
        if let Some(scale) = c.block.embed_scale {
            x *= scale as f64;
        }
        let ropes = self.rope_angles(plan);
        let mut masks = std::collections::BTreeMap::new();
        for window in &c.windows {
            masks
                .entry(*window)
                .or_insert_with(|| self.attention_mask(&cache.layout, plan, *window));
        }
        let mut timings = vec![PassTiming::default(); plan.rows()];
        let start = plan.start as i64;
        for (layer, (block, slot)) in self.blocks.iter().zip(cache.layers.iter_mut()).enumerate() {
            let a = &block.attn;
            let (cos, sin) = &ropes[a.rope];
            let attn_out = a.forward(
                &norm_opt(&block.attn_norm, x.shallow_clone()),
                c,
                (cos, sin),
                &masks[&a.window],
                slot,
                start,
            );
            let attn_out = norm_opt(&block.post_attn_norm, attn_out);
            x = &x + &attn_out;
            let h = norm_opt(&block.mlp_norm, x.shallow_clone());
            let (mlp_out, router) = match &block.ffn {
                Ffn::Dense(mlp) => (mlp.forward(&h), None),
                Ffn::Experts(moe) => {
                    let (out, probs) = moe.forward(&h.view([b * w, hidden]))?;
                    (out.view([b, w, hidden]), Some(probs))
                }
            };
            let mlp_out = norm_opt(&block.post_mlp_norm, mlp_out);
            x = &x + &mlp_out;
            for (j, (row, timing)) in rows.iter_mut().zip(&mut timings).enumerate() {
                let n = plan.ids[j].len() as i64;
                if n == 0 {
                    continue;
                }
                let started = std::time::Instant::now();
                let part = |t: &Tensor| t.get(j as i64).narrow(0, 0, n);
                let router = router.as_ref().map(|r| r.narrow(0, j as i64 * w, n));
                let resid = part(&x);
                let view = BlockView {
                    layer,
                    offset: plan.past[j],
                    attn_out: &part(&attn_out),
                    mlp_out: &part(&mlp_out),
                    router: router.as_ref(),
                };
                if let Some(changed) = row.hook.after_block(&view, &resid)? {
                    if changed.size() != resid.size() {
                        return Err(ModelError::HookShape {
                            layer,
                            found: changed.size().iter().map(|&d| d as usize).collect(),
                            expected: resid.size().iter().map(|&d| d as usize).collect(),
                        });
                    }
                    if changed.kind() != resid.kind() {
                        return Err(ModelError::HookDtype {
                            layer,
                            found: format!("{:?}", changed.kind()),
                            expected: format!("{:?}", resid.kind()),
                        });
                    }
                    match b == 1 && n == w {
                        true => x = changed.unsqueeze(0),
                        // Only this row's tokens change, in place: `x` is
                        // the sum above, and what other rows' hooks kept
                        // of it are their own rows.
                        false => x
                            .narrow(0, j as i64, 1)
                            .narrow(1, 0, n)
                            .copy_(&changed.unsqueeze(0)),
                    }
                }
                timing.hook_ns += started.elapsed().as_nanos() as u64;
            }
        }
        // The rows the logits are asked at, gathered into one projection.
        let started = std::time::Instant::now();
        let (picked, counts) = plan.logit_rows();
        let picked: Vec<i64> = picked.into_iter().map(|i| i as i64).collect();
        let x = x.view([b * w, hidden]);
        let x = match picked.len() as i64 == b * w {
            true => x,
            false => x.index_select(0, &Tensor::from_slice(&picked).to_device(self.device)),
        };
        let logits = self
            .output
            .forward(&self.norm.forward(&x))
            .to_kind(Kind::Float);
        let logits = match c.block.final_softcap {
            Some(cap) => softcap(&logits, cap),
            None => logits,
        };
        let lm_head_ns = started.elapsed().as_nanos() as u64;
        split_logits(&counts, &timings, lm_head_ns, |at, n| {
            Ok(logits.narrow(0, at as i64, n as i64))
        })
    }

    /// The matrix GGUF calls `blk.{layer}.{stem}.weight`, `[out, in]`
    /// (a mixture's experts' stacked by rows, `[experts · out, in]`).
    pub fn weight(&self, layer: usize, m: crate::model::Matrix) -> Result<Tensor, ModelError> {
        let b = self.blocks.get(layer).ok_or(ModelError::LayerOutOfRange {
            layer,
            count: self.blocks.len(),
        })?;
        Ok(b.matrix(m))
    }

    /// Every weight by its GGUF name (`output.weight` only when the
    /// embeddings are not tied), for export.
    pub fn named_weights(&self) -> Vec<(String, &Tensor)> {
        let mut out = vec![
            ("token_embd.weight".to_owned(), &self.embed),
            ("output_norm.weight".to_owned(), &self.norm.scale),
        ];
        if !self.config.tied_embeddings {
            out.push(("output.weight".to_owned(), &self.output.weight));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            for (stem, norm) in [
                ("attn_norm", &b.attn_norm),
                ("attn_q_norm", &b.attn.q_norm),
                ("attn_k_norm", &b.attn.k_norm),
                ("post_attention_norm", &b.post_attn_norm),
                ("ffn_norm", &b.mlp_norm),
                ("post_ffw_norm", &b.post_mlp_norm),
            ] {
                if let Some(n) = norm {
                    out.push((format!("blk.{i}.{stem}.weight"), &n.scale));
                }
            }
            let a = &b.attn;
            let mut linears = vec![
                (Matrix::AttnQ.gguf_stem(), &a.q),
                (Matrix::AttnK.gguf_stem(), &a.k),
                (Matrix::AttnV.gguf_stem(), &a.v),
                (Matrix::AttnOutput.gguf_stem(), &a.o),
            ];
            match &b.ffn {
                Ffn::Dense(f) => linears.extend([
                    (Matrix::FfnGate.gguf_stem(), &f.gate),
                    (Matrix::FfnUp.gguf_stem(), &f.up),
                    (Matrix::FfnDown.gguf_stem(), &f.down),
                ]),
                // The router, and the experts' stacks as GGUF holds them.
                Ffn::Experts(moe) => {
                    linears.push(("ffn_gate_inp", &moe.router));
                    for (stem, stack) in [
                        ("ffn_gate_exps", &moe.gate),
                        ("ffn_up_exps", &moe.up),
                        ("ffn_down_exps", &moe.down),
                    ] {
                        out.push((format!("blk.{i}.{stem}.weight"), stack));
                    }
                }
            }
            for (stem, lin) in linears {
                out.push((format!("blk.{i}.{stem}.weight"), &lin.weight));
                if let Some(bias) = &lin.bias {
                    out.push((format!("blk.{i}.{stem}.bias"), bias));
                }
            }
        }
        out
    }

    /// Removes the unit direction `r` (`[hidden]`) from the output of
    /// `m` at `layer` (`W ← W − r(rᵀW)`, in f32, written in place; a
    /// mixture's every expert's down matrix, which removes it from their
    /// weighted sum exactly); the Frobenius norm of the change.
    pub fn orthogonalize(
        &mut self,
        r: &Tensor,
        layer: usize,
        m: crate::model::Matrix,
    ) -> Result<f32, ModelError> {
        use crate::model::Matrix as M;
        if !matches!(m, M::AttnOutput | M::FfnDown) {
            return Err(ModelError::NotResidualWriter { matrix: m });
        }
        let count = self.blocks.len();
        let b = self
            .blocks
            .get_mut(layer)
            .ok_or(ModelError::LayerOutOfRange { layer, count })?;
        let w = match (m, &mut b.ffn) {
            (M::AttnOutput, _) => &mut b.attn.o.weight,
            (_, Ffn::Dense(f)) => &mut f.down.weight,
            (_, Ffn::Experts(moe)) => &mut moe.down,
        };
        tch::no_grad(|| {
            let r = r
                .to_device(w.device())
                .to_kind(Kind::Float)
                .reshape([-1, 1]);
            let wf = w.to_kind(Kind::Float);
            // `[hidden, in]`, or `[experts, hidden, in]` broadcast.
            let change = r.matmul(&r.transpose(0, 1).matmul(&wf));
            let norm = change.norm().double_value(&[]) as f32;
            *w = (wf - change).to_kind(w.kind());
            Ok(norm)
        })
    }
}

impl LibModel for TorchLlama {
    const EXECUTOR: &'static str = "torch";
    const TITLE: &'static str = "Torch";
    type Ops = super::intervene::Torch;
    type Cache = TorchCache;

    fn check_device(device: DeviceSpec) -> Result<(), String> {
        super::open_device(device).map(drop)
    }

    fn load(spec: &ModelSpec, assets: &ModelAssets) -> Result<Self, ExecutorError> {
        let device = super::open_device(spec.device).map_err(ExecutorError::Device)?;
        // Quantized weights have no libtorch kernels here: they are
        // dequantized whatever `spec.weights` asks (the trace says so).
        let kind = match spec.dtype {
            Dtype::F32 => Kind::Float,
            Dtype::F16 => Kind::Half,
            Dtype::Bf16 => Kind::BFloat16,
        };
        Ok(TorchLlama::load(assets, device, kind)?)
    }

    fn device_kinds() -> Vec<DeviceKind> {
        let _ = super::cuda::load_torch_cuda();
        let mut kinds = vec![DeviceKind::Cpu];
        if tch::Cuda::is_available() {
            kinds.push(DeviceKind::Cuda);
        }
        if tch::utils::has_mps() {
            kinds.push(DeviceKind::Mps);
        }
        kinds
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn new_cache(&self) -> TorchCache {
        TorchLlama::new_cache(self)
    }

    fn run_batch(
        &self,
        cache: &mut TorchCache,
        rows: &mut [LibRow<'_, Tensor>],
    ) -> Result<RowOutputs<Tensor>, ModelError> {
        TorchLlama::run_batch(self, cache, rows)
    }

    fn weight(&self, layer: usize, m: Matrix) -> Result<Tensor, ModelError> {
        TorchLlama::weight(self, layer, m)
    }

    fn named_weights(&self) -> Result<Vec<(String, TensorOf<Self>)>, ModelError> {
        Ok(TorchLlama::named_weights(self)
            .into_iter()
            .map(|(name, t)| (name, t.shallow_clone()))
            .collect())
    }

    fn orthogonalize(&mut self, r: &[f32], layer: usize, m: Matrix) -> Result<f32, ModelError> {
        TorchLlama::orthogonalize(self, &Tensor::from_slice(r), layer, m)
    }

    fn add_to_weight(&mut self, layer: usize, m: Matrix, delta: &[f32]) -> Result<(), ModelError> {
        let count = self.blocks.len();
        let b = self
            .blocks
            .get_mut(layer)
            .ok_or(ModelError::LayerOutOfRange { layer, count })?;
        let a = &mut b.attn;
        let w = match (m, &mut b.ffn) {
            (Matrix::AttnQ, _) => &mut a.q.weight,
            (Matrix::AttnK, _) => &mut a.k.weight,
            (Matrix::AttnV, _) => &mut a.v.weight,
            (Matrix::AttnOutput, _) => &mut a.o.weight,
            (Matrix::FfnGate, Ffn::Dense(f)) => &mut f.gate.weight,
            (Matrix::FfnUp, Ffn::Dense(f)) => &mut f.up.weight,
            (Matrix::FfnDown, Ffn::Dense(f)) => &mut f.down.weight,
            (_, Ffn::Experts(_)) => return Err(ModelError::ExpertMatrix { matrix: m }),
        };
        let shape = w.size();
        if shape.iter().product::<i64>() != delta.len() as i64 {
            return Err(ModelError::ShapeMismatch {
                tensor: format!("blk.{layer}.{}.weight", m.gguf_stem()),
                found: vec![delta.len()],
                expected: shape.iter().map(|&d| d as usize).collect(),
                path: None,
            });
        }
        tch::no_grad(|| {
            let d = Tensor::from_slice(delta)
                .reshape(&shape)
                .to_device(w.device());
            *w = (w.to_kind(Kind::Float) + d).to_kind(w.kind());
        });
        Ok(())
    }

    fn kernel_note(&self) -> String {
        let mut note = format!(
            "libtorch {} ({:?}), {:?}",
            super::libtorch_version(),
            self.device,
            self.kind
        );
        if let Some(stored) = &self.dequantized {
            note.push_str(&format!("; GGUF {stored} weights dequantized at load"));
        }
        note
    }

    /// Keys and values are kept in the model's dtype.
    fn kv_note(&self) -> String {
        match self.kind {
            Kind::Half => Dtype::F16,
            Kind::BFloat16 => Dtype::Bf16,
            _ => Dtype::F32,
        }
        .name()
        .into()
    }

    /// On a GPU, waits for its queued work and reads its memory; nothing
    /// on the CPU.
    fn settle(&self) -> Settled {
        let Device::Cuda(i) = self.device else {
            return Settled::default();
        };
        let notes = match super::cuda::memory(i) {
            Some(m) => vec![
                ("device_memory_used_bytes", m.used.to_string()),
                ("device_memory_total_bytes", m.total.to_string()),
            ],
            None => vec![(
                "device_memory",
                "not measured: the CUDA runtime could not be opened".into(),
            )],
        };
        Settled {
            synchronised: true,
            notes,
        }
    }

    fn on_device(&self) -> bool {
        self.device != Device::Cpu
    }

    fn device_label(&self) -> Option<String> {
        match self.device {
            Device::Cuda(i) => super::cuda::name(i),
            _ => None,
        }
    }
}

/// Which keys a pass's queries attend to (see [`Attend`]).
enum Mask {
    All,
    Causal,
    /// `[rows, 1, width, keys]`, `true` where a query attends.
    Keys(Tensor),
}

impl Attention {
    /// Self-attention of `h` (`[rows, width, hidden]`) over the cached
    /// columns and its own, whose keys and values it writes to `slot` at
    /// columns `start..start + width`.
    fn forward(
        &self,
        h: &Tensor,
        c: &ModelConfig,
        (cos, sin): (&Tensor, &Tensor),
        mask: &Mask,
        slot: &mut (Tensor, Tensor),
        start: i64,
    ) -> Tensor {
        let (b, w) = (h.size()[0], h.size()[1]);
        let (d, heads, kvh) = (c.head_dim as i64, c.heads as i64, c.kv_heads as i64);
        // Q/K norms over the whole projection (before the split into
        // heads), or per head (after it).
        let whole = |norm: &Option<RmsNorm>, x: Tensor| match norm {
            Some(nm) if self.qk_norm_whole => nm.forward(&x),
            _ => x,
        };
        let per_head = |norm: &Option<RmsNorm>, x: Tensor| match norm {
            Some(nm) if !self.qk_norm_whole => nm.forward(&x),
            _ => x,
        };
        let q = whole(&self.q_norm, self.q.forward(h));
        let k = whole(&self.k_norm, self.k.forward(h));
        // [rows, width, heads, d] → [rows, heads, width, d]
        let q = per_head(&self.q_norm, q.view([b, w, heads, d])).transpose(1, 2);
        let k = per_head(&self.k_norm, k.view([b, w, kvh, d])).transpose(1, 2);
        let v = self.v.forward(h).view([b, w, kvh, d]).transpose(1, 2);
        let (q, k) = (
            rotate(&q, cos, sin, c.rope_style),
            rotate(&k, cos, sin, c.rope_style),
        );
        slot.0.narrow(2, start, w).copy_(&k);
        slot.1.narrow(2, start, w).copy_(&v);
        let keys = start + w;
        let (k, v) = (slot.0.narrow(2, 0, keys), slot.1.narrow(2, 0, keys));
        let out = match self.softcap {
            // libtorch's fused attention, grouped queries included.
            None => {
                let (mask, causal) = match mask {
                    Mask::All => (None, false),
                    Mask::Causal => (None, true),
                    Mask::Keys(m) => (Some(m), false),
                };
                Tensor::scaled_dot_product_attention(
                    &q, &k, &v, mask, 0.0, causal, self.scale, true,
                )
            }
            // A soft-cap has no fused kernel: the scores written out, the
            // `rep` query heads of a key/value head stacked against it.
            Some(cap) => {
                let rep = heads / kvh;
                let q = q.reshape([b, kvh, rep * w, d]);
                let scores = softcap(&(q.matmul(&k.transpose(2, 3)) * self.scale), cap)
                    .view([b, kvh, rep, w, keys]);
                let scores = match mask {
                    Mask::All => scores,
                    Mask::Causal => scores.masked_fill(
                        &Tensor::ones([w, keys], (Kind::Bool, h.device())).triu(keys - w + 1),
                        f64::NEG_INFINITY,
                    ),
                    Mask::Keys(m) => {
                        scores.masked_fill(&m.logical_not().unsqueeze(1), f64::NEG_INFINITY)
                    }
                };
                scores
                    .softmax(-1, Kind::Float)
                    .to_kind(v.kind())
                    .view([b, kvh, rep * w, keys])
                    .matmul(&v)
                    .view([b, heads, w, d])
            }
        };
        self.o
            .forward(&out.transpose(1, 2).reshape([b, w, heads * d]))
    }
}

/// What a model's keys and values are made of, to allocate a cache.
#[derive(Debug, Clone, Copy)]
struct KvShape {
    layers: usize,
    kv_heads: i64,
    head_dim: i64,
    kind: Kind,
    device: Device,
}

/// Keys and values of every block, `[rows, kv_heads, capacity, head_dim]`
/// each, preallocated and written in place (grown by doubling); which
/// column holds which position of which row is the [`Layout`]'s.
pub struct TorchCache {
    /// Empty until the first pass or stacking allocates them.
    layers: Vec<(Tensor, Tensor)>,
    capacity: usize,
    layout: Layout,
    shape: KvShape,
}

impl TorchCache {
    fn zeros(&self, rows: usize, capacity: usize) -> Vec<(Tensor, Tensor)> {
        let s = self.shape;
        let dims = [rows as i64, s.kv_heads, capacity as i64, s.head_dim];
        let zeros = || Tensor::zeros(dims, (s.kind, s.device));
        (0..s.layers).map(|_| (zeros(), zeros())).collect()
    }

    /// Room for `needed` columns in every row, the columns written kept.
    fn reserve(&mut self, needed: usize) {
        let capacity = grown_capacity(self.capacity, needed);
        if capacity == self.capacity && !self.layers.is_empty() {
            return;
        }
        let used = self.layout.used as i64;
        let mut grown = self.zeros(self.layout.rows.len(), capacity);
        if used > 0 {
            for ((k, v), (old_k, old_v)) in grown.iter_mut().zip(&self.layers) {
                k.narrow(2, 0, used).copy_(&old_k.narrow(2, 0, used));
                v.narrow(2, 0, used).copy_(&old_v.narrow(2, 0, used));
            }
        }
        self.layers = grown;
        self.capacity = capacity;
    }
}

impl LibCache for TorchCache {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn layout_mut(&mut self) -> &mut Layout {
        &mut self.layout
    }

    /// A copy of the columns held (libtorch writes in place: sharing
    /// tensors would let one cache write the other's).
    fn fork(&self) -> Result<TorchCache, ModelError> {
        let used = self.layout.used as i64;
        let layers = match used {
            0 => Vec::new(),
            _ => self
                .layers
                .iter()
                .map(|(k, v)| (k.narrow(2, 0, used).copy(), v.narrow(2, 0, used).copy()))
                .collect(),
        };
        Ok(TorchCache {
            layers,
            capacity: self.layout.used,
            layout: self.layout.clone(),
            shape: self.shape,
        })
    }

    fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|(k, v)| {
                (k.numel() * k.kind().elt_size_in_bytes()
                    + v.numel() * v.kind().elt_size_in_bytes()) as u64
            })
            .sum()
    }

    fn stack(rows: Vec<TorchCache>, extra: usize) -> Result<TorchCache, ModelError> {
        let first = rows.first().expect("a batch of at least one row");
        let layout = Layout::stack(&rows.iter().map(|r| &r.layout).collect::<Vec<_>>());
        let mut cache = TorchCache {
            layers: Vec::new(),
            capacity: 0,
            layout,
            shape: first.shape,
        };
        let needed = cache.layout.used + extra;
        if needed == 0 {
            return Ok(cache);
        }
        cache.capacity = needed.div_ceil(64) * 64;
        cache.layers = cache.zeros(rows.len(), cache.capacity);
        tch::no_grad(|| {
            for (j, row) in rows.iter().enumerate() {
                let n = row.layout.used as i64;
                if n == 0 {
                    continue;
                }
                for ((k, v), (rk, rv)) in cache.layers.iter_mut().zip(&row.layers) {
                    k.narrow(0, j as i64, 1)
                        .narrow(2, 0, n)
                        .copy_(&rk.narrow(2, 0, n));
                    v.narrow(0, j as i64, 1)
                        .narrow(2, 0, n)
                        .copy_(&rv.narrow(2, 0, n));
                }
            }
        });
        Ok(cache)
    }

    /// A row whose positions sit in its first columns keeps a view of
    /// them (its capacity ends there, so it grows into a tensor of its
    /// own); another row's are gathered.
    fn unstack(self) -> Result<Vec<TorchCache>, ModelError> {
        let mut out = Vec::with_capacity(self.layout.rows.len());
        for (j, row) in self.layout.rows.iter().enumerate() {
            let n = row.len() as i64;
            let part = |t: &Tensor| {
                let t = t.narrow(0, j as i64, 1);
                match row.is_compact() {
                    true => t.narrow(2, 0, n),
                    false => {
                        let cols: Vec<i64> = row.cols.iter().map(|&c| c as i64).collect();
                        t.index_select(2, &Tensor::from_slice(&cols).to_device(t.device()))
                    }
                }
            };
            let layers = match n {
                0 => Vec::new(),
                _ => self
                    .layers
                    .iter()
                    .map(|(k, v)| (part(k), part(v)))
                    .collect(),
            };
            out.push(TorchCache {
                layers,
                capacity: row.len(),
                layout: self.layout.row(j),
                shape: self.shape,
            });
        }
        Ok(out)
    }
}

/// Rotary embedding of `x` (`[rows, heads, width, d]`) at the angles
/// `cos`/`sin` (`[rows, 1, width, rotary / 2]`), pairing dimensions as
/// `style` says.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Tensor {
    let d = *x.size().last().expect("a head dimension");
    // A partial rotary embedding turns the first dimensions only.
    let rotary = 2 * *cos.size().last().expect("angles per pair");
    if rotary < d {
        let turned = rotate(&x.narrow(-1, 0, rotary), cos, sin, style);
        return Tensor::cat(&[turned, x.narrow(-1, rotary, d - rotary)], -1);
    }
    let half = d / 2;
    match style {
        RopeStyle::Interleaved => {
            // Pairs (2i, 2i + 1).
            let pairs = x.unflatten(-1, [half, 2]);
            let (a, b) = (pairs.select(-1, 0), pairs.select(-1, 1));
            let ra = &a * cos - &b * sin;
            let rb = &a * sin + &b * cos;
            Tensor::stack(&[ra, rb], -1).flatten(-2, -1)
        }
        RopeStyle::Half => {
            // Pairs (i, i + d/2).
            let (a, b) = (x.narrow(-1, 0, half), x.narrow(-1, half, half));
            let ra = &a * cos - &b * sin;
            let rb = &a * sin + &b * cos;
            Tensor::cat(&[ra, rb], -1)
        }
    }
}
