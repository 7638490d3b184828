//! The llama-family forward pass in libtorch, following the same model
//! description as candle's (`vauban_exec::model::config::LlamaConfig`:
//! sizes, RoPE style and scaling, QKV bias, tied embeddings) and the same
//! GGUF tensor names, one small struct per part.
//!
//! Weights are read from a GGUF file and dequantized to f32 at load (the
//! Torch backend has no block kernels); the dtype on the device is a
//! setting (f32 on CPU; bf16 or f16 on a GPU).

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use tch::{Device, Kind, Tensor};
use vauban_exec::model::config::{LlamaConfig, RopeStyle};

/// What loading or running the model can fail on, naming the file or tensor.
#[derive(Debug, thiserror::Error)]
pub enum TorchError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Gguf { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}` is missing")]
    Missing { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}` is {got:?}, expected {want:?}")]
    Shape {
        path: PathBuf,
        name: String,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("the model configuration: {0}")]
    Config(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
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
    fn forward(&self, x: &Tensor) -> Tensor {
        let var = x.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
        x * (var + self.eps).rsqrt() * &self.scale
    }
}

/// Grouped-query self-attention with rotary positions.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

/// The gated MLP: `down(silu(gate(x)) * up(x))`.
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn forward(&self, x: &Tensor) -> Tensor {
        self.down
            .forward(&(self.gate.forward(x).silu() * self.up.forward(x)))
    }
}

/// One transformer block: attention and MLP, each after its norm and added
/// to the residual stream.
struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    mlp_norm: RmsNorm,
    mlp: Mlp,
}

/// Called after every block with the residual stream (`[tokens, hidden]`)
/// and the absolute position of its first token; a returned tensor
/// replaces it (an intervention).
pub trait BlockHook {
    fn after_block(&mut self, layer: usize, offset: usize, resid: &Tensor) -> Option<Tensor>;
}

/// A hook that does nothing.
pub struct NoHook;

impl BlockHook for NoHook {
    fn after_block(&mut self, _: usize, _: usize, _: &Tensor) -> Option<Tensor> {
        None
    }
}

/// A llama-family model in libtorch.
pub struct TorchLlama {
    config: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: RmsNorm,
    output: Linear,
    inv_freqs: Tensor,
    device: Device,
}

/// Reads GGUF tensors by name, dequantized to f32.
struct GgufReader {
    path: PathBuf,
    file: std::fs::File,
    content: gguf_file::Content,
    device: Device,
}

impl GgufReader {
    fn gguf(&self, message: impl std::fmt::Display) -> TorchError {
        TorchError::Gguf {
            path: self.path.clone(),
            message: message.to_string(),
        }
    }

    fn get(&mut self, name: &str) -> Result<Option<Tensor>, TorchError> {
        if !self.content.tensor_infos.contains_key(name) {
            return Ok(None);
        }
        let q = self
            .content
            .tensor(&mut self.file, name, &candle_core::Device::Cpu)
            .map_err(|e| self.gguf(format!("tensor `{name}`: {e}")))?;
        let t = q
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .map_err(|e| self.gguf(format!("tensor `{name}`: {e}")))?;
        let dims: Vec<i64> = t.dims().iter().map(|&d| d as i64).collect();
        let values = t
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| self.gguf(format!("tensor `{name}`: {e}")))?;
        Ok(Some(
            Tensor::from_slice(&values)
                .reshape(dims)
                .to_device(self.device),
        ))
    }

    fn need(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, TorchError> {
        let t = self.get(name)?.ok_or_else(|| TorchError::Missing {
            path: self.path.clone(),
            name: name.to_owned(),
        })?;
        let got: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        if got != shape {
            return Err(TorchError::Shape {
                path: self.path.clone(),
                name: name.to_owned(),
                got,
                want: shape.to_vec(),
            });
        }
        Ok(t)
    }

    fn linear(&mut self, stem: &str, out: usize, inp: usize) -> Result<Linear, TorchError> {
        Ok(Linear {
            weight: self.need(&format!("{stem}.weight"), &[out, inp])?,
            bias: self.get(&format!("{stem}.bias"))?,
        })
    }
}

