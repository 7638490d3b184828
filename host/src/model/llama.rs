//! The llama-family forward pass (llama 2/3, SmolLM2, Qwen2, Mistral):
//! RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, with a hook
//! on the residual stream after every block. Weights stay quantized and run
//! through candle's quantized matmul.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::ops::{rms_norm, silu, softmax_last_dim};
use candle_nn::rotary_emb::rope_i;

use super::ModelError;

/// The shape of a llama-family model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
}

struct Block {
    attn_norm: Tensor,
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    o: QMatMul,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
}

/// A loaded llama-family model.
pub struct Llama {
    config: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: Tensor,
    output: QMatMul,
    vocab: usize,
    device: Device,
}

/// What one forward pass produced.
pub struct Forward {
    /// Next-token logits at every position, `[tokens, vocab]`, f32.
    pub logits: Tensor,
    /// The residual stream after each observed block, `[1, tokens, hidden]`.
    pub residuals: Vec<(usize, Tensor)>,
}

impl Llama {
    /// Loads every weight by its GGUF name through `load`, checking shapes
    /// against the config.
    /// `tied_output`: the output projection is the token embedding (no
    /// `output.weight` in the file).
    pub fn load(
        config: &LlamaConfig,
        tied_output: bool,
        load: &mut dyn FnMut(&str) -> Result<QTensor, ModelError>,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let c = config;
        let embed_q = load("token_embd.weight")?;
        let vocab = embed_q.shape().dims()[0];
        let embed = embed_q.dequantize(device)?;
        let output = if tied_output {
            QMatMul::from_qtensor(embed_q)?
        } else {
            QMatMul::from_qtensor(load("output.weight")?)?
        };
        let mut get = |name: &str, shape: &[usize]| -> Result<QTensor, ModelError> {
            let t = load(name)?;
            // GGUF dims are listed innermost first; candle reverses them.
            if t.shape().dims() != shape {
                return Err(ModelError::ShapeMismatch {
                    tensor: name.to_owned(),
                    found: t.shape().dims().to_vec(),
                    expected: shape.to_vec(),
                });
            }
            Ok(t)
        };
        let (q_out, kv_out) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let mut blocks = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let mut mm = |s: &str, shape: &[usize]| -> Result<QMatMul, ModelError> {
                Ok(QMatMul::from_qtensor(get(&n(s), shape)?)?)
            };
            blocks.push(Block {
                q: mm("attn_q", &[q_out, c.hidden])?,
                k: mm("attn_k", &[kv_out, c.hidden])?,
                v: mm("attn_v", &[kv_out, c.hidden])?,
                o: mm("attn_output", &[c.hidden, q_out])?,
                gate: mm("ffn_gate", &[c.ffn, c.hidden])?,
                up: mm("ffn_up", &[c.ffn, c.hidden])?,
                down: mm("ffn_down", &[c.hidden, c.ffn])?,
                attn_norm: get(&n("attn_norm"), &[c.hidden])?.dequantize(device)?,
                ffn_norm: get(&n("ffn_norm"), &[c.hidden])?.dequantize(device)?,
            });
        }
        let norm = get("output_norm.weight", &[c.hidden])?.dequantize(device)?;
        Ok(Llama {
            config: config.clone(),
            embed,
            blocks,
            norm,
            output,
            vocab,
            device: device.clone(),
        })
    }

    /// The model's config.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Runs `ids` through the model, keeping the residual stream after each
    /// block in `observe`.
    pub fn forward(&self, ids: &[u32], observe: &[usize]) -> Result<Forward, ModelError> {
        let c = &self.config;
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab: self.vocab,
            });
        }
        if let Some(&layer) = observe.iter().find(|&&l| l >= c.layers) {
            return Err(ModelError::LayerOutOfRange {
                layer,
                count: c.layers,
            });
        }
        let t = ids.len();
        let (cos, sin) = self.rope(t)?;
        let mask = causal_mask(t, &self.device)?;
        let ids = Tensor::new(ids, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?.unsqueeze(0)?;
        let mut residuals = Vec::new();
        let rep = c.heads / c.kv_heads;
        for (i, b) in self.blocks.iter().enumerate() {
            let h = rms_norm(&x, &b.attn_norm, c.rms_eps as f32)?;
            let split = |m: &QMatMul, heads: usize| -> Result<Tensor, ModelError> {
                Ok(m.forward(&h)?
                    .reshape((1, t, heads, c.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()?)
            };
            let q = rope_i(&split(&b.q, c.heads)?, &cos, &sin)?;
            let k = rope_i(&split(&b.k, c.kv_heads)?, &cos, &sin)?;
            let v = split(&b.v, c.kv_heads)?;
            let widen = |x: Tensor| -> Result<Tensor, ModelError> {
                Ok(x.unsqueeze(2)?
                    .expand((1, c.kv_heads, rep, t, c.head_dim))?
                    .reshape((1, c.heads, t, c.head_dim))?)
            };
            let (k, v) = (widen(k)?, widen(v)?);
            let scores = (q.matmul(&k.t()?)? / (c.head_dim as f64).sqrt())?.broadcast_add(&mask)?;
            let y = softmax_last_dim(&scores)?
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((1, t, c.heads * c.head_dim))?;
            x = (x + b.o.forward(&y)?)?;
            let h = rms_norm(&x, &b.ffn_norm, c.rms_eps as f32)?;
            let ff = b
                .down
                .forward(&(silu(&b.gate.forward(&h)?)? * b.up.forward(&h)?)?)?;
            x = (x + ff)?;
            if observe.contains(&i) {
                residuals.push((i, x.clone()));
            }
        }
        let x = rms_norm(&x, &self.norm, c.rms_eps as f32)?;
        let logits = self.output.forward(&x)?.squeeze(0)?.to_dtype(DType::F32)?;
        Ok(Forward { logits, residuals })
    }

    /// Rotary tables for positions `0..t`, `[t, head_dim / 2]` each.
    fn rope(&self, t: usize) -> Result<(Tensor, Tensor), ModelError> {
        let c = &self.config;
        let inv: Vec<f32> = (0..c.head_dim / 2)
            .map(|i| 1.0 / c.rope_theta.powf(2.0 * i as f32 / c.head_dim as f32))
            .collect();
        let inv = Tensor::new(inv.as_slice(), &self.device)?;
        let pos = Tensor::arange(0u32, t as u32, &self.device)?.to_dtype(DType::F32)?;
        let freqs = pos.unsqueeze(1)?.broadcast_mul(&inv.unsqueeze(0)?)?;
        Ok((freqs.cos()?, freqs.sin()?))
    }
}

/// `[t, t]` with `-inf` above the diagonal: position i sees positions ≤ i.
fn causal_mask(t: usize, device: &Device) -> Result<Tensor, ModelError> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Ok(Tensor::from_slice(&mask, (t, t), device)?)
}

/// Log-softmax over the last dimension, in f32.
pub fn log_softmax(logits: &Tensor) -> Result<Tensor, ModelError> {
    Ok(candle_nn::ops::log_softmax(
        &logits.to_dtype(DType::F32)?,
        D::Minus1,
    )?)
}
