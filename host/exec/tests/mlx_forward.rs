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

/// MLX in half precision (issue 39): SmolLM2 with its weights, activations
/// and KV cache in f16 and in bf16 against the same model in f32, over a
/// prompt and through the cache: the top token at almost every position,
/// logits within a bound that fits the dtype's precision (bf16 has 8 bits
/// of mantissa, f16 11), keys and values held at half f32's bytes, and the
/// kernel note naming the dtype.
#[test]
fn half_precision_follows_f32_within_its_precision() {
    use vauban_exec::executor::tensor_lib::LibModel;
    let Some(path) = common::smollm2() else {
        return;
    };
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu).unwrap();
    let f32_model = MlxLlama::load(&candle.assets).unwrap();
    let ids = candle
        .encode("Once upon a time, in a small village far away in the mountains, there lived a")
        .unwrap();
    let want = rows(&f32_model.forward(&ids).unwrap());
    let mut f32_cache = f32_model.new_cache();
    f32_model.forward_cached(&ids, &mut f32_cache).unwrap();
    for (dtype, name, mean_bound) in [
        (mlx_rs::Dtype::Float16, "float16", 0.05),
        (mlx_rs::Dtype::Bfloat16, "bfloat16", 0.3),
    ] {
        let mut half = MlxLlama::load(&candle.assets).unwrap();
        half.cast(dtype).unwrap();
        assert!(half.kernel_note().contains(name), "{}", half.kernel_note());
        // The prompt, then its last 4 tokens decoded through the cache.
        let split = ids.len() - 4;
        let mut cache = half.new_cache();
        let mut got = rows(&half.forward_cached(&ids[..split], &mut cache).unwrap());
        for &id in &ids[split..] {
            got.extend(rows(&half.forward_cached(&[id], &mut cache).unwrap()));
        }
        assert!(
            cache.bytes() * 2 == f32_cache.bytes(),
            "{name}: {} bytes of keys and values against f32's {}",
            cache.bytes(),
            f32_cache.bytes()
        );
        let top = |x: &[f32]| (0..x.len()).max_by(|&i, &j| x[i].total_cmp(&x[j])).unwrap();
        let agree = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| top(g) == top(w))
            .count();
        let diffs: Vec<f32> = got
            .iter()
            .flatten()
            .zip(want.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .collect();
        let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
        let worst = diffs.iter().copied().fold(0f32, f32::max);
        eprintln!(
            "{name}: top token as f32's at {agree} of {} positions, mean |Δlogit| {mean:.3}, max {worst:.3}",
            ids.len()
        );
        assert!(
            mean.is_finite() && mean < mean_bound,
            "{name}: mean |Δlogit| {mean}"
        );
        assert!(
            agree * 10 >= ids.len() * 8,
            "{name}: top token at {agree} of {}",
            ids.len()
        );
    }
}
