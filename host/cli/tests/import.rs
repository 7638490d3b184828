//! `vauban import inspect`: logs Inspect wrote (fixtures from the tool, and,
//! where Inspect's environment is installed, a task run against `vauban
//! serve` in the test) become trace bundles that `vauban diff` compares by
//! sample id, with the paired test an independent computation from the
//! logs gives.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{arg as s, output_text as said, run_vauban as vauban};
use serde_json::Value;
use vauban::bundle::Bundle;
use vauban::trace::{ArtifactData, ArtifactKind as K};

fn fixture(name: &str) -> PathBuf {
    common::plugins::root()
        .join("tests/fixtures/inspect")
        .join(name)
}

fn import(log: &Path, out: &Path) -> std::process::Output {
    vauban(&["import", "inspect", s(log), "--out", s(out)])
}

/// `vauban import TOOL LOG` that must be refused (exit code 1): its stderr.
fn refused(tool: &str, log: &Path, dir: &Path) -> String {
    let o = vauban(&["import", tool, s(log), "--out", s(&dir.join("never"))]);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The metric `name` of trace `id`, as the bundle holds it.
fn metric(b: &Bundle, id: &str, name: &str) -> Option<f64> {
    let t = b.traces().iter().find(|t| t.id == id)?;
    t.artifacts_of(K::Metric).find_map(|a| match &a.data {
        ArtifactData::Scalar { name: n, value, .. } if n == name => Some(*value),
        _ => None,
    })
}

#[test]
fn inspect_logs_import_with_their_samples_scores_and_provenance() {
    let dir = tempfile::tempdir().unwrap();
    // 0.3.285, zstd members: 4 samples × 2 epochs, and one that errored.
    let log = fixture("with-error.eval");
    let out = dir.path().join("with-error");
    let o = import(&log, &out);
    assert!(o.status.success(), "{}", said(&o));
    let b = Bundle::open(&out).unwrap();
    assert_eq!(b.traces().len(), 8);
    let from = b
        .manifest()
        .imported
        .clone()
        .expect("the import's provenance");
    assert_eq!(from.tool, "inspect");
    assert_eq!(from.tool_version.as_deref(), Some("0.3.285"));
    assert_eq!(from.format_version.as_deref(), Some("2"));
    assert_eq!(
        (from.task.as_str(), from.model.as_str()),
        ("offline", "mockllm/model")
    );
    assert_eq!(
        from.sha256,
        vauban::hash::sha256_hex(&std::fs::read(&log).unwrap())
    );
    let left: Vec<(&str, Option<u32>)> = from
        .missing
        .iter()
        .map(|m| (m.sample.as_str(), m.epoch))
        .collect();
    assert_eq!(left, [("boom", Some(1)), ("boom", Some(2))]);
    assert!(
        from.missing[0].reason.contains("deliberate failure"),
        "{:?}",
        from.missing[0]
    );
    // Epochs are the prompt's samples: `ID`, then `ID#1`; an integer id
    // stays its digits.
    for id in ["q1", "q1#1", "3", "3#1", "chat"] {
        assert!(b.traces().iter().any(|t| t.id == id), "no trace {id}");
    }
    let chat = b.traces().iter().find(|t| t.id == "chat").unwrap();
    assert_eq!(
        chat.request.text.as_deref(),
        Some("system: You are terse.\nuser: Say hello")
    );

    // Every kind of value, converted as Inspect's value_to_float does; a
    // dict is a metric per key; the output's log-probabilities kept.
    let out = dir.path().join("logprobs");
    assert!(import(&fixture("logprobs.eval"), &out).status.success());
    let b = Bundle::open(&out).unwrap();
    assert_eq!(metric(&b, "q2", "inspect.includes"), Some(1.0));
    assert_eq!(metric(&b, "q2", "inspect.length_ratio"), Some(2.0));
    assert_eq!(metric(&b, "q2", "inspect.multi.exact"), Some(0.0));
    assert_eq!(metric(&b, "q2", "inspect.multi.partial"), Some(0.5));
    let q2 = b.traces().iter().find(|t| t.id == "q2").unwrap();
    let lp = q2
        .artifacts_of(K::Logprobs)
        .next()
        .expect("the output's logprobs");
    let (_, values) = vauban::plugin::tensors::TensorSource::tensor(&b, "q2", &lp.id).unwrap();
    assert_eq!(&values[..2], &[-0.1, -0.2]);

    // 0.3.130, deflate members.
    let out = dir.path().join("old");
    let o = import(&fixture("v0.3.130-deflate.eval"), &out);
    assert!(o.status.success(), "{}", said(&o));
    assert_eq!(
        Bundle::open(&out)
            .unwrap()
            .manifest()
            .imported
            .as_ref()
            .unwrap()
            .tool_version
            .as_deref(),
        Some("0.3.130")
    );

    // The archive and the JSON form of one log give the same traces; an
    // unscored value (NaN in the file) is no metric.
    let (a, j) = (
        dir.path().join("values-eval"),
        dir.path().join("values-json"),
    );
    assert!(import(&fixture("values.eval"), &a).status.success());
    let o = import(&fixture("values.json"), &j);
    assert!(o.status.success(), "{}", said(&o));
    let (a, j) = (Bundle::open(&a).unwrap(), Bundle::open(&j).unwrap());
    let metrics = |b: &Bundle| -> Vec<(String, Option<f64>)> {
        b.traces()
            .iter()
            .map(|t| (t.id.clone(), metric(b, &t.id, "inspect.odd_values")))
            .collect()
    };
    assert_eq!(metrics(&a), metrics(&j));
    assert!(
        metrics(&a).iter().any(|(_, v)| v.is_none()),
        "the unscored sample has no value"
    );
    assert!(
        metrics(&a).iter().any(|(_, v)| *v == Some(0.25)),
        "a numeric string"
    );
}

#[test]
fn bad_logs_are_refused_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |log: &Path, wants: &[&str]| {
        let err = refused("inspect", log, dir.path());
        assert!(
            err.contains(&log.display().to_string()),
            "names the file: {err}"
        );
        for w in wants {
            assert!(err.contains(w), "{w:?} not in {err}");
        }
    };
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    refused(&text, &["not an Inspect log"]);
    let whole = std::fs::read(fixture("with-error.eval")).unwrap();
    let cut = dir.path().join("cut.eval");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    refused(&cut, &["not a readable .eval archive"]);
    let json = std::fs::read_to_string(fixture("values.json")).unwrap();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, json.replacen("\"version\": 2", "\"version\": 3", 1)).unwrap();
    refused(
        &newer,
        &["format version 3", "inspect_ai 0.3.285", "reads version 2"],
    );
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"version": 2, "results": {}}"#).unwrap();
    refused(&other, &["no `eval`"]);
    // The bundle is never written over.
    let out = dir.path().join("taken");
    std::fs::create_dir(&out).unwrap();
    let o = import(&fixture("values.eval"), &out);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
}

