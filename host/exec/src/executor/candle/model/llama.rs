//! The decoder forward pass of every family vauban runs (llama 2/3,
//! SmolLM2, Qwen2/3, Mistral, Gemma 2/3, OLMo 2): RMSNorm, rotary
//! embeddings, grouped-query attention, a gated MLP, with what a family's
//! [`BlockLayout`](crate::model::config::BlockLayout) adds where it sets
//! it (Q/K norms, post-norms, GeGLU, scaled embeddings, soft-caps, sliding
//! windows, a second RoPE base), a hook after every block that can read and
//! replace the residual stream, and a KV cache so a decode step runs one
//! token.
//!
//! Quantized weights stay quantized: on the CPU they run through
//! `vauban-kernels` (integer dot products against activations quantized to
//! 8-bit blocks, the instruction set picked at run time), on a GPU through
//! candle's quantized matmul. Dense weights (safetensors, or GGUF
//! dequantized at load) run as plain matmuls. Activations are f32.

use std::collections::BTreeMap;
use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::ops::{rms_norm, silu, softmax_last_dim};
use candle_nn::rotary_emb::{rope, rope_i};
use vauban_kernels::attention::{
    self, Heads, KvType, LayerCache, RopeTable, Rotary, Scoring, SeqRows,
};
use vauban_kernels::{Isa, QMatrix};

use crate::model::config::{Activation, Experts, ModelConfig, Rope, RopeStyle};
use crate::model::routing::Routing;
use crate::model::{Matrix, ModelError, WeightMode};

/// A weight as its file stores it.
pub enum Weight {
    /// GGUF block-quantized (or f32/f16 in a GGUF container).
    Quant(QTensor),
    /// A dense tensor (safetensors, or a dequantized GGUF tensor).
    Dense(Tensor),
    /// A block-quantized matrix for vauban's CPU kernels, bytes as stored.
    Blocks(QMatrix),
}

impl Weight {
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Weight::Quant(q) => q.shape().dims().to_vec(),
            Weight::Dense(t) => t.dims().to_vec(),
            Weight::Blocks(q) => vec![q.rows(), q.cols()],
        }
    }

    /// A stack of `count` experts' matrices (`[count, rows, cols]` as
    /// GGUF holds them, or `[count · rows, cols]` as block-quantized bytes)
    /// as one weight per expert, each checked to be `[rows, cols]`.
    pub fn experts(
        self,
        name: &str,
        count: usize,
        [rows, cols]: [usize; 2],
        device: &Device,
    ) -> Result<Vec<Weight>, ModelError> {
        let found = self.dims();
        if found.iter().product::<usize>() != count * rows * cols || found.last() != Some(&cols) {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_owned(),
                found,
                expected: vec![count, rows, cols],
                path: None,
            });
        }
        match self {
            Weight::Blocks(q) => (0..count)
                .map(|e| {
                    q.row_range(e * rows, rows)
                        .map(Weight::Blocks)
                        .ok_or_else(|| ModelError::Compute(format!("{name}: expert {e}").into()))
                })
                .collect(),
            w => {
                let t = w.dense(device)?.reshape((count, rows, cols))?;
                (0..count).map(|e| Ok(Weight::Dense(t.get(e)?))).collect()
            }
        }
    }

    /// Rows `start..start + n` of a matrix (one part of a fused one),
    /// kept as stored where vauban's kernels run it; candle's quantized
    /// tensors, which cannot be sliced, are dequantized.
    pub fn rows(self, start: usize, n: usize, device: &Device) -> Result<Weight, ModelError> {
        Ok(match self {
            Weight::Blocks(q) => {
                let rows = q.rows();
                Weight::Blocks(q.row_range(start, n).ok_or_else(|| {
                    ModelError::Compute(
                        format!("rows {start}..{} of a {rows}-row matrix", start + n).into(),
                    )
                })?)
            }
            w => Weight::Dense(w.dense(device)?.narrow(0, start, n)?),
        })
    }

    /// The weight as a dense f32 tensor.
    pub fn dense(self, device: &Device) -> Result<Tensor, ModelError> {
        Ok(match self {
            Weight::Quant(q) => q.dequantize(device)?,
            Weight::Dense(t) => t.to_dtype(DType::F32)?,
            Weight::Blocks(q) => dequantized(&q, device)?,
        })
    }
}

fn dequantized(q: &QMatrix, device: &Device) -> Result<Tensor, ModelError> {
    Ok(Tensor::from_vec(
        q.dequantize(),
        (q.rows(), q.cols()),
        device,
    )?)
}

/// How a projection's matrix is held and multiplied.
enum Proj {
    /// Block-quantized, on vauban's CPU kernels.
    Kernel(Arc<QMatrix>),
    /// candle's matmul: dense, or quantized on a GPU.
    Candle(QMatMul),
}

/// A projection `y = x Wᵀ (+ b)`.
struct Linear {
    w: Proj,
    b: Option<Tensor>,
}

impl Linear {
    fn new(
        w: Weight,
        b: Option<Tensor>,
        mode: WeightMode,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let w = match (w, mode) {
            // Repacked for this CPU's fastest kernels where they take it.
            (Weight::Blocks(q), WeightMode::Native) => Proj::Kernel(Arc::new(q.packed())),
            (Weight::Quant(q), WeightMode::Native) => Proj::Candle(QMatMul::from_arc(Arc::new(q))?),
            (w, _) => Proj::Candle(QMatMul::Tensor(w.dense(device)?)),
        };
        Ok(Linear { w, b })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        let y = match &self.w {
            Proj::Kernel(_) => {
                let [y] = Linear::forward_group([self], x)?;
                return Ok(y);
            }
            Proj::Candle(m) => m.forward(x)?,
        };
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }

    /// `[x Wᵢᵀ (+ bᵢ)]` for matrices that read the same `x`: one job on
    /// vauban's kernels when all of them run there (the input quantized
    /// once, the rows of all split across the threads together; a single
    /// block-quantized matrix comes here too), else one product each.
    fn forward_group<const G: usize>(
        ls: [&Linear; G],
        x: &Tensor,
    ) -> Result<[Tensor; G], ModelError> {
        let ws: Option<Vec<&QMatrix>> = ls
            .iter()
            .map(|l| match &l.w {
                Proj::Kernel(q) => Some(&**q),
                Proj::Candle(_) => None,
            })
            .collect();
        let Some(ws) = ws else {
            let mut out = Vec::with_capacity(G);
            for l in ls {
                out.push(l.forward(x)?);
            }
            return Ok(out.try_into().expect("one output per matrix"));
        };
        if !x.device().is_cpu() {
            // The loader keeps block-quantized matrices only for a CPU model.
            return Err(ModelError::Compute(
                "vauban's block kernels run on the CPU; these activations are not".into(),
            ));
        }
        let x = x.to_dtype(DType::F32)?.contiguous()?;
        let mut dims = x.dims().to_vec();
        let k = dims.pop().unwrap_or(0);
        let m = x.elem_count() / k.max(1);
        let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; m * w.rows()]).collect();
        {
            let (storage, layout) = x.storage_and_layout();
            let candle_core::Storage::Cpu(cpu) = &*storage else {
                unreachable!("checked: the input is on the CPU");
            };
            let (start, end) = layout.contiguous_offsets().expect("made contiguous above");
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(Vec::as_mut_slice).collect();
            vauban_kernels::matmul_group(&ws, &cpu.as_slice::<f32>()?[start..end], m, &mut outs);
        }
        let mut out = Vec::with_capacity(G);
        for ((l, w), y) in ls.iter().zip(&ws).zip(ys) {
            let mut shape = dims.clone();
            shape.push(w.rows());
            let y = Tensor::from_vec(y, shape, x.device())?;
            out.push(match &l.b {
                Some(b) => y.broadcast_add(b)?,
                None => y,
            });
        }
        Ok(out.try_into().expect("one output per matrix"))
    }

    /// The matrix, dequantized to f32, `[out, in]`.
    fn dense(&self) -> Result<Tensor, ModelError> {
        Ok(match &self.w {
            Proj::Kernel(q) => dequantized(q, &Device::Cpu)?,
            Proj::Candle(QMatMul::QTensor(q)) => q.dequantize(&q.device())?,
            Proj::Candle(QMatMul::Tensor(t)) => t.clone(),
            Proj::Candle(QMatMul::TensorF16(t)) => t.to_dtype(DType::F32)?,
        })
    }

    fn is_quantized(&self) -> bool {
        matches!(self.w, Proj::Kernel(_) | Proj::Candle(QMatMul::QTensor(_)))
    }

    /// Bytes of the matrix as held.
    fn bytes(&self) -> u64 {
        (match &self.w {
            Proj::Kernel(q) => q.bytes(),
            Proj::Candle(QMatMul::QTensor(q)) => q.storage_size_in_bytes(),
            Proj::Candle(QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => {
                t.elem_count() * t.dtype().size_in_bytes()
            }
        }) as u64
    }

    /// The block format, when the matrix runs on vauban's kernels.
    fn kernel_format(&self) -> Option<vauban_kernels::Format> {
        match &self.w {
            Proj::Kernel(q) => Some(q.format()),
            Proj::Candle(_) => None,
        }
    }
}

