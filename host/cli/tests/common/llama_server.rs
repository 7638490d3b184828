//! A real llama.cpp `llama-server` on loopback, for the http executor's
//! tests: started on a free port on the SmolLM2 GGUF, waited for on
//! `/health`, killed by its pid when dropped.
//!
//! The binary is `$VAUBAN_LLAMA_SERVER`, else the one
//! `scripts/build-llama-server.sh` caches. `.ci/run` builds it and sets
//! `VAUBAN_REQUIRE_LLAMA_SERVER=1`, under which a missing binary fails the
//! test instead of skipping it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The version `scripts/build-llama-server.sh` builds.
const VERSION: &str = "9993.0.0";

/// The model name the server is started with (`--alias`).
pub const ALIAS: &str = "smollm2";

/// The llama-server binary; `None`, after a message, when there is none
/// (and it is not required).
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("VAUBAN_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("VAUBAN_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/vauban")
                });
            cache.join(format!("llama.cpp/{VERSION}/bin/llama-server"))
        });
    if path.is_file() {
        return Some(path);
    }
    let why = format!(
        "{} is absent; run `bash scripts/build-llama-server.sh`",
        path.display()
    );
    if std::env::var_os("VAUBAN_REQUIRE_LLAMA_SERVER").is_some_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// A free loopback port (free a moment ago).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running server.
pub struct LlamaServer {
    child: Child,
    pub port: u16,
}

impl LlamaServer {
    /// Starts `binary` on `model` at `port` with 4 slots on one thread and
    /// waits for `/health`. One thread: a test binary's tests run at once,
    /// and llama.cpp's threads spin at every barrier of the graph, so two
    /// two-thread servers on a 2-core machine each wait out the other's
    /// time slices: two such tests stalled for more than five minutes.
    pub fn start(binary: &Path, model: &Path, port: u16) -> LlamaServer {
        Self::start_with_slots(binary, model, port, 4, 1)
    }

    /// Starts `binary` on `model` at `port` with `slots` requests decoded
    /// together on `threads` threads, and waits for `/health`.
    /// `--no-cache-prompt`: llama-server's prompt cache reuses a prefix
    /// computed for another request, which changes log-probabilities in
    /// their last digits (measured), and an audit wants the same numbers
    /// for the same request.
    pub fn start_with_slots(
        binary: &Path,
        model: &Path,
        port: u16,
        slots: usize,
        threads: usize,
    ) -> LlamaServer {
        Self::start_with_args(binary, model, port, slots, threads, &[])
    }

    /// As [`LlamaServer::start_with_slots`], with further arguments for
    /// llama-server (a control vector, say).
    pub fn start_with_args(
        binary: &Path,
        model: &Path,
        port: u16,
        slots: usize,
        threads: usize,
        extra: &[&str],
    ) -> LlamaServer {
        let child = Command::new(binary)
            .args(["-m", &model.display().to_string()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-t", &threads.to_string(), "-n", "256"])
            .args([
                "-c",
                &(1024 * slots).to_string(),
                "--parallel",
                &slots.to_string(),
            ])
            .args(["--alias", ALIAS, "--no-cache-prompt", "--no-webui"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut server = LlamaServer { child, port };
        server.wait_healthy();
        server
    }

    /// The base URL OpenAI clients take.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn wait_healthy(&mut self) {
        let start = Instant::now();
        // Loading a 98 MB model takes about a second; a loaded 2-core
        // machine may take far longer, and time is not this test's subject.
        while start.elapsed() < Duration::from_secs(300) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("llama-server exited while starting: {status}");
            }
            if health(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("llama-server did not report healthy on port {}", self.port);
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `GET /health` answers 200.
fn health(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

/// llama-server's greedy completion of `prompt`, `n` tokens, from its
/// native `/completion`.
pub fn complete(port: u16, prompt: &str, n: usize) -> String {
    let body = serde_json::json!({"prompt": prompt, "n_predict": n, "temperature": 0.0});
    let v = post_json(&format!("127.0.0.1:{port}"), "/completion", &body);
    v["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no completion in {v}"))
        .to_owned()
}

/// POSTs a JSON `body` to `http://{authority}{path}` in one HTTP/1.1
/// request (`Connection: close`) and parses the answer's body as JSON,
/// whatever its status (an error's body is JSON too).
pub fn post_json(authority: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let mut s = TcpStream::connect(authority).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let at = r.find("\r\n\r\n").expect("a header") + 4;
    serde_json::from_str(r[at..].trim()).unwrap_or_else(|e| panic!("{e}: {r}"))
}
