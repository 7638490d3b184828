//! HF-style model folders: `config.json`, one or sharded `*.safetensors`,
//! `tokenizer.json`, and `tokenizer_config.json` (or `chat_template.jinja`)
//! for the chat template and special tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::LoadedModel;
use super::llama::{Llama, Weight};
use crate::model::config::{self, RopeStyle};
use crate::model::{ModelError, ModelFormat, Special, WeightMode, chat, hf_name};

/// llama.cpp's row permutation of Q and K (`[out, in]`, `heads` heads),
/// which turns `rotate_half` pairs into adjacent pairs. `inverse` undoes it.
pub fn permute_qk(w: &Tensor, heads: usize, inverse: bool) -> Result<Tensor, ModelError> {
    let (out, inp) = w.dims2()?;
    let half = out / heads / 2;
    Ok(match inverse {
        false => w.reshape((heads, 2, half, inp))?.transpose(1, 2)?,
        true => w.reshape((heads, half, 2, inp))?.transpose(1, 2)?,
    }
    .contiguous()?
    .reshape((out, inp))?)
}

/// Loads an HF folder.
pub fn load(dir: &Path, mode: WeightMode, device: &Device) -> Result<LoadedModel, ModelError> {
    let file = |name: &str| dir.join(name);
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let (hf, config) = config::read_hf_config(dir)?;

    let tokenizer_path = file("tokenizer.json");
    if !tokenizer_path.is_file() {
        return Err(ModelError::Io {
            path: tokenizer_path,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no tokenizer.json in the model folder",
            ),
        });
    }
    let tokenizer = tokenizers::Tokenizer::from_file(&tokenizer_path)
        .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
    let tc_path = file("tokenizer_config.json");
    let tc: serde_json::Value = match tc_path.is_file() {
        true => serde_json::from_str(&read(&tc_path)?).map_err(|e| ModelError::Config {
            path: tc_path.clone(),
            key: format!("line {}", e.line()),
            problem: e.to_string(),
        })?,
        false => serde_json::Value::Null,
    };
    let jinja = file("chat_template.jinja");
    let chat_template = match jinja.is_file() {
        true => Some(read(&jinja)?),
        false => chat::template_from_tokenizer_config(&tc)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", tc_path.display())))?,
    };
    let token_text = |key: &str| -> Option<String> {
        match tc.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            v => v.get("content")?.as_str().map(str::to_owned),
        }
    };
    let id_of = |s: Option<String>| s.and_then(|s| tokenizer.token_to_id(&s));
    let bos = hf.bos_token_id.or_else(|| id_of(token_text("bos_token")));
    let mut eos: Vec<u32> = hf
        .eos_token_id
        .as_ref()
        .map(|e| e.to_vec())
        .unwrap_or_default();
    if let Some(id) = id_of(token_text("eos_token"))
        && !eos.contains(&id)
    {
        eos.push(id);
    }
    // generation_config.json lists the ids that end a reply (Llama 3's
    // <|eot_id|>, Qwen's <|im_end|>).
    let gen_path = file("generation_config.json");
    if gen_path.is_file() {
        let config: serde_json::Value =
            serde_json::from_str(&read(&gen_path)?).map_err(|e| ModelError::Config {
                path: gen_path.clone(),
                key: format!("line {}", e.line()),
                problem: e.to_string(),
            })?;
        if let Some(v) = config.get("eos_token_id") {
            let ids: config::EosIds =
                serde_json::from_value(v.clone()).map_err(|e| ModelError::Config {
                    path: gen_path.clone(),
                    key: "eos_token_id".into(),
                    problem: e.to_string(),
                })?;
            for id in ids.to_vec() {
                if !eos.contains(&id) {
                    eos.push(id);
                }
            }
        }
    }
    // Whether a raw prompt gets BOS: as tokenizer_config.json says, else
    // what the tokenizer's own post-processor does.
    let add_bos = match tc.get("add_bos_token").and_then(|v| v.as_bool()) {
        Some(v) => v,
        None => match (tokenizer.encode("a", true), tokenizer.encode("a", false)) {
            (Ok(with), Ok(without)) => {
                with.get_ids().len() > without.get_ids().len()
                    && with.get_ids().first() == bos.as_ref()
            }
            _ => false,
        },
    };
    let special = Special::from_ids(&tokenizer, bos, eos, add_bos);

    let weight_files = weight_files(dir)?;
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
    let heads = (config.heads, config.kv_heads);
    let interleaved = config.rope_style == RopeStyle::Interleaved;
    let mut load = |name: &str| -> Result<Option<Weight>, ModelError> {
        let hf = hf_name(name);
        let Some(&i) = owner.get(&hf) else {
            return Ok(None);
        };
        let bad = |problem: String| ModelError::Tensor {
            path: weight_files[i].clone(),
            tensor: hf.clone(),
            problem,
        };
        let view = files[i].get(&hf).map_err(|e| bad(e.to_string()))?;
        use safetensors::Dtype as S;
        if !matches!(view.dtype(), S::F32 | S::F16 | S::BF16 | S::F64) {
            return Err(bad(format!(
                "is stored as {:?}; weights must be f32, f16, bf16 or f64 (quantized checkpoints: use GGUF)",
                view.dtype()
            )));
        }
        let t = files[i]
            .load(&hf, device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| bad(e.to_string()))?;
        let t = match (
            interleaved,
            name.contains(".attn_q.weight"),
            name.contains(".attn_k.weight"),
        ) {
            (true, true, _) => permute_qk(&t, heads.0, false)?,
            (true, _, true) => permute_qk(&t, heads.1, false)?,
            _ => t,
        };
        Ok(Some(Weight::Dense(t)))
    };
    let model =
        Llama::load(&config, mode, &mut load, device).map_err(|e| e.hf_names().in_file(dir))?;
    Ok(LoadedModel {
        path: dir.to_path_buf(),
        format: ModelFormat::HfFolder,
        name: LoadedModel::name_of(dir),
        weight_mode: mode,
        config,
        tokenizer,
        chat_template,
        special,
        model,
        weight_files,
    })
}

