//! Anything `trace validate` accepts, every command handles; a tensor that
//! fails its hash or has nothing to read is an error naming it, never a
//! panic and never evidence dropped in silence.

mod common;

use std::path::{Path, PathBuf};

use vauban::bundle::{Bundle, BundleWriter, WriteMode};
use vauban::config::{Prompt, Redaction, Suite};
use vauban::pipeline::analyze::projections;
use vauban::report::document::Side;

fn suite() -> Suite {
    Suite::new(
        vec![Prompt {
            id: "prompt-t0".into(),
            text: "The capital of France is".into(),
            category: None,
            expected_behavior: None,
            redaction: Redaction::Safe,
            tags: vec![],
        }],
        "test",
    )
    .unwrap()
}

/// A one-trace bundle whose activation has shape `[1, tokens, width]`.
fn bundle(dir: &Path, name: &str, tokens: usize, width: usize) -> PathBuf {
    let path = dir.join(name);
    let (t, tensors) = common::trace_with_activation("t0", tokens, width);
    let mut w = BundleWriter::create(&path, WriteMode::CreateNew).unwrap();
    w.add_trace(&t, &tensors).unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn an_activation_with_no_rows_is_an_error_naming_it_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let empty = bundle(dir.path(), "empty", 0, 8);
    let good = bundle(dir.path(), "good", 3, 8);
    // `trace validate` accepts it (a zero-token activation is well formed)...
    let b = Bundle::open(&empty).unwrap();
    b.verify_all().unwrap();
    let g = Bundle::open(&good).unwrap();
    // ...so the analysis must handle it: an error that names it.
    let e = projections(
        &suite(),
        [(Side::Baseline, &g), (Side::Candidate, &b)],
        &[1.0; 8],
    )
    .expect_err("no row to project");
    let text = format!("{e:#}");
    assert!(
        text.contains("activation") && text.contains("`t0`") && text.contains("no token row"),
        "{text}"
    );
    // A direction of another width is said to be one, not dropped.
    let e = projections(
        &suite(),
        [(Side::Baseline, &g), (Side::Candidate, &g)],
        &[1.0; 5],
    )
    .expect_err("widths differ");
    assert!(format!("{e:#}").contains("rows of 8 values"), "{e:#}");
    // The good pair projects.
    let (layers, series) = projections(
        &suite(),
        [(Side::Baseline, &g), (Side::Candidate, &g)],
        &[1.0; 8],
    )
    .unwrap()
    .unwrap();
    assert_eq!(layers, [1]);
    assert_eq!(series.len(), 2);
}

#[test]
fn a_flipped_bit_in_a_tensor_is_an_error_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let good = bundle(dir.path(), "good", 3, 8);
    let flipped = bundle(dir.path(), "flipped", 3, 8);
    let file = flipped.join("tensors/000000.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    // Opening reads headers, not data; the analysis then reads the tensor.
    let g = Bundle::open(&good).unwrap();
    let f = Bundle::open(&flipped).unwrap();
    let e = projections(
        &suite(),
        [(Side::Baseline, &g), (Side::Candidate, &f)],
        &[1.0; 8],
    )
    .expect_err("the damaged tensor is not dropped in silence");
    let text = format!("{e:#}");
    assert!(
        text.contains("cannot read activation") && text.contains("sha256"),
        "{text}"
    );
    // And the whole-bundle check `vauban diff` runs first names the file.
    let e = f.verify_all().unwrap_err().to_string();
    assert!(e.contains("000000.safetensors"), "{e}");
}

#[test]
fn an_oversized_manifest_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    std::fs::create_dir(&path).unwrap();
    // A sparse 1 TiB manifest: reading it would exhaust memory.
    let f = std::fs::File::create(path.join("manifest.json")).unwrap();
    f.set_len(1 << 40).unwrap();
    let e = Bundle::open(&path).unwrap_err().to_string();
    assert!(
        e.contains("manifest.json is 1099511627776 bytes, over the 67108864-byte limit"),
        "{e}"
    );
}