/// Two logs of one task compared by sample id: the samples one log left
/// out are stated in the report, the recorded scores compared without a
/// scorer or a config.
#[test]
fn two_imported_logs_compare_by_sample_id() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert!(import(&fixture("logprobs.eval"), &a).status.success());
    assert!(import(&fixture("with-error.eval"), &b).status.success());
    let out = dir.path().join("diff");
    let o = vauban(&["diff", s(&a), s(&b), "--out", s(&out)]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        out.join("diff.toml").is_file(),
        "the comparison's config is written"
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let ids: Vec<&str> = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["category"].is_null())
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "inspect.includes",
            "inspect.match",
            "inspect.length_ratio",
            "inspect.multi.exact",
            "inspect.multi.partial"
        ]
    );
    let includes = &r["metric_deltas"][0];
    assert_eq!(includes["n"], 4);
    assert_eq!(includes["scorer"], "inspect:includes");
    let limits = r["limitations"].to_string();
    assert!(
        limits.contains("candidate log's 2 sample(s) that became no trace"),
        "{limits}"
    );
    assert!(
        limits.contains("2 recorded samples (epochs) per prompt"),
        "{limits}"
    );

    // The written config, with one of vauban's scorers added, runs that
    // scorer on the imported text beside Inspect's scores.
    let mut text = std::fs::read_to_string(out.join("diff.toml")).unwrap();
    text.push_str(&format!(
        "\n[[scorers]]\npath = \"{}\"\n",
        common::plugins::wasm("vauban-plugin-refusal").display()
    ));
    let edited = dir.path().join("edited.toml");
    std::fs::write(&edited, text).unwrap();
    let again = dir.path().join("again");
    let o = vauban(&[
        "diff",
        s(&a),
        s(&b),
        "--config",
        s(&edited),
        "--out",
        s(&again),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("report.json")).unwrap()).unwrap();
    let ids: Vec<&str> = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"refusal_rate") && ids.contains(&"inspect.includes"),
        "{ids:?}"
    );
}

