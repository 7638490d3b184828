//! The llama-family forward pass in MLX (through mlx-rs), from the same
//! model description as candle's and libtorch's (`LlamaConfig`, the GGUF
//! tensor names, the shared [`ModelAssets`]), one small struct per part.
//! Weights are read as f32 (a GGUF file dequantized, or an HF folder's
//! safetensors through the same `HfWeights` as candle's); MLX's fused
//! RMSNorm, rotary embedding and attention do the rest.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};

use crate::executor::candle::model::host_weights::HostWeights;
use crate::model::ModelError;
use crate::model::assets::ModelAssets;
use crate::model::config::{LlamaConfig, RopeStyle};

impl From<Exception> for ModelError {
    fn from(e: Exception) -> Self {
        ModelError::Compute(Box::new(e))
    }
}

/// A linear map `y = x·Wᵀ (+ b)`, with `Wᵀ` kept as MLX reads it best.
struct Linear {
    /// `[in, out]`.
    weight_t: Array,
    bias: Option<Array>,
}

impl Linear {
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let y = x.matmul(&self.weight_t)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
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
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let gate = mlx_rs::nn::silu(self.gate.forward(x)?)?;
        self.down.forward(&gate.multiply(self.up.forward(x)?)?)
    }
}

/// One transformer block.
struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    mlp_norm: RmsNorm,
    mlp: Mlp,
}

/// A llama-family model in MLX.
pub struct MlxLlama {
    config: LlamaConfig,
    embed: Array,
    blocks: Vec<Block>,
    norm: RmsNorm,
    /// `[hidden, vocab]`.
    output_t: Array,
    /// The rotary frequencies as MLX takes them: `1 / inv_freq` per pair.
    rope_freqs: Array,
}

/// Keys and values of every block for the positions run so far,
/// `[1, kv_heads, len, head_dim]` each.
pub struct MlxCache {
    layers: Vec<Option<(Array, Array)>>,
    len: usize,
}

impl MlxCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A row-major `[rows, cols]` matrix as an MLX array `[cols, rows]`.
fn transposed(values: &[f32], rows: usize, cols: usize) -> Array {
    let mut t = vec![0f32; values.len()];
    for (r, row) in values.chunks_exact(cols).enumerate() {
        for (c, v) in row.iter().enumerate() {
            t[c * rows + r] = *v;
        }
    }
    Array::from_slice(&t, &[cols as i32, rows as i32])
}

/// Reads the weights a model's config implies (f32 on the host, shapes
/// checked) as MLX arrays.
struct Reader<'a> {
    weights: HostWeights<'a>,
}

impl Reader<'_> {
    fn need(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        self.weights.need(name, shape)
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Array, ModelError> {
        Ok(Array::from_slice(&self.need(name, &[len])?, &[len as i32]))
    }

    /// `[out, in]` stored, `[in, out]` kept (transposed once, at load).
    fn matrix_t(&mut self, name: &str, out: usize, inp: usize) -> Result<Array, ModelError> {
        Ok(transposed(&self.need(name, &[out, inp])?, out, inp))
    }

    fn linear(
        &mut self,
        stem: &str,
        (out, inp): (usize, usize),
        bias: bool,
    ) -> Result<Linear, ModelError> {
        Ok(Linear {
            weight_t: self.matrix_t(&format!("{stem}.weight"), out, inp)?,
            bias: match bias {
                true => Some(self.vector(&format!("{stem}.bias"), out)?),
                false => None,
            },
        })
    }
}

impl MlxLlama {
    /// Loads the weights of the model `assets` describe as f32.
    pub fn load(assets: &ModelAssets) -> Result<MlxLlama, ModelError> {
        let weights = HostWeights::open(assets)?;
        let hf = weights.is_hf();
        let mut r = Reader { weights };
        MlxLlama::read(&assets.config, &mut r).map_err(|e| if hf { e.hf_names() } else { e })
    }

