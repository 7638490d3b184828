//! The executor contract: checks every backend passes unchanged, written
//! once and run against each (issue 19). A backend is done when it passes
//! this module. Today: candle (the tiny model's Q8_0 and f32 GGUFs), replay
//! (a bundle recorded from candle) and http (llama.cpp's `llama-server` on
//! loopback serving SmolLM2, where both are present) and, in a build with
//! `--features torch`, torch (libtorch on the CPU, and on a GPU when
//! `VAUBAN_TEST_DEVICE=cuda` names one) on the same two GGUFs and, in a
//! build with `--features mlx`, mlx (MLX on the CPU) on them too. Every
//! model backend also runs a tiny model of each other family (Qwen3, Gemma
//! 2 and 3, OLMo 2, Phi-3 and the mixture Qwen3-MoE, `tiny::FAMILIES`).
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
//! - a layer past the model is refused where the backend knows the depth;
//! - an intervention does what it says (a subtraction leaves no component
//!   along its direction, α = 0 changes nothing), or the backend refuses
//!   interventions as unsupported; a direction of the wrong width is
//!   refused;
//! - generation stops within its budget;
//! - a stage counts copies between the host's memory and a device's only
//!   where the model runs off the host's memory: none on a CPU, the
//!   prompt's upload on a GPU.

mod common;

use std::path::Path;

use candle_core::quantized::GgmlDType;
use common::llama_server::{self, LlamaServer};
use common::tiny;
use vauban::bundle::{BundleWriter, WriteMode};
use vauban::executor::http::HttpSpec;
use vauban::executor::{
    Backend, Executor, ExecutorError, GenerateOptions, InferenceSession, LocalBackend, LocalModel,
    ModelSpec, PromptForm, RunOptions, TraceOutput,
};
use vauban::intervene::{Direction, Intervention, Mode, Positions};
use vauban::trace::{ArtifactData, ArtifactKind as K, Stage, SupportLevel, TraceRequest};

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
        // With log-probabilities of the chosen tokens (an endpoint gives
        // the completion's token ids with them).
        generate: GenerateOptions {
            max_tokens: 4,
            top_logprobs: 2,
            ..Default::default()
        },
        reference: None,
    }
}

fn candle(path: &Path) -> Backend {
    LocalBackend::load(&ModelSpec::new(path)).unwrap().into()
}

/// The device the torch subjects run on: `VAUBAN_TEST_DEVICE` (`cuda`,
/// `cuda:1`), else the CPU.
#[cfg(feature = "torch")]
fn test_device() -> vauban::executor::DeviceSpec {
    std::env::var("VAUBAN_TEST_DEVICE")
        .map(|d| d.parse().expect("VAUBAN_TEST_DEVICE names a device"))
        .unwrap_or_default()
}

#[cfg(feature = "torch")]
fn torch(path: &Path) -> Backend {
    LocalBackend::torch(&ModelSpec {
        device: test_device(),
        ..ModelSpec::new(path)
    })
    .unwrap()
    .into()
}

