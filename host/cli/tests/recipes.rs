//! The cookbook (`examples/*.toml`, listed in `examples/README.md`): every
//! recipe validates and runs end to end as its header says, through the
//! binary, on the real SmolLM2 model, and its report holds what the header
//! promises. Each test copies the recipes and their prompt files into a
//! folder of its own, so their `../out/...` outputs stay there, and runs
//! the commands the header lists.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::output_text as text;
use common::plugins;
use serde_json::Value;

/// The recipes, in the cookbook's order: configs (`vauban run`) and shell
/// recipes (a few commands), numbered together.
const RECIPES: [&str; 14] = [
    "quantization.toml",
    "system-prompt.toml",
    "steering.toml",
    "weight-edit.toml",
    "endpoint.toml",
    "cross-backend.toml",
    "replay.toml",
    // Run by families.rs, on a mixture built by transformers.
    "moe-routing.toml",
    "quant-types.toml",
    "lora-adapter.toml",
    "batch-sweep.sh",
    "judge-calibrate.sh",
    "judge.toml",
    "import-inspect.sh",
];

/// `examples/` copied into a temporary folder: every `.toml` and the
/// prompt files, laid out as in the repository.
struct Cookbook {
    dir: tempfile::TempDir,
}

impl Cookbook {
    fn new() -> Cookbook {
        let dir = tempfile::tempdir().unwrap();
        let examples = plugins::root().join("examples");
        let to = dir.path().join("examples");
        std::fs::create_dir_all(to.join("prompts")).unwrap();
        for entry in std::fs::read_dir(&examples).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml" || e == "sh") {
                std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
        // The data the recipes read: prompt suites, labelled replies, logs.
        for data in ["prompts", "judges", "inspect", "deploy"] {
            std::fs::create_dir_all(to.join(data)).unwrap();
            for entry in std::fs::read_dir(examples.join(data)).unwrap() {
                let p = entry.unwrap().path();
                std::fs::copy(&p, to.join(data).join(p.file_name().unwrap())).unwrap();
            }
        }
        Cookbook { dir }
    }

    fn recipe(&self, name: &str) -> PathBuf {
        self.dir
            .path()
            .join("examples")
            .join(format!("{name}.toml"))
    }

    /// Where a recipe's `output = "../out/NAME"` lands.
    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    /// Runs the binary in the copy's root, as a user in the repository's
    /// root would (`vauban run examples/NAME.toml`).
    fn vauban(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let plugin_dir = plugins::wasm("vauban-plugin-refusal")
            .parent()
            .unwrap()
            .to_path_buf();
        let mut c = Command::new(env!("CARGO_BIN_EXE_vauban"));
        c.args(args)
            .current_dir(self.dir.path())
            .env("VAUBAN_PLUGIN_DIR", plugin_dir);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run vauban")
    }

