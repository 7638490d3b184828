//! `vauban plugin test` (golden files: pass, fail with a diff, update) and
//! `vauban plugin inspect`, through the binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::plugins::{root, wasm};

fn vauban(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        // A private compile cache, so tests never share one with the user.
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("vauban-cli-plugin-test-cache"),
        )
        .output()
        .expect("run vauban")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fixture() -> String {
    root()
        .join("tests/fixtures/smollm2-chat")
        .display()
        .to_string()
}

#[test]
fn first_party_scorers_match_their_golden_files() {
    for p in ["refusal", "behavior", "logprob"] {
        let golden = root().join(format!("tests/fixtures/golden/{p}-smollm2-chat.json"));
        let plugin = wasm(&format!("vauban-plugin-{p}"));
        let o = vauban(&[
            "plugin",
            "test",
            s(&plugin),
            "--traces",
            &fixture(),
            "--expect",
            s(&golden),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{p}: {out}{err}");
        assert!(out.contains("matches"), "{out}");
    }
}

#[test]
fn golden_flow_update_pass_fail_with_diff() {
    let dir = tempfile::tempdir().unwrap();
    let golden = dir.path().join("golden.json");
    let plugin = wasm("vauban-plugin-refusal");
    let run = |extra: &[&str]| {
        let mut args = vec!["plugin", "test", s(&plugin), "--traces"];
        let f = fixture();
        args.push(&f);
        args.extend_from_slice(&["--expect", s(&golden)]);
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        vauban(&refs)
    };
    // A missing golden file is a clear error, not a pass, and says how
    // to create it.
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o).1;
    assert!(
        err.contains(&format!("--expect {}: no such file", golden.display()))
            && err.contains("run the same command with --update"),
        "{err}"
    );

    let o = run(&["--update"]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(text(&o).0.contains("updated"));
    let o = run(&[]);
    assert!(o.status.success(), "{:?}", text(&o));

    // Change one expected value and drop another: both differences are named.
    let mut g: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&golden).unwrap()).unwrap();
    g["metrics"]["t2"]["refusal_rate"] = serde_json::json!(0.0);
    g["metrics"].as_object_mut().unwrap().remove("t4");
    std::fs::write(&golden, serde_json::to_vec_pretty(&g).unwrap()).unwrap();
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(
        err.contains("differs from") && err.contains("2 places"),
        "{err}"
    );
    assert!(
        err.contains("trace t2 refusal_rate: expected 0, got 1"),
        "{err}"
    );
    assert!(
        err.contains("trace t4 refusal_rate: unexpected value 0"),
        "{err}"
    );
    assert!(err.contains("--update"), "{err}");

    let o = run(&["--update"]);
    assert!(o.status.success());
    assert!(run(&[]).status.success());
}

#[test]
fn a_malformed_golden_file_is_named_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let golden = dir.path().join("golden.json");
    std::fs::write(
        &golden,
        r#"{"plugin": "x", "version": "1", "world": "scorer", "metrics": {"t0": {"m": "one"}}}"#,
    )
    .unwrap();
    let plugin = wasm("vauban-plugin-refusal");
    let o = vauban(&[
        "plugin",
        "test",
        s(&plugin),
        "--traces",
        &fixture(),
        "--expect",
        s(&golden),
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("metrics.t0.m") && err.contains("line 1"),
        "{err}"
    );
}

