//! Cross-backend equivalence (issues 19 and 20): the same model and
//! request on candle and on each other backend that runs a model file
//! (torch, mlx: those this build has) give the same evidence: the same
//! token ids, the same artifacts (kinds, layers, labels, shapes), logits
//! and activations within a stated tolerance, the same greedy tokens up to
//! the first step whose top two logits are too close to order reliably,
//! the same policy decisions, measurement states, orthogonalized and
//! exported weights, and a report of one against the other that finds no
//! change. The tiny model runs as f32 and Q8_0 GGUFs and an HF folder, and
//! with biases on Q, K and V as a GGUF and an HF folder; a tiny model of
//! each other family (`tiny::FAMILIES`: Qwen3, Gemma 2 and 3, OLMo 2, Phi-3
//! and the mixture Qwen3-MoE) as f32 and Q8_0 GGUFs. Never bit
//! identity: the two sum in different orders. Needs `--features torch`
//! (libtorch) or `--features mlx` (MLX), or both.
#![cfg(any(feature = "torch", feature = "mlx"))]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use candle_core::quantized::GgmlDType;
use common::{plugins, tiny};
use vauban::executor::{
    DeviceSpec, Executor, GenerateOptions, InferenceSession, LocalBackend, LocalModel, ModelSpec,
    PromptForm, RunOptions, TraceOutput,
};
use vauban::intervene::policy::{Observation, PolicyOp, StepPolicy, Watch};
use vauban::intervene::{Direction, Intervention, Mode, Positions};
use vauban::model::WeightMode;
use vauban::trace::{ArtifactData, ArtifactKind as K, TraceRequest};

/// candle's side: the CPU.
fn spec(path: &Path) -> ModelSpec {
    spec_on(path, DeviceSpec::Cpu)
}

/// The other backends this build has, each on `path`: torch on
/// `VAUBAN_TEST_DEVICE` (`cuda`, `cuda:1`), else the CPU, so the same
/// checks compare a GPU with candle's CPU where one is at hand; mlx on
/// the CPU (Metal where `VAUBAN_TEST_MLX_DEVICE=metal` names it).
fn others(path: &Path) -> Vec<(&'static str, LocalBackend)> {
    let device = |var: &str| {
        std::env::var(var)
            .map(|d| d.parse().expect("the variable names a device"))
            .unwrap_or(DeviceSpec::Cpu)
    };
    vec![
        #[cfg(feature = "torch")]
        (
            "torch",
            LocalBackend::torch(&spec_on(path, device("VAUBAN_TEST_DEVICE"))).unwrap(),
        ),
        #[cfg(feature = "mlx")]
        (
            "mlx",
            LocalBackend::mlx(&spec_on(path, device("VAUBAN_TEST_MLX_DEVICE"))).unwrap(),
        ),
    ]
}

fn spec_on(path: &Path, device: DeviceSpec) -> ModelSpec {
    ModelSpec {
        device,
        // Dequantized on both sides, so both multiply the same f32 weights.
        weights: WeightMode::F32,
        ..ModelSpec::new(path)
    }
}

fn request(id: &str, text: &str, layers: Vec<usize>) -> TraceRequest {
    TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: Some(id.into()),
        text: Some(text.into()),
        token_ids: None,
        observe: vec![
            K::Text,
            K::Tokens,
            K::Logits,
            K::Logprobs,
            K::Activation,
            K::Profile,
        ],
        layers,
        raw_tensors: true,
        raw_kinds: Vec::new(),
    }
}

fn options(id: &str, prompt: PromptForm, max_tokens: usize) -> RunOptions {
    RunOptions {
        trace_id: id.into(),
        prompt,
        interventions: vec![],
        block_outputs: true,
        generate: GenerateOptions {
            max_tokens,
            top_logprobs: 4,
            ..Default::default()
        },
        reference: None,
    }
}

/// What a trace holds, backend aside: each artifact's kind, layer, labels
/// and, for tensors, shape.
fn coverage(out: &TraceOutput) -> BTreeSet<String> {
    out.trace
        .artifacts
        .iter()
        .map(|a| {
            let shape = match &a.data {
                ArtifactData::Tensor { summary, .. } => format!("{:?}", summary.shape),
                other => other.type_name().to_owned(),
            };
            format!("{:?} {:?} {:?} {shape}", a.kind, a.layer, a.labels)
        })
        .collect()
}

