//! The shape of a decoder-only model, read from GGUF metadata or an HF
//! `config.json`: its sizes, and where its family's blocks differ from
//! llama's ([`BlockLayout`], per-layer windows and RoPE bases). A family is
//! this description, not a forward pass of its own: candle's, torch's and
//! MLX's forwards all follow it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ModelError;
use crate::gguf::GgufFile;

/// Architectures whose tensors follow llama's names and layout.
pub const LLAMA_FAMILY: &[&str] = &["llama", "mistral", "qwen2"];

/// Every architecture vauban runs, by its GGUF `general.architecture`
/// (HF `model_type`s map onto these: `gemma3_text` is `gemma3`).
pub const SUPPORTED: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "phi3", "qwen3moe",
];

/// A mixture-of-experts MLP: a router picks `used` of `count` experts per
/// token, each a gated MLP of width `ffn`, and their outputs are summed
/// weighted by the router's probabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experts {
    pub count: usize,
    /// Experts each token uses (top-k).
    pub used: usize,
    /// Each expert's MLP width.
    pub ffn: usize,
    /// The chosen experts' probabilities renormalised to sum to one
    /// (Qwen3-MoE's `norm_topk_prob`; llama.cpp always does).
    pub normalize: bool,
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `silu(gate) · up` (SwiGLU: llama, Qwen, OLMo).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU with the tanh approximation: Gemma).
    GeluTanh,
}

/// RMSNorm on the queries and keys, before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    /// Over each head's `head_dim` values, one weight shared by the heads
    /// (Qwen3, Gemma 3).
    PerHead,
    /// Over the whole projection, `heads · head_dim` values (OLMo 2).
    Whole,
}

/// Where a family's decoder block differs from llama's (pre-norm
/// RMSNorm, SwiGLU, `1/√head_dim` scores, nothing capped): each field is
/// one operation the forwards implement once, for every family that sets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockLayout {
    /// RMSNorm before attention and before the MLP (all but OLMo 2).
    pub pre_norms: bool,
    /// RMSNorm on what attention and the MLP write, before it is added to
    /// the residual stream (Gemma 2/3, OLMo 2).
    pub post_norms: bool,
    pub qk_norm: Option<QkNorm>,
    pub activation: Activation,
    /// The token embeddings are multiplied by this (Gemma: `√hidden`).
    pub embed_scale: Option<f32>,
    /// What multiplies `q·k`; `None`: `1/√head_dim`.
    pub attn_scale: Option<f32>,
    /// Attention scores capped as `cap · tanh(s / cap)` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Logits capped the same way (Gemma 2).
    pub final_softcap: Option<f32>,
    /// RMSNorm multiplies by `1 + w` (Gemma): HF checkpoints store `w`,
    /// GGUF files `1 + w` (llama.cpp's converter adds the one), which is
    /// what the forwards hold.
    pub unit_offset_norms: bool,
    /// The files hold Q, K and V as one matrix, and the MLP's gate and up
    /// as one (Phi-3: `attn_qkv`, `ffn_up` of twice the width, gate
    /// first); the loaders split them into the forwards' seven.
    pub fused: bool,
}

impl BlockLayout {
    /// Llama's block.
    pub fn llama() -> BlockLayout {
        BlockLayout {
            pre_norms: true,
            post_norms: false,
            qk_norm: None,
            activation: Activation::Silu,
            embed_scale: None,
            attn_scale: None,
            attn_softcap: None,
            final_softcap: None,
            unit_offset_norms: false,
            fused: false,
        }
    }

    /// The block of the family `arch` (a GGUF architecture name) with a
    /// hidden size of `hidden`: what every file of that family shares. The
    /// file then sets what varies (query scale, soft-caps, activation).
    pub fn of_family(arch: &str, hidden: usize) -> BlockLayout {
        let gemma = arch.starts_with("gemma");
        BlockLayout {
            pre_norms: arch != "olmo2",
            post_norms: gemma || arch == "olmo2",
            qk_norm: match arch {
                "qwen3" | "qwen3moe" | "gemma3" => Some(QkNorm::PerHead),
                "olmo2" => Some(QkNorm::Whole),
                _ => None,
            },
            activation: match gemma {
                true => Activation::GeluTanh,
                false => Activation::Silu,
            },
            embed_scale: gemma.then(|| (hidden as f32).sqrt()),
            unit_offset_norms: gemma,
            fused: arch == "phi3",
            ..BlockLayout::llama()
        }
    }

    /// Whether this is llama's block, which every backend runs.
    pub fn is_llama(&self) -> bool {
        *self == BlockLayout::llama()
    }
}

/// Every RMSNorm a block of some family has, by GGUF stem, in the order a
/// block applies them.
pub const BLOCK_NORMS: [&str; 6] = [
    "attn_norm",
    "attn_q_norm",
    "attn_k_norm",
    "post_attention_norm",
    "ffn_norm",
    "post_ffw_norm",
];

impl ModelConfig {
    /// The width of the RMSNorm weight GGUF calls `blk.N.{stem}.weight`
    /// in each block, or `None` where the family has no such norm: the one
    /// place that says which norms a block has (every backend's loader asks
    /// here), for a stem of [`BLOCK_NORMS`].
    pub fn norm_width(&self, stem: &str) -> Option<usize> {
        let b = &self.block;
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        match stem {
            "attn_norm" | "ffn_norm" => b.pre_norms.then_some(self.hidden),
            "post_attention_norm" | "post_ffw_norm" => b.post_norms.then_some(self.hidden),
            "attn_q_norm" | "attn_k_norm" => match b.qk_norm? {
                QkNorm::PerHead => Some(self.head_dim),
                QkNorm::Whole if stem == "attn_q_norm" => Some(q),
                QkNorm::Whole => Some(kv),
            },
            _ => None,
        }
    }

    /// Why orthogonalizing this model's output matrices does not remove a
    /// direction from its residual stream exactly, where it does not: a
    /// norm after attention and the MLP (Gemma, OLMo 2) rescales each
    /// coordinate of what the edited matrix writes by its own weight, which
    /// turns a written vector back toward the direction. `None` for
    /// pre-norm models, where the edit is exact.
    /// What an HF folder exported from this model runs differently, said
    /// before the folder is written: a GGUF's LongRoPE set, chosen once by
    /// llama.cpp's rule, becomes a `config.json` that transformers reads
    /// with its own rule (the short set until a sequence passes the
    /// original context).
    pub fn export_note(&self) -> Option<String> {
        let Some(RopeScaling::LongRope {
            original_max_position_embeddings: original,
            choice,
            ..
        }) = &self.rope_scaling
        else {
            return None;
        };
        let runs = match choice {
            LongRopeChoice::ByReach => return None,
            LongRopeChoice::Long => "the long",
            LongRopeChoice::Short => "the short",
        };
        Some(format!(
            "this GGUF file runs {runs} LongRoPE factors at every length, as llama.cpp chooses them from the context; the exported config.json says `longrope`, which transformers (and vauban, reading the folder) runs with the short factors up to {original} positions and the long ones past them"
        ))
    }

