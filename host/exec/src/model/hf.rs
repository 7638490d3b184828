//! HF-style model folders as every backend reads and writes them: the
//! safetensors files read by GGUF tensor name in GGUF's layout
//! ([`HfWeights`]), and the exporter that writes a model back as a folder
//! ([`export_weights`]). candle_core serves here as the safetensors and
//! array library; nothing in this module belongs to one backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::assets::ModelAssets;
use super::config::{self, RopeStyle};
use super::host_weights::HostTensor;
use super::{ModelError, Special, fused_part, hf_name};

/// llama.cpp's row permutation of Q and K (a matrix `[out, in]` or a bias
/// `[out]`, `heads` heads), which turns `rotate_half` pairs into adjacent
/// pairs. `inverse` undoes it.
pub fn permute_qk(w: &Tensor, heads: usize, inverse: bool) -> Result<Tensor, ModelError> {
    let out = w.dim(0)?;
    let inp = w.elem_count() / out.max(1);
    let half = out / heads / 2;
    Ok(match inverse {
        false => w.reshape((heads, 2, half, inp))?.transpose(1, 2)?,
        true => w.reshape((heads, half, 2, inp))?.transpose(1, 2)?,
    }
    .contiguous()?
    .reshape(w.shape())?)
}

/// An HF folder's safetensors files, read by GGUF tensor name
/// (`blk.0.attn_q.weight`) in GGUF's layout: Q and K rows permuted where
/// the model pairs RoPE dimensions as llama.cpp does. Every backend that
/// loads a folder reads its weights through this, as f32.
pub struct HfWeights {
    files: Vec<MmapedSafetensors>,
    /// Tensor name → the file that holds it.
    owner: BTreeMap<String, usize>,
    weight_files: Vec<PathBuf>,
    /// The model's shape: its heads and RoPE pairing (for the Q/K rows),
    /// its family (for the names and norm weights).
    config: config::ModelConfig,
}

impl HfWeights {
    /// Maps every weight file of the folder; a tensor held by two files is
    /// refused, naming both.
    pub fn open(assets: &ModelAssets) -> Result<HfWeights, ModelError> {
        let weight_files = assets.weight_files.clone();
        // One map per file, so a tensor held by two files is found, not shadowed.
        let mut files = Vec::new();
        let mut owner: BTreeMap<String, usize> = BTreeMap::new();
        for (i, path) in weight_files.iter().enumerate() {
            // SAFETY: mapped read-only; vauban never writes a model it is reading.
            let st = unsafe { MmapedSafetensors::new(path) }.map_err(|e| ModelError::Tensor {
                path: path.clone(),
                tensor: "*".into(),
                problem: format!("is not a readable safetensors file: {e}"),
            })?;
            for (name, _) in st.tensors() {
                if let Some(&first) = owner.get(&name) {
                    return Err(ModelError::Tensor {
                        path: path.clone(),
                        tensor: name,
                        problem: format!(
                            "is also in {}; remove the stale file (or list the shards in model.safetensors.index.json)",
                            weight_files[first].display()
                        ),
                    });
                }
                owner.insert(name, i);
            }
            files.push(st);
        }
        Ok(HfWeights {
            files,
            owner,
            weight_files,
            config: assets.config.clone(),
        })
    }

    /// The tensor GGUF calls `name`, as f32 on `device`, as a GGUF file
    /// holds it (a Gemma's norm weights as `1 + w`); `None` when the folder
    /// has no such tensor.
    pub fn get(&self, name: &str, device: &Device) -> Result<Option<Tensor>, ModelError> {
        if let Some(stack) = self.experts(name, device)? {
            return Ok(Some(stack));
        }
        // A matrix the folder fuses with others: its rows of the fused one.
        if let Some((fused, start, rows)) = fused_part(name, &self.config) {
            return match self.read(&fused, device)? {
                Some(t) => Ok(Some(t.narrow(0, start, rows)?)),
                None => Ok(None),
            };
        }
        self.read(name, device)
    }