/// The raw values of the artifact of `kind` at `layer` with `labels`.
fn values(out: &TraceOutput, kind: K, layer: Option<usize>, site: Option<&str>) -> Vec<f32> {
    let a = out
        .trace
        .artifacts_of(kind)
        .find(|a| {
            a.layer == layer
                && a.labels.get("site").map(String::as_str) == site
                && a.role_label().is_none_or(|r| r == "prompt")
        })
        .unwrap_or_else(|| panic!("{kind:?} at {layer:?} {site:?}"));
    out.tensors[&a.id].as_ref().to_f32_vec()
}

fn prompt_ids(out: &TraceOutput) -> Vec<u32> {
    out.trace
        .artifacts_of(K::Tokens)
        .find_map(|a| match (&a.data, a.role_label()) {
            (ArtifactData::TokenIds { ids }, Some("prompt")) => Some(ids.clone()),
            _ => None,
        })
        .expect("the prompt's token ids")
}

/// Largest |a − b| relative to the largest |b| (1 where b is all zero).
fn relative(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Checks one prompt on candle and on `other` (named `name`); returns the
/// largest logit difference seen.
fn compare(
    candle: &LocalBackend,
    (name, other): (&str, &LocalBackend),
    id: &str,
    text: &str,
    form: PromptForm,
) -> f32 {
    let layers: Vec<usize> = (0..candle.dims().layers).collect();
    let run = |b: &LocalBackend| {
        b.trace(
            &request(id, text, layers.clone()),
            &options(id, form.clone(), 12),
            None,
        )
        .unwrap_or_else(|e| panic!("{id}: {e}"))
    };
    let (c, t) = (run(candle), run(other));
    assert_eq!(c.trace.capabilities.executor, "candle");
    assert_eq!(t.trace.capabilities.executor, name);
    assert_eq!(prompt_ids(&c), prompt_ids(&t), "{id}: token ids");
    // The same artifacts, by kind, layer, labels and shape; only the
    // generation may differ in length (below).
    let (cc, tc) = (coverage(&c), coverage(&t));
    let only = |x: &BTreeSet<String>, y: &BTreeSet<String>| -> Vec<String> {
        x.difference(y)
            .filter(|s| !s.contains("role\": \"completion") && !s.contains("continuation"))
            .cloned()
            .collect()
    };
    assert!(
        only(&cc, &tc).is_empty(),
        "{id}: only candle has {:#?}",
        only(&cc, &tc)
    );
    assert!(
        only(&tc, &cc).is_empty(),
        "{id}: only {name} has {:#?}",
        only(&tc, &cc)
    );

    let (cl, tl) = (
        values(&c, K::Logits, None, None),
        values(&t, K::Logits, None, None),
    );
    let dlogit = cl
        .iter()
        .zip(&tl)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(dlogit < 2e-3, "{id} on {name}: max |Δlogit| {dlogit}");
    let (cp, tp) = (
        values(&c, K::Logprobs, None, None),
        values(&t, K::Logprobs, None, None),
    );
    assert!(relative(&tp, &cp) < 2e-3, "{id}: log-probabilities");
    for layer in layers.iter().copied() {
        for site in ["resid_post", "attn_out", "mlp_out"] {
            let d = relative(
                &values(&t, K::Activation, Some(layer), Some(site)),
                &values(&c, K::Activation, Some(layer), Some(site)),
            );
            assert!(d < 1e-4, "{id}: {site} after block {layer}: relative {d}");
        }
    }

    // Greedy tokens agree up to the first step candle could barely order:
    // its top two log-probabilities within 1e-3.
    let prompt_len = prompt_ids(&c).len();
    let (cg, tg) = (c.generation.unwrap(), t.generation.unwrap());
    let mut agreed = 0;
    for (step, (a, b)) in cg.ids.iter().zip(&tg.ids).enumerate() {
        let top = &cg.top[step].logprobs;
        if top.len() >= 2 && top[0] - top[1] < 1e-3 {
            break;
        }
        assert_eq!(
            a,
            b,
            "{id}: greedy token {step}: {cg:?} vs {tg:?}",
            cg = cg.ids,
            tg = tg.ids
        );
        agreed += 1;
    }
    eprintln!(
        "{id} on {name}: {} prompt tokens, max |Δlogit| {dlogit:.2e}, {agreed} greedy tokens compared of {}",
        prompt_len,
        cg.ids.len()
    );
    dlogit
}

#[test]
fn the_tiny_model_gives_the_same_evidence_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::F32);
    let q8 = tiny::write_gguf(&dir.path().join("tiny-q8.gguf"), 7, GgmlDType::Q8_0);
    let hf = tiny::write_hf(&dir.path().join("hf"), 7);
    // Biases on Q, K and V (Qwen2's; some llama variants'), in both forms.
    let biased = tiny::write_gguf_biased(&dir.path().join("biased.gguf"), 7, GgmlDType::F32);
    let biased_hf = tiny::write_hf_biased(&dir.path().join("biased-hf"), 7);
    let mut paths = vec![gguf, q8, hf, biased, biased_hf];
    // A tiny model of each other family (Qwen3, Gemma 2 and 3, OLMo 2,
    // Phi-3, the mixture Qwen3-MoE), f32 and Q8_0.
    for family in tiny::FAMILIES {
        for (dtype, suffix) in [(GgmlDType::F32, "f32"), (GgmlDType::Q8_0, "q8")] {
            let path = dir.path().join(format!("{family}-{suffix}.gguf"));
            paths.push(tiny::write_family_gguf(&path, family, 7, dtype));
        }
    }
    for path in &paths {
        let candle = LocalBackend::load(&spec(path)).unwrap();
        for (name, other) in others(path) {
            for (id, text, form) in [
                ("raw", "the cat in the hat sat on a mat", PromptForm::Raw),
                (
                    "chat",
                    "then ran in",
                    PromptForm::Chat {
                        system: Some("the hat".into()),
                    },
                ),
            ] {
                compare(&candle, (name, &other), id, text, form);
            }
        }
    }
}