    pub fn weight_edit_limitation(&self) -> Option<String> {
        self.block.post_norms.then(|| format!(
            "a {} normalises what each block writes (norms after attention and the MLP), so orthogonalizing the output matrices removes the direction from what they compute, not exactly from what reaches the residual stream; the activation-level intervention (ablate at the same layers) is exact",
            self.architecture
        ))
    }
}

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Adjacent pairs `(0,1), (2,3)…`: llama.cpp's layout for llama and
    /// mistral GGUF files, whose converter permutes the Q and K rows.
    Interleaved,
    /// First half with second half (`rotate_half`): HF checkpoints, and
    /// llama.cpp's NEOX layout (qwen2 GGUF files).
    Half,
}

/// RoPE frequency scaling, as the checkpoint declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.1's wavelength-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
    /// Per-frequency divisors stored in the GGUF file (`rope_freqs.weight`).
    FreqFactors { factors: Vec<f32> },
    /// LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): per-frequency divisors,
    /// one set for sequences within the context the model was first
    /// trained for and one past it, and a magnitude on cos and sin (so
    /// the rotated dimensions of queries and keys are scaled by it).
    LongRope {
        short_factor: Vec<f32>,
        long_factor: Vec<f32>,
        original_max_position_embeddings: usize,
        /// What multiplies cos and sin, whichever set runs.
        attention_factor: f32,
        /// When the long set runs.
        choice: LongRopeChoice,
    },
}

/// When a LongRoPE model runs its long factors. transformers and
/// llama.cpp disagree, and vauban reads each format as its reference
/// runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LongRopeChoice {
    /// transformers (an HF folder): a sequence runs the long set once it
    /// is longer than the original context; the pass that crosses that
    /// point runs the whole sequence again with it
    /// ([`ModelConfig::reruns`]), so every cached key has one rotation.
    ByReach,
    /// llama.cpp (a GGUF file), chosen once from the context it runs with:
    /// the model's own, longer than the original.
    Long,
    /// llama.cpp, with a context within the original.
    Short,
}

/// The rotary embedding a pass gives a layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// Inverse frequency of each rotated pair.
    pub inv_freqs: Vec<f32>,
    /// What multiplies cos and sin (LongRoPE's attention factor; 1
    /// otherwise).
    pub magnitude: f32,
}

/// The shape of a llama-family model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `llama`, `mistral` or `qwen2`.
    pub architecture: String,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The dimensions of each head that rotate: `head_dim`, or fewer with
    /// a partial rotary embedding (Phi-4-mini's three quarters).
    pub rotary_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f64,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    pub rope_scaling: Option<RopeScaling>,
    /// Q, K and V projections carry a bias (Qwen2, some llama fine-tunes).
    pub qkv_bias: bool,
    /// The output projection is the token embedding.
    pub tied_embeddings: bool,
    /// Positions the model was trained for (`context_length`,
    /// `max_position_embeddings`); runs past it are refused.
    pub context_length: Option<usize>,
    /// How a block is put together, where it is not llama's.
    pub block: BlockLayout,
    /// Each layer's attention window (`None`: the whole context); a
    /// sliding layer sees the last `window` positions, itself included.
    pub windows: Vec<Option<usize>>,
    /// The RoPE base of the sliding layers, where it differs from
    /// `rope_theta` (Gemma 3's local layers; they take no scaling).
    pub local_rope_theta: Option<f32>,
    /// Every block's MLP is a mixture of experts (Qwen3-MoE).
    pub experts: Option<Experts>,
}