/// The token embedding: dense, or block-quantized rows dequantized on
/// lookup (a tied embedding shares its matrix with the output projection,
/// so a Q8_0 vocabulary is held once, as stored, not again as f32).
enum Embedding {
    Dense(Tensor),
    Blocks(Arc<QMatrix>),
}

impl Embedding {
    fn lookup(&self, ids: &[u32], device: &Device) -> Result<Tensor, ModelError> {
        Ok(match self {
            Embedding::Dense(e) => e.index_select(&Tensor::new(ids, device)?, 0)?,
            Embedding::Blocks(q) => {
                let h = q.cols();
                let mut out = vec![0f32; ids.len() * h];
                for (&id, row) in ids.iter().zip(out.chunks_exact_mut(h)) {
                    q.dequantize_row(id as usize, row);
                }
                Tensor::from_vec(out, (ids.len(), h), device)?
            }
        })
    }

    fn dense(&self) -> Result<Tensor, ModelError> {
        Ok(match self {
            Embedding::Dense(e) => e.clone(),
            Embedding::Blocks(q) => dequantized(q, &Device::Cpu)?,
        })
    }
}

/// A gated MLP: `down(act(gate(x)) · up(x))`.
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn forward(&self, x: &Tensor, act: Activation) -> Result<Tensor, ModelError> {
        let [gate, up] = Linear::forward_group([&self.gate, &self.up], x)?;
        self.down.forward(&gated(&gate, &up, act)?)
    }
}

/// `act(gate) · up`: on the CPU, vauban's kernel (one pass over both,
/// across the threads; candle's `gelu` calls libm's tanh for every value:
/// 1.6 ms for a 128 × 1536 gate on this machine's 2 cores, a sixth of a
/// Gemma prompt's time); candle's operations on a GPU.
fn gated(gate: &Tensor, up: &Tensor, act: Activation) -> Result<Tensor, ModelError> {
    let on_host = gate.device().is_cpu() && gate.dtype() == DType::F32 && up.dtype() == DType::F32;
    if !on_host || gate.dims() != up.dims() {
        let gate = match act {
            Activation::Silu => silu(gate)?,
            Activation::GeluTanh => gate.gelu()?,
        };
        return Ok((gate * up)?);
    }
    let (g, u) = (gate.contiguous()?, up.contiguous()?);
    let mut out = vec![0f32; g.elem_count()];
    {
        let (gs, gl) = g.storage_and_layout();
        let (us, ul) = u.storage_and_layout();
        let (candle_core::Storage::Cpu(gc), candle_core::Storage::Cpu(uc)) = (&*gs, &*us) else {
            unreachable!("checked: both on the CPU");
        };
        let (a, b) = gl.contiguous_offsets().expect("made contiguous above");
        let (c, d) = ul.contiguous_offsets().expect("made contiguous above");
        let kind = match act {
            Activation::Silu => vauban_kernels::gate::Gate::Silu,
            Activation::GeluTanh => vauban_kernels::gate::Gate::GeluTanh,
        };
        vauban_kernels::gate::gated(
            kind,
            &gc.as_slice::<f32>()?[a..b],
            &uc.as_slice::<f32>()?[c..d],
            &mut out,
        );
    }
    Ok(Tensor::from_vec(out, gate.shape(), gate.device())?)
}

/// A mixture of experts: the router scores every expert for each token,
/// the `used` best run, and their outputs are summed weighted by the
/// router's probabilities (softmax over all experts, then the top ones,
/// renormalised where the model says).
struct Moe {
    router: Linear,
    experts: Vec<Mlp>,
    /// How many run per token, and whether their weights are renormalised.
    routing: Experts,
}

impl Moe {
    /// The MLP's output for `x` (`[1, rows, hidden]`) and the router's
    /// probabilities (`[1, rows, experts]`, f32: what each token's choice
    /// was made from).
    fn forward(&self, x: &Tensor, act: Activation) -> Result<(Tensor, Tensor), ModelError> {
        let (_, rows, hidden) = x.dims3()?;
        let probs =
            candle_nn::ops::softmax_last_dim(&self.router.forward(x)?.to_dtype(DType::F32)?)?;
        let routing = Routing::of(&probs.flatten_all()?.to_vec1::<f32>()?, &self.routing);
        let x2 = x.reshape((rows, hidden))?;
        let mut out = vec![0f32; rows * hidden];
        for (e, (expert, tokens)) in self.experts.iter().zip(&routing.rows).enumerate() {
            if tokens.is_empty() {
                continue;
            }
            let picked = x2.index_select(&Tensor::new(tokens.as_slice(), x.device())?, 0)?;
            let y = expert.forward(&picked.unsqueeze(0)?, act)?.squeeze(0)?;
            let y = y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            for (&row, values) in tokens.iter().zip(y.chunks_exact(hidden)) {
                let row = row as usize;
                let w = routing.picks[row]
                    .iter()
                    .find(|p| p.0 == e)
                    .expect("the token picked this expert")
                    .1;
                let dst = &mut out[row * hidden..][..hidden];
                for (d, v) in dst.iter_mut().zip(values) {
                    *d += w * v;
                }
            }
        }
        let out = Tensor::from_vec(out, (1, rows, hidden), x.device())?.to_dtype(x.dtype())?;
        Ok((out, probs))
    }
}

impl Moe {
    /// Every expert's gate, up or down matrix (`which`), dense f32, in
    /// expert order.
    fn matrices(&self, which: Matrix) -> Result<Vec<Tensor>, ModelError> {
        self.experts
            .iter()
            .map(|m| match which {
                Matrix::FfnGate => m.gate.dense(),
                Matrix::FfnUp => m.up.dense(),
                _ => m.down.dense(),
            })
            .collect()
    }
}

/// A block's MLP: one, or a mixture of experts.
enum Ffn {
    Dense(Mlp),
    Experts(Moe),
}

impl Ffn {
    /// Every matrix, the router and each expert's included.
    fn linears(&self) -> Vec<&Linear> {
        match self {
            Ffn::Dense(m) => vec![&m.gate, &m.up, &m.down],
            Ffn::Experts(moe) => std::iter::once(&moe.router)
                .chain(moe.experts.iter().flat_map(|m| [&m.gate, &m.up, &m.down]))
                .collect(),
        }
    }
}

/// One decoder block. The norms a family does not have are `None`.
struct Block {
    /// RMSNorm before attention (all but OLMo 2).
    attn_norm: Option<Tensor>,
    q: Linear,
    k: Linear,
    v: Linear,
    /// RMSNorm of the queries and keys before RoPE (Qwen3, Gemma 3, OLMo 2).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    o: Linear,
    /// RMSNorm of what attention writes (Gemma 2/3, OLMo 2).
    post_attn_norm: Option<Tensor>,
    /// RMSNorm before the MLP.
    ffn_norm: Option<Tensor>,
    ffn: Ffn,
    /// RMSNorm of what the MLP writes.
    post_ffn_norm: Option<Tensor>,
    /// How the attention scores keys: scale, soft-cap, window, RoPE pairing.
    scoring: Scoring,
    /// Which of the model's RoPE tables the block takes (0: global, 1: local).
    rope: usize,
}

