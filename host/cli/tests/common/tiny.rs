//! A tiny llama model the tests build themselves: seeded random weights,
//! 3 layers, a byte-level BPE tokenizer with a chat template, written as an
//! HF folder (sharded safetensors) and as GGUF files (f32 and Q8_0).

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};
use vauban::model::hf::permute_qk;
use vauban::model::hf_name;

pub const HIDDEN: usize = 64;
pub const LAYERS: usize = 3;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;
pub const FFN: usize = 128;
pub const THETA: f32 = 10_000.0;
pub const EPS: f32 = 1e-5;
/// The HF form's `max_position_embeddings` (the GGUF form declares none).
pub const CONTEXT: usize = 64;

/// ChatML, the shape SmolLM2 and Qwen use.
pub const CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const MERGES: &[(&str, &str)] = &[("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")];
const SPECIAL: &[&str] = &["<s>", "</s>", "<|im_start|>", "<|im_end|>"];

/// The vocabulary in id order: specials, the 256 byte symbols, then merges.
pub fn vocab() -> Vec<String> {
    let mut bytes: Vec<char> = ByteLevel::alphabet().into_iter().collect();
    bytes.sort();
    SPECIAL
        .iter()
        .map(|s| s.to_string())
        .chain(bytes.into_iter().map(String::from))
        .chain(MERGES.iter().map(|(a, b)| format!("{a}{b}")))
        .collect()
}

pub fn vocab_size() -> usize {
    vocab().len()
}