impl ModelConfig {
    /// Refuses shapes the forward pass cannot run (zero sizes, heads that do
    /// not divide), naming the field.
    pub fn check(&self, source: &Path) -> Result<(), ModelError> {
        let bad = |key: &str, problem: String| ModelError::Config {
            path: source.to_path_buf(),
            key: key.to_owned(),
            problem,
        };
        for (key, v) in [
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err(bad(key, "is 0".into()));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(bad(
                "kv_heads",
                format!(
                    "({}) does not divide the {} attention heads",
                    self.kv_heads, self.heads
                ),
            ));
        }
        if !(self.rotary_dim.is_multiple_of(2) && self.rotary_dim <= self.head_dim) {
            return Err(bad(
                "rotary_dim",
                format!(
                    "({}) is odd or wider than the heads ({})",
                    self.rotary_dim, self.head_dim
                ),
            ));
        }
        if let Some(RopeScaling::LongRope {
            short_factor,
            long_factor,
            ..
        }) = &self.rope_scaling
        {
            let pairs = self.rotary_dim / 2;
            for (key, factors) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if factors.len() != pairs || factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
                    return Err(bad(
                        &format!("rope_scaling.{key}"),
                        format!(
                            "holds {} factors; LongRoPE needs one positive factor per rotated pair ({pairs})",
                            factors.len()
                        ),
                    ));
                }
            }
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad(
                "head_dim",
                format!("({}) is odd; rotary embeddings need pairs", self.head_dim),
            ));
        }
        for (key, theta) in [
            ("rope_theta", Some(self.rope_theta)),
            ("local_rope_theta", self.local_rope_theta),
        ] {
            if let Some(t) = theta
                && !(t.is_finite() && t > 0.0)
            {
                return Err(bad(key, format!("({t}) is not positive")));
            }
        }
        if self.windows.len() != self.layers {
            return Err(bad(
                "windows",
                format!(
                    "lists {} layers; the model has {}",
                    self.windows.len(),
                    self.layers
                ),
            ));
        }
        if self.windows.contains(&Some(0)) {
            return Err(bad("sliding_window", "is 0".into()));
        }
        Ok(())
    }

    /// What multiplies `q·k`: the family's query scale, else `1/√head_dim`.
    pub fn attn_scale(&self) -> f32 {
        self.block
            .attn_scale
            .unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// Whether `layer` takes the local RoPE base (a sliding layer of a
    /// model that has one).
    pub fn local_rope(&self, layer: usize) -> bool {
        self.local_rope_theta.is_some() && self.windows.get(layer).is_some_and(Option::is_some)
    }

    /// The inverse rotary frequencies of one head of the global layers,
    /// scaling applied (LongRoPE's short set, or the set its file chose).
    pub fn inv_freqs(&self) -> Vec<f32> {
        self.rope(false, 0).inv_freqs
    }

    /// The inverse rotary frequencies of `layer` in a pass reaching no
    /// further than the original context: the local base, unscaled, on a
    /// sliding layer of a model that has one (Gemma 3), else the global
    /// ones.
    pub fn layer_inv_freqs(&self, layer: usize) -> Vec<f32> {
        self.rope(self.local_rope(layer), 0).inv_freqs
    }

    /// Whether a pass of `n` tokens after `past` cached ones runs the whole
    /// sequence again, from position 0: a LongRoPE model read as
    /// transformers reads it runs its long factors once a pass reaches past
    /// the original context, and the positions cached before, rotated with
    /// the short ones, are computed again with them (what transformers'
    /// Phi-3 does when generation crosses that point: it drops its cache).
    pub fn reruns(&self, past: usize, n: usize) -> bool {
        match &self.rope_scaling {
            Some(RopeScaling::LongRope {
                original_max_position_embeddings: original,
                choice: LongRopeChoice::ByReach,
                ..
            }) => past > 0 && past <= *original && past + n > *original,
            _ => false,
        }
    }

    /// Each of `kinds` rotary embeddings (the global layers', then the
    /// sliding layers' own base where they have one) in LongRoPE's two
    /// sets, short then long (the same twice for any other model): what a
    /// backend builds once at load; [`ModelConfig::rope_set`] picks one for
    /// a pass.
    pub fn rope_sets(&self, kinds: usize) -> Vec<[Rope; 2]> {
        (0..kinds)
            .map(|r| [self.rope(r == 1, 0), self.rope(r == 1, usize::MAX)])
            .collect()
    }

    /// Which of [`ModelConfig::rope_sets`]' two a pass whose last position
    /// is `reach - 1` runs: the long one once LongRoPE (read as
    /// transformers reads it) reaches past the original context.
    pub fn rope_set(&self, reach: usize) -> usize {
        match &self.rope_scaling {
            Some(RopeScaling::LongRope {
                original_max_position_embeddings: original,
                choice: LongRopeChoice::ByReach,
                ..
            }) => usize::from(reach > *original),
            _ => 0,
        }
    }

    /// The rotary embedding of the sliding layers with a base of their own
    /// (`local`: Gemma 3's, unscaled) or of the others, in a pass whose
    /// last position is `reach - 1` (LongRoPE's set can depend on it).
    pub fn rope(&self, local: bool, reach: usize) -> Rope {
        if let (true, Some(theta)) = (local, self.local_rope_theta) {
            return Rope {
                inv_freqs: self.frequencies(theta, None),
                magnitude: 1.0,
            };
        }
        let Some(RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings: original,
            attention_factor,
            choice,
        }) = &self.rope_scaling
        else {
            return Rope {
                inv_freqs: self.frequencies(self.rope_theta, self.rope_scaling.as_ref()),
                magnitude: 1.0,
            };
        };
        let long = match choice {
            LongRopeChoice::ByReach => reach > *original,
            LongRopeChoice::Long => true,
            LongRopeChoice::Short => false,
        };
        let factors = if long { long_factor } else { short_factor };
        // `1 / (factor · θ^(2i/d))`, in transformers' order of operations.
        let d = self.rotary_dim as f32;
        Rope {
            inv_freqs: factors
                .iter()
                .enumerate()
                .map(|(i, s)| 1.0 / (s * self.rope_theta.powf(2.0 * i as f32 / d)))
                .collect(),
            magnitude: *attention_factor,
        }
    }

    fn frequencies(&self, theta: f32, scaling: Option<&RopeScaling>) -> Vec<f32> {
        let half = self.rotary_dim / 2;
        let base: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf(2.0 * i as f32 / self.rotary_dim as f32))
            .collect();
        match scaling {
            // LongRoPE's divisors depend on the pass: `rope` applies them.
            None | Some(RopeScaling::LongRope { .. }) => base,
            Some(RopeScaling::Linear { factor }) => base.iter().map(|f| f / factor).collect(),
            Some(RopeScaling::FreqFactors { factors }) => base
                .iter()
                .zip(factors.iter().chain(std::iter::repeat(&1.0)))
                .map(|(f, s)| f / s)
                .collect(),
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            }) => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }

    /// The config from GGUF metadata.
    // Long on purpose: one key after another, each with its family's
    // default, so the whole mapping from GGUF's keys reads in one place
    // beside `from_hf`'s.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        path: &Path,
        file: &GgufFile<R>,
    ) -> Result<Self, ModelError> {
        let md = |key: &str| {
            file.meta(key).ok_or_else(|| ModelError::Metadata {
                path: path.to_path_buf(),
                key: key.to_owned(),
                problem: "is missing".into(),
            })
        };
        let bad = |key: &str, e: String| ModelError::Metadata {
            path: path.to_path_buf(),
            key: key.to_owned(),
            problem: format!("has the wrong type: {e}"),
        };
        let arch = md("general.architecture")?
            .to_str()
            .map_err(|e| bad("general.architecture", e))?
            .to_owned();
        if !SUPPORTED.contains(&arch.as_str()) {
            return Err(ModelError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: arch,
            });
        }
        let u = |key: &str| -> Result<usize, ModelError> {
            let key = format!("{arch}.{key}");
            md(&key)?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| bad(&key, e))
        };
        let opt_f = |key: &str| -> Result<Option<f32>, ModelError> {
            let key = format!("{arch}.{key}");
            match file.meta(&key) {
                Some(v) => v.to_f32().map(Some).map_err(|e| bad(&key, e)),
                None => Ok(None),
            }
        };
        // A key that is absent may default; one that is present must parse.
        let opt_u = |key: &str| -> Result<Option<usize>, ModelError> {
            match file.meta(&format!("{arch}.{key}")).is_some() {
                true => u(key).map(Some),
                false => Ok(None),
            }
        };
        let hidden = u("embedding_length")?;
        let heads = u("attention.head_count")?;
        let head_dim = match file.meta(&format!("{arch}.attention.key_length")).is_some() {
            true => u("attention.key_length")?,
            false => hidden / heads.max(1),
        };
        let tokens = file
            .meta("tokenizer.ggml.tokens")
            .and_then(|v| v.array_len());
        let vocab = match (opt_u("vocab_size")?, tokens) {
            (Some(v), _) => v,
            (None, Some(n)) => n,
            (None, None) => u("vocab_size")?,
        };
        let scaling = match file
            .meta(&format!("{arch}.rope.scaling.type"))
            .and_then(|v| v.to_str().ok())
        {
            Some("linear") => opt_f("rope.scaling.factor")?
                .filter(|f| *f != 1.0)
                .map(|factor| RopeScaling::Linear { factor }),
            Some("none") | None => None,
            Some(other) => {
                return Err(ModelError::Metadata {
                    path: path.to_path_buf(),
                    key: format!("{arch}.rope.scaling.type"),
                    problem: format!("is `{other}`; supported: linear, none"),
                });
            }
        };
        let layers = u("block_count")?;
        // What llama.cpp's loader does with these files (src/models/<arch>.cpp),
        // which is what the GGUF means: the keys it reads, and its defaults
        // and fixed rules where the converter writes no key.
        let window = opt_u("attention.sliding_window")?.filter(|&w| w > 0);
        // A scalar pattern key overrides the family's period (llama.cpp
        // ignores an array, as OLMo 3's converter writes).
        let period = match file
            .meta(&format!("{arch}.attention.sliding_window_pattern"))
            .map(|v| v.to_u32())
        {
            Some(Ok(p)) => Some(p as usize),
            _ => None,
        };
        let period = match (arch.as_str(), window) {
            (_, None) => None,
            ("gemma2", Some(_)) => Some(period.unwrap_or(2)),
            ("gemma3", Some(_)) => Some(period.unwrap_or(6)),
            ("olmo2", Some(_)) => Some(period.unwrap_or(4)),
            // llama.cpp runs the llama family's files without a window.
            (_, Some(_)) => None,
        };
        // Every `period`th layer (il = n-1, 2n-1, ...) is global; 0: none is.
        let windows = (0..layers)
            .map(|i| match period {
                Some(0) => window,
                Some(n) if i % n < n - 1 => window,
                _ => None,
            })
            .collect();
        // Gemma's query scale: llama.cpp keys it to the 27B models by their
        // layer count (query_pre_attn_scalar = hidden / heads there), else
        // 1/√head_dim; no key carries it.
        let big_gemma = (arch == "gemma2" && layers == 46) || (arch == "gemma3" && layers == 62);
        let block = BlockLayout {
            attn_scale: big_gemma.then(|| 1.0 / (hidden as f32 / heads as f32).sqrt()),
            // llama.cpp also reads separate Q, K and V from a phi3 file.
            fused: file.has_tensor("blk.0.attn_qkv.weight"),
            attn_softcap: match arch.as_str() {
                "gemma2" => Some(opt_f("attn_logit_softcapping")?.unwrap_or(50.0)),
                _ => None,
            },
            final_softcap: match arch.as_str() {
                "gemma2" => Some(opt_f("final_logit_softcapping")?.unwrap_or(30.0)),
                "gemma3" => opt_f("final_logit_softcapping")?.filter(|&c| c != 0.0),
                _ => None,
            },
            ..BlockLayout::of_family(&arch, hidden)
        };
        Ok(ModelConfig {
            hidden,
            layers,
            heads,
            kv_heads: opt_u("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            rotary_dim: opt_u("rope.dimension_count")?.unwrap_or(head_dim),
            ffn: u("feed_forward_length")?,
            vocab,
            rms_eps: opt_f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5) as f64,
            rope_theta: opt_f("rope.freq_base")?.unwrap_or(10_000.0),
            // llama.cpp's converter permutes Q/K for llama and mistral
            // (adjacent pairs); the other families rotate halves (NEOX).
            rope_style: match arch.as_str() {
                "llama" | "mistral" => RopeStyle::Interleaved,
                _ => RopeStyle::Half,
            },
            rope_scaling: scaling,
            qkv_bias: file.has_tensor("blk.0.attn_q.bias"),
            tied_embeddings: !file.has_tensor("output.weight"),
            context_length: opt_u("context_length")?,
            block,
            windows,
            local_rope_theta: match arch.as_str() {
                "gemma3" => Some(opt_f("rope.freq_base_swa")?.unwrap_or(10_000.0)),
                _ => None,
            },
            experts: match arch.as_str() {
                "qwen3moe" => {
                    let used = u("expert_used_count")?;
                    Some(Experts {
                        count: u("expert_count")?,
                        used,
                        // llama.cpp's default without the key.
                        ffn: opt_u("expert_feed_forward_length")?
                            .unwrap_or(u("feed_forward_length")? / used.max(1)),
                        normalize: true,
                    })
                }
                _ => None,
            },
            architecture: arch,
        })
    }

    /// The config from an HF `config.json`.
    // Long on purpose, as `from_gguf`: the whole mapping from config.json's
    // keys in one place.
    pub fn from_hf(path: &Path, json: &HfConfig) -> Result<Self, ModelError> {
        let bad = |key: &str, problem: String| ModelError::Config {
            path: path.to_path_buf(),
            key: key.to_owned(),
            problem,
        };
        let arch = match json.model_type.as_str() {
            "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | "olmo2" | "phi3" => {
                json.model_type.clone()
            }
            "qwen3_moe" => "qwen3moe".to_owned(),
            "gemma3_text" => "gemma3".to_owned(),
            "gemma3" => {
                return Err(bad(
                    "model_type",
                    "is `gemma3`, Gemma 3's multimodal checkpoint (a vision tower beside the text model); vauban runs the text model: use a text-only checkpoint (`model_type` `gemma3_text`, as the 1B ships) or a GGUF of the text model from llama.cpp's converter".into(),
                ));
            }
            other => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    found: other.to_owned(),
                });
            }
        };
        // transformers 5 writes `rope_parameters` (theta and scaling in one
        // object, or one per layer type); older files write `rope_theta`,
        // `rope_scaling` and Gemma 3's `rope_local_base_freq`.
        let (global, local) = match &json.rope_parameters {
            Some(HfRope::PerLayerType {
                full_attention,
                sliding_attention,
            }) => (Some(full_attention), sliding_attention.as_ref()),
            Some(HfRope::One(p)) => (Some(p), None),
            None => (json.rope_scaling.as_ref(), None),
        };
        let theta = global
            .and_then(|p| p.rope_theta)
            .or(json.rope_theta)
            .unwrap_or(10_000.0);
        let scaling = hf_rope_scaling(path, global, json)?;
        let local_rope_theta = match local {
            Some(p) => {
                if hf_rope_scaling(path, Some(p), json)?.is_some() {
                    return Err(bad(
                        "rope_parameters.sliding_attention",
                        "scales the sliding layers' RoPE; vauban scales the global layers' only"
                            .into(),
                    ));
                }
                p.rope_theta
            }
            None => json.rope_local_base_freq,
        };
        let heads = json.num_attention_heads;
        let layers = json.num_hidden_layers;
        let head_dim = json.head_dim.unwrap_or(json.hidden_size / heads.max(1));
        let experts = match arch.as_str() {
            "qwen3moe" => {
                let need = |v: Option<usize>, key: &str| {
                    v.ok_or_else(|| bad(key, "is missing (a qwen3_moe config needs it)".into()))
                };
                if json.decoder_sparse_step.unwrap_or(1) != 1
                    || json.mlp_only_layers.as_ref().is_some_and(|l| !l.is_empty())
                {
                    return Err(bad(
                        "mlp_only_layers",
                        "or decoder_sparse_step makes some layers dense; vauban runs Qwen3-MoE with experts in every layer".into(),
                    ));
                }
                Some(Experts {
                    count: need(json.num_experts, "num_experts")?,
                    used: need(json.num_experts_per_tok, "num_experts_per_tok")?,
                    ffn: need(json.moe_intermediate_size, "moe_intermediate_size")?,
                    normalize: json.norm_topk_prob.unwrap_or(false),
                })
            }
            _ => None,
        };
        // Phi's partial rotary embedding: at the top level, or among the
        // RoPE parameters (transformers 5).
        let partial = json
            .partial_rotary_factor
            .or(global.and_then(|p| p.partial_rotary_factor))
            .filter(|&f| f != 1.0);
        let gemma = arch.starts_with("gemma");
        let activation = match json.hidden_activation.as_ref().or(json.hidden_act.as_ref()) {
            None if gemma => Activation::GeluTanh,
            None => Activation::Silu,
            Some(a) => match a.as_str() {
                "silu" | "swish" => Activation::Silu,
                "gelu_pytorch_tanh" | "gelu_tanh" => Activation::GeluTanh,
                other => {
                    return Err(bad(
                        "hidden_act",
                        format!("is `{other}`; supported: silu, gelu_pytorch_tanh"),
                    ));
                }
            },
        };
        let block = BlockLayout {
            activation,
            attn_scale: match (gemma, json.query_pre_attn_scalar) {
                (true, Some(s)) => Some(1.0 / s.sqrt()),
                (true, None) => {
                    return Err(bad(
                        "query_pre_attn_scalar",
                        format!("is missing (a {arch} config sets the queries' scale with it)"),
                    ));
                }
                (false, _) => None,
            },
            attn_softcap: json.attn_logit_softcapping.filter(|_| gemma),
            final_softcap: json.final_logit_softcapping.filter(|_| gemma),
            ..BlockLayout::of_family(&arch, json.hidden_size)
        };
        // Which layers slide: `layer_types` where the file lists them, else
        // each family's rule as its transformers class applies it.
        let sliding: Vec<bool> = match &json.layer_types {
            Some(types) => {
                if types.len() != layers {
                    return Err(bad(
                        "layer_types",
                        format!(
                            "lists {} layers; num_hidden_layers is {layers}",
                            types.len()
                        ),
                    ));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        "sliding_attention" => Ok(true),
                        "full_attention" => Ok(false),
                        other => Err(bad(
                            "layer_types",
                            format!("has `{other}`; supported: sliding_attention, full_attention"),
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            None => (0..layers)
                .map(|i| match arch.as_str() {
                    "gemma2" => i % 2 == 0,
                    "gemma3" => {
                        let pattern = json.sliding_window_pattern.unwrap_or(6);
                        (i + 1) % pattern.max(1) != 0
                    }
                    "mistral" | "phi3" => true,
                    "qwen2" | "qwen3" => {
                        json.use_sliding_window == Some(true)
                            && i >= json.max_window_layers.unwrap_or(0)
                    }
                    _ => false,
                })
                .collect(),
        };
        let windows = sliding
            .iter()
            .map(|&s| match (s, json.sliding_window) {
                (true, Some(w)) => Ok(Some(w)),
                (true, None) if matches!(arch.as_str(), "mistral" | "phi3") => Ok(None),
                (true, None) => Err(bad(
                    "sliding_window",
                    "is missing, and the config has sliding layers".into(),
                )),
                (false, _) => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelConfig {
            hidden: json.hidden_size,
            layers,
            heads,
            kv_heads: json.num_key_value_heads.unwrap_or(heads),
            head_dim,
            rotary_dim: match partial {
                Some(f) => (head_dim as f32 * f) as usize,
                None => head_dim,
            },
            ffn: json.intermediate_size,
            vocab: json.vocab_size,
            rms_eps: json.rms_norm_eps,
            rope_theta: theta,
            rope_style: RopeStyle::Half,
            rope_scaling: scaling,
            qkv_bias: json.attention_bias.unwrap_or(arch == "qwen2"),
            tied_embeddings: json.tie_word_embeddings.unwrap_or(gemma),
            context_length: json.max_position_embeddings,
            block,
            windows,
            local_rope_theta: local_rope_theta.filter(|_| arch == "gemma3"),
            experts,
            architecture: arch,
        })
    }
}

/// RoPE scaling from a `rope_scaling` or `rope_parameters` object (and,
/// for LongRoPE, the context lengths at the top of `json`).
fn hf_rope_scaling(
    path: &Path,
    params: Option<&HfRopeScaling>,
    json: &HfConfig,
) -> Result<Option<RopeScaling>, ModelError> {
    let Some(s) = params else {
        return Ok(None);
    };
    let kind = s.rope_type.as_deref().or(s.kind.as_deref()).unwrap_or("");
    let need = |v: Option<f32>, key: &str| {
        v.ok_or_else(|| ModelError::Config {
            path: path.to_path_buf(),
            key: format!("rope_scaling.{key}"),
            problem: format!("is missing (needed by rope_type `{kind}`)"),
        })
    };
    Ok(match kind {
        "default" | "" => None,
        "linear" => Some(RopeScaling::Linear {
            factor: need(s.factor, "factor")?,
        }),
        "llama3" => Some(RopeScaling::Llama3 {
            factor: need(s.factor, "factor")?,
            low_freq_factor: need(s.low_freq_factor, "low_freq_factor")?,
            high_freq_factor: need(s.high_freq_factor, "high_freq_factor")?,
            original_max_position_embeddings: need(
                s.original_max_position_embeddings,
                "original_max_position_embeddings",
            )?,
        }),
        // As transformers computes it (`_compute_longrope_parameters`):
        // the attention factor from the file, else from the ratio of the
        // context lengths.
        "longrope" | "su" => {
            let original = s
                .original_max_position_embeddings
                .map(|v| v as usize)
                .or(json.original_max_position_embeddings)
                .ok_or_else(|| ModelError::Config {
                    path: path.to_path_buf(),
                    key: "original_max_position_embeddings".into(),
                    problem: format!("is missing (needed by rope_type `{kind}`)"),
                })?;
            let factor = match (s.factor, json.max_position_embeddings) {
                (Some(f), _) => f,
                (None, Some(max)) => max as f32 / original as f32,
                (None, None) => 1.0,
            };
            let attention_factor = s.attention_factor.unwrap_or(match factor <= 1.0 {
                true => 1.0,
                false => (1.0 + factor.ln() / (original as f32).ln()).sqrt(),
            });
            let factors = |v: &Option<Vec<f32>>, key: &str| {
                v.clone().ok_or_else(|| ModelError::Config {
                    path: path.to_path_buf(),
                    key: format!("rope_scaling.{key}"),
                    problem: format!("is missing (needed by rope_type `{kind}`)"),
                })
            };
            Some(RopeScaling::LongRope {
                short_factor: factors(&s.short_factor, "short_factor")?,
                long_factor: factors(&s.long_factor, "long_factor")?,
                original_max_position_embeddings: original,
                attention_factor,
                choice: LongRopeChoice::ByReach,
            })
        }
        other => {
            return Err(ModelError::Config {
                path: path.to_path_buf(),
                key: "rope_scaling.rope_type".into(),
                problem: format!("`{other}` is not supported; supported: linear, llama3, longrope"),
            });
        }
    })
}

/// The fields of an HF `config.json` the families use; others are ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HfConfig {
    pub model_type: String,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f32>,
    #[serde(default)]
    pub rope_scaling: Option<HfRopeScaling>,
    /// transformers 5's form of `rope_theta` + `rope_scaling`.
    #[serde(default)]
    pub rope_parameters: Option<HfRope>,
    /// Gemma 3's RoPE base on sliding layers (before transformers 5).
    #[serde(default)]
    pub rope_local_base_freq: Option<f32>,
    /// The share of each head that rotates (Phi).
    #[serde(default)]
    pub partial_rotary_factor: Option<f32>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// Gemma's name for `hidden_act`.
    #[serde(default)]
    pub hidden_activation: Option<String>,
    /// Gemma's query scale is `query_pre_attn_scalar^-½`.
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f32>,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f32>,
    #[serde(default)]
    pub final_logit_softcapping: Option<f32>,
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// `sliding_attention` or `full_attention`, one per layer.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Gemma 3: every `n`th layer is global, the others slide.
    #[serde(default, alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
    /// Qwen2/3: layers from `max_window_layers` on slide when set.
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
    #[serde(default)]
    pub max_window_layers: Option<usize>,
    /// Qwen3-MoE's experts (`num_local_experts` in transformers 5's files).
    #[serde(default, alias = "num_local_experts")]
    pub num_experts: Option<usize>,
    #[serde(default)]
    pub num_experts_per_tok: Option<usize>,
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
    #[serde(default)]
    pub norm_topk_prob: Option<bool>,
    #[serde(default)]
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Option<Vec<usize>>,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub attention_bias: Option<bool>,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    /// The context a LongRoPE model was first trained for (Phi-3).
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub eos_token_id: Option<EosIds>,
}

fn default_eps() -> f64 {
    1e-6
}

/// `eos_token_id` is one id or a list (Llama 3).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EosIds {
    One(u32),
    Many(Vec<u32>),
}

impl EosIds {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            EosIds::One(id) => vec![*id],
            EosIds::Many(ids) => ids.clone(),
        }
    }
}