impl Block {
    /// Every matrix of the block.
    fn linears(&self) -> Vec<&Linear> {
        let mut out = vec![&self.q, &self.k, &self.v, &self.o];
        out.extend(self.ffn.linears());
        out
    }
}

/// `x` normalised by RMSNorm with weight `w` where the block has it.
fn norm_opt(x: &Tensor, w: &Option<Tensor>, eps: f64) -> Result<Tensor, ModelError> {
    Ok(match w {
        Some(w) => rms_norm(x, w, eps as f32)?,
        None => x.clone(),
    })
}

/// `cap · tanh(x / cap)`.
fn softcap(x: &Tensor, cap: f32) -> Result<Tensor, ModelError> {
    Ok(((x / cap as f64)?.tanh()? * cap as f64)?)
}

/// What the hook sees after one block: on candle every tensor is
/// `[1, t, …]`, the residual stream `[1, t, hidden]`.
pub type BlockView<'a> = crate::executor::hook::BlockView<'a, Tensor>;

/// Reads (and may replace) the residual stream after every block: the
/// shared hook trait, over candle's tensors.
pub use crate::executor::hook::{BlockHook, NoHook};

/// Keeps the residual stream after the listed blocks.
pub struct Observe<'a> {
    pub layers: &'a [usize],
    pub residuals: Vec<(usize, Tensor)>,
}

impl BlockHook<Tensor> for Observe<'_> {
    fn after_block(
        &mut self,
        v: &BlockView<'_>,
        resid: &Tensor,
    ) -> Result<Option<Tensor>, ModelError> {
        if self.layers.contains(&v.layer) {
            self.residuals.push((v.layer, resid.clone()));
        }
        Ok(None)
    }
}

/// Keys and values of every block for the positions seen so far, in
/// buffers of `[1, kv_heads, capacity, head_dim]` written in place; the
/// capacity doubles when a pass needs more (so a decode step copies only
/// its own key and value, not the whole cache as concatenation did).
pub struct KvCache {
    store: KvStore,
    /// How keys and values are stored (f32: as computed).
    kind: KvType,
    len: usize,
    /// The token ids of the positions held, for a pass that must run the
    /// sequence again ([`ModelConfig::reruns`]).
    ids: Vec<u32>,
}

/// Where a cache keeps its keys and values.
enum KvStore {
    /// On the CPU: host buffers that the fused attention
    /// (`vauban_kernels::attention`) writes and reads.
    Host(Vec<LayerCache>),
    /// On a GPU: `[1, kv_heads, capacity, head_dim]` tensors per block,
    /// in the model's dtype or f16.
    Device(Vec<Option<(Tensor, Tensor)>>),
}

/// Positions a cache holds before its first growth.
const KV_START: usize = 256;

impl KvCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How keys and values are stored.
    pub fn kind(&self) -> KvType {
        self.kind
    }

    /// Bytes allocated for keys and values (the capacity, not just `len`).
    pub fn bytes(&self) -> u64 {
        match &self.store {
            KvStore::Host(layers) => layers.iter().map(|l| l.bytes() as u64).sum(),
            KvStore::Device(layers) => layers
                .iter()
                .flatten()
                .map(|(k, v)| {
                    ((k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()) as u64
                })
                .sum(),
        }
    }

    /// Block `layer`'s host buffers (a CPU model's cache).
    fn host_layer(&mut self, layer: usize) -> Result<&mut LayerCache, ModelError> {
        match &mut self.store {
            KvStore::Host(layers) => Ok(&mut layers[layer]),
            KvStore::Device(_) => Err(ModelError::Compute(
                "a GPU model's KV cache was given to the CPU attention".into(),
            )),
        }
    }

    /// A copy to continue from separately: the host buffers cloned, a GPU's
    /// tensors copied (a clone would share the buffers written in place).
    pub fn fork(&self) -> Result<KvCache, ModelError> {
        let store = match &self.store {
            KvStore::Host(layers) => KvStore::Host(layers.clone()),
            KvStore::Device(layers) => KvStore::Device(
                layers
                    .iter()
                    .map(|l| match l {
                        Some((k, v)) => Ok(Some((k.copy()?, v.copy()?))),
                        None => Ok(None),
                    })
                    .collect::<Result<_, ModelError>>()?,
            ),
        };
        Ok(KvCache {
            store,
            kind: self.kind,
            len: self.len,
            ids: self.ids.clone(),
        })
    }

    /// Forgets every position from `to` on (the buffers stay; the next
    /// pass overwrites them).
    pub fn truncate(&mut self, to: usize) -> Result<(), String> {
        if to > self.len {
            return Err(format!(
                "cannot rewind to position {to}: the session holds {}",
                self.len
            ));
        }
        self.len = to;
        self.ids.truncate(to);
        Ok(())
    }

    /// Writes block `layer`'s new keys and values (`[1, kv_heads, t,
    /// head_dim]`) after the `len` positions held, and returns views of all
    /// `len + t`.
    fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), ModelError> {
        let (t, len) = (k.dim(2)?, self.len);
        let need = len + t;
        let KvStore::Device(layers) = &mut self.store else {
            return Err(ModelError::Compute(
                "a CPU model's KV cache was given to the GPU attention".into(),
            ));
        };
        let slot = &mut layers[layer];
        let cap = slot.as_ref().map_or(0, |(b, _)| b.dim(2).unwrap_or(0));
        let stored = match self.kind {
            KvType::F32 => k.dtype(),
            KvType::F16 => DType::F16,
        };
        if need > cap {
            let cap = need.max(2 * cap).max(KV_START);
            let (b, h, _, d) = k.dims4()?;
            let grow = |old: Option<&Tensor>| -> Result<Tensor, ModelError> {
                let buf = Tensor::zeros((b, h, cap, d), stored, k.device())?;
                if let Some(old) = old
                    && len > 0
                {
                    buf.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
                }
                Ok(buf)
            };
            let old = slot.take();
            *slot = Some((
                grow(old.as_ref().map(|o| &o.0))?,
                grow(old.as_ref().map(|o| &o.1))?,
            ));
        }
        let (kb, vb) = slot.as_ref().expect("allocated above");
        kb.slice_set(&k.to_dtype(stored)?.contiguous()?, 2, len)?;
        vb.slice_set(&v.to_dtype(stored)?.contiguous()?, 2, len)?;
        let (k_all, v_all) = (kb.narrow(2, 0, need)?, vb.narrow(2, 0, need)?);
        // The attention computes in the model's dtype.
        Ok((k_all.to_dtype(k.dtype())?, v_all.to_dtype(v.dtype())?))
    }
}

/// Which positions get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsAt {
    /// Every position (teacher-forced log-probabilities of a prompt).
    All,
    /// The last position only (generation).
    Last,
    /// Positions from this one (of the pass) on: a teacher-forced
    /// continuation after a prompt.
    From(usize),
}

/// One sequence of a batched pass ([`Llama::run_batch`]).
pub struct Seq<'s> {
    /// The next tokens of this sequence.
    pub ids: &'s [u32],
    /// What the sequence holds so far (`None`: a pass from position 0
    /// that keeps no cache).
    pub cache: Option<&'s mut KvCache>,
    pub hook: &'s mut dyn BlockHook<Tensor>,
    pub at: LogitsAt,
}

/// Where each sequence's rows sit in rotary space (see
/// [`Llama::positions`]).
struct Positions {
    tables: Vec<RopeTable>,
    ropes: Vec<Vec<(Tensor, Tensor)>>,
    masks: BTreeMap<Option<usize>, Vec<Option<Tensor>>>,
}

/// A batch laid out: each pass's tokens, each sequence's `(first row in
/// the batch, tokens, absolute position of the first)`, and every token.
struct Batch<'s> {
    passes: Vec<std::borrow::Cow<'s, [u32]>>,
    spans: Vec<(usize, usize, usize)>,
    ids: Vec<u32>,
}

