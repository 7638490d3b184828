//! `vauban serve` as a real process on loopback, queried by vauban's own
//! http executor: the served tokens equal in-process generation, with and
//! without an intervention, and the fingerprint follows the
//! transformation. Uses SmolLM2 (skips with a message when it is absent).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::serve::Server;

use vauban::executor::http::{HttpExecutor, HttpSpec};
use vauban::executor::{
    Executor, GenerateOptions, LocalBackend, LocalModel, ModelSpec, PromptForm, TraceOutput,
};
use vauban::model::WeightMode;
use vauban::trace::{ArtifactKind as K, Role};

/// `vauban serve` on `model` with f32 weights (as the in-process runs
/// the tests compare it with).
fn serve(model: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--weights", "f32"];
    args.extend_from_slice(extra);
    common::serve::start(model, &args)
}

fn direction_file(dir: &Path) -> PathBuf {
    // A fixed direction, large enough to change what the model says.
    let values: Vec<f32> = (0..576).map(|i| ((i * 7919) % 13) as f32 - 6.0).collect();
    let path = dir.join("steer.safetensors");
    let t = candle_core::Tensor::new(values.as_slice(), &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

const PROMPT: &str = "The capital of France is";

/// Greedy tokens in this process, with `spec` applied when given.
fn in_process(model: &Path, spec: Option<&str>) -> Vec<u32> {
    let exec = LocalBackend::load(&ModelSpec {
        weights: WeightMode::F32,
        ..ModelSpec::new(model)
    })
    .unwrap();
    let d = exec.dims();
    let interventions: Vec<_> = spec
        .map(|s| {
            let s: vauban::intervene::InterventionSpec = s.parse().unwrap();
            s.resolve(d.hidden, d.layers).unwrap()
        })
        .into_iter()
        .collect();
    let ids = exec.tokenize(PROMPT, &PromptForm::Raw).unwrap();
    let mut session = exec.session(&interventions);
    let options = GenerateOptions {
        max_tokens: 12,
        ..Default::default()
    };
    exec.generate_in(&mut session, &ids, &options, &mut |_| {})
        .unwrap()
        .ids
}

/// The served tokens, through the http executor.
fn served(server: &Server, model: &Path) -> (Vec<u32>, TraceOutput, HttpExecutor) {
    let mut spec = HttpSpec::new(&server.url, "smol");
    spec.tokenizer = Some(model.to_path_buf());
    let exec = HttpExecutor::connect(&spec).unwrap();
    let (request, options) = common::raw_request("p", PROMPT, 12, 5);
    let out = exec.trace(&request, &options, None).unwrap();
    let ids = vauban::pipeline::analyze::tokens_of(&out.trace, Role::Completion).unwrap();
    (ids, out, exec)
}

#[test]
fn served_tokens_equal_in_process_generation_with_and_without_an_intervention() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let steer = format!(
        "layer=12,mode=add,direction={},alpha=4",
        direction_file(dir.path()).display()
    );

    let plain = serve(&model, &[]);
    let (plain_ids, out, exec) = served(&plain, &model);
    assert_eq!(plain_ids, in_process(&model, None));
    // What an endpoint of vauban's gives: top-k logprobs with ids.
    assert_eq!(exec.probe().top_logprobs, 20);
    assert!(exec.probe().token_ids);
    assert!(
        exec.probe().prompt_logprobs,
        "echo gives the prompt's logprobs"
    );
    assert!(out.trace.has(K::Logprobs));
    drop(plain);

    let steered = serve(&model, &["--intervene", &steer]);
    let (steered_ids, _, steered_exec) = served(&steered, &model);
    assert_eq!(steered_ids, in_process(&model, Some(&steer)));
    assert_ne!(
        steered_ids, plain_ids,
        "the intervention changes the output"
    );
    // A client's cache keyed on the fingerprint tells the two apart.
    assert_ne!(
        steered_exec.probe().system_fingerprint,
        exec.probe().system_fingerprint
    );
}

#[test]
fn a_model_the_server_does_not_serve_is_refused_with_the_served_name() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let s = serve(&model, &[]);
    let mut spec = HttpSpec::new(&s.url, "another-model");
    spec.retries = 0;
    let e = HttpExecutor::connect(&spec).err().unwrap().to_string();
    assert!(
        e.contains("does not serve `another-model`") && e.contains("`smol`"),
        "{e}"
    );
}

/// POSTs `body` to `path` under the server's base URL; the JSON answer.
fn post(server: &Server, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let authority = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    common::post_json(authority, &format!("/v1/{path}"), body)
}