/// transformers 5's `rope_parameters`: one object, or one per layer type
/// (Gemma 3: the global layers' and the sliding layers').
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HfRope {
    PerLayerType {
        full_attention: HfRopeScaling,
        #[serde(default)]
        sliding_attention: Option<HfRopeScaling>,
    },
    One(HfRopeScaling),
}

/// `rope_scaling` in config.json (`type` in older files, `rope_type` in
/// newer), or transformers 5's `rope_parameters`, which also holds the theta.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HfRopeScaling {
    #[serde(default)]
    pub rope_theta: Option<f32>,
    #[serde(default)]
    pub rope_type: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub factor: Option<f32>,
    #[serde(default)]
    pub low_freq_factor: Option<f32>,
    #[serde(default)]
    pub high_freq_factor: Option<f32>,
    #[serde(default)]
    pub original_max_position_embeddings: Option<f32>,
    #[serde(default)]
    pub partial_rotary_factor: Option<f32>,
    /// LongRoPE's divisors per rotated pair, within and past the
    /// original context, and its magnitude on cos and sin.
    #[serde(default)]
    pub short_factor: Option<Vec<f32>>,
    #[serde(default)]
    pub long_factor: Option<Vec<f32>>,
    #[serde(default)]
    pub attention_factor: Option<f32>,
}