    /// A mixture's experts' matrices as GGUF stacks them (`ffn_gate_exps`,
    /// `ffn_up_exps`, `ffn_down_exps`: `[experts, out, in]`), from the
    /// folder's stacks (transformers 5: `mlp.experts.gate_up_proj`, gate
    /// first, and `mlp.experts.down_proj`) or its matrices per expert
    /// (`mlp.experts.{e}.gate_proj.weight`, as the Hub's Qwen3-MoE files
    /// hold them). `None` for any other name.
    fn experts(&self, name: &str, device: &Device) -> Result<Option<Tensor>, ModelError> {
        let Some((layer, stem)) = name
            .strip_prefix("blk.")
            .and_then(|r| r.split_once('.'))
            .filter(|(_, stem)| stem.ends_with("_exps.weight"))
        else {
            return Ok(None);
        };
        let Some(e) = &self.config.experts else {
            return Ok(None);
        };
        let at = |hf: String| -> Result<Option<Tensor>, ModelError> {
            let Some(&i) = self.owner.get(&hf) else {
                return Ok(None);
            };
            Ok(Some(
                self.files[i]
                    .load(&hf, device)
                    .and_then(|t| t.to_dtype(DType::F32))
                    .map_err(|err| ModelError::Tensor {
                        path: self.weight_files[i].clone(),
                        tensor: hf.clone(),
                        problem: err.to_string(),
                    })?,
            ))
        };
        let prefix = format!("model.layers.{layer}.mlp.experts");
        let (stacked, part, each) = match stem {
            "ffn_gate_exps.weight" => ("gate_up_proj", Some(0), "gate_proj"),
            "ffn_up_exps.weight" => ("gate_up_proj", Some(e.ffn), "up_proj"),
            "ffn_down_exps.weight" => ("down_proj", None, "down_proj"),
            _ => return Ok(None),
        };
        if let Some(t) = at(format!("{prefix}.{stacked}"))? {
            return Ok(Some(match part {
                Some(start) => t.narrow(1, start, e.ffn)?,
                None => t,
            }));
        }
        let mut per = Vec::with_capacity(e.count);
        for x in 0..e.count {
            match at(format!("{prefix}.{x}.{each}.weight"))? {
                Some(t) => per.push(t),
                None => return Ok(None),
            }
        }
        Ok(Some(Tensor::stack(&per, 0)?))
    }

    /// The tensor GGUF calls `name`, stored under its own HF name.
    fn read(&self, name: &str, device: &Device) -> Result<Option<Tensor>, ModelError> {
        let c = &self.config;
        let hf = hf_name(name, c);
        let Some(&i) = self.owner.get(&hf) else {
            return Ok(None);
        };
        let bad = |problem: String| ModelError::Tensor {
            path: self.weight_files[i].clone(),
            tensor: hf.clone(),
            problem,
        };
        let view = self.files[i].get(&hf).map_err(|e| bad(e.to_string()))?;
        use safetensors::Dtype as S;
        if !matches!(view.dtype(), S::F32 | S::F16 | S::BF16 | S::F64) {
            let stem = hf.strip_suffix(".weight").unwrap_or(&hf);
            if self.owner.contains_key(&format!("{stem}.scales")) {
                return Err(bad(
                    "is packed by MLX's quantization (an mlx-community checkpoint), which only the MLX executor reads: set executor = \"mlx\" (a build with --features mlx), or use a GGUF or float copy of the model".into(),
                ));
            }
            return Err(bad(format!(
                "is stored as {:?}; weights must be f32, f16, bf16 or f64 (quantized checkpoints: use GGUF)",
                view.dtype()
            )));
        }
        let t = self.files[i]
            .load(&hf, device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| bad(e.to_string()))?;
        if c.block.unit_offset_norms && is_norm(name) {
            return Ok(Some((t + 1.0)?));
        }
        Ok(Some(
            match (
                c.rope_style == RopeStyle::Interleaved,
                name.contains(".attn_q."),
                name.contains(".attn_k."),
            ) {
                (true, true, _) => permute_qk(&t, c.heads, false)?,
                (true, _, true) => permute_qk(&t, c.kv_heads, false)?,
                _ => t,
            },
        ))
    }
}

