#!/usr/bin/env bash
# The tests from a fresh clone, in one command: sets up everything they
# need (scripts/setup.sh: the toolchain's targets and components, the test
# model, the first-party plugins, llama-server built from source; each
# cached by version), then runs the workspace's tests:
#
#   bash scripts/test.sh                  # cargo test --workspace --locked
#   bash scripts/test.sh --test recipes   # arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec cargo test --workspace --locked "$@"