/// A view of one sequence's rows of a `[1, rows, width]` batch tensor.
fn rows_of(
    y: &Tensor,
    (start, t, _): (usize, usize, usize),
    single: bool,
) -> Result<Tensor, ModelError> {
    Ok(match single {
        true => y.clone(),
        false => y.narrow(1, start, t)?,
    })
}

/// What a block wrote, for the hooks after it (the whole batch's rows).
struct Views<'a> {
    layer: usize,
    attn_out: &'a Tensor,
    mlp_out: &'a Tensor,
    router: Option<&'a Tensor>,
}

/// Runs each sequence's hook after block `views.layer` on its rows of the
/// residual stream `x`; each sequence's rows when some hook replaced
/// its own (`None`: the stream stays as it is). A hook's time counts in
/// its sequence's timing.
fn run_hooks(
    hooks: &mut [&mut dyn BlockHook<Tensor>],
    views: &Views<'_>,
    x: &Tensor,
    spans: &[(usize, usize, usize)],
    single: bool,
    timings: &mut [PassTiming],
) -> Result<Option<Vec<Tensor>>, ModelError> {
    let i = views.layer;
    let part = |y: &Tensor, j: usize| rows_of(y, spans[j], single);
    let mut parts = Vec::with_capacity(hooks.len());
    let mut replaced_any = false;
    for (j, hook) in hooks.iter_mut().enumerate() {
        let start = std::time::Instant::now();
        let resid = part(x, j)?;
        let router = match views.router {
            Some(r) => Some(part(r, j)?),
            None => None,
        };
        let view = BlockView {
            layer: i,
            offset: spans[j].2,
            attn_out: &part(views.attn_out, j)?,
            mlp_out: &part(views.mlp_out, j)?,
            router: router.as_ref(),
        };
        match hook.after_block(&view, &resid)? {
            Some(replaced) if replaced.dims() != resid.dims() => {
                return Err(ModelError::HookShape {
                    layer: i,
                    found: replaced.dims().to_vec(),
                    expected: resid.dims().to_vec(),
                });
            }
            Some(replaced) => {
                replaced_any = true;
                parts.push(replaced);
            }
            None => parts.push(resid),
        }
        timings[j].hook_ns += start.elapsed().as_nanos() as u64;
    }
    Ok(replaced_any.then_some(parts))
}

/// What one forward pass produced.
pub struct Forward {
    /// Next-token logits, `[positions, vocab]`, f32.
    pub logits: Tensor,
    /// The residual stream after each observed block, `[1, tokens, hidden]`.
    pub residuals: Vec<(usize, Tensor)>,
}

/// Wall-clock time inside a pass, split where the trace wants spans.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassTiming {
    /// Time spent in the hook (observation and intervention).
    pub hook_ns: u64,
    /// The final norm and output projection.
    pub lm_head_ns: u64,
}

/// A loaded llama-family model.
pub struct Llama {
    config: ModelConfig,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: Tensor,
    output: Linear,
    /// Each kind of rotary embedding the layers take (a block's `rope`
    /// indexes them: the global one, then the sliding layers' own base
    /// where they have one, Gemma 3), in LongRoPE's short and long sets
    /// (`ModelConfig::rope_set` picks one for each sequence of a pass):
    /// the frequencies on the host, for the CPU attention's tables, and on
    /// the device, for the tensor path's.
    ropes: Vec<[(Rope, Tensor); 2]>,
    /// Attention as one fused host call per block (the CPU's), or as
    /// tensor operations per sequence (a GPU's).
    fused_attention: bool,
    /// How new KV caches store keys and values.
    kv_type: KvType,
    device: Device,
}

/// Names a loader is asked for, in GGUF form (`blk.3.attn_q.weight`);
/// `Ok(None)` means the file does not hold it.
pub type LoadFn<'a> = dyn FnMut(&str) -> Result<Option<Weight>, ModelError> + 'a;

/// The weight a GGUF name gives, checked against a shape (an empty shape:
/// the caller checks); a missing weight is an error naming it.
type GetWeight<'a> = dyn FnMut(&str, &[usize]) -> Result<Weight, ModelError> + 'a;