/// `dense` with each block's Q, K and V joined into `attn_qkv`, and its
/// gate and up into `ffn_up` (gate first): the layout a Phi-3 file holds.
fn fuse(
    c: &config::ModelConfig,
    dense: Vec<(String, Tensor)>,
) -> Result<Vec<(String, Tensor)>, ModelError> {
    let mut parts: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut out = Vec::new();
    for (name, t) in dense {
        match crate::model::fused_part(&name, c) {
            Some(_) => {
                parts.insert(name, t);
            }
            None => out.push((name, t)),
        }
    }
    for layer in 0..c.layers {
        for (fused, members) in [
            ("attn_qkv", &["attn_q", "attn_k", "attn_v"][..]),
            ("ffn_up", &["ffn_gate", "ffn_up"][..]),
        ] {
            let pieces: Vec<Tensor> = members
                .iter()
                .map(|m| {
                    parts
                        .remove(&format!("blk.{layer}.{m}.weight"))
                        .ok_or_else(|| ModelError::MissingTensor {
                            tensor: format!("blk.{layer}.{m}.weight"),
                            path: None,
                        })
                })
                .collect::<Result<_, _>>()?;
            out.push((
                format!("blk.{layer}.{fused}.weight"),
                Tensor::cat(&pieces, 0)?,
            ));
        }
    }
    Ok(out)
}

/// Whether the GGUF tensor `name` is an RMSNorm weight (what Gemma's
/// checkpoints store less one).
fn is_norm(name: &str) -> bool {
    name.ends_with("norm.weight")
}

