//! Every model family vauban runs, against Hugging Face transformers (a
//! reference no one here wrote): `scripts/reference/compare_transformers.py`
//! builds a tiny random model of each family with transformers (real
//! layouts: Q/K norms, post-norms, GeGLU, soft-caps, sliding windows, two
//! RoPE bases), runs the same prompt through transformers and through this
//! build's `vauban trace`, and compares the logits, the residual stream
//! after every block and eight greedy tokens.
//!
//! The reference's Python environment is `scripts/setup-reference.sh`'s
//! (setup.sh installs it); without it the tests skip, unless
//! `VAUBAN_REQUIRE_REFERENCE=1` (CI), under which they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The reference environment's python; `None`, after a message, when it
/// is not installed (and not required).
fn reference_python() -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(root().join("scripts/setup-reference.sh"))
        .arg("--cached")
        .output()
        .unwrap();
    if out.status.success() {
        let path = String::from_utf8(out.stdout).unwrap();
        return Some(PathBuf::from(path.trim()));
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if std::env::var_os("VAUBAN_REQUIRE_REFERENCE").is_some_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// Runs the comparison on `executor` for the cases `only` (all when
/// empty); the per-model results.
fn compare(executor: &str, only: &[&str]) -> Option<serde_json::Value> {
    let python = reference_python()?;
    let out = tempfile::tempdir().unwrap();
    let done = Command::new(python)
        .arg(root().join("scripts/reference/compare_transformers.py"))
        .arg(env!("CARGO_BIN_EXE_vauban"))
        .arg(out.path())
        .args(["--executor", executor, "--only", &only.join(",")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    // The per-model lines, for the test's log.
    println!("{stdout}");
    assert!(
        done.status.success(),
        "compare_transformers.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("compare_transformers.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&json).unwrap();
    Some(meta["models"].clone())
}

#[test]
fn every_family_matches_transformers_at_every_block_on_candle() {
    let Some(models) = compare("candle", &[]) else {
        return;
    };
    let names: Vec<&str> = models
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for family in [
        "llama",
        "qwen2_bias",
        "mistral_window",
        "qwen3",
        "gemma2",
        "gemma3",
        "olmo2",
    ] {
        assert!(
            names.contains(&family),
            "{family} was not compared: {names:?}"
        );
    }
    for (name, m) in models.as_object().unwrap() {
        // The script's own verdict, and the figures it rests on.
        assert_eq!(m["ok"], true, "{name}: {m}");
        assert!(
            m["max_abs_logit_diff"].as_f64().unwrap() < 2e-4,
            "{name}: {m}"
        );
        assert!(!m["layers"].as_array().unwrap().is_empty(), "{name}: {m}");
        assert_eq!(m["vauban_greedy"], m["transformers_greedy"], "{name}");
    }
}