impl TorchLlama {
    /// Loads a GGUF file's weights (dequantized to f32) onto `device`.
    pub fn from_gguf(path: &Path, device: Device) -> Result<TorchLlama, TorchError> {
        let config =
            vauban_exec::model::read_config(path).map_err(|e| TorchError::Config(e.to_string()))?;
        let mut file = std::fs::File::open(path).map_err(|source| TorchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| TorchError::Gguf {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut r = GgufReader {
            path: path.to_path_buf(),
            file,
            content,
            device,
        };
        let c = &config;
        let (q_width, kv_width) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let embed = r.need("token_embd.weight", &[c.vocab, c.hidden])?;
        let norm = |scale: Tensor| RmsNorm {
            scale,
            eps: c.rms_eps,
        };
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let b = |part: &str| format!("blk.{i}.{part}");
            blocks.push(Block {
                attn_norm: norm(r.need(&b("attn_norm.weight"), &[c.hidden])?),
                attn: Attention {
                    q: r.linear(&b("attn_q"), q_width, c.hidden)?,
                    k: r.linear(&b("attn_k"), kv_width, c.hidden)?,
                    v: r.linear(&b("attn_v"), kv_width, c.hidden)?,
                    o: r.linear(&b("attn_output"), c.hidden, q_width)?,
                },
                mlp_norm: norm(r.need(&b("ffn_norm.weight"), &[c.hidden])?),
                mlp: Mlp {
                    gate: r.linear(&b("ffn_gate"), c.ffn, c.hidden)?,
                    up: r.linear(&b("ffn_up"), c.ffn, c.hidden)?,
                    down: r.linear(&b("ffn_down"), c.hidden, c.ffn)?,
                },
            });
        }
        let final_norm = norm(r.need("output_norm.weight", &[c.hidden])?);
        let output = match r.get("output.weight")? {
            Some(weight) => Linear { weight, bias: None },
            None => Linear {
                weight: embed.shallow_clone(),
                bias: None,
            },
        };
        let inv_freqs = Tensor::from_slice(&c.inv_freqs()).to_device(device);
        Ok(TorchLlama {
            config,
            embed,
            blocks,
            norm: final_norm,
            output,
            inv_freqs,
            device,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> TorchCache {
        TorchCache {
            layers: (0..self.config.layers).map(|_| None).collect(),
            len: 0,
        }
    }

    /// Logits at every position of `ids` run from position 0, `[n, vocab]`.
    pub fn forward(&self, ids: &[u32]) -> Tensor {
        self.forward_cached(ids, &mut self.new_cache())
    }

    /// Logits at every position of `ids` run after the positions `cache`
    /// holds, `[n, vocab]`; their keys and values are appended to it.
    pub fn forward_cached(&self, ids: &[u32], cache: &mut TorchCache) -> Tensor {
        self.forward_hooked(ids, cache, &mut NoHook)
    }

    /// [`TorchLlama::forward_cached`] with `hook` called after every block.
    pub fn forward_hooked(
        &self,
        ids: &[u32],
        cache: &mut TorchCache,
        hook: &mut dyn BlockHook,
    ) -> Tensor {
        tch::no_grad(|| {
            let c = &self.config;
            let (n, past) = (ids.len() as i64, cache.len as i64);
            let total = past + n;
            let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
            let ids = Tensor::from_slice(&ids).to_device(self.device);
            let mut x = self.embed.index_select(0, &ids);
            let positions = Tensor::arange_start(past, total, (Kind::Float, self.device));
            let angles = positions.unsqueeze(1) * self.inv_freqs.unsqueeze(0);
            let (cos, sin) = (angles.cos(), angles.sin());
            // Causal: the query at position past + i sees keys 0..=past + i.
            let mask = Tensor::ones([n, total], (Kind::Bool, self.device)).triu(past + 1);
            for (layer, (block, slot)) in
                self.blocks.iter().zip(cache.layers.iter_mut()).enumerate()
            {
                let h = block.attn_norm.forward(&x);
                let a = &block.attn;
                let (d, heads, kvh) = (c.head_dim as i64, c.heads as i64, c.kv_heads as i64);
                // [n, heads, d] → [heads, n, d]
                let q = a.q.forward(&h).view([n, heads, d]).transpose(0, 1);
                let k = a.k.forward(&h).view([n, kvh, d]).transpose(0, 1);
                let v = a.v.forward(&h).view([n, kvh, d]).transpose(0, 1);
                let (q, k) = (
                    rotate(&q, &cos, &sin, c.rope_style),
                    rotate(&k, &cos, &sin, c.rope_style),
                );
                let (k, v) = match slot.take() {
                    Some((pk, pv)) => (Tensor::cat(&[pk, k], 1), Tensor::cat(&[pv, v], 1)),
                    None => (k, v),
                };
                *slot = Some((k.shallow_clone(), v.shallow_clone()));
                let rep = heads / kvh;
                let (k, v) = (
                    k.repeat_interleave_self_int(rep, 0, None),
                    v.repeat_interleave_self_int(rep, 0, None),
                );
                let scores = q.matmul(&k.transpose(1, 2)) / (d as f64).sqrt();
                let scores = scores.masked_fill(&mask, f64::NEG_INFINITY);
                let out = scores
                    .softmax(-1, Kind::Float)
                    .matmul(&v)
                    .transpose(0, 1)
                    .reshape([n, heads * d]);
                x = &x + a.o.forward(&out);
                let h = block.mlp_norm.forward(&x);
                x = &x + block.mlp.forward(&h);
                if let Some(changed) = hook.after_block(layer, past as usize, &x) {
                    x = changed;
                }
            }
            cache.len += ids.size()[0] as usize;
            self.output.forward(&self.norm.forward(&x))
        })
    }
}

/// Keys and values of every block for the positions run so far,
/// `[kv_heads, len, head_dim]` each (grown by concatenation for now).
pub struct TorchCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl TorchCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Rotary embedding of `x` (`[heads, n, d]`) at the angles `cos`/`sin`
/// (`[n, d/2]`), pairing dimensions as `style` says.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor, style: RopeStyle) -> Tensor {
    let d = *x.size().last().expect("a head dimension");
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
