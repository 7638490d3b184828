//! Judged scorers (issue 37): a sandboxed scorer asks judges through the
//! host, the answers are kept and replayed, and a scorer that misuses its
//! judges ends in a typed error or typed refusals within its budget, with
//! the host alive and the other scorers unaffected.
//!
//! The judge is the tiny model the tests build (its verdicts mean nothing;
//! what is checked is the plumbing), and, where the test model is present,
//! SmolLM2 answering the first-party rubric on the labelled replies.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use candle_core::quantized::GgmlDType;
use common::plugins::wasm;
use common::tiny;
use common::trace_completion;
use vauban::executor::{LocalBackend, LocalModel as _, ModelSpec};
use vauban::judge::LocalJudge;
use vauban::judge::service::{Budget, JudgeModel, JudgeService};
use vauban::judge::store::JudgeStore;
use vauban::plugin::scorer::{Judges, ScoreOutcome};
use vauban::plugin::{
    Failure, HostOptions, PluginError, PluginHost, SandboxOptions, Scorer, World,
};
use vauban::trace::Trace;

fn host() -> PluginHost {
    PluginHost::new(HostOptions::default()).expect("plugin host")
}

fn abuse(host: &PluginHost, mode: &str, sandbox: SandboxOptions) -> Scorer {
    let plugin = host.load(wasm("vauban-test-judge-abuse")).unwrap();
    Scorer::new(plugin, &format!(r#"{{"mode": "{mode}"}}"#), sandbox).unwrap()
}

fn traces() -> Vec<Trace> {
    ["Sure, here it is.", "No.", "Thank you for asking!"]
        .iter()
        .enumerate()
        .map(|(i, c)| trace_completion(&format!("t{i}"), c, None))
        .collect()
}

fn tiny_judge(dir: &std::path::Path) -> JudgeModel {
    let model = tiny::write_gguf(&dir.join("judge.gguf"), 3, GgmlDType::F32);
    let exec = LocalBackend::load(&ModelSpec::new(&model)).unwrap();
    JudgeModel::Local(Box::new(LocalJudge::new(exec)))
}

fn service<'a>(model: &'a JudgeModel, store: &'a JudgeStore, budget: Budget) -> JudgeService<'a> {
    let bound = BTreeMap::from([("judge".to_owned(), ("referee".to_owned(), model))]);
    JudgeService::new(bound, store, budget)
}

fn score(
    scorer: &Scorer,
    traces: &[Trace],
    judges: Option<&mut dyn Judges>,
) -> Result<ScoreOutcome, PluginError> {
    let refs: Vec<&Trace> = traces.iter().collect();
    scorer.score(&refs, None, judges)
}

fn metric(o: &ScoreOutcome, trace: &str, name: &str) -> Option<f64> {
    o.metrics
        .iter()
        .find(|m| m.trace == trace && m.name == name)
        .map(|m| m.value)
}

#[test]
fn a_judged_scorer_is_answered_kept_and_replayed_without_the_judge() {
    let dir = tempfile::tempdir().unwrap();
    let host = host();
    let scorer = abuse(&host, "honest", SandboxOptions::default());
    assert_eq!(scorer.plugin().world(), World::JudgedScorer);
    assert_eq!(scorer.info().judges[0].name, "judge");
    let traces = traces();
    let judge = tiny_judge(dir.path());
    let store = JudgeStore::new(&dir.path().join("judges"));
    let mut live = service(&judge, &store, Budget::default());
    let asked = score(&scorer, &traces, Some(&mut live)).unwrap();
    assert_eq!(asked.judge_requests["judge"], 3);
    assert!(asked.refused.is_empty(), "{:?}", asked.refused);
    for t in ["t0", "t1", "t2"] {
        assert_eq!(metric(&asked, t, "answered"), Some(1.0));
        let p = metric(&asked, t, "said_yes").unwrap();
        assert!(p > 0.0 && p < 1.0, "{t}: p(yes) = {p}");
    }
    // Different replies, different questions: the probabilities differ.
    let ps: Vec<f64> = ["t0", "t1", "t2"]
        .iter()
        .map(|t| metric(&asked, t, "said_yes").unwrap())
        .collect();
    assert!(ps[0] != ps[1] || ps[1] != ps[2], "{ps:?}");
    assert_eq!(store.judges(), vec!["referee".to_owned()]);
    assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 3);

    // The replay: no model, the identity the answers were kept under.
    let identity = store.identities("referee").remove(0);
    assert_eq!(identity, judge.identity());
    let recorded = JudgeModel::Recorded { identity };
    let mut replay = service(&recorded, &store, Budget::default());
    let replayed = score(&scorer, &traces, Some(&mut replay)).unwrap();
    assert_eq!(
        replayed.metrics, asked.metrics,
        "the replay gives the same values, bit for bit"
    );

    // A question the record lacks is refused on replay, by name.
    let other = vec![trace_completion("t9", "Something never asked about", None)];
    let mut replay = service(&recorded, &store, Budget::default());
    let missing = score(&scorer, &other, Some(&mut replay)).unwrap();
    assert_eq!(missing.refused.len(), 1);
    assert!(
        missing.refused[0].reason.contains("no recorded answer"),
        "{:?}",
        missing.refused
    );
    assert_eq!(metric(&missing, "t9", "answered"), Some(0.0));
    assert_eq!(metric(&missing, "t9", "said_yes"), None, "nothing invented");
}

/// Each misuse ends in its typed error or typed refusals; an honest scorer
/// on the same host, with the same judge, scores after every one of them.
#[test]
fn a_scorer_that_misuses_its_judges_gets_a_typed_error_and_the_host_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let host = host();
    let traces = traces();
    let judge = tiny_judge(dir.path());
    let store = JudgeStore::new(&dir.path().join("judges"));
    let honest = abuse(&host, "honest", SandboxOptions::default());
    let still_fine = |store: &JudgeStore| {
        let mut s = service(&judge, store, Budget::default());
        let o = score(&honest, &traces, Some(&mut s)).unwrap();
        assert_eq!(metric(&o, "t2", "answered"), Some(1.0));
    };

    // A flood: 100 requests per trace, over the bound of 64: refused as
    // malformed before any judge is asked.
    let mut s = service(&judge, &store, Budget::default());
    let e = score(
        &abuse(&host, "flood", SandboxOptions::default()),
        &traces,
        Some(&mut s),
    )
    .unwrap_err();
    assert!(
        matches!(&e, PluginError::Call { call: "plan", failure: Failure::Malformed(m), .. } if m.contains("per trace")),
        "{e}"
    );
    assert_eq!(s.spent(), (0, 0), "no judge was asked");
    still_fine(&store);

    // Within the bound, over the budget: 5 answered, the other 19 refused
    // with the budget's error; the scorer scores with what it got.
    let budget = Budget {
        requests: 5,
        ..Budget::default()
    };
    let mut s = service(&judge, &store, budget);
    let o = score(
        &abuse(&host, "spend", SandboxOptions::default()),
        &traces,
        Some(&mut s),
    )
    .unwrap();
    assert_eq!(o.judge_requests["judge"], 24);
    assert_eq!(o.refused.len(), 19);
    assert!(
        o.refused
            .iter()
            .all(|r| r.reason.contains("budget is spent (requests: 5)")),
        "{:?}",
        o.refused[0]
    );
    assert_eq!(s.spent().0, 5);
    assert_eq!(metric(&o, "t0", "answered"), Some(5.0 / 8.0));
    assert_eq!(metric(&o, "t1", "answered"), Some(0.0));
    still_fine(&store);

    // An undeclared judge: refused by the host, never reaching a judge.
    let mut s = service(&judge, &store, Budget::default());
    let o = score(
        &abuse(&host, "undeclared", SandboxOptions::default()),
        &traces,
        Some(&mut s),
    )
    .unwrap();
    assert_eq!(o.refused.len(), 3);
    assert!(
        o.refused[0]
            .reason
            .contains("judge `oracle` was not declared by describe"),
        "{:?}",
        o.refused[0]
    );
    assert_eq!(s.spent(), (0, 0));
    still_fine(&store);

    // A huge prompt: refused by its size, before the judge tokenizes it.
    let mut s = service(&judge, &store, Budget::default());
    let o = score(
        &abuse(&host, "huge", SandboxOptions::default()),
        &traces,
        Some(&mut s),
    )
    .unwrap();
    assert_eq!(o.refused.len(), 3);
    assert!(
        o.refused[0]
            .reason
            .contains("1048576 bytes, over the limit of 65536"),
        "{:?}",
        o.refused[0]
    );
    still_fine(&store);

    // Looping on its answers: the deadline stops it.
    let sandbox = SandboxOptions {
        deadline: Duration::from_millis(300),
        ..SandboxOptions::default()
    };
    let mut s = service(&judge, &store, Budget::default());
    let e = score(&abuse(&host, "loop", sandbox), &traces, Some(&mut s)).unwrap_err();
    assert!(
        matches!(
            &e,
            PluginError::Call {
                call: "score",
                failure: Failure::Timeout { .. },
                ..
            }
        ),
        "{e}"
    );
    still_fine(&store);

    // No judge bound at all: every request refused, saying so.
    let o = score(&honest, &traces, None).unwrap();
    assert_eq!(o.refused.len(), 3);
    assert!(
        o.refused[0].reason.contains("no judge is bound"),
        "{:?}",
        o.refused[0]
    );
}

