//! Traces one chat prompt with the Torch executor and prints what the
//! trace records of each stage: its device, time, tokens, memory, copies,
//! synchronisation points and notes (on a GPU: the device's name and its
//! memory in use), then prefill and decode tokens/s and the reply. With
//! `--out FILE` the whole trace is written as JSON.
//!
//! ```text
//! eval "$(bash scripts/setup-torch.sh)"
//! cargo run --release -p vauban-exec --features torch --example torch_trace -- \
//!     MODEL [--device cpu|cuda|cuda:N|mps] [--dtype f32|bf16|f16] [--max-tokens N]
//!     [--prompt TEXT] [--out FILE]
//! ```

use std::path::PathBuf;

use anyhow::{Context, bail};
use vauban_exec::executor::torch::TorchExecutor;
use vauban_exec::executor::{
    DeviceSpec, Executor, GenerateOptions, LocalModel, ModelSpec, PromptForm, RunOptions,
};
use vauban_exec::model::{Dtype, KvType, WeightMode};
use vauban_format::trace::{ArtifactData, ArtifactKind as K, TraceRequest};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut model = None;
    let mut device = DeviceSpec::Cpu;
    let mut max_tokens = 64;
    let mut prompt = "Write one sentence about a lighthouse keeper.".to_owned();
    let mut out = None;
    let mut dtype = Dtype::F32;
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} takes a value"));
        match a.as_str() {
            "--device" => device = value()?.parse().map_err(anyhow::Error::msg)?,
            "--max-tokens" => max_tokens = value()?.parse()?,
            "--prompt" => prompt = value()?,
            "--out" => out = Some(PathBuf::from(value()?)),
            "--dtype" => dtype = value()?.parse().map_err(anyhow::Error::msg)?,
            _ if !a.starts_with("--") && model.is_none() => model = Some(PathBuf::from(a)),
            _ => bail!("unknown argument `{a}`"),
        }
    }
    let Some(model) = model else {
        bail!(
            "usage: torch_trace MODEL [--device D] [--max-tokens N] [--prompt TEXT] [--out FILE]"
        );
    };
    let start = std::time::Instant::now();
    let exec = TorchExecutor::load(&ModelSpec {
        path: model.clone(),
        device,
        weights: WeightMode::Native,
        kv_cache: KvType::F32,
        dtype,
        primitive: Default::default(),
    })?;
    println!(
        "loaded {} on {device} as {} in {:.2} s",
        model.display(),
        dtype.name(),
        start.elapsed().as_secs_f64()
    );
    let layers = exec.dims().layers;
    let request = TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: Some("p".into()),
        text: Some(prompt),
        token_ids: None,
        observe: vec![K::Text, K::Tokens, K::Logits, K::Activation, K::Profile],
        layers: vec![0, layers / 2, layers - 1],
        raw_tensors: false,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: "p".into(),
        prompt: PromptForm::Chat {
            system: Some("You are a helpful assistant.".into()),
        },
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions {
            max_tokens,
            ..Default::default()
        },
        reference: None,
    };
    // The first trace warms libtorch up (CUDA context, kernels); the second
    // is the one reported.
    exec.trace(&request, &options, None)?;
    let traced = exec.trace(&request, &options, None)?;
    for s in &traced.trace.spans {
        let p = &s.profile;
        println!(
            "{:<13} {:<7} {:>9.3} ms {:>4} tokens  rss {:>5} MiB  copies {:>3}  syncs {:>3}",
            format!("{:?}", s.stage),
            p.device,
            p.duration_ns as f64 / 1e6,
            p.token_count,
            p.memory_bytes.unwrap_or(0) >> 20,
            p.host_device_copies,
            p.sync_points,
        );
        for (k, v) in &p.notes {
            println!("    {k}: {v}");
        }
    }
    for a in traced.trace.artifacts_of(K::Profile) {
        if let ArtifactData::Record { value } = &a.data {
            println!("run profile: {value}");
        }
    }
    if let Some(g) = &traced.generation {
        println!("{} tokens: {:?}", g.ids.len(), g.text);
    }
    if let Some(path) = out {
        std::fs::write(&path, serde_json::to_string_pretty(&traced.trace)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