/// The weight files of a folder: those `model.safetensors.index.json` lists
/// (each must exist), else every `*.safetensors` in name order.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|source| ModelError::Io {
            path: index.clone(),
            source,
        })?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::Config {
                path: index.clone(),
                key: format!("line {}", e.line()),
                problem: e.to_string(),
            })?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ModelError::Config {
                path: index.clone(),
                key: "weight_map".into(),
                problem: "is missing or not an object of tensor name → shard file".into(),
            })?;
        let mut files: Vec<PathBuf> = Vec::new();
        for (tensor, file) in map {
            let name = file
                .as_str()
                .filter(|f| !f.contains('/') && !f.contains(".."))
                .ok_or_else(|| ModelError::Config {
                    path: index.clone(),
                    key: format!("weight_map.{tensor}"),
                    problem: "is not a file name in the model folder".into(),
                })?;
            let path = dir.join(name);
            if !files.contains(&path) {
                files.push(path);
            }
        }
        files.sort();
        for f in &files {
            if !f.is_file() {
                return Err(ModelError::Io {
                    path: f.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "a shard listed in model.safetensors.index.json is missing",
                    ),
                });
            }
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ModelError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ModelError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no *.safetensors weights in the model folder",
            ),
        });
    }
    Ok(files)
}

/// Writes `model` as an HF folder vauban (and `transformers`) can load:
/// `model.safetensors` (f32), `config.json`, `tokenizer.json` and
/// `tokenizer_config.json` with the chat template. Written into a staging
/// folder and renamed into place, so a failure leaves no half folder.
pub fn export(
    model: &Llama,
    tokenizer: &tokenizers::Tokenizer,
    chat_template: Option<&str>,
    special: &Special,
    dir: &Path,
) -> Result<(), ModelError> {
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
    let c = model.config();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (name, t) in model.dense_weights()? {
        // Q/K rows (and their biases) back from llama.cpp's order to HF's.
        let heads = match (name.contains(".attn_q."), name.contains(".attn_k.")) {
            (true, _) => Some(c.heads),
            (_, true) => Some(c.kv_heads),
            _ => None,
        };
        let t = match (c.rope_style, heads) {
            (RopeStyle::Interleaved, Some(h)) if t.rank() == 1 => {
                permute_qk(&t.unsqueeze(1)?, h, true)?.squeeze(1)?
            }
            (RopeStyle::Interleaved, Some(h)) => permute_qk(&t, h, true)?,
            _ => t,
        };
        tensors.push((hf_name(&name), t.contiguous()?));
    }
    let weights = staging.path().join("model.safetensors");
    candle_core::safetensors::save(&tensors.into_iter().collect(), &weights)?;
    let model_type = match c.architecture.as_str() {
        "qwen2" => "qwen2",
        "mistral" => "mistral",
        _ => "llama",
    };
    let mut config = serde_json::json!({
        "architectures": [match model_type { "qwen2" => "Qwen2ForCausalLM", "mistral" => "MistralForCausalLM", _ => "LlamaForCausalLM" }],
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
    if model_type == "mistral" {
        // vauban's forward attends to the whole context (no sliding window).
        config["sliding_window"] = serde_json::Value::Null;
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
        Some(config::RopeScaling::FreqFactors { .. }) => {
            return Err(ModelError::Export(
                "this model's RoPE frequency factors (GGUF rope_freqs) have no config.json form; export is not supported for it".into(),
            ));
        }
    }
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
    }
}
