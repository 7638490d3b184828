//! `docs/report.schema.json` and `docs/config.schema.json` are generated
//! from the types (`vauban schema report|config`). A field added, removed
//! or renamed without regenerating them fails here, naming the command
//! that brings the file up to date.

use std::path::PathBuf;

fn doc(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("docs")
        .join(name)
}

/// Compares the checked-in schema with the generated one; with
/// `VAUBAN_BLESS=1` writes the generated one instead.
fn check(name: &str, which: &str, generated: String) {
    let path = doc(name);
    if std::env::var_os("VAUBAN_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk != generated {
        let line = on_disk
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || on_disk.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "docs/{name} is stale (first difference at line {line}): the types changed; \
             regenerate it with `cargo run -q -- schema {which} > docs/{name}` \
             (or `VAUBAN_BLESS=1 cargo test --test schemas`)"
        );
    }
}

#[test]
fn the_report_schema_is_the_one_the_types_generate() {
    check(
        "report.schema.json",
        "report",
        vauban::report::document::schema(),
    );
}

#[test]
fn the_config_schema_is_the_one_the_types_generate() {
    check("config.schema.json", "config", vauban::config::schema());
}

#[test]
fn the_config_schema_knows_every_claim_strength_and_section() {
    let s: serde_json::Value = serde_json::from_str(&vauban::config::schema()).unwrap();
    let text = s.to_string();
    for strength in vauban::report::ClaimStrength::ALL {
        assert!(
            text.contains(&format!("\"{}\"", strength.as_str())),
            "{strength}"
        );
    }
    let top: Vec<&str> = s["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in [
        "output",
        "suite",
        "observe",
        "baseline",
        "candidate",
        "scorers",
        "gates",
        "report",
    ] {
        assert!(top.contains(&key), "{key} missing from {top:?}");
    }
    // `deny_unknown_fields` becomes `additionalProperties: false`, so an
    // editor flags a typo as the loader would.
    assert_eq!(s["additionalProperties"], false);
}
