//! A bundle with a large tensor opens and is inspected without its data
//! being read into memory. Its own test binary (one test), so no other
//! test's allocations disturb the process's resident-set measurement.

mod common;

use vauban::bundle::{Bundle, BundleWriter, WriteMode};
use vauban::trace::ArtifactKind;

/// Resident set size of this process, in bytes (Linux).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_large_tensor_is_not_loaded_until_read() {
    const TOKENS: usize = 4096;
    const WIDTH: usize = 16_384; // 64 Mi f32 = 256 MiB
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    let act_id = {
        let (trace, tensors) = common::trace_with_activation("big", TOKENS, WIDTH);
        let mut w = BundleWriter::create(&dir, WriteMode::CreateNew).unwrap();
        w.add_trace(&trace, &tensors).unwrap();
        w.finish().unwrap();
        trace
            .artifacts_of(ArtifactKind::Activation)
            .next()
            .unwrap()
            .id
            .clone()
    }; // the in-memory copies are freed here

    let Some(before) = rss_bytes() else {
        eprintln!("skipping: /proc/self/status is not available on this system");
        return;
    };
    let bundle = Bundle::open(&dir).unwrap();
    let trace = &bundle.traces()[0];
    let summary = match &trace.artifact(&act_id).unwrap().data {
        vauban::trace::ArtifactData::Tensor { summary, .. } => summary.clone(),
        _ => unreachable!(),
    };
    assert_eq!(summary.shape, vec![1, TOKENS, WIDTH]);
    let after_open = rss_bytes().unwrap();
    let grown = after_open.saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "opening a bundle with a 256 MiB tensor grew the resident set by {} MiB",
        grown >> 20
    );

    // Reading the tensor hashes it (touching its pages) and serves values from the map.
    let t = bundle.tensor("big", &act_id).unwrap();
    assert_eq!(t.bytes.len(), TOKENS * WIDTH * 4);
    assert_eq!(t.get(1), Some(-2.75)); // element 1: (1 % 97) * 0.25 - 3
}