pub fn tokenizer() -> Tokenizer {
    let vocab: ahash::AHashMap<String, u32> = vocab()
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect();
    let merges = MERGES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .unwrap();
    let mut t = Tokenizer::new(bpe);
    t.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    t.with_decoder(Some(ByteLevel::default()));
    t.add_special_tokens(
        SPECIAL
            .iter()
            .map(|s| AddedToken::from(*s, true))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    t
}

/// Deterministic pseudo-random values in [-scale, scale) (xorshift64*).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let u = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            (u * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Seeded random tensors, each from its own stream: the `n`-th drawn of
/// seed `s` is the same whatever was drawn before it.
struct Draws {
    seed: u64,
    n: u64,
}

impl Draws {
    fn new(seed: u64) -> Draws {
        Draws { seed, n: 0 }
    }

    /// Values uniform in `offset ± scale`.
    fn next(&mut self, shape: &[usize], scale: f32, offset: f32) -> Tensor {
        self.n += 1;
        let len = shape.iter().product();
        let vals: Vec<f32> = values(self.seed * 1000 + self.n, len, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        Tensor::from_vec(vals, shape, &Device::Cpu).unwrap()
    }
}

/// Every weight by GGUF name, in HF layout (Q and K not permuted); with
/// `qkv_bias`, biases on the query, key and value projections too (as
/// Qwen2 and some llama variants have), drawn after every other tensor so
/// the rest are the same as without them.
pub fn weights(seed: u64, qkv_bias: bool) -> Vec<(String, Tensor)> {
    let v = vocab_size();
    let mut out = Vec::new();
    let mut draw = Draws::new(seed);
    let mut t = |name: String, shape: &[usize], scale: f32, offset: f32| {
        out.push((name, draw.next(shape, scale, offset)));
    };
    t("token_embd.weight".into(), &[v, HIDDEN], 1.0, 0.0);
    for i in 0..LAYERS {
        let s = 0.5 / (HIDDEN as f32).sqrt();
        t(format!("blk.{i}.attn_norm.weight"), &[HIDDEN], 0.1, 1.0);
        t(
            format!("blk.{i}.attn_q.weight"),
            &[HEADS * HEAD_DIM, HIDDEN],
            s * 3.0,
            0.0,
        );
        t(
            format!("blk.{i}.attn_k.weight"),
            &[KV_HEADS * HEAD_DIM, HIDDEN],
            s * 3.0,
            0.0,
        );
        t(
            format!("blk.{i}.attn_v.weight"),
            &[KV_HEADS * HEAD_DIM, HIDDEN],
            s,
            0.0,
        );
        t(
            format!("blk.{i}.attn_output.weight"),
            &[HIDDEN, HEADS * HEAD_DIM],
            s,
            0.0,
        );
        t(format!("blk.{i}.ffn_norm.weight"), &[HIDDEN], 0.1, 1.0);
        t(format!("blk.{i}.ffn_gate.weight"), &[FFN, HIDDEN], s, 0.0);
        t(format!("blk.{i}.ffn_up.weight"), &[FFN, HIDDEN], s, 0.0);
        t(
            format!("blk.{i}.ffn_down.weight"),
            &[HIDDEN, FFN],
            0.5 / (FFN as f32).sqrt(),
            0.0,
        );
    }
    t("output_norm.weight".into(), &[HIDDEN], 0.1, 1.0);
    t(
        "output.weight".into(),
        &[v, HIDDEN],
        0.5 / (HIDDEN as f32).sqrt() * 4.0,
        0.0,
    );
    if qkv_bias {
        for i in 0..LAYERS {
            t(
                format!("blk.{i}.attn_q.bias"),
                &[HEADS * HEAD_DIM],
                0.5,
                0.0,
            );
            t(
                format!("blk.{i}.attn_k.bias"),
                &[KV_HEADS * HEAD_DIM],
                0.5,
                0.0,
            );
            t(
                format!("blk.{i}.attn_v.bias"),
                &[KV_HEADS * HEAD_DIM],
                0.5,
                0.0,
            );
        }
    }
    out
}

/// Writes the HF folder form (two safetensors shards) into `dir`.
pub fn write_hf(dir: &Path, seed: u64) -> PathBuf {
    write_hf_as(dir, seed, false)
}

/// The HF folder form with biases on Q, K and V (`attention_bias`).
pub fn write_hf_biased(dir: &Path, seed: u64) -> PathBuf {
    write_hf_as(dir, seed, true)
}

fn write_hf_as(dir: &Path, seed: u64, qkv_bias: bool) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let all = weights(seed, qkv_bias);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": vocab_size(),
        "rms_norm_eps": EPS,
        "rope_theta": THETA,
        "tie_word_embeddings": false,
        "attention_bias": qkv_bias,
        "max_position_embeddings": CONTEXT,
        "bos_token_id": 0,
        "eos_token_id": 3,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    // The names as the model's family calls them, from its config.json.
    let (_, shape) = vauban::model::config::read_hf_config(dir).unwrap();
    let (first, second) = all.split_at(all.len() / 2);
    for (i, part) in [first, second].into_iter().enumerate() {
        let map: std::collections::HashMap<String, Tensor> = part
            .iter()
            .map(|(n, t)| (hf_name(n, &shape), t.clone()))
            .collect();
        let file = dir.join(format!("model-{:05}-of-00002.safetensors", i + 1));
        candle_core::safetensors::save(&map, file).unwrap();
    }
    tokenizer().save(dir.join("tokenizer.json"), false).unwrap();
    let tc = serde_json::json!({
        "add_bos_token": false,
        "bos_token": "<s>",
        "eos_token": "<|im_end|>",
        "chat_template": CHAT_TEMPLATE,
    });
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    dir.to_path_buf()
}

/// Writes the GGUF form: Q and K permuted as llama.cpp's converter does,
/// matrices stored as `dtype` (norms always f32).
pub fn write_gguf(path: &Path, seed: u64, dtype: GgmlDType) -> PathBuf {
    write_gguf_as(path, seed, dtype, false)
}

/// The GGUF form with biases on Q, K and V, the Q and K biases' rows
/// permuted with their matrices' as llama.cpp's converter does.
pub fn write_gguf_biased(path: &Path, seed: u64, dtype: GgmlDType) -> PathBuf {
    write_gguf_as(path, seed, dtype, true)
}

fn write_gguf_as(path: &Path, seed: u64, dtype: GgmlDType, qkv_bias: bool) -> PathBuf {
    let tensors: Vec<(String, QTensor)> = weights(seed, qkv_bias)
        .into_iter()
        .map(|(name, t)| {
            let t = if name.contains(".attn_q.") {
                permute_qk(&t, HEADS, false).unwrap()
            } else if name.contains(".attn_k.") {
                permute_qk(&t, KV_HEADS, false).unwrap()
            } else {
                t
            };
            let dt = if t.rank() == 1 { GgmlDType::F32 } else { dtype };
            (name, QTensor::quantize(&t, dt).unwrap())
        })
        .collect();
    let s = |v: &str| Value::String(v.to_owned());
    let u = |v: usize| Value::U32(v as u32);
    let mut metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", s("llama")),
        ("general.name", s("tiny-test-llama")),
        ("llama.block_count", u(LAYERS)),
        ("llama.embedding_length", u(HIDDEN)),
        ("llama.feed_forward_length", u(FFN)),
        ("llama.attention.head_count", u(HEADS)),
        ("llama.attention.head_count_kv", u(KV_HEADS)),
        ("llama.rope.dimension_count", u(HEAD_DIM)),
        ("llama.rope.freq_base", Value::F32(THETA)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(EPS)),
        ("llama.vocab_size", u(vocab_size())),
    ];
    metadata.extend(tokenizer_metadata());
    write_file(path, &metadata, &tensors)
}