#[test]
fn smollm2_gives_the_same_evidence_on_every_backend() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let candle = LocalBackend::load(&spec(&model)).unwrap();
    for (name, other) in others(&model) {
        for (id, text) in [
            ("capital", "What is the capital of France?"),
            ("story", "Write one sentence about a lighthouse keeper."),
        ] {
            let chat = PromptForm::Chat {
                system: Some("You are a helpful assistant.".into()),
            };
            compare(&candle, (name, &other), id, text, chat);
        }
    }
}

/// The user's own equivalence check: one config, the baseline on candle,
/// the candidate on another backend, the same weights: the report finds
/// no change in the next-token distributions and keeps the same structure.
#[test]
fn a_report_of_candle_against_each_backend_finds_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::F32);
    for (name, _) in others(&model) {
        report_finds_no_change(dir.path(), &model, name);
    }
}

fn report_finds_no_change(dir: &Path, model: &Path, executor: &str) {
    let out = format!("out-{executor}");
    let config = dir.join(format!("{executor}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"output = "{out}"

[suite]
prompts = [
  {{ id = "a1", text = "the cat", category = "animals" }},
  {{ id = "a2", text = "a hat", category = "animals" }},
  {{ id = "t1", text = "then in", category = "things" }},
]

[observe]
max_tokens = 4
prompt_form = "raw"
logprobs = true
top_logprobs = 8

[baseline]
model = "{model}"
weights = "f32"

[candidate]
model = "{model}"
executor = "{executor}"

[[scorers]]
plugin = "behavior"
"#,
            model = model.display()
        ),
    )
    .unwrap();
    let plugin_dir = plugins::wasm("vauban-plugin-behavior")
        .parent()
        .unwrap()
        .to_path_buf();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(["run", config.to_str().unwrap()])
        .env("VAUBAN_PLUGIN_DIR", plugin_dir)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(out).join("report.json")).unwrap())
            .unwrap();
    common::report_fixture::validate_against_schema(&report);
    let per_prompt = report["distribution"]["per_prompt"].as_array().unwrap();
    assert_eq!(per_prompt.len(), 3, "{report:#}");
    for p in per_prompt {
        let kl = p["first_token_kl"].as_f64().unwrap();
        assert!(
            (0.0..1e-6).contains(&kl.abs()),
            "{executor}: first-token KL {kl}: {p:#}"
        );
    }
}

/// Subtracts the watched direction from every token whose projection on
/// it exceeds a threshold: a policy whose decisions depend on the
/// activations, so both backends must see the same ones to agree.
struct Gate {
    watches: Vec<Watch>,
    threshold: f32,
}

