//! The decoder forward pass in MLX (through mlx-rs), from the same model
//! description as candle's and libtorch's (`ModelConfig` with its family's
//! `BlockLayout`, the GGUF tensor names, the shared [`ModelAssets`]), one
//! small struct per part.
//! Weights are read as f32 (a GGUF file dequantized, or an HF folder's
//! safetensors through the same `HfWeights` as candle's); MLX's fused
//! RMSNorm, rotary embedding and attention do the rest.
//!
//! MLX evaluates lazily; a pass evaluates the residual stream after every
//! block, so a block's time is its own and a hook sees computed values,
//! and it evaluates under the lock every MLX evaluation in vauban takes
//! ([`super::evaluating`]).

use std::time::Instant;

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp, TryIndexOp};

use super::weights::{self, Linear, Matrix, Reader};
use crate::executor::DeviceSpec;
use crate::executor::kv_layout::{Attend, Layout, PassPlan, grown_capacity};
pub use crate::executor::tensor_lib::{BlockHook, BlockView, NoHook, PassTiming};
use crate::executor::tensor_lib::{
    LibCache, LibModel, LibRow, RowOutputs, Settled, plan_rows, split_logits,
};
use crate::executor::{ExecutorError, ModelSpec};
use crate::model::assets::ModelAssets;
use crate::model::config::{Activation, Experts, ModelConfig, QkNorm, RopeStyle};
use crate::model::routing::Routing;
use crate::model::{Dtype, Matrix as ModelMatrix, ModelError, WeightMode};
use crate::trace::DeviceKind;

impl From<Exception> for ModelError {
    fn from(e: Exception) -> Self {
        ModelError::Compute(Box::new(e))
    }
}

/// RMSNorm with a learned scale.
struct RmsNorm {
    scale: Array,
    eps: f32,
}

impl RmsNorm {
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        fast::rms_norm(x, Some(&self.scale), self.eps)
    }
}

/// `x` through the norm where the block has one.
fn norm_opt(norm: &Option<RmsNorm>, x: Array) -> Result<Array, Exception> {
    match norm {
        Some(n) => n.forward(&x),
        None => Ok(x),
    }
}

/// `v` as a scalar of `like`'s dtype (an f32 scalar would widen a half
/// precision array to f32).
fn scalar(v: f32, like: &Array) -> Result<Array, Exception> {
    Array::from_f32(v).as_dtype(like.dtype())
}

/// `cap · tanh(x / cap)`.
fn softcap(x: &Array, cap: f32) -> Result<Array, Exception> {
    let cap = scalar(cap, x)?;
    mlx_rs::ops::tanh(x.divide(&cap)?)?.multiply(&cap)
}

/// Grouped-query self-attention with rotary positions.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// RMSNorm of the queries and keys before RoPE.
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    /// Whether those norms span the whole projection (OLMo 2) rather than
    /// each head.
    qk_norm_whole: bool,
    /// What multiplies `q·k`.
    scale: f32,
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
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let gate = self.gate.forward(x)?;
        let gate = match self.activation {
            Activation::Silu => mlx_rs::nn::silu(gate)?,
            Activation::GeluTanh => mlx_rs::nn::gelu_approximate(gate)?,
        };
        self.down.forward(&gate.multiply(self.up.forward(x)?)?)
    }
}

/// A mixture of experts, as candle's: the router's softmax over every
/// expert, the best ones per token (chosen by [`Routing`], the same for
/// every backend), their outputs weighted and summed.
struct Moe {
    router: Linear,
    experts: Vec<Mlp>,
    routing: Experts,
}

impl Moe {
    /// The output for `x` (`[n, hidden]`) and the router's probabilities
    /// (`[n, experts]`, f32). The routing is decided on the host (which
    /// evaluates the router); each expert then runs its tokens alone.
    fn forward(&self, x: &Array) -> Result<(Array, Array), Exception> {
        let (n, hidden) = (x.shape()[0], x.shape()[1]);
        let probs = mlx_rs::ops::softmax_axis(self.router.forward(x)?, -1, true)?;
        let routing = Routing::of(&super::intervene::values(&probs)?, &self.routing);
        let index = |v: Vec<i32>| Array::from_slice(&v, &[v.len() as i32]);
        let mut outputs = Vec::new();
        for (expert, rows) in self.experts.iter().zip(&routing.rows) {
            if rows.is_empty() {
                continue;
            }
            let picked = x.take_axis(index(rows.iter().map(|&r| r as i32).collect()), 0)?;
            outputs.push(expert.forward(&picked)?);
        }
        // Each token's picks from the experts' outputs, weighted and summed.
        let (picks, weight) = routing.gather();
        let used = self.routing.used as i32;
        let weight = Array::from_slice(&weight, &[n, used, 1]).as_dtype(x.dtype())?;
        let out = mlx_rs::ops::concatenate(&outputs, 0)?
            .take_axis(index(picks.into_iter().map(|i| i as i32).collect()), 0)?
            .reshape(&[n, used, hidden])?
            .multiply(&weight)?
            .sum_axis(1, false)?;
        Ok((out, probs))
    }
}

/// A block's MLP: one, or a mixture of experts.
enum Ffn {
    Dense(Mlp),
    Experts(Moe),
}

/// One transformer block: attention and MLP, each after its norm (where
/// the family has one) and through its post-norm (where it has one).
struct Block {
    attn_norm: Option<RmsNorm>,
    attn: Attention,
    post_attn_norm: Option<RmsNorm>,
    mlp_norm: Option<RmsNorm>,
    ffn: Ffn,
    post_mlp_norm: Option<RmsNorm>,
}

impl Block {
    /// The block's norms by GGUF stem, those it has.
    fn norms(&self) -> impl Iterator<Item = (&'static str, &RmsNorm)> {
        [
            ("attn_norm", &self.attn_norm),
            ("attn_q_norm", &self.attn.q_norm),
            ("attn_k_norm", &self.attn.k_norm),
            ("post_attention_norm", &self.post_attn_norm),
            ("ffn_norm", &self.mlp_norm),
            ("post_ffw_norm", &self.post_mlp_norm),
        ]
        .into_iter()
        .filter_map(|(stem, n)| n.as_ref().map(|n| (stem, n)))
    }
}

