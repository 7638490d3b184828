//! An mlx-community checkpoint (an HF folder quantized by MLX: 4-bit
//! affine, groups of 64, scales and biases in f16, `quantization` in its
//! config.json, as `mlx_lm.convert -q` writes) on the MLX executor, kept
//! packed, against candle on the same weights dequantized: the same
//! next-token logits within a stated bound and the same greedy tokens;
//! its export reloads in candle as those weights; candle refuses the
//! packed folder naming the MLX executor. The checkpoint is made here
//! from SmolLM2 by MLX's own `quantize` (no hub to download one from).
//! Needs MLX (`--features mlx`) and the model (`bash scripts/fetch-model.sh`).
#![cfg(feature = "mlx")]

mod common;

use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{Array, Dtype};
use vauban_exec::executor::{InferenceSession, LocalBackend, LocalModel, ModelSpec, PromptForm};
use vauban_exec::model::WeightMode;

fn spec(path: &Path) -> ModelSpec {
    spec_as(path, WeightMode::Native)
}

fn spec_as(path: &Path, weights: WeightMode) -> ModelSpec {
    ModelSpec {
        weights,
        ..ModelSpec::new(path)
    }
}

/// Copies `from`'s config and tokenizer files into `to`, with `extra`
/// merged into config.json, and writes `tensors` as its weights.
fn write_folder(
    from: &Path,
    to: &Path,
    extra: serde_json::Value,
    tensors: &HashMap<String, Array>,
) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.ends_with(".json") && name != "config.json" {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(from.join("config.json")).unwrap()).unwrap();
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(to.join("config.json"), config.to_string()).unwrap();
    Array::save_safetensors(tensors, None, to.join("model.safetensors")).unwrap();
}

/// The greedy continuation of `prompt` (12 tokens) and the logits after
/// the prompt and after each token.
fn greedy(b: &LocalBackend, prompt: &[u32]) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = b.session(&[]);
    let mut logits = vec![s.prefill(prompt).unwrap().logits];
    let mut ids = Vec::new();
    for _ in 0..12 {
        let last = logits.last().unwrap();
        let next = (0..last.len())
            .max_by(|&a, &b| last[a].total_cmp(&last[b]))
            .unwrap() as u32;
        ids.push(next);
        logits.push(s.decode_step(next).unwrap().logits);
    }
    (ids, logits)
}

