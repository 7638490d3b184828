//! The http executor against a real llama.cpp `llama-server` on the
//! SmolLM2 GGUF: determinism at temperature 0, a full report between the
//! local candle model and the server, an interrupted suite resumed after
//! the server was killed and restarted, and the API key kept out of every
//! file. Skips with a message when the server binary or the model is
//! absent, unless `VAUBAN_REQUIRE_LLAMA_SERVER=1` (`.ci/run` sets it).

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::llama_server::{self, ALIAS, LlamaServer};
use common::plugins;
use vauban::executor::http::{HttpExecutor, HttpSpec};
use vauban::executor::{Executor, RunOptions, TraceOutput};
use vauban::trace::{ArtifactKind as K, Role, TraceRequest};

/// The server binary and the model, or `None` (the test skips).
fn parts() -> Option<(PathBuf, PathBuf)> {
    let model = common::smollm2_path()?;
    Some((llama_server::binary()?, model))
}

const PROMPTS: [&str; 10] = [
    "The capital of France is",
    "Water boils at a temperature of",
    "The first three prime numbers are",
    "Once upon a time, there was a",
    "def fibonacci(n):",
    "The largest planet in our solar system is",
    "To make a cup of tea, you",
    "The opposite of hot is",
    "My favourite colour is",
    "In 1969, the first person to walk on the Moon was",
];