#[test]
fn inspect_names_the_older_wit_a_plugin_was_built_against() {
    let o = vauban(&[
        "plugin",
        "inspect",
        s(&wasm("vauban-test-v0-1-scorer")),
        "--json",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["wit"], "vauban:plugin@0.1.0");
    assert_eq!(j["host_wit"], "vauban:plugin@0.3.0");
    assert_eq!(j["describe"]["plugin"]["name"], "v0-1-scorer");
}

#[test]
fn inspect_names_world_version_needs_metrics_imports_and_sha256() {
    let plugin = wasm("vauban-plugin-logprob");
    let o = vauban(&["plugin", "inspect", s(&plugin), "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["world"], "scorer");
    assert_eq!(j["wit"], "vauban:plugin@0.3.0");
    assert_eq!(j["host_wit"], "vauban:plugin@0.3.0");
    assert_eq!(j["describe"]["plugin"]["name"], "vauban-plugin-logprob");
    assert_eq!(j["describe"]["needs"], serde_json::json!(["logprobs"]));
    let metrics: Vec<&str> = j["describe"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["mean_token_logprob", "perplexity"]);
    let bytes = std::fs::read(&plugin).unwrap();
    assert_eq!(j["sha256"], vauban::hash::sha256_hex(&bytes));
    assert!(
        j["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("wasi:io/streams"))
    );

    // A policy that needs a config still shows its facts, and why describe failed.
    let o = vauban(&["plugin", "inspect", s(&wasm("vauban-plugin-steer-gate"))]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(
        out.contains("world:    intervention-policy") && out.contains("missing field `layers`"),
        "{out}"
    );
}

#[test]
fn plugin_test_runs_policies_and_claim_mappers_on_their_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let obs = dir.path().join("obs.json");
    std::fs::write(
        &obs,
        r#"[{"layer": 3, "direction": "refusal", "offset": 4, "projections": [0.1, 2.0, 3.0]}]"#,
    )
    .unwrap();
    let config = dir.path().join("gate.toml");
    std::fs::write(&config, "layers = [3]\nthreshold = 1.0\n").unwrap();
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("vauban-plugin-steer-gate")),
        "--observations",
        s(&obs),
        "--config",
        s(&config),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("op: layer 3 subtract refusal alpha 1 at positions [5, 6]"),
        "{out}"
    );

    // The wrong input for the plugin's world is named.
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("vauban-plugin-steer-gate")),
        "--traces",
        &fixture(),
    ]);
    assert!(
        text(&o)
            .1
            .contains("is an intervention policy: give it observations"),
        "{:?}",
        text(&o)
    );

    let ev = dir.path().join("evidence.json");
    std::fs::write(
        &ev,
        r#"{"access_level": "black_box", "claim_strength": "black_box_behavioral_diff", "kinds_in_both": ["text"],
            "deltas": [{"id": "d1", "metric": "refusal_rate", "baseline_mean": 0.9, "candidate_mean": 0.2,
                        "delta": -0.7, "p_value": 0.002, "n": 16, "polarity": "neutral"}]}"#,
    )
    .unwrap();
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("vauban-plugin-claims-default")),
        "--evidence",
        s(&ev),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("[black_box_behavioral_diff] refusal_rate fell from 0.900 to 0.200"),
        "{out}"
    );
}

#[test]
fn sandbox_failures_exit_non_zero_with_the_typed_error() {
    let (o, _) = evil_test("loop", "200");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o)
            .1
            .contains("timeout: still running after the 200ms deadline"),
        "{:?}",
        text(&o)
    );
}

/// `vauban plugin test` with the evil scorer doing `attack`, timed.
fn evil_test(attack: &str, deadline_ms: &str) -> (Output, std::time::Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("evil.json");
    std::fs::write(&config, format!(r#"{{"attack": "{attack}"}}"#)).unwrap();
    let start = std::time::Instant::now();
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("vauban-test-evil")),
        "--traces",
        &fixture(),
        "--config",
        s(&config),
        "--deadline-ms",
        deadline_ms,
    ]);
    (o, start.elapsed())
}

#[test]
fn a_plugin_that_sleeps_does_not_hold_plugin_test() {
    // The scorer sleeps 30 s per call (on the sandbox's virtual clock), and
    // the fixture has several traces. Process start and the compile cache
    // are outside the deadline, so the bound here is generous but far
    // below one real sleep.
    let (o, took) = evil_test("sleep", "100");
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(took.as_secs() < 30, "plugin test took {took:?}");
    assert!(text(&o).0.contains("value"), "{:?}", text(&o));
    let (o, took) = evil_test("sleep_in_configure", "100");
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(took.as_secs() < 30, "plugin test took {took:?}");
}

