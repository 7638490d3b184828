//! The tokenizer a GGUF file describes, built as its metadata says, with
//! the `tokenizers` crate's models: byte-level BPE (`tokenizer.ggml.model`
//! `gpt2`: GPT-2, SmolLM, Qwen, Llama 3, OLMo) with the pre-tokenizer
//! `tokenizer.ggml.pre` names, and SentencePiece's BPE with byte fallback
//! (`llama`: Gemma, Phi-3, Llama 2, Mistral), its merges recovered from
//! the pieces' scores as transformers' converter recovers them.
//!
//! candle's own GGUF tokenizer helper sets `add_prefix_space = true` even
//! when the file says `add_space_prefix: false`, which turns
//! `<|im_start|>user` into `<|im_start|>` `Ġuser`; this builds the
//! pre-tokenizer from the metadata instead.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, NormalizerWrapper, SplitDelimiterBehavior, Tokenizer};

use super::ModelError;
use crate::gguf::GgufFile;

/// GGUF token type of control tokens (`<|im_start|>`...), matched whole.
const CONTROL: i32 = 3;
/// GGUF token type of tokens a model's authors added (`<start_of_turn>`
/// in some Gemma files), matched whole, not special.
const USER_DEFINED: i32 = 4;

/// The tokenizers `tokenizer.ggml.model` names that vauban builds.
const MODELS: &str = "gpt2 (byte-level BPE), llama (SentencePiece BPE)";

/// The regex Qwen2/3's tokenizer splits text with before byte-level BPE.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's (and cl100k's: OLMo 2, DBRX): numbers in groups of three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The tokenizer `tokenizer.ggml.*` metadata describes.
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
    let model = get("tokenizer.ggml.model")?
        .to_str()
        .map_err(|e| err(format!("`tokenizer.ggml.model`: {e}")))?
        .to_owned();
    let tokens = strings("tokenizer.ggml.tokens")?;
    let types: Vec<i32> = get("tokenizer.ggml.token_type")?.i32s().map_err(|e| {
        err(format!(
            "`tokenizer.ggml.token_type` is not a list of i32: {e}"
        ))
    })?;
    if types.len() != tokens.len() {
        return Err(err(format!(
            "`tokenizer.ggml.token_type` has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let add_space_prefix = match file.meta("tokenizer.ggml.add_space_prefix") {
        Some(v) => Some(v.to_bool().map_err(err)?),
        None => None,
    };
    let mut tokenizer = match model.as_str() {
        "gpt2" => {
            let merges = strings("tokenizer.ggml.merges")?;
            let pre = match file.meta("tokenizer.ggml.pre") {
                Some(v) => v.to_str().map_err(err)?.to_owned(),
                None => "default".to_owned(),
            };
            byte_level_bpe(&tokens, merges, &pre, add_space_prefix.unwrap_or(false))?
        }
        "llama" => {
            let scores = get("tokenizer.ggml.scores")?
                .f32s()
                .map_err(|e| err(format!("`tokenizer.ggml.scores` is not a list of f32: {e}")))?;
            let unk = match file.meta("tokenizer.ggml.unknown_token_id") {
                Some(v) => Some(v.to_u32().map_err(err)? as usize),
                None => None,
            };
            // llama.cpp's default for SentencePiece vocabularies: a space
            // before the text, as SentencePiece adds one.
            sentencepiece_bpe(
                &tokens,
                &scores,
                &types,
                unk,
                add_space_prefix.unwrap_or(true),
            )?
        }
        other => {
            return Err(err(format!(
                "tokenizer model `{other}` (tokenizer.ggml.model) is not supported; supported: {MODELS}"
            )));
        }
    };
    // Control tokens are matched whole and are special (skipped when
    // decoding with `skip_special_tokens`); user-defined ones are matched
    // whole and decoded as text.
    let whole = |kind: i32| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(&types)
            .filter(|(_, t)| **t == kind)
            .map(|(s, _)| AddedToken::from(s.clone(), kind == CONTROL).normalized(false))
            .collect()
    };
    tokenizer
        .add_special_tokens(whole(CONTROL))
        .map_err(|e| err(format!("cannot add control tokens: {e}")))?;
    tokenizer
        .add_tokens(whole(USER_DEFINED))
        .map_err(|e| err(format!("cannot add user-defined tokens: {e}")))?;
    Ok(tokenizer)
}

/// Byte-level BPE (`gpt2`): GPT-2's byte alphabet, the merges as stored,
/// the text split first as the pre-tokenizer `pre` does.
fn byte_level_bpe(
    tokens: &[String],
    merges: Vec<String>,
    pre: &str,
    add_prefix_space: bool,
) -> Result<Tokenizer, ModelError> {
    let err = |m: String| ModelError::Tokenizer(m);
    let merges = merges
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_owned(), b.to_owned())),
            None => Err(err(format!(
                "merge `{m}` is not two tokens separated by a space"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
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
    // A regex split, then the bytes mapped without GPT-2's own regex.
    let split_then_bytes = |regex: &str| -> Result<Sequence, ModelError> {
        let split = Split::new(
            SplitPattern::Regex(regex.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| err(format!("cannot build the `{pre}` pre-tokenizer: {e}")))?;
        Ok(Sequence::new(vec![
            split.into(),
            ByteLevel::new(add_prefix_space, true, false).into(),
        ]))
    };
    match pre {
        // Digits one by one, then GPT-2 byte-level splitting (llama.cpp's `smollm`).
        "smollm" => tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            byte_level.into(),
        ]))),
        "default" | "gpt2" | "gpt-2" => tokenizer.with_pre_tokenizer(Some(byte_level)),
        "qwen2" => tokenizer.with_pre_tokenizer(Some(split_then_bytes(QWEN2_SPLIT)?)),
        "llama-bpe" | "llama3" | "dbrx" => {
            tokenizer.with_pre_tokenizer(Some(split_then_bytes(LLAMA3_SPLIT)?))
        }
        other => {
            return Err(err(format!(
                "pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported yet; supported: smollm, gpt-2, default, qwen2, llama-bpe, dbrx"
            )));
        }
    };
    tokenizer.with_decoder(Some(ByteLevel::default()));
    Ok(tokenizer)
}

