//! MAX (`max serve`), evaluated only against the contract: when a `max`
//! binary is on PATH and `VAUBAN_MAX_MODEL` names a model folder (an F32
//! GGUF with its HF `config.json` and tokenizer files beside it), the
//! server is started with `--enable-echo` and must answer as the http
//! executor's contract asks: probed capabilities, a trace with text and
//! top-k log-probabilities. Otherwise the test skips, saying which is
//! missing; neither is installed on the project's CI machines (docs/http.md).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vauban::executor::Executor;
use vauban::executor::http::{HttpExecutor, HttpSpec};
use vauban::trace::ArtifactKind as K;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn max_serve_answers_as_the_contract_asks() {
    let Some(max) = on_path("max") else {
        eprintln!("skipping: no `max` on PATH (Modular's MAX; see docs/http.md)");
        return;
    };
    let Some(model) = std::env::var_os("VAUBAN_MAX_MODEL") else {
        eprintln!(
            "skipping: VAUBAN_MAX_MODEL is not set (a folder with an F32 GGUF and its HF config and tokenizer files)"
        );
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Killed(
        Command::new(max)
            .arg("serve")
            .arg("--model-path")
            .arg(&model)
            .args(["--port", &port.to_string(), "--enable-echo"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("max serve starts"),
    );
    let mut spec = HttpSpec::new(
        &format!("http://127.0.0.1:{port}/v1"),
        &PathBuf::from(&model).display().to_string(),
    );
    spec.retries = 0;
    // A cold start compiles the model: minutes on a CPU.
    let start = Instant::now();
    let exec = loop {
        match HttpExecutor::connect(&spec) {
            Ok(e) => break e,
            Err(e) if start.elapsed() < Duration::from_secs(900) => {
                eprintln!("waiting for max serve: {e}");
                std::thread::sleep(Duration::from_secs(5));
            }
            Err(e) => panic!("max serve did not answer: {e}"),
        }
    };
    assert!(exec.probe().top_logprobs > 0, "{:?}", exec.probe());
    let (request, options) = common::raw_request("p", "The capital of France is", 8, 5);
    let out = exec.trace(&request, &options, None).unwrap();
    assert!(out.trace.has(K::Text) && out.trace.has(K::Logprobs));
}
