//! Traces for the integration tests, built with `vauban::trace::fixture`.
#![allow(dead_code)]

use std::collections::HashMap;

use vauban::trace::fixture::TraceFixture;
use vauban::trace::{
    ArtifactData, ArtifactKind as K, Role, Stage, StageProfile, TensorData, Trace,
};

/// A span's profile: `ms` milliseconds over `tokens` tokens on the CPU.
fn profile(ms: u64, tokens: usize) -> StageProfile {
    StageProfile {
        duration_ns: ms * 1_000_000,
        device: "cpu".into(),
        batch_size: 1,
        token_count: tokens as u64,
        ..Default::default()
    }
}

/// A trace whose activation at layer 1 (shape `[1, tokens, width]`) is kept raw.
pub fn trace_with_activation(
    id: &str,
    tokens: usize,
    width: usize,
) -> (Trace, HashMap<String, TensorData>) {
    let text = ArtifactData::Text {
        text: vauban::trace::fixture::PROMPT.into(),
    };
    let ids = ArtifactData::TokenIds {
        ids: (0..tokens as u32).collect(),
    };
    let values: Vec<f32> = (0..tokens * width)
        .map(|i| (i % 97) as f32 * 0.25 - 3.0)
        .collect();
    TraceFixture::new(id)
        .prompt_id(&format!("prompt-{id}"))
        .span(Stage::Tokenize, profile(1, tokens))
        .artifact(K::Text, text, None, &[])
        .artifact(K::Tokens, ids, None, &[])
        .span(Stage::Forward, profile(5, tokens))
        .tensor(
            K::Logits,
            None,
            vec![1, 4],
            &[0.5, -1.0, 2.0, 0.0],
            false,
            &[],
        )
        .activation(1, vec![1, tokens, width], &values, true)
        .build()
}

/// A trace with text and tokens only (no tensors).
pub fn trace_text_only(id: &str, tokens: usize) -> Trace {
    let text = ArtifactData::Text {
        text: "Hello".into(),
    };
    let ids = ArtifactData::TokenIds {
        ids: (0..tokens as u32).collect(),
    };
    TraceFixture::new(id)
        .prompt("Hello")
        .prompt_id(&format!("prompt-{id}"))
        .span(Stage::Forward, profile(2, tokens))
        .artifact(K::Text, text, None, &[])
        .artifact(K::Tokens, ids, None, &[])
        .trace()
}

/// A text-only trace of one pass of `tokens` tokens per sequence over a
/// batch of `batch` sequences that took `duration_ns`: a point of a
/// concurrency sweep.
pub fn trace_batched(id: &str, tokens: usize, batch: u32, duration_ns: u64) -> Trace {
    let mut t = trace_text_only(id, tokens);
    t.spans[0].profile.batch_size = batch;
    t.spans[0].profile.duration_ns = duration_ns;
    t
}

/// A trace of a prompt and its completion (text only), with the suite's
/// expected behaviour, and a metric recorded with it (an external judge's
/// score, say).
pub fn trace_completion(id: &str, completion: &str, expected: Option<&str>) -> Trace {
    let mut f = TraceFixture::new(id)
        .prompt("A question")
        .prompt_id(&format!("prompt-{id}"))
        .category("test");
    if let Some(e) = expected {
        f = f.expected(e);
    }
    f.span(Stage::Decode, StageProfile::default())
        .text(Role::Prompt, "A question")
        .text(Role::Completion, completion)
        .metric("judge_score", 0.25)
        .trace()
}

pub mod llama_server;
#[allow(unused_imports)] // not every test binary posts
pub use llama_server::post_json;
pub mod plugins;
pub mod reference;
pub mod report_fixture;
#[allow(dead_code)] // not every test binary serves
pub mod serve;
pub mod tiny;

/// The largest absolute value of a tensor.
pub fn max_abs(t: &candle_core::Tensor) -> f32 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// max |r̂ᵀW| over the columns of `w` (`[hidden, in]`), r̂ = `direction` normalised:
/// how much `w` can still write along the direction.
pub fn max_along(direction: &candle_core::Tensor, w: &candle_core::Tensor) -> f32 {
    let norm = direction
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .sqrt()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let r = (direction / norm as f64).unwrap().unsqueeze(0).unwrap();
    max_abs(&r.matmul(w).unwrap())
}

/// SmolLM2-135M-Instruct (Q4_1 GGUF), where `scripts/fetch-model.sh` keeps
/// it (`$VAUBAN_MODELS`, else `~/.cache/vauban/models`); `None`, after a
/// message, when it is absent (`.ci/run` always fetches it).
#[allow(dead_code)] // not every test binary uses the real model
pub fn smollm2_path() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let dir = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!(
            "skipping: {} is absent; run `bash scripts/fetch-model.sh`",
            path.display()
        );
        return None;
    }
    Some(path)
}

/// A request for the raw prompt `text` (its text, token ids, top-`top`
/// log-probabilities and a profile) generating `max_tokens` greedily, as
/// trace `id`: what a black box can answer.
pub fn raw_request(
    id: &str,
    text: &str,
    max_tokens: usize,
    top: usize,
) -> (vauban::trace::TraceRequest, vauban::executor::RunOptions) {
    use vauban::executor::{GenerateOptions, PromptForm, RunOptions};
    let request = vauban::trace::TraceRequest {
        prompt_id: Some(id.into()),
        category: None,
        expected_behavior: None,
        text: Some(text.into()),
        token_ids: None,
        observe: vec![K::Text, K::Tokens, K::Logprobs, K::Profile],
        layers: vec![],
        raw_tensors: false,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: id.into(),
        prompt: PromptForm::Raw,
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions {
            max_tokens,
            sampling: None,
            stop: vec![],
            top_logprobs: top,
        },
        reference: None,
    };
    (request, options)
}

/// Finished traces in a run's trace cache (`OUT/traces/cache`, each a
/// bundle with its manifest written last).
pub fn cached_traces(out: &std::path::Path) -> usize {
    std::fs::read_dir(out.join("traces/cache"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().join("manifest.json").exists())
                .count()
        })
        .unwrap_or(0)
}

/// What an interrupted run says it kept of `side`: the count before
/// ` of {total} {side} traces`, or `total` for `all {total} {side} traces`.
pub fn kept_count(text: &str, side: &str, total: usize) -> Option<usize> {
    if text.contains(&format!("all {total} {side} traces")) {
        return Some(total);
    }
    let end = text.find(&format!(" of {total} {side} traces"))?;
    text[..end]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A finished command's exit status, stdout and stderr, for assertion
/// messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs this build's `vauban` with `args`.
pub fn run_vauban(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .output()
        .expect("the vauban binary runs")
}

/// A path as a command line takes it.
pub fn arg(p: &std::path::Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}