impl StepPolicy for Gate {
    fn describe(&self) -> String {
        "gate (test)".into()
    }
    fn watches(&self) -> &[Watch] {
        &self.watches
    }
    fn decide(&mut self, obs: &[Observation]) -> Result<Vec<PolicyOp>, String> {
        Ok(obs
            .iter()
            .map(|o| PolicyOp {
                layer: o.layer,
                direction: o.direction.clone(),
                mode: Mode::Subtract,
                alpha: 1.0,
                value: None,
                positions: o
                    .projections
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p > self.threshold)
                    .map(|(i, _)| o.offset + i)
                    .collect(),
            })
            .filter(|op| !op.positions.is_empty())
            .collect())
    }
}

fn unit_direction(seed: u64) -> Direction {
    // A fixed direction, the same on both sides.
    let v: Vec<f32> = (0..tiny::HIDDEN)
        .map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0) - 1.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let v: Vec<f32> = v.iter().map(|x| x / norm).collect();
    Direction::new("test", "d", "00", None, &v, &[tiny::HIDDEN]).unwrap()
}

/// The log of what the policy did, from a trace.
fn policy_record(out: &TraceOutput) -> serde_json::Value {
    out.trace
        .artifacts_of(K::InterventionResult)
        .find_map(|a| match &a.data {
            ArtifactData::Record { value } if a.labels.contains_key("policy") => {
                Some(value["log"].clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no policy record in {:#?}", out.trace.artifacts))
}

#[test]
fn policies_measurement_orthogonalization_and_export_agree_across_backends() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::F32);
    let mut paths = vec![gguf];
    for family in tiny::FAMILIES {
        let path = dir.path().join(format!("{family}.gguf"));
        paths.push(tiny::write_family_gguf(&path, family, 7, GgmlDType::F32));
    }
    for (i, path) in paths.iter().enumerate() {
        // Each model's exports in a folder of its own.
        let out = dir.path().join(format!("model-{i}"));
        std::fs::create_dir(&out).unwrap();
        for (name, other) in others(path) {
            // Each comparison orthogonalizes candle's copy: a fresh one each.
            let candle = LocalBackend::load(&spec(path)).unwrap();
            agree_across_backends(&out, candle, (name, other));
        }
    }
}

fn agree_across_backends(
    dir: &Path,
    mut candle: LocalBackend,
    (name, mut other): (&str, LocalBackend),
) {
    let d = unit_direction(3);

    // A step policy, in prefill and every decode step.
    let mut req = request("p", "the cat in the hat sat on a mat", vec![1]);
    req.observe.push(K::InterventionResult);
    let opts = options("p", PromptForm::Raw, 8);
    let run = |b: &LocalBackend| {
        let mut gate = Gate {
            watches: vec![Watch {
                name: "d".into(),
                layers: vec![1],
                direction: d.clone(),
            }],
            threshold: 0.0,
        };
        b.trace(&req, &opts, Some(&mut gate)).unwrap()
    };
    let (c, t) = (run(&candle), run(&other));
    let (cp, tp) = (policy_record(&c), policy_record(&t));
    for key in [
        "decisions",
        "ops",
        "tokens_changed_prefill",
        "tokens_changed_decode",
    ] {
        assert_eq!(
            cp.get(key),
            tp.get(key),
            "policy record `{key}`: {cp:#} vs {tp:#}"
        );
    }
    assert!(
        cp["tokens_changed_prefill"].as_u64().unwrap() > 0,
        "the gate changed nothing: {cp:#}"
    );
    let dl = relative(
        &values(&t, K::Logits, None, None),
        &values(&c, K::Logits, None, None),
    );
    assert!(dl < 1e-4, "logits under the policy: relative {dl}");
    assert_eq!(c.generation.unwrap().ids, t.generation.unwrap().ids);

    // What a direction measurement reads: every block's last residual, of
    // raw prompts and of chat prompts whose shared opening runs once.
    let ablate = vec![Intervention {
        layer: 0,
        mode: Mode::Subtract,
        direction: d.clone(),
        alpha: 1.0,
        value: None,
        positions: Positions::All,
        condition: None,
    }];
    let chat = PromptForm::Chat {
        system: Some("the cat sat".into()),
    };
    for form in [PromptForm::Raw, chat] {
        let prompts: Vec<Vec<u32>> = ["the cat", "a hat sat", "then ran in"]
            .iter()
            .map(|p| candle.tokenize(p, &form).unwrap())
            .collect();
        let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let cs = candle.last_token_states(&ablate, &refs);
        let ts = other.last_token_states(&ablate, &refs);
        assert_eq!(ts.len(), refs.len());
        for (c, t) in cs.into_iter().zip(ts) {
            let (c, t) = (c.unwrap(), t.unwrap());
            assert_eq!(c.residuals.len(), t.residuals.len());
            for (cr, tr) in c.residuals.iter().zip(&t.residuals) {
                assert!(relative(tr, cr) < 1e-4, "{form:?}: residuals");
            }
            assert!(relative(&t.logits, &c.logits) < 1e-4, "{form:?}: logits");
        }
    }

    // Orthogonalized weights: the same changes, then the same model.
    let cw = candle.orthogonalize(&d, &[0, 2]).unwrap();
    let tw = other.orthogonalize(&d, &[0, 2]).unwrap();
    assert_eq!(cw.len(), 4);
    for (a, b) in cw.iter().zip(&tw) {
        assert_eq!((a.layer, &a.matrix), (b.layer, &b.matrix));
        assert!(
            (a.norm - b.norm).abs() <= 1e-4 * a.norm.max(1.0),
            "{a:?} vs {b:?}"
        );
    }
    assert_eq!(
        other.model_ref().sha256,
        None,
        "changed weights claim no file hash"
    );
    let req = request("o", "the cat in the hat", vec![2]);
    let opts = options("o", PromptForm::Raw, 0);
    let (c, t) = (
        candle.trace(&req, &opts, None).unwrap(),
        other.trace(&req, &opts, None).unwrap(),
    );
    let dl = relative(
        &values(&t, K::Logits, None, None),
        &values(&c, K::Logits, None, None),
    );
    assert!(dl < 1e-4, "logits after orthogonalization: relative {dl}");

    // Exported, each loads in candle as the model it was.
    let reload = |b: &LocalBackend, name: &str| {
        let out = dir.join(name);
        b.export_hf(&out).unwrap();
        let back = LocalBackend::load(&spec(&out)).unwrap();
        back.trace(&req, &opts, None).unwrap()
    };
    let (ce, te) = (
        reload(&candle, &format!("candle-export-{name}")),
        reload(&other, &format!("{name}-export")),
    );
    let de = relative(
        &values(&te, K::Logits, None, None),
        &values(&ce, K::Logits, None, None),
    );
    assert!(de < 1e-4, "exported models: relative {de}");
    let dt = relative(
        &values(&te, K::Logits, None, None),
        &values(&t, K::Logits, None, None),
    );
    assert!(dt < 1e-4, "{name}'s export against {name}: relative {dt}");
}

/// Decides nothing, and fails once, at its `fail_at`-th decision.
struct FailOnce {
    watches: Vec<Watch>,
    calls: usize,
    fail_at: usize,
}

impl StepPolicy for FailOnce {
    fn describe(&self) -> String {
        "fail-once (test)".into()
    }
    fn watches(&self) -> &[Watch] {
        &self.watches
    }
    fn decide(&mut self, _: &[Observation]) -> Result<Vec<PolicyOp>, String> {
        self.calls += 1;
        match self.calls == self.fail_at {
            true => Err("a planned failure".into()),
            false => Ok(Vec::new()),
        }
    }
}

/// A pass that fails after some blocks ran (here a policy's error at the
/// second block) leaves the session as it was: the next step runs at the
/// same position and gives what an untroubled session gives.
#[test]
fn a_failed_pass_leaves_the_session_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::F32);
    let candle = LocalBackend::load(&spec(&gguf)).unwrap();
    let others = others(&gguf);
    let prompt = candle.tokenize("the cat sat", &PromptForm::Raw).unwrap();
    let next = 5;
    let mut fresh = candle.session(&[]);
    fresh.prefill(&prompt).unwrap();
    let want = fresh.decode_step(next).unwrap().logits;
    let all = std::iter::once(("candle", &candle)).chain(others.iter().map(|(n, b)| (*n, b)));
    for (name, b) in all {
        let mut policy = FailOnce {
            watches: vec![Watch {
                name: "d".into(),
                layers: vec![1],
                direction: unit_direction(5),
            }],
            calls: 0,
            fail_at: 2,
        };
        let mut s = b.session(&[]);
        s.set_policy(&mut policy);
        s.prefill(&prompt).unwrap();
        let err = s.decode_step(next).err().expect("the policy fails");
        assert!(
            err.to_string().contains("a planned failure"),
            "{name}: {err}"
        );
        assert_eq!(
            s.position(),
            prompt.len(),
            "{name}: position after the failure"
        );
        let got = s.decode_step(next).unwrap().logits;
        let d = relative(&got, &want);
        assert!(d < 1e-4, "{name}: the step after a failure: relative {d}");
    }
}

/// The jobs of one batch: prompts of different lengths (chat prompts
/// sharing a system message, or raw text), generations of different
/// budgets (one none, so a decode step runs without it and sequences
/// finish at different steps), a reference continuation on one, and the
/// same intervention on all of them.
fn batch_jobs(chat: bool, ivs: &[Intervention]) -> Vec<(TraceRequest, RunOptions)> {
    let texts = ["the cat", "the hat sat on a mat", "then ran in", "a hat"];
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let id = format!("{}{i}", if chat { "chat" } else { "raw" });
            let prompt = match chat {
                true => PromptForm::Chat {
                    // Short: the tiny Gemma's context is 64 positions.
                    system: Some("the cat sat".into()),
                },
                false => PromptForm::Raw,
            };
            let mut o = options(&id, prompt, [6, 3, 0, 9][i]);
            o.interventions = ivs.to_vec();
            if i == 3 {
                o.reference = Some(vauban::executor::ReferenceContinuation::new(
                    "other".into(),
                    vec![5, 9, 40, 7],
                    vec![
                        vec![5, 6],
                        vec![9, 10],
                        vec![40, 41],
                        vec![7, 8],
                        vec![1, 2],
                    ],
                ));
            }
            (request(&id, text, vec![0, 1]), o)
        })
        .collect()
}

