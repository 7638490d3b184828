//! What `vauban run` says on stderr, as a user sees it.
//!
//! - Ctrl-C (SIGINT to the binary in the middle of tracing): it stops
//!   before the next prompt, says how many traces it kept and where, exits
//!   130; the same command then says how many it reuses and finishes.
//! - Progress: bars on a terminal (a pseudo-terminal from `script`), none
//!   with `-q`, and neither bars nor escape codes when stderr is a pipe.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use candle_core::quantized::GgmlDType;
use common::{plugins, tiny};

/// Enough prompts that the run is still tracing when the signal lands
/// (the test waits for the first traces in the cache, then sends it).
const PROMPTS: usize = 400;

fn write_config(dir: &Path, prompts: usize) -> std::path::PathBuf {
    write_config_with(dir, prompts, "", "")
}

/// The config, with lines added to `[observe]` and to `[candidate]`.
fn write_config_with(
    dir: &Path,
    prompts: usize,
    observe: &str,
    candidate: &str,
) -> std::path::PathBuf {
    let model = tiny::write_gguf(&dir.join("tiny.gguf"), 5, GgmlDType::F32);
    let words = [
        "the", "cat", "sat", "on", "a", "mat", "then", "ran", "in", "hat",
    ];
    let prompts: String = (0..prompts)
        .map(|i| {
            let text: Vec<&str> = (0..3 + i % 4)
                .map(|j| words[(i + j) % words.len()])
                .collect();
            format!("{{\"id\": \"p{i}\", \"text\": \"{}\"}}\n", text.join(" "))
        })
        .collect();
    std::fs::write(dir.join("prompts.jsonl"), prompts).unwrap();
    let config = dir.join("run.toml");
    std::fs::write(
        &config,
        format!(
            r#"output = "out"

[suite]
file = "prompts.jsonl"

[observe]
max_tokens = 8
prompt_form = "raw"
{observe}

[baseline]
model = "{model}"

[candidate]
model = "{model}"
system = "be brief"
{candidate}

[[scorers]]
path = "{behavior}"
"#,
            model = model.display(),
            behavior = plugins::wasm("vauban-plugin-behavior").display(),
        ),
    )
    .unwrap();
    config
}

fn cached(dir: &Path) -> usize {
    common::cached_traces(&dir.join("out"))
}

fn count(text: &str, side: &str) -> Option<usize> {
    common::kept_count(text, side, PROMPTS)
}

#[test]
fn ctrl_c_keeps_the_finished_traces_says_so_and_the_rerun_reuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), PROMPTS);
    let vauban = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vauban"));
        c.arg("run").arg(&config);
        c
    };
    let mut child = vauban()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while cached(dir.path()) < 2 {
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            panic!(
                "the run ended before the signal: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no trace recorded in 10 minutes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let signal = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signal.success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("stopping after the prompt in flight"), "{err}");
    let cache = dir.path().join("out/traces/cache");
    assert!(
        err.contains(&format!(
            "kept in {}; run the same command to resume",
            cache.display()
        )),
        "{err}"
    );
    // What it says it kept is what the cache holds.
    let baseline = count(&err, "baseline").unwrap_or_else(|| panic!("{err}"));
    let candidate = count(&err, "candidate").unwrap_or(0);
    assert!(baseline >= 2, "{err}");
    assert_eq!(baseline + candidate, cached(dir.path()), "{err}");
    assert!(!dir.path().join("out/report.json").exists());

    // The same command: it says what it reuses, and finishes.
    let o = vauban().output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "reusing {baseline} of {PROMPTS} recorded baseline traces"
        )),
        "{err}"
    );
    assert_eq!(cached(dir.path()), 2 * PROMPTS);
    assert!(dir.path().join("out/report.json").exists());

    // Quiet: no notices.
    let o = vauban().arg("-q").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("reusing"));
}