/// Writes a model as an HF folder vauban (and `transformers`) can load:
/// `model.safetensors` (f32), `config.json`, `tokenizer.json` and
/// `tokenizer_config.json` with the chat template. Written into a staging
/// folder and renamed into place, so a failure leaves no half folder.
/// `dense` holds every tensor by its GGUF name, in GGUF's layout, as f32
/// on the host: every backend hands its own weights over as plain arrays.
pub fn export_weights(
    c: &config::ModelConfig,
    dense: Vec<(String, HostTensor)>,
    (tokenizer, chat_template, special): (&tokenizers::Tokenizer, Option<&str>, &Special),
    dir: &Path,
) -> Result<(), ModelError> {
    // The family's HF form, whatever the source stored: transformers' Phi-3
    // has fused matrices even where a GGUF file kept Q, K and V apart
    // (which llama.cpp also reads).
    let hf_form = config::ModelConfig {
        block: config::BlockLayout {
            fused: config::BlockLayout::of_family(&c.architecture, c.hidden).fused,
            ..c.block.clone()
        },
        ..c.clone()
    };
    let c = &hf_form;
    let dense = dense
        .into_iter()
        .map(|(name, (shape, values))| Ok((name, Tensor::from_vec(values, shape, &Device::Cpu)?)))
        .collect::<Result<Vec<_>, ModelError>>()?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Io { path, source }
    };
    if dir.exists() {
        return Err(ModelError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "refusing to overwrite; choose a new folder",
            ),
        });
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new()
        .prefix(".vauban-export-")
        .tempdir_in(parent)
        .map_err(io(parent))?;
    // A family whose checkpoints fuse matrices (Phi-3) is written fused.
    let dense = match c.block.fused {
        true => fuse(c, dense)?,
        false => dense,
    };
    // A mixture's experts as transformers 5 stores them: gate and up in
    // one stack (gate first), down in another.
    let mut gate_up: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut moved = Vec::new();
    for (name, t) in dense {
        let stem = name.strip_prefix("blk.").and_then(|r| r.split_once('.'));
        match stem {
            Some((layer, "ffn_gate_exps.weight")) => {
                gate_up.insert(layer.to_owned(), t);
            }
            Some((layer, "ffn_up_exps.weight")) => {
                let gate = gate_up.remove(layer).ok_or_else(|| {
                    ModelError::Export(format!("layer {layer}'s experts have no gate stack"))
                })?;
                moved.push((
                    format!("model.layers.{layer}.mlp.experts.gate_up_proj"),
                    Tensor::cat(&[gate, t], 1)?,
                ));
            }
            Some((layer, "ffn_down_exps.weight")) => {
                moved.push((format!("model.layers.{layer}.mlp.experts.down_proj"), t));
            }
            _ => moved.push((name, t)),
        }
    }
    let dense = moved;
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (name, t) in dense {
        // Q/K rows (and their biases) back from llama.cpp's order to HF's.
        let heads = match (name.contains(".attn_q."), name.contains(".attn_k.")) {
            (true, _) => Some(c.heads),
            (_, true) => Some(c.kv_heads),
            _ => None,
        };
        let t = match (c.rope_style, heads) {
            (RopeStyle::Interleaved, Some(h)) => permute_qk(&t, h, true)?,
            _ => t,
        };
        let t = match c.block.unit_offset_norms && is_norm(&name) {
            true => (t - 1.0)?,
            false => t,
        };
        // (Names already in HF's form, the experts' stacks, stay.)
        let hf = match name.starts_with("model.") {
            true => name.clone(),
            false => hf_name(&name, c),
        };
        tensors.push((hf, t.contiguous()?));
    }
    let weights = staging.path().join("model.safetensors");
    candle_core::safetensors::save(&tensors.into_iter().collect(), &weights)?;
    let config = config_json(c, special)?;
    let write = |name: &str, text: String| -> Result<(), ModelError> {
        let p = staging.path().join(name);
        std::fs::write(&p, text).map_err(io(&p))
    };
    write(
        "config.json",
        serde_json::to_string_pretty(&config).expect("json values serialize"),
    )?;
    let mut tc = serde_json::json!({ "add_bos_token": special.add_bos });
    if let Some(t) = chat_template {
        tc["chat_template"] = t.into();
    }
    if let Some(bos) = &special.bos {
        tc["bos_token"] = bos.1.clone().into();
    }
    if let Some(eos) = special.eos.first() {
        tc["eos_token"] = eos.1.clone().into();
    }
    write(
        "tokenizer_config.json",
        serde_json::to_string_pretty(&tc).expect("json values serialize"),
    )?;
    let tok = staging.path().join("tokenizer.json");
    tokenizer
        .save(&tok, false)
        .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", tok.display())))?;
    let staged = staging.keep();
    std::fs::rename(&staged, dir).map_err(io(dir))?;
    Ok(())
}