/// Every job of `jobs` traced by `exec` with `batch` prompts per batch.
fn trace_all(
    exec: &LocalBackend,
    jobs: &[(TraceRequest, RunOptions)],
    batch: usize,
) -> Vec<TraceOutput> {
    let mut out = Vec::new();
    exec.trace_all(jobs, batch, &mut |i, r| {
        out.push(r.unwrap_or_else(|e| panic!("job {i}: {e}")));
        std::ops::ControlFlow::Continue(())
    });
    out
}

/// Every tensor artifact of `alone` (activations, logits, log-probabilities,
/// the continuation's scores) in `batched` too, with the same kind, layer,
/// labels and shape, within the cross-backend tests' relative tolerance;
/// the largest relative difference.
fn same_tensors(batched: &TraceOutput, alone: &TraceOutput, id: &str) -> f32 {
    assert_eq!(
        coverage(batched),
        coverage(alone),
        "{id}: the same artifacts"
    );
    let mut worst = 0f32;
    for a in &alone.trace.artifacts {
        let Some(expected) = alone.tensors.get(&a.id) else {
            continue;
        };
        let b = batched
            .trace
            .artifacts
            .iter()
            .find(|b| b.kind == a.kind && b.layer == a.layer && b.labels == a.labels)
            .unwrap_or_else(|| panic!("{id}: {:?} {:?} {:?}", a.kind, a.layer, a.labels));
        let got = batched.tensors[&b.id].as_ref().to_f32_vec();
        let d = relative(&got, &expected.as_ref().to_f32_vec());
        assert!(
            d < 1e-4,
            "{id}: {:?} {:?} {:?}: relative {d}",
            a.kind,
            a.layer,
            a.labels
        );
        worst = worst.max(d);
    }
    worst
}

