//! The libtorch forward pass against candle's on SmolLM2, both with the
//! GGUF's weights dequantized to f32: the same next tokens, logits within
//! a stated bound. Needs libtorch (`--features torch`) and the model
//! (`bash scripts/fetch-model.sh`).
#![cfg(feature = "torch")]

mod common;

use vauban_exec::executor::candle::model::LoadedModel;
use vauban_exec::executor::tensor_lib::LibCache;
use vauban_exec::executor::torch::model::TorchLlama;
use vauban_exec::model::WeightMode;

#[test]
fn torch_and_candle_agree_on_smollm2() {
    let Some(path) = common::smollm2() else {
        return;
    };
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu).unwrap();
    let torch = TorchLlama::from_gguf(&path, tch::Device::Cpu).unwrap();
    assert_eq!(torch.config(), &candle.config);
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
        let got = torch.forward(&ids).unwrap();
        let got: Vec<Vec<f32>> = Vec::<Vec<f32>>::try_from(&got).unwrap();
        let worst = common::compare_rows(text, &got, &want);
        eprintln!(
            "{text:?}: {} positions, max |Δlogit| {worst:.2e}",
            ids.len()
        );
        // Measured 5.9e-5 and 7.1e-5 (summation orders differ).
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
    let torch = TorchLlama::from_gguf(&path, tch::Device::Cpu).unwrap();
    let ids = candle
        .encode("The capital of France is Paris, and the capital of Italy")
        .unwrap();
    let whole: Vec<Vec<f32>> = Vec::<Vec<f32>>::try_from(&torch.forward(&ids).unwrap()).unwrap();
    let split = ids.len() - 4;
    let mut cache = torch.new_cache();
    let mut rows: Vec<Vec<f32>> =
        Vec::<Vec<f32>>::try_from(&torch.forward_cached(&ids[..split], &mut cache).unwrap())
            .unwrap();
    for &id in &ids[split..] {
        let step =
            Vec::<Vec<f32>>::try_from(&torch.forward_cached(&[id], &mut cache).unwrap()).unwrap();
        rows.extend(step);
    }
    assert_eq!(cache.len(), ids.len());
    let worst = rows
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
}

/// Subtracts a unit direction after every block and keeps the residual
/// stream after each: the libtorch primitive in the libtorch forward.
struct Ablate {
    iv: Vec<vauban_exec::intervene::Intervention>,
    kept: Vec<tch::Tensor>,
}

impl vauban_exec::executor::torch::model::BlockHook<tch::Tensor> for Ablate {
    fn after_block(
        &mut self,
        v: &vauban_exec::executor::torch::model::BlockView<'_, tch::Tensor>,
        resid: &tch::Tensor,
    ) -> Result<Option<tch::Tensor>, vauban_exec::model::ModelError> {
        let out = vauban_exec::executor::torch::intervene::apply(
            &self.iv[v.layer],
            &resid.unsqueeze(0),
            v.offset,
        )
        .unwrap();
        let new = out.hidden.unwrap().squeeze_dim(0);
        self.kept.push(new.shallow_clone());
        Ok(Some(new))
    }
}

/// An ablation at every block in both backends (candle through its session
/// hook, libtorch through `BlockHook`): the same logits and the same
/// residual stream after every block, to f32 rounding.
#[test]
fn an_ablation_at_every_block_agrees_with_candle() {
    use vauban_exec::executor::candle::RunHook;
    use vauban_exec::executor::candle::model::llama::{KvCache, LogitsAt};
    use vauban_exec::intervene::{Direction, Intervention, Mode, Positions};
    let Some(path) = common::smollm2() else {
        return;
    };
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu).unwrap();
    let torch = TorchLlama::from_gguf(&path, tch::Device::Cpu).unwrap();
    let hidden = candle.config.hidden;
    let mut v: Vec<f32> = (0..hidden)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    let direction = Direction::new("test", "direction", "", None, &v, &[hidden]).unwrap();
    let ivs: Vec<Intervention> = (0..candle.config.layers)
        .map(|layer| Intervention {
            layer,
            mode: Mode::Subtract,
            direction: direction.clone(),
            alpha: 1.0,
            value: None,
            positions: Positions::All,
            condition: None,
        })
        .collect();
    let ids = candle.encode("The capital of France is").unwrap();
    let mut hook = RunHook::new(&ivs);
    hook.observe = (0..candle.config.layers).collect();
    let mut cache: KvCache = candle.model.new_cache();
    let (want, _) = candle
        .model
        .run(&ids, Some(&mut cache), &mut hook, LogitsAt::All)
        .unwrap();
    let want = want.to_vec2::<f32>().unwrap();
    let mut ablate = Ablate {
        iv: ivs.clone(),
        kept: Vec::new(),
    };
    let (got, _) = torch
        .run(&ids, &mut torch.new_cache(), &mut ablate, 0)
        .unwrap();
    let got = Vec::<Vec<f32>>::try_from(&got).unwrap();
    let worst = got
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    // The residual stream grows to hundreds in a few dimensions: compared
    // relative to each layer's largest magnitude.
    let mut worst_resid = 0f32;
    for (k, t) in hook.kept.iter().zip(&ablate.kept) {
        let c = k.tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let g = Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap();
        let scale = c.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        for (a, b) in c.iter().zip(&g) {
            worst_resid = worst_resid.max((a - b).abs() / scale);
        }
    }
    assert_eq!(hook.kept.len(), ablate.kept.len());
    eprintln!(
        "ablated: max |Δlogit| {worst:.2e}, max |Δresidual| / the layer's max |residual| {worst_resid:.2e}"
    );
    assert!(worst < 1e-3, "max |Δlogit| {worst}");
    // Measured 7.9e-6.
    assert!(worst_resid < 1e-4, "max relative |Δresidual| {worst_resid}");
}