impl Block {
    /// The block's linear maps: attention's in [`ModelMatrix::ALL`]'s
    /// order, then the MLP's (a mixture's router, then each expert's).
    fn linears(&self) -> Vec<&Linear> {
        let a = &self.attn;
        let mut out = vec![&a.q, &a.k, &a.v, &a.o];
        match &self.ffn {
            Ffn::Dense(m) => out.extend([&m.gate, &m.up, &m.down]),
            Ffn::Experts(moe) => {
                out.push(&moe.router);
                out.extend(moe.experts.iter().flat_map(|m| [&m.gate, &m.up, &m.down]));
            }
        }
        out
    }

    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let a = &mut self.attn;
        let mut out = vec![&mut a.q, &mut a.k, &mut a.v, &mut a.o];
        match &mut self.ffn {
            Ffn::Dense(m) => out.extend([&mut m.gate, &mut m.up, &mut m.down]),
            Ffn::Experts(moe) => {
                out.push(&mut moe.router);
                for m in &mut moe.experts {
                    out.extend([&mut m.gate, &mut m.up, &mut m.down]);
                }
            }
        }
        out
    }

    /// The MLP's matrix `m` of every expert that has one (one for a
    /// dense MLP), in expert order.
    fn ffn_matrices(&self, m: ModelMatrix) -> Vec<&Matrix> {
        fn pick(f: &Mlp, m: ModelMatrix) -> &Matrix {
            match m {
                ModelMatrix::FfnGate => &f.gate.weight,
                ModelMatrix::FfnUp => &f.up.weight,
                _ => &f.down.weight,
            }
        }
        match &self.ffn {
            Ffn::Dense(f) => vec![pick(f, m)],
            Ffn::Experts(moe) => moe.experts.iter().map(|f| pick(f, m)).collect(),
        }
    }
}

/// A llama-family model in MLX.
pub struct MlxLlama {
    config: ModelConfig,
    /// `[vocab, hidden]`; the output matrix too when the embeddings are tied.
    embed: Matrix,
    blocks: Vec<Block>,
    norm: RmsNorm,
    output: Linear,
    /// Each kind of rotary embedding the layers take (the global one, then
    /// the sliding layers' own base where they have one: Gemma 3), in
    /// LongRoPE's short and long sets (`ModelConfig::rope_set` picks one a
    /// pass): its frequencies as MLX takes them (`1 / inv_freq` per pair)
    /// and, where LongRoPE scales cos and sin, what multiplies each
    /// dimension of a head once rotated.
    ropes: Vec<[(Array, Option<Array>); 2]>,
    /// How the file stored the weights read as f32 (a GGUF's `Q4_1/Q8_0`).
    dequantized: Option<String>,
    /// How the matrices kept packed are quantized (`4-bit, groups of 64`).
    packed: Option<String>,
    /// Whether MLX's default device is the GPU (Metal) rather than the CPU.
    on_gpu: bool,
    /// The dtype of the weights, activations and KV cache (norms and
    /// softmax accumulate in f32 inside MLX's kernels; logits are f32).
    dtype: mlx_rs::Dtype,
}

/// Keys and values of every block, `[rows, kv_heads, capacity,
/// head_dim]` each, preallocated and written a slice at a time (grown by
/// doubling); which column holds which position of which row is the
/// [`Layout`]'s. MLX arrays are values: a write makes a new array (MLX
/// reuses the old one's memory when nothing else holds it).
pub struct MlxCache {
    /// Empty until the first pass or stacking allocates them.
    layers: Vec<(Array, Array)>,
    capacity: usize,
    layout: Layout,
    shape: KvShape,
}

/// What a model's keys and values are made of, to allocate a cache.
#[derive(Debug, Clone, Copy)]
struct KvShape {
    layers: usize,
    kv_heads: i32,
    head_dim: i32,
    dtype: mlx_rs::Dtype,
}

/// The indices `from..to`, as an index array.
fn span(from: usize, to: usize) -> Array {
    let idx: Vec<i32> = (from as i32..to as i32).collect();
    Array::from_slice(&idx, &[idx.len() as i32])
}

impl MlxCache {
    fn zeros(&self, rows: usize, capacity: usize) -> Result<Vec<(Array, Array)>, Exception> {
        let s = self.shape;
        let dims = [rows as i32, s.kv_heads, capacity as i32, s.head_dim];
        let zeros = || mlx_rs::ops::zeros_dtype(&dims, s.dtype);
        (0..s.layers).map(|_| Ok((zeros()?, zeros()?))).collect()
    }

    /// Room for `needed` columns in every row, the columns written kept.
    fn reserve(&mut self, needed: usize) -> Result<(), Exception> {
        let capacity = grown_capacity(self.capacity, needed);
        if capacity == self.capacity && !self.layers.is_empty() {
            return Ok(());
        }
        let used = self.layout.used as i32;
        let mut grown = self.zeros(self.layout.rows.len(), capacity)?;
        if used > 0 {
            for ((k, v), (old_k, old_v)) in grown.iter_mut().zip(&self.layers) {
                k.try_index_mut((.., .., 0..used), old_k.index((.., .., 0..used)))?;
                v.try_index_mut((.., .., 0..used), old_v.index((.., .., 0..used)))?;
            }
        }
        self.layers = grown;
        self.capacity = capacity;
        Ok(())
    }
}

impl LibCache for MlxCache {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn layout_mut(&mut self) -> &mut Layout {
        &mut self.layout
    }

    /// MLX arrays are values: writing one cache makes new arrays and
    /// leaves the other's.
    fn fork(&self) -> Result<MlxCache, ModelError> {
        Ok(MlxCache {
            layers: self.layers.clone(),
            capacity: self.capacity,
            layout: self.layout.clone(),
            shape: self.shape,
        })
    }

    fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|(k, v)| (k.nbytes() + v.nbytes()) as u64)
            .sum()
    }

    fn stack(rows: Vec<MlxCache>, extra: usize) -> Result<MlxCache, ModelError> {
        let first = rows.first().expect("a batch of at least one row");
        let layout = Layout::stack(&rows.iter().map(|r| &r.layout).collect::<Vec<_>>());
        let mut cache = MlxCache {
            layers: Vec::new(),
            capacity: 0,
            layout,
            shape: first.shape,
        };
        let needed = cache.layout.used + extra;
        if needed == 0 {
            return Ok(cache);
        }
        let _lock = super::evaluating();
        cache.capacity = needed.div_ceil(64) * 64;
        cache.layers = cache.zeros(rows.len(), cache.capacity)?;
        for (j, row) in rows.iter().enumerate() {
            let (j, n) = (j as i32, row.layout.used as i32);
            if n == 0 {
                continue;
            }
            for ((k, v), (rk, rv)) in cache.layers.iter_mut().zip(&row.layers) {
                k.try_index_mut((j..j + 1, .., 0..n), rk.index((.., .., 0..n)))?;
                v.try_index_mut((j..j + 1, .., 0..n), rv.index((.., .., 0..n)))?;
            }
        }
        let arrays: Vec<&Array> = cache.layers.iter().flat_map(|(k, v)| [k, v]).collect();
        mlx_rs::transforms::eval(arrays)?;
        Ok(cache)
    }

    /// Each row's positions gathered to its first columns.
    fn unstack(self) -> Result<Vec<MlxCache>, ModelError> {
        let _lock = super::evaluating();
        let mut out = Vec::with_capacity(self.layout.rows.len());
        for (j, row) in self.layout.rows.iter().enumerate() {
            let j = j as i32;
            let cols: Vec<i32> = row.cols.iter().map(|&c| c as i32).collect();
            let cols = Array::from_slice(&cols, &[cols.len() as i32]);
            let mut layers = Vec::new();
            if !row.is_empty() {
                for (k, v) in &self.layers {
                    let part = |t: &Array| t.index((j..j + 1,)).take_axis(&cols, 2);
                    let (k, v) = (part(k)?, part(v)?);
                    mlx_rs::transforms::eval([&k, &v])?;
                    layers.push((k, v));
                }
            }
            out.push(MlxCache {
                layers,
                capacity: row.len(),
                layout: self.layout.row(j as usize),
                shape: self.shape,
            });
        }
        Ok(out)
    }
}

impl MlxLlama {
    /// Loads the weights of the model `assets` describe on the CPU: as
    /// f32, or (an HF folder quantized by MLX) packed as stored.
    pub fn load(assets: &ModelAssets) -> Result<MlxLlama, ModelError> {
        MlxLlama::load_as(assets, false, WeightMode::Native)
    }

    /// Loads the weights on the GPU (`gpu`, Metal) or the CPU; with
    /// `WeightMode::F32`, an MLX-quantized checkpoint's matrices are
    /// dequantized too. Every weight is evaluated here, so a damaged file
    /// fails at load and a pass only reads them.
    pub fn load_as(
        assets: &ModelAssets,
        gpu: bool,
        mode: WeightMode,
    ) -> Result<MlxLlama, ModelError> {
        let _lock = super::evaluating();
        super::use_device(gpu);
        let mut r = Reader::open(assets)?;
        let hf = r.is_hf();
        let mut model = MlxLlama::read(&assets.config, &mut r)
            .map_err(|e| if hf { e.hf_names(&assets.config) } else { e })?;
        model.dequantized = r.stored_types();
        model.on_gpu = gpu;
        if mode == WeightMode::F32 {
            model.dequantize()?;
        }
        model.packed = weights::packings(model.matrices());
        mlx_rs::transforms::eval(model.arrays())?;
        Ok(model)
    }

    /// Every matrix kept packed, made dense f32 (the tied output shares the
    /// embedding's again).
    fn dequantize(&mut self) -> Result<(), Exception> {
        self.each_matrix(&mut |m| m.make_dense())
    }

    /// Packs every matrix by MLX's affine quantization, `bits` bits in
    /// groups of `group`, as `mlx_lm.convert -q` does (the embedding and
    /// every linear map; norms stay f32): what an mlx-community checkpoint
    /// of this model would hold. For measuring the packed path on a model
    /// at hand; every input width must be a multiple of `group`.
    pub fn quantize(&mut self, group: i32, bits: i32) -> Result<(), ModelError> {
        let _lock = super::evaluating();
        super::use_device(self.on_gpu);
        self.each_matrix(&mut |m| m.make_packed(group, bits))?;
        self.packed = weights::packings(self.matrices());
        mlx_rs::transforms::eval(self.arrays())?;
        Ok(())
    }

    /// Every weight in `dtype` (f16 or bf16; f32 as read): matrices
    /// (a packed one's scales and biases), biases, norms and LongRoPE's
    /// scales. Activations and the KV cache follow.
    pub fn cast(&mut self, dtype: mlx_rs::Dtype) -> Result<(), ModelError> {
        let _lock = super::evaluating();
        super::use_device(self.on_gpu);
        self.each_matrix(&mut |m| m.cast(dtype))?;
        let cast = |a: &mut Array| -> Result<(), Exception> {
            *a = a.as_dtype(dtype)?;
            Ok(())
        };
        cast(&mut self.norm.scale)?;
        for b in &mut self.blocks {
            for l in b.linears_mut() {
                if let Some(bias) = &mut l.bias {
                    cast(bias)?;
                }
            }
            for norm in [
                &mut b.attn_norm,
                &mut b.attn.q_norm,
                &mut b.attn.k_norm,
                &mut b.post_attn_norm,
                &mut b.mlp_norm,
                &mut b.post_mlp_norm,
            ]
            .into_iter()
            .flatten()
            {
                cast(&mut norm.scale)?;
            }
        }
        for sets in &mut self.ropes {
            for (_, scale) in sets.iter_mut() {
                if let Some(s) = scale {
                    cast(s)?;
                }
            }
        }
        self.dtype = dtype;
        mlx_rs::transforms::eval(self.arrays())?;
        Ok(())
    }

    /// Calls `f` on every matrix (the tied output then shares the
    /// embedding's again).
    fn each_matrix(
        &mut self,
        f: &mut dyn FnMut(&mut Matrix) -> Result<(), Exception>,
    ) -> Result<(), Exception> {
        let blocks = self
            .blocks
            .iter_mut()
            .flat_map(|b| b.linears_mut().into_iter().map(|l| &mut l.weight));
        let tied = self.config.tied_embeddings;
        let output = (!tied).then_some(&mut self.output.weight);
        for m in [&mut self.embed].into_iter().chain(output).chain(blocks) {
            f(m)?;
        }
        if self.config.tied_embeddings {
            self.output.weight = self.embed.clone();
        }
        Ok(())
    }

