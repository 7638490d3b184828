#!/usr/bin/env bash
# The main job from a fresh clone, in one command: sets up what `vauban
# run` needs on first use (the wasm32-wasip2 target, the test model, the
# first-party plugins; each cached, so later runs skip it), builds the
# release binary and runs the quickstart:
#
#   bash scripts/quickstart.sh            # writes out/quickstart/report.{json,md,html}
#   bash scripts/quickstart.sh --out DIR  # arguments go to `vauban run`
#
# Nothing only the tests need (llama-server, lint components) is built.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --quickstart
echo "quickstart: building the release binary (several minutes the first time), then running examples/quickstart.toml" >&2
exec cargo run --release --locked --quiet -- run examples/quickstart.toml "$@"
