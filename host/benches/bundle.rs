//! Bundle I/O figures: write, open (headers only), first read of one large
//! tensor (hash check), and full verification, for one tensor of a given
//! size. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p vauban --bench bundle -- 1024` (tensor size in MiB,
//! default 256).

use std::collections::HashMap;
use std::time::Instant;

use vauban::bundle::{Bundle, BundleWriter, WriteMode};
use vauban::trace::{
    ArtifactData, ArtifactKind as K, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
    SupportLevel, TensorData, TraceBuilder, TraceRequest,
};

fn main() -> anyhow::Result<()> {
    let mib: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(256);
    let width = 4096;
    let tokens = mib * (1 << 20) / 4 / width;
    let values: Vec<f32> = (0..tokens * width)
        .map(|i| (i % 1013) as f32 * 1e-3)
        .collect();
    let tensor = TensorData::from_f32(vec![1, tokens, width], &values)?;
    drop(values);

    let request = TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: None,
        text: Some("bench".into()),
        token_ids: None,
        observe: vec![K::Activation],
        layers: vec![0],
        raw_tensors: true,
        raw_kinds: Vec::new(),
    };
    let caps = Capabilities::uniform("bench", &[DeviceKind::Cpu], SupportLevel::Full);
    let model = ModelRef {
        name: "bench".into(),
        path: None,
        sha256: None,
        tokenizer_sha256: None,
    };
    let mut b = TraceBuilder::new("bench", model, caps, "cpu", request);
    let span = b.span(Stage::Forward, StageProfile::default());
    let t0 = Instant::now();
    let data = ArtifactData::tensor(tensor.as_ref(), true);
    let summarize = t0.elapsed();
    let id = b.artifact_with(&span, K::Activation, data, Some(0), Default::default());
    let trace = b.finish()?;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench");
    let t0 = Instant::now();
    let mut w = BundleWriter::create(&path, WriteMode::CreateNew)?;
    w.add_trace(&trace, &HashMap::from([(id.clone(), tensor)]))?;
    w.finish()?;
    let write = t0.elapsed();

    let t0 = Instant::now();
    let bundle = Bundle::open(&path)?;
    let open = t0.elapsed();
    let t0 = Instant::now();
    let first = bundle.tensor("bench", &id)?.get(1);
    let first_read = t0.elapsed();
    let t0 = Instant::now();
    let again = bundle.tensor("bench", &id)?.get(2);
    let second_read = t0.elapsed();
    let t0 = Instant::now();
    bundle.verify_all()?;
    let verify = t0.elapsed();

    let rate = |d: std::time::Duration| mib as f64 / d.as_secs_f64();
    println!("tensor: {mib} MiB f32 [1, {tokens}, {width}] (values {first:?}, {again:?})");
    println!(
        "summarize:   {:>9.1} ms ({:.0} MiB/s)",
        summarize.as_secs_f64() * 1e3,
        rate(summarize)
    );
    println!(
        "write:       {:>9.1} ms ({:.0} MiB/s, incl. fsync and hashing)",
        write.as_secs_f64() * 1e3,
        rate(write)
    );
    println!(
        "open:        {:>9.3} ms (manifest, trace JSON, tensor header)",
        open.as_secs_f64() * 1e3
    );
    println!(
        "first read:  {:>9.1} ms ({:.0} MiB/s, sha256 of the tensor)",
        first_read.as_secs_f64() * 1e3,
        rate(first_read)
    );
    println!(
        "second read: {:>9.3} ms (already verified)",
        second_read.as_secs_f64() * 1e3
    );
    println!(
        "verify all:  {:>9.1} ms ({:.0} MiB/s, every file hashed)",
        verify.as_secs_f64() * 1e3,
        rate(verify)
    );
    Ok(())
}