#[test]
fn an_mlx_community_checkpoint_runs_packed_and_matches_its_dequantized_weights() {
    let Some(gguf) = common::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let float = dir.path().join("float");
    LocalBackend::load(&spec(&gguf))
        .unwrap()
        .export_hf(&float)
        .unwrap();

    // Quantize every matrix as mlx_lm does (linear layers and the
    // embedding; norms stay float), and keep what the packed values stand
    // for as a float folder.
    let (group, bits) = (64, 4);
    let mut packed = HashMap::new();
    let mut dequantized = HashMap::new();
    for (name, w) in Array::load_safetensors(float.join("model.safetensors")).unwrap() {
        let matrix = w.ndim() == 2 && !name.contains("norm");
        if !matrix {
            packed.insert(name.clone(), w.clone());
            dequantized.insert(name, w);
            continue;
        }
        let (q, scales, biases) = mlx_rs::ops::quantize(&w, group, bits).unwrap();
        let (scales, biases) = (
            scales.as_dtype(Dtype::Float16).unwrap(),
            biases.as_dtype(Dtype::Float16).unwrap(),
        );
        let stem = name.strip_suffix(".weight").unwrap();
        let back = mlx_rs::ops::dequantize(
            &q,
            scales.as_dtype(Dtype::Float32).unwrap(),
            &biases.as_dtype(Dtype::Float32).unwrap(),
            group,
            bits,
        )
        .unwrap();
        dequantized.insert(name.clone(), back);
        packed.insert(format!("{stem}.scales"), scales);
        packed.insert(format!("{stem}.biases"), biases);
        packed.insert(name, q);
    }
    let q4 = dir.path().join("q4");
    let quantization = serde_json::json!({ "group_size": group, "bits": bits });
    write_folder(
        &float,
        &q4,
        serde_json::json!({ "quantization": quantization }),
        &packed,
    );
    let deq = dir.path().join("deq");
    write_folder(&float, &deq, serde_json::json!({}), &dequantized);

    // Packed on MLX, against candle on the weights it stands for.
    let mlx = LocalBackend::mlx(&spec(&q4)).unwrap();
    let candle = LocalBackend::load(&spec(&deq)).unwrap();
    assert!(mlx.is_quantized());
    let LocalBackend::Mlx(inner) = &mlx else {
        unreachable!("LocalBackend::mlx gives the MLX executor")
    };
    let note = inner.kernel_note();
    assert!(
        note.contains("4-bit, groups of 64") && note.contains("quantized_matmul"),
        "{note}"
    );
    let chat = PromptForm::Chat {
        system: Some("You are a helpful assistant.".into()),
    };
    for text in [
        "What is the capital of France?",
        "Write one sentence about a lighthouse keeper.",
    ] {
        let prompt = mlx.tokenize(text, &chat).unwrap();
        assert_eq!(prompt, candle.tokenize(text, &chat).unwrap());
        let (m_ids, m_logits) = greedy(&mlx, &prompt);
        let (c_ids, c_logits) = greedy(&candle, &prompt);
        let d = common::compare_rows(text, &m_logits, &c_logits);
        eprintln!(
            "{text:?}: {} prompt tokens, max |Δlogit| {d:.2e} over 13 positions, greedy {:?}",
            prompt.len(),
            mlx.detokenize(&m_ids).unwrap()
        );
        assert!(d < 2e-3, "{text:?}: max |Δlogit| {d}");
        assert_eq!(m_ids, c_ids, "{text:?}: greedy tokens");
    }

    // Packing the float model in memory (what the speed benchmark
    // measures) gives the checkpoint's model, up to its f16 scales.
    {
        use vauban_exec::executor::mlx::model::MlxLlama;
        use vauban_exec::executor::tensor_lib::{LibModel, NoHook};
        let assets = vauban_exec::model::assets::ModelAssets::load(&float).unwrap();
        let mut packed = MlxLlama::load(&assets).unwrap();
        packed.quantize(group, bits).unwrap();
        assert!(packed.is_quantized());
        let prompt = candle.tokenize("The lighthouse", &PromptForm::Raw).unwrap();
        let run = |m: &MlxLlama| {
            let (logits, _) = m.run(&prompt, &mut m.new_cache(), &mut NoHook, 0).unwrap();
            logits.as_slice::<f32>().to_vec()
        };
        let from_disk =
            MlxLlama::load(&vauban_exec::model::assets::ModelAssets::load(&q4).unwrap()).unwrap();
        let (a, b) = (run(&packed), run(&from_disk));
        let d = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        eprintln!("packed in memory against the checkpoint: max |Δlogit| {d:.2e}");
        // 7.2e-2 here: the f16 rounding of the checkpoint's scales and biases.
        assert!(d < 0.25, "packed in memory against the checkpoint: {d}");
    }

    // `weights = "f32"` dequantizes it at load: the same model, not packed.
    let dense = LocalBackend::mlx(&spec_as(&q4, WeightMode::F32)).unwrap();
    assert!(!dense.is_quantized());
    let prompt = candle.tokenize("The lighthouse", &PromptForm::Raw).unwrap();
    let (d_ids, d_logits) = greedy(&dense, &prompt);
    let (c_ids, c_logits) = greedy(&candle, &prompt);
    let d = common::compare_rows("dequantized at load", &d_logits, &c_logits);
    assert!(d < 1e-3, "dequantized at load: max |Δlogit| {d}");
    assert_eq!(d_ids, c_ids);

    // Exported (dequantized), it loads in candle as those weights.
    let exported = dir.path().join("exported");
    mlx.export_hf(&exported).unwrap();
    let back = LocalBackend::load(&spec(&exported)).unwrap();
    let want = c_logits;
    let (_, got) = greedy(&back, &prompt);
    let d = common::compare_rows("export", &got, &want);
    assert!(d < 1e-4, "the export against the dequantized weights: {d}");

    // candle cannot run the packed folder, and says who can.
    let err = LocalBackend::load(&spec(&q4))
        .err()
        .expect("candle refuses it")
        .to_string();
    assert!(
        err.contains("packed by MLX's quantization") && err.contains("executor = \"mlx\""),
        "{err}"
    );
}
