//! The tokenizer a GGUF file describes, built as its metadata says.
//!
//! candle's own GGUF tokenizer helper sets `add_prefix_space = true` even
//! when the file says `add_space_prefix: false`, which turns
//! `<|im_start|>user` into `<|im_start|>` `Ġuser`; this builds the
//! pre-tokenizer from the metadata instead.

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

use super::ModelError;
use crate::gguf::GgufFile;

/// GGUF token type of control tokens (`<|im_start|>`...), matched whole.
const CONTROL: i32 = 3;

/// A byte-level BPE tokenizer from `tokenizer.ggml.*` metadata.
pub fn from_gguf<R: std::io::Read + std::io::Seek>(
    file: &GgufFile<R>,
) -> Result<Tokenizer, ModelError> {
    let err = |m: String| ModelError::Tokenizer(m);
    let get = |key: &str| {
        file.meta(key)
            .ok_or_else(|| err(format!("GGUF metadata has no `{key}`")))
    };
    let strings = |key: &str| -> Result<Vec<String>, ModelError> {
        get(key)?
            .strings()
            .map_err(|e| err(format!("`{key}` is not a list of strings: {e}")))
    };
    match get("tokenizer.ggml.model")?.to_str() {
        Ok("gpt2") => {}
        other => {
            return Err(err(format!(
                "tokenizer model {other:?} is not supported; byte-level BPE (`gpt2`) is"
            )));
        }
    }
    let tokens = strings("tokenizer.ggml.tokens")?;
    let types: Vec<i32> = get("tokenizer.ggml.token_type")?.i32s().map_err(|e| {
        err(format!(
            "`tokenizer.ggml.token_type` is not a list of i32: {e}"
        ))
    })?;
    let merges = strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_owned(), b.to_owned())),
            None => Err(err(format!(
                "merge `{m}` is not two tokens separated by a space"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let add_prefix_space = match file.meta("tokenizer.ggml.add_space_prefix") {
        Some(v) => v.to_bool().map_err(err)?,
        None => false,
    };

    let vocab: ahash::AHashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| err(format!("cannot build the BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let byte_level = ByteLevel::new(add_prefix_space, true, true);
    let pre = match file.meta("tokenizer.ggml.pre") {
        Some(v) => v.to_str().map_err(err)?.to_owned(),
        None => "default".to_owned(),
    };
    match pre.as_str() {
        // Digits one by one, then GPT-2 byte-level splitting (llama.cpp's `smollm`).
        "smollm" => tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            byte_level.into(),
        ]))),
        "default" | "gpt2" => tokenizer.with_pre_tokenizer(Some(byte_level)),
        other => {
            return Err(err(format!(
                "pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported yet; supported: smollm, gpt2, default"
            )));
        }
    };
    tokenizer.with_decoder(Some(ByteLevel::default()));
    let control: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, t)| **t == CONTROL)
        .map(|(s, _)| AddedToken::from(s.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(control)
        .map_err(|e| err(format!("cannot add control tokens: {e}")))?;
    Ok(tokenizer)
}

/// The tokenizer at `path`: a `.gguf` file's, an HF folder's
/// `tokenizer.json`, or a `tokenizer.json` file. What a side served over
/// HTTP declares as its vocabulary (`tokenizer = PATH`).
pub fn load(path: &std::path::Path) -> Result<Tokenizer, ModelError> {
    let err = |m: String| ModelError::Tokenizer(format!("{}: {m}", path.display()));
    let json = match path.is_dir() {
        true => path.join("tokenizer.json"),
        false => path.to_path_buf(),
    };
    if path.extension().is_some_and(|e| e == "gguf") {
        let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
        let file = GgufFile::read(std::io::BufReader::new(f)).map_err(err)?;
        return from_gguf(&file);
    }
    Tokenizer::from_file(&json).map_err(|e| {
        err(format!(
            "cannot read {} as a tokenizer ({e}); give a .gguf file, an HF folder or its tokenizer.json",
            json.display()
        ))
    })
}

/// sha256 of the vocabulary: every token's text in id order, one per
/// line (a token the tokenizer has no text for hashes as an empty line).
/// Two traces with equal hashes index the same tokens.
pub fn vocabulary_sha256(t: &Tokenizer) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for id in 0..t.get_vocab_size(true) as u32 {
        if let Some(tok) = t.id_to_token(id) {
            h.update(tok.as_bytes());
        }
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}