#[cfg(feature = "mlx")]
fn mlx(path: &Path) -> Backend {
    LocalBackend::mlx(&ModelSpec::new(path)).unwrap().into()
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

/// Every backend the contract runs against, by name, and the server the
/// http one talks to (stopped when this is dropped).
struct Subjects {
    list: Vec<(&'static str, Backend)>,
    _server: Option<LlamaServer>,
}

fn subjects(dir: &Path) -> Subjects {
    let q8 = tiny::write_gguf(&dir.join("tiny-q8.gguf"), 7, GgmlDType::Q8_0);
    let f32 = tiny::write_gguf(&dir.join("tiny-f32.gguf"), 7, GgmlDType::F32);
    let replay = replay_of(&candle(&q8), dir);
    let mut list = vec![
        ("candle", candle(&q8)),
        ("candle", candle(&f32)),
        ("replay", replay),
    ];
    #[cfg(feature = "torch")]
    list.extend([("torch", torch(&q8)), ("torch", torch(&f32))]);
    #[cfg(feature = "mlx")]
    list.extend([("mlx", mlx(&q8)), ("mlx", mlx(&f32))]);
    // One tiny model of each other family, Q8_0 (candle runs it with its
    // kernels; torch and MLX dequantize it).
    for family in tiny::FAMILIES {
        let path = tiny::write_family_gguf(
            &dir.join(format!("{family}-q8.gguf")),
            family,
            7,
            GgmlDType::Q8_0,
        );
        list.push(("candle", candle(&path)));
        #[cfg(feature = "torch")]
        list.push(("torch", torch(&path)));
        #[cfg(feature = "mlx")]
        list.push(("mlx", mlx(&path)));
    }
    // An OpenAI-compatible endpoint: llama-server serving SmolLM2.
    let server = match (llama_server::binary(), common::smollm2_path()) {
        (Some(bin), Some(model)) => {
            let server = LlamaServer::start(&bin, &model, llama_server::free_port());
            let mut spec = HttpSpec::new(&server.url(), llama_server::ALIAS);
            spec.tokenizer = Some(model);
            list.push(("http", Backend::http(&spec).unwrap()));
            Some(server)
        }
        _ => None,
    };
    Subjects {
        list,
        _server: server,
    }
}

fn trace(b: &Backend, id: &str, text: &str) -> TraceOutput {
    b.trace(&request(id, text), &options(id), None)
        .unwrap_or_else(|e| panic!("tracing {id}: {e}"))
}

/// The prompt's artifacts of `kind` (a mixture's router probabilities
/// apart: [`routers`]).
fn shape(out: &TraceOutput, kind: K) -> Vec<Vec<usize>> {
    shapes_where(out, kind, |site| site != Some("router"))
}

/// The shapes of a mixture of experts' router probabilities.
fn routers(out: &TraceOutput) -> Vec<Vec<usize>> {
    shapes_where(out, K::Activation, |site| site == Some("router"))
}

fn shapes_where(
    out: &TraceOutput,
    kind: K,
    site: impl Fn(Option<&str>) -> bool,
) -> Vec<Vec<usize>> {
    out.trace
        .artifacts_of(kind)
        .filter(|a| a.labels.get("role").is_none_or(|r| r == "prompt"))
        .filter(|a| site(a.labels.get("site").map(String::as_str)))
        .filter_map(|a| match &a.data {
            ArtifactData::Tensor { summary, .. } => Some(summary.shape.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn capabilities_name_the_backend_and_list_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
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
    for (name, b) in subjects(dir.path()).list {
        let caps = b.capabilities();
        let dims = b.known_dims();
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
            // Shapes agree with each other: one row per prompt token, where
            // the backend knows the prompt's tokens.
            let full = |k: K| caps.artifacts[&k] == SupportLevel::Full;
            if !full(K::Tokens) {
                continue;
            }
            let tokens = t
                .artifacts_of(K::Tokens)
                .find(|a| a.labels.get("role").map(String::as_str) == Some("prompt"))
                .and_then(|a| match &a.data {
                    ArtifactData::TokenIds { ids } => Some(ids.len()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name} {id}: no prompt tokens"));
            for kind in [K::Logits, K::Logprobs].into_iter().filter(|&k| full(k)) {
                let shapes = shape(&out, kind);
                assert_eq!(shapes.len(), 1, "{name} {id}: {kind:?}: {shapes:?}");
                assert_eq!(shapes[0][0], tokens, "{name} {id}: {kind:?} rows");
                if let Some(dims) = dims {
                    assert_eq!(shapes[0][1], dims.vocab, "{name} {id}: {kind:?} width");
                }
            }
            let acts = shape(&out, K::Activation);
            let layers_asked = if full(K::Activation) { 2 } else { 0 };
            assert_eq!(
                acts.len(),
                layers_asked,
                "{name} {id}: one activation per asked layer"
            );
            for s in &acts {
                assert_eq!(s[s.len() - 2], tokens, "{name} {id}: activation rows");
                if let Some(dims) = dims {
                    assert_eq!(s[s.len() - 1], dims.hidden, "{name} {id}: activation width");
                }
            }
            // A mixture of experts' routing at the same layers: one row of
            // probabilities per token, summing to one.
            let routing = routers(&out);
            assert!(
                routing.is_empty() || routing.len() == layers_asked,
                "{name} {id}: router probabilities at {} layers",
                routing.len()
            );
            for s in &routing {
                assert_eq!(s[s.len() - 2], tokens, "{name} {id}: router rows");
            }
            for a in out.trace.artifacts_of(K::Activation) {
                if a.labels.get("site").map(String::as_str) != Some("router") {
                    continue;
                }
                let data = &out.tensors[&a.id];
                let width = *data.shape.last().unwrap();
                for row in data.as_ref().to_f32_vec().chunks(width) {
                    let total: f32 = row.iter().sum();
                    assert!(
                        (total - 1.0).abs() < 1e-4,
                        "{name} {id}: router row sums to {total}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_same_request_gives_the_same_evidence() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
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

/// Sessions are what only a model vauban holds has (`LocalModel`): an
/// endpoint and a recording offer none at all, by their type.
#[test]
fn a_session_runs_on_every_model_vauban_holds() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
        let Some(local) = b.local() else {
            assert!(["http", "replay"].contains(&name), "{name} holds no model");
            continue;
        };
        let vocab = local.dims().vocab;
        let mut s = local.session(&[]);
        let step = s
            .prefill(&[1, 2, 3])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(step.logits.len(), vocab, "{name}");
        assert_eq!(s.position(), 3, "{name}");
        let next = s.decode_step(4).unwrap();
        assert_eq!(next.logits.len(), vocab, "{name}");
        assert_eq!(s.position(), 4, "{name}");
    }
}

#[test]
fn a_layer_past_the_model_is_refused_where_the_depth_is_known() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
        let Some(layers) = b.known_dims().map(|d| d.layers) else {
            // The backend does not know the model's depth (a recording, an
            // endpoint): it serves what was recorded, checked artifact by
            // artifact.
            continue;
        };
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

/// Subtracting `alpha` times the component along `values` after `layer`.
fn subtraction(layer: usize, values: &[f32], alpha: f32) -> Intervention {
    Intervention {
        layer,
        mode: Mode::Subtract,
        direction: Direction::new("contract", "direction", "", None, values, &[values.len()])
            .unwrap(),
        alpha,
        value: None,
        positions: Positions::All,
        condition: None,
    }
}

/// The raw residual stream after `layer`, as rows of the hidden width.
fn residual(out: &TraceOutput, layer: usize) -> Vec<Vec<f32>> {
    let a = out
        .trace
        .artifacts_of(K::Activation)
        .find(|a| {
            a.layer == Some(layer) && a.labels.get("site").map(String::as_str) != Some("router")
        })
        .expect("the activation");
    let data = &out.tensors[&a.id];
    let width = *data.shape.last().unwrap();
    data.as_ref()
        .to_f32_vec()
        .chunks(width)
        .map(<[f32]>::to_vec)
        .collect()
}

#[test]
fn an_intervention_does_what_it_says_or_is_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let direction: Vec<f32> = (0..tiny::HIDDEN)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 10.0)
        .collect();
    let norm = direction.iter().map(|x| x * x).sum::<f32>().sqrt();
    let unit: Vec<f32> = direction.iter().map(|x| x / norm).collect();
    for (name, b) in subjects(dir.path()).list {
        let (id, text) = PROMPTS[0];
        let plain = trace(&b, id, text);
        for alpha in [0.0, 1.0] {
            let mut o = options(id);
            // A unit direction: the primitive uses directions as given.
            o.interventions = vec![subtraction(0, &unit, alpha)];
            let out = match b.trace(&request(id, text), &o, None) {
                Ok(out) => out,
                Err(ExecutorError::Unsupported { backend, .. }) => {
                    assert_eq!(backend, name);
                    continue;
                }
                Err(e) => panic!("{name}: α = {alpha}: {e}"),
            };
            let (before, after) = (residual(&plain, 0), residual(&out, 0));
            match alpha == 0.0 {
                true => assert!(before == after, "{name}: α = 0 changed the activations"),
                false => {
                    assert!(before != after, "{name}: the subtraction changed nothing");
                    for row in &after {
                        let along: f32 = row.iter().zip(&unit).map(|(x, u)| x * u).sum();
                        let size = row.iter().map(|x| x * x).sum::<f32>().sqrt();
                        assert!(
                            along.abs() <= 1e-4 * size.max(1.0),
                            "{name}: {along} left along the direction"
                        );
                    }
                }
            }
        }
        // A direction one wider than the model is refused.
        if let Some(dims) = b.known_dims() {
            let mut o = options(id);
            let wide = vec![0.5f32; dims.hidden + 1];
            o.interventions = vec![subtraction(0, &wide, 1.0)];
            let err = b.trace(&request(id, text), &o, None).err();
            assert!(
                err.is_some(),
                "{name}: a direction of the wrong width was applied"
            );
        }
    }
}

#[test]
fn generation_stops_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
        for (id, text) in PROMPTS {
            let out = trace(&b, id, text);
            let completion = out
                .trace
                .artifacts_of(K::Tokens)
                .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
                .and_then(|a| match &a.data {
                    ArtifactData::TokenIds { ids } => Some(ids.len()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name} {id}: no completion tokens"));
            assert!(
                (1..=options(id).generate.max_tokens).contains(&completion),
                "{name} {id} on {}: {completion} tokens for a budget of 4",
                b.model_ref().name
            );
        }
    }
}

#[test]
fn copies_to_a_device_are_counted_only_off_the_host() {
    let dir = tempfile::tempdir().unwrap();
    for (name, b) in subjects(dir.path()).list {
        let (id, text) = PROMPTS[0];
        let out = trace(&b, id, text);
        for span in &out.trace.spans {
            let p = &span.profile;
            if p.device == "cpu" {
                assert_eq!(
                    p.host_device_copies, 0,
                    "{name}: {:?} on the CPU counts host↔device copies",
                    span.stage
                );
            } else if span.stage == Stage::Prefill && !matches!(name, "http" | "mlx") {
                // (MLX's arrays are read in place on every device; an
                // endpoint's copies are its own.)
                assert!(
                    p.host_device_copies >= 1,
                    "{name}: the prefill on {} counts no upload of the prompt",
                    p.device
                );
            }
        }
    }
}
