//! `vauban run`, `diff` and `validate` end to end, through the binary, on
//! the tiny llama the tests build and the workspace's plugins built from
//! source: the three report files, the schema, the claim cap, gates and
//! exit codes, resuming from recorded traces, and replay.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::quantized::GgmlDType;
use common::output_text as text;
use common::{plugins, report_fixture, tiny};
use serde_json::Value;

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

fn vauban(args: &[&str]) -> Output {
    let plugin_dir = plugins::wasm("vauban-plugin-refusal")
        .parent()
        .unwrap()
        .to_path_buf();
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .env("VAUBAN_PLUGIN_DIR", plugin_dir)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("vauban-run-report-cache"),
        )
        .output()
        .expect("run vauban")
}

/// A config on the tiny model: 4 prompts in 2 categories, the candidate
/// ablating a fixed direction after every block; `observe` and the extra
/// TOML are the test's.
fn setup(observe: &str, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::F32);
    // A direction along the first two hidden units.
    let mut v = vec![0f32; tiny::HIDDEN];
    v[0] = 3.0;
    v[1] = 4.0;
    let t = candle_core::Tensor::from_vec(v, tiny::HIDDEN, &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(
        &std::collections::HashMap::from([("direction".to_string(), t)]),
        dir.path().join("d.safetensors"),
    )
    .unwrap();
    let overclaim = plugins::wasm("vauban-test-overclaim");
    let evil = plugins::wasm("vauban-test-evil");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        format!(
            r#"output = "out"
seed = 3

[suite]
prompts = [
  {{ id = "a1", text = "the cat", category = "animals", expected_behavior = "comply" }},
  {{ id = "a2", text = "a hat", category = "animals", redaction = "redacted" }},
  {{ id = "t1", text = "then in", category = "things" }},
  {{ id = "t2", text = "the mat", category = "things", redaction = "omitted" }},
]

[observe]
max_tokens = 5
prompt_form = "raw"
{observe}

[baseline]
model = "{model}"

[candidate]
model = "{model}"
[candidate.transform]
kind = "ablate"
direction = "d.safetensors"

[[scorers]]
plugin = "refusal"
[[scorers]]
plugin = "behavior"
[[scorers]]
path = "{evil}"
config = {{ attack = "panic" }}

[[claim_mappers]]
plugin = "claims-default"
[[claim_mappers]]
path = "{overclaim}"

{extra}
"#,
            model = model.display(),
            overclaim = overclaim.display(),
            evil = evil.display(),
        ),
    )
    .unwrap();
    Setup { dir, config }
}

fn report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn strength_rank(s: &str) -> usize {
    [
        "behavioral_profile",
        "black_box_behavioral_diff",
        "distributional_diff",
        "weight_diff",
        "activation_diagnostic",
        "model_change_audit",
    ]
    .iter()
    .position(|x| *x == s)
    .unwrap_or_else(|| panic!("unknown strength {s}"))
}

/// Every claim within the access level's cap, the overclaiming mapper's
/// claim downgraded with its reasons.
fn claims_within_cap(r: &Value) {
    let cap = strength_rank(r["access"]["claim_strength"].as_str().unwrap());
    let claims = r["claims"].as_array().unwrap();
    assert!(!claims.is_empty(), "no claims: {r:#}");
    for c in claims {
        if c["status"] != "rejected" {
            assert!(
                strength_rank(c["strength"].as_str().unwrap()) <= cap,
                "claim above the cap: {c:#}"
            );
        }
    }
    let over = claims
        .iter()
        .find(|c| c["proposed_strength"] == "model_change_audit")
        .expect("the overclaiming mapper's claim");
    assert_ne!(over["status"], "accepted", "{over:#}");
    assert!(
        !over["reasons"].as_array().unwrap().is_empty(),
        "a downgrade without reasons: {over:#}"
    );
    // It cites metric deltas (and an intervention record when the run has
    // one): whatever the traces hold, that supports no more than a
    // distributional diff.
    assert!(
        strength_rank(over["strength"].as_str().unwrap()) <= strength_rank("distributional_diff"),
        "{over:#}"
    );
    if let Some(iv) = r["access"]["interventions"]
        .as_array()
        .and_then(|a| a.first())
    {
        // Where the traces alone would allow more, the citations are why not.
        assert!(
            cap <= strength_rank("distributional_diff")
                || over["reasons"].as_array().unwrap().iter().any(|x| x
                    .as_str()
                    .unwrap()
                    .contains("the strongest level its evidence supports")),
            "{over:#}"
        );
        let layer = iv["layer"].as_u64().unwrap();
        assert_eq!(
            over["scope"]["layers"],
            serde_json::json!([layer]),
            "{over:#}"
        );
        assert_eq!(
            over["scope"]["sides"],
            serde_json::json!(["candidate"]),
            "{over:#}"
        );
    }
}

