//! The MLX forward pass against candle's on SmolLM2, both with the GGUF's
//! weights dequantized to f32: the same top token at every position,
//! logits within a stated bound, and decoding through the KV cache equal
//! to one pass over the whole sequence. Needs MLX (`eval "$(bash
//! scripts/setup-mlx.sh)"`, `--features mlx`) and the model (`bash
//! scripts/fetch-model.sh`).
#![cfg(feature = "mlx")]

mod common;

use vauban_exec::executor::candle::model::LoadedModel;
use vauban_exec::executor::mlx::model::MlxLlama;
use vauban_exec::executor::tensor_lib::LibCache;
use vauban_exec::model::WeightMode;

/// `[n, vocab]` logits as rows.
fn rows(a: &mlx_rs::Array) -> Vec<Vec<f32>> {
    let width = a.shape()[1] as usize;
    a.as_slice::<f32>()
        .chunks(width)
        .map(<[f32]>::to_vec)
        .collect()
}

#[test]
fn mlx_and_candle_agree_on_smollm2() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu).unwrap();
    let mlx = MlxLlama::load(&candle.assets).unwrap();
    for text in [
        "The capital of France is",
        "Once upon a time, in a small village far away in the mountains, there lived a",
    ] {
        let ids = candle.encode(text).unwrap();
        let want = candle
            .model
            .forward(&ids, &[])
            .unwrap()
            .logits
            .to_vec2::<f32>()
            .unwrap();
        let got = rows(&mlx.forward(&ids).unwrap());
        let worst = common::compare_rows(text, &got, &want);
        eprintln!(
            "{text:?}: {} positions, max |Δlogit| {worst:.2e}",
            ids.len()
        );
        assert!(worst < 1e-3, "{text}: max |Δlogit| {worst}");
    }
}

/// A prompt, then tokens one at a time through the KV cache, against one
/// pass over all of them.
#[test]
fn decoding_through_the_cache_equals_the_whole_pass() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu).unwrap();
    let mlx = MlxLlama::load(&candle.assets).unwrap();
    let ids = candle
        .encode("The capital of France is Paris, and the capital of Italy")
        .unwrap();
    let whole = rows(&mlx.forward(&ids).unwrap());
    let split = ids.len() - 4;
    let mut cache = mlx.new_cache();
    let mut got = rows(&mlx.forward_cached(&ids[..split], &mut cache).unwrap());
    for &id in &ids[split..] {
        got.extend(rows(&mlx.forward_cached(&[id], &mut cache).unwrap()));
    }
    assert_eq!(cache.len(), ids.len());
    let worst = got
        .iter()
        .flatten()
        .zip(whole.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "{} positions, the last 4 decoded through the cache: max |Δlogit| {worst:.2e}",
        ids.len()
    );
    assert!(worst < 1e-3, "max |Δlogit| {worst}");
    // A token outside the vocabulary is refused, and the cache is unchanged.
    let vocab = mlx.config().vocab as u32;
    assert!(mlx.forward_cached(&[vocab], &mut cache).is_err());
    assert_eq!(cache.len(), ids.len());
}

/// A loaded executor shared between threads (a server's requests): each
/// thread's session gives what a session on the loading thread gives.
#[test]
fn an_executor_shared_between_threads_gives_each_the_same_logits() {
    use vauban_exec::executor::{
        InferenceSession, LocalBackend, LocalModel, ModelSpec, PromptForm,
    };
    let Some(path) = common::smollm2() else {
        return;
    };
    let exec = LocalBackend::mlx(&ModelSpec::new(path)).unwrap();
    let prompt = exec
        .tokenize("Tell me about lighthouses.", &PromptForm::Raw)
        .unwrap();
    let run = || {
        let mut s = exec.session(&[]);
        let mut rows = vec![s.prefill(&prompt).unwrap().logits];
        for id in [1u32, 2, 3] {
            rows.push(s.decode_step(id).unwrap().logits);
        }
        rows
    };
    let want = run();
    let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3).map(|_| scope.spawn(run)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for rows in got {
        let d = common::compare_rows("another thread", &rows, &want);
        assert!(d < 1e-5, "another thread: max |Δlogit| {d}");
    }
}

/// A hook that hands back the residual stream in another dtype, or of
/// another shape, is refused naming both, and the cache keeps what it held.
#[test]
fn a_hook_of_another_dtype_or_shape_is_refused_naming_both() {
    use vauban_exec::executor::tensor_lib::{BlockHook, BlockView};
    let Some(path) = common::smollm2() else {
        return;
    };
    struct Replace(fn(&mlx_rs::Array) -> mlx_rs::Array);
    impl BlockHook<mlx_rs::Array> for Replace {
        fn after_block(
            &mut self,
            _: &BlockView<'_, mlx_rs::Array>,
            resid: &mlx_rs::Array,
        ) -> Result<Option<mlx_rs::Array>, vauban_exec::model::ModelError> {
            Ok(Some((self.0)(resid)))
        }
    }
    let assets = vauban_exec::model::assets::ModelAssets::load(&path).unwrap();
    let mlx = MlxLlama::load(&assets).unwrap();
    let mut cache = mlx.new_cache();
    let half = |r: &mlx_rs::Array| r.as_dtype(mlx_rs::Dtype::Float16).unwrap();
    let err = mlx
        .run(&[1, 2, 3], &mut cache, &mut Replace(half), 0)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("block 0") && err.contains("Float16") && err.contains("Float32"),
        "{err}"
    );
    let first = |r: &mlx_rs::Array| {
        r.take_axis(mlx_rs::Array::from_slice(&[0], &[1]), 0)
            .unwrap()
    };
    let err = mlx
        .run(&[1, 2, 3], &mut cache, &mut Replace(first), 0)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("[1, 576]") && err.contains("[3, 576]"),
        "{err}"
    );
    assert_eq!(cache.len(), 0, "a refused pass leaves the cache as it was");
}