/// An HF folder's `config.json`: as written, and as the model's shape.
pub fn read_hf_config(dir: &Path) -> Result<(HfConfig, ModelConfig), ModelError> {
    let config_path = dir.join("config.json");
    let text =
        crate::input::read_text(&config_path, crate::input::MAX_SMALL_FILE_BYTES).map_err(|e| {
            ModelError::Io {
                path: config_path.clone(),
                source: crate::input::io_error(e),
            }
        })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let hf: HfConfig =
        serde_path_to_error::deserialize(&mut de).map_err(|e| ModelError::Config {
            path: config_path.clone(),
            key: e.path().to_string(),
            problem: e.inner().to_string(),
        })?;
    let config = ModelConfig::from_hf(&config_path, &hf)?;
    config.check(&config_path)?;
    Ok((hf, config))
}

/// LongRoPE as llama.cpp reads it from a GGUF file (Phi-3 128k, Phi-3.5,
/// Phi-4-mini): the `rope_factors_long` and `rope_factors_short` tensors,
/// the original context and the attention factor from the metadata, and
/// the long set chosen once when the context the model runs with (its
/// own, `context_length`) exceeds the original, as llama.cpp chooses it
/// from its context size.
pub(crate) fn gguf_long_rope<R: std::io::Read + std::io::Seek>(
    path: &Path,
    file: &mut GgufFile<R>,
    config: &ModelConfig,
) -> Result<Option<RopeScaling>, ModelError> {
    let (long, short) = ("rope_factors_long.weight", "rope_factors_short.weight");
    if !(file.has_tensor(long) || file.has_tensor(short)) {
        return Ok(None);
    }
    let mut read = |name: &str| {
        file.read_f32(name).map_err(|problem| ModelError::Tensor {
            path: path.to_path_buf(),
            tensor: name.into(),
            problem,
        })
    };
    let (long_factor, short_factor) = (read(long)?, read(short)?);
    let arch = &config.architecture;
    let key = format!("{arch}.rope.scaling.original_context_length");
    let original = file
        .meta(&key)
        .and_then(|v| v.to_u32().ok())
        .ok_or_else(|| ModelError::Metadata {
            path: path.to_path_buf(),
            key: key.clone(),
            problem: "is missing (needed with the LongRoPE factors the file holds)".into(),
        })? as usize;
    // llama.cpp's default where the converter wrote none.
    let attention_factor = file
        .meta(&format!("{arch}.rope.scaling.attn_factor"))
        .and_then(|v| v.to_f32().ok())
        .unwrap_or(1.0);
    let choice = match config.context_length {
        Some(c) if c > original => LongRopeChoice::Long,
        _ => LongRopeChoice::Short,
    };
    Ok(Some(RopeScaling::LongRope {
        short_factor,
        long_factor,
        original_max_position_embeddings: original,
        attention_factor,
        choice,
    }))
}