    fn read(c: &LlamaConfig, r: &mut Reader<'_>) -> Result<MlxLlama, ModelError> {
        let (q_width, kv_width) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let embed = Array::from_slice(
            &r.need("token_embd.weight", &[c.vocab, c.hidden])?,
            &[c.vocab as i32, c.hidden as i32],
        );
        let eps = c.rms_eps as f32;
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let b = |part: &str| format!("blk.{i}.{part}");
            blocks.push(Block {
                attn_norm: RmsNorm {
                    scale: r.vector(&b("attn_norm.weight"), c.hidden)?,
                    eps,
                },
                attn: Attention {
                    q: r.linear(&b("attn_q"), (q_width, c.hidden), c.qkv_bias)?,
                    k: r.linear(&b("attn_k"), (kv_width, c.hidden), c.qkv_bias)?,
                    v: r.linear(&b("attn_v"), (kv_width, c.hidden), c.qkv_bias)?,
                    o: r.linear(&b("attn_output"), (c.hidden, q_width), false)?,
                },
                mlp_norm: RmsNorm {
                    scale: r.vector(&b("ffn_norm.weight"), c.hidden)?,
                    eps,
                },
                mlp: Mlp {
                    gate: r.linear(&b("ffn_gate"), (c.ffn, c.hidden), false)?,
                    up: r.linear(&b("ffn_up"), (c.ffn, c.hidden), false)?,
                    down: r.linear(&b("ffn_down"), (c.hidden, c.ffn), false)?,
                },
            });
        }
        let norm = RmsNorm {
            scale: r.vector("output_norm.weight", c.hidden)?,
            eps,
        };
        let output_t = match c.tied_embeddings {
            true => transposed(embed.as_slice::<f32>(), c.vocab, c.hidden),
            false => r.matrix_t("output.weight", c.vocab, c.hidden)?,
        };
        let freqs: Vec<f32> = c.inv_freqs().iter().map(|f| 1.0 / f).collect();
        let rope_freqs = Array::from_slice(&freqs, &[freqs.len() as i32]);
        Ok(MlxLlama {
            config: c.clone(),
            embed,
            blocks,
            norm,
            output_t,
            rope_freqs,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> MlxCache {
        MlxCache {
            layers: (0..self.config.layers).map(|_| None).collect(),
            len: 0,
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
        let c = &self.config;
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if let Some(&id) = ids.iter().find(|&&i| i as usize >= c.vocab) {
            return Err(ModelError::TokenOutOfRange { id, vocab: c.vocab });
        }
        if let Some(limit) = c.context_length
            && cache.len + ids.len() > limit
        {
            return Err(ModelError::ContextExceeded {
                needed: cache.len + ids.len(),
                limit,
            });
        }
        let (n, past) = (ids.len(), cache.len);
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let mut x = self
            .embed
            .take_axis(Array::from_slice(&ids, &[n as i32]), 0)?;
        // Causal: the query at position past + i sees keys 0..=past + i; a
        // single query sees every key.
        let mask = (n > 1).then(|| {
            let total = past + n;
            let values: Vec<f32> = (0..n)
                .flat_map(|i| {
                    (0..total).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 })
                })
                .collect();
            Array::from_slice(&values, &[n as i32, total as i32])
        });
        let mut appended = Vec::with_capacity(self.blocks.len());
        for (block, slot) in self.blocks.iter().zip(&cache.layers) {
            let h = block.attn_norm.forward(&x)?;
            let (attn, kv) = self.attention(&block.attn, &h, slot.as_ref(), past, mask.as_ref())?;
            appended.push(kv);
            x = x.add(&attn)?;
            let h = block.mlp_norm.forward(&x)?;
            x = x.add(block.mlp.forward(&h)?)?;
        }
        let logits = self.norm.forward(&x)?.matmul(&self.output_t)?;
        logits.eval()?;
        for (slot, kv) in cache.layers.iter_mut().zip(appended) {
            *slot = Some(kv);
        }
        cache.len += n;
        Ok(logits)
    }

    /// Self-attention of `h` (`[n, hidden]`) over the cached keys and
    /// values and its own; the output and the block's keys and values for
    /// the cache.
    fn attention(
        &self,
        a: &Attention,
        h: &Array,
        cached: Option<&(Array, Array)>,
        past: usize,
        mask: Option<&Array>,
    ) -> Result<(Array, (Array, Array)), ModelError> {
        let c = &self.config;
        let n = h.shape()[0];
        let (d, heads, kvh) = (c.head_dim as i32, c.heads as i32, c.kv_heads as i32);
        // [n, heads * d] → [1, heads, n, d]
        let split = |x: Array, hs: i32| -> Result<Array, Exception> {
            x.reshape(&[1, n, hs, d])?.transpose_axes(&[0, 2, 1, 3])
        };
        let rope = |x: Array| {
            fast::rope(
                x,
                d,
                c.rope_style == RopeStyle::Interleaved,
                None,
                1.0,
                past as i32,
                &self.rope_freqs,
            )
        };
        let q = rope(split(a.q.forward(h)?, heads)?)?;
        let k = rope(split(a.k.forward(h)?, kvh)?)?;
        let v = split(a.v.forward(h)?, kvh)?;
        let (k, v) = match cached {
            Some((pk, pv)) => (
                mlx_rs::ops::concatenate(&[pk, &k], 2)?,
                mlx_rs::ops::concatenate(&[pv, &v], 2)?,
            ),
            None => (k, v),
        };
        let scale = 1.0 / (d as f32).sqrt();
        let out = fast::scaled_dot_product_attention(
            &q,
            &k,
            &v,
            scale,
            mask.map(ScaledDotProductAttentionMask::Array),
            None,
        )?;
        let out = out
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[n, heads * d])?;
        Ok((a.o.forward(&out)?, (k, v)))
    }
}