    /// Every array the model holds, for evaluating them at once.
    fn arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = self.matrices().flat_map(Matrix::arrays).collect();
        out.push(&self.norm.scale);
        for (freqs, scale) in self.ropes.iter().flatten() {
            out.push(freqs);
            out.extend(scale);
        }
        for b in &self.blocks {
            out.extend(b.norms().map(|(_, n)| &n.scale));
            out.extend(b.linears().into_iter().filter_map(|l| l.bias.as_ref()));
        }
        out
    }

    /// Every matrix of the model, the embedding first.
    fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        let blocks = self
            .blocks
            .iter()
            .flat_map(|b| b.linears().into_iter().map(|l| &l.weight));
        [&self.embed, &self.output.weight].into_iter().chain(blocks)
    }

    fn read(c: &ModelConfig, r: &mut Reader<'_>) -> Result<MlxLlama, ModelError> {
        if c.experts.is_some() && r.is_packed() {
            return Err(ModelError::Compute(
                "an MLX-quantized mixture of experts (its experts packed in one switch stack) is not read yet; convert the model unquantized, or load its GGUF file"
                    .into(),
            ));
        }
        let embed = r.matrix("token_embd.weight", c.vocab, c.hidden)?;
        let eps = c.rms_eps as f32;
        let layout = &c.block;
        let whole = layout.qk_norm == Some(QkNorm::Whole);
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            // The norms the family has, as `ModelConfig::norm_width` lists them.
            let mut norm_if = |part: &str| -> Result<_, ModelError> {
                Ok(match c.norm_width(part) {
                    Some(width) => Some(RmsNorm {
                        scale: r.float(&format!("blk.{i}.{part}.weight"), &[width])?,
                        eps,
                    }),
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
                    q: r.linear(i, ModelMatrix::AttnQ, c)?,
                    k: r.linear(i, ModelMatrix::AttnK, c)?,
                    v: r.linear(i, ModelMatrix::AttnV, c)?,
                    o: r.linear(i, ModelMatrix::AttnOutput, c)?,
                    q_norm,
                    k_norm,
                    qk_norm_whole: whole,
                    scale: c.attn_scale(),
                    softcap: layout.attn_softcap,
                    window: c.windows[i],
                    rope: usize::from(c.local_rope(i)),
                },
                post_attn_norm,
                mlp_norm,
                ffn: ffn(r, i, c)?,
                post_mlp_norm,
            });
        }
        let norm = RmsNorm {
            scale: r.float("output_norm.weight", &[c.hidden])?,
            eps,
        };
        let output = Linear {
            weight: match c.tied_embeddings {
                true => embed.clone(),
                false => r.matrix("output.weight", c.vocab, c.hidden)?,
            },
            bias: None,
        };
        Ok(MlxLlama {
            config: c.clone(),
            embed,
            blocks,
            norm,
            output,
            ropes: mlx_ropes(c),
            dequantized: None,
            packed: None,
            on_gpu: false,
            dtype: mlx_rs::Dtype::Float32,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// An empty KV cache of one row for this model.
    pub fn new_cache(&self) -> MlxCache {
        let c = &self.config;
        MlxCache {
            layers: Vec::new(),
            capacity: 0,
            layout: Layout::new(1),
            shape: KvShape {
                layers: c.layers,
                kv_heads: c.kv_heads as i32,
                head_dim: c.head_dim as i32,
                dtype: self.dtype,
            },
        }
    }

    /// Logits at every position of `ids` run from position 0, `[n, vocab]`.
    pub fn forward(&self, ids: &[u32]) -> Result<Array, ModelError> {
        self.forward_cached(ids, &mut self.new_cache())
    }

    /// Logits at every position of `ids` run after the positions `cache`
    /// holds, `[n, vocab]`; their keys and values are appended to it (only
    /// when the pass succeeds).
    pub fn forward_cached(&self, ids: &[u32], cache: &mut MlxCache) -> Result<Array, ModelError> {
        Ok(self.run(ids, cache, &mut NoHook, 0)?.0)
    }

    /// Runs `ids` after the positions `cache` (one row) holds, calling
    /// `hook` after every block; the f32 logits from position `from` of
    /// the pass on (`[n - from, vocab]`: the last alone with `n - 1`).
    pub fn run(
        &self,
        ids: &[u32],
        cache: &mut MlxCache,
        hook: &mut dyn BlockHook<Array>,
        from: usize,
    ) -> Result<(Array, PassTiming), ModelError> {
        LibModel::run(self, ids, cache, hook, from)
    }

    /// One ragged pass over the rows of `cache` ([`LibModel::run_batch`]).
    /// Token ids outside the vocabulary and a hook's array of the wrong
    /// shape are refused; the cache changes only when the pass succeeds.
    pub fn run_batch(
        &self,
        cache: &mut MlxCache,
        rows: &mut [LibRow<'_, Array>],
    ) -> Result<RowOutputs<Array>, ModelError> {
        let plan = plan_rows(&cache.layout, &self.config, rows)?;
        if plan.width == 0 {
            return Ok(rows.iter().map(|_| None).collect());
        }
        let _lock = super::evaluating();
        super::use_device(self.on_gpu);
        cache.reserve(plan.keys())?;
        // The keys and values are written past the columns the layout
        // records (through the cache's own handles, so MLX can reuse their
        // memory): a failed pass leaves them unread.
        let out = self.run_planned(&plan, cache, rows)?;
        cache.layout.commit(&plan);
        Ok(out)
    }

    fn run_planned(
        &self,
        plan: &PassPlan<'_>,
        cache: &mut MlxCache,
        rows: &mut [LibRow<'_, Array>],
    ) -> Result<RowOutputs<Array>, ModelError> {
        let c = &self.config;
        let (b, w) = (plan.rows() as i32, plan.width as i32);
        let hidden = c.hidden as i32;
        let tokens: Vec<i32> = plan.tokens().into_iter().map(|id| id as i32).collect();
        let mut x = self
            .embed
            .rows(&Array::from_slice(&tokens, &[b * w]))?
            .reshape(&[b, w, hidden])?;
        if let Some(scale) = c.block.embed_scale {
            x = x.multiply(scalar(scale, &x)?)?;
        }
        let offsets: Vec<i32> = plan.past.iter().map(|&p| p as i32).collect();
        let offsets = Array::from_slice(&offsets, &[b]);
        let mut masks = std::collections::BTreeMap::new();
        for window in &c.windows {
            let attend = cache.layout.attend(plan, *window);
            masks.entry(*window).or_insert_with(|| match attend {
                Attend::All => Mask::All,
                Attend::Causal => Mask::Causal,
                Attend::Masked(m) => {
                    Mask::Keys(Array::from_slice(&m, &[b, 1, w, plan.keys() as i32]))
                }
            });
        }
        let mut timings = vec![PassTiming::default(); plan.rows()];
        for (layer, (block, slot)) in self.blocks.iter().zip(&mut cache.layers).enumerate() {
            let h = norm_opt(&block.attn_norm, x.clone())?;
            let mask = &masks[&block.attn.window];
            let rope = Rope {
                tables: &self.ropes[block.attn.rope],
                plan,
                offsets: &offsets,
            };
            let attn_out = self.attention(&block.attn, &h, slot, plan.start, &rope, mask)?;
            let attn_out = norm_opt(&block.post_attn_norm, attn_out)?;
            x = x.add(&attn_out)?;
            let h = norm_opt(&block.mlp_norm, x.clone())?;
            let (mlp_out, router) = match &block.ffn {
                Ffn::Dense(mlp) => (mlp.forward(&h)?, None),
                Ffn::Experts(moe) => {
                    let (out, probs) = moe.forward(&h.reshape(&[b * w, hidden])?)?;
                    (out.reshape(&[b, w, hidden])?, Some(probs))
                }
            };
            let mlp_out = norm_opt(&block.post_mlp_norm, mlp_out)?;
            x = x.add(&mlp_out)?;
            x.eval()?;
            let mut changed_rows: Vec<Option<Array>> = Vec::new();
            for (j, (row, timing)) in rows.iter_mut().zip(&mut timings).enumerate() {
                let n = plan.ids[j].len() as i32;
                let started = Instant::now();
                let changed = match n {
                    0 => None,
                    _ => {
                        let jj = j as i32;
                        let part = |t: &Array| t.index((jj, 0..n));
                        let router = router.as_ref().map(|r| r.index(jj * w..jj * w + n));
                        let resid = part(&x);
                        let view = BlockView {
                            layer,
                            offset: plan.past[j],
                            attn_out: &part(&attn_out),
                            mlp_out: &part(&mlp_out),
                            router: router.as_ref(),
                        };
                        let changed = row.hook.after_block(&view, &resid)?;
                        if let Some(changed) = &changed {
                            check_hook(layer, changed, &resid)?;
                        }
                        changed
                    }
                };
                changed_rows.push(changed);
                timing.hook_ns += started.elapsed().as_nanos() as u64;
            }
            if changed_rows.iter().any(Option::is_some) {
                let started = Instant::now();
                x = self.replace_rows(&x, plan, changed_rows)?;
                x.eval()?;
                let share = started.elapsed().as_nanos() as u64 / timings.len() as u64;
                timings.iter_mut().for_each(|t| t.hook_ns += share);
            }
        }
        let started = Instant::now();
        // The rows the logits are asked at, gathered into one projection.
        let (picked, counts) = plan.logit_rows();
        let picked: Vec<i32> = picked.into_iter().map(|i| i as i32).collect();
        let x = x.reshape(&[b * w, hidden])?;
        let x = match picked.len() as i32 == b * w {
            true => x,
            false => x.take_axis(Array::from_slice(&picked, &[picked.len() as i32]), 0)?,
        };
        let logits = self.output.forward(&self.norm.forward(&x)?)?;
        let logits = match self.config.block.final_softcap {
            Some(cap) => softcap(&logits, cap)?,
            None => logits,
        }
        .as_dtype(mlx_rs::Dtype::Float32)?;
        logits.eval()?;
        let lm_head_ns = started.elapsed().as_nanos() as u64;
        split_logits(&counts, &timings, lm_head_ns, |at, n| {
            Ok(logits.take_axis(span(at, at + n), 0)?)
        })
    }

    /// `x` with each changed row's tokens replaced (`[rows, width,
    /// hidden]`; a row's holes keep their values).
    fn replace_rows(
        &self,
        x: &Array,
        plan: &PassPlan<'_>,
        changed: Vec<Option<Array>>,
    ) -> Result<Array, Exception> {
        let mut x = x.clone();
        for (j, changed) in changed.into_iter().enumerate() {
            if let Some(rows) = changed {
                let (j, n) = (j as i32, plan.ids[j].len() as i32);
                x.try_index_mut((j..j + 1, 0..n), rows.expand_dims(0)?)?;
            }
        }
        Ok(x)
    }

    /// The matrices GGUF calls `blk.{layer}.{stem}.weight`, as they are
    /// kept: one, or a mixture's every expert's.
    fn matrices_of(&self, layer: usize, m: ModelMatrix) -> Result<Vec<&Matrix>, ModelError> {
        let b = self.blocks.get(layer).ok_or(ModelError::LayerOutOfRange {
            layer,
            count: self.blocks.len(),
        })?;
        Ok(match m.index() {
            i @ 0..4 => vec![&b.linears()[i].weight],
            _ => b.ffn_matrices(m),
        })
    }

    /// Self-attention of `h` (`[rows, width, hidden]`) over the cached
    /// columns and its own, whose keys and values it writes to `slot` at
    /// columns `start..start + width`.
    fn attention(
        &self,
        a: &Attention,
        h: &Array,
        slot: &mut (Array, Array),
        start: usize,
        rope: &Rope<'_>,
        mask: &Mask,
    ) -> Result<Array, ModelError> {
        let c = &self.config;
        let (b, w) = (h.shape()[0], h.shape()[1]);
        let (d, heads, kvh) = (c.head_dim as i32, c.heads as i32, c.kv_heads as i32);
        // [rows, width, heads * d] → [rows, heads, width, d]
        let split = |x: Array, hs: i32| -> Result<Array, Exception> {
            x.reshape(&[b, w, hs, d])?.transpose_axes(&[0, 2, 1, 3])
        };
        // Q/K norms over the whole projection (before the split into
        // heads), or per head (after it).
        let qk_norm = |norm: &Option<RmsNorm>, x: Array, hs: i32| -> Result<Array, Exception> {
            match (norm, a.qk_norm_whole) {
                (Some(nm), true) => split(nm.forward(&x)?, hs),
                (Some(nm), false) => nm.forward(&split(x, hs)?),
                (None, _) => split(x, hs),
            }
        };
        let q = rope.apply(c, qk_norm(&a.q_norm, a.q.forward(h)?, heads)?)?;
        let k = rope.apply(c, qk_norm(&a.k_norm, a.k.forward(h)?, kvh)?)?;
        let v = split(a.v.forward(h)?, kvh)?;
        let (s, e) = (start as i32, start as i32 + w);
        slot.0.try_index_mut((.., .., s..e), &k)?;
        slot.1.try_index_mut((.., .., s..e), &v)?;
        let (k, v) = (slot.0.index((.., .., 0..e)), slot.1.index((.., .., 0..e)));
        let out = match a.softcap {
            None => {
                let mask = match mask {
                    Mask::All => None,
                    Mask::Causal => Some(ScaledDotProductAttentionMask::Causal),
                    Mask::Keys(m) => Some(ScaledDotProductAttentionMask::Array(m)),
                };
                fast::scaled_dot_product_attention(&q, &k, &v, a.scale, mask, None)?
            }
            // MLX's fused attention has no soft-cap: the scores written out,
            // the `rep` query heads of a key/value head stacked against it.
            Some(cap) => {
                let rep = heads / kvh;
                let q = q.reshape(&[b, kvh, rep * w, d])?;
                let scores = q
                    .matmul(k.transpose_axes(&[0, 1, 3, 2])?)?
                    .multiply(scalar(a.scale, &q)?)?;
                let scores = softcap(&scores, cap)?.reshape(&[b, kvh, rep, w, e])?;
                let keep = match mask {
                    Mask::All => None,
                    Mask::Causal => {
                        let attend = Attend::Causal.mask(1, w as usize, e as usize);
                        Some(Array::from_slice(&attend, &[1, 1, 1, w, e]))
                    }
                    Mask::Keys(m) => Some(m.reshape(&[b, 1, 1, w, e])?),
                };
                let scores = match keep {
                    Some(keep) => mlx_rs::ops::select(
                        &keep,
                        &scores,
                        Array::from_f32(f32::NEG_INFINITY).as_dtype(scores.dtype())?,
                    )?,
                    None => scores,
                };
                mlx_rs::ops::softmax_axis(&scores, -1, true)?
                    .reshape(&[b, kvh, rep * w, e])?
                    .matmul(&v)?
                    .reshape(&[b, heads, w, d])?
            }
        };
        let out = out
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[b, w, heads * d])?;
        Ok(a.o.forward(&out)?)
    }
}

/// Which keys a pass's queries attend to (see [`Attend`]).
enum Mask {
    All,
    Causal,
    /// `[rows, 1, width, keys]`, `true` where a query attends.
    Keys(Array),
}

/// MLX's name of a float dtype, for the kernel note.
fn dtype_name(dtype: mlx_rs::Dtype) -> &'static str {
    match dtype {
        mlx_rs::Dtype::Float16 => "float16",
        mlx_rs::Dtype::Bfloat16 => "bfloat16",
        _ => "float32",
    }
}

/// A hook's replacement of a row's residual stream must keep its shape
/// and dtype.
fn check_hook(layer: usize, changed: &Array, resid: &Array) -> Result<(), ModelError> {
    if changed.shape() != resid.shape() {
        return Err(ModelError::HookShape {
            layer,
            found: changed.shape().iter().map(|&d| d as usize).collect(),
            expected: resid.shape().iter().map(|&d| d as usize).collect(),
        });
    }
    if changed.dtype() != resid.dtype() {
        return Err(ModelError::HookDtype {
            layer,
            found: format!("{:?}", changed.dtype()),
            expected: format!("{:?}", resid.dtype()),
        });
    }
    Ok(())
}

/// The rotary embedding of a pass's rows: each row's positions from its
/// own offset, at its LongRoPE set's frequencies.
struct Rope<'a> {
    /// The layer's kind's two sets (see `MlxLlama::ropes`).
    tables: &'a [(Array, Option<Array>); 2],
    plan: &'a PassPlan<'a>,
    /// Each row's first position, `[rows]`.
    offsets: &'a Array,
}

