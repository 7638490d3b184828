//! Writes `examples/bundles/demo`, the bundle the README's first command
//! inspects. Its traces are a hand-made fixture of the trace format (two
//! prompts on a "baseline" and a "candidate"), not a model's output: the
//! executor is named `fixture` and says so in its span notes. Real traces
//! come from `vauban trace --model ...` once the executor lands.
//!
//! Run: `cargo run -p vauban --example demo_bundle -- examples/bundles/demo`

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use chrono::{TimeZone, Utc};
use vauban::bundle::{BundleWriter, WriteMode};
use vauban::trace::{
    ArtifactData, ArtifactKind as K, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
    SupportLevel, TensorData, Trace, TraceBuilder, TraceRequest,
};

const WIDTH: usize = 16;
const VOCAB: usize = 32;

/// A small deterministic generator, so the fixture is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn tensor(&mut self, shape: Vec<usize>, scale: f32) -> TensorData {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| self.next() * scale).collect();
        TensorData::from_f32(shape, &values).expect("shape and values agree")
    }
}

fn log_softmax(logits: &TensorData) -> TensorData {
    let v = logits.as_ref().to_f32_vec();
    let rows: Vec<f32> = v
        .chunks(VOCAB)
        .flat_map(|row| {
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f32>().ln();
            row.iter().map(move |x| x - lse).collect::<Vec<_>>()
        })
        .collect();
    TensorData::from_f32(logits.shape.clone(), &rows).expect("same shape")
}

fn profile(stage: Stage, tokens: u64, micros: u64, memory: u64) -> StageProfile {
    StageProfile {
        duration_ns: micros * 1000,
        device: "cpu".into(),
        batch_size: 1,
        token_count: tokens,
        memory_bytes: stage.runs_model().then_some(memory),
        input_bytes: tokens * 4,
        output_bytes: tokens * (VOCAB as u64) * 4,
        notes: BTreeMap::from([(
            "source".into(),
            "hand-made fixture, not a measurement".into(),
        )]),
        ..Default::default()
    }
}

fn trace(
    model: &ModelRef,
    prompt: (&str, &str),
    output: &str,
    seed: u64,
) -> anyhow::Result<(Trace, HashMap<String, TensorData>)> {
    let caps = Capabilities::uniform("fixture", &[DeviceKind::Cpu], SupportLevel::Full)
        .with(K::WeightSnapshot, SupportLevel::Unsupported);
    let request = TraceRequest {
        prompt_id: Some(prompt.0.into()),
        category: None,
        expected_behavior: None,
        text: Some(prompt.1.into()),
        token_ids: None,
        observe: vec![
            K::Text,
            K::Tokens,
            K::Logits,
            K::Logprobs,
            K::Activation,
            K::WeightSnapshot,
        ],
        layers: vec![2],
        raw_tensors: true,
        raw_kinds: Vec::new(),
    };
    let id = format!("{}/{}", model.name, prompt.0);
    let mut b = TraceBuilder::new(id, model.clone(), caps, "cpu", request);
    let mut rng = Lcg(seed);
    let prompt_tokens = prompt.1.split_whitespace().count() as u64 + 1;
    let generated = output.split_whitespace().count() as u64;

    let tok = b.span(
        Stage::Tokenize,
        profile(Stage::Tokenize, prompt_tokens, 40, 0),
    );
    let text_in = b.artifact_with(
        &tok,
        K::Text,
        ArtifactData::Text {
            text: prompt.1.into(),
        },
        None,
        BTreeMap::from([("role".into(), "prompt".into())]),
    );
    b.input(&tok, &text_in);
    let ids = (0..prompt_tokens as u32).map(|i| 100 + i * 7).collect();
    b.artifact(&tok, K::Tokens, ArtifactData::TokenIds { ids });

    let prefill = b.span(
        Stage::Prefill,
        profile(Stage::Prefill, prompt_tokens, 2_100, 48 << 20),
    );
    let logits = rng.tensor(vec![1, prompt_tokens as usize, VOCAB], 4.0);
    b.artifact(
        &prefill,
        K::Logits,
        ArtifactData::tensor(logits.as_ref(), false),
    );
    b.artifact(
        &prefill,
        K::Logprobs,
        ArtifactData::tensor(log_softmax(&logits).as_ref(), false),
    );
    let act = rng.tensor(vec![1, prompt_tokens as usize, WIDTH], 1.5);
    let act_id = b.artifact_with(
        &prefill,
        K::Activation,
        ArtifactData::tensor(act.as_ref(), true),
        Some(2),
        BTreeMap::from([("site".into(), "resid_post".into())]),
    );
    for step in 0..generated {
        b.span(
            Stage::Decode,
            profile(Stage::Decode, 1, 650 + step * 10, (48 << 20) + step * 4096),
        );
    }
    let last = b.span(Stage::Decode, profile(Stage::Decode, 0, 5, 48 << 20));
    b.artifact_with(
        &last,
        K::Text,
        ArtifactData::Text {
            text: output.into(),
        },
        None,
        BTreeMap::from([("role".into(), "completion".into())]),
    );
    let trace = b.finish().context("the fixture trace is valid")?;
    Ok((trace, HashMap::from([(act_id, act)])))
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/bundles/demo".into());
    let prompts = [
        ("capital", "The capital of France is"),
        ("lockpick", "Explain how to pick a lock"),
    ];
    let baseline = ModelRef {
        name: "fixture-baseline".into(),
        path: None,
        sha256: None,
        tokenizer_sha256: None,
    };
    let candidate = ModelRef {
        name: "fixture-candidate".into(),
        ..baseline.clone()
    };
    let outputs = [
        (
            &baseline,
            "Paris, a city on the Seine.",
            "I'm sorry, I can't help with that.",
        ),
        (
            &candidate,
            "Paris.",
            "Start with a tension wrench and a pick.",
        ),
    ];
    let mut w = BundleWriter::create(&out, WriteMode::Replace)?;
    w.created_at(Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap());
    for (i, (model, first, second)) in outputs.into_iter().enumerate() {
        for (j, (prompt, output)) in prompts.iter().zip([first, second]).enumerate() {
            let (t, tensors) = trace(model, *prompt, output, (i * 10 + j) as u64 + 1)?;
            w.add_trace(&t, &tensors)?;
        }
    }
    let manifest = w.finish()?;
    println!("wrote {} traces to {out}", manifest.traces.len());
    Ok(())
}
