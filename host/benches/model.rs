//! Model figures on SmolLM2-135M-Instruct (from `scripts/fetch-model.sh`):
//! prefill and decode tokens/s with the weights as stored (Q4_1) and
//! dequantized to f32, and the overhead of tracing activations at every
//! layer against a plain forward, as a ratio measured in the same run.
//! Prints figures; asserts nothing (beyond the trace holding every layer).
//!
//! Columns: `plain ms` a forward with next-token logits only and no hook;
//! `acts ms` the traced forward keeping the residual stream after every
//! layer (copied to the host, summarised, kept raw); `plain+lp` a forward
//! with logits at every position copied out; `all ms` the trace that also
//! records logits and log-probabilities. Ratios are traced / plain, medians
//! of the same run.
//!
//! Run: `cargo bench -p vauban --bench model` (optional arguments: prompt
//! tokens, decode tokens, repetitions; default 64 32 5).

use std::path::PathBuf;
use std::time::Instant;

use vauban::executor::candle::CandleExecutor;
use vauban::executor::candle::model::llama::{LogitsAt, NoHook};
use vauban::executor::{
    DeviceSpec, Executor, GenerateOptions, LocalModel, ModelSpec, PromptForm, RunOptions,
    generate::generate,
};
use vauban::model::{KvType, WeightMode};
use vauban::trace::{ArtifactKind as K, TraceRequest};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    // As the binary does: candle otherwise re-reads the CPU count on every matmul.
    // SAFETY: first thing in main, before any thread starts.
    unsafe { vauban::executor::pin_thread_count() };
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let prompt_tokens = args.first().copied().unwrap_or(64);
    let decode_tokens = args.get(1).copied().unwrap_or(32);
    let reps = args.get(2).copied().unwrap_or(5).max(1);
    let dir = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!(
            "{} is absent; run `bash scripts/fetch-model.sh`",
            path.display()
        );
        return Ok(());
    }
    let device: DeviceSpec = std::env::var("VAUBAN_DEVICE")
        .unwrap_or("cpu".into())
        .parse()
        .map_err(anyhow::Error::msg)?;
    println!(
        "SmolLM2-135M-Instruct, device {device}, {prompt_tokens} prompt tokens, {decode_tokens} decode tokens, median of {reps}"
    );
    println!(
        "{:<8} {:>14} {:>14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "weights",
        "prefill tok/s",
        "decode tok/s",
        "plain ms",
        "acts ms",
        "ratio",
        "plain+lp",
        "all ms",
        "ratio"
    );
    // VAUBAN_BENCH_WEIGHTS=native or f32 runs one form (for a profiler).
    let only = std::env::var("VAUBAN_BENCH_WEIGHTS").ok();
    for mode in [WeightMode::Native, WeightMode::F32] {
        if only
            .as_deref()
            .is_some_and(|w| w != format!("{mode:?}").to_lowercase())
        {
            continue;
        }
        let exec = CandleExecutor::load(&ModelSpec {
            path: path.clone(),
            device,
            weights: mode,
            kv_cache: KvType::F32,
            dtype: Default::default(),
            primitive: Default::default(),
        })?;
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(prompt_tokens);
        let mut ids = exec.model.encode(&text)?;
        ids.truncate(prompt_tokens);
        let layers: Vec<usize> = (0..exec.dims().layers).collect();
        // Warm-up: the weights hash (once per model), allocator, first touch of weights.
        let _ = exec.model_ref();
        exec.model
            .model
            .run(&ids, None, &mut NoHook, LogitsAt::Last)?;

        let options = RunOptions {
            trace_id: "bench".into(),
            prompt: PromptForm::Raw,
            interventions: vec![],
            block_outputs: false,
            generate: GenerateOptions::default(),
            reference: None,
        };
        let request = |observe: Vec<K>| TraceRequest {
            category: None,
            expected_behavior: None,
            prompt_id: None,
            text: None,
            token_ids: Some(ids.clone()),
            observe,
            layers: layers.clone(),
            raw_tensors: true,
            raw_kinds: Vec::new(),
        };
        let acts_only = request(vec![K::Tokens, K::Activation]);
        let everything = request(vec![K::Tokens, K::Logits, K::Logprobs, K::Activation]);
        let (mut prefill, mut decode) = (vec![], vec![]);
        let (mut plain_last, mut traced_acts, mut plain_all, mut traced_all) =
            (vec![], vec![], vec![], vec![]);
        let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        };
        for _ in 0..reps {
            let opts = GenerateOptions {
                max_tokens: decode_tokens + 1,
                ..Default::default()
            };
            let mut session = exec.session(&[]);
            let g = generate(
                &mut session,
                &ids,
                None,
                &opts,
                &|_| false,
                &|ids| exec.detokenize(ids),
                &mut |_| {},
            )?;
            prefill.push(ids.len() as f64 / (g.prefill_ns as f64 / 1e9));
            decode.push(g.decode_steps as f64 / (g.decode_ns as f64 / 1e9));

            // Activations: a plain forward (next-token logits only, no hook, nothing
            // copied out) against the traced one keeping every layer's residual
            // stream, copied to the host, summarised and kept raw.
            plain_last.push(time(&mut || {
                let (l, _) = exec
                    .model
                    .model
                    .run(&ids, None, &mut NoHook, LogitsAt::Last)?;
                l.to_vec2::<f32>()?;
                Ok(())
            })?);
            traced_acts.push(time(&mut || {
                let out = exec.trace(&acts_only, &options, None)?;
                assert_eq!(out.trace.artifacts_of(K::Activation).count(), layers.len());
                Ok(())
            })?);
            // Everything: logits at every position copied out, against the trace
            // that also records logits and log-probabilities (summaries and raw).
            plain_all.push(time(&mut || {
                let (l, _) = exec
                    .model
                    .model
                    .run(&ids, None, &mut NoHook, LogitsAt::All)?;
                l.to_vec2::<f32>()?;
                Ok(())
            })?);
            traced_all.push(time(&mut || {
                exec.trace(&everything, &options, None)?;
                Ok(())
            })?);
        }
        let (pl, ta, pa, tall) = (
            median(plain_last),
            median(traced_acts),
            median(plain_all),
            median(traced_all),
        );
        println!(
            "{:<8} {:>14.1} {:>14.1} {:>10.1} {:>10.1} {:>9.2}x {:>10.1} {:>10.1} {:>9.2}x",
            match mode {
                WeightMode::Native => "q4_1",
                WeightMode::F32 => "f32",
            },
            median(prefill),
            median(decode),
            pl * 1e3,
            ta * 1e3,
            ta / pl,
            pa * 1e3,
            tall * 1e3,
            tall / pa,
        );
    }
    Ok(())
}