impl Rope<'_> {
    /// `x` (`[rows, heads, width, d]`) turned; dimensions past
    /// `rotary_dim` (a partial rotary embedding) stay.
    fn apply(&self, c: &ModelConfig, x: Array) -> Result<Array, Exception> {
        let (dims, traditional) = (c.rotary_dim as i32, c.rope_style == RopeStyle::Interleaved);
        let scaled = |turned: Array, scale: &Option<Array>| match scale {
            Some(s) => turned.multiply(s),
            None => Ok(turned),
        };
        match self.plan.one_rope_set() {
            Some(set) => {
                let (freqs, scale) = &self.tables[set];
                let turned = match self.plan.rows() {
                    1 => {
                        let past = self.plan.past[0] as i32;
                        fast::rope(x, dims, traditional, None, 1.0, past, freqs)?
                    }
                    _ => fast::rope_dynamic(x, dims, traditional, None, 1.0, self.offsets, freqs)?,
                };
                scaled(turned, scale)
            }
            // Rows on both sides of LongRoPE's switch: each on its own.
            None => {
                let mut rows = Vec::with_capacity(self.plan.rows());
                for (j, &set) in self.plan.rope_sets.iter().enumerate() {
                    let (freqs, scale) = &self.tables[set];
                    let row = x.index((j as i32..j as i32 + 1,));
                    let past = self.plan.past[j] as i32;
                    let turned = fast::rope(row, dims, traditional, None, 1.0, past, freqs)?;
                    rows.push(scaled(turned, scale)?);
                }
                mlx_rs::ops::concatenate(&rows, 0)
            }
        }
    }
}

