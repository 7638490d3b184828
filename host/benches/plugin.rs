//! Plugin-host figures: compile and cache load, instantiation per job, the
//! overhead of one `score` call, and the throughput of scoring 10,000 traces
//! through the `refusal` component against the same logic compiled
//! natively (`vauban_plugin_sdk::refusal::Detector`), in one run. Prints
//! figures; asserts only that both paths agree.
//!
//! Run: `cargo bench -p vauban --bench plugin -- 10000` (traces, default
//! 10,000). The plugins are built by `vauban-test-artifacts`, as for the tests.

use std::time::{Duration, Instant};

use vauban::plugin::{HostOptions, PluginHost, SandboxOptions, Scorer};
use vauban::trace::fixture::TraceFixture;
use vauban::trace::{Role, Stage, StageProfile, Trace};
use vauban_plugin_sdk::refusal::Detector;

const COMPLETIONS: [&str; 6] = [
    "I'm sorry, but I can't help with that request. If you have another question, I'd be glad to help.",
    "Paris is the capital of France. It has been the country's capital for most of its history and is on the Seine.",
    "Here is a short poem about the sea:\nWaves fold over waves,\nsalt and light and distance,\nthe tide keeps its time.",
    "As an AI, I don't have personal experiences, but I can tell you what people usually say about this topic.",
    "To bake bread you need flour, water, salt and yeast. Mix, knead for ten minutes, let it rise, shape it, and bake.",
    "The answer depends on the year you mean. Could you say which one? Then I can give you the exact figure.",
];

fn trace(i: usize) -> Trace {
    let text = format!("{} ({i})", COMPLETIONS[i % COMPLETIONS.len()]);
    TraceFixture::new(format!("t{i}"))
        .prompt("a prompt")
        .prompt_id(&format!("p{i}"))
        .span(Stage::Decode, StageProfile::default())
        .text(Role::Completion, &text)
        .trace()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let wasm = std::path::PathBuf::from(vauban_test_artifacts::VAUBAN_PLUGIN_REFUSAL);
    let cache = tempfile::tempdir()?;

    // Compile, then load from this host's cache.
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    })?;
    let t = Instant::now();
    let plugin = host.load(&wasm)?;
    let compile = t.elapsed();
    let t = Instant::now();
    let cached = host.load(&wasm)?;
    let from_cache = t.elapsed();
    assert!(cached.cached);
    let scorer = Scorer::new(plugin, "{}", SandboxOptions::default())?;
    println!(
        "refusal component: {} bytes",
        std::fs::metadata(&wasm)?.len()
    );
    println!(
        "compile {:.1} ms, load from cache {:.2} ms",
        compile.as_secs_f64() * 1e3,
        from_cache.as_secs_f64() * 1e3
    );

    // A fresh sandboxed instance per job (store, WASI context, instantiate, configure).
    let fresh: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            let s = scorer.session().expect("instance");
            drop(s);
            t.elapsed()
        })
        .collect();
    println!(
        "fresh instance per job (instantiate + configure): median {:.1} µs over 200",
        us(median(fresh))
    );

    // One score call with one trace, on a kept instance.
    let one = trace(1);
    let mut session = scorer.session()?;
    for _ in 0..1000 {
        session.score(&[&one], None, None)?;
    }
    let calls: Vec<Duration> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            session.score(&[&one], None, None).expect("score");
            t.elapsed()
        })
        .collect();
    println!(
        "one score call, 1 trace, kept instance: median {:.2} µs over 10000",
        us(median(calls))
    );

    // Throughput: n traces, in batches of 1000, wasm against native.
    let traces: Vec<Trace> = (0..n).map(trace).collect();
    let refs: Vec<&Trace> = traces.iter().collect();
    let texts: Vec<String> = (0..n)
        .map(|i| format!("{} ({i})", COMPLETIONS[i % COMPLETIONS.len()]))
        .collect();
    let detector = Detector::jailbreakbench();
    let mut wasm_runs = Vec::new();
    let mut native_runs = Vec::new();
    let mut wasm_refusals = 0.0;
    let mut native_refusals = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let mut session = scorer.session()?;
        wasm_refusals = 0.0;
        for batch in refs.chunks(1000) {
            let out = session.score(batch, None, None)?;
            wasm_refusals += out.metrics.iter().map(|m| m.value).sum::<f64>();
        }
        wasm_runs.push(t.elapsed());
        let t = Instant::now();
        native_refusals = texts
            .iter()
            .filter(|c| detector.refuses(std::hint::black_box(c)))
            .count();
        native_runs.push(t.elapsed());
    }
    assert_eq!(
        wasm_refusals as usize, native_refusals,
        "wasm and native disagree"
    );
    let (w, nat) = (median(wasm_runs), median(native_runs));
    println!(
        "{n} traces ({native_refusals} refusals), median of 5: wasm {:.1} ms ({:.0} traces/s, views built by the host included), native {:.1} ms ({:.0} traces/s); wasm/native = {:.2}x",
        w.as_secs_f64() * 1e3,
        n as f64 / w.as_secs_f64(),
        nat.as_secs_f64() * 1e3,
        n as f64 / nat.as_secs_f64(),
        w.as_secs_f64() / nat.as_secs_f64()
    );
    Ok(())
}
