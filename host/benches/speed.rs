//! The embedded backend against llama.cpp, on the same GGUF with the same
//! thread count, in one run: prompt processing (`pp128`, `pp512`: one
//! forward over the prompt into an empty KV cache, logits at the last
//! position) and generation (`tg128`: 128 single-token steps from an empty
//! cache), as llama-bench defines them; and vauban's batched decode
//! (`tg128x8`: 8 sequences of 128 steps, one pass per step, tokens of all
//! 8 per second; llama-bench has no such test); and decode after a long
//! context (`tg64@d2048`: 64 steps after 2048 positions, llama-bench's
//! `-n 64 -d 2048`), where the KV cache is read as much as the weights.
//! The `tensor attn` column
//! runs the weights as stored with attention as tensor operations per
//! sequence (a GPU's path) instead of the CPU's fused call; the `kv f16`
//! column keeps the KV cache in f16 (llama-bench's default cache type; the
//! other columns keep it in f32). Also the machine's memory read
//! bandwidth (a STREAM-like sum over 1 GiB on every thread) and the bound
//! it puts on decode: every matrix is read once per token.
//!
//! With `--models A,B,...` (one file per quantization preset,
//! `scripts/bench-families.sh --presets`), one row per file instead: the types its
//! matrices hold, and vauban's `pp128`, `pp512` and `tg128` against
//! llama-bench's better of flash attention off and on.
//!
//! Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p vauban --bench speed -- [--model GGUF | --models A,B]
//! [--llama-bench PATH | --no-llama-bench] [--reps N]`. `--llama-bench` defaults to the binary
//! `scripts/build-llama-server.sh --bench` caches; without one, only
//! vauban's figures print. `VAUBAN_MODELS` overrides where the default
//! model (SmolLM2-135M-Instruct Q4_1, `scripts/fetch-model.sh`) is looked for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use vauban::executor::candle::CandleExecutor;
use vauban::executor::candle::model::llama::{LogitsAt, NoHook, Seq};
use vauban::executor::{DeviceSpec, LocalModel, ModelSpec};
use vauban::model::{KvType, WeightMode};