/// The tokenizer and chat template as GGUF metadata (byte-level BPE).
fn tokenizer_metadata() -> Vec<(&'static str, Value)> {
    let s = |v: &str| Value::String(v.to_owned());
    let types: Vec<Value> = vocab()
        .iter()
        .map(|t| Value::I32(if SPECIAL.contains(&t.as_str()) { 3 } else { 1 }))
        .collect();
    vec![
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("gpt2")),
        (
            "tokenizer.ggml.tokens",
            Value::Array(vocab().iter().map(|t| s(t)).collect()),
        ),
        ("tokenizer.ggml.token_type", Value::Array(types)),
        (
            "tokenizer.ggml.merges",
            Value::Array(MERGES.iter().map(|(a, b)| s(&format!("{a} {b}"))).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(0)),
        ("tokenizer.ggml.eos_token_id", Value::U32(3)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
        ("tokenizer.chat_template", s(CHAT_TEMPLATE)),
    ]
}

fn write_file(path: &Path, metadata: &[(&str, Value)], tensors: &[(String, QTensor)]) -> PathBuf {
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &ts).unwrap();
    path.to_path_buf()
}

/// The GGUF architectures beside llama that the family tests run, one
/// tiny model each ([`write_family_gguf`]).
pub const FAMILIES: [&str; 6] = ["qwen3", "gemma2", "gemma3", "olmo2", "phi3", "qwen3moe"];

/// A tiny model of `family` (a GGUF architecture vauban runs) with the
/// tiny llama's sizes and tokenizer: the family's own metadata (windows of
/// 5, soft-caps, a partial rotary embedding, 4 experts of which 2 run),
/// and every tensor its layout has, random, as vauban's description of
/// the family names them (`ModelConfig::norm_width`, fused matrices,
/// expert stacks). These are for the executor contract and the
/// cross-backend checks; whether vauban reads each family as its
/// references do is `families.rs`'s work, against transformers and
/// llama.cpp.
pub fn write_family_gguf(
    path: &Path,
    family: &'static str,
    seed: u64,
    dtype: GgmlDType,
) -> PathBuf {
    // Phi-3's Q, K, V and gate, up fused, as llama.cpp's converter writes them.
    write_family_gguf_as(path, family, seed, dtype, family == "phi3")
}

/// A tiny Phi-3 whose GGUF keeps Q, K, V and gate, up apart (llama.cpp
/// reads that form too).
pub fn write_phi3_unfused_gguf(path: &Path, seed: u64, dtype: GgmlDType) -> PathBuf {
    write_family_gguf_as(path, "phi3", seed, dtype, false)
}