fn write_suite(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("suite.jsonl");
    let lines: Vec<String> = PROMPTS[..n]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            serde_json::json!({"id": format!("p{i}"), "text": p, "category": if i % 2 == 0 { "even" } else { "odd" }})
                .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn vauban(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let plugin_dir = plugins::wasm("vauban-plugin-refusal")
        .parent()
        .unwrap()
        .to_path_buf();
    let mut c = Command::new(env!("CARGO_BIN_EXE_vauban"));
    c.args(args).env("VAUBAN_PLUGIN_DIR", plugin_dir);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn request(text: &str) -> (TraceRequest, RunOptions) {
    common::raw_request("p", text, 16, 8)
}

/// The completion's text and the raw top-k rows of a trace.
fn evidence(out: &TraceOutput) -> (String, Vec<u8>, Vec<u32>) {
    let t = &out.trace;
    let text = vauban::pipeline::analyze::text_of(t, Role::Completion).unwrap();
    let ids = vauban::pipeline::analyze::tokens_of(t, Role::Completion).unwrap();
    let rows = t
        .artifacts_of(K::Logprobs)
        .find(|a| a.role() == Some(Role::Continuation))
        .map(|a| out.tensors[&a.id].bytes.clone())
        .unwrap();
    (text, rows, ids)
}

#[test]
fn temperature_zero_gives_the_same_text_and_logprobs_every_time_and_at_any_concurrency() {
    let Some((bin, model)) = parts() else { return };
    let server = LlamaServer::start(&bin, &model, llama_server::free_port());
    let mut spec = HttpSpec::new(&server.url(), ALIAS);
    spec.tokenizer = Some(model.clone());
    let exec = HttpExecutor::connect(&spec).unwrap();
    assert!(exec.probe().token_ids, "llama-server gives token ids");
    assert!(exec.probe().top_logprobs >= 8, "{:?}", exec.probe());
    let (r, o) = request(PROMPTS[0]);
    let first = evidence(&exec.trace(&r, &o, None).unwrap());
    let second = evidence(&exec.trace(&r, &o, None).unwrap());
    assert_eq!(first, second, "two runs at temperature 0 differ");
    assert!(first.0.contains("Paris"), "{:?}", first.0);

    // Four prompts at once, four times: each as it is alone.
    let jobs: Vec<(TraceRequest, RunOptions)> = PROMPTS[..4]
        .iter()
        .map(|p| request(p))
        .cycle()
        .take(8)
        .collect();
    let alone: Vec<_> = jobs[..4]
        .iter()
        .map(|(r, o)| evidence(&exec.trace(r, o, None).unwrap()))
        .collect();
    let mut together = vec![None; jobs.len()];
    exec.trace_all(&jobs, 1, &mut |i, r| {
        together[i] = Some(evidence(&r.unwrap()));
        ControlFlow::Continue(())
    });
    for (i, t) in together.into_iter().enumerate() {
        assert_eq!(t.unwrap(), alone[i % 4], "prompt {i} differs when batched");
    }
}

fn config(dir: &Path, out: &Path, suite: &Path, baseline: &str, candidate: &str) -> PathBuf {
    let path = dir.join("run.toml");
    std::fs::write(
        &path,
        format!(
            r#"output = "{}"
seed = 0
[suite]
file = "{}"
[observe]
logprobs = true
top_logprobs = 8
max_tokens = 16
prompt_form = "raw"
[baseline]
{baseline}
[candidate]
{candidate}
[[scorers]]
plugin = "refusal"
[[scorers]]
plugin = "logprob"
[[claim_mappers]]
plugin = "claims-default"
"#,
            out.display(),
            suite.display()
        ),
    )
    .unwrap();
    path
}

fn http_side(url: &str, model: &Path, extra: &str) -> String {
    format!(
        "executor = \"http\"\nurl = \"{url}\"\nmodel = \"{ALIAS}\"\nlabel = \"llama-server\"\ntokenizer = \"{}\"\n{extra}",
        model.display()
    )
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn a_report_between_candle_and_the_server_is_a_distributional_diff_and_keeps_the_key_out() {
    let Some((bin, model)) = parts() else { return };
    let server = LlamaServer::start(&bin, &model, llama_server::free_port());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let suite = write_suite(dir.path(), 6);
    let secret = "sk-vauban-test-7f3a9c1e5b";
    let cfg = config(
        dir.path(),
        &out,
        &suite,
        &format!(
            "model = \"{}\"\nlabel = \"candle\"\nweights = \"f32\"",
            model.display()
        ),
        &http_side(
            &server.url(),
            &model,
            "api_key_env = \"VAUBAN_TEST_ENDPOINT_KEY\"\nconcurrency = 3",
        ),
    );
    let o = vauban(
        &["run", cfg.to_str().unwrap()],
        &[("VAUBAN_TEST_ENDPOINT_KEY", secret)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = report(&out);
    assert_eq!(r["access"]["level"], "logprobs", "{}", r["access"]);
    for c in r["claims"].as_array().unwrap() {
        let s = c["strength"].as_str().unwrap();
        assert!(
            ["black_box_behavioral_diff", "distributional_diff"].contains(&s),
            "a claim above what an endpoint allows: {c}"
        );
    }
    let d = &r["distribution"];
    assert_eq!(d["positions"], "shared_generated", "{d}");
    // The same GGUF, f32 in candle and Q4_1 in llama.cpp: close, not equal.
    let kl = d["first_token_kl_mean"].as_f64().unwrap();
    assert!((0.0..0.05).contains(&kl), "first-token KL {kl}");

    // The same top-1 first token on every raw prompt.
    let first_ids = |side: &str| -> Vec<u32> {
        let b = vauban::bundle::Bundle::open(out.join("traces").join(side)).unwrap();
        b.traces()
            .iter()
            .map(|t| vauban::pipeline::analyze::tokens_of(t, Role::Completion).unwrap()[0])
            .collect()
    };
    assert_eq!(first_ids("baseline"), first_ids("candidate"));

    // The key is nowhere under the output folder.
    for entry in walk(&out) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the API key is in {}",
            entry.display()
        );
    }
    assert!(!stderr(&o).contains(secret));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        match p.is_dir() {
            true => files.extend(walk(&p)),
            false => files.push(p),
        }
    }
    files
}

#[test]
fn a_server_killed_mid_suite_then_restarted_is_asked_only_for_what_is_missing() {
    let Some((bin, model)) = parts() else { return };
    let port = llama_server::free_port();
    let mut server = LlamaServer::start(&bin, &model, port);
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path(), PROMPTS.len());
    let side = |label: &str| {
        http_side(
            &server.url(),
            &model,
            &format!("concurrency = 1\nretries = 1\ntimeout_s = 60\nsystem = \"{label}\""),
        )
    };
    // Two sides on one endpoint (one asked with raw prompts either way; the
    // system message is part of each side's identity, not of a raw prompt).
    let (b, c) = (side("a"), side("b"));

    let whole = dir.path().join("whole");
    let cfg = config(dir.path(), &whole, &suite, &b, &c);
    let o = vauban(&["run", cfg.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));

    let out = dir.path().join("resumed");
    let cfg = config(dir.path(), &out, &suite, &b, &c);
    let child = Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(["run", cfg.to_str().unwrap()])
        .env(
            "VAUBAN_PLUGIN_DIR",
            plugins::wasm("vauban-plugin-refusal").parent().unwrap(),
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once three baseline answers are kept.
    let answers = out.join("traces/http/baseline");
    let start = Instant::now();
    while std::fs::read_dir(&answers).map_or(0, |d| d.count()) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no answers kept"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot connect to") && err.contains("tracing prompt"),
        "{err}"
    );
    assert!(err.contains("run the same command to resume"), "{err}");
    let kept = std::fs::read_dir(&answers).unwrap().count();
    assert!((3..PROMPTS.len()).contains(&kept), "{kept} answers kept");
    assert!(
        !out.join("traces/baseline/manifest.json").exists(),
        "no bundle is written as if complete"
    );

    let _server = LlamaServer::start(&bin, &model, port);
    let o = vauban(&["run", cfg.to_str().unwrap()], &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "reusing {kept} of {} recorded baseline traces",
            PROMPTS.len()
        )),
        "{err}"
    );
    let (a, b) = (report(&whole), report(&out));
    for key in [
        "metric_deltas",
        "prompts",
        "distribution",
        "claims",
        "access",
    ] {
        assert_eq!(
            a[key], b[key],
            "`{key}` differs from the uninterrupted run's"
        );
    }
}

