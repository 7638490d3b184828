//! A model's files without its weights: the shape, the tokenizer, the chat
//! template, the special tokens and the list of weight files, read from a
//! GGUF header or an HF folder. Every backend that runs a model file
//! (candle, torch) loads these the same way, so the same file gives the
//! same token ids and the same rendered prompt on each; only the weights
//! are loaded by the backend itself.

use std::path::{Path, PathBuf};

use crate::model::config::{self, ModelConfig, RopeScaling};
use crate::model::gguf::GgufFile;
use crate::model::{ModelError, ModelFormat, Special, chat, not_a_model, tokenizer};

/// What a backend needs of a model besides its weights.
pub struct ModelAssets {
    pub path: PathBuf,
    pub format: ModelFormat,
    /// A short name for reports (file or folder name).
    pub name: String,
    pub config: ModelConfig,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat_template: Option<String>,
    pub special: Special,
    /// The files the weights come from (for hashing).
    pub weight_files: Vec<PathBuf>,
    /// The file the tokenizer is read from (the GGUF file, or the folder's
    /// `tokenizer.json`): its vocabulary's digest is remembered against it.
    pub tokenizer_file: PathBuf,
}

impl ModelAssets {
    /// A GGUF file's or an HF folder's assets; anything else is refused
    /// naming the path.
    pub fn load(path: &Path) -> Result<ModelAssets, ModelError> {
        let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.is_dir() {
            ModelAssets::from_hf(path)
        } else if path.extension().is_some_and(|e| e == "gguf") {
            let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let mut file = GgufFile::read(file).map_err(|message| ModelError::Gguf {
                path: path.to_path_buf(),
                message,
            })?;
            ModelAssets::from_gguf(path, &mut file)
        } else {
            Err(not_a_model(path))
        }
    }

