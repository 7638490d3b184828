//! `vauban plugin test` (golden files: pass, fail with a diff, update) and
//! `vauban plugin inspect`, through the binary.

mod common;

use std::path::Path;
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
    // A missing golden file is a clear error, not a pass.
    let o = run(&[]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("cannot read --expect"),
        "{}",
        text(&o).1
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
fn inspect_names_world_version_needs_metrics_imports_and_sha256() {
    let plugin = wasm("vauban-plugin-logprob");
    let o = vauban(&["plugin", "inspect", s(&plugin), "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["world"], "scorer");
    assert_eq!(j["wit"], "vauban:plugin@0.1.0");
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
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("evil.json");
    std::fs::write(&config, r#"{"attack": "loop"}"#).unwrap();
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("vauban-test-evil")),
        "--traces",
        &fixture(),
        "--config",
        s(&config),
        "--deadline-ms",
        "200",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o)
            .1
            .contains("timeout: still running after the 200ms deadline"),
        "{:?}",
        text(&o)
    );
}

#[test]
fn the_example_third_party_scorer_runs_as_documented() {
    let o = vauban(&[
        "plugin",
        "test",
        s(&wasm("uppercase-scorer")),
        "--traces",
        &fixture(),
        "--json",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bundle = vauban::bundle::Bundle::open(root().join("tests/fixtures/smollm2-chat")).unwrap();
    for t in bundle.traces() {
        let completion = t
            .artifacts_of(vauban::trace::ArtifactKind::Text)
            .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
            .map(|a| match &a.data {
                vauban::trace::ArtifactData::Text { text } => text.clone(),
                _ => unreachable!(),
            })
            .unwrap();
        let letters = completion.chars().filter(|c| c.is_alphabetic()).count() as f64;
        let upper = completion.chars().filter(|c| c.is_uppercase()).count() as f64;
        assert_eq!(
            j["metrics"][&t.id]["uppercase_ratio"].as_f64(),
            Some(upper / letters),
            "{}",
            t.id
        );
    }
}
