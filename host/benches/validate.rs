//! Trace-check and bundle-read figures for traces with many artifacts: one
//! span producing N text artifacts, checked with `Trace::validate`, then
//! written as a bundle, opened and fully verified. The checks are linear in
//! the trace's size; this prints the times so that stays measured. Prints
//! figures; asserts nothing.
//!
//! Run: `cargo bench -p vauban --bench validate -- 1000 10000 100000`
//! (artifact counts; default 1,000, 10,000 and 100,000).

use std::collections::HashMap;
use std::time::Instant;

use vauban::bundle::{Bundle, BundleWriter, WriteMode};
use vauban::trace::fixture::TraceFixture;
use vauban::trace::{ArtifactData, ArtifactKind as K, Stage, StageProfile, Trace};

fn trace(n: usize) -> Trace {
    let mut f = TraceFixture::new("bench")
        .prompt("bench")
        .span(Stage::Tokenize, StageProfile::default());
    for i in 0..n {
        let text = format!("piece {i}");
        f = f.artifact(K::Text, ArtifactData::Text { text }, None, &[]);
    }
    f.trace()
}

fn main() -> anyhow::Result<()> {
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if counts.is_empty() {
        counts = vec![1_000, 10_000, 100_000];
    }
    println!("artifacts   validate     write     open+verify");
    for n in counts {
        let t = trace(n);
        let start = Instant::now();
        t.validate()?;
        let validate = start.elapsed();

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("b");
        let start = Instant::now();
        let mut w = BundleWriter::create(&path, WriteMode::CreateNew)?;
        w.add_trace(&t, &HashMap::new())?;
        w.finish()?;
        let write = start.elapsed();
        let start = Instant::now();
        Bundle::open(&path)?.verify_all()?;
        let open = start.elapsed();
        println!(
            "{n:>9} {:>9.1} ms {:>7.1} ms {:>9.1} ms",
            validate.as_secs_f64() * 1e3,
            write.as_secs_f64() * 1e3,
            open.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