    /// The assets a GGUF file's header describes (the RoPE frequency
    /// factors, a tensor, are read from it when the metadata has none).
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        path: &Path,
        file: &mut GgufFile<R>,
    ) -> Result<ModelAssets, ModelError> {
        let mut config = ModelConfig::from_gguf(path, &*file)?;
        if config.rope_scaling.is_none() && file.has_tensor("rope_freqs.weight") {
            let factors =
                file.read_f32("rope_freqs.weight")
                    .map_err(|problem| ModelError::Tensor {
                        path: path.to_path_buf(),
                        tensor: "rope_freqs.weight".into(),
                        problem,
                    })?;
            config.rope_scaling = Some(RopeScaling::FreqFactors { factors });
        }
        if config.rope_scaling.is_none() {
            config.rope_scaling = config::gguf_long_rope(path, file, &config)?;
        }
        config.check(path)?;
        let tokenizer = tokenizer::from_gguf(&*file)?;
        let md_u32 = |key: &str| file.meta(key).and_then(|v| v.to_u32().ok());
        let special = Special::from_ids(
            &tokenizer,
            md_u32("tokenizer.ggml.bos_token_id"),
            // EOS, and the end-of-turn / end-of-message ids that also end a reply.
            [
                "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.eot_token_id",
                "tokenizer.ggml.eom_token_id",
            ]
            .iter()
            .filter_map(|k| md_u32(k))
            .fold(Vec::new(), |mut v, id| {
                if !v.contains(&id) {
                    v.push(id);
                }
                v
            }),
            file.meta("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.to_bool().ok())
                .unwrap_or(false),
        );
        let chat_template = file
            .meta("tokenizer.chat_template")
            .and_then(|v| v.to_str().ok().map(str::to_owned));
        Ok(ModelAssets {
            path: path.to_path_buf(),
            format: ModelFormat::Gguf,
            name: name_of(path),
            config,
            tokenizer,
            chat_template,
            special,
            weight_files: vec![path.to_path_buf()],
            tokenizer_file: path.to_path_buf(),
        })
    }

    /// An HF folder's assets: `config.json`, `tokenizer.json`,
    /// `tokenizer_config.json` (or `chat_template.jinja`) for the chat
    /// template and special tokens, `generation_config.json` for the ids
    /// that end a reply.
    pub fn from_hf(dir: &Path) -> Result<ModelAssets, ModelError> {
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
        Ok(ModelAssets {
            path: dir.to_path_buf(),
            format: ModelFormat::HfFolder,
            name: name_of(dir),
            config,
            tokenizer,
            chat_template,
            special,
            weight_files: hf_weight_files(dir)?,
            tokenizer_file: tokenizer_path,
        })
    }

    /// Token ids of a raw prompt: no special tokens parsed from the text's
    /// meaning beyond the tokenizer's own, BOS first when the model asks for it.
    pub fn encode_raw(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let mut ids = self.encode(text)?;
        if let Some((bos, _)) = &self.special.bos
            && self.special.add_bos
            && ids.first() != Some(bos)
        {
            ids.insert(0, *bos);
        }
        Ok(ids)
    }

    /// Token ids of already-rendered text (a chat template adds its own BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot encode the prompt: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// Text of token ids, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(format!("cannot decode tokens: {e}")))
    }

    /// The chat template, compiled; an error when the model has none.
    pub fn chat(&self) -> Result<chat::ChatTemplate, ModelError> {
        let source = self.chat_template.clone().ok_or_else(|| {
            ModelError::Tokenizer(format!(
                "{} has no chat template; pass --raw to send the prompt as plain text",
                self.path.display()
            ))
        })?;
        chat::ChatTemplate::new(
            source,
            self.special.bos.as_ref().map(|b| b.1.clone()),
            self.special.eos.first().map(|e| e.1.clone()),
        )
        .map_err(|e| ModelError::Tokenizer(format!("{}: chat template: {e}", self.path.display())))
    }

    /// The prompt text as the model sees it: one user message (after an
    /// optional system message) rendered with the model's chat template,
    /// the assistant header appended.
    pub fn render_chat(&self, text: &str, system: Option<&str>) -> Result<String, ModelError> {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(chat::Message::new("system", s));
        }
        messages.push(chat::Message::new("user", text));
        self.chat()?.render(&messages, true).map_err(|e| {
            ModelError::Tokenizer(format!("{}: chat template: {e}", self.path.display()))
        })
    }

    /// sha256 of the vocabulary: every token's text in id order, one a
    /// line, added tokens included. Two models with equal hashes index the
    /// same tokens (what comparing their distributions needs); an id the
    /// tokenizer has no text for hashes as an empty line.
    ///
    /// Listing 49,152 tokens through the tokenizer's API takes ~6 ms (each
    /// token's text is cloned), so the digest is remembered against the
    /// tokenizer's file, per build of vauban (whose code reads the
    /// tokenizer), while that file is unchanged.
    pub fn vocabulary_sha256(&self) -> String {
        use crate::hash::{DigestCache, this_build};
        let compute = || tokenizer::vocabulary_sha256(&self.tokenizer);
        let (Some(cache), Some(build)) = (DigestCache::default_location(), this_build()) else {
            return compute();
        };
        cache
            .derived(&self.tokenizer_file, "vocabulary-sha256", &build, || {
                Ok(compute())
            })
            // Only the file's metadata can fail here, and then the digest
            // is computed as it would be without a cache.
            .unwrap_or_else(|_| compute())
    }

    /// Whether `id` ends a generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.special.eos.iter().any(|(e, _)| *e == id)
    }

    /// sha256 of the weights: the file's own for a GGUF file; for a
    /// folder, the sha256 of the listing `<sha256>  <name>\n` of its weight
    /// files in name order. `None` when a file cannot be read. A large
    /// file's digest is remembered while the file is unchanged
    /// ([`DigestCache`](crate::hash::DigestCache)), so tracing one model on
    /// every run hashes it once.
    pub fn weights_sha256(&self) -> Option<String> {
        let cache = crate::hash::DigestCache::default_location();
        let hash = |p: &Path| match &cache {
            Some(c) => c.sha256_file(p),
            None => crate::hash::sha256_file(p),
        };
        let hashes: Vec<(String, String)> = self
            .weight_files
            .iter()
            .map(|p| {
                hash(p).ok().map(|(h, _)| {
                    let name = p
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    (h, name)
                })
            })
            .collect::<Option<_>>()?;
        match hashes.as_slice() {
            [(one, _)] => Some(one.clone()),
            many => {
                let listing: String = many.iter().map(|(h, n)| format!("{h}  {n}\n")).collect();
                Some(crate::hash::sha256_hex(listing.as_bytes()))
            }
        }
    }
}

/// A short name for a model path: its file or folder name.
pub fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The weight files of a folder: those `model.safetensors.index.json` lists
/// (each must exist), else every `*.safetensors` in name order.
pub fn hf_weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
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
