#!/usr/bin/env bash
# vauban's kernels against llama.cpp on every tensor type they run, through
# llama.cpp's own quantization presets: one random model of Llama 3.2 1B's
# layout (widths that are multiples of 256, so the K-quants and IQ4 types
# apply), quantized by llama-quantize into each preset once, into
# target/bench-presets/ (scripts/reference/bench_models.py --presets), then
# `cargo bench -p vauban --bench speed -- --models ...`: one row per preset,
# vauban's pp128, pp512 and tg128 against llama-bench's on the same file and
# threads. Prints figures; asserts nothing.
#
#   bash scripts/bench-presets.sh [--only Q4_K_M,IQ4_XS] [--reps N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
only="" reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "bench-presets: unknown argument \`$1\`; use --only A,B or --reps N" >&2; exit 2 ;;
  esac
done
python="$(bash scripts/setup-reference.sh)"
server="$(bash scripts/build-llama-server.sh --bench)"
llama="$(dirname "$(dirname "$server")")"
out=target/bench-presets
"$python" scripts/reference/bench_models.py "$llama" "$out" --presets "$only"
presets="${only:-$("$python" -c 'import sys; sys.path.insert(0, "scripts/reference"); import bench_models; print(",".join(bench_models.PRESETS))')}"
files=""
for p in ${presets//,/ }; do
  # (cargo runs a bench in its package's folder: the paths must be absolute.)
  files="$files${files:+,}$(pwd)/$out/llama1b.$p.gguf"
done
cargo bench -q -p vauban --bench speed -- --models "$files" --reps "$reps" --llama-bench "$llama/bin/llama-bench"