#[test]
fn control_characters_from_a_plugin_never_reach_the_terminal() {
    let (o, _) = evil_test("ansi", "1000");
    assert_eq!(o.status.code(), Some(1));
    for (name, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let bad: Vec<u8> = bytes
            .iter()
            .copied()
            .filter(|b| b.is_ascii_control() && !matches!(b, b'\n' | b'\t'))
            .collect();
        assert!(
            bad.is_empty(),
            "{name} holds control bytes {bad:?}: {:?}",
            text(&o)
        );
    }
    let err = text(&o).1;
    // Shown, escaped, rather than acted on.
    assert!(err.contains("\\u001b]0;pwned\\u0007"), "{err}");
    assert!(err.contains("\\u001b]52;c;"), "{err}");
    // `plugin inspect` prints the plugin's own description, escaped too.
    let o = vauban(&["plugin", "inspect", s(&wasm("vauban-test-evil"))]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(!o.stdout.contains(&0x1b), "{:?}", text(&o));
    assert!(text(&o).0.contains("\\u001b[8m"), "{:?}", text(&o));
    // In `--json` output the escape is JSON's own: still valid JSON, and it
    // decodes to the plugin's description as the plugin gave it.
    let o = vauban(&["plugin", "inspect", s(&wasm("vauban-test-evil")), "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert!(
        j["describe"]["plugin"]["description"]
            .as_str()
            .unwrap()
            .contains("\x1b[8m"),
        "{j:#}"
    );
}

#[test]
fn the_example_third_party_scorer_runs_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let run = |traces: &Path, config: Option<&str>| {
        let mut args = vec![
            "plugin".to_owned(),
            "test".into(),
            s(&wasm("uppercase-scorer")).into(),
            "--traces".into(),
            s(traces).into(),
            "--json".into(),
        ];
        if let Some(c) = config {
            let path = dir.path().join("uppercase.toml");
            std::fs::write(&path, c).unwrap();
            args.extend(["--config".into(), s(&path).into()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        vauban(&refs)
    };
    // The recorded chat fixture, and two traces with code in backticks.
    let code = dir.path().join("code-bundle");
    let mut w =
        vauban::bundle::BundleWriter::create(&code, vauban::bundle::WriteMode::CreateNew).unwrap();
    for (id, completion) in [
        ("c0", "Set `MAX_LEN` to 64 in `CONFIG`."),
        ("c1", "Use `ls -la` or `LS`? NO."),
    ] {
        let t = common::trace_completion(id, completion, None);
        w.add_trace(&t, &Default::default()).unwrap();
    }
    w.finish().unwrap();
    let completions = |bundle: &Path| -> Vec<(String, String)> {
        vauban::bundle::Bundle::open(bundle)
            .unwrap()
            .traces()
            .iter()
            .map(|t| {
                let completion = t
                    .artifacts_of(vauban::trace::ArtifactKind::Text)
                    .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
                    .map(|a| match &a.data {
                        vauban::trace::ArtifactData::Text { text } => text.clone(),
                        _ => unreachable!(),
                    })
                    .unwrap();
                (t.id.clone(), completion)
            })
            .collect()
    };
    let ratio = |text: &str| {
        let letters = text.chars().filter(|c| c.is_alphabetic()).count() as f64;
        let upper = text.chars().filter(|c| c.is_uppercase()).count() as f64;
        upper / letters
    };
    // With no config, and with `skip_code = true` (text between
    // backticks left out), as the guide documents.
    let chat = PathBuf::from(fixture());
    let mut seen = Vec::new();
    for bundle in [&chat, &code] {
        for (config, skip) in [(None, false), (Some("skip_code = true\n"), true)] {
            let o = run(bundle, config);
            assert!(o.status.success(), "{:?}", text(&o));
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            for (id, completion) in completions(bundle) {
                let prose: String = match skip {
                    true => completion.split('`').step_by(2).collect(),
                    false => completion.clone(),
                };
                let got = j["metrics"][&id]["uppercase_ratio"].as_f64();
                assert_eq!(got, Some(ratio(&prose)), "{id}");
                seen.push((id, skip, got));
            }
        }
    }
    // Skipping code changes what the code bundle's traces score.
    let of = |id: &str, skip| seen.iter().find(|s| s.0 == id && s.1 == skip).unwrap().2;
    assert!(of("c0", true) < of("c0", false));
    // A misspelt key: serde's words, with the key.
    let o = run(&chat, Some("skip_cod = true\n"));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o)
            .1
            .contains("unknown field `skip_cod`, expected `skip_code`"),
        "{}",
        text(&o).1
    );
}

/// A unit direction of the tiny model's width, as safetensors.
fn unit_direction(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("unit.safetensors");
    let w = common::tiny::HIDDEN;
    let v: Vec<f32> = (0..w).map(|i| ((i % 5) as f32 - 2.0) / 4.0).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let v: Vec<f32> = v.iter().map(|x| x / norm).collect();
    let t = candle_core::Tensor::new(v.as_slice(), &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

/// Traces the tiny model with `extra` flags; the prompt logits and the
/// completion's token ids and the trace.
fn tiny_trace(
    model: &Path,
    out: &Path,
    extra: &[&str],
) -> (Vec<f32>, Vec<u32>, vauban::trace::Trace) {
    let mut args = vec![
        "trace",
        "--model",
        s(model),
        "--raw",
        "--prompt",
        "hello world",
        "--logprobs",
    ];
    args.extend_from_slice(&["--raw-tensors", "--max-tokens", "4", "--out", s(out)]);
    args.extend_from_slice(extra);
    let o = vauban(&args);
    assert!(o.status.success(), "{:?}", text(&o));
    let bundle = vauban::bundle::Bundle::open(out).unwrap();
    let t = bundle.traces()[0].clone();
    let logits = t
        .artifacts_of(vauban::trace::ArtifactKind::Logits)
        .next()
        .unwrap()
        .id
        .clone();
    let values = bundle.tensor(&t.id, &logits).unwrap().to_f32_vec();
    let ids = t
        .artifacts_of(vauban::trace::ArtifactKind::Tokens)
        .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
        .map(|a| match &a.data {
            vauban::trace::ArtifactData::TokenIds { ids } => ids.clone(),
            _ => unreachable!(),
        })
        .unwrap();
    (values, ids, t)
}

#[test]
fn steer_gate_runs_inside_a_traced_generation() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny::write_gguf(
        &dir.path().join("tiny.gguf"),
        3,
        candle_core::quantized::GgmlDType::F32,
    );
    let d = unit_direction(dir.path());
    let gate = s(&wasm("vauban-plugin-steer-gate")).to_owned();
    let config = |name: &str, threshold: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("layers = [1]\nthreshold = {threshold}\n")).unwrap();
        p
    };
    let (all, never) = (config("all.toml", "-1e30"), config("never.toml", "1e30"));
    let bind = format!("refusal={}", s(&d));
    let (plain, plain_ids, _) = tiny_trace(&model, &dir.path().join("plain"), &[]);
    let native_spec = format!("layer=1,mode=subtract,direction={}", s(&d));
    let (native, native_ids, _) = tiny_trace(
        &model,
        &dir.path().join("native"),
        &["--intervene", &native_spec],
    );
    let (gated, gated_ids, trace) = tiny_trace(
        &model,
        &dir.path().join("gated"),
        &[
            "--policy",
            &gate,
            "--policy-config",
            s(&all),
            "--policy-direction",
            &bind,
        ],
    );
    let (quiet, quiet_ids, _) = tiny_trace(
        &model,
        &dir.path().join("quiet"),
        &[
            "--policy",
            &gate,
            "--policy-config",
            s(&never),
            "--policy-direction",
            &bind,
        ],
    );
    // A gate open on every token is the native subtraction; a closed gate
    // changes nothing, bit for bit.
    assert!(
        max_diff(&gated, &native) < 1e-5,
        "{}",
        max_diff(&gated, &native)
    );
    assert_eq!(gated_ids, native_ids);
    assert!(
        max_diff(&native, &plain) > 1e-3,
        "the direction must matter for this test"
    );
    assert_eq!(quiet, plain);
    assert_eq!(quiet_ids, plain_ids);

    // The trace records what the policy did: one decision per pass.
    let record = trace
        .artifacts_of(vauban::trace::ArtifactKind::InterventionResult)
        .find(|a| a.labels.contains_key("policy"))
        .expect("a policy record");
    assert!(record.labels["policy"].starts_with("vauban-plugin-steer-gate 0.1.0"));
    let vauban::trace::ArtifactData::Record { value } = &record.data else {
        panic!()
    };
    let passes = 1 + gated_ids.len() as u64 - 1;
    assert_eq!(value["log"]["decisions"].as_u64(), Some(passes), "{value}");
    assert_eq!(
        value["log"]["tokens_changed_decode"].as_u64(),
        Some(passes - 1),
        "{value}"
    );
    assert_eq!(value["watches"][0]["layers"], serde_json::json!([1]));

    // A direction the policy needs but nobody bound is named.
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "hi",
        "--policy",
        &gate,
        "--policy-config",
        s(&all),
        "--out",
        s(&dir.path().join("x")),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("--policy-direction refusal=FILE"),
        "{:?}",
        text(&o)
    );
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