impl LibModel for MlxLlama {
    const EXECUTOR: &'static str = "mlx";
    const TITLE: &'static str = "MLX";
    type Ops = super::intervene::Mlx;
    type Cache = MlxCache;

    fn check_device(device: DeviceSpec) -> Result<(), String> {
        super::check_device(device).map(drop)
    }

    /// `weights = "native"` keeps an MLX-quantized checkpoint packed;
    /// `"f32"` dequantizes it at load (GGUF files are dequantized either way).
    fn load(spec: &ModelSpec, assets: &ModelAssets) -> Result<Self, ExecutorError> {
        let gpu = super::check_device(spec.device).map_err(ExecutorError::Device)?;
        let mut model = MlxLlama::load_as(assets, gpu, spec.weights)?;
        match spec.dtype {
            Dtype::F32 => {}
            Dtype::F16 => model.cast(mlx_rs::Dtype::Float16)?,
            Dtype::Bf16 => model.cast(mlx_rs::Dtype::Bfloat16)?,
        }
        if let Some(packed) = model.packed.as_ref().filter(|_| !gpu) {
            // Measured, not assumed: `cargo bench -p vauban-exec --features
            // mlx --bench backend_speed` (docs/executor.md).
            tracing::warn!(
                "{}: MLX-quantized weights ({packed}) kept packed on the CPU, where MLX's \
                 quantized_matmul ran SmolLM2's prompts 24 to 34 times slower than f32 weights here; \
                 weights = \"f32\" (--weights f32) runs the same values dequantized",
                assets.path.display()
            );
        }
        Ok(model)
    }

