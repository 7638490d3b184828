//! The real model: SmolLM2-135M-Instruct (Q4_1 GGUF, from PyPI via
//! `scripts/fetch-model.sh`). Skips with a message when the file is absent;
//! `.ci/run` always fetches it.

use std::path::PathBuf;
use std::sync::OnceLock;

use candle_core::{D, Device, IndexOp};
use vauban::model::gguf::GgufModel;
use vauban::model::llama::log_softmax;

fn model_path() -> PathBuf {
    let dir = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The model, loaded once for all tests of this file; `None` (after a
/// message) when the file is absent.
fn model() -> Option<&'static GgufModel> {
    static MODEL: OnceLock<Option<GgufModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = model_path();
            if !path.exists() {
                eprintln!(
                    "skipping: {} is absent; run `bash scripts/fetch-model.sh`",
                    path.display()
                );
                return None;
            }
            Some(GgufModel::open(&path, &Device::Cpu).expect("SmolLM2 loads"))
        })
        .as_ref()
}

fn encode(m: &GgufModel, text: &str) -> Vec<u32> {
    m.tokenizer.encode(text, false).unwrap().get_ids().to_vec()
}

#[test]
fn config_comes_from_the_gguf_metadata() {
    let Some(m) = model() else { return };
    let c = &m.config;
    assert_eq!((c.layers, c.hidden, c.ffn), (30, 576, 1536));
    assert_eq!((c.heads, c.kv_heads, c.head_dim), (9, 3, 64));
    assert_eq!(c.rope_theta, 100_000.0);
    assert_eq!(m.model.vocab(), 49152);
}

#[test]
fn control_tokens_are_whole_and_no_prefix_space_is_added() {
    let Some(m) = model() else { return };
    let enc = m
        .tokenizer
        .encode("<|im_start|>user\nHi 42<|im_end|>", false)
        .unwrap();
    assert_eq!(
        enc.get_tokens(),
        [
            "<|im_start|>",
            "user",
            "Ċ",
            "Hi",
            "Ġ",
            "4",
            "2",
            "<|im_end|>"
        ]
    );
    assert_eq!(enc.get_ids()[..3], [1, 4093, 198]);
    assert_eq!(enc.get_ids().last(), Some(&2));
    let text = "The capital of France is";
    assert_eq!(m.tokenizer.decode(&encode(m, text), false).unwrap(), text);
}

#[test]
fn the_capital_of_france_is_paris() {
    let Some(m) = model() else { return };
    let ids = encode(m, "The capital of France is"); // raw: no template, no BOS
    let out = m.model.forward(&ids, &[]).unwrap();
    let last = out.logits.i(ids.len() - 1).unwrap();
    let top = last.argmax(D::Minus1).unwrap().to_scalar::<u32>().unwrap();
    assert_eq!(m.tokenizer.decode(&[top], false).unwrap(), " Paris");
}

#[test]
fn perplexity_of_plain_english_is_low() {
    let Some(m) = model() else { return };
    let text = "The sun rises in the east and sets in the west. Every morning, people \
                wake up, drink coffee, and go to work. In the evening, they come home, \
                cook dinner, and spend time with their families before going to bed.";
    let ids = encode(m, text);
    let out = m.model.forward(&ids, &[]).unwrap();
    let lp = log_softmax(&out.logits).unwrap();
    let mut nll = 0.0f64;
    for (pos, &next) in ids.iter().enumerate().skip(1) {
        let v = lp
            .i((pos - 1, next as usize))
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        nll -= v as f64;
    }
    let ppl = (nll / (ids.len() - 1) as f64).exp();
    eprintln!("perplexity {ppl:.2} over {} tokens", ids.len());
    // A broken forward (wrong rope, wrong layout) gives thousands.
    assert!(ppl < 100.0, "perplexity {ppl:.1} over {} tokens", ids.len());
}

#[test]
fn residuals_are_observed_at_the_requested_layers_only() {
    let Some(m) = model() else { return };
    let ids = encode(m, "Hello there");
    let out = m.model.forward(&ids, &[0, 29]).unwrap();
    let layers: Vec<usize> = out.residuals.iter().map(|(l, _)| *l).collect();
    assert_eq!(layers, [0, 29]);
    assert_eq!(out.residuals[0].1.dims(), &[1, ids.len(), 576]);
    let err = m.model.forward(&ids, &[30]).err().unwrap().to_string();
    assert_eq!(
        err,
        "layer 30 is out of range: the model has 30 layers (0 to 29)"
    );
    let err = m.model.forward(&[], &[]).err().unwrap().to_string();
    assert!(err.contains("no token ids"), "{err}");
}
