#!/usr/bin/env bash
# The families' forward speed on candle against llama.cpp, on random-weight
# models of each family at SmolLM2-135M's size, Q8_0 (built once into
# target/bench-families/ by scripts/reference/bench_models.py with
# llama.cpp's converter and llama-quantize): `cargo bench -p vauban --bench
# speed` on each file, which runs llama-bench on the same file with the
# same threads. Prints figures; asserts nothing.
#
#   bash scripts/bench-families.sh [--only qwen3,gemma2] [--reps N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
only="" reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "bench-families: unknown argument \`$1\`; use --only A,B or --reps N" >&2; exit 2 ;;
  esac
done
python="$(bash scripts/setup-reference.sh)"
server="$(bash scripts/build-llama-server.sh --bench)"
llama="$(dirname "$(dirname "$server")")"
out=target/bench-families
"$python" scripts/reference/bench_models.py "$llama" "$out" --only "$only"
for f in "$out"/*.q8_0.gguf; do
  name="$(basename "$f" .q8_0.gguf)"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  echo "== $name ($f)"
  # (cargo runs a bench in its package's folder: the path must be absolute.)
  cargo bench -q -p vauban --bench speed -- --model "$(pwd)/$f" --reps "$reps" --llama-bench "$llama/bin/llama-bench"
done