fn write_family_gguf_as(
    path: &Path,
    family: &'static str,
    seed: u64,
    dtype: GgmlDType,
    fused: bool,
) -> PathBuf {
    let s = |v: &str| Value::String(v.to_owned());
    let u = |v: usize| Value::U32(v as u32);
    let key = |k: &str| -> &'static str { format!("{family}.{k}").leak() };
    let mut metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", s(family)),
        ("general.name", s(&format!("tiny-test-{family}"))),
        (key("block_count"), u(LAYERS)),
        (key("embedding_length"), u(HIDDEN)),
        (key("feed_forward_length"), u(FFN)),
        (key("attention.head_count"), u(HEADS)),
        (key("attention.head_count_kv"), u(KV_HEADS)),
        (key("rope.freq_base"), Value::F32(THETA)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(EPS)),
        (key("context_length"), u(CONTEXT)),
    ];
    match family {
        "gemma2" => metadata.extend([
            (key("attention.sliding_window"), u(5)),
            (key("attn_logit_softcapping"), Value::F32(3.0)),
            (key("final_logit_softcapping"), Value::F32(2.0)),
        ]),
        "gemma3" => metadata.extend([
            (key("attention.sliding_window"), u(5)),
            (key("rope.freq_base_swa"), Value::F32(1_000.0)),
        ]),
        "phi3" => metadata.push((key("rope.dimension_count"), u(HEAD_DIM * 3 / 4))),
        "qwen3moe" => metadata.extend([
            (key("expert_count"), u(4)),
            (key("expert_used_count"), u(2)),
            (key("expert_feed_forward_length"), u(32)),
        ]),
        _ => {}
    }
    metadata.extend(tokenizer_metadata());
    // What vauban makes of the header (an output matrix, or tied
    // embeddings as Gemma's), then the tensors that description needs.
    let tied = family.starts_with("gemma");
    let placeholder = Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu).unwrap();
    let mut header: Vec<(String, QTensor)> = Vec::new();
    for (name, wanted) in [("output.weight", !tied), ("blk.0.attn_qkv.weight", fused)] {
        if wanted {
            let t = QTensor::quantize(&placeholder, GgmlDType::F32).unwrap();
            header.push((name.into(), t));
        }
    }
    write_file(path, &metadata, &header);
    let c = vauban::model::read_config(path).unwrap();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut draw = Draws::new(seed);
    let mut t = |name: String, shape: &[usize], scale: f32, offset: f32| {
        tensors.push((name, draw.next(shape, scale, offset)));
    };
    let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let sc = 0.5 / (HIDDEN as f32).sqrt();
    t("token_embd.weight".into(), &[c.vocab, HIDDEN], 1.0, 0.0);
    for i in 0..LAYERS {
        for stem in vauban::model::config::BLOCK_NORMS {
            if let Some(width) = c.norm_width(stem) {
                t(format!("blk.{i}.{stem}.weight"), &[width], 0.1, 1.0);
            }
        }
        match c.block.fused {
            true => t(
                format!("blk.{i}.attn_qkv.weight"),
                &[q + 2 * kv, HIDDEN],
                sc * 3.0,
                0.0,
            ),
            false => {
                t(
                    format!("blk.{i}.attn_q.weight"),
                    &[q, HIDDEN],
                    sc * 3.0,
                    0.0,
                );
                t(
                    format!("blk.{i}.attn_k.weight"),
                    &[kv, HIDDEN],
                    sc * 3.0,
                    0.0,
                );
                t(format!("blk.{i}.attn_v.weight"), &[kv, HIDDEN], sc, 0.0);
            }
        }
        t(format!("blk.{i}.attn_output.weight"), &[HIDDEN, q], sc, 0.0);
        let down = 0.5 / (FFN as f32).sqrt();
        match (&c.experts, c.block.fused) {
            (Some(e), _) => {
                t(
                    format!("blk.{i}.ffn_gate_inp.weight"),
                    &[e.count, HIDDEN],
                    sc * 4.0,
                    0.0,
                );
                t(
                    format!("blk.{i}.ffn_gate_exps.weight"),
                    &[e.count, e.ffn, HIDDEN],
                    sc,
                    0.0,
                );
                t(
                    format!("blk.{i}.ffn_up_exps.weight"),
                    &[e.count, e.ffn, HIDDEN],
                    sc,
                    0.0,
                );
                t(
                    format!("blk.{i}.ffn_down_exps.weight"),
                    &[e.count, HIDDEN, e.ffn],
                    down,
                    0.0,
                );
            }
            // Gate and up in one matrix, gate first.
            (None, true) => t(
                format!("blk.{i}.ffn_up.weight"),
                &[2 * FFN, HIDDEN],
                sc,
                0.0,
            ),
            (None, false) => {
                t(format!("blk.{i}.ffn_gate.weight"), &[FFN, HIDDEN], sc, 0.0);
                t(format!("blk.{i}.ffn_up.weight"), &[FFN, HIDDEN], sc, 0.0);
            }
        }
        if c.experts.is_none() {
            t(
                format!("blk.{i}.ffn_down.weight"),
                &[HIDDEN, FFN],
                down,
                0.0,
            );
        }
    }
    t("output_norm.weight".into(), &[HIDDEN], 0.1, 1.0);
    if !tied {
        t("output.weight".into(), &[c.vocab, HIDDEN], sc * 4.0, 0.0);
    }
    // The end-of-sequence token's output row is zero (its logit 0, below
    // the largest of the other random logits), so a random model of every
    // family generates before it ends.
    let output = if tied {
        "token_embd.weight"
    } else {
        "output.weight"
    };
    for (name, t) in &mut tensors {
        if name == output {
            let mut rows = t.to_vec2::<f32>().unwrap();
            rows[3].iter_mut().for_each(|x| *x = 0.0);
            *t = Tensor::new(rows, &Device::Cpu).unwrap();
        }
    }
    let tensors: Vec<(String, QTensor)> = tensors
        .into_iter()
        .map(|(name, t)| {
            let dt = if t.rank() == 1 { GgmlDType::F32 } else { dtype };
            (name, QTensor::quantize(&t, dt).unwrap())
        })
        .collect();
    write_file(path, &metadata, &tensors)
}