/// SentencePiece's BPE (`llama`) with byte fallback: spaces as `▁`, a
/// leading one where `add_space_prefix`, pieces merged by score. A merge
/// `(a, b)` exists for every split of a piece into two pieces, ranked by
/// the merged piece's score (highest first) and, for one piece, by the
/// parts' ids: what transformers' SentencePiece converter builds, and what
/// llama.cpp's tokenizer does by merging the best-scored pair first.
fn sentencepiece_bpe(
    tokens: &[String],
    scores: &[f32],
    types: &[i32],
    unk: Option<usize>,
    add_space_prefix: bool,
) -> Result<Tokenizer, ModelError> {
    let err = |m: String| ModelError::Tokenizer(m);
    if scores.len() != tokens.len() {
        return Err(err(format!(
            "`tokenizer.ggml.scores` has {} entries for {} tokens",
            scores.len(),
            tokens.len()
        )));
    }
    let vocab: ahash::AHashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    // Normal pieces only: control, byte and unused entries are no merge's
    // result (a byte piece `<0x41>` is reached by fallback, not merging).
    const NORMAL: i32 = 1;
    let mut merges: Vec<(f32, u32, u32, String, String)> = Vec::new();
    for (piece, (&score, &kind)) in tokens.iter().zip(scores.iter().zip(types)) {
        if kind != NORMAL {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(at);
            if let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) {
                merges.push((score, ia, ib, a.to_owned(), b.to_owned()));
            }
        }
    }
    // Highest score first; a stable sort keeps each piece's splits in the
    // parts' id order, as the converter sorts them.
    merges.sort_by_key(|m| (m.1, m.2));
    merges.sort_by(|x, y| y.0.total_cmp(&x.0));
    let merges = merges.into_iter().map(|(_, _, _, a, b)| (a, b)).collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(t) = unk.and_then(|u| tokens.get(u)) {
        builder = builder.unk_token(t.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| err(format!("cannot build the SentencePiece BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let replace =
        Replace::new(" ", "▁").map_err(|e| err(format!("cannot build the normalizer: {e}")))?;
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new("▁".into()).into());
    }
    normalizers.push(replace.into());
    tokenizer
        .with_normalizer(Some(tokenizers::normalizers::Sequence::new(normalizers)))
        .map_err(|e| err(format!("cannot set the normalizer: {e}")))?;
    let unspace = tokenizers::decoders::DecoderWrapper::Replace(
        tokenizers::normalizers::Replace::new("▁", " ")
            .map_err(|e| err(format!("cannot build the decoder: {e}")))?,
    );
    tokenizer.with_decoder(Some(DecoderSequence::new(vec![
        unspace,
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', usize::from(add_space_prefix), 0).into(),
    ])));
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
