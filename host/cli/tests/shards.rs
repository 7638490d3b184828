//! A run cut into shards (`vauban run --shard K/N`, each in its own
//! process), merged (`vauban merge`) and replayed (`vauban diff`) gives the
//! unsharded run's report, but for the note that says it was sharded; a
//! missing, duplicated, interrupted or foreign shard is refused by name.
//! On the system-prompt recipe with SmolLM2 (skips without it).

mod common;

use std::path::{Path, PathBuf};

use common::{arg as s, output_text as said};
use serde_json::Value;

fn vauban(args: &[&str]) -> std::process::Output {
    let plugin_dir = common::plugins::wasm("vauban-plugin-refusal")
        .parent()
        .unwrap()
        .to_path_buf();
    std::process::Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .env("VAUBAN_PLUGIN_DIR", plugin_dir)
        .output()
        .unwrap()
}

fn report(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

/// The report of `vauban diff` on a merged output's bundles under
/// `config`, written to `out` (a failed gate's exit 3 is a report too).
fn diff_merged(merged: &Path, config: &Path, out: &Path) -> Value {
    let o = vauban(&[
        "diff",
        s(&merged.join("traces/baseline")),
        s(&merged.join("traces/candidate")),
        "--config",
        s(config),
        "--out",
        s(out),
    ]);
    assert!(
        o.status.success() || o.status.code() == Some(3),
        "{}",
        said(&o)
    );
    report(out)
}

fn recipe() -> PathBuf {
    common::plugins::root().join("examples/system-prompt.toml")
}

/// Runs the recipe as `n` shards and merges them into `dir/merged`.
fn sharded(dir: &Path, n: u32) -> Vec<PathBuf> {
    let parts: Vec<PathBuf> = (1..=n)
        .map(|k| dir.join(format!("shard-{k}-of-{n}")))
        .collect();
    for (k, part) in (1..=n).zip(&parts) {
        let shard = format!("{k}/{n}");
        let o = vauban(&["run", s(&recipe()), "--shard", &shard, "--out", s(part)]);
        assert!(o.status.success(), "shard {shard}: {}", said(&o));
        assert!(part.join("shard.json").is_file());
    }
    parts
}

#[test]
fn a_sharded_run_merged_gives_the_unsharded_report() {
    let Some(_) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let o = vauban(&["run", s(&recipe()), "--out", s(&whole)]);
    assert!(
        o.status.success() || o.status.code() == Some(3),
        "{}",
        said(&o)
    );
    let want = report(&whole);
    for n in [1, 2, 3] {
        let parts = sharded(dir.path(), n);
        let merged = dir.path().join(format!("merged-{n}"));
        let mut args = vec!["merge"];
        args.extend(parts.iter().map(|p| s(p)));
        args.extend(["--out", s(&merged)]);
        let o = vauban(&args);
        assert!(o.status.success(), "{}", said(&o));
        let got = diff_merged(&merged, &recipe(), &dir.path().join(format!("report-{n}")));
        for key in [
            "metric_deltas",
            "distribution",
            "claims",
            "gates",
            "prompts",
            "examples",
        ] {
            assert_eq!(got[key], want[key], "{key} differs with {n} shard(s)");
        }
        // The limitations are the run's, and the note that says how.
        let mut limits: Vec<Value> = got["limitations"].as_array().unwrap().clone();
        let note = limits
            .iter()
            .position(|l| {
                l.as_str()
                    .unwrap()
                    .contains(&format!("recorded in {n} shards"))
            })
            .unwrap_or_else(|| panic!("no sharding note: {limits:?}"));
        limits.remove(note);
        assert_eq!(Value::Array(limits), want["limitations"]);
    }
}

#[test]
fn a_shard_missing_twice_interrupted_or_of_another_run_is_refused_by_name() {
    let Some(_) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let parts = sharded(dir.path(), 3);
    let merge = |given: &[&Path]| {
        let out = dir.path().join("never");
        let mut args = vec!["merge".to_owned()];
        args.extend(given.iter().map(|p| p.display().to_string()));
        args.extend(["--out".to_owned(), out.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = vauban(&args);
        assert_eq!(o.status.code(), Some(1), "{}", said(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = merge(&[&parts[0], &parts[2]]);
    assert!(
        err.contains("shard 2/3 is missing") && err.contains("--shard 2/3"),
        "{err}"
    );
    let err = merge(&[&parts[0], &parts[1], &parts[1], &parts[2]]);
    assert!(err.contains("shard 2/3 is given twice"), "{err}");
    // A shard of another config (its record says so).
    let foreign = dir.path().join("foreign");
    copy_dir(&parts[1], &foreign);
    let record = foreign.join("shard.json");
    let mut r: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    r["config_sha256"] = "0".repeat(64).into();
    std::fs::write(&record, r.to_string()).unwrap();
    let err = merge(&[&parts[0], &foreign, &parts[2]]);
    assert!(
        err.contains("foreign") && err.contains("its config differs"),
        "{err}"
    );
    // An interrupted shard has no record.
    std::fs::remove_file(&record).unwrap();
    let err = merge(&[&parts[0], &foreign, &parts[2]]);
    assert!(err.contains("no shard.json: not a finished shard"), "{err}");
    // K/N out of range is a usage error.
    for bad in ["0/2", "3/2", "1/0"] {
        let o = vauban(&["run", s(&recipe()), "--shard", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", said(&o));
        assert!(said(&o).contains("1 <= K <= N"), "{}", said(&o));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let t = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

/// A config that measures a direction: shards never measure their own; the
/// direction is measured once (`--measure-only`, into the config's own
/// output) and every shard reuses it.
#[test]
fn the_direction_is_measured_once_and_every_shard_reuses_it() {
    let Some(_) = common::smollm2_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The quickstart, its output moved into the temporary folder.
    let examples = common::plugins::root().join("examples");
    let text = std::fs::read_to_string(examples.join("quickstart.toml"))
        .unwrap()
        .replace(
            "output = \"../out/quickstart\"",
            &format!("output = \"{}\"", dir.path().join("whole").display()),
        )
        .replace("\"prompts/", &format!("\"{}/prompts/", examples.display()));
    let config = dir.path().join("quickstart.toml");
    std::fs::write(&config, text).unwrap();
    let direction = dir.path().join("whole/refusal_direction.safetensors");
    let shard = |k: &str| {
        vauban(&[
            "run",
            s(&config),
            "--shard",
            k,
            "--out",
            s(&dir.path().join(k.replace('/', "-of-"))),
        ])
    };
    let o = shard("1/2");
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    assert!(said(&o).contains("--measure-only"), "{}", said(&o));
    assert!(!direction.exists(), "a shard measured its own");
    let o = vauban(&["run", s(&config), "--measure-only"]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(direction.is_file());
    let measured = std::fs::metadata(&direction).unwrap().modified().unwrap();
    for k in ["1/2", "2/2"] {
        let o = shard(k);
        assert!(o.status.success(), "{}", said(&o));
    }
    assert_eq!(
        std::fs::metadata(&direction).unwrap().modified().unwrap(),
        measured,
        "the shards reused the direction"
    );
    assert!(
        !dir.path()
            .join("1-of-2/refusal_direction.safetensors")
            .exists()
    );
    // Merged and replayed, the report still says what was done to the
    // candidate: each recording keeps its transformation in words.
    let merged = dir.path().join("merged");
    let o = vauban(&[
        "merge",
        s(&dir.path().join("1-of-2")),
        s(&dir.path().join("2-of-2")),
        "--out",
        s(&merged),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let r = diff_merged(&merged, &config, &dir.path().join("report"));
    let summary = r["target_change"]["transformation_summary"]
        .as_str()
        .unwrap_or_default();
    assert!(
        summary.starts_with("directional ablation"),
        "{}",
        r["target_change"]
    );
    assert!(
        r["activation_findings"].is_object(),
        "the measured direction was found"
    );
}
