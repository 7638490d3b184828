#!/usr/bin/env bash
# Builds the first-party plugins as WebAssembly components into
# target/plugins/wasm32-wasip2/plugin/, where `vauban run` finds them by
# name (`plugin = "refusal"`) and where the tests build them too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CARGO_TARGET_DIR=target/plugins cargo build --locked --quiet --profile plugin --target wasm32-wasip2 \
  -p vauban-plugin-refusal -p vauban-plugin-behavior -p vauban-plugin-logprob \
  -p vauban-plugin-steer-gate -p vauban-plugin-claims-default \
  -p vauban-plugin-refusal-judge -p vauban-plugin-over-refusal-judge
echo "build-plugins: first-party components in target/plugins/wasm32-wasip2/plugin/"