/// The model's shape from a GGUF header (no tensor data is read but
/// LongRoPE's two factor sets, which say how positions are encoded).
pub fn read_gguf_config(path: &Path) -> Result<ModelConfig, ModelError> {
    let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file = GgufFile::read(file).map_err(|message| ModelError::Gguf {
        path: path.to_path_buf(),
        message,
    })?;
    let mut file = file;
    let mut config = ModelConfig::from_gguf(path, &file)?;
    if config.rope_scaling.is_none() {
        config.rope_scaling = gguf_long_rope(path, &mut file, &config)?;
    }
    config.check(path)?;
    Ok(config)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A one-block model description for unit tests (vocabulary of 10).
    pub(crate) fn tiny_config() -> ModelConfig {
        base()
    }

    fn base() -> ModelConfig {
        ModelConfig {
            architecture: "llama".into(),
            hidden: 8,
            layers: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            rotary_dim: 4,
            ffn: 16,
            vocab: 10,
            rms_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::Half,
            rope_scaling: None,
            qkv_bias: false,
            tied_embeddings: true,
            context_length: None,
            block: BlockLayout::llama(),
            windows: vec![None],
            local_rope_theta: None,
            experts: None,
        }
    }

    #[test]
    fn each_matrix_has_the_shape_and_bias_its_loaders_check() {
        use crate::model::Matrix as M;
        // Grouped-query heads whose width is not the hidden size: the
        // query's rows and the output's columns are the heads' width.
        let mut c = ModelConfig {
            head_dim: 5,
            ..base()
        };
        let shapes: Vec<(usize, usize)> = M::ALL.iter().map(|m| m.shape(&c)).collect();
        assert_eq!(
            shapes,
            [(10, 8), (5, 8), (5, 8), (8, 10), (16, 8), (16, 8), (8, 16)]
        );
        assert!(M::ALL.iter().all(|m| !m.has_bias(&c)));
        c.qkv_bias = true;
        let biased: Vec<M> = M::ALL.into_iter().filter(|m| m.has_bias(&c)).collect();
        assert_eq!(biased, [M::AttnQ, M::AttnK, M::AttnV]);
    }

    #[test]
    fn inverse_frequencies_follow_theta_and_linear_scaling() {
        let mut c = base();
        assert_eq!(c.inv_freqs(), vec![1.0, 0.01]);
        c.rope_scaling = Some(RopeScaling::Linear { factor: 4.0 });
        assert_eq!(c.inv_freqs(), vec![0.25, 0.0025]);
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let mut c = base();
        c.rope_scaling = Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        });
        // wavelength 2π (high frequency) is kept; 2π·100 = 628 < 8192/4 kept too.
        assert_eq!(c.inv_freqs(), vec![1.0, 0.01]);
        c.rope_theta = 1e8; // second frequency 1e-4: wavelength 62832 > 8192 → divided.
        let f = c.inv_freqs();
        assert!((f[1] - 1e-4 / 8.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn a_bad_head_split_is_named() {
        let mut c = base();
        c.kv_heads = 3;
        let e = c.check(Path::new("m/config.json")).unwrap_err().to_string();
        assert!(
            e.contains("kv_heads") && e.contains("does not divide"),
            "{e}"
        );
    }

    fn hf(extra: serde_json::Value) -> ModelConfig {
        try_hf(extra).unwrap()
    }

    fn try_hf(extra: serde_json::Value) -> Result<ModelConfig, ModelError> {
        let mut json = serde_json::json!({
            "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
        });
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let parsed: HfConfig = serde_json::from_value(json).unwrap();
        ModelConfig::from_hf(Path::new("config.json"), &parsed)
    }

    #[test]
    fn gemma3_reads_its_layer_pattern_and_two_rope_bases_in_both_forms() {
        let gemma = serde_json::json!({"model_type": "gemma3_text", "num_hidden_layers": 7,
            "query_pre_attn_scalar": 256, "sliding_window": 512, "head_dim": 16});
        // transformers 4's keys: a pattern of 6, the local base apart.
        let mut old = gemma.clone();
        old.as_object_mut().unwrap().extend(
            serde_json::json!({"rope_theta": 1e6, "rope_local_base_freq": 1e4,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 6})
            .as_object()
            .unwrap()
            .clone(),
        );
        let old = hf(old);
        let sliding: Vec<bool> = old.windows.iter().map(Option::is_some).collect();
        assert_eq!(sliding, [true, true, true, true, true, false, true]);
        assert_eq!(old.windows[0], Some(512));
        assert_eq!(old.architecture, "gemma3");
        assert_eq!(old.block.qk_norm, Some(QkNorm::PerHead));
        assert!(old.block.unit_offset_norms && old.block.post_norms && old.tied_embeddings);
        assert_eq!(old.block.attn_scale, Some(1.0 / 16.0));
        assert_eq!(old.block.embed_scale, Some(8.0));
        // Sliding layers: the local base, unscaled; global ones: scaled.
        assert!(old.local_rope(0) && !old.local_rope(5));
        assert_eq!(old.layer_inv_freqs(0)[1], 1.0 / 1e4f32.powf(2.0 / 16.0));
        assert_eq!(old.layer_inv_freqs(5)[0], 1.0 / 8.0);
        // transformers 5's keys: one rope object per layer type.
        let mut new = gemma;
        new.as_object_mut().unwrap().extend(
            serde_json::json!({"rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}},
                "layer_types": ["full_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "full_attention", "full_attention", "full_attention"]})
            .as_object()
            .unwrap()
            .clone(),
        );
        let new = hf(new);
        assert_eq!((new.rope_theta, new.local_rope_theta), (1e6, Some(1e4)));
        assert_eq!(new.rope_scaling, old.rope_scaling);
        let sliding: Vec<bool> = new.windows.iter().map(Option::is_some).collect();
        assert_eq!(sliding, [false, true, false, true, false, false, false]);
    }

    #[test]
    fn each_family_sets_its_own_block() {
        let q = hf(serde_json::json!({"model_type": "qwen3"}));
        assert_eq!(q.block.qk_norm, Some(QkNorm::PerHead));
        assert!(q.block.pre_norms && !q.block.post_norms && !q.qkv_bias);
        let o = hf(serde_json::json!({"model_type": "olmo2"}));
        assert_eq!(o.block.qk_norm, Some(QkNorm::Whole));
        assert!(!o.block.pre_norms && o.block.post_norms);
        let g = hf(
            serde_json::json!({"model_type": "gemma2", "query_pre_attn_scalar": 144,
            "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
        );
        assert_eq!(g.block.activation, Activation::GeluTanh);
        assert_eq!(
            (g.block.attn_softcap, g.block.final_softcap),
            (Some(50.0), Some(30.0))
        );
        assert_eq!(g.block.attn_scale, Some(1.0 / 12.0));
        let sliding: Vec<bool> = g.windows.iter().map(Option::is_some).collect();
        assert_eq!(
            sliding,
            [true, false],
            "gemma 2 alternates, layer 0 sliding"
        );
        assert!(
            hf(serde_json::json!({"model_type": "llama"}))
                .block
                .is_llama()
        );
    }

    #[test]
    fn each_family_has_its_own_norms_at_their_own_widths() {
        let widths = |c: &ModelConfig| -> Vec<Option<usize>> {
            BLOCK_NORMS.iter().map(|s| c.norm_width(s)).collect()
        };
        // hidden 64, 4 heads of 16, 4 key/value heads (no num_key_value_heads).
        let llama = hf(serde_json::json!({}));
        assert_eq!(widths(&llama), [Some(64), None, None, None, Some(64), None]);
        let qwen3 = hf(serde_json::json!({"model_type": "qwen3"}));
        assert_eq!(
            widths(&qwen3),
            [Some(64), Some(16), Some(16), None, Some(64), None]
        );
        let olmo2 = hf(serde_json::json!({"model_type": "olmo2", "num_key_value_heads": 2}));
        assert_eq!(
            widths(&olmo2),
            [None, Some(64), Some(32), Some(64), None, Some(64)]
        );
        let gemma2 = hf(serde_json::json!({"model_type": "gemma2",
            "query_pre_attn_scalar": 16, "sliding_window": 8}));
        assert_eq!(
            widths(&gemma2),
            [Some(64), None, None, Some(64), Some(64), Some(64)]
        );
    }

    #[test]
    fn what_a_family_needs_and_lacks_is_named() {
        let e = try_hf(serde_json::json!({"model_type": "gemma2"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("query_pre_attn_scalar"), "{e}");
        let e = try_hf(serde_json::json!({"model_type": "gemma2", "query_pre_attn_scalar": 16}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sliding_window") && e.contains("missing"), "{e}");
        let e = try_hf(serde_json::json!({"model_type": "gemma3", "query_pre_attn_scalar": 16}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("multimodal") && e.contains("gemma3_text"), "{e}");
        let e = try_hf(serde_json::json!({"model_type": "mixtral"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`mixtral` is not supported") && e.contains("gemma3_text, qwen3_moe"),
            "{e}"
        );
        let e = try_hf(serde_json::json!({"model_type": "qwen3", "hidden_act": "relu"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("hidden_act") && e.contains("relu"), "{e}");
        let e = try_hf(serde_json::json!({"model_type": "qwen3",
            "layer_types": ["full_attention"]}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("layer_types") && e.contains("num_hidden_layers is 2"),
            "{e}"
        );
    }

    #[test]
    fn rope_settings_are_read_in_both_config_json_forms() {
        let old = hf(serde_json::json!({"rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0}}));
        assert_eq!(old.rope_theta, 500000.0);
        assert_eq!(old.rope_scaling, Some(RopeScaling::Linear { factor: 2.0 }));
        let new = hf(
            serde_json::json!({"rope_parameters": {"rope_type": "llama3",
            "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
        );
        assert_eq!(new.rope_theta, 500000.0);
        assert!(matches!(
            new.rope_scaling,
            Some(RopeScaling::Llama3 { factor: 8.0, .. })
        ));
        let plain =
            hf(serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}));
        assert_eq!((plain.rope_theta, plain.rope_scaling), (1e6, None));
        assert_eq!(hf(serde_json::json!({})).rope_theta, 10_000.0);
        assert_eq!(plain.kv_heads, 4, "no num_key_value_heads: one per head");
    }

    /// Phi-3 128k's form (the old `rope_scaling` and a top-level original
    /// context), read as transformers computes it.
    #[test]
    fn longrope_switches_by_reach_and_reruns_the_crossing_pass() {
        // Heads of 16: 8 rotated pairs.
        let short = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0];
        let long = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0];
        let c = hf(
            serde_json::json!({"model_type": "phi3", "max_position_embeddings": 128,
            "original_max_position_embeddings": 16,
            "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}),
        );
        c.check(Path::new("config.json")).unwrap();
        // sqrt(1 + ln(128 / 16) / ln 16).
        let af = (1.0f32 + 8f32.ln() / 16f32.ln()).sqrt();
        let within = c.rope(false, 16);
        let past = c.rope(false, 17);
        assert!((within.magnitude - af).abs() < 1e-6 && past.magnitude == within.magnitude);
        let plain = 1.0 / 10_000f32.powf(14.0 / 16.0);
        assert!(
            (within.inv_freqs[7] - plain / 2.0).abs() < 1e-9,
            "{within:?}"
        );
        assert!((past.inv_freqs[7] - plain / 8.0).abs() < 1e-9, "{past:?}");
        assert_eq!(within.inv_freqs[0], 1.0);
        // The pass that crosses 16 with positions cached runs again; one
        // that starts past it, or from nothing, does not.
        assert!(c.reruns(16, 1) && c.reruns(10, 7));
        assert!(!c.reruns(15, 1) && !c.reruns(17, 1) && !c.reruns(0, 40));
        // An attention factor the file gives is taken as it is.
        let given = hf(
            serde_json::json!({"model_type": "phi3", "max_position_embeddings": 128,
            "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                "attention_factor": 1.5, "short_factor": short, "long_factor": long}}),
        );
        assert_eq!(given.rope(false, 1).magnitude, 1.5);
        // Read from a folder, the rule is transformers' own: nothing to say
        // on export. A GGUF's set, chosen once, is said to change.
        assert_eq!(c.export_note(), None);
        let mut gguf = c.clone();
        if let Some(RopeScaling::LongRope { choice, .. }) = &mut gguf.rope_scaling {
            *choice = LongRopeChoice::Long;
        }
        assert!(!gguf.reruns(16, 1) && gguf.rope(false, 1) == past);
        // The sets a backend builds once, and the one each pass picks.
        let sets = c.rope_sets(1);
        assert_eq!(
            (sets[0][0].clone(), sets[0][1].clone()),
            (within.clone(), past.clone())
        );
        assert_eq!(
            (c.rope_set(16), c.rope_set(17), gguf.rope_set(17)),
            (0, 1, 0)
        );
        let note = gguf.export_note().unwrap();
        assert!(
            note.contains("the long LongRoPE factors at every length")
                && note.contains("up to 16 positions"),
            "{note}"
        );
        // Other models neither scale cos and sin nor run again.
        let llama = hf(serde_json::json!({}));
        assert_eq!(llama.rope(false, 1000).magnitude, 1.0);
        assert!(!llama.reruns(16, 1));
    }

    #[test]
    fn longrope_without_what_it_needs_is_named() {
        let e = try_hf(serde_json::json!({"model_type": "phi3",
            "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("original_max_position_embeddings"), "{e}");
        let e = try_hf(
            serde_json::json!({"model_type": "phi3", "original_max_position_embeddings": 16,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0]}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("long_factor") && e.contains("missing"), "{e}");
        // One factor per rotated pair (8 here), each positive.
        let c = hf(
            serde_json::json!({"model_type": "phi3", "original_max_position_embeddings": 16,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0, 2.0],
                "long_factor": [1.0, 2.0]}}),
        );
        let e = c.check(Path::new("config.json")).unwrap_err().to_string();
        assert!(
            e.contains("rope_scaling.short_factor")
                && e.contains("holds 2 factors")
                && e.contains("(8)"),
            "{e}"
        );
        let e = try_hf(serde_json::json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`yarn` is not supported") && e.contains("longrope"),
            "{e}"
        );
    }
}