#[test]
fn echo_scores_the_prompt_as_generation_scores_the_same_tokens() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let s = serve(&model, &[]);
    // The model's own answer and its log-probabilities...
    let answer = post(
        &s,
        "completions",
        &serde_json::json!({"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2}),
    );
    let completion = answer["choices"][0]["text"].as_str().unwrap().to_owned();
    let generated = answer["choices"][0]["logprobs"]["token_logprobs"].clone();
    // ...are what echo gives for the same text as a prompt (lm-eval's
    // loglikelihood request: echo, no new tokens).
    let echoed = post(
        &s,
        "completions",
        &serde_json::json!({
            "prompt": format!("{PROMPT}{completion}"), "max_tokens": 0,
            "echo": true, "logprobs": 2, "temperature": 0,
        }),
    );
    let lp = &echoed["choices"][0]["logprobs"];
    assert_eq!(
        echoed["choices"][0]["text"],
        format!("{PROMPT}{completion}")
    );
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    let echoed_lp: Vec<f64> = lp["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    let tail = &echoed_lp[echoed_lp.len() - 3..];
    for (e, g) in tail.iter().zip(generated.as_array().unwrap()) {
        let g = g.as_f64().unwrap();
        assert!((e - g).abs() < 1e-3, "echoed {e} vs generated {g}");
    }
    let bad = post(
        &s,
        "completions",
        &serde_json::json!({"prompt": "x", "echo": true, "stream": true}),
    );
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`echo` with `stream`")
    );
}

/// `vauban run` with the local model as the baseline and `server` as the
/// candidate, on raw prompts with logprobs; the report.
fn run_against(server: &Server, model: &Path, dir: &Path) -> serde_json::Value {
    let suite = dir.join("suite.jsonl");
    std::fs::write(
        &suite,
        [
            "The capital of France is",
            "Water boils at a temperature of",
            "Once upon a time, there was a",
            "def fibonacci(n):",
        ]
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"id": format!("p{i}"), "text": t}).to_string())
        .collect::<Vec<_>>()
        .join("\n"),
    )
    .unwrap();
    let out = dir.join("out");
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"output = "{out}"
[suite]
file = "{suite}"
[observe]
logprobs = true
top_logprobs = 10
max_tokens = 12
prompt_form = "raw"
[baseline]
model = "{model}"
weights = "f32"
[candidate]
executor = "http"
url = "{url}"
model = "smol"
tokenizer = "{model}"
[[scorers]]
plugin = "logprob"
"#,
            out = out.display(),
            suite = suite.display(),
            model = model.display(),
            url = server.url,
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(["run", cfg.to_str().unwrap()])
        .env(
            "VAUBAN_PLUGIN_DIR",
            common::plugins::wasm("vauban-plugin-logprob")
                .parent()
                .unwrap(),
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn an_endpoint_that_echoes_is_scored_along_the_whole_baseline_continuation() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    // The same weights on both sides: the teacher-forced KL is zero at
    // every position of every continuation, not only up to a divergence.
    let plain = serve(&model, &[]);
    let dir = tempfile::tempdir().unwrap();
    let r = run_against(&plain, &model, dir.path());
    let d = &r["distribution"];
    assert_eq!(d["positions"], "teacher_forced", "{d}");
    assert_eq!(d["support"], "top_k_shared", "{d}");
    let per = d["per_prompt"].as_array().unwrap();
    // p0 runs to its budget: a row for each of its 12 distributions.
    assert_eq!(per[0]["positions"], 12, "{}", per[0]);
    for p in per {
        assert!(p["positions"].as_u64().unwrap() > 1, "{p}");
        assert!(p["mean_kl"].as_f64().unwrap() < 1e-4, "{p}");
    }
    drop(plain);

    // Steered, the candidate's distributions move along the same positions.
    let steer = format!(
        "layer=12,mode=add,direction={},alpha=4",
        direction_file(dir.path()).display()
    );
    let steered = serve(&model, &["--intervene", &steer]);
    let dir = tempfile::tempdir().unwrap();
    let r = run_against(&steered, &model, dir.path());
    let d = &r["distribution"];
    assert_eq!(d["positions"], "teacher_forced", "{d}");
    assert!(d["mean_kl"].as_f64().unwrap() > 0.05, "{d}");
}

/// `vauban serve` on a tiny model of each other family the tests write
/// (Qwen3, Gemma 2 and 3, OLMo 2, Phi-3, the mixture Qwen3-MoE): the served
/// tokens equal in-process generation. Needs no downloaded model.
#[test]
fn every_family_serves_what_it_generates_in_process() {
    use candle_core::quantized::GgmlDType;
    let dir = tempfile::tempdir().unwrap();
    for family in common::tiny::FAMILIES {
        let path = dir.path().join(format!("{family}.gguf"));
        let model = common::tiny::write_family_gguf(&path, family, 7, GgmlDType::F32);
        let server = serve(&model, &[]);
        let (ids, _, _) = served(&server, &model);
        assert!(!ids.is_empty(), "{family}: nothing generated");
        assert_eq!(ids, in_process(&model, None), "{family}");
    }
}
