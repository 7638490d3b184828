//! The libtorch forward against candle's on the CPU, same model, same
//! weights (SmolLM2's GGUF dequantized to f32 for both), same threads, in
//! one run: prompt processing (`pp128`, `pp512`: one forward into an empty
//! cache, logits at every position for both) and generation (`tg128`: 128 single-token steps), tok/s, median
//! of `--reps` (default 5). Prints figures; asserts nothing.
//!
//! Run: `eval "$(bash scripts/setup-torch.sh)"; cargo bench -p vauban-exec
//! --features torch --bench torch_speed -- [--reps N]`.

use std::path::PathBuf;
use std::time::Instant;

use vauban_exec::executor::candle::model::LoadedModel;
use vauban_exec::executor::candle::model::llama::{LogitsAt, NoHook};
use vauban_exec::executor::torch::model::TorchLlama;
use vauban_exec::model::WeightMode;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { vauban_exec::executor::pin_thread_count() };
    let threads: usize = std::env::var("RAYON_NUM_THREADS")?.parse()?;
    tch::set_num_threads(threads as i32);
    let mut reps = 5;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            reps = args.next().and_then(|r| r.parse().ok()).unwrap_or(reps);
        }
    }
    let models = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    let path = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let candle = LoadedModel::load(&path, WeightMode::F32, &candle_core::Device::Cpu)?;
    let torch = TorchLlama::from_gguf(&path, tch::Device::Cpu)?;
    let all = candle.encode(&"The quick brown fox jumps over the lazy dog. ".repeat(64))?;
    println!(
        "{} (f32 weights for both), {threads} threads, median of {reps}",
        path.display()
    );
    println!(
        "{:<7} {:>10} {:>10} {:>7}",
        "test", "candle", "torch", "ratio"
    );
    let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64())
    };
    // Warm-up: first touch of every weight.
    candle
        .model
        .run(&all[..16], None, &mut NoHook, LogitsAt::Last)?;
    let _ = torch.forward(&all[..16])?;
    for n in [128usize, 512] {
        let ids = &all[..n];
        let (mut c, mut t) = (vec![], vec![]);
        for _ in 0..reps {
            c.push(
                n as f64
                    / time(&mut || {
                        let mut cache = candle.model.new_cache();
                        // Logits at every position, as the torch forward gives.
                        candle
                            .model
                            .run(ids, Some(&mut cache), &mut NoHook, LogitsAt::All)?;
                        Ok(())
                    })?,
            );
            t.push(
                n as f64
                    / time(&mut || {
                        let _ = torch.forward_cached(ids, &mut torch.new_cache())?;
                        Ok(())
                    })?,
            );
        }
        let (c, t) = (median(c), median(t));
        println!(
            "{:<7} {c:>10.1} {t:>10.1} {:>6.2}x",
            format!("pp{n}"),
            t / c
        );
    }
    let (mut c, mut t) = (vec![], vec![]);
    for _ in 0..reps {
        c.push(
            128.0
                / time(&mut || {
                    let mut cache = candle.model.new_cache();
                    for &id in &all[..128] {
                        candle
                            .model
                            .run(&[id], Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
                    }
                    Ok(())
                })?,
        );
        t.push(
            128.0
                / time(&mut || {
                    let mut cache = torch.new_cache();
                    for &id in &all[..128] {
                        let _ = torch.forward_cached(&[id], &mut cache)?;
                    }
                    Ok(())
                })?,
        );
    }
    let (c, t) = (median(c), median(t));
    println!("{:<7} {c:>10.1} {t:>10.1} {:>6.2}x", "tg128", t / c);
    Ok(())
}
