//! The executor contract: checks every backend passes unchanged, written
//! once and run against each (issue 19). A backend is done when it passes
//! this module. Today: candle (the tiny model's Q8_0 and f32 GGUFs) and
//! replay (a bundle recorded from candle); the Torch and MLX backends join
//! the `subjects` list when they exist.
//!
//! What the contract asks:
//! - capabilities list every artifact kind and the backend's own name and
//!   device kind;
//! - a trace validates, holds every kind it was asked for that the
//!   capabilities call `full`, with shapes that agree with each other and
//!   with the model's dims where the backend knows them, never holds a
//!   kind the capabilities call `unsupported` (nothing faked), and lists
//!   every asked kind it lacks as unsupported or missing;
//! - the same request twice gives the same evidence;
//! - a session either runs (logits a vocabulary wide, the position moving
//!   with each token) or is refused as unsupported by this backend, never
//!   with another error;
//! - a layer past the model is refused where the backend knows the depth.

mod common;

use std::path::Path;

use candle_core::quantized::GgmlDType;
use common::tiny;
use vauban::bundle::{BundleWriter, WriteMode};
use vauban::executor::{
    Backend, DeviceSpec, Executor, ExecutorError, GenerateOptions, InferenceSession, ModelSpec,
    PromptForm, RunOptions, TraceOutput,
};
use vauban::model::{KvType, WeightMode};
use vauban::trace::{ArtifactData, ArtifactKind as K, SupportLevel, TraceRequest};

const PROMPTS: [(&str, &str); 2] = [
    ("p0", "the cat in the hat sat on a mat"),
    ("p1", "then ran in"),
];

/// The kinds the contract's requests ask for: every per-position kind,
/// and two no embedded model produces (a scorer's and the report's).
const ASKED: [K; 8] = [
    K::Text,
    K::Tokens,
    K::Logits,
    K::Logprobs,
    K::Activation,
    K::Profile,
    K::Metric,
    K::ReportEvidence,
];

fn request(id: &str, text: &str) -> TraceRequest {
    TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: Some(id.into()),
        text: Some(text.into()),
        token_ids: None,
        observe: ASKED.to_vec(),
        layers: vec![0, tiny::LAYERS - 1],
        raw_tensors: true,
        raw_kinds: Vec::new(),
    }
}

fn options(id: &str) -> RunOptions {
    RunOptions {
        trace_id: id.into(),
        prompt: PromptForm::Raw,
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions {
            max_tokens: 4,
            ..Default::default()
        },
        reference: None,
    }
}

fn candle(path: &Path) -> Backend {
    Backend::load(&ModelSpec {
        path: path.to_path_buf(),
        device: DeviceSpec::Cpu,
        weights: WeightMode::Native,
        kv_cache: KvType::F32,
    })
    .unwrap()
}

/// A bundle of the contract's prompts traced by `source`, served by replay.
fn replay_of(source: &Backend, dir: &Path) -> Backend {
    let bundle = dir.join("recorded");
    let mut writer = BundleWriter::create(&bundle, WriteMode::CreateNew).unwrap();
    for (id, text) in PROMPTS {
        let out = source
            .trace(&request(id, text), &options(id), None)
            .unwrap();
        writer.add_trace(&out.trace, &out.tensors).unwrap();
    }
    writer.finish().unwrap();
    Backend::replay(&bundle).unwrap()
}

/// Every backend the contract runs against, by name.
fn subjects(dir: &Path) -> Vec<(&'static str, Backend)> {
    let q8 = tiny::write_gguf(&dir.join("tiny-q8.gguf"), 7, GgmlDType::Q8_0);
    let f32 = tiny::write_gguf(&dir.join("tiny-f32.gguf"), 7, GgmlDType::F32);
    let replay = replay_of(&candle(&q8), dir);
    vec![
        ("candle", candle(&q8)),
        ("candle", candle(&f32)),
        ("replay", replay),
    ]
}

fn trace(b: &Backend, id: &str, text: &str) -> TraceOutput {
    b.trace(&request(id, text), &options(id), None)
        .unwrap_or_else(|e| panic!("tracing {id}: {e}"))
}