/// The profile of the trace's span of `stage` (every trace here has one).
fn profile_of(out: &TraceOutput, stage: vauban::trace::Stage) -> &vauban::trace::StageProfile {
    let span = out.trace.spans.iter().find(|s| s.stage == stage);
    &span.unwrap_or_else(|| panic!("no {stage:?} span")).profile
}

/// The prefill span's note of a shared opening, if the trace's batch had one.
fn shared_opening(out: &TraceOutput) -> Option<String> {
    let prefill = profile_of(out, vauban::trace::Stage::Prefill);
    prefill.notes.get("shared_opening").cloned()
}

/// Issue 39: torch and MLX trace a batch's prompts in ragged passes (the
/// chat prompts' shared opening once, every generating sequence in each
/// decode step over one preallocated cache, the reference continuation in
/// one pass), and each trace holds what it holds traced alone: the same
/// artifacts, every tensor within the cross-backend tolerance, the same
/// generated tokens up to a near tie. On the tiny llama and on the
/// families whose attention differs most (Gemma 2's soft-cap and windows,
/// Gemma 3's two rotary bases, Phi-3, the mixture), with and without an
/// intervention, and on SmolLM2 where it is installed.
#[test]
fn batched_traces_equal_traces_alone_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = vec![tiny::write_gguf(
        &dir.path().join("tiny.gguf"),
        7,
        GgmlDType::F32,
    )];
    for family in ["gemma2", "gemma3", "phi3", "qwen3moe"] {
        let path = dir.path().join(format!("{family}.gguf"));
        paths.push(tiny::write_family_gguf(&path, family, 7, GgmlDType::F32));
    }
    paths.extend(common::smollm2_path());
    let ablate = [Intervention {
        layer: 0,
        mode: Mode::Subtract,
        direction: unit_direction(3),
        alpha: 1.0,
        value: None,
        positions: Positions::All,
        condition: None,
    }];
    let mut cases_compacted = 0;
    for path in &paths {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for (name, exec) in others(path) {
            for (chat, ivs) in [
                (true, &ablate[..0]),
                (false, &ablate[..0]),
                (true, &ablate[..]),
            ] {
                // SmolLM2's hidden width is not the tiny one's.
                if !ivs.is_empty() && exec.dims().hidden != tiny::HIDDEN {
                    continue;
                }
                let jobs = batch_jobs(chat, ivs);
                let alone = trace_all(&exec, &jobs, 1);
                let batched = trace_all(&exec, &jobs, jobs.len());
                let mut worst = 0f32;
                for ((b, a), (_, o)) in batched.iter().zip(&alone).zip(&jobs) {
                    let id = format!("{file} on {name}: {}", o.trace_id);
                    worst = worst.max(same_tensors(b, a, &id));
                    assert_eq!(shared_opening(a), None, "{id}");
                    assert_eq!(
                        shared_opening(b).is_some(),
                        chat,
                        "{id}: {:?}",
                        shared_opening(b)
                    );
                    let prefill = profile_of(b, vauban::trace::Stage::Prefill);
                    assert_eq!(prefill.batch_size, 4, "{id}");
                    let (bg, ag) = (b.generation.as_ref(), a.generation.as_ref());
                    assert_eq!(bg.is_some(), ag.is_some(), "{id}");
                    let (Some(bg), Some(ag)) = (bg, ag) else {
                        continue;
                    };
                    for (step, (x, y)) in bg.ids.iter().zip(&ag.ids).enumerate() {
                        let top = &ag.top[step].logprobs;
                        if top.len() >= 2 && top[0] - top[1] < 1e-3 {
                            break;
                        }
                        assert_eq!(
                            x, y,
                            "{id}: generated token {step}: {:?} vs {:?}",
                            bg.ids, ag.ids
                        );
                    }
                    if bg.ids == ag.ids {
                        assert_eq!(bg.text, ag.text, "{id}");
                    }
                }
                // Once half the generating sequences or more have finished,
                // the batch's cache is rebuilt with the others alone; the
                // decode spans say so (and the traces above are unchanged).
                let steps: Vec<usize> = batched
                    .iter()
                    .filter_map(|t| t.generation.as_ref())
                    .map(|g| g.decode_steps)
                    .collect();
                let live = |s: usize| steps.iter().filter(|&&n| n > s).count();
                let compacted = (0..)
                    .take_while(|&s| live(s) > 0)
                    .any(|s| 2 * live(s) <= steps.len());
                for b in batched.iter().filter(|t| t.generation.is_some()) {
                    let decode = profile_of(b, vauban::trace::Stage::Decode);
                    let note = decode.notes.get("compacted");
                    assert_eq!(
                        note.is_some(),
                        compacted,
                        "{file} on {name}: {steps:?}, {note:?}"
                    );
                }
                eprintln!(
                    "{file} on {name} (chat {chat}, {} interventions): batched against alone, max relative |Δ| {worst:.2e}; decode steps {steps:?}, compacted {compacted}",
                    ivs.len()
                );
                cases_compacted += usize::from(compacted);
            }
        }
    }
    // The budgets (6, 3, 0 and 9 tokens) end far enough apart that a
    // batch which runs them all is compacted: the check above was made.
    if cfg!(any(feature = "torch", feature = "mlx")) {
        assert!(cases_compacted > 0, "no batch was compacted");
    }
}
