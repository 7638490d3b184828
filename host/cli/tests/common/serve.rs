//! `vauban serve` as a real process on loopback, on a free port, named
//! `smol`; killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A `vauban serve` child and the base URL it printed (`…/v1`).
pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `model` with `extra` flags; returns once it listens.
pub fn start(model: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(["serve", "--model", model.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--name", "smol"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first line says where it listens, once it does.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .last()
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    Server { child, url }
}