/// The model's `config.json` as transformers reads it for its family.
fn config_json(
    c: &config::ModelConfig,
    special: &Special,
) -> Result<serde_json::Value, ModelError> {
    let (model_type, class) = match c.architecture.as_str() {
        "qwen2" => ("qwen2", "Qwen2ForCausalLM"),
        "qwen3" => ("qwen3", "Qwen3ForCausalLM"),
        "mistral" => ("mistral", "MistralForCausalLM"),
        "gemma2" => ("gemma2", "Gemma2ForCausalLM"),
        "gemma3" => ("gemma3_text", "Gemma3ForCausalLM"),
        "olmo2" => ("olmo2", "Olmo2ForCausalLM"),
        "phi3" => ("phi3", "Phi3ForCausalLM"),
        "qwen3moe" => ("qwen3_moe", "Qwen3MoeForCausalLM"),
        _ => ("llama", "LlamaForCausalLM"),
    };
    let mut config = serde_json::json!({
        "architectures": [class],
        "model_type": model_type,
        "hidden_size": c.hidden,
        "intermediate_size": c.ffn,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab,
        "rms_norm_eps": c.rms_eps,
        "rope_theta": c.rope_theta,
        "tie_word_embeddings": c.tied_embeddings,
        "attention_bias": c.qkv_bias,
        "torch_dtype": "float32",
    });
    if let Some(n) = c.context_length {
        config["max_position_embeddings"] = n.into();
    }
    // Where the family differs from llama, in its config.json's words.
    let b = &c.block;
    if b.activation == config::Activation::GeluTanh {
        config["hidden_activation"] = "gelu_pytorch_tanh".into();
    }
    if c.architecture.starts_with("gemma") {
        let scale = c.attn_scale();
        // An integer in transformers' config class.
        config["query_pre_attn_scalar"] = ((1.0 / (scale * scale)).round() as u64).into();
        config["attn_logit_softcapping"] = b.attn_softcap.into();
        config["final_logit_softcapping"] = b.final_softcap.into();
    }
    let window = c.windows.iter().flatten().next();
    config["sliding_window"] = window.copied().into();
    if window.is_some() {
        let types: Vec<&str> = c
            .windows
            .iter()
            .map(|w| match w {
                Some(_) => "sliding_attention",
                None => "full_attention",
            })
            .collect();
        config["layer_types"] = types.into();
        if c.architecture.starts_with("qwen") {
            config["use_sliding_window"] = true.into();
        }
    }
    if let Some(theta) = c.local_rope_theta {
        config["rope_local_base_freq"] = theta.into();
    }
    if let Some(e) = &c.experts {
        config["num_experts"] = e.count.into();
        config["num_experts_per_tok"] = e.used.into();
        config["moe_intermediate_size"] = e.ffn.into();
        config["norm_topk_prob"] = e.normalize.into();
        config["decoder_sparse_step"] = 1.into();
        config["mlp_only_layers"] = serde_json::json!([]);
    }
    if c.architecture == "phi3" {
        // Phi3Config's default padding id (32000) is past a small
        // vocabulary's end; vauban keeps no padding id to write.
        config["pad_token_id"] = serde_json::Value::Null;
    }
    if c.rotary_dim < c.head_dim {
        config["partial_rotary_factor"] = (c.rotary_dim as f64 / c.head_dim as f64).into();
    }
    if let Some(bos) = &special.bos {
        config["bos_token_id"] = bos.0.into();
    }
    if !special.eos.is_empty() {
        config["eos_token_id"] = special.eos.iter().map(|e| e.0).collect::<Vec<_>>().into();
    }
    match &c.rope_scaling {
        None => {}
        Some(config::RopeScaling::Linear { factor }) => {
            config["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": factor});
        }
        Some(config::RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        }) => {
            config["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": factor,
                "low_freq_factor": low_freq_factor, "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings});
        }
        // transformers chooses the set by each pass's reach, whichever
        // way the source file chose it.
        Some(config::RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            attention_factor,
            ..
        }) => {
            config["rope_scaling"] = serde_json::json!({"rope_type": "longrope",
                "short_factor": short_factor, "long_factor": long_factor,
                "attention_factor": attention_factor,
                "original_max_position_embeddings": original_max_position_embeddings});
            config["original_max_position_embeddings"] = (*original_max_position_embeddings).into();
        }
        Some(config::RopeScaling::FreqFactors { .. }) => {
            return Err(ModelError::Export(
                "this model's RoPE frequency factors (GGUF rope_freqs) have no config.json form; export is not supported for it".into(),
            ));
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qk_permutation_is_llama_cpps_and_undoes_itself() {
        // 2 heads of 4 rows: llama.cpp turns rotate-half rows (0 1 | 2 3) into adjacent pairs (0 2 1 3).
        let w = Tensor::arange(0f32, 8.0, &Device::Cpu)
            .unwrap()
            .reshape((8, 1))
            .unwrap();
        let p = permute_qk(&w, 2, false).unwrap();
        assert_eq!(
            p.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            [0., 2., 1., 3., 4., 6., 5., 7.]
        );
        let back = permute_qk(&p, 2, true).unwrap();
        assert_eq!(
            back.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            (0..8).map(|i| i as f32).collect::<Vec<_>>()
        );
        // A bias's rows move as its matrix's do, and keep its shape.
        let bias = w.flatten_all().unwrap();
        let pb = permute_qk(&bias, 2, false).unwrap();
        assert_eq!(pb.dims(), [8]);
        assert_eq!(
            pb.to_vec1::<f32>().unwrap(),
            p.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }
}
