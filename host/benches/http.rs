//! The http executor's throughput against a real `llama-server` (built by
//! `scripts/build-llama-server.sh`) on SmolLM2-135M-Instruct, next to a
//! plain client on the same server in the same run: requests/s, tokens/s
//! and the executor's overhead per request at concurrency 1, 4 and 16.
//!
//! The plain client is the least a client can do: threads over std
//! sockets POSTing the exact bodies the executor sends and reading the
//! answers' token counts. The executor also probes nothing here (it
//! connected before the clock starts), but parses every answer's
//! log-probabilities, checks them against the declared tokenizer and
//! records a trace. Each figure is the median of the repetitions, the two
//! clients alternating.
//!
//! Run: `cargo bench -p vauban --bench http` (optional arguments: prompts
//! per round, tokens per answer, repetitions; default 32 32 3).

#[path = "../cli/tests/common/llama_server.rs"]
#[allow(dead_code)]
mod llama_server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use vauban::executor::http::wire::{self, Ask};
use vauban::executor::http::{HttpExecutor, HttpSpec};
use vauban::executor::{Executor, GenerateOptions, PromptForm, RunOptions};
use vauban::trace::{ArtifactKind as K, TraceRequest};

const TOPICS: [&str; 16] = [
    "the sea",
    "a library",
    "winter",
    "a bicycle",
    "the moon",
    "bread",
    "a violin",
    "mountains",
    "a train",
    "coffee",
    "a garden",
    "rain",
    "a lighthouse",
    "chess",
    "bees",
    "a river",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One request over a fresh connection; the answer's completion tokens.
fn post(port: u16, body: &str) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the server listens");
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    let at = r
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers")
        + 4;
    let v: serde_json::Value = serde_json::from_slice(&r[at..]).expect("a JSON answer");
    v["usage"]["completion_tokens"].as_u64().expect("usage")
}

/// The plain client: `threads` workers draining the bodies; (seconds, tokens).
fn plain(port: u16, bodies: &[String], threads: usize) -> (f64, u64) {
    let next = Mutex::new(0usize);
    let tokens = Mutex::new(0u64);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(b) = bodies.get(i) else { return };
                    let t = post(port, b);
                    *tokens.lock().unwrap() += t;
                }
            });
        }
    });
    (start.elapsed().as_secs_f64(), *tokens.lock().unwrap())
}

/// The executor over the same prompts; (seconds, tokens).
fn traced(exec: &HttpExecutor, jobs: &[(TraceRequest, RunOptions)]) -> (f64, u64) {
    let mut tokens = 0;
    let start = Instant::now();
    exec.trace_all(jobs, 1, &mut |_, r| {
        let t = r.expect("a trace");
        tokens += t
            .trace
            .spans
            .iter()
            .map(|s| s.profile.token_count)
            .sum::<u64>();
        ControlFlow::Continue(())
    });
    (start.elapsed().as_secs_f64(), tokens)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(32);
    let max_tokens = args.get(1).copied().unwrap_or(32);
    let reps = args.get(2).copied().unwrap_or(3).max(1);
    let model = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        })
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        eprintln!(
            "{} is absent; run `bash scripts/fetch-model.sh`",
            model.display()
        );
        return Ok(());
    }
    let Some(binary) = llama_server::binary() else {
        return Ok(());
    };
    let server = llama_server::LlamaServer::start_with_slots(
        &binary,
        &model,
        llama_server::free_port(),
        16,
        2,
    );
    let prompts: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "Write one sentence about {}, number {i}:",
                TOPICS[i % TOPICS.len()]
            )
        })
        .collect();
    let top = 8;
    let bodies: Vec<String> = prompts
        .iter()
        .map(|p| {
            wire::body(&Ask::greedy_completion(
                llama_server::ALIAS,
                p,
                max_tokens,
                top,
            ))
            .to_string()
        })
        .collect();
    let jobs: Vec<(TraceRequest, RunOptions)> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                TraceRequest {
                    prompt_id: Some(format!("p{i}")),
                    category: None,
                    expected_behavior: None,
                    text: Some(p.clone()),
                    token_ids: None,
                    observe: vec![K::Text, K::Tokens, K::Logprobs, K::Profile],
                    layers: vec![],
                    raw_tensors: false,
                    raw_kinds: Vec::new(),
                },
                RunOptions {
                    trace_id: format!("p{i}"),
                    prompt: PromptForm::Raw,
                    interventions: vec![],
                    block_outputs: false,
                    generate: GenerateOptions {
                        max_tokens,
                        sampling: None,
                        stop: vec![],
                        top_logprobs: top,
                    },
                    reference: None,
                },
            )
        })
        .collect();
    // Warm the server (first requests pay for its buffers).
    plain(server.port, &bodies[..2.min(n)], 1);
    println!(
        "llama-server (16 slots, 2 threads) on SmolLM2-135M Q4_1; {n} raw prompts, {max_tokens} tokens each, top {top} logprobs; median of {reps}"
    );
    println!(
        "{:>5} {:>10} {:>10} {:>10} {:>10} {:>12} {:>7}",
        "conc", "plain r/s", "plain t/s", "exec r/s", "exec t/s", "overhead/req", "ratio"
    );
    for conc in [1usize, 4, 16] {
        let mut spec = HttpSpec::new(&server.url(), llama_server::ALIAS);
        spec.concurrency = conc;
        spec.tokenizer = Some(model.clone());
        let exec = HttpExecutor::connect(&spec)?;
        let (mut p_s, mut e_s, mut toks) = (Vec::new(), Vec::new(), 0);
        for _ in 0..reps {
            let (s, t) = plain(server.port, &bodies, conc);
            p_s.push(s);
            let (s, t2) = traced(&exec, &jobs);
            e_s.push(s);
            assert_eq!(t, t2, "both clients got the same answers");
            toks = t;
        }
        let (p, e) = (median(p_s), median(e_s));
        println!(
            "{conc:>5} {:>10.2} {:>10.1} {:>10.2} {:>10.1} {:>9.2} ms {:>7.3}",
            n as f64 / p,
            toks as f64 / p,
            n as f64 / e,
            toks as f64 / e,
            (e - p) / n as f64 * 1e3,
            e / p
        );
    }
    Ok(())
}