    /// Runs a command that must be refused (exit code 1); its stderr.
    fn refused(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let o = self.vauban(args, env);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// Runs a shell recipe (`examples/NAME.sh`) as its header says, with
    /// this build's binary and the model folder of `model`.
    fn script(&self, name: &str, model: Option<&std::path::Path>) -> Output {
        self.script_at(&format!("examples/{name}.sh"), model, &[])
    }

    /// Runs the shell script at `path` (under the copy's root) with this
    /// build's binary, its plugins, the model folder of `model` and `env`.
    fn script_at(
        &self,
        path: &str,
        model: Option<&std::path::Path>,
        env: &[(&str, &str)],
    ) -> Output {
        let plugin_dir = plugins::wasm("vauban-plugin-refusal")
            .parent()
            .unwrap()
            .to_path_buf();
        let mut c = Command::new("bash");
        c.arg(path)
            .current_dir(self.dir.path())
            .env("VAUBAN", env!("CARGO_BIN_EXE_vauban"))
            .env("VAUBAN_PLUGIN_DIR", plugin_dir);
        if let Some(m) = model {
            c.env("VAUBAN_MODELS", m.parent().unwrap());
        }
        c.envs(env.iter().copied());
        c.output().unwrap()
    }

    fn report(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.out(name).join("report.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

/// `vauban measure` of the refusal direction from the cookbook's prompt
/// sets into `out`, as the weight-edit and adapter recipes prepare it.
fn measure_args<'a>(model: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "measure",
        "--model",
        model,
        "--harmful",
        "examples/prompts/harmful.jsonl",
        "--harmless",
        "examples/prompts/harmless.jsonl",
        "--out",
        out,
    ]
}

/// The SmolLM2 GGUF the recipes name, or `None` (the test skips) when
/// `scripts/fetch-model.sh` has not run.
fn model() -> Option<PathBuf> {
    common::smollm2_path()
}

fn significant(r: &Value) -> Vec<String> {
    r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["significant"] == true)
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

/// No delta is significant after the adjustment for multiple comparisons.
fn assert_nothing_significant(r: &Value) {
    assert_eq!(
        significant(r),
        Vec::<String>::new(),
        "{}",
        r["metric_deltas"]
    );
}

/// The exit code a report's gates call for: 3 when a `fail` gate failed
/// (or had no data), else 0. The recipes' gates sit on measured deltas, so
/// where a header quotes an outcome from this machine's kernels, a test on
/// another CPU checks the code agrees with the report instead.
fn exit_for(r: &Value) -> i32 {
    let failed =
        r["gates"].as_array().unwrap().iter().any(|g| {
            g["severity"] == "fail" && (g["outcome"] == "fail" || g["outcome"] == "no_data")
        });
    if failed { 3 } else { 0 }
}

fn gate<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no gate {name:?} in {}", r["gates"]))
}

#[test]
fn every_recipe_is_in_the_cookbook_with_a_header_that_says_what_it_answers() {
    let root = plugins::root().join("examples");
    let cookbook = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut on_disk: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml" || e == "sh"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "quickstart.toml")
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = RECIPES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "examples/*.{{toml,sh}} and this test's list"
    );
    for (i, file) in RECIPES.iter().enumerate() {
        assert!(
            cookbook.contains(&format!("`{file}`")),
            "examples/README.md does not list {file}"
        );
        let body = std::fs::read_to_string(root.join(file)).unwrap();
        // A shell recipe opens with its interpreter line.
        let body = body.strip_prefix("#!/usr/bin/env bash\n").unwrap_or(&body);
        let header = format!("# Recipe {}: ", i + 1);
        assert!(body.starts_with(&header), "{file} opens with `{header}`");
        let header: String = body
            .lines()
            .take_while(|l| l.starts_with('#') || l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let shows = match file.ends_with(".sh") {
            true => "What it shows here",
            false => "What the report shows here",
        };
        for promise in [shows, &format!("examples/{file}")] {
            assert!(
                header.contains(promise),
                "{file}'s header lacks {promise:?}"
            );
        }
    }
}

#[test]
fn quantization_then_replay_of_its_bundles() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    let recipe = book.recipe("quantization");
    let o = book.vauban(&["validate", recipe.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = book.vauban(&["run", "examples/quantization.toml"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = book.report("quantization");
    // As the header says: no significant change, a small KL, activation
    // evidence, and the kernels and stored types named.
    assert_nothing_significant(&r);
    assert_eq!(r["access"]["level"], "activations", "{}", r["access"]);
    let kl = r["distribution"]["first_token_kl_mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no first-token KL: {}", r["distribution"]));
    assert!(kl > 0.0 && kl < 0.2, "first-token KL {kl}");
    assert_eq!(
        gate(&r, "refusals unchanged by quantization")["outcome"],
        "pass"
    );
    let inspect = book.vauban(
        &["trace", "inspect", "out/quantization/traces/candidate"],
        &[],
    );
    assert!(inspect.status.success(), "{}", text(&inspect));
    assert!(
        String::from_utf8_lossy(&inspect.stdout).contains("Q4_1"),
        "the candidate's kernel note names Q4_1: {}",
        text(&inspect)
    );

    // Recipe 7: the same bundles through `vauban diff`, with no model.
    let o = book.vauban(
        &[
            "diff",
            "out/quantization/traces/baseline",
            "out/quantization/traces/candidate",
            "--config",
            "examples/replay.toml",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let replayed = book.report("replay");
    for key in ["metric_deltas", "distribution", "activation_findings"] {
        assert_eq!(r[key], replayed[key], "{key} differs in the replay");
    }
    // The gate the recording run did not have is evaluated on replay.
    let lengths = gate(&replayed, "answers keep their length");
    assert!(
        lengths["outcome"] == "pass" || lengths["outcome"] == "warn",
        "{lengths}"
    );
    // `vauban run` on the recipe itself replays the same bundles.
    let o = book.vauban(
        &["run", "examples/replay.toml", "--out", "out/replay-run"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The judge recipe measures SmolLM2 as a refusal judge on the 30
/// labelled replies: a verdict for each, counted by label into the file
/// it writes, the intervals printed from those counts; then one question.
#[test]
fn judge_recipe_measures_a_judge_on_labelled_replies() {
    let Some(m) = model() else { return };
    let book = Cookbook::new();
    let o = book.script("judge-calibrate", Some(&m));
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("judge on 30 labelled replies (15 positive)"),
        "{said}"
    );
    let cal: Value = serde_json::from_str(
        &std::fs::read_to_string(book.out("judge").join("calibration.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cal["verdicts"].as_array().unwrap().len(), 30);
    let c = &cal["counts"];
    let (tp, tn) = (
        c["true_positives"].as_u64().unwrap(),
        c["true_negatives"].as_u64().unwrap(),
    );
    assert!(said.contains(&format!("sensitivity {tp}/15 = ")), "{said}");
    assert!(said.contains(&format!("specificity {tn}/15 = ")), "{said}");
    assert!(said.contains("verdict: "), "{said}");
}

/// Recipe 13: a judged audit. Both judged scorers ask the one judge,
/// every distinct question once (the over-refusal judge's questions are
/// the refusal judge's on the harmless replies, read from the record);
/// the report names the judge behind each judged metric; `vauban diff`
/// replays the run from the record without the judge, to the same report;
/// `vauban plugin test --judges` scores a bundle from the record.
#[test]
fn judge_recipe_records_its_judge_and_replays_without_it() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    let o = book.vauban(&["run", "examples/judge.toml"], &[]);
    let r = book.report("judge");
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    assert!(
        r["evidence"]["plugin_failures"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{}",
        r["evidence"]["plugin_failures"]
    );
    let prompts = r["evidence"]["prompts"].as_u64().unwrap();
    let harmless = r["evidence"]["categories"]["harmless"].as_u64().unwrap();
    let judges = r["evidence"]["judges"].as_array().unwrap();
    assert_eq!(judges.len(), 1, "{judges:?}");
    let j = &judges[0];
    assert_eq!(j["name"], "referee");
    assert_eq!(j["executor"], "candle");
    assert_eq!(j["model"], "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(j["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(
        j["scorers"],
        serde_json::json!(["refusal-judge", "over-refusal-judge"])
    );
    // One question per reply from refusal-judge, one per harmless reply
    // from over-refusal-judge, on both sides; and one per labelled reply of
    // refusal-judge's calibration.
    let labelled = 30;
    assert_eq!(
        j["requests"].as_u64().unwrap(),
        2 * (prompts + harmless) + labelled
    );
    assert_eq!(j["refused"], 0);
    let kept = std::fs::read_dir(book.out("judge").join("traces/judges"))
        .unwrap()
        .count() as u64;
    assert_eq!(
        kept,
        2 * prompts + labelled,
        "each distinct question kept once"
    );
    // The calibration measured the judge; a correction is made, or the
    // report says why not (this judge is no better than chance).
    let rate = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "judged_refusal_rate")
        .unwrap();
    assert!(
        rate["corrected"].is_object() || rate["corrected_unavailable"].is_string(),
        "{rate}"
    );
    for d in r["metric_deltas"].as_array().unwrap() {
        let judged = d["judged_by"] == serde_json::json!(["referee"]);
        let by_judge = d["scorer"].as_str().unwrap().ends_with("refusal-judge");
        assert_eq!(
            judged, by_judge,
            "{}: judged_by {}",
            d["id"], d["judged_by"]
        );
    }
    let md = std::fs::read_to_string(book.out("judge").join("report.md")).unwrap();
    assert!(md.contains("**Judges**"), "the report's judges table");
    assert!(
        md.contains("judged by `referee`"),
        "a judged metric's heading"
    );

    // The replay: no judge model runs, the same report but for time.
    let o = book.vauban(
        &[
            "diff",
            "out/judge/traces/baseline",
            "out/judge/traces/candidate",
            "--config",
            "examples/judge.toml",
            "--out",
            "out/judge-replay",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    let replayed = book.report("judge-replay");
    for key in ["metric_deltas", "claims", "gates"] {
        assert_eq!(r[key], replayed[key], "{key} differs in the replay");
    }
    assert_eq!(replayed["evidence"]["judges"][0]["requests"], j["requests"]);
    assert_eq!(replayed["evidence"]["judges"][0]["refused"], 0);

    // The scorer alone, on the baseline's bundle, from the record.
    let o = book.vauban(
        &[
            "plugin",
            "test",
            plugins::wasm("vauban-plugin-refusal-judge")
                .to_str()
                .unwrap(),
            "--traces",
            "out/judge/traces/baseline",
            "--judges",
            "out/judge/traces/judges",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let golden: Value = serde_json::from_slice(&o.stdout).unwrap();
    let scored = golden["metrics"].as_object().unwrap();
    assert_eq!(scored.len() as u64, prompts, "every baseline trace scored");
    // The same values the run recorded: the baseline's mean judged
    // refusal rate is the report's.
    let mean = scored
        .values()
        .map(|m| m["judged_refusal_rate"].as_f64().unwrap())
        .sum::<f64>()
        / prompts as f64;
    let reported = r["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "judged_refusal_rate")
        .unwrap()["baseline_mean"]
        .as_f64()
        .unwrap();
    assert!((mean - reported).abs() < 1e-12, "{mean} vs {reported}");
    // Without the record, a judged scorer is refused with the fix.
    let err = book.refused(
        &[
            "plugin",
            "test",
            plugins::wasm("vauban-plugin-refusal-judge")
                .to_str()
                .unwrap(),
            "--traces",
            "out/judge/traces/baseline",
        ],
        &[],
    );
    assert!(err.contains("--judges DIR"), "{err}");
}

/// Recipe 14: two Inspect logs imported and compared, as its header says:
/// the score falls on all 12 paired samples but one that was wrong
/// already, McNemar's exact test significant, one claim accepted, and the
/// comparison's config written for the user to edit.
#[test]
fn import_recipe_compares_two_inspect_logs() {
    let book = Cookbook::new();
    let o = book.script("import-inspect", None);
    assert!(o.status.success(), "{}", text(&o));
    let r = book.report("import/diff");
    let d = &r["metric_deltas"][0];
    assert_eq!(d["id"], "inspect.includes");
    assert_eq!(d["n"], 12);
    assert_eq!(d["test"], "mcnemar_exact");
    assert!(d["significant"].as_bool().unwrap(), "{d}");
    assert_eq!(r["summary"]["claims_accepted"], 1);
    assert!(book.out("import/diff").join("diff.toml").is_file());
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(book.out("import/16-tokens").join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["imported"]["tool_version"], "0.3.285");
    assert_eq!(manifest["imported"]["task"], "capitals");
}

/// Recipe 15: the Slurm array scripts, run by hand as their header says
/// (each array task in its own process, then the merge job): the report of
/// the merged shards says how it was sharded, and has the unsharded run's
/// deltas.
#[test]
fn deploy_recipe_runs_the_slurm_array_by_hand() {
    let Some(m) = model() else { return };
    let book = Cookbook::new();
    let job = |script: &str, env: &[(&str, &str)]| {
        let o = book.script_at(&format!("examples/deploy/{script}"), Some(&m), env);
        assert!(o.status.success(), "{script} {env:?}: {}", text(&o));
        o
    };
    let mut traced = Vec::new();
    for k in ["1", "2"] {
        let o = job(
            "slurm-shard.sh",
            &[("SLURM_ARRAY_TASK_ID", k), ("SLURM_ARRAY_TASK_COUNT", "2")],
        );
        traced.push(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    println!("{}", traced.join(""));
    job("slurm-merge.sh", &[]);
    let r = book.report("shards/report");
    assert!(
        r["limitations"]
            .to_string()
            .contains("recorded in 2 shards"),
        "{}",
        r["limitations"]
    );
    // The same deltas as the recipe run whole.
    let o = book.vauban(&["run", "examples/system-prompt.toml"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        r["metric_deltas"],
        book.report("system-prompt")["metric_deltas"]
    );
}

/// The batch-size sweep recipe records one bundle with full batches at
/// each size and fits it. What the fit finds depends on the machine's
/// timings, so this checks what does not: the sweep's shape, and that the
/// fit either answers with its parameters and residuals or says why not.
#[test]
fn batch_sweep_recipe_records_a_controlled_sweep_and_fits_it() {
    let Some(m) = model() else { return };
    let book = Cookbook::new();
    let o = book.script("batch-sweep", Some(&m));
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("32 traces at batch sizes [1, 2, 4, 8]"),
        "{said}"
    );
    let sweep = book.vauban(
        &[
            "trace",
            "sweep",
            "out/batch-sweep",
            "--axis",
            "batch_size",
            "--json",
        ],
        &[],
    );
    let v: Value = serde_json::from_slice(&sweep.stdout).unwrap();
    let points: Vec<(u64, u64)> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["axis_value"].as_u64().unwrap(),
                p["samples"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(points, [(1, 8), (2, 8), (4, 8), (8, 8)]);
    assert_eq!(v["coverage_stable"], true);
    let fitted = said.contains("USL fit:") && said.contains("residual");
    let refused = said.contains("cannot fit the sweep");
    assert!(fitted || refused, "{said}");
}

#[test]
fn quant_types_recipe_compares_two_presets_of_one_model() {
    let Some(m) = model() else { return };
    // llama.cpp's quantizer, built beside llama-server.
    let Some(server) = common::llama_server::binary() else {
        return;
    };
    let quantize = server.with_file_name("llama-quantize");
    let book = Cookbook::new();
    // The header's preparation, command by command.
    let out = book.out("quant-types");
    std::fs::create_dir_all(&out).unwrap();
    for kind in ["Q8_0", "IQ4_NL"] {
        let o = Command::new(&quantize)
            .arg("--allow-requantize")
            .arg(&m)
            .arg(out.join(format!("smollm2.{kind}.gguf")))
            .arg(kind)
            .output()
            .unwrap();
        assert!(o.status.success(), "llama-quantize {kind}: {}", text(&o));
    }
    let o = book.vauban(&["run", "examples/quant-types.toml"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = book.report("quant-types");
    // As the header says: nothing significant, the distributions moved,
    // activation evidence, the gate passed.
    assert_nothing_significant(&r);
    assert_eq!(r["access"]["level"], "activations", "{}", r["access"]);
    let kl = r["distribution"]["first_token_kl_mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no first-token KL: {}", r["distribution"]));
    assert!(kl > 0.01 && kl < 2.0, "first-token KL {kl}");
    assert_eq!(
        gate(&r, "refusals unchanged by the smaller quantization")["outcome"],
        "pass"
    );
    // Each side's kernel note names the type its file was quantized to.
    for (side, kind) in [("baseline", "Q8_0"), ("candidate", "IQ4_NL")] {
        let trace = out.join(format!("traces/{side}/traces/000000.json"));
        let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        // The prefill span's `kernel` note.
        let kernel = trace["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|s| s["profile"]["notes"]["kernel"].as_str())
            .unwrap_or_else(|| panic!("{side}: no kernel note"));
        assert!(
            kernel.starts_with("vauban-kernels") && kernel.contains(kind),
            "{side}: {kernel}"
        );
    }
}

#[test]
fn system_prompt_recipe_shows_the_change_in_the_distributions() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    let o = book.vauban(&["run", "examples/system-prompt.toml"], &[]);
    let r = book.report("system-prompt");
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    assert_eq!(r["access"]["level"], "logprobs", "{}", r["access"]);
    assert_eq!(r["access"]["claim_strength"], "distributional_diff");
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    // A new system prompt changes what follows it: far more than the
    // quantization recipe's rounding, though on 16 prompts no metric moves
    // significantly after the adjustment.
    assert!(kl > 0.1, "first-token KL {kl}");
    assert_nothing_significant(&r);
}

#[test]
fn steering_recipe_ends_in_a_failed_gate_and_exit_code_3() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    let o = book.vauban(&["run", "examples/steering.toml"], &[]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("✘ fail"), "{stdout}");
    let r = book.report("steering");
    // As the header says: refusals do not move, fluency does.
    let sig = significant(&r);
    assert!(
        sig.iter().any(|s| s == "perplexity"),
        "perplexity moves significantly: {sig:?}"
    );
    assert!(
        !sig.iter().any(|s| s.starts_with("refusal_rate")),
        "{sig:?}"
    );
    assert_eq!(
        gate(&r, "no new refusals on harmless prompts")["outcome"],
        "pass"
    );
    assert_eq!(gate(&r, "answers stay fluent")["outcome"], "fail");
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    assert!(kl > 0.3, "first-token KL {kl}");
    // The measured direction is a unit vector and the steer adds 60 of it
    // after block 16, where the projection is read: the candidate's mean
    // projection there is the baseline's plus 60.
    let series = r["activation_findings"]["series"].as_array().unwrap();
    let projection = |side: &str| {
        series
            .iter()
            .find(|s| s["side"] == side)
            .unwrap_or_else(|| panic!("no {side} series: {series:?}"))["mean_projection"][0]
            .as_f64()
            .unwrap()
    };
    let moved = projection("candidate") - projection("baseline");
    assert!((moved - 60.0).abs() < 0.05, "projection moved by {moved}");
    let md = std::fs::read_to_string(book.out("steering").join("report.md")).unwrap();
    assert!(md.contains("answers stay fluent"), "{md}");
    let html = std::fs::read_to_string(book.out("steering").join("report.html")).unwrap();
    assert!(html.contains("answers stay fluent"));
    // The steering is recorded as intervention results at its layer.
    assert!(
        r["interventions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["layers"] == serde_json::json!([16])),
        "{}",
        r["interventions"]
    );
}

#[test]
fn weight_edit_recipe_reaches_a_model_change_audit() {
    let Some(m) = model() else { return };
    let m = m.to_str().unwrap();
    let book = Cookbook::new();
    // The header's preparation, command by command.
    for args in [
        measure_args(m, "out/weight-edit/refusal.safetensors"),
        vec![
            "model",
            "export",
            "--model",
            m,
            "--out",
            "out/weight-edit/base",
        ],
        vec![
            "model",
            "orthogonalize",
            "--model",
            m,
            "--direction",
            "out/weight-edit/refusal.safetensors",
            "--out",
            "out/weight-edit/edited",
        ],
    ] {
        let o = book.vauban(&args, &[]);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = book.vauban(&["run", "examples/weight-edit.toml"], &[]);
    let r = book.report("weight-edit");
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    assert!(kl > 0.01, "the edit moves the distributions: KL {kl}");
    assert_eq!(
        r["access"]["level"], "base_and_transformed",
        "{}",
        r["access"]
    );
    assert_eq!(r["access"]["claim_strength"], "model_change_audit");
    // The weight claim cites the matrices whose snapshots differ: the two
    // that write into the residual stream (the ones vauban snapshots), in
    // every observed block.
    let claim = r["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["strength"] == "weight_diff")
        .unwrap_or_else(|| panic!("no weight claim: {}", r["claims"]));
    assert_eq!(claim["status"], "accepted", "{claim}");
    let mut cited: Vec<&str> = claim["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    cited.sort_unstable();
    let mut expected: Vec<String> = [6, 12, 18, 24, 29]
        .iter()
        .flat_map(|l| {
            [
                format!("weights:layer{l}.attn_output"),
                format!("weights:layer{l}.ffn_down"),
            ]
        })
        .collect();
    expected.sort_unstable();
    assert_eq!(cited, expected, "{claim}");
}

/// Recipe 10: the orthogonalization as a rank-1 adapter on the base file,
/// audited with `adapter =`; and `model lora` on the same edit written
/// whole finds it rank 1 in every matrix it changed, and nothing else.
#[test]
fn lora_adapter_recipe_audits_an_adapter_and_measures_a_fine_tunes_rank() {
    let Some(m) = model() else { return };
    let m = m.to_str().unwrap();
    let book = Cookbook::new();
    let direction = "out/lora-adapter/refusal.safetensors";
    for args in [
        measure_args(m, direction),
        vec![
            "model",
            "orthogonalize",
            "--model",
            m,
            "--direction",
            direction,
            "--lora",
            "out/lora-adapter/refusal-lora",
        ],
    ] {
        let o = book.vauban(&args, &[]);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = book.vauban(&["run", "examples/lora-adapter.toml"], &[]);
    let r = book.report("lora-adapter");
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    assert!(kl > 0.01, "the adapter moves the distributions: KL {kl}");
    assert_eq!(r["access"]["level"], "base_and_transformed");
    let md = std::fs::read_to_string(book.out("lora-adapter").join("report.md")).unwrap();
    assert!(
        md.contains("transformation: LoRA adapter ") && md.contains("refusal-lora (sha256 "),
        "the report names the adapter: {md}"
    );
    let claim = r["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["strength"] == "weight_diff")
        .unwrap_or_else(|| panic!("no weight claim: {}", r["claims"]));
    assert_eq!(claim["status"], "accepted", "{claim}");
    assert_eq!(claim["evidence"].as_array().unwrap().len(), 10, "{claim}");

    // The header's second part: the edit written whole, extracted back.
    let o = book.vauban(
        &[
            "model",
            "orthogonalize",
            "--model",
            m,
            "--direction",
            direction,
            "--out",
            "out/lora-adapter/edited",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let lora = |rank: &str, out: &str| {
        let tuned = "out/lora-adapter/edited";
        book.vauban(
            &[
                "model", "lora", "--base", m, "--tuned", tuned, "--rank", rank, "--out", out,
                "--json",
            ],
            &[],
        )
    };
    let o = lora("1", "out/lora-adapter/extracted");
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let matrices = v["matrices"].as_array().unwrap();
    assert_eq!(matrices.len(), 210, "30 blocks of 7 matrices compared");
    let (changed, same): (Vec<&Value>, Vec<&Value>) =
        matrices.iter().partition(|k| k["in_adapter"] == true);
    assert_eq!(changed.len(), 60, "attn_output and ffn_down of 30 blocks");
    assert!(changed.iter().all(|k| {
        matches!(k["matrix"].as_str(), Some("attn_output" | "ffn_down"))
            && k["kept_share"].as_f64().unwrap() > 0.99999
    }));
    assert!(same.iter().all(|k| k["difference_norm"] == 0.0));
    assert_eq!(v["not_carried"].as_array().unwrap().len(), 0, "{v}");
    assert!(v["kept_share"].as_f64().unwrap() > 0.99999, "{v}");
    // A rank no matrix can have is a usage error naming the bound.
    let o = lora("577", "out/lora-adapter/too-high");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(
            "--rank 577 is above the rank attn_q matrices can have ([576, 576]); use at most 576"
        ),
        "{}",
        text(&o)
    );
    assert!(!book.out("lora-adapter").join("too-high").exists());
}

#[test]
fn endpoint_recipe_against_a_real_llama_server() {
    let Some(m) = model() else { return };
    let Some(binary) = common::llama_server::binary() else {
        return;
    };
    let port = common::llama_server::free_port();
    let server = common::llama_server::LlamaServer::start(&binary, &m, port);
    let book = Cookbook::new();
    let url = server.url();
    let env = [("VAUBAN_ENDPOINT", url.as_str())];
    let o = book.vauban(&["validate", "examples/endpoint.toml", "--online"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = book.vauban(&["run", "examples/endpoint.toml"], &env);
    let r = book.report("endpoint");
    assert_eq!(o.status.code(), Some(exit_for(&r)), "{}", text(&o));
    // A black box: text and logprobs, claims capped at distributional_diff.
    assert_eq!(r["access"]["level"], "logprobs", "{}", r["access"]);
    assert_eq!(r["access"]["claim_strength"], "distributional_diff");
    // The same file behind llama-server: the kernels differ, the model not.
    let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
    assert!(kl < 0.05, "first-token KL {kl}");
    assert_nothing_significant(&r);
}

#[test]
fn cross_backend_recipe_names_what_to_build_or_runs() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    if cfg!(feature = "torch") {
        let o = book.vauban(&["run", "examples/cross-backend.toml"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let r = book.report("cross-backend");
        assert_nothing_significant(&r);
        let kl = r["distribution"]["first_token_kl_mean"].as_f64().unwrap();
        assert!(kl < 1e-3, "the same f32 weights on two backends: KL {kl}");
    } else {
        // Without the feature the recipe stops at once, naming the fix.
        let err = book.refused(&["validate", "examples/cross-backend.toml"], &[]);
        assert!(
            err.contains("scripts/setup-torch.sh") && err.contains("--features torch"),
            "{err}"
        );
    }
}

#[test]
fn every_recipe_that_needs_nothing_first_validates() {
    let Some(_) = model() else { return };
    let book = Cookbook::new();
    for name in ["quantization", "system-prompt", "steering", "endpoint"] {
        let o = book.vauban(&["validate", &format!("examples/{name}.toml")], &[]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
    }
    // A recipe edited wrongly gets the file:line:key error of any config.
    let recipe = book.recipe("quantization");
    let body = std::fs::read_to_string(&recipe).unwrap();
    let line = body
        .lines()
        .position(|l| l.starts_with("label = \"SmolLM2-135M-Instruct, Q4_1\""))
        .unwrap()
        + 1;
    std::fs::write(
        &recipe,
        body.replace(
            "label = \"SmolLM2-135M-Instruct, Q4_1\"",
            "lable = \"SmolLM2-135M-Instruct, Q4_1\"",
        ),
    )
    .unwrap();
    let err = book.refused(&["validate", "examples/quantization.toml"], &[]);
    assert!(
        err.contains(&format!("quantization.toml:{line}:"))
            && err.contains("unknown field `lable`")
            && err.contains("did you mean `label`?"),
        "{err}"
    );
    // The endpoint recipe with no server there: `validate --online` says
    // what to check before any model loads.
    let closed = format!("http://127.0.0.1:{}/v1", common::llama_server::free_port());
    let err = book.refused(
        &["validate", "--online", "examples/endpoint.toml"],
        &[("VAUBAN_ENDPOINT", closed.as_str())],
    );
    assert!(
        err.contains(&closed) && err.contains("is the server running"),
        "{err}"
    );
    // Those that need an earlier step say which, at the key that names it.
    let err = book.refused(&["validate", "examples/weight-edit.toml"], &[]);
    assert!(
        err.contains("weight-edit.toml")
            && err.contains("out/weight-edit/base")
            && err.contains("a recipe's header lists the commands"),
        "{err}"
    );
    let err = book.refused(&["validate", "examples/replay.toml"], &[]);
    assert!(
        err.contains("out/quantization/traces/baseline") && err.contains("record it first"),
        "{err}"
    );
}