fn shape(out: &TraceOutput, kind: K) -> Vec<Vec<usize>> {
    out.trace
        .artifacts_of(kind)
        .filter(|a| a.labels.get("role").is_none_or(|r| r == "prompt"))
        .filter_map(|a| match &a.data {
            ArtifactData::Tensor { summary, .. } => Some(summary.shape.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn capabilities_name_the_backend_and_list_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()) {
        let caps = b.capabilities();
        assert_eq!(caps.executor, name);
        for k in K::ALL {
            assert!(caps.artifacts.contains_key(&k), "{name}: {k:?} not listed");
        }
        assert!(
            caps.device_kinds.contains(&b.device_kind()),
            "{name}: runs on {:?}, declares {:?}",
            b.device_kind(),
            caps.device_kinds
        );
    }
}

#[test]
fn a_trace_holds_what_its_capabilities_promise_and_nothing_they_do_not() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()) {
        let caps = b.capabilities();
        let dims = b.dims();
        for (id, text) in PROMPTS {
            let out = trace(&b, id, text);
            let t = &out.trace;
            t.validate()
                .unwrap_or_else(|e| panic!("{name} {id}: invalid trace: {e}"));
            assert_eq!(t.request.prompt_id.as_deref(), Some(id), "{name}");
            assert!(!t.spans.is_empty(), "{name} {id}: no spans");
            for k in ASKED {
                match caps.artifacts[&k] {
                    SupportLevel::Full => assert!(t.has(k), "{name} {id}: {k:?} promised, absent"),
                    SupportLevel::Unsupported => {
                        assert!(!t.has(k), "{name} {id}: {k:?} unsupported, yet present")
                    }
                    _ => {}
                }
                // Asked and absent: the trace says so (unsupported, or
                // missing with a reason), never silence.
                if !t.has(k) {
                    assert!(
                        t.unsupported.contains(&k) || t.missing.iter().any(|m| m.kind == k),
                        "{name} {id}: {k:?} asked, absent, and not accounted for"
                    );
                }
            }
            // Shapes agree with each other: one row per prompt token.
            let tokens = t
                .artifacts_of(K::Tokens)
                .find(|a| a.labels.get("role").map(String::as_str) == Some("prompt"))
                .and_then(|a| match &a.data {
                    ArtifactData::TokenIds { ids } => Some(ids.len()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name} {id}: no prompt tokens"));
            for kind in [K::Logits, K::Logprobs] {
                let shapes = shape(&out, kind);
                assert_eq!(shapes.len(), 1, "{name} {id}: {kind:?}: {shapes:?}");
                assert_eq!(shapes[0][0], tokens, "{name} {id}: {kind:?} rows");
                if dims.vocab > 0 {
                    assert_eq!(shapes[0][1], dims.vocab, "{name} {id}: {kind:?} width");
                }
            }
            let acts = shape(&out, K::Activation);
            assert_eq!(acts.len(), 2, "{name} {id}: one activation per asked layer");
            for s in &acts {
                assert_eq!(s[s.len() - 2], tokens, "{name} {id}: activation rows");
                if dims.hidden > 0 {
                    assert_eq!(s[s.len() - 1], dims.hidden, "{name} {id}: activation width");
                }
            }
            // Raw data for every raw tensor artifact.
            for a in &t.artifacts {
                if let ArtifactData::Tensor { raw: true, summary } = &a.data {
                    let data = out
                        .tensors
                        .get(&a.id)
                        .unwrap_or_else(|| panic!("{name} {id}: {} raw, no data", a.id));
                    assert_eq!(data.shape, summary.shape, "{name} {id}: {}", a.id);
                }
            }
        }
    }
}

#[test]
fn the_same_request_gives_the_same_evidence() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()) {
        let (id, text) = PROMPTS[0];
        let (x, y) = (trace(&b, id, text), trace(&b, id, text));
        let summaries = |o: &TraceOutput| -> Vec<serde_json::Value> {
            o.trace
                .artifacts
                .iter()
                .filter(|a| a.kind != K::Profile)
                .map(|a| serde_json::to_value(&a.data).unwrap())
                .collect()
        };
        assert_eq!(summaries(&x), summaries(&y), "{name}");
        for (k, v) in &x.tensors {
            assert_eq!(Some(v), y.tensors.get(k), "{name}: raw {k}");
        }
    }
}

#[test]
fn a_session_runs_or_is_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()) {
        let mut s = b.session(&[]);
        match s.prefill(&[1, 2, 3]) {
            Ok(step) => {
                assert_eq!(step.logits.len(), b.dims().vocab, "{name}");
                assert_eq!(s.position(), 3, "{name}");
                let next = s.decode_step(4).unwrap();
                assert_eq!(next.logits.len(), b.dims().vocab, "{name}");
                assert_eq!(s.position(), 4, "{name}");
            }
            Err(ExecutorError::Unsupported { backend, .. }) => assert_eq!(backend, name),
            Err(e) => panic!("{name}: a session failed with {e}, not as unsupported"),
        }
    }
}

#[test]
fn a_layer_past_the_model_is_refused_where_the_depth_is_known() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()) {
        let layers = b.dims().layers;
        if layers == 0 {
            // The backend does not know the model's depth (a recording):
            // it serves what was recorded, checked artifact by artifact.
            continue;
        }
        assert!(b.check_layers(&[layers - 1]).is_ok(), "{name}");
        let err = b.check_layers(&[layers]).unwrap_err().to_string();
        assert!(err.contains(&layers.to_string()), "{name}: {err}");
        let (id, text) = PROMPTS[0];
        let mut r = request(id, text);
        r.layers = vec![layers];
        let err = b.trace(&r, &options(id), None).err();
        assert!(err.is_some(), "{name}: traced layer {layers} of {layers}");
    }
}