    fn device_kinds() -> Vec<DeviceKind> {
        let mut kinds = vec![DeviceKind::Cpu];
        if super::metal_available() {
            kinds.push(DeviceKind::Metal);
        }
        kinds
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn new_cache(&self) -> MlxCache {
        MlxLlama::new_cache(self)
    }

    fn run_batch(
        &self,
        cache: &mut MlxCache,
        rows: &mut [LibRow<'_, Array>],
    ) -> Result<RowOutputs<Array>, ModelError> {
        MlxLlama::run_batch(self, cache, rows)
    }

    /// `[out, in]`; a mixture's experts' stacked by rows, `[experts · out,
    /// in]` (as candle gives it).
    fn weight(&self, layer: usize, m: ModelMatrix) -> Result<Array, ModelError> {
        let dense: Vec<Array> = self
            .matrices_of(layer, m)?
            .into_iter()
            .map(Matrix::dense)
            .collect::<Result<_, _>>()?;
        Ok(match <[Array; 1]>::try_from(dense) {
            Ok([one]) => one,
            Err(all) => mlx_rs::ops::concatenate(&all, 0)?,
        })
    }

    fn named_weights(&self) -> Result<Vec<(String, Array)>, ModelError> {
        let mut out = vec![
            ("token_embd.weight".to_owned(), self.embed.dense()?),
            ("output_norm.weight".to_owned(), self.norm.scale.clone()),
        ];
        if !self.config.tied_embeddings {
            out.push(("output.weight".to_owned(), self.output.weight.dense()?));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            for (stem, norm) in b.norms() {
                out.push((format!("blk.{i}.{stem}.weight"), norm.scale.clone()));
            }
            let mut linears: Vec<(&str, &Linear)> = ModelMatrix::ALL[..4]
                .iter()
                .map(|m| m.gguf_stem())
                .zip(b.linears())
                .collect();
            match &b.ffn {
                Ffn::Dense(f) => linears.extend([
                    (ModelMatrix::FfnGate.gguf_stem(), &f.gate),
                    (ModelMatrix::FfnUp.gguf_stem(), &f.up),
                    (ModelMatrix::FfnDown.gguf_stem(), &f.down),
                ]),
                // The router, and the experts' stacks as GGUF holds them.
                Ffn::Experts(moe) => {
                    linears.push(("ffn_gate_inp", &moe.router));
                    for (stem, m) in [
                        ("ffn_gate_exps", ModelMatrix::FfnGate),
                        ("ffn_up_exps", ModelMatrix::FfnUp),
                        ("ffn_down_exps", ModelMatrix::FfnDown),
                    ] {
                        let each: Vec<Array> = b
                            .ffn_matrices(m)
                            .into_iter()
                            .map(Matrix::dense)
                            .collect::<Result<_, _>>()?;
                        out.push((
                            format!("blk.{i}.{stem}.weight"),
                            mlx_rs::ops::stack(&each, 0)?,
                        ));
                    }
                }
            }
            for (stem, lin) in linears {
                out.push((format!("blk.{i}.{stem}.weight"), lin.weight.dense()?));
                if let Some(bias) = &lin.bias {
                    out.push((format!("blk.{i}.{stem}.bias"), bias.clone()));
                }
            }
        }
        Ok(out)
    }

    /// `W ← W − r(rᵀW)` in f32 (a mixture's every expert's down matrix,
    /// which removes `r` from their weighted sum exactly); the matrix is
    /// kept dense afterwards (a packed one is dequantized first).
    fn orthogonalize(
        &mut self,
        r: &[f32],
        layer: usize,
        m: ModelMatrix,
    ) -> Result<f32, ModelError> {
        if !matches!(m, ModelMatrix::AttnOutput | ModelMatrix::FfnDown) {
            return Err(ModelError::NotResidualWriter { matrix: m });
        }
        let (count, dtype) = (self.blocks.len(), self.dtype);
        let b = self
            .blocks
            .get_mut(layer)
            .ok_or(ModelError::LayerOutOfRange { layer, count })?;
        let targets: Vec<&mut Matrix> = match (m, &mut b.ffn) {
            (ModelMatrix::AttnOutput, _) => vec![&mut b.attn.o.weight],
            (_, Ffn::Dense(f)) => vec![&mut f.down.weight],
            (_, Ffn::Experts(moe)) => moe.experts.iter_mut().map(|f| &mut f.down.weight).collect(),
        };
        let _lock = super::evaluating();
        super::use_device(self.on_gpu);
        let column = Array::from_slice(r, &[r.len() as i32, 1]);
        let mut squares = 0f32;
        for w in targets {
            // In f32, stored back in the model's dtype.
            let dense = w.dense()?.as_dtype(mlx_rs::Dtype::Float32)?;
            let change = column.matmul(column.t().matmul(&dense)?)?;
            squares += super::intervene::values(&change.square()?.sum(None)?)?[0];
            let new_t = dense.subtract(&change)?.as_dtype(dtype)?.transpose()?;
            new_t.eval()?;
            *w = Matrix::DenseT(new_t);
        }
        self.packed = weights::packings(self.matrices());
        Ok(squares.sqrt())
    }

    fn add_to_weight(
        &mut self,
        layer: usize,
        m: ModelMatrix,
        delta: &[f32],
    ) -> Result<(), ModelError> {
        let (count, dtype) = (self.blocks.len(), self.dtype);
        let b = self
            .blocks
            .get_mut(layer)
            .ok_or(ModelError::LayerOutOfRange { layer, count })?;
        if matches!(b.ffn, Ffn::Experts(_)) && m.index() >= 4 {
            return Err(ModelError::ExpertMatrix { matrix: m });
        }
        let _lock = super::evaluating();
        super::use_device(self.on_gpu);
        let w = &mut b.linears_mut()[m.index()].weight;
        let dense = w.dense()?;
        let shape = dense.shape().to_vec();
        if shape.iter().product::<i32>() as usize != delta.len() {
            return Err(ModelError::ShapeMismatch {
                tensor: format!("blk.{layer}.{}.weight", m.gguf_stem()),
                found: vec![delta.len()],
                expected: shape.iter().map(|&d| d as usize).collect(),
                path: None,
            });
        }
        let new_t = dense
            .as_dtype(mlx_rs::Dtype::Float32)?
            .add(Array::from_slice(delta, &shape))?
            .as_dtype(dtype)?
            .transpose()?;
        new_t.eval()?;
        *w = Matrix::DenseT(new_t);
        self.packed = weights::packings(self.matrices());
        Ok(())
    }

    fn kernel_note(&self) -> String {
        let device = if self.on_gpu { "gpu, Metal" } else { "cpu" };
        let mut note = format!(
            "MLX {} ({device}), {}",
            super::mlx_version(),
            dtype_name(self.dtype)
        );
        if let Some(stored) = &self.dequantized {
            note.push_str(&format!("; GGUF {stored} weights dequantized at load"));
        }
        if let Some(packed) = &self.packed {
            note.push_str(&format!(
                "; MLX-quantized weights ({packed}) kept packed, multiplied by quantized_matmul"
            ));
        }
        note
    }

    /// Keys and values are kept in the model's dtype.
    fn kv_note(&self) -> String {
        match self.dtype {
            mlx_rs::Dtype::Float16 => Dtype::F16,
            mlx_rs::Dtype::Bfloat16 => Dtype::Bf16,
            _ => Dtype::F32,
        }
        .name()
        .into()
    }

    /// Nothing to wait for: every pass ends with its logits evaluated,
    /// which waits for the device. MLX's own allocator counts what it
    /// holds, which the stage records.
    fn settle(&self) -> Settled {
        let mut notes = Vec::new();
        if let Ok(active) = mlx_rs::memory::active_memory() {
            notes.push(("mlx_active_memory_bytes", active.to_string()));
        }
        if let Ok(peak) = mlx_rs::memory::peak_memory() {
            notes.push(("mlx_peak_memory_bytes", peak.to_string()));
        }
        Settled {
            synchronised: false,
            notes,
        }
    }

    /// Apple silicon's memory is unified: no copies between two memories.
    fn on_device(&self) -> bool {
        false
    }

    fn is_quantized(&self) -> bool {
        self.packed.is_some()
    }

    fn device_label(&self) -> Option<String> {
        None
    }
}

/// Block `layer`'s MLP: dense, or a mixture's router and its experts
/// (each expert's matrices cut from GGUF's stacks, `[experts, out, in]`).
fn ffn(r: &mut Reader<'_>, layer: usize, c: &ModelConfig) -> Result<Ffn, ModelError> {
    let activation = c.block.activation;
    let Some(e) = &c.experts else {
        return Ok(Ffn::Dense(Mlp {
            gate: r.linear(layer, ModelMatrix::FfnGate, c)?,
            up: r.linear(layer, ModelMatrix::FfnUp, c)?,
            down: r.linear(layer, ModelMatrix::FfnDown, c)?,
            activation,
        }));
    };
    let name = |stem: &str| format!("blk.{layer}.{stem}.weight");
    let router = Linear {
        weight: r.matrix(&name("ffn_gate_inp"), e.count, c.hidden)?,
        bias: None,
    };
    let mut stack = |stem: &str, out: usize, inp: usize| -> Result<Vec<Linear>, ModelError> {
        let all = r.float(&name(stem), &[e.count, out, inp])?;
        (0..e.count as i32)
            .map(|x| {
                Ok(Linear {
                    weight: Matrix::DenseT(all.try_index(x)?.t()),
                    bias: None,
                })
            })
            .collect()
    };
    let gates = stack("ffn_gate_exps", e.ffn, c.hidden)?;
    let ups = stack("ffn_up_exps", e.ffn, c.hidden)?;
    let downs = stack("ffn_down_exps", c.hidden, e.ffn)?;
    let experts = gates
        .into_iter()
        .zip(ups)
        .zip(downs)
        .map(|((gate, up), down)| Mlp {
            gate,
            up,
            down,
            activation,
        })
        .collect();
    Ok(Ffn::Experts(Moe {
        router,
        experts,
        routing: e.clone(),
    }))
}

/// Each rotary kind's two LongRoPE sets as MLX takes them (see
/// `MlxLlama::ropes`).
fn mlx_ropes(c: &ModelConfig) -> Vec<[(Array, Option<Array>); 2]> {
    let kinds = 1 + usize::from((0..c.layers).any(|i| c.local_rope(i)));
    c.rope_sets(kinds)
        .into_iter()
        .map(|sets| {
            sets.map(|rope| {
                let freqs: Vec<f32> = rope.inv_freqs.iter().map(|f| 1.0 / f).collect();
                let freqs = Array::from_slice(&freqs, &[freqs.len() as i32]);
                let scale = (rope.magnitude != 1.0).then(|| {
                    let per_dim: Vec<f32> = (0..c.head_dim)
                        .map(|i| match i < c.rotary_dim {
                            true => rope.magnitude,
                            false => 1.0,
                        })
                        .collect();
                    Array::from_slice(&per_dim, &[c.head_dim as i32])
                });
                (freqs, scale)
            })
        })
        .collect()
}
