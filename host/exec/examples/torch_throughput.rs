//! Throughput of the Torch executor's batched passes (issue 39): the same
//! random prompts (token ids, written to `--ids FILE` for
//! `scripts/reference/hf_throughput.py` to feed transformers the same
//! ones) traced in batches of each size, greedily, as a plain generation
//! (tokens only) and with the residual stream recorded after every block.
//! Prints one JSON line per batch size and mode: prefill and decode
//! tokens/s, and the traced run's time over the plain one's. Asserts
//! nothing; `scripts/bench-throughput.sh` runs it beside transformers.
//!
//! ```text
//! eval "$(bash scripts/setup-torch.sh)"
//! cargo run --release -p vauban-exec --features torch --example torch_throughput -- \
//!     MODEL [--device cpu|cuda] [--dtype f32|bf16|f16] [--batches 1,8,32]
//!     [--prompt-len 128] [--new-tokens 128] [--ids FILE] [--ragged]
//! ```
//!
//! With `--ragged`, the k-th of a batch of b sequences generates
//! `new-tokens · k / b` tokens (as an audit's replies end far apart), so
//! most of the batch has finished before its longest sequence: what the
//! decode stage's compaction is for. Decode tokens/s then counts the
//! tokens generated over the decode stage's time.
//!
//! Prefill is each trace's prefill pass (the whole batch's: hooks, the
//! lm_head and copying activations out included); decode is the longest
//! sequence's decode steps, every sequence's steps counted as its tokens.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use vauban_exec::executor::torch::TorchExecutor;
use vauban_exec::executor::{
    DeviceSpec, Executor, GenerateOptions, LocalModel, ModelSpec, PromptForm, RunOptions,
    TraceOutput,
};
use vauban_exec::model::{Dtype, KvType, WeightMode};
use vauban_format::trace::{ArtifactKind as K, TraceRequest};

struct Args {
    model: PathBuf,
    device: DeviceSpec,
    dtype: Dtype,
    batches: Vec<usize>,
    prompt_len: usize,
    new_tokens: usize,
    ids: Option<PathBuf>,
    ragged: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        model: PathBuf::new(),
        device: DeviceSpec::Cpu,
        dtype: Dtype::F32,
        batches: vec![1, 8, 32],
        prompt_len: 128,
        new_tokens: 128,
        ids: None,
        ragged: false,
    };
    let mut model = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} takes a value"));
        match arg.as_str() {
            "--device" => a.device = value()?.parse().map_err(anyhow::Error::msg)?,
            "--dtype" => a.dtype = value()?.parse().map_err(anyhow::Error::msg)?,
            "--batches" => {
                a.batches = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--prompt-len" => a.prompt_len = value()?.parse()?,
            "--new-tokens" => a.new_tokens = value()?.parse()?,
            "--ids" => a.ids = Some(PathBuf::from(value()?)),
            "--ragged" => a.ragged = true,
            _ if !arg.starts_with("--") && model.is_none() => model = Some(PathBuf::from(arg)),
            _ => bail!("unknown argument `{arg}`"),
        }
    }
    a.model = model.context(
        "usage: torch_throughput MODEL [--device D] [--dtype T] [--batches 1,8,32] [--prompt-len N] [--new-tokens N] [--ids FILE] [--ragged]",
    )?;
    Ok(a)
}

/// `rows` prompts of `len` token ids in `[2, vocab)`, from a fixed
/// generator (ids 0 and 1 are left out: special tokens in the models the
/// benchmark makes).
fn prompts(rows: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..rows)
        .map(|_| {
            (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    2 + ((state >> 33) % (vocab as u64 - 2)) as u32
                })
                .collect()
        })
        .collect()
}

fn job(
    i: usize,
    ids: &[u32],
    traced: bool,
    layers: usize,
    new_tokens: usize,
) -> (TraceRequest, RunOptions) {
    let mut observe = vec![K::Tokens];
    if traced {
        observe.push(K::Activation);
    }
    let request = TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: Some(format!("p{i}")),
        text: None,
        token_ids: Some(ids.to_vec()),
        observe,
        layers: match traced {
            true => (0..layers).collect(),
            false => Vec::new(),
        },
        raw_tensors: false,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: format!("p{i}"),
        prompt: PromptForm::Raw,
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions {
            max_tokens: new_tokens,
            ..Default::default()
        },
        reference: None,
    };
    (request, options)
}

/// Traces `jobs` as one batch; the traces and the wall time.
fn run(exec: &TorchExecutor, jobs: &[(TraceRequest, RunOptions)]) -> (Vec<TraceOutput>, f64) {
    let start = Instant::now();
    let mut out = Vec::with_capacity(jobs.len());
    exec.trace_all(jobs, jobs.len(), &mut |i, r| {
        out.push(r.unwrap_or_else(|e| panic!("trace {i}: {e}")));
        std::ops::ControlFlow::Continue(())
    });
    (out, start.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let start = Instant::now();
    let exec = TorchExecutor::load(&ModelSpec {
        path: a.model.clone(),
        device: a.device,
        weights: WeightMode::Native,
        kv_cache: KvType::F32,
        dtype: a.dtype,
        primitive: Default::default(),
    })?;
    let dims = exec.dims();
    eprintln!(
        "loaded {} ({} layers, hidden {}, vocabulary {}) on {} as {} in {:.1} s",
        a.model.display(),
        dims.layers,
        dims.hidden,
        dims.vocab,
        a.device,
        a.dtype.name(),
        start.elapsed().as_secs_f64()
    );
    let widest = a.batches.iter().copied().max().unwrap_or(1);
    let ids = prompts(widest, a.prompt_len, dims.vocab);
    if let Some(path) = &a.ids {
        std::fs::write(path, serde_json::to_string(&ids)?)?;
    }
    // Warm-up: libtorch's kernels and (on a GPU) the CUDA context.
    run(&exec, &[job(0, &ids[0][..8], false, dims.layers, 4)]);
    for &b in &a.batches {
        let mut plain_wall = None;
        for traced in [false, true] {
            let budget = |i: usize| match a.ragged {
                true => (a.new_tokens * (i + 1) / b).max(1),
                false => a.new_tokens,
            };
            let jobs: Vec<_> = (0..b)
                .map(|i| job(i, &ids[i], traced, dims.layers, budget(i)))
                .collect();
            let (out, wall) = run(&exec, &jobs);
            let gens: Vec<_> = out.iter().filter_map(|o| o.generation.as_ref()).collect();
            let prefill_s = gens.iter().map(|g| g.prefill_ns).max().unwrap_or(0) as f64 / 1e9;
            let decode_s = gens.iter().map(|g| g.decode_ns).max().unwrap_or(0) as f64 / 1e9;
            let steps: usize = gens.iter().map(|g| g.decode_steps).sum();
            let generated: usize = gens.iter().map(|g| g.ids.len()).sum();
            let line = serde_json::json!({
                "engine": "vauban-torch",
                "device": a.device.to_string(),
                "dtype": a.dtype.name(),
                "batch": b,
                "traced_every_layer": traced,
                "ragged": a.ragged,
                "prompt_tokens": b * a.prompt_len,
                "generated_tokens": generated,
                "prefill_tokens_per_s": (b * a.prompt_len) as f64 / prefill_s,
                "decode_tokens_per_s": steps as f64 / decode_s,
                "wall_s": wall,
                "traced_over_plain": plain_wall.map(|p: f64| wall / p),
            });
            println!("{line}");
            if !traced {
                plain_wall = Some(wall);
            }
        }
    }
    Ok(())
}
