#!/usr/bin/env bash
# Runs vauban-kernels' tests built for aarch64 (the NEON kernels in
# host/kernels/src/aarch64.rs) under qemu-user, on an x86-64 machine.
# Needs a cross linker and qemu; on Debian or Ubuntu:
#   sudo apt-get install gcc-aarch64-linux-gnu qemu-user
# The figures qemu gives are not speeds; only correctness is checked here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rustup target add aarch64-unknown-linux-gnu >/dev/null
for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "test-aarch64: $tool not found; install gcc-aarch64-linux-gnu and qemu-user (apt-get)" >&2
    exit 1
  fi
done
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
echo "== vauban-kernels tests on aarch64 (qemu)"
cargo test -p vauban-kernels --target aarch64-unknown-linux-gnu --locked "$@"