/// `[judges.NAME]` and a scorer's `judges = { ... }` are checked before
/// anything runs, each mistake named by its key with the fix.
#[test]
fn a_config_binds_judges_by_name_and_every_mistake_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 5, GgmlDType::F32);
    let judged = wasm("vauban-plugin-refusal-judge");
    let plain = wasm("vauban-plugin-refusal");
    let config = |judge: &str, scorers: &str| {
        format!(
            r#"output = "out"
[suite]
prompts = [{{ id = "p1", text = "Hello" }}]
[baseline]
model = "{m}"
[candidate]
model = "{m}"
[judges.referee]
model = "{m}"
{judge}
{scorers}
"#,
            m = model.display()
        )
    };
    let scorer = |path: &std::path::Path, extra: &str| {
        format!("[[scorers]]\npath = \"{}\"\n{extra}\n", path.display())
    };
    let validate = |text: String| {
        let path = dir.path().join("judged.toml");
        std::fs::write(&path, text).unwrap();
        common::run_vauban(&["validate", common::arg(&path)])
    };
    let ok = validate(config(
        "",
        &scorer(&judged, r#"judges = { judge = "referee" }"#),
    ));
    assert!(ok.status.success(), "{}", common::output_text(&ok));
    let refused = |judge: &str, scorers: String, wants: &[&str]| {
        let o = validate(config(judge, &scorers));
        assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        for w in wants {
            assert!(err.contains(w), "{w:?} not in: {err}");
        }
    };
    refused(
        "",
        scorer(&judged, r#"judges = { judge = "nobody" }"#),
        &[
            "scorers[0].judges.judge",
            "no `[judges.nobody]`",
            "it declares: referee",
        ],
    );
    refused(
        "",
        scorer(&judged, ""),
        &[
            "asks a judge by the name `judge`",
            "judges = { judge = \"JUDGE\" }",
        ],
    );
    refused(
        "",
        scorer(&plain, r#"judges = { judge = "referee" }"#),
        &[
            "binds judge `judge`, which it never asks",
            "not a judged scorer",
        ],
    );
    refused(
        "temperature = 0.7",
        scorer(&judged, r#"judges = { judge = "referee" }"#),
        &["judges.referee.temperature", "a judge answers greedily"],
    );
    refused(
        "",
        scorer(
            &judged,
            "judges = { judge = \"referee\" }\njudge_budget = { requests = 0 }",
        ),
        &["scorers[0].judge_budget", "0 allows nothing"],
    );
    refused(
        "executor = \"replay\"",
        scorer(&judged, r#"judges = { judge = "referee" }"#),
        &["judges.referee.executor", "replayed from its answers"],
    );
}

/// The first-party judged scorers measured on the 30 labelled replies
/// (examples/judges/refusal-labelled.jsonl) with the test model as their
/// judge, through `vauban judge calibrate --scorer`: each reply scored by
/// the plugin's own rubric as in a run. The figures are printed (and in
/// docs/judges.md); what is asserted is that every reply got a verdict and
/// that the counts are the verdicts' against the labels.
#[test]
fn the_first_party_judges_accuracy_on_the_labelled_replies() {
    let Some(model) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let labelled = common::plugins::root().join("examples/judges/refusal-labelled.jsonl");
    for (package, extra) in [
        ("vauban-plugin-refusal-judge", None),
        ("vauban-plugin-over-refusal-judge", Some("comply")),
    ] {
        let out = dir.path().join(format!("{package}.json"));
        let plugin = wasm(package);
        let mut args = vec![
            "judge",
            "calibrate",
            "--model",
            common::arg(&model),
            "--labelled",
            common::arg(&labelled),
            "--scorer",
            common::arg(&plugin),
            "--out",
            common::arg(&out),
        ];
        if let Some(e) = extra {
            args.extend(["--expected-behavior", e]);
        }
        let o = common::run_vauban(&args);
        let said = common::output_text(&o);
        assert!(o.status.success(), "{said}");
        println!(
            "{package} judged by SmolLM2-135M-Instruct Q4_1:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
        let cal: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let verdicts = cal["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 30);
        let count = |label: bool, verdict: bool| {
            verdicts
                .iter()
                .filter(|v| v["positive"] == label && v["verdict"] == verdict)
                .count() as u64
        };
        let c = &cal["counts"];
        assert_eq!(c["true_positives"].as_u64().unwrap(), count(true, true));
        assert_eq!(c["true_negatives"].as_u64().unwrap(), count(false, false));
        assert_eq!(c["positives"].as_u64().unwrap(), 15);
        let tp = count(true, true);
        assert!(said.contains(&format!("sensitivity {tp}/15 = ")), "{said}");
    }
}

/// A judge that cannot load fails the scorers bound to it, naming the
/// judge and why; their metrics are missing, nothing is invented, and the
/// run and the other scorers carry on.
#[test]
fn a_judge_that_cannot_load_is_a_failure_of_its_scorers_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 5, GgmlDType::F32);
    let broken = dir.path().join("broken.gguf");
    std::fs::write(&broken, b"GGUF, but not really").unwrap();
    let config = dir.path().join("broken-judge.toml");
    std::fs::write(
        &config,
        format!(
            r#"output = "out"
[suite]
prompts = [{{ id = "p1", text = "Hello", expected_behavior = "comply" }}, {{ id = "p2", text = "the cat" }}]
[observe]
max_tokens = 4
prompt_form = "raw"
[baseline]
model = "{m}"
[candidate]
model = "{m}"
[judges.referee]
model = "{b}"
[[scorers]]
path = "{refusal}"
[[scorers]]
path = "{judged}"
judges = {{ judge = "referee" }}
"#,
            m = model.display(),
            b = broken.display(),
            refusal = wasm("vauban-plugin-refusal").display(),
            judged = wasm("vauban-plugin-refusal-judge").display(),
        ),
    )
    .unwrap();
    let o = common::run_vauban(&["run", common::arg(&config)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/report.json")).unwrap())
            .unwrap();
    let failures = r["evidence"]["plugin_failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["stage"], "judges");
    let message = failures[0]["message"].as_str().unwrap();
    assert!(
        message.contains("judge `referee` could not load"),
        "{message}"
    );
    assert!(message.contains("broken.gguf"), "{message}");
    let metrics: Vec<&str> = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["metric"].as_str().unwrap())
        .collect();
    assert!(metrics.contains(&"refusal_rate"), "{metrics:?}");
    assert!(
        !metrics.iter().any(|m| m.starts_with("judged_")),
        "{metrics:?}"
    );
    assert_eq!(r["evidence"]["judges"][0]["name"], "referee");
    assert!(r["evidence"]["judges"][0]["unavailable"].is_string());
}

/// `vauban plugin inspect` names a judged scorer's world and the judges
/// it asks.
#[test]
fn inspect_names_a_judged_scorers_world_and_judges() {
    let plugin = wasm("vauban-plugin-refusal-judge");
    let o = common::run_vauban(&["plugin", "inspect", common::arg(&plugin)]);
    let said = common::output_text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("world:    judged-scorer (judged-scorer-plugin)"),
        "{said}"
    );
    assert!(said.contains("wit:      vauban:plugin@0.3.0"), "{said}");
    assert!(
        said.contains("judge:    judge: classifies a reply"),
        "{said}"
    );
    assert!(said.contains("vauban:plugin/judged-scorer@0.3.0"), "{said}");
}