#[test]
fn progress_shows_on_a_terminal_only_and_not_with_q() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 6);
    let bin = env!("CARGO_BIN_EXE_vauban");

    // stderr a pipe: no bar, and no escape code in the log (-v logs every
    // stage).
    let o = Command::new(bin)
        .args(["run", "-v"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        !err.contains('\x1b'),
        "escape codes in a piped log: {err:?}"
    );
    assert!(!err.contains(" left]"), "a bar in a piped log: {err}");

    // On a terminal: the bars, with counts and the time left; not with -q.
    // `script` gives the command a pseudo-terminal and copies what it
    // draws to its stdout.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the terminal half: no `script` (util-linux) here");
        return;
    }
    let on_terminal = |extra: &str| {
        let command = format!(
            "{bin} run {extra} --out {} {}",
            dir.path().join(format!("out{}", extra.len())).display(),
            config.display()
        );
        let o = Command::new("script")
            .args(["-qefc", &command, "/dev/null"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let drawn = on_terminal("");
    assert!(
        drawn.contains("/6 [") && drawn.contains(" left]"),
        "no tracing bar on a terminal: {drawn:?}"
    );
    let quiet = on_terminal("-q");
    assert!(!quiet.contains(" left]"), "a bar under -q: {quiet:?}");
}

/// `observe.samples` with a sampled candidate and a greedy baseline: the
/// candidate is generated 3 times per prompt (seeds 0, 1, 2), the baseline
/// once; each metric is the mean over a prompt's samples, the prompt table
/// shows the spread, a rerun reuses every sample and a replay serves them.
#[test]
fn samples_are_averaged_per_prompt_with_their_spread() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), 6, "samples = 3", "temperature = 1.0");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_vauban"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{err}");
        err
    };
    let c = config.to_str().unwrap();
    run(&["run", c]);
    let out = dir.path().join("out");
    let bundle = |side: &str| vauban::bundle::Bundle::open(out.join("traces").join(side)).unwrap();
    assert_eq!(bundle("baseline").traces().len(), 6, "greedy: one each");
    let candidate = bundle("candidate");
    let ids: Vec<&str> = candidate.traces().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(&ids[..3], ["p0", "p0#1", "p0#2"]);
    assert_eq!(ids.len(), 18);

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    // The prompt is the unit: n is 6 pairs, not 18.
    let chars = report["metric_deltas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "output_length_chars")
        .unwrap();
    assert_eq!(chars["n"], 6);
    // p0's candidate value is the mean over its 3 samples' completions.
    let lengths: Vec<f64> = candidate.traces()[..3]
        .iter()
        .map(|t| {
            let text = t
                .artifacts_of(vauban::trace::ArtifactKind::Text)
                .find(|a| a.role() == Some(vauban::trace::Role::Completion))
                .map(|a| match &a.data {
                    vauban::trace::ArtifactData::Text { text } => text.chars().count(),
                    _ => 0,
                })
                .unwrap();
            text as f64
        })
        .collect();
    let mean = lengths.iter().sum::<f64>() / 3.0;
    let sd = (lengths.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let p0 = &report["prompts"][0];
    assert_eq!(p0["prompt_id"], "p0");
    let got = p0["metrics"]["output_length_chars"][1].as_f64().unwrap();
    assert!((got - mean).abs() < 1e-9, "{got} vs {mean}");
    // The spread: none on the greedy side, the samples' SD on the other.
    let spread = &p0["spread"]["output_length_chars"];
    assert!(spread[0].is_null(), "{spread}");
    assert!(
        (spread[1].as_f64().unwrap() - sd).abs() < 1e-9,
        "{spread} vs {sd}"
    );
    let limitations = report["limitations"].to_string();
    assert!(
        limitations.contains(
            "candidate: sampled decoding (temperature 1, seeds 0 to 2), 3 samples per prompt"
        ) && limitations.contains("baseline: greedy decoding"),
        "{limitations}"
    );

    // The same command reuses every sample.
    let err = run(&["run", c]);
    assert!(
        err.contains("reusing 6 of 6 recorded baseline traces")
            && err.contains("reusing 18 of 18 recorded candidate traces"),
        "{err}"
    );
    // A replay of the two bundles serves every sample: the same table.
    let again = dir.path().join("again");
    run(&[
        "diff",
        out.join("traces/baseline").to_str().unwrap(),
        out.join("traces/candidate").to_str().unwrap(),
        "--config",
        c,
        "--out",
        again.to_str().unwrap(),
    ]);
    let replayed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("report.json")).unwrap()).unwrap();
    assert_eq!(replayed["prompts"], report["prompts"]);
}

/// A side's own generation key is checked, and its error names that key;
/// `samples` with both sides greedy is a warning, not silence.
#[test]
fn side_generation_keys_are_checked_where_they_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let validate = |observe: &str, candidate: &str| {
        let config = write_config_with(dir.path(), 2, observe, candidate);
        Command::new(env!("CARGO_BIN_EXE_vauban"))
            .args(["validate"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let o = validate("", "temperature = -1.0");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("candidate.temperature: -1 is not a temperature"),
        "{err}"
    );
    let o = validate("temperature = -1.0", "");
    assert!(String::from_utf8_lossy(&o.stderr).contains("observe.temperature"));
    let o = validate("samples = 4", "");
    // validate lists its warnings in its report, on stdout.
    let err = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("observe.samples = 4 has no effect: both sides decode greedily"),
        "{err}"
    );
    let o = validate("samples = 0\ntemperature = 0.7", "");
    assert!(String::from_utf8_lossy(&o.stderr).contains("observe.samples: 0 is outside 1..=1000"));
}