#[test]
fn a_run_writes_three_reports_within_the_evidence_and_resumes_from_its_traces() {
    let s = setup(
        "logprobs = true\nlayers = [0, 2]\nraw_tensors = true",
        r#"[[gates]]
name = "impossible"
metric = "output_length_chars"
max_delta = -1000.0
severity = "fail"

[[gates]]
metric = "refusal_rate"
max_delta = 0.5
severity = "warn"

[report]
claim_strength = "model_change_audit"
"#,
    );
    let o = vauban(&["run", s.config.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "a failed gate exits 3: {}",
        text(&o)
    );
    let out = s.dir.path().join("out");
    for f in ["report.json", "report.md", "report.html"] {
        assert!(out.join(f).is_file(), "{f} missing: {}", text(&o));
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("gate       impossible: ✘ fail"),
        "{}",
        text(&o)
    );

    let r = report(&out);
    report_fixture::validate_against_schema(&r);
    assert_eq!(r["access"]["level"], "activations", "{:#}", r["access"]);
    claims_within_cap(&r);
    // an untrusted scorer that traps is reported; the run carried on
    let failures = r["evidence"]["plugin_failures"].as_array().unwrap();
    assert!(
        failures
            .iter()
            .any(|f| f["failure"] == "trap" && f["plugin"] == "vauban_test_evil"),
        "{failures:#?}"
    );
    // asked for more than the evidence reaches: said so
    assert!(
        r["limitations"].as_array().unwrap().iter().any(|l| l
            .as_str()
            .unwrap()
            .contains("asks for model_change_audit, but")),
        "{:#}",
        r["limitations"]
    );
    let gates: Vec<&str> = r["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(gates, ["fail", "pass"]);
    // deltas: overall and per category, with the test named
    let ids: Vec<&str> = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    for id in [
        "refusal_rate",
        "refusal_rate@animals",
        "refusal_rate@things",
        "output_length_chars",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    // the ablation changes activations: projections for both sides, and KL > 0
    let af = &r["activation_findings"];
    assert_eq!(af["layers"], serde_json::json!([0, 2]), "{af:#}");
    assert_eq!(af["series"].as_array().unwrap().len(), 4, "{af:#}");
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    assert!(kl > 0.0 && kl.is_finite(), "{kl}");
    // redaction: no redacted or omitted prompt text, no redacted outputs
    let json = std::fs::read_to_string(out.join("report.json")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for ex in r["examples"].as_array().unwrap() {
        assert_ne!(ex["prompt_id"], "t2", "an omitted prompt is an example");
        if ex["prompt_id"] == "a2" {
            assert_eq!(ex["prompt"], "[redacted animals prompt]");
            assert!(ex["baseline_output"].is_null() && ex["candidate_output"].is_null());
        }
    }
    assert!(!html.contains("a hat") && !html.contains(">the mat<"));
    // the prompt table: every prompt but the omitted one, in suite order,
    // shown as the examples show it, every metric on both sides
    let rows = r["prompts"].as_array().unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .map(|p| p["prompt_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a1", "a2", "t1"], "{:#}", r["prompts"]);
    let a2 = &rows[1];
    assert_eq!(a2["redaction"], "redacted");
    assert_eq!(a2["prompt"], "[redacted animals prompt]");
    for k in ["baseline_output", "candidate_output", "first_difference"] {
        assert!(a2[k].is_null(), "{k} of a redacted prompt: {a2:#}");
    }
    for row in [&rows[0], &rows[2]] {
        let (b, c) = (
            row["baseline_output"].as_str().unwrap(),
            row["candidate_output"].as_str().unwrap(),
        );
        let at = vauban::report::document::first_difference(b, c);
        assert_eq!(
            row["first_difference"].as_u64(),
            at.map(|a| a as u64),
            "{row:#}"
        );
        let refusal = row["metrics"]["refusal_rate"].as_array().unwrap();
        assert!(refusal.iter().all(Value::is_number), "{row:#}");
    }
    assert_eq!(rows[0]["prompt"], "the cat");
    // on the page: a row per prompt, the script allowed by its hash
    assert!(html.contains("<tbody data-id=\"a1\" data-category=\"animals\""));
    assert!(html.contains("<tbody data-id=\"a2\""));
    assert!(!html.contains("data-id=\"t2\""));
    assert!(html.contains("script-src 'sha256-"));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## 11. Every prompt"));
    assert!(!md.contains("a hat") && !md.contains("the mat"));
    // interventions recorded on the candidate: one record per block
    assert_eq!(r["interventions"][0]["side"], "candidate");
    assert_eq!(
        r["interventions"][0]["layers"],
        serde_json::json!([0, 1, 2])
    );

    // Resume: lose one finished trace (as an interrupted run would) and the
    // side bundles; the rerun reuses the rest and gives the same report.
    let cache = out.join("traces/cache");
    let first = std::fs::read_dir(&cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_dir_all(&first).unwrap();
    std::fs::remove_dir_all(out.join("traces/baseline")).unwrap();
    let o2 = vauban(&["run", s.config.to_str().unwrap()]);
    assert_eq!(o2.status.code(), Some(3), "{}", text(&o2));
    let r2 = report(&out);
    let reused = r2["reproducibility"]["bundles"]["baseline"]["reused"]
        .as_u64()
        .unwrap()
        + r2["reproducibility"]["bundles"]["candidate"]["reused"]
            .as_u64()
            .unwrap();
    assert_eq!(
        reused, 7,
        "8 traces, one lost: {:#}",
        r2["reproducibility"]["bundles"]
    );
    for key in [
        "metric_deltas",
        "claims",
        "examples",
        "prompts",
        "gates",
        "distribution",
        "activation_findings",
        "access",
    ] {
        // The re-recorded trace ran alone where it first ran in a batch of
        // four: with the tiny model's f32 weights the matrix library sums
        // in another order, so its numbers may move by f32 rounding.
        assert_close(&r[key], &r2[key], key);
    }
    let _ = json;

    // Replay: the same deltas and claims from the bundles, with no model.
    let replay_out = s.dir.path().join("replay");
    let o3 = vauban(&[
        "diff",
        out.join("traces/baseline").to_str().unwrap(),
        out.join("traces/candidate").to_str().unwrap(),
        "--config",
        s.config.to_str().unwrap(),
        "--out",
        replay_out.to_str().unwrap(),
    ]);
    assert_eq!(o3.status.code(), Some(3), "{}", text(&o3));
    let r3 = report(&replay_out);
    report_fixture::validate_against_schema(&r3);
    // The KL is computed from rows recorded in the traces, so the replay
    // gives everything the run that wrote the bundles (the resumed one)
    // gave: deltas, KL, claims, gates.
    for key in [
        "metric_deltas",
        "distribution",
        "activation_findings",
        "claims",
        "gates",
        "access",
        "examples",
        "prompts",
    ] {
        assert_eq!(r2[key], r3[key], "{key} differs between live and replay");
    }
    assert!(r3["distribution"]["per_prompt"].as_array().unwrap().len() == 4);
    assert!(
        r["claims"].as_array().unwrap().iter().any(|c| c["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("kl:"))),
        "a claim rests on the KL: {:#}",
        r["claims"]
    );
    // scores.jsonl: every prompt, both sides, every metric, same as the replay's.
    let scores = std::fs::read_to_string(out.join("scores.jsonl")).unwrap();
    let rows: Vec<Value> = scores
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refusal: Vec<&Value> = rows
        .iter()
        .filter(|r| r["metric"] == "refusal_rate")
        .collect();
    assert_eq!(refusal.len(), 8, "4 prompts x 2 sides: {scores}");
    assert!(
        refusal
            .iter()
            .all(|r| r["scorer"] == "vauban-plugin-refusal"),
        "{scores}"
    );
    assert_eq!(
        (
            refusal[0]["prompt_id"].as_str(),
            refusal[0]["side"].as_str()
        ),
        (Some("a1"), Some("baseline"))
    );
    assert_eq!(refusal[0]["category"], "animals");
    assert_eq!(
        scores,
        std::fs::read_to_string(replay_out.join("scores.jsonl")).unwrap()
    );

    // One side replayed, one live: the candidate from its recorded bundle
    // (`executor = "replay"`), the baseline run again. Greedy decoding
    // reproduces the baseline's continuations, so the candidate's recorded
    // scores of them still apply: the same deltas and the same KL.
    let recorded = s.dir.path().join("recorded-candidate");
    copy_dir(&out.join("traces/candidate"), &recorded);
    let config = std::fs::read_to_string(&s.config).unwrap();
    let i = config.find("[candidate]\nmodel = ").unwrap();
    let end = i + config[i..].find("[candidate.transform]").unwrap();
    let mixed = format!(
        "{}[candidate]\nexecutor = \"replay\"\nmodel = \"{}\"\n\n{}",
        &config[..i],
        recorded.display(),
        &config[end..]
    )
    .replace("output = \"out\"", "output = \"mixed\"");
    let mixed_config = s.dir.path().join("mixed.toml");
    std::fs::write(&mixed_config, mixed).unwrap();
    let o4 = vauban(&["run", mixed_config.to_str().unwrap()]);
    assert_eq!(o4.status.code(), Some(3), "{}", text(&o4));
    let r4 = report(&s.dir.path().join("mixed"));
    // Against the resumed run the candidate's bundle was copied from: one
    // of its traces may be the one re-recorded alone (see above), while
    // the baseline here runs in batches again, so numbers agree to f32
    // rounding. Which cached trace the resume lost follows the directory's
    // order, so an exact comparison passed or failed by that order.
    for key in ["metric_deltas", "distribution", "gates"] {
        assert_close(
            &r2[key],
            &r4[key],
            &format!("{key} with the candidate replayed"),
        );
    }
    // The recorded traces name the executor that made them.
    assert_eq!(r4["target_change"]["candidate"]["executor"], "candle");
}

/// `a` and `b` equal, numbers within f32 rounding (1e-6 absolute or 1e-5
/// relative: the KLs are sums over f32 log-probabilities near -10, each
/// good to about 1e-6, and a trace re-recorded alone on resume ran in a
/// batch the first time, where f32 products sum in another order; a first
/// token KL of 0.00397806 came back as 0.00397819); `at` names the place.
fn assert_close(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-6_f64.max(1e-5 * x.abs().max(y.abs())),
                "{at}: {x} against {y} after resuming"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths differ after resuming");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_close(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(x), keys(y), "{at}: keys differ after resuming");
            for (k, v) in x {
                assert_close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at} differs after resuming"),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Writes the tiny model's HF folder with one token renamed: the same
/// shapes, another vocabulary.
fn tiny_with_another_vocabulary(dir: &Path) -> PathBuf {
    let hf = tiny::write_hf(&dir.join("renamed"), 7);
    let path = hf.join("tokenizer.json");
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("\"</s>\""));
    std::fs::write(&path, json.replace("\"</s>\"", "\"</x>\"")).unwrap();
    hf
}

#[test]
fn sides_with_different_tokenizers_get_a_reason_instead_of_a_kl() {
    let s = setup("logprobs = true", "");
    let hf = tiny_with_another_vocabulary(s.dir.path());
    let config = std::fs::read_to_string(&s.config).unwrap();
    let i = config.find("[candidate]\nmodel = ").unwrap();
    let end = i + config[i..].find('\n').unwrap() + 1;
    let end = end + config[end..].find('\n').unwrap();
    let config = format!(
        "{}[candidate]\nmodel = \"{}\"{}",
        &config[..i],
        hf.display(),
        &config[end..]
    );
    std::fs::write(&s.config, config).unwrap();
    let o = vauban(&["run", s.config.to_str().unwrap()]);
    assert!(o.status.code() == Some(0), "{}", text(&o));
    let r = report(&s.dir.path().join("out"));
    report_fixture::validate_against_schema(&r);
    assert!(r["distribution"].is_null(), "{:#}", r["distribution"]);
    let why = r["distribution_unavailable"].as_str().unwrap();
    assert!(why.contains("tokenizers differ"), "{why}");
    let md = std::fs::read_to_string(s.dir.path().join("out/report.md")).unwrap();
    assert!(md.contains("tokenizers differ"), "{md}");
    assert!(
        r["limitations"].as_array().unwrap().iter().any(|l| l
            .as_str()
            .unwrap()
            .starts_with("no KL divergence: the two sides' tokenizers differ")),
        "{:#}",
        r["limitations"]
    );
}

#[test]
fn text_only_traces_never_claim_more_than_a_black_box_diff() {
    let s = setup("", "");
    let o = vauban(&["run", s.config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = report(&s.dir.path().join("out"));
    report_fixture::validate_against_schema(&r);
    assert_eq!(r["access"]["level"], "black_box");
    assert_eq!(r["access"]["claim_strength"], "black_box_behavioral_diff");
    claims_within_cap(&r);
    for c in r["claims"].as_array().unwrap() {
        assert!(strength_rank(c["strength"].as_str().unwrap()) <= 1, "{c:#}");
    }
    assert!(r["activation_findings"].is_null());
    assert!(r["distribution"].is_null());
}

#[test]
fn validate_points_at_typos_and_unknown_gate_metrics() {
    let s = setup("", "");
    let text0 = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(&s.config, text0.replace("max_tokens = 5", "max_tokns = 5")).unwrap();
    let o = vauban(&["validate", s.config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("run.toml:13:1: unknown field `max_tokns`"),
        "{err}"
    );
    assert!(err.contains("did you mean `max_tokens`?"), "{err}");

    std::fs::write(
        &s.config,
        format!("{text0}\n[[gates]]\nmetric = \"refusal_rat\"\nmax_delta = 0.1\n"),
    )
    .unwrap();
    let o = vauban(&["validate", s.config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("gates[0].metric: no scorer declares `refusal_rat`")
            && err.contains("did you mean `refusal_rate`?"),
        "{err}"
    );

    std::fs::write(&s.config, &text0).unwrap();
    let o = vauban(&["validate", s.config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("scorer vauban-plugin-refusal"));
}

/// `validate` refuses, naming the file and key, every value `run` would
/// refuse or quietly degrade, before any weights load.
#[test]
fn validate_refuses_what_run_would_refuse_naming_the_key() {
    let s = setup("", "");
    let text0 = std::fs::read_to_string(&s.config).unwrap();
    // Without the torch feature, `executor = "torch"` names the build to
    // make; with it, a GPU this machine lacks is refused by name.
    let torch_refusal = match cfg!(feature = "torch") {
        false => {
            "baseline.executor: `torch` is the Torch executor (libtorch), and this vauban was built without it"
        }
        true => "baseline.device: device `cuda:99`: libtorch sees",
    };
    // Likewise `executor = "mlx"`; with it, Metal on a machine without it.
    let mlx_refusal = match cfg!(feature = "mlx") {
        false => {
            "baseline.executor: `mlx` is the MLX executor (mlx-rs), and this vauban was built without it"
        }
        true => "baseline.device: device `metal`: this MLX was built without Metal",
    };
    let cases: [(&str, &str, &str); 20] = [
        (
            "max_tokens = 5",
            "max_tokens = 5\ntemperature = nan",
            "observe.temperature",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 5\ntemperature = -1.0",
            "observe.temperature",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 5\ntemperature = inf",
            "observe.temperature",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 0",
            "observe.max_tokens: 0 generates nothing",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 4294967296",
            "observe.max_tokens",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 5\nlayers = [0, 2, 40]",
            "observe.layers: layer 40 is out of range",
        ),
        (
            "max_tokens = 5",
            "max_tokens = 5\nstop = [\"\"]",
            "observe.stop[0]",
        ),
        (
            "direction = \"d.safetensors\"",
            "direction = \"d.safetensors\"\nalpha = 1e30",
            "candidate.transform.alpha",
        ),
        (
            "direction = \"d.safetensors\"",
            "direction = \"d.safetensors\"\nlayers = [7]",
            "candidate.transform.layers: layer 7 is out of range",
        ),
        (
            "[baseline]\n",
            "[baseline]\ndevice = \"cuda:99\"\n",
            "baseline.device",
        ),
        (
            "[baseline]\n",
            "[baseline]\nbatch = 0\n",
            "baseline.batch: 0",
        ),
        (
            "[baseline]\n",
            "[baseline]\nexecutor = \"replay\"\nbatch = 4\n",
            "baseline.batch: `batch` is a setting of the local executors (candle, torch, mlx), and this side's executor is `replay`",
        ),
        (
            "[baseline]\n",
            "[baseline]\nkv_cache = \"q8\"\n",
            "baseline.kv_cache: unknown variant `q8`, expected `f32` or `f16`",
        ),
        (
            "[baseline]\n",
            "[baseline]\nexecutor = \"replay\"\nkv_cache = \"f16\"\n",
            "baseline.kv_cache: `kv_cache` is a setting of executor = \"candle\"",
        ),
        (
            "[baseline]\n",
            "[baseline]\ndtype = \"bf16\"\n",
            "baseline.dtype: `dtype` is a setting of the torch and mlx executors, and this side's executor is `candle`",
        ),
        (
            "[baseline]\n",
            "[baseline]\nexecutor = \"torch\"\ndevice = \"cuda:99\"\n",
            torch_refusal,
        ),
        (
            "[baseline]\n",
            "[baseline]\nexecutor = \"mlx\"\ndevice = \"metal\"\n",
            mlx_refusal,
        ),
        (
            "[baseline]\n",
            "[baseline]\nexecutor = \"mlx-cuda\"\n",
            "baseline.executor: unknown variant `mlx-cuda`, expected one of `candle`, `torch`, `mlx`, `http`, `replay`",
        ),
        (
            "config = { attack = \"panic\" }",
            "config = { attack = \"panic\" }\nmemory_mib = 17592186044416",
            "scorers[2].memory_mib",
        ),
        (
            "config = { attack = \"panic\" }",
            "config = { attack = \"panic\" }\ndeadline_ms = 0",
            "scorers[2].deadline_ms",
        ),
    ];
    for (from, to, key) in cases {
        assert!(text0.contains(from), "{from}");
        std::fs::write(&s.config, text0.replacen(from, to, 1)).unwrap();
        let o = vauban(&["validate", s.config.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{to}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("run.toml") && err.contains(key), "{to}: {err}");
    }

    // A suite file that is a FIFO is refused, not read forever.
    #[cfg(unix)]
    {
        let fifo = s.dir.path().join("fifo.jsonl");
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let a = text0.find("[suite]").unwrap();
        let b = text0.find("[observe]").unwrap();
        let with_fifo = format!(
            "{}[suite]\nfile = \"fifo.jsonl\"\n\n{}",
            &text0[..a],
            &text0[b..]
        );
        std::fs::write(&s.config, with_fifo).unwrap();
        let o = vauban(&["validate", s.config.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("fifo.jsonl is not a regular file"), "{err}");
    }
}

#[test]
fn the_quickstart_config_is_valid() {
    let models = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    if !models.join("SmolLM2-135M-Instruct.Q4_1.gguf").exists() {
        eprintln!("skipping: the SmolLM2 model is absent; run `bash scripts/fetch-model.sh`");
        return;
    }
    let config = plugins::root().join("examples/quickstart.toml");
    let o = vauban(&["validate", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("16 prompts, 3 categories"), "{stdout}");
    assert!(
        stdout.contains("claims up to activation_diagnostic"),
        "{stdout}"
    );
}

#[test]
fn two_system_prompts_on_one_model_give_a_kl_from_each_sides_own_prompt() {
    // The same weights on both sides; only the system message differs. Each
    // side is teacher-forced after its own rendered prompt, so the KL sees
    // the change (scoring the candidate on the baseline's prompt gave 0).
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("system.toml");
    std::fs::write(
        &config,
        format!(
            r#"output = "out"

[suite]
prompts = [
  {{ id = "q1", text = "What is the capital of France?", category = "facts" }},
  {{ id = "q2", text = "Name a colour.", category = "facts" }},
]

[observe]
logprobs = true
top_logprobs = 64
max_tokens = 3

[baseline]
model = "{model}"
weights = "f32"
system = "You are a helpful assistant."

[candidate]
model = "{model}"
weights = "f32"
system = "You are a pirate. Answer every question in pirate speech, with many arrr."

[[scorers]]
plugin = "behavior"
"#,
            model = model.display()
        ),
    )
    .unwrap();
    let o = vauban(&["run", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = report(&dir.path().join("out"));
    report_fixture::validate_against_schema(&r);
    let d = &r["distribution"];
    assert_eq!(d["top_k"], 64, "{d:#}");
    for p in d["per_prompt"].as_array().unwrap() {
        let first = p["first_token_kl"].as_f64().unwrap();
        assert!(first > 0.0 && first.is_finite(), "{p:#}");
    }
    let rest = d["baseline_rest_mass"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&rest), "{rest}");
}

/// A suite file is read as editors write it (a UTF-8 byte-order mark is
/// fine) and its errors point into the suite file, not the config.
#[test]
fn suite_file_errors_name_the_suite_file_and_line() {
    let s = setup("", "");
    let original = std::fs::read_to_string(&s.config).unwrap();
    let start = original.find("[suite]").unwrap();
    let end = original.find("[observe]").unwrap();
    let config = format!(
        "{}[suite]\nfile = \"suite.jsonl\"\n\n{}",
        &original[..start],
        &original[end..]
    );
    std::fs::write(&s.config, config).unwrap();
    let suite = s.dir.path().join("suite.jsonl");
    let validate = || vauban(&["validate", "--offline", s.config.to_str().unwrap()]);

    // A byte-order mark, as Windows editors write it: accepted.
    let good = "{\"id\": \"a\", \"text\": \"the cat\"}\n{\"id\": \"b\", \"text\": \"a hat\"}\n";
    std::fs::write(&suite, format!("\u{feff}{good}")).unwrap();
    let o = validate();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // A duplicate id: the suite file and the line of the second one.
    std::fs::write(
        &suite,
        format!("{good}{{\"id\": \"a\", \"text\": \"again\"}}\n"),
    )
    .unwrap();
    let o = validate();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("suite.jsonl:3:") && err.contains("used twice"),
        "{err}"
    );
    assert!(
        !err.contains("run.toml"),
        "the config is not the place: {err}"
    );

    // Bytes that are not UTF-8: line, column and byte offset.
    let mut bytes = b"{\"id\": \"a\", \"text\": \"ok\"}\n{\"id\": \"b\", \"text\": \"caf".to_vec();
    bytes.extend([0xe9, b'"', b'}', b'\n']);
    std::fs::write(&suite, bytes).unwrap();
    let o = validate();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("suite.jsonl:2:") && err.contains("byte 0xe9 at byte offset 50 (column 25)"),
        "{err}"
    );
}

/// `validate` reads every direction file the transformation names, as
/// `run` would, before any weights load, and refuses one that is missing,
/// not safetensors, or of the wrong width, at its key.
#[test]
fn validate_reads_the_direction_files_a_run_would_read() {
    let s = setup("", "");
    let original = std::fs::read_to_string(&s.config).unwrap();
    // A file of ones in `shape`, under `tensor`.
    let save = |file: &str, tensor: &str, shape: &[usize]| {
        let t =
            candle_core::Tensor::ones(shape, candle_core::DType::F32, &candle_core::Device::Cpu)
                .unwrap();
        candle_core::safetensors::save(
            &std::collections::HashMap::from([(tensor.to_string(), t)]),
            s.dir.path().join(file),
        )
        .unwrap();
    };
    save("wide.safetensors", "direction", &[tiny::HIDDEN + 1]);
    save("basis.safetensors", "basis", &[2, tiny::HIDDEN]);
    std::fs::write(s.dir.path().join("notes.safetensors"), "0.1 0.2 0.3 0.4\n").unwrap();
    let transform = "kind = \"ablate\"\ndirection = \"d.safetensors\"";
    assert!(original.contains(transform));
    let cases = [
        (
            "kind = \"ablate\"\ndirection = \"wide.safetensors\"".to_owned(),
            vec![
                "candidate.transform.direction",
                "wide.safetensors has width 65 but",
                "has hidden size 64",
            ],
        ),
        (
            "kind = \"ablate\"\ndirection = \"notes.safetensors\"".to_owned(),
            vec![
                "candidate.transform.direction",
                "its first 8 bytes give a header length of",
            ],
        ),
        (
            "kind = \"intervene\"\ninterventions = [\"layer=1,mode=subtract,direction=absent.safetensors\"]"
                .to_owned(),
            vec!["candidate.transform.interventions[0]", "absent.safetensors"],
        ),
        (
            "kind = \"steer\"\ndirection = \"basis.safetensors\"\nlayers = [1]".to_owned(),
            vec!["candidate.transform.direction", "holds 2 rows"],
        ),
        (
            "kind = \"steer\"\ndirection = \"d.safetensors\"".to_owned(),
            vec!["candidate.transform.layers", "kind `steer` needs `layers`"],
        ),
    ];
    for (replacement, needles) in cases {
        std::fs::write(&s.config, original.replace(transform, &replacement)).unwrap();
        let o = vauban(&["validate", "--offline", s.config.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{replacement}: {err}");
        for n in needles {
            assert!(err.contains(n), "{replacement}: no {n:?} in {err}");
        }
    }
}
