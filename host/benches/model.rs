//! Model figures on SmolLM2-135M-Instruct (from `scripts/fetch-model.sh`):
//! prefill and decode tokens/s with the weights as stored (Q4_1) and
//! dequantized to f32, and the overhead of tracing activations at every
//! layer against a plain forward, as a ratio measured in the same run.
//! Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p vauban --bench model` (optional arguments: prompt
//! tokens, decode tokens, repetitions; default 64 32 5).

use std::path::PathBuf;
use std::time::Instant;

use vauban::executor::{
    CandleExecutor, DeviceSpec, GenerateOptions, ModelSpec, PromptForm, RunOptions,
    generate::generate,
};
use vauban::model::llama::{LogitsAt, NoHook, WeightMode};
use vauban::trace::{ArtifactKind as K, TraceRequest};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
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
        "{:<8} {:>14} {:>14} {:>12} {:>12} {:>10}",
        "weights", "prefill tok/s", "decode tok/s", "plain ms", "traced ms", "overhead"
    );
    for mode in [WeightMode::Native, WeightMode::F32] {
        let exec = CandleExecutor::load(&ModelSpec {
            path: path.clone(),
            device,
            weights: mode,
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

        let (mut prefill, mut decode, mut plain, mut traced) = (vec![], vec![], vec![], vec![]);
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

            // Plain forward: logits at every position, no hooks, nothing copied out.
            let t = Instant::now();
            let (logits, _) = exec
                .model
                .model
                .run(&ids, None, &mut NoHook, LogitsAt::All)?;
            let _ = logits.to_vec2::<f32>()?;
            plain.push(t.elapsed().as_secs_f64());
            // Traced: the same forward through the executor, with activations at
            // every layer copied to the host and summarised, logits and logprobs.
            let request = TraceRequest {
                prompt_id: None,
                text: None,
                token_ids: Some(ids.clone()),
                observe: vec![K::Tokens, K::Logits, K::Logprobs, K::Activation],
                layers: layers.clone(),
                raw_tensors: true,
            };
            let options = RunOptions {
                trace_id: "bench".into(),
                prompt: PromptForm::Raw,
                interventions: vec![],
                block_outputs: false,
                generate: GenerateOptions::default(),
            };
            let t = Instant::now();
            let out = exec.trace(&request, &options)?;
            traced.push(t.elapsed().as_secs_f64());
            assert_eq!(out.trace.artifacts_of(K::Activation).count(), layers.len());
        }
        let (p, tr) = (median(plain), median(traced));
        println!(
            "{:<8} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>9.2}x",
            match mode {
                WeightMode::Native => "q4_1",
                WeightMode::F32 => "f32",
            },
            median(prefill),
            median(decode),
            p * 1e3,
            tr * 1e3,
            tr / p
        );
    }
    Ok(())
}