#[test]
fn validate_online_probes_the_endpoint_and_warns_where_evidence_will_be_narrower() {
    let Some((bin, model)) = parts() else { return };
    let server = LlamaServer::start(&bin, &model, llama_server::free_port());
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path(), 2);
    // No tokenizer declared: text and logprobs, but no KL.
    let side = format!(
        "executor = \"http\"\nurl = \"{}\"\nmodel = \"{ALIAS}\"",
        server.url()
    );
    let cfg = config(dir.path(), &dir.path().join("out"), &suite, &side, &side);
    let o = vauban(&["validate", "--online", cfg.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}{text}", stderr(&o));
    assert!(
        text.contains(&format!("candidate: {} serves `{ALIAS}`", server.url()))
            && text.contains(
                "log-probabilities: top 20 per generated position; token ids: yes; prompt log-probabilities (echo): no"
            ),
        "{text}"
    );
    assert!(text.contains("no `tokenizer` is declared"), "{text}");
    assert!(
        text.contains("expected evidence level at best: logprobs"),
        "{text}"
    );
    // Offline, nothing is asked of the endpoint.
    drop(server);
    let o = vauban(&["validate", "--offline", cfg.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn ctrl_c_with_requests_in_flight_keeps_what_arrived_and_the_rerun_asks_for_the_rest() {
    let Some((bin, model)) = parts() else { return };
    let server = LlamaServer::start(&bin, &model, llama_server::free_port());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let suite = write_suite(dir.path(), PROMPTS.len());
    let side = |s: &str| {
        http_side(
            &server.url(),
            &model,
            &format!("concurrency = 4\nsystem = \"{s}\""),
        )
    };
    let cfg = config(dir.path(), &out, &suite, &side("a"), &side("b"));
    let plugin_dir = plugins::wasm("vauban-plugin-refusal")
        .parent()
        .unwrap()
        .to_path_buf();
    let run = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vauban"));
        c.args(["run", cfg.to_str().unwrap()])
            .env("VAUBAN_PLUGIN_DIR", &plugin_dir);
        c
    };
    let cached = || common::cached_traces(&out);
    let mut child = run().stderr(std::process::Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while cached() < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the signal"
        );
        assert!(start.elapsed() < Duration::from_secs(600), "no trace kept");
        std::thread::sleep(Duration::from_millis(5));
    }
    let signal = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signal.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    // What it says it kept is what the trace cache holds.
    let kept = cached();
    let said = |side: &str| common::kept_count(&err, side, PROMPTS.len()).unwrap_or(0);
    assert!(
        err.contains("run the same command to resume") && kept >= 2 && kept < 2 * PROMPTS.len(),
        "{kept} kept; {err}"
    );
    assert_eq!(said("baseline") + said("candidate"), kept, "{err}");

    let o = run().output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("reusing {} of", said_before(kept))),
        "{err}"
    );
    assert_eq!(cached(), 2 * PROMPTS.len());
}

/// The traces a rerun reuses on its first side: all it kept, when the
/// stop came on the baseline; the whole baseline otherwise.
fn said_before(kept: usize) -> usize {
    kept.min(PROMPTS.len())
}

#[test]
fn a_measured_control_vector_loads_and_steers_llama_server_as_measure_advises() {
    // `vauban measure --out d.gguf` ends with the llama.cpp arguments that
    // steer with it; llama-server itself (not our reader) must take them.
    let Some((binary, model)) = parts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cv = dir.path().join("refusal.gguf");
    let examples = plugins::root().join("examples/prompts");
    let o = vauban(
        &[
            "measure",
            "--model",
            model.to_str().unwrap(),
            "--harmful",
            examples.join("harmful.jsonl").to_str().unwrap(),
            "--harmless",
            examples.join("harmless.jsonl").to_str().unwrap(),
            "--out",
            cv.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let advice = stdout
        .split_whitespace()
        .skip_while(|w| *w != "--control-vector-scaled")
        .nth(1)
        .unwrap_or_else(|| panic!("no --control-vector-scaled advice: {stdout}"));
    assert_eq!(advice, format!("{}:SCALE", cv.display()));
    let prompt = "The capital of France is";
    let plain_port = llama_server::free_port();
    let plain = LlamaServer::start_with_slots(&binary, &model, plain_port, 1, 1);
    let unsteered = llama_server::complete(plain_port, prompt, 16);
    drop(plain);
    // A strong scale, so the steering shows in a greedy continuation.
    let arg = advice.replace("SCALE", "8");
    let port = llama_server::free_port();
    let _steered = LlamaServer::start_with_args(
        &binary,
        &model,
        port,
        1,
        1,
        &["--control-vector-scaled", &arg],
    );
    let steered = llama_server::complete(port, prompt, 16);
    assert_ne!(steered, unsteered, "the control vector changed nothing");
}
