//! Traces for the integration tests, built through the public API.
#![allow(dead_code)]

use std::collections::HashMap;

use vauban::trace::{
    ArtifactData, ArtifactKind as K, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
    SupportLevel, TensorData, Trace, TraceBuilder, TraceRequest,
};

/// The model every fixture trace names.
pub fn fixture_model() -> ModelRef {
    ModelRef {
        name: "fixture-model".into(),
        path: None,
        sha256: Some("0f".repeat(32)),
        tokenizer_sha256: None,
    }
}

pub fn capabilities() -> Capabilities {
    Capabilities::uniform("fixture", &[DeviceKind::Cpu], SupportLevel::Full)
        .with(K::WeightSnapshot, SupportLevel::Unsupported)
}

/// A trace whose activation at layer 1 (shape `[1, tokens, width]`) is kept raw.
pub fn trace_with_activation(
    id: &str,
    tokens: usize,
    width: usize,
) -> (Trace, HashMap<String, TensorData>) {
    let request = TraceRequest {
        prompt_id: Some(format!("prompt-{id}")),
        category: None,
        expected_behavior: None,
        text: Some("The capital of France is".into()),
        token_ids: None,
        observe: vec![K::Text, K::Tokens, K::Logits, K::Activation],
        layers: vec![1],
        raw_tensors: true,
    };
    let model = fixture_model();
    let mut b = TraceBuilder::new(id, model, capabilities(), "cpu", request);
    let profile = |ms: u64, tokens: u64| StageProfile {
        duration_ns: ms * 1_000_000,
        device: "cpu".into(),
        batch_size: 1,
        token_count: tokens,
        ..Default::default()
    };
    let tok = b.span(Stage::Tokenize, profile(1, tokens as u64));
    b.artifact(
        &tok,
        K::Text,
        ArtifactData::Text {
            text: "The capital of France is".into(),
        },
    );
    let ids = (0..tokens as u32).collect();
    b.artifact(&tok, K::Tokens, ArtifactData::TokenIds { ids });
    let fwd = b.span(Stage::Forward, profile(5, tokens as u64));
    let logits = TensorData::from_f32(vec![1, 4], &[0.5, -1.0, 2.0, 0.0]).unwrap();
    b.artifact(
        &fwd,
        K::Logits,
        ArtifactData::tensor(logits.as_ref(), false),
    );
    let values: Vec<f32> = (0..tokens * width)
        .map(|i| (i % 97) as f32 * 0.25 - 3.0)
        .collect();
    let act = TensorData::from_f32(vec![1, tokens, width], &values).unwrap();
    let act_id = b.artifact_with(
        &fwd,
        K::Activation,
        ArtifactData::tensor(act.as_ref(), true),
        Some(1),
        Default::default(),
    );
    let trace = b.finish().expect("fixture trace is valid");
    (trace, HashMap::from([(act_id, act)]))
}

/// A trace with text and tokens only (no tensors).
pub fn trace_text_only(id: &str, tokens: usize) -> Trace {
    let request = TraceRequest {
        prompt_id: Some(format!("prompt-{id}")),
        category: None,
        expected_behavior: None,
        text: Some("Hello".into()),
        token_ids: None,
        observe: vec![K::Text, K::Tokens],
        layers: vec![],
        raw_tensors: false,
    };
    let model = fixture_model();
    let mut b = TraceBuilder::new(id, model, capabilities(), "cpu", request);
    let fwd = b.span(
        Stage::Forward,
        StageProfile {
            duration_ns: 2_000_000,
            device: "cpu".into(),
            batch_size: 1,
            token_count: tokens as u64,
            ..Default::default()
        },
    );
    b.artifact(
        &fwd,
        K::Text,
        ArtifactData::Text {
            text: "Hello".into(),
        },
    );
    let ids = (0..tokens as u32).collect();
    b.artifact(&fwd, K::Tokens, ArtifactData::TokenIds { ids });
    b.finish().expect("fixture trace is valid")
}
/// A trace of a prompt and its completion (text only), with the suite's
/// expected behaviour.
pub fn trace_completion(id: &str, completion: &str, expected: Option<&str>) -> Trace {
    let request = TraceRequest {
        prompt_id: Some(format!("prompt-{id}")),
        category: Some("test".into()),
        expected_behavior: expected.map(str::to_owned),
        text: Some("A question".into()),
        token_ids: None,
        observe: vec![K::Text, K::Metric],
        layers: vec![],
        raw_tensors: false,
    };
    let model = fixture_model();
    let mut b = TraceBuilder::new(id, model, capabilities(), "cpu", request);
    let span = b.span(Stage::Decode, StageProfile::default());
    let role = |r: &str| [("role".to_owned(), r.to_owned())].into_iter().collect();
    b.artifact_with(
        &span,
        K::Text,
        ArtifactData::Text {
            text: "A question".into(),
        },
        None,
        role("prompt"),
    );
    b.artifact_with(
        &span,
        K::Text,
        ArtifactData::Text {
            text: completion.into(),
        },
        None,
        role("completion"),
    );
    // A metric recorded with the trace (an external judge's score, say).
    b.artifact(
        &span,
        K::Metric,
        ArtifactData::Scalar {
            name: "judge_score".into(),
            value: 0.25,
            unit: None,
        },
    );
    b.finish().expect("fixture trace is valid")
}

pub mod plugins;
pub mod report_fixture;
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
