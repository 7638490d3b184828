//! Every backend that runs a model file, on the CPU, same model, same
//! weights (SmolLM2's GGUF dequantized to f32 for all), same threads, in
//! one run: candle always, libtorch with `--features torch`, MLX with
//! `--features mlx` (and MLX on those weights packed to 4 bits in groups
//! of 64, `mlx-q4`, as an mlx-community checkpoint holds them). Prompt processing (`pp128`, `pp512`: one forward into
//! an empty cache, logits at every position) and generation (`tg128`: 128
//! single-token steps over the cache), tok/s, median of `--reps` (default
//! 5), and each backend's ratio to candle. Prints figures; asserts nothing.
//!
//! Run (all three): `eval "$(bash scripts/setup-torch.sh)"; eval "$(bash
//! scripts/setup-mlx.sh)"; cargo bench -p vauban-exec --features torch,mlx
//! --bench backend_speed -- [--reps N]`. Drop a feature to leave its
//! backend out.

use std::path::PathBuf;
use std::time::Instant;

use vauban_exec::executor::candle::model::LoadedModel;
use vauban_exec::executor::candle::model::llama::{LogitsAt, NoHook};
#[cfg(any(feature = "torch", feature = "mlx"))]
use vauban_exec::executor::tensor_lib::LibModel;
use vauban_exec::model::WeightMode;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One backend's two workloads: a pass over `ids` into an empty cache
/// with logits at every position, and `ids` one step at a time.
trait Workload {
    fn prompt(&self, ids: &[u32]) -> anyhow::Result<()>;
    fn generate(&self, ids: &[u32]) -> anyhow::Result<()>;
}

impl Workload for LoadedModel {
    fn prompt(&self, ids: &[u32]) -> anyhow::Result<()> {
        let mut cache = self.model.new_cache();
        self.model
            .run(ids, Some(&mut cache), &mut NoHook, LogitsAt::All)?;
        Ok(())
    }
    fn generate(&self, ids: &[u32]) -> anyhow::Result<()> {
        let mut cache = self.model.new_cache();
        for &id in ids {
            self.model
                .run(&[id], Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
        }
        Ok(())
    }
}

/// A tensor-library model, through the trait the executors share.
#[cfg(any(feature = "torch", feature = "mlx"))]
struct Lib<M>(M);

#[cfg(any(feature = "torch", feature = "mlx"))]
impl<M: LibModel> Workload for Lib<M> {
    fn prompt(&self, ids: &[u32]) -> anyhow::Result<()> {
        let hook = &mut vauban_exec::executor::tensor_lib::NoHook;
        self.0.run(ids, &mut self.0.new_cache(), hook, 0)?;
        Ok(())
    }
    fn generate(&self, ids: &[u32]) -> anyhow::Result<()> {
        let mut cache = self.0.new_cache();
        for &id in ids {
            let hook = &mut vauban_exec::executor::tensor_lib::NoHook;
            self.0.run(&[id], &mut cache, hook, 0)?;
        }
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { vauban_exec::executor::pin_thread_count() };
    let threads: usize = std::env::var("RAYON_NUM_THREADS")?.parse()?;
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
    let all = candle.encode(&"The quick brown fox jumps over the lazy dog. ".repeat(64))?;
    #[allow(unused_mut)]
    let mut backends: Vec<(&str, Box<dyn Workload>)> = vec![("candle", Box::new(candle))];
    #[cfg(feature = "torch")]
    {
        tch::set_num_threads(threads as i32);
        let torch =
            vauban_exec::executor::torch::model::TorchLlama::from_gguf(&path, tch::Device::Cpu)?;
        backends.push(("torch", Box::new(Lib(torch))));
    }
    #[cfg(feature = "mlx")]
    {
        use vauban_exec::executor::mlx::model::MlxLlama;
        let assets = vauban_exec::model::assets::ModelAssets::load(&path)?;
        backends.push(("mlx", Box::new(Lib(MlxLlama::load(&assets)?))));
        // The same weights packed as an mlx-community checkpoint would
        // hold them (4 bits, groups of 64), multiplied by quantized_matmul.
        let mut q4 = MlxLlama::load(&assets)?;
        q4.quantize(64, 4)?;
        backends.push(("mlx-q4", Box::new(Lib(q4))));
    }
    println!(
        "{} (f32 weights for all), {threads} threads, tok/s, median of {reps}",
        path.display()
    );
    print!("{:<7}", "test");
    for (name, _) in &backends {
        print!(" {name:>10}");
    }
    for (name, _) in &backends[1..] {
        print!(" {:>13}", format!("{name}/candle"));
    }
    println!();
    // Warm-up: first touch of every weight.
    for (_, b) in &backends {
        b.prompt(&all[..16])?;
    }
    let tests: [(&str, &[u32], bool); 3] = [
        ("pp128", &all[..128], true),
        ("pp512", &all[..512], true),
        ("tg128", &all[..128], false),
    ];
    for (test, ids, prompt) in tests {
        let mut rates = Vec::new();
        for (_, b) in &backends {
            let mut r = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                match prompt {
                    true => b.prompt(ids)?,
                    false => b.generate(ids)?,
                }
                r.push(ids.len() as f64 / t.elapsed().as_secs_f64());
            }
            rates.push(median(r));
        }
        print!("{test:<7}");
        for r in &rates {
            print!(" {r:>10.1}");
        }
        for r in &rates[1..] {
            print!(" {:>12.2}x", r / rates[0]);
        }
        println!();
    }
    Ok(())
}