impl Llama {
    /// Loads every weight through `load` (GGUF names), checking each shape
    /// against `config`.
    pub fn load(
        config: &ModelConfig,
        mode: WeightMode,
        load: &mut LoadFn<'_>,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let c = config;
        // The weight `name`, of `shape` (an empty shape: the caller checks).
        let mut get = |name: &str, shape: &[usize]| -> Result<Weight, ModelError> {
            let w = load(name)?.ok_or_else(|| ModelError::MissingTensor {
                tensor: name.to_owned(),
                path: None,
            })?;
            if !shape.is_empty() && w.dims() != shape {
                return Err(ModelError::ShapeMismatch {
                    tensor: name.to_owned(),
                    found: w.dims(),
                    expected: shape.to_vec(),
                    path: None,
                });
            }
            Ok(w)
        };
        let embed_w = get("token_embd.weight", &[c.vocab, c.hidden])?;
        let (embed, output) = if c.tied_embeddings {
            match (embed_w, mode) {
                // One quantized copy for both the lookup and the output matmul.
                (Weight::Blocks(q), WeightMode::Native) => {
                    let q = Arc::new(q.packed());
                    let output = Linear {
                        w: Proj::Kernel(q.clone()),
                        b: None,
                    };
                    (Embedding::Blocks(q), output)
                }
                // Keep the quantized copy for the output matmul, as llama.cpp does.
                (Weight::Quant(q), WeightMode::Native) => {
                    let embed = q.dequantize(device)?;
                    let output = Linear::new(Weight::Quant(q), None, mode, device)?;
                    (Embedding::Dense(embed), output)
                }
                (w, _) => {
                    let embed = w.dense(device)?;
                    let output = Linear::new(Weight::Dense(embed.clone()), None, mode, device)?;
                    (Embedding::Dense(embed), output)
                }
            }
        } else {
            let embed = match embed_w {
                Weight::Blocks(q) if mode == WeightMode::Native => Embedding::Blocks(Arc::new(q)),
                w => Embedding::Dense(w.dense(device)?),
            };
            let output = Linear::new(
                get("output.weight", &[c.vocab, c.hidden])?,
                None,
                mode,
                device,
            )?;
            (embed, output)
        };
        let rotary = match c.rope_style {
            RopeStyle::Interleaved => Rotary::Interleaved,
            RopeStyle::Half => Rotary::Half,
        };
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            blocks.push(Self::load_block(c, i, rotary, mode, &mut get, device)?);
        }
        let norm = get("output_norm.weight", &[c.hidden])?.dense(device)?;
        Ok(Llama {
            config: config.clone(),
            embed,
            blocks,
            norm,
            output,
            ropes: {
                let kinds = 1 + usize::from((0..c.layers).any(|i| c.local_rope(i)));
                let on_device = |r: Rope| -> Result<(Rope, Tensor), ModelError> {
                    let t = Tensor::new(r.inv_freqs.as_slice(), device)?;
                    Ok((r, t))
                };
                c.rope_sets(kinds)
                    .into_iter()
                    .map(|[short, long]| Ok([on_device(short)?, on_device(long)?]))
                    .collect::<Result<_, ModelError>>()?
            },
            fused_attention: device.is_cpu(),
            kv_type: KvType::F32,
            device: device.clone(),
        })
    }

    /// Block `i`'s weights through `get`: its projections (with biases
    /// where the family has them), its MLP or experts, its norms, and how
    /// its attention scores.
    fn load_block(
        c: &ModelConfig,
        i: usize,
        rotary: Rotary,
        mode: WeightMode,
        get: &mut GetWeight<'_>,
        device: &Device,
    ) -> Result<Block, ModelError> {
        let n = |s: &str, kind: &str| format!("blk.{i}.{s}.{kind}");
        let mut lin = |m: Matrix| -> Result<Linear, ModelError> {
            let (s, (rows, cols)) = (m.gguf_stem(), m.shape(c));
            let w = get(&n(s, "weight"), &[rows, cols])?;
            let b = match m.has_bias(c) {
                true => Some(get(&n(s, "bias"), &[rows])?.dense(device)?),
                false => None,
            };
            Linear::new(w, b, mode, device)
        };
        let (q, k, v, o) = (
            lin(Matrix::AttnQ)?,
            lin(Matrix::AttnK)?,
            lin(Matrix::AttnV)?,
            lin(Matrix::AttnOutput)?,
        );
        let ffn = match &c.experts {
            None => Ffn::Dense(Mlp {
                gate: lin(Matrix::FfnGate)?,
                up: lin(Matrix::FfnUp)?,
                down: lin(Matrix::FfnDown)?,
            }),
            Some(e) => {
                let router = Linear::new(
                    get(&n("ffn_gate_inp", "weight"), &[e.count, c.hidden])?,
                    None,
                    mode,
                    device,
                )?;
                // Each stack `[experts, out, in]` as one weight per expert.
                let mut stack = |stem: &str, shape| -> Result<Vec<Linear>, ModelError> {
                    let name = n(stem, "weight");
                    get(&name, &[])?
                        .experts(&name, e.count, shape, device)?
                        .into_iter()
                        .map(|w| Linear::new(w, None, mode, device))
                        .collect()
                };
                let gates = stack("ffn_gate_exps", [e.ffn, c.hidden])?;
                let ups = stack("ffn_up_exps", [e.ffn, c.hidden])?;
                let downs = stack("ffn_down_exps", [c.hidden, e.ffn])?;
                let experts = gates
                    .into_iter()
                    .zip(ups)
                    .zip(downs)
                    .map(|((gate, up), down)| Mlp { gate, up, down })
                    .collect();
                Ffn::Experts(Moe {
                    router,
                    experts,
                    routing: e.clone(),
                })
            }
        };
        let mut norm = |stem: &str| -> Result<Option<Tensor>, ModelError> {
            match c.norm_width(stem) {
                Some(width) => Ok(Some(get(&n(stem, "weight"), &[width])?.dense(device)?)),
                None => Ok(None),
            }
        };
        Ok(Block {
            attn_norm: norm("attn_norm")?,
            q,
            k,
            v,
            q_norm: norm("attn_q_norm")?,
            k_norm: norm("attn_k_norm")?,
            o,
            post_attn_norm: norm("post_attention_norm")?,
            ffn_norm: norm("ffn_norm")?,
            ffn,
            post_ffn_norm: norm("post_ffw_norm")?,
            scoring: Scoring {
                rotary,
                scale: c.attn_scale(),
                softcap: c.block.attn_softcap,
                window: c.windows[i],
            },
            rope: usize::from(c.local_rope(i)),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn vocab(&self) -> usize {
        self.config.vocab
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether any matrix runs quantized.
    pub fn is_quantized(&self) -> bool {
        self.output.is_quantized()
            || self
                .blocks
                .iter()
                .any(|b| b.linears().iter().any(|l| l.is_quantized()))
    }

    /// What multiplies the matrices: `vauban-kernels avx512-vnni packed
    /// (Q4_K, Q6_K)` when any runs on vauban's kernels (with the types
    /// they hold, and whether they were repacked), else candle's matmul.
    pub fn kernel(&self) -> String {
        let mut formats: Vec<&str> = Vec::new();
        let mut packed = false;
        let all = self.blocks.iter().flat_map(Block::linears);
        for l in all.chain([&self.output]) {
            if let Proj::Kernel(q) = &l.w {
                packed |= q.is_packed();
            }
            if let Some(f) = l.kernel_format()
                && !formats.contains(&f.name())
            {
                formats.push(f.name());
            }
        }
        match (formats.is_empty(), self.is_quantized()) {
            (false, _) => format!(
                "vauban-kernels {}{} ({})",
                Isa::detect().name(),
                if packed { " packed" } else { "" },
                formats.join(", ")
            ),
            (true, true) => "candle quantized matmul".into(),
            (true, false) => "candle f32 matmul".into(),
        }
    }

    /// Bytes of every matrix a decode step multiplies (each block's seven
    /// and the output projection): what one token reads from memory, near
    /// enough, for the bandwidth bound on decode. (A mixture of experts
    /// counts every expert: an upper bound.)
    pub fn matrix_bytes(&self) -> u64 {
        let blocks: u64 = self
            .blocks
            .iter()
            .flat_map(Block::linears)
            .map(Linear::bytes)
            .sum();
        blocks + self.output.bytes()
    }

    /// Runs attention as tensor operations per sequence, as on a GPU,
    /// instead of the CPU's fused call: what tests compare the two paths
    /// with. Caches made before this call no longer fit the model.
    pub fn use_tensor_attention(&mut self) {
        self.fused_attention = false;
    }

    /// Stores keys and values of caches made from now on as `kind`.
    pub fn set_kv_type(&mut self, kind: KvType) {
        self.kv_type = kind;
    }

    /// How this model's KV caches store keys and values.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        let layers = self.config.layers;
        KvCache {
            store: match self.fused_attention {
                true => KvStore::Host(vec![LayerCache::new(self.kv_type); layers]),
                false => KvStore::Device((0..layers).map(|_| None).collect()),
            },
            kind: self.kv_type,
            len: 0,
            ids: Vec::new(),
        }
    }

    /// Checks `layers` against the model, naming the first out of range.
    pub fn check_layers(&self, layers: &[usize]) -> Result<(), ModelError> {
        match layers.iter().find(|&&l| l >= self.config.layers) {
            Some(&layer) => Err(ModelError::LayerOutOfRange {
                layer,
                count: self.config.layers,
            }),
            None => Ok(()),
        }
    }

    /// A whole forward pass over `ids` from position 0, keeping the residual
    /// stream after the blocks in `observe`, logits at every position.
    pub fn forward(&self, ids: &[u32], observe: &[usize]) -> Result<Forward, ModelError> {
        self.check_layers(observe)?;
        let mut hook = Observe {
            layers: observe,
            residuals: Vec::new(),
        };
        let (logits, _) = self.run(ids, None, &mut hook, LogitsAt::All)?;
        Ok(Forward {
            logits,
            residuals: hook.residuals,
        })
    }

    /// Runs `ids` as the next positions after what `cache` holds (from 0
    /// without a cache), calling `hook` after every block: a batch of one.
    pub fn run(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        hook: &mut dyn BlockHook<Tensor>,
        at: LogitsAt,
    ) -> Result<(Tensor, PassTiming), ModelError> {
        let mut seqs = [Seq {
            ids,
            cache,
            hook,
            at,
        }];
        let [out] = <[_; 1]>::try_from(self.run_batch(&mut seqs)?).expect("one per sequence");
        Ok(out)
    }

    /// One forward pass over several independent sequences (a ragged
    /// batch): their tokens are concatenated, so every weight matrix is
    /// read once for all of them, while attention, rotary positions, the
    /// KV cache and the hook stay per sequence. A sequence's result does
    /// not depend on the others beyond the kernels' rounding (each row's
    /// activations are quantized on their own). Returns each sequence's
    /// logits (`[positions, vocab]`, f32) and timing: its own hook's time,
    /// and the whole pass's final norm and output projection.
    pub fn run_batch(&self, seqs: &mut [Seq<'_>]) -> Result<Vec<(Tensor, PassTiming)>, ModelError> {
        let c = &self.config;
        let Batch {
            passes,
            spans,
            ids: all_ids,
        } = self.plan_batch(seqs)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let batch = seqs.len();
        let single = batch == 1;
        let n = all_ids.len();
        let part = |y: &Tensor, j: usize| rows_of(y, spans[j], single);
        let join = |mut parts: Vec<Tensor>| -> Result<Tensor, ModelError> {
            Ok(match parts.len() {
                1 => parts.pop().expect("one part"),
                _ => Tensor::cat(&parts, 1)?,
            })
        };
        // Each sequence's cache; a sequence without one gets a scratch
        // cache for this pass (attention needs its keys somewhere).
        let mut scratch: Vec<KvCache> = seqs
            .iter()
            .filter(|s| s.cache.is_none())
            .map(|_| self.new_cache())
            .collect();
        let mut scratch = scratch.iter_mut();
        let mut caches: Vec<&mut KvCache> = Vec::with_capacity(seqs.len());
        let mut hooks: Vec<&mut dyn BlockHook<Tensor>> = Vec::with_capacity(seqs.len());
        let mut ats = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            caches.push(match s.cache.as_deref_mut() {
                Some(c) => c,
                None => scratch
                    .next()
                    .expect("one scratch cache per sequence without"),
            });
            hooks.push(&mut *s.hook);
            ats.push(s.at);
        }
        // On the CPU, attention is one fused call per block for the whole
        // batch (the rotary angles of every row computed once per pass);
        // on a GPU, tensor operations per sequence.
        let host = self.fused_attention;
        let heads = Heads {
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
        };
        let positions = self.positions(&spans, host)?;
        let (tables, ropes, masks) = (&positions.tables, &positions.ropes, &positions.masks);
        let mut x = self.embed.lookup(&all_ids, &self.device)?.unsqueeze(0)?;
        if let Some(scale) = c.block.embed_scale {
            x = (x * scale as f64)?;
        }
        let mut timings = vec![PassTiming::default(); batch];
        for (i, b) in self.blocks.iter().enumerate() {
            let h = norm_opt(&x, &b.attn_norm, c.rms_eps)?;
            let [q, k, v] = Linear::forward_group([&b.q, &b.k, &b.v], &h)?;
            let (q, k) = (
                self.qk_norm(&q, &b.q_norm, c.heads)?,
                self.qk_norm(&k, &b.k_norm, c.kv_heads)?,
            );
            let mut ys = Vec::with_capacity(batch);
            if host {
                let table = &tables[b.rope];
                let (q, k, v) = (host_rows(&q)?, host_rows(&k)?, host_rows(&v)?);
                let mut out = vec![0f32; n * c.heads * c.head_dim];
                let mut rows = Vec::with_capacity(caches.len());
                for (cache, &(first, t, offset)) in caches.iter_mut().zip(&spans) {
                    rows.push(SeqRows {
                        first,
                        rows: t,
                        offset,
                        cache: cache.host_layer(i)?,
                    });
                }
                attention::attend(&heads, &b.scoring, table, &q, &k, &v, &mut rows, &mut out);
                ys.push(
                    Tensor::from_vec(out, (1, n, c.heads * c.head_dim), &self.device)?
                        .to_dtype(x.dtype())?,
                );
            }
            for (j, cache) in caches.iter_mut().enumerate().filter(|_| !host) {
                let (q, k, v) = (part(&q, j)?, part(&k, j)?, part(&v, j)?);
                let mask = masks[&b.scoring.window][j].as_ref();
                ys.push(self.attend_one(b, i, [&q, &k, &v], cache, &ropes[j][b.rope], mask)?);
            }
            let attn_out = norm_opt(&b.o.forward(&join(ys)?)?, &b.post_attn_norm, c.rms_eps)?;
            x = (x + &attn_out)?;
            let h = norm_opt(&x, &b.ffn_norm, c.rms_eps)?;
            let (mlp_out, router) = match &b.ffn {
                Ffn::Dense(mlp) => (mlp.forward(&h, c.block.activation)?, None),
                Ffn::Experts(moe) => {
                    let (out, probs) = moe.forward(&h, c.block.activation)?;
                    (out, Some(probs))
                }
            };
            let mlp_out = norm_opt(&mlp_out, &b.post_ffn_norm, c.rms_eps)?;
            x = (x + &mlp_out)?;
            let views = Views {
                layer: i,
                attn_out: &attn_out,
                mlp_out: &mlp_out,
                router: router.as_ref(),
            };
            if let Some(parts) = run_hooks(&mut hooks, &views, &x, &spans, single, &mut timings)? {
                x = join(parts)?;
            }
        }
        for ((cache, &(_, t, _)), ids) in caches.iter_mut().zip(&spans).zip(&passes) {
            cache.len += t;
            cache.ids.extend_from_slice(ids);
        }
        self.lm_head(x, &ats, &spans, timings)
    }

    /// The rotary embedding and masks of every sequence's positions: on
    /// the CPU (`host`), one rotary table per kind (a Gemma 3 has two) with
    /// each sequence's rows at the frequencies its reach gives them; on the
    /// tensor path, each sequence's tables per base and its masks per
    /// window the blocks use.
    fn positions(
        &self,
        spans: &[(usize, usize, usize)],
        host: bool,
    ) -> Result<Positions, ModelError> {
        let c = &self.config;
        // One rotary table per kind (a Gemma 3 has two), each sequence's
        // rows with the frequencies its reach gives them.
        let tables: Vec<RopeTable> = match host {
            true => self
                .ropes
                .iter()
                .map(|sets| {
                    let mut table = RopeTable::empty(c.rotary_dim / 2);
                    for &(_, t, offset) in spans {
                        let (rope, _) = &sets[c.rope_set(offset + t)];
                        table.extend(&rope.inv_freqs, offset..offset + t, rope.magnitude);
                    }
                    table
                })
                .collect(),
            false => Vec::new(),
        };
        // On the tensor path: each sequence's rotary tables (per base) and
        // its masks (per window the blocks use).
        let mut ropes: Vec<Vec<(Tensor, Tensor)>> = Vec::new();
        let mut masks: BTreeMap<Option<usize>, Vec<Option<Tensor>>> = BTreeMap::new();
        if !host {
            for &(_, t, offset) in spans {
                ropes.push(
                    (0..self.ropes.len())
                        .map(|r| self.rope(r, offset, t))
                        .collect::<Result<_, _>>()?,
                );
            }
            for window in c.windows.iter().copied() {
                if let std::collections::btree_map::Entry::Vacant(slot) = masks.entry(window) {
                    slot.insert(
                        spans
                            .iter()
                            .map(|&(_, t, offset)| causal_mask(offset, t, window, &self.device))
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
        }
        Ok(Positions {
            tables,
            ropes,
            masks,
        })
    }

    /// Checks each sequence's pass and lays the batch out: each pass's
    /// tokens (a sequence that crosses LongRoPE's switch runs from position
    /// 0 again), and where each sits in the batch.
    fn plan_batch<'s>(&self, seqs: &mut [Seq<'s>]) -> Result<Batch<'s>, ModelError> {
        let c = &self.config;
        // A sequence whose pass crosses LongRoPE's switch runs from position
        // 0 again: its cached ids before this pass's, its cache emptied, and
        // the logits asked for still this pass's rows.
        let mut rerun: Vec<Option<Vec<u32>>> = Vec::with_capacity(seqs.len());
        for s in seqs.iter_mut() {
            let again = match s.cache.as_deref_mut() {
                Some(cache) if c.reruns(cache.len, s.ids.len()) => {
                    let past = cache.len;
                    let mut ids = std::mem::take(&mut cache.ids);
                    ids.extend_from_slice(s.ids);
                    cache.len = 0;
                    s.at = match s.at {
                        LogitsAt::All => LogitsAt::From(past),
                        LogitsAt::Last => LogitsAt::Last,
                        LogitsAt::From(p) => LogitsAt::From(past + p),
                    };
                    Some(ids)
                }
                _ => None,
            };
            rerun.push(again);
        }
        let passes: Vec<std::borrow::Cow<'_, [u32]>> = seqs
            .iter()
            .zip(rerun)
            .map(|(s, again)| match again {
                Some(ids) => ids.into(),
                None => s.ids.into(),
            })
            .collect();
        // (first row in the batch, tokens, absolute position of the first)
        let mut spans = Vec::with_capacity(seqs.len());
        let mut all_ids = Vec::new();
        for (s, ids) in seqs.iter().zip(&passes) {
            if ids.is_empty() {
                return Err(ModelError::EmptyInput);
            }
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= c.vocab) {
                return Err(ModelError::TokenOutOfRange { id, vocab: c.vocab });
            }
            let offset = s.cache.as_ref().map_or(0, |c| c.len);
            let t = ids.len();
            if let Some(limit) = c.context_length
                && offset + t > limit
            {
                return Err(ModelError::ContextExceeded {
                    needed: offset + t,
                    limit,
                });
            }
            if let LogitsAt::From(p) = s.at
                && p >= t
            {
                return Err(ModelError::Compute(
                    format!("logits asked from position {p} of a pass of {t} tokens").into(),
                ));
            }
            spans.push((all_ids.len(), t, offset));
            all_ids.extend_from_slice(ids);
        }
        Ok(Batch {
            passes,
            spans,
            ids: all_ids,
        })
    }

    /// Attention of one sequence on the tensor path (a GPU): its rows of
    /// the block's queries, keys and values, rotated, appended to its
    /// cache, scored (grouped-query, soft-capped and masked as the block
    /// says) and mixed; `[1, rows, heads · head_dim]`.
    fn attend_one(
        &self,
        b: &Block,
        i: usize,
        [q, k, v]: [&Tensor; 3],
        cache: &mut KvCache,
        (cos, sin): &(Tensor, Tensor),
        mask: Option<&Tensor>,
    ) -> Result<Tensor, ModelError> {
        let c = &self.config;
        let t = q.dim(1)?;
        let rep = c.heads / c.kv_heads;
        let rotate = |x: &Tensor| -> Result<Tensor, ModelError> {
            // A partial rotary embedding turns the first dimensions only.
            let (turned, kept) = match c.rotary_dim < c.head_dim {
                true => (
                    x.narrow(D::Minus1, 0, c.rotary_dim)?.contiguous()?,
                    Some(x.narrow(D::Minus1, c.rotary_dim, c.head_dim - c.rotary_dim)?),
                ),
                false => (x.clone(), None),
            };
            let turned = match c.rope_style {
                RopeStyle::Interleaved => rope_i(&turned, cos, sin)?,
                RopeStyle::Half => rope(&turned, cos, sin)?,
            };
            Ok(match kept {
                Some(kept) => Tensor::cat(&[&turned, &kept], D::Minus1)?.contiguous()?,
                None => turned,
            })
        };
        let split = |y: &Tensor, heads: usize| -> Result<Tensor, ModelError> {
            Ok(y.reshape((1, t, heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = rotate(&split(q, c.heads)?)?;
        let k = rotate(&split(k, c.kv_heads)?)?;
        let v = split(v, c.kv_heads)?;
        let (k, v) = cache.append(i, &k, &v)?;
        let total = k.dim(2)?;
        // Grouped-query attention without copying keys and values per
        // query head: the `rep` query heads that share a key/value head
        // are stacked as rows of one matrix against it.
        let q = q.reshape((1, c.kv_heads, rep * t, c.head_dim))?;
        let scores = (q.matmul(&k.t()?)? * b.scoring.scale as f64)?;
        let scores = match b.scoring.softcap {
            Some(cap) => softcap(&scores, cap)?,
            None => scores,
        };
        let scores = match mask {
            Some(m) => scores
                .reshape((1, c.kv_heads, rep, t, total))?
                .broadcast_add(m)?
                .reshape((1, c.kv_heads, rep * t, total))?,
            None => scores,
        };
        Ok(softmax_last_dim(&scores)?
            .matmul(&v)?
            .reshape((1, c.heads, t, c.head_dim))?
            .transpose(1, 2)?
            .reshape((1, t, c.heads * c.head_dim))?)
    }

    /// The final norm and output projection, on the rows asked for only
    /// (the output matrix is the largest: a decode step needs one row);
    /// each sequence's logits with its timing.
    fn lm_head(
        &self,
        x: Tensor,
        ats: &[LogitsAt],
        spans: &[(usize, usize, usize)],
        timings: Vec<PassTiming>,
    ) -> Result<Vec<(Tensor, PassTiming)>, ModelError> {
        let c = &self.config;
        let n = x.dim(1)?;
        let single = spans.len() == 1;
        let start = std::time::Instant::now();
        let rows: Vec<(usize, usize)> = ats
            .iter()
            .zip(spans)
            .map(|(at, &(first, t, _))| match at {
                LogitsAt::All => (first, t),
                LogitsAt::Last => (first + t - 1, 1),
                &LogitsAt::From(p) => (first + p, t - p),
            })
            .collect();
        let asked: usize = rows.iter().map(|r| r.1).sum();
        let x = if asked == n {
            x
        } else {
            let mut picked = Vec::with_capacity(rows.len());
            for &(first, n) in &rows {
                picked.push(x.narrow(1, first, n)?);
            }
            match picked.len() {
                1 => picked.pop().expect("one part"),
                _ => Tensor::cat(&picked, 1)?,
            }
        };
        let x = rms_norm(&x, &self.norm, c.rms_eps as f32)?;
        let logits = self.output.forward(&x)?.squeeze(0)?.to_dtype(DType::F32)?;
        let logits = match c.block.final_softcap {
            Some(cap) => softcap(&logits, cap)?,
            None => logits,
        };
        let lm_head_ns = start.elapsed().as_nanos() as u64;
        let mut out = Vec::with_capacity(spans.len());
        let mut row = 0;
        for ((_, n), mut timing) in rows.into_iter().zip(timings) {
            timing.lm_head_ns = lm_head_ns;
            let l = if single {
                logits.clone()
            } else {
                logits.narrow(0, row, n)?
            };
            out.push((l, timing));
            row += n;
        }
        Ok(out)
    }

    /// RMSNorm of queries or keys (`[1, rows, heads · head_dim]`) before
    /// RoPE, per head or over the whole projection as the weight's width
    /// says; unchanged where the block has no such norm.
    fn qk_norm(&self, x: &Tensor, w: &Option<Tensor>, heads: usize) -> Result<Tensor, ModelError> {
        let Some(w) = w else {
            return Ok(x.clone());
        };
        let eps = self.config.rms_eps as f32;
        let (b, rows, width) = x.dims3()?;
        Ok(match w.dim(0)? == width {
            true => rms_norm(x, w, eps)?,
            false => rms_norm(&x.reshape((b, rows, heads, width / heads))?, w, eps)?
                .reshape((b, rows, width))?,
        })
    }

    /// Rotary tables of RoPE kind `r` for positions `offset..offset + t`,
    /// `[t, rotary_dim / 2]` each (cos and sin scaled by the magnitude
    /// where LongRoPE has one).
    fn rope(&self, r: usize, offset: usize, t: usize) -> Result<(Tensor, Tensor), ModelError> {
        let (rope, inv) = &self.ropes[r][self.config.rope_set(offset + t)];
        let pos = Tensor::arange(offset as u32, (offset + t) as u32, &self.device)?
            .to_dtype(DType::F32)?;
        let freqs = pos.unsqueeze(1)?.broadcast_mul(&inv.unsqueeze(0)?)?;
        let (cos, sin) = (freqs.cos()?, freqs.sin()?);
        Ok(match rope.magnitude {
            1.0 => (cos.contiguous()?, sin.contiguous()?),
            m => (
                (cos * m as f64)?.contiguous()?,
                (sin * m as f64)?.contiguous()?,
            ),
        })
    }

    fn matrix(&self, layer: usize, which: Matrix) -> Result<&Linear, ModelError> {
        self.check_layers(&[layer])?;
        let b = &self.blocks[layer];
        Ok(match (which, &b.ffn) {
            (Matrix::AttnQ, _) => &b.q,
            (Matrix::AttnK, _) => &b.k,
            (Matrix::AttnV, _) => &b.v,
            (Matrix::AttnOutput, _) => &b.o,
            (Matrix::FfnGate, Ffn::Dense(m)) => &m.gate,
            (Matrix::FfnUp, Ffn::Dense(m)) => &m.up,
            (Matrix::FfnDown, Ffn::Dense(m)) => &m.down,
            (m, Ffn::Experts(moe)) => {
                return Err(ModelError::Compute(
                    format!(
                        "layer {layer}'s MLP is a mixture of {} experts: it has no single {} matrix",
                        moe.experts.len(),
                        m.gguf_stem()
                    )
                    .into(),
                ));
            }
        })
    }

    /// A block's matrix, dequantized to f32, `[out, in]`; for a mixture
    /// of experts, every expert's, stacked by rows (`[experts · out, in]`).
    pub fn weight(&self, layer: usize, which: Matrix) -> Result<Tensor, ModelError> {
        self.check_layers(&[layer])?;
        if let (Ffn::Experts(moe), Matrix::FfnGate | Matrix::FfnUp | Matrix::FfnDown) =
            (&self.blocks[layer].ffn, which)
        {
            return Ok(Tensor::cat(&moe.matrices(which)?, 0)?);
        }
        self.matrix(layer, which)?.dense()
    }

    /// The token embedding, `[vocab, hidden]`, f32.
    pub fn embedding(&self) -> Result<Tensor, ModelError> {
        self.embed.dense()
    }

    /// Replaces a block's matrix with a dense one of the same shape.
    pub fn set_weight(&mut self, layer: usize, which: Matrix, w: Tensor) -> Result<(), ModelError> {
        let old = self.matrix(layer, which)?;
        let expected = old.dense()?.dims().to_vec();
        if w.dims() != expected {
            return Err(ModelError::ShapeMismatch {
                tensor: format!("blk.{layer}.{}.weight", which.gguf_stem()),
                found: w.dims().to_vec(),
                expected,
                path: None,
            });
        }
        let b = &mut self.blocks[layer];
        let slot = match (which, &mut b.ffn) {
            (Matrix::AttnQ, _) => &mut b.q,
            (Matrix::AttnK, _) => &mut b.k,
            (Matrix::AttnV, _) => &mut b.v,
            (Matrix::AttnOutput, _) => &mut b.o,
            (Matrix::FfnGate, Ffn::Dense(m)) => &mut m.gate,
            (Matrix::FfnUp, Ffn::Dense(m)) => &mut m.up,
            (Matrix::FfnDown, Ffn::Dense(m)) => &mut m.down,
            (_, Ffn::Experts(_)) => unreachable!("matrix() refused it above"),
        };
        slot.w = Proj::Candle(QMatMul::Tensor(
            w.to_dtype(DType::F32)?.to_device(&self.device)?,
        ));
        Ok(())
    }

    /// Rank-1 orthogonalization of the matrices that write into the residual
    /// stream: `W ← W − r̂(r̂ᵀW)` for each `[hidden, in]` matrix in `targets`
    /// of every layer in `layers`, so no block can write along `r̂` any more
    /// (the weight form of directional ablation). `direction` has width
    /// `hidden`; it is normalised here. Returns the Frobenius norm of each
    /// change, by (layer, matrix).
    pub fn orthogonalize(
        &mut self,
        direction: &Tensor,
        layers: &[usize],
        targets: &[Matrix],
    ) -> Result<BTreeMap<(usize, Matrix), f32>, ModelError> {
        self.check_layers(layers)?;
        let hidden = self.config.hidden;
        let d = direction.to_dtype(DType::F32)?.flatten_all()?;
        if d.dim(0)? != hidden {
            return Err(ModelError::DirectionWidth {
                found: d.dim(0)?,
                hidden,
            });
        }
        let norm = d.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
        if !(norm.is_finite() && norm > 0.0) {
            return Err(ModelError::DegenerateDirection { norm });
        }
        let r = (d / norm as f64)?.to_device(&self.device)?.unsqueeze(1)?; // [hidden, 1]
        let mut changes = BTreeMap::new();
        for &layer in layers {
            for &which in targets {
                if !matches!(which, Matrix::AttnOutput | Matrix::FfnDown) {
                    return Err(ModelError::NotResidualWriter { matrix: which });
                }
                // A mixture of experts writes a weighted sum of its
                // experts' outputs: editing every expert's down matrix
                // removes the direction from the sum exactly.
                if let (Ffn::Experts(moe), Matrix::FfnDown) = (&mut self.blocks[layer].ffn, which) {
                    let mut squares = 0f32;
                    for expert in &mut moe.experts {
                        let w = expert.down.dense()?;
                        let delta = r.matmul(&r.t()?.matmul(&w)?)?;
                        squares += delta.sqr()?.sum_all()?.to_scalar::<f32>()?;
                        expert.down.w = Proj::Candle(QMatMul::Tensor((w - delta)?));
                    }
                    changes.insert((layer, which), squares.sqrt());
                    continue;
                }
                let w = self.weight(layer, which)?; // [hidden, in]
                let delta = r.matmul(&r.t()?.matmul(&w)?)?;
                let dnorm = delta.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
                self.set_weight(layer, which, (w - delta)?)?;
                changes.insert((layer, which), dnorm);
            }
        }
        Ok(changes)
    }

    /// Every weight as dense f32 tensors, by GGUF name (for export).
    pub fn dense_weights(&self) -> Result<Vec<(String, Tensor)>, ModelError> {
        let mut out = vec![
            ("token_embd.weight".to_owned(), self.embed.dense()?),
            ("output_norm.weight".to_owned(), self.norm.clone()),
        ];
        if !self.config.tied_embeddings {
            out.push(("output.weight".to_owned(), self.output.dense()?));
        }
        for (i, b) in self.blocks.iter().enumerate() {
            for (stem, w) in [
                ("attn_norm", &b.attn_norm),
                ("attn_q_norm", &b.q_norm),
                ("attn_k_norm", &b.k_norm),
                ("post_attention_norm", &b.post_attn_norm),
                ("ffn_norm", &b.ffn_norm),
                ("post_ffw_norm", &b.post_ffn_norm),
            ] {
                if let Some(w) = w {
                    out.push((format!("blk.{i}.{stem}.weight"), w.clone()));
                }
            }
            let own = match b.ffn {
                Ffn::Dense(_) => &Matrix::ALL[..],
                Ffn::Experts(_) => &Matrix::ALL[..4],
            };
            for &which in own {
                let lin = self.matrix(i, which)?;
                out.push((
                    format!("blk.{i}.{}.weight", which.gguf_stem()),
                    lin.dense()?,
                ));
                if let Some(bias) = &lin.b {
                    out.push((format!("blk.{i}.{}.bias", which.gguf_stem()), bias.clone()));
                }
            }
            // The router and the experts' matrices stacked, `[experts, out, in]`,
            // as GGUF holds them.
            if let Ffn::Experts(moe) = &b.ffn {
                out.push((format!("blk.{i}.ffn_gate_inp.weight"), moe.router.dense()?));
                for (stem, which) in [
                    ("ffn_gate_exps", Matrix::FfnGate),
                    ("ffn_up_exps", Matrix::FfnUp),
                    ("ffn_down_exps", Matrix::FfnDown),
                ] {
                    let per = moe.matrices(which)?;
                    out.push((format!("blk.{i}.{stem}.weight"), Tensor::stack(&per, 0)?));
                }
            }
        }
        Ok(out)
    }
}

/// `[t, offset + t]` with `-inf` where a query would see a later key, or
/// (a sliding layer) one `window` or more positions back; `None` where
/// nothing is masked (a single query within the window sees everything
/// cached).
fn causal_mask(
    offset: usize,
    t: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Option<Tensor>, ModelError> {
    let total = offset + t;
    if t == 1 && window.is_none_or(|w| total <= w) {
        return Ok(None);
    }
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..total).map(move |j| {
                let pos = offset + i;
                if j > pos || window.is_some_and(|w| pos - j >= w) {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Some(Tensor::from_slice(&mask, (t, total), device)?))
}

/// A tensor's values on the host, as f32, in row-major order.
fn host_rows(t: &Tensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Log-softmax over the last dimension, in f32.
pub fn log_softmax(logits: &Tensor) -> Result<Tensor, ModelError> {
    Ok(candle_nn::ops::log_softmax(
        &logits.to_dtype(DType::F32)?,
        D::Minus1,
    )?)
}
