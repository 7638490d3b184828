//! The fuzz targets: the parsers and checks that take untrusted input, each
//! a function of arbitrary bytes that must return (an error is fine) and
//! never panic, hang or break an invariant. `fuzz/` drives them with
//! libFuzzer (`scripts/fuzz.sh`); `host/tests/fuzz_corpus.rs` replays their
//! corpora and a fixed set of mutations on every `cargo test`.
//!
//! Inputs are written to a scratch folder where the code under test reads
//! files (a config, a suite, a bundle), so the real reading path is fuzzed,
//! file checks included.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::bundle::Bundle;
use crate::plugin::claims::{EvidenceSet, ProposedClaim};
use crate::report::claims::{ClaimStatus, check};
use crate::trace::Trace;

/// A fuzz target: arbitrary bytes in; it returns or panics.
pub type Target = fn(&[u8]);

/// The targets, by name (the names of `fuzz/fuzz_targets/*.rs`).
pub const TARGETS: [(&str, Target); 4] = [
    ("config", config),
    ("suite", suite),
    ("bundle", bundle),
    ("claims", claims),
];

/// A scratch folder for this process (fuzzers run one input at a time per
/// process; the test harness runs each target on one thread).
fn scratch(target: &str) -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    let root = ROOT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("vauban-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    });
    let dir = root.join(target);
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).expect("the fuzz scratch folder is writable");
}

/// A run config, as `vauban validate --offline` and `vauban diff` plan it
/// (replay: no model is read).
pub fn config(data: &[u8]) {
    let dir = scratch("config");
    let path = dir.join("run.toml");
    write(&path, data);
    let _ = crate::pipeline::plan::Plan::from_file(&path, Some(&dir.join("out")), true);
}

/// A prompt suite, as both file formats.
pub fn suite(data: &[u8]) {
    let dir = scratch("suite");
    for name in ["suite.jsonl", "suite.toml"] {
        let path = dir.join(name);
        write(&path, data);
        if let Ok(s) = crate::config::Suite::load(&path) {
            // What `load` accepts holds its promises: unique, non-empty ids.
            let mut ids = std::collections::HashSet::new();
            for p in &s.prompts {
                assert!(!p.id.is_empty(), "an empty prompt id was accepted");
                assert!(ids.insert(&p.id), "duplicate prompt id {} accepted", p.id);
            }
        }
    }
}

/// A trace file, and a bundle manifest beside real trace files: what
/// `trace validate` accepts must be readable by every later step.
pub fn bundle(data: &[u8]) {
    // The trace validator on its own.
    if let Ok(t) = serde_json::from_slice::<Trace>(data)
        && t.validate().is_ok()
    {
        let _ = crate::report::access_from_evidence(crate::report::Evidence::Single(&[&t]));
        let _ = t.coverage();
    }
    // The input as the manifest of a bundle whose other files are a
    // recorded fixture's (when the fuzzer is given it).
    let dir = scratch("bundle").join("b");
    if !dir.join("traces").is_dir() {
        let _ = std::fs::create_dir_all(dir.join("traces"));
        if let Some(fixture) = fixture_bundle() {
            for entry in std::fs::read_dir(fixture.join("traces"))
                .into_iter()
                .flatten()
            {
                let entry = entry.expect("readable fixture");
                let _ = std::fs::copy(entry.path(), dir.join("traces").join(entry.file_name()));
            }
        }
    }
    write(&dir.join("manifest.json"), data);
    if let Ok(b) = Bundle::open(&dir) {
        let _ = b.verify_all();
        for t in b.traces() {
            for a in &t.artifacts {
                let _ = b.tensor(&t.id, &a.id);
            }
        }
    }
}

/// The recorded SmolLM2 bundle of the repository, if this is a checkout.
fn fixture_bundle() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/smollm2-chat");
    p.is_dir().then_some(p)
}

/// The claim check on an evidence set and a proposed claim (one JSON
/// object `{"evidence": ..., "claim": ...}`): whatever they say, a checked
/// claim is never above the traces' cap nor its proposal, cites only
/// evidence that exists, and a rejected claim has no strength.
pub fn claims(data: &[u8]) {
    #[derive(serde::Deserialize)]
    struct Input {
        evidence: EvidenceSet,
        claim: ProposedClaim,
    }
    let Ok(input) = serde_json::from_slice::<Input>(data) else {
        return;
    };
    let c = check(&input.claim, &input.evidence);
    match c.status {
        ClaimStatus::Rejected => assert!(c.strength.is_none(), "{c:?}"),
        _ => {
            let s = c.strength.expect("a kept claim has a strength");
            assert!(s <= input.evidence.claim_strength, "above the cap: {c:?}");
            assert!(s <= input.claim.strength, "above its proposal: {c:?}");
            assert!(!c.evidence.is_empty(), "kept without evidence: {c:?}");
        }
    }
    let known = input.evidence.supports_by_id();
    for id in &c.evidence {
        assert!(
            known.contains_key(id.as_str()),
            "cites {id}, which does not exist"
        );
    }
    if c.status == ClaimStatus::Accepted {
        assert!(c.reasons.is_empty(), "accepted with reasons: {c:?}");
    }
}