/// Inspect itself runs `tests/inspect/capitals.py` against the test model
/// behind `vauban serve`, twice (answers of up to 16 tokens, then cut to
/// 2: a stand-in for a worse model), once as a `.eval` archive and once
/// as `.json`; vauban imports both and compares them. The paired test's
/// p-value, the means and the pairing equal those computed from the same
/// logs by Inspect's own reader and score conversion
/// (`scripts/reference/inspect_paired.py`).
#[test]
fn logs_inspect_wrote_against_vauban_serve_compare_as_inspect_scores_them() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let Some(python) = common::reference::inspect_python() else {
        return;
    };
    let inspect = python.parent().unwrap().join("inspect");
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve::start(&model, &[]);
    let task_dir = common::plugins::root().join("tests/inspect");
    let run = |name: &str, max_tokens: &str, format: &str, extra: &[&str]| -> PathBuf {
        let logs = dir.path().join(name);
        let o = Command::new(&inspect)
            .args(["eval", "capitals.py", "--model", "openai-api/vauban/smol"])
            .args([
                "--temperature",
                "0",
                "--max-tokens",
                max_tokens,
                "--display",
                "none",
            ])
            .args(["--log-format", format, "--log-dir", s(&logs)])
            .args(extra)
            .current_dir(&task_dir)
            .env("VAUBAN_BASE_URL", &server.url)
            .env("VAUBAN_API_KEY", "none")
            .output()
            .unwrap();
        assert!(o.status.success(), "inspect eval: {}", said(&o));
        let log = std::fs::read_dir(&logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert_eq!(log.extension().unwrap(), format);
        log
    };
    let full = run("full", "16", "eval", &[]);
    // The second run's first 10 samples only: 2 are in one log alone.
    let cut = run("cut", "2", "json", &["--limit", "10"]);
    drop(server);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (log, out, traces) in [
        (&full, &a, "24 traces of 12 samples"),
        (&cut, &b, "20 traces of 10 samples"),
    ] {
        let o = import(log, out);
        assert!(o.status.success(), "{}", said(&o));
        assert!(said(&o).contains(traces), "{}", said(&o));
    }
    let out = dir.path().join("diff");
    let o = vauban(&["diff", s(&a), s(&b), "--out", s(&out)]);
    assert!(o.status.success(), "{}", said(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let d = &r["metric_deltas"][0];
    assert_eq!(d["id"], "inspect.includes");
    let limits = r["limitations"].to_string();
    assert!(
        limits.contains("2 sample(s) held by one log only"),
        "{limits}"
    );

    let reference = Command::new(&python)
        .arg(common::plugins::root().join("scripts/reference/inspect_paired.py"))
        .args([s(&full), s(&cut), "includes"])
        .output()
        .unwrap();
    assert!(reference.status.success(), "{}", said(&reference));
    let want: Value = serde_json::from_slice(&reference.stdout).unwrap();
    println!(
        "Inspect's reader: {want}\nvauban: n {} means {} → {} p {} ({})",
        d["n"], d["baseline_mean"], d["candidate_mean"], d["p_value"], d["test"]
    );
    assert_eq!(d["n"], want["n"]);
    assert_eq!(want["epochs"], serde_json::json!([[2], [2]]));
    for (ours, theirs) in [
        ("baseline_mean", "baseline_mean"),
        ("candidate_mean", "candidate_mean"),
    ] {
        let (x, y) = (d[ours].as_f64().unwrap(), want[theirs].as_f64().unwrap());
        assert!((x - y).abs() < 1e-12, "{ours}: {x} vs {y}");
    }
    let p = want["p_value"]
        .as_f64()
        .expect("0/1 means: McNemar's exact test");
    assert_eq!(d["test"], "mcnemar_exact");
    assert!(
        (d["p_value"].as_f64().unwrap() - p).abs() < 1e-12,
        "{} vs {p}",
        d["p_value"]
    );
    // Cut to 2 tokens, the answers lose their words: a change the test sees.
    assert!(want["down"].as_u64().unwrap() > 0, "{want}");
}

fn promptfoo_fixture(name: &str) -> PathBuf {
    common::plugins::root()
        .join("tests/fixtures/promptfoo")
        .join(name)
}

/// A promptfoo results file becomes one bundle per provider (and prompt):
/// each test a trace, a repeat a further sample, pass/fail and scores as
/// metrics; errored calls are left out with the reason, and a provider
/// all of whose calls failed gets no bundle; the two providers of one
/// eval compare by test.
#[test]
fn promptfoo_results_import_per_provider_and_compare_by_test() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pf");
    let o = vauban(&[
        "import",
        "promptfoo",
        s(&promptfoo_fixture("two-providers.json")),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let (long, short) = (out.join("smol-long"), out.join("smol-b-short"));
    let b = Bundle::open(&long).unwrap();
    assert_eq!(b.traces().len(), 8);
    let from = b.manifest().imported.clone().unwrap();
    assert_eq!(from.tool, "promptfoo");
    assert_eq!(from.tool_version.as_deref(), Some("0.121.20"));
    assert_eq!(from.format_version.as_deref(), Some("3"));
    assert_eq!(from.model, "smol-long");
    // The test is known by its description.
    let t = b
        .traces()
        .iter()
        .find(|t| t.id == "capital_of_France")
        .expect("a test by description");
    assert_eq!(
        t.request.text.as_deref(),
        Some("Answer briefly: What is the capital of France?")
    );
    assert!(metric(&b, "capital_of_France", "promptfoo.pass").is_some());

    let diff = dir.path().join("diff");
    let o = vauban(&["diff", s(&long), s(&short), "--out", s(&diff)]);
    assert!(o.status.success(), "{}", said(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(diff.join("report.json")).unwrap()).unwrap();
    let pass = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "promptfoo.pass")
        .expect("the pass rate compared");
    assert_eq!(pass["n"], 8);
    assert_eq!(pass["test"], "mcnemar_exact");

    // Repeats are samples; prompts with one provider are columns of their own.
    let out = dir.path().join("repeats");
    let o = vauban(&[
        "import",
        "promptfoo",
        s(&promptfoo_fixture("two-prompts-repeats.json")),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let columns = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(columns, 4, "2 prompts × 2 providers");
    assert!(
        said(&o).contains("6 traces of 5 samples"),
        "a repeated test: {}",
        said(&o)
    );

    // A dead provider: its calls left out, no bundle, the live one imported.
    let out = dir.path().join("errors");
    let o = vauban(&[
        "import",
        "promptfoo",
        s(&promptfoo_fixture("errors.json")),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        said(&o).contains("no bundle for `dead-server`"),
        "{}",
        said(&o)
    );
    assert!(said(&o).contains("ECONNREFUSED"), "{}", said(&o));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);

    // By position: tests known by their order, and the report says so.
    let out = dir.path().join("by-position");
    let o = vauban(&[
        "import",
        "promptfoo",
        s(&promptfoo_fixture("two-providers.json")),
        "--out",
        s(&out),
        "--by-position",
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let b = Bundle::open(out.join("smol-long")).unwrap();
    assert!(b.manifest().imported.as_ref().unwrap().by_position);
    assert!(b.traces().iter().any(|t| t.id == "test-1"), "ids by order");
    let diff = dir.path().join("diff-by-position");
    let o = vauban(&[
        "diff",
        s(&out.join("smol-long")),
        s(&out.join("smol-b-short")),
        "--out",
        s(&diff),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(diff.join("report.json")).unwrap()).unwrap();
    assert!(
        r["limitations"]
            .to_string()
            .contains("known by their position"),
        "{}",
        r["limitations"]
    );

    // Another results format is refused, naming it and promptfoo's version.
    let text = std::fs::read_to_string(promptfoo_fixture("two-providers.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut newer = v.clone();
    newer["results"]["version"] = 4.into();
    let path = dir.path().join("newer.json");
    std::fs::write(&path, newer.to_string()).unwrap();
    let err = refused("promptfoo", &path, dir.path());
    assert!(
        err.contains("results format version 4") && err.contains("promptfoo 0.121.20"),
        "{err}"
    );
}

fn lm_eval_samples(run: &str) -> PathBuf {
    let dir = common::plugins::root()
        .join("tests/fixtures/lm-eval")
        .join(run);
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("samples_")
        })
        .unwrap()
}

/// lm_eval's samples: each document a trace (a choice task's output its
/// most likely choice), each metric per filter; the version and model from
/// the results file beside it; two runs compare by document, and each
/// side's mean is the aggregate lm_eval itself wrote in its results file.
#[test]
fn lm_eval_samples_import_and_compare_as_lm_eval_aggregates_them() {
    let dir = tempfile::tempdir().unwrap();
    let import = |run: &str| {
        let out = dir.path().join(run);
        let o = vauban(&[
            "import",
            "lm-eval",
            s(&lm_eval_samples(run)),
            "--out",
            s(&out),
        ]);
        assert!(o.status.success(), "{}", said(&o));
        out
    };
    let (a, b) = (import("gen_run1"), import("gen_run2"));
    let bundle = Bundle::open(&a).unwrap();
    let from = bundle.manifest().imported.clone().unwrap();
    assert_eq!(
        (from.tool.as_str(), from.tool_version.as_deref()),
        ("lm-eval", Some("0.4.13"))
    );
    assert_eq!(
        (from.task.as_str(), from.model.as_str()),
        ("vb_gen", "smol")
    );
    assert_eq!(bundle.traces().len(), 10);
    let mc = import("mc_run1");
    let mc = Bundle::open(&mc).unwrap();
    let t0 = mc.traces().iter().find(|t| t.id == "0").unwrap();
    let output = t0
        .artifacts_of(K::Text)
        .find(|a| a.labels.get("role").map(String::as_str) == Some("completion"))
        .unwrap();
    assert!(
        matches!(&output.data, ArtifactData::Text { text } if text == " Paris"),
        "the most likely choice"
    );

    let out = dir.path().join("diff");
    let o = vauban(&["diff", s(&a), s(&b), "--out", s(&out)]);
    assert!(o.status.success(), "{}", said(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let d = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "lm_eval.exact_match.strip")
        .expect("the strip filter's exact match compared");
    let aggregate = |run: &str| -> f64 {
        let dir = lm_eval_samples(run).parent().unwrap().to_path_buf();
        let results = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("results_")
            })
            .unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(results).unwrap()).unwrap();
        v["results"]["vb_gen"]["exact_match,strip"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(d["n"], 10);
    assert!(
        (d["baseline_mean"].as_f64().unwrap() - aggregate("gen_run1")).abs() < 1e-12,
        "{d}"
    );
    assert!(
        (d["candidate_mean"].as_f64().unwrap() - aggregate("gen_run2")).abs() < 1e-12,
        "{d}"
    );

    // An older layout is refused, naming the field and the version.
    let old = dir.path().join("samples_vb_gen_2024-01-01T00-00-00.jsonl");
    let text = std::fs::read_to_string(lm_eval_samples("gen_run1")).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let mut without = line.as_object().unwrap().clone();
    without.remove("filter");
    std::fs::write(&old, Value::Object(without).to_string()).unwrap();
    let err = refused("lm-eval", &old, dir.path());
    assert!(
        err.contains("line 1: no `filter`") && err.contains("0.4.7"),
        "{err}"
    );
}