const LLAMA_CPP_VERSION: &str = "9993.0.0";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// GB/s of a parallel read over a buffer far larger than any cache, best of 5.
/// The loop asks for the data 8 KiB ahead (2048 f32s), as the decode
/// kernels do: on this machine the hardware's prefetcher alone read 15-20%
/// less (36.9-39.5 against 44.1-49.0 GB/s, four alternations), and a
/// bound measured without it was beaten by the kernels (Q8_0's decode at
/// 142% of it).
fn read_bandwidth(threads: usize) -> f64 {
    let n = 256 << 20; // f32s: 1 GiB, far past any last-level cache
    let buf = vec![1f32; n];
    let mut best = 0f64;
    for _ in 0..5 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for part in buf.chunks(n.div_ceil(threads)) {
                s.spawn(move || {
                    let mut acc = [0f32; 16];
                    for c in part.chunks_exact(16) {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: SSE is x86-64's baseline; a prefetch reads
                        // nothing and never faults.
                        unsafe {
                            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                            _mm_prefetch::<_MM_HINT_T0>(c.as_ptr().wrapping_add(2048).cast());
                        }
                        for i in 0..16 {
                            acc[i] += c[i];
                        }
                    }
                    std::hint::black_box(acc);
                });
            }
        });
        best = best.max((n * 4) as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// vauban's `pp128`, `pp512` and `tg128` on `exec`, medians over `reps`.
fn core_figures(exec: &CandleExecutor, reps: usize) -> anyhow::Result<Vec<(String, f64)>> {
    let m = &exec.model.model;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(256);
    let all = exec.model.encode(&text)?;
    // Warm-up: first touch of every weight.
    m.run(&all[..16], None, &mut NoHook, LogitsAt::Last)?;
    let mut out = Vec::new();
    for n in [128, 512] {
        let ids = &all[..n];
        let mut v = Vec::new();
        for _ in 0..reps {
            let mut cache = m.new_cache();
            let t = Instant::now();
            m.run(ids, Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
            v.push(n as f64 / t.elapsed().as_secs_f64());
        }
        out.push((format!("pp{n}"), median(v)));
    }
    let mut v = Vec::new();
    for _ in 0..reps {
        let mut cache = m.new_cache();
        let t = Instant::now();
        for &id in &all[..128] {
            m.run(&[id], Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
        }
        v.push(128.0 / t.elapsed().as_secs_f64());
    }
    out.push(("tg128".into(), median(v)));
    Ok(out)
}

/// [`core_figures`], then decode after a long context and batched decode.
fn vauban_figures(exec: &CandleExecutor, reps: usize) -> anyhow::Result<[(String, f64); 5]> {
    let m = &exec.model.model;
    let all = exec
        .model
        .encode(&"The quick brown fox jumps over the lazy dog. ".repeat(256))?;
    let mut out = core_figures(exec, reps)?;
    // Decode after a long context, where the KV cache is read as much as
    // the weights: 64 steps after 2048 positions (llama-bench's
    // `-n 64 -d 2048`).
    let mut v = Vec::new();
    for _ in 0..reps {
        let mut cache = m.new_cache();
        m.run(&all[..DEPTH], Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
        let t = Instant::now();
        for &id in &all[DEPTH..DEPTH + 64] {
            m.run(&[id], Some(&mut cache), &mut NoHook, LogitsAt::Last)?;
        }
        v.push(64.0 / t.elapsed().as_secs_f64());
    }
    out.push((format!("tg64@d{DEPTH}"), median(v)));
    // A batched decode (what tracing a suite does): 8 sequences of 128
    // steps each in one pass per step, tokens of all 8 per second.
    let mut v = Vec::new();
    for _ in 0..reps {
        let mut caches: Vec<_> = (0..8).map(|_| m.new_cache()).collect();
        let mut hooks: Vec<NoHook> = (0..8).map(|_| NoHook).collect();
        let t = Instant::now();
        for step in 0..128 {
            let ids: Vec<[u32; 1]> = (0..8).map(|j| [all[(step + 16 * j) % all.len()]]).collect();
            let mut seqs: Vec<Seq<'_>> = caches
                .iter_mut()
                .zip(hooks.iter_mut())
                .zip(&ids)
                .map(|((cache, hook), ids)| Seq {
                    ids,
                    cache: Some(cache),
                    hook,
                    at: LogitsAt::Last,
                })
                .collect();
            m.run_batch(&mut seqs)?;
        }
        v.push(8.0 * 128.0 / t.elapsed().as_secs_f64());
    }
    out.push(("tg128x8".into(), median(v)));
    Ok(out.try_into().expect("five tests"))
}

/// The context `tg64@d2048` decodes after.
const DEPTH: usize = 2048;

/// llama-bench's average tok/s by (test, flash attention), from its JSON;
/// `depth` adds decode after a long context.
fn llama_figures(
    bin: &Path,
    model: &Path,
    threads: usize,
    reps: usize,
    depth: bool,
) -> anyhow::Result<Vec<(String, bool, f64)>> {
    let run = |tests: &[&str]| -> anyhow::Result<Vec<(String, bool, f64)>> {
        let out = Command::new(bin)
            .args(["-m".as_ref(), model.as_os_str()])
            .args(["-t", &threads.to_string()])
            .args(tests)
            .args(["-fa", "0,1", "-r", &reps.to_string(), "-o", "json"])
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "{} failed: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (p, g) = (r["n_prompt"].as_u64()?, r["n_gen"].as_u64()?);
                let depth = r["n_depth"].as_u64().unwrap_or(0);
                let test = match (g > 0, depth > 0) {
                    (true, false) => format!("tg{g}"),
                    (true, true) => format!("tg{g}@d{depth}"),
                    (false, _) => format!("pp{p}"),
                };
                let fa = match &r["flash_attn"] {
                    serde_json::Value::Bool(b) => *b,
                    v => v.as_i64().is_some_and(|x| x > 0),
                };
                Some((test, fa, r["avg_ts"].as_f64()?))
            })
            .collect())
    };
    let mut figures = run(&["-p", "128,512", "-n", "128"])?;
    if depth {
        let depth = DEPTH.to_string();
        figures.extend(run(&["-p", "0", "-n", "64", "-d", &depth])?);
    }
    Ok(figures)
}

/// One row per preset file: its matrices' types, vauban's figures and
/// llama-bench's better of flash attention off and on, with the ratio; and
/// the decode bound of the memory's read bandwidth, measured after the
/// file's runs (it moves by a fifth or more over minutes on a shared
/// machine), as each side's share of it.
fn preset_rows(
    files: &[PathBuf],
    llama_bench: Option<&Path>,
    threads: usize,
    reps: usize,
) -> anyhow::Result<()> {
    println!(
        "{:<28} {:<34} {:>21} {:>21} {:>21} {:>24}",
        "file",
        "kernels",
        "pp128 ours/llama",
        "pp512 ours/llama",
        "tg128 ours/llama",
        "tg bound (ours, llama)"
    );
    for file in files {
        let exec = CandleExecutor::load(&ModelSpec {
            path: file.clone(),
            device: DeviceSpec::Cpu,
            weights: WeightMode::Native,
            kv_cache: KvType::F32,
            dtype: Default::default(),
            primitive: Default::default(),
        })?;
        let ours = core_figures(&exec, reps)?;
        let kernel = exec.model.model.kernel();
        let matrix_bytes = exec.model.model.matrix_bytes() as f64;
        drop(exec);
        let theirs = match llama_bench {
            Some(bin) => llama_figures(bin, file, threads, reps, false)?,
            None => Vec::new(),
        };
        let bound = read_bandwidth(threads) * 1e9 / matrix_bytes;
        let cells: Vec<String> = ours
            .iter()
            .map(|(test, v)| {
                let best = theirs
                    .iter()
                    .filter(|(t, _, _)| t == test)
                    .map(|x| x.2)
                    .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
                match best {
                    Some(l) => format!("{v:.1}/{l:.1} {:.2}x", v / l),
                    None => format!("{v:.1}/-"),
                }
            })
            .collect();
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into());
        let kernel = kernel.strip_prefix("vauban-kernels ").unwrap_or(&kernel);
        let share = |v: f64| format!("{:.0}%", 100.0 * v / bound);
        let tg_ours = ours.iter().find(|(t, _)| t == "tg128").map_or(0.0, |x| x.1);
        let tg_llama = theirs
            .iter()
            .filter(|(t, _, _)| t == "tg128")
            .map(|x| x.2)
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        let bound_cell = match tg_llama {
            Some(l) => format!("{bound:.1} ({}, {})", share(tg_ours), share(l)),
            None => format!("{bound:.1} ({})", share(tg_ours)),
        };
        println!(
            "{name:<28} {kernel:<34} {:>21} {:>21} {:>21} {bound_cell:>24}",
            cells[0], cells[1], cells[2]
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { vauban::executor::pin_thread_count() };
    let mut args = std::env::args().skip(1);
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let models = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/vauban/models"));
    let mut model = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut llama_bench = Some(home.join(format!(
        ".cache/vauban/llama.cpp/{LLAMA_CPP_VERSION}/bin/llama-bench"
    )))
    .filter(|p| p.exists());
    let mut reps = 5;
    let mut presets: Vec<PathBuf> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model = args.next().map(PathBuf::from).unwrap_or(model),
            "--models" => {
                presets = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect()
            }
            "--llama-bench" => llama_bench = args.next().map(PathBuf::from),
            "--no-llama-bench" => llama_bench = None,
            "--reps" => reps = args.next().and_then(|r| r.parse().ok()).unwrap_or(reps),
            _ => {} // cargo bench passes `--bench`
        }
    }
    if let Some(bin) = llama_bench.as_ref().filter(|b| !b.exists()) {
        anyhow::bail!(
            "--llama-bench {}: no such file; build it with `bash scripts/build-llama-server.sh --bench`, or pass --no-llama-bench",
            bin.display()
        );
    }
    if presets.is_empty() && !model.exists() {
        eprintln!(
            "{} is absent; run `bash scripts/fetch-model.sh`",
            model.display()
        );
        return Ok(());
    }
    let threads = std::env::var("RAYON_NUM_THREADS")?.parse::<usize>()?;
    if !presets.is_empty() {
        println!("{threads} threads, median of {reps}");
        return preset_rows(&presets, llama_bench.as_deref(), threads, reps);
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let load_kv = |weights, kv_cache| {
        CandleExecutor::load(&ModelSpec {
            path: model.clone(),
            device: DeviceSpec::Cpu,
            weights,
            kv_cache,
            dtype: Default::default(),
            primitive: Default::default(),
        })
    };
    let load = |weights| load_kv(weights, KvType::F32);
    let native = load(WeightMode::Native)?;
    let m = &native.model.model;
    let bw = read_bandwidth(threads);
    let bytes = m.matrix_bytes() as f64;
    println!(
        "{} on {cpu}, {threads} threads, median of {reps}",
        model.display()
    );
    println!("kernels: {}", m.kernel());
    println!(
        "memory read bandwidth {bw:.1} GB/s; decode reads {:.1} MB of matrices a token: bound {:.0} tok/s",
        bytes / 1e6,
        bw * 1e9 / bytes
    );
    let ours = vauban_figures(&native, reps)?;
    drop(native);
    // The same weights with attention as tensor operations per sequence
    // (a GPU's path) instead of the CPU's fused call.
    let mut tensor = load(WeightMode::Native)?;
    tensor.model.model.use_tensor_attention();
    let tensor_attention = vauban_figures(&tensor, reps)?;
    drop(tensor);
    // An f16 KV cache, as llama.cpp's default.
    let f16_kv = vauban_figures(&load_kv(WeightMode::Native, KvType::F16)?, reps)?;
    let f32s = vauban_figures(&load(WeightMode::F32)?, reps)?;
    let theirs = match &llama_bench {
        Some(bin) => llama_figures(bin, &model, threads, reps, true)?,
        None => {
            println!(
                "(no llama-bench: build one with `bash scripts/build-llama-server.sh --bench`)"
            );
            Vec::new()
        }
    };
    println!(
        "{:<7} {:>12} {:>12} {:>12} {:>12} {:>12} {:>7} {:>12} {:>7}",
        "test",
        "vauban f32",
        "tensor attn",
        "kv f16",
        "vauban",
        "llama fa=0",
        "ratio",
        "llama fa=1",
        "ratio"
    );
    for ((((test, v), (_, f)), (_, t)), (_, h)) in
        ours.iter().zip(&f32s).zip(&tensor_attention).zip(&f16_kv)
    {
        let of = |fa: bool| {
            theirs
                .iter()
                .find(|(t, a, _)| t == test && *a == fa)
                .map(|x| x.2)
        };
        let cell = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.1}"));
        let ratio = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.2}x", v / x));
        println!(
            "{test:<7} {f:>12.1} {t:>12.1} {h:>12.1} {v:>12.1} {:>12} {:>7} {:>12} {:>7}",
            cell(of(false)),
            ratio(of(false)),
            cell(of(true)),
            ratio(of(true)),
        );
        if test == "tg128" {
            println!(
                "        vauban decode at {:.0}% of the bandwidth bound",
                100.0 * v / (bw * 1e9 / bytes)
            );
        }
    }
    Ok(())
}
