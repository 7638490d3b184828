//! The `vauban` binary, run as a user runs it.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn vauban(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .output()
        .expect("the vauban binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The bundle shipped in `examples/`, which the README's first command inspects.
fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/bundles/demo")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn help_describes_every_command() {
    let top = vauban(&["--help"]);
    assert!(top.status.success());
    assert!(stdout(&top).contains("trace"), "{}", stdout(&top));
    let trace = vauban(&["trace", "--help"]);
    let text = stdout(&trace);
    assert!(
        text.contains("inspect") && text.contains("validate"),
        "{text}"
    );
    for cmd in ["inspect", "validate", "sweep"] {
        let o = vauban(&["trace", cmd, "--help"]);
        assert!(o.status.success());
        assert!(stdout(&o).contains("<BUNDLE>"), "{}", stdout(&o));
    }
}

#[test]
fn inspect_summarises_the_demo_bundle() {
    let o = vauban(&["trace", "inspect", demo().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "trace fixture-baseline/capital",
        "trace fixture-candidate/lockpick",
        "1. tokenize",
        "2. prefill",
        "activation           4/4 traces",
        "weight_snapshot      0/4 traces, unsupported in 4",
        "unsupported weight_snapshot",
        "tok/s",
        "peak memory",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn inspect_json_is_machine_readable() {
    let o = vauban(&["trace", "inspect", "--json", demo().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["manifest"]["schema_version"], 1);
    let traces = v["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 4);
    assert_eq!(traces[0]["spans"][0]["stage"], "tokenize");
    assert!(traces[0]["profile"]["total_duration_ns"].as_u64().unwrap() > 0);
    let activation = v["coverage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "activation")
        .unwrap();
    assert_eq!(activation["traces_with"], 4);
}

#[test]
fn validate_passes_the_demo_and_fails_a_damaged_copy() {
    let ok = vauban(&["trace", "validate", demo().to_str().unwrap()]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("4 valid traces"), "{}", stdout(&ok));

    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("demo");
    copy_dir(&demo(), &copy);
    let tensors = copy.join("tensors/000000.safetensors");
    let mut bytes = std::fs::read(&tensors).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&tensors, bytes).unwrap();

    let bad = vauban(&["trace", "validate", copy.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    let err = stderr(&bad);
    assert!(err.contains("is damaged"), "{err}");
    assert!(err.contains("does not match its sha256"), "{err}");
}

#[test]
fn a_folder_that_is_not_a_bundle_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = vauban(&["trace", "inspect", tmp.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("error: cannot read trace bundle"), "{err}");
    assert!(err.contains("it has no manifest.json"), "{err}");
}

#[test]
fn sweep_groups_traces_by_the_axis() {
    let o = vauban(&["trace", "sweep", demo().to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["axis"], "token_count");
    assert_eq!(v["coverage_stable"], true);
    let values: Vec<u64> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["axis_value"].as_u64().unwrap())
        .collect();
    let mut sorted = values.clone();
    sorted.sort();
    assert_eq!(values, sorted, "points ascend by axis value");
    assert_eq!(values.len(), 4);
}

#[test]
fn sweep_refuses_unstable_coverage_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mixed");
    let mut w =
        vauban::bundle::BundleWriter::create(&dir, vauban::bundle::WriteMode::CreateNew).unwrap();
    let (with_act, tensors) = common::trace_with_activation("with-act", 4, 8);
    w.add_trace(&with_act, &tensors).unwrap();
    w.add_trace(&common::trace_text_only("text-only", 6), &HashMap::new())
        .unwrap();
    w.finish().unwrap();

    let refused = vauban(&["trace", "sweep", dir.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    for needle in [
        "`text-only`",
        "`with-act`",
        "activation",
        "--allow-unstable-coverage",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in {err}");
    }

    let allowed = vauban(&[
        "trace",
        "sweep",
        dir.to_str().unwrap(),
        "--allow-unstable-coverage",
    ]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert!(
        stdout(&allowed).contains("UNSTABLE"),
        "{}",
        stdout(&allowed)
    );
}

/// A bundle of a batch-size sweep whose throughput follows the USL with
/// λ = 1000 tokens/s, σ = 0.05 and κ = 0.002 (each trace: 64 tokens per
/// sequence, its pass's time), two traces per batch size.
fn usl_sweep(dir: &std::path::Path, noise: [f64; 6]) -> std::path::PathBuf {
    let bundle = dir.join("sweep");
    let mut w = vauban::bundle::BundleWriter::create(&bundle, vauban::bundle::WriteMode::CreateNew)
        .unwrap();
    for (n, e) in [1u32, 2, 4, 8, 16, 32].into_iter().zip(noise) {
        let x = vauban::report::usl::throughput(1000.0, 0.05, 0.002, f64::from(n)) * (1.0 + e);
        let ns = (64.0 * f64::from(n) / x * 1e9).round() as u64;
        for k in 0..2 {
            let t = common::trace_batched(&format!("b{n}-{k}"), 64, n, ns);
            w.add_trace(&t, &HashMap::new()).unwrap();
        }
    }
    w.finish().unwrap();
    bundle
}

#[test]
fn a_batch_size_sweep_is_fitted_with_the_universal_scalability_law() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = usl_sweep(tmp.path(), [0.0; 6]);
    let b = bundle.to_str().unwrap();
    let o = vauban(&[
        "trace",
        "sweep",
        b,
        "--axis",
        "batch_size",
        "--fit",
        "usl",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let usl = &v["usl"];
    for (param, want) in [("lambda", 1000.0), ("sigma", 0.05), ("kappa", 0.002)] {
        let got = usl[param]["value"].as_f64().unwrap();
        // The durations are whole nanoseconds: the fit recovers the
        // curve to that rounding.
        assert!(
            (got - want).abs() <= 1e-4 * want,
            "{param}: {got} vs {want}"
        );
    }
    assert_eq!(usl["residuals"].as_array().unwrap().len(), 6);
    let text = stdout(&vauban(&[
        "trace",
        "sweep",
        b,
        "--axis",
        "batch_size",
        "--fit",
        "usl",
    ]));
    for needle in [
        "USL fit",
        "σ = 0.05",
        "κ = 0.002",
        "peak throughput at N ≈ 21.8",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }
    // Throughput against prompt length is no concurrency sweep.
    let refused = vauban(&["trace", "sweep", b, "--fit", "usl"]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(err.contains("--axis batch_size"), "{err}");
}

/// The fit of a noisy sweep is the least-squares optimum scipy's
/// `curve_fit` finds on the same points (`scripts/reference/fit_usl.py`).
#[test]
fn the_usl_fit_is_the_one_scipy_finds() {
    let Some(python) = common::reference::python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bundle = usl_sweep(tmp.path(), [0.02, -0.015, 0.01, -0.02, 0.015, -0.01]);
    let o = vauban(&[
        "trace",
        "sweep",
        bundle.to_str().unwrap(),
        "--axis",
        "batch_size",
        "--fit",
        "usl",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json = tmp.path().join("sweep.json");
    std::fs::write(&json, &o.stdout).unwrap();
    let ours: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let scipy = std::process::Command::new(python)
        .arg(common::reference::root().join("scripts/reference/fit_usl.py"))
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        scipy.status.success(),
        "{}",
        String::from_utf8_lossy(&scipy.stderr)
    );
    let theirs: serde_json::Value = serde_json::from_slice(&scipy.stdout).unwrap();
    for param in ["lambda", "sigma", "kappa"] {
        let (a, b) = (
            ours["usl"][param]["value"].as_f64().unwrap(),
            theirs[param].as_f64().unwrap(),
        );
        assert!(
            (a - b).abs() <= 1e-6 * b.abs(),
            "{param}: vauban {a}, scipy {b}"
        );
    }
}

#[test]
fn each_kind_of_failure_has_its_own_exit_code_and_help_lists_them() {
    // 2: the command line itself is wrong (clap), never a gate.
    for args in [
        &["run", "--bogus", "x.toml"][..],
        &["run"][..],
        &["generate", "--temperature"][..],
    ] {
        let o = vauban(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    // 1: the command ran and failed, naming what failed.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let o = vauban(&["validate", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("absent.toml"), "{}", stderr(&o));
    let o = vauban(&["trace", "inspect", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // 0: done.
    let o = vauban(&["trace", "validate", demo().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // (3, a failed `fail` gate after every report is written, is checked
    // by run_report.rs, which runs a model.)

    // The table is in the help of the binary and of the commands that can
    // fail a gate, one line per code.
    for args in [
        &["--help"][..],
        &["run", "--help"][..],
        &["diff", "--help"][..],
    ] {
        let help = stdout(&vauban(args));
        assert!(help.contains("Exit codes:"), "{args:?}: {help}");
        for code in ["0", "1", "2", "3"] {
            assert!(
                help.contains(&format!("\n  {code}  ")),
                "{args:?}: no line for exit code {code}: {help}"
            );
        }
    }
}

#[test]
fn version_names_the_commit() {
    let o = vauban(&["--version"]);
    let v = stdout(&o);
    assert!(
        v.starts_with(&format!("vauban {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let commit = v
        .split("(commit ")
        .nth(1)
        .unwrap()
        .trim_end()
        .trim_end_matches(')');
    // A git checkout gives a hash (with -dirty for local changes).
    let hash = commit.trim_end_matches("-dirty");
    assert!(
        commit == "unknown" || (hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
}

#[test]
fn completions_and_the_man_page_cover_every_command() {
    for (shell, marker) in [
        ("bash", "_vauban()"),
        ("zsh", "#compdef vauban"),
        ("fish", "complete -c vauban"),
    ] {
        let o = vauban(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        assert!(script.contains(marker), "{shell}");
        for command in ["run", "diff", "measure", "orthogonalize", "inspect"] {
            assert!(script.contains(command), "{shell} lacks {command}");
        }
    }
    let o = vauban(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    let o = vauban(&["manpage"]);
    let man = stdout(&o);
    assert!(o.status.success());
    assert!(
        man.contains(".TH vauban 1") && man.contains(".SH SUBCOMMANDS"),
        "{man}"
    );
    assert!(
        man.contains("Exit codes"),
        "the exit-code table is in the page"
    );
}

/// `vauban … --json | head`: the reader closing the pipe is its choice;
/// vauban ends quietly with 0, whether the write failed in its own code or
/// inside serde_json.
#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [vec!["trace", "inspect", "--json"], vec!["trace", "inspect"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        // Closed before vauban writes: its first write fails with EPIPE.
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_vauban"))
            .args(&args)
            .arg(demo())
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}
