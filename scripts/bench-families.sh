#!/usr/bin/env bash
# The forward speed on candle against llama.cpp, through `cargo bench -p
# vauban --bench speed`, which runs llama-bench on the same file with the
# same threads. Prints figures; asserts nothing. Two sets of files, each
# built once by scripts/reference/bench_models.py with llama.cpp's
# converter and llama-quantize:
#
# - the families (default): random-weight models of each family at
#   SmolLM2-135M's size, Q8_0, in target/bench-families/; every figure of
#   the speed bench, one file after another;
#
#     bash scripts/bench-families.sh [--only qwen3,gemma2] [--reps N]
#
# - the presets (`--presets`): one random model of Llama 3.2 1B's layout
#   (widths that are multiples of 256, so the K-quants and IQ4 types
#   apply) in each of llama-quantize's presets, in target/bench-presets/;
#   one row per preset (`speed --models`): vauban's pp128, pp512 and
#   tg128 against llama-bench's.
#
#     bash scripts/bench-families.sh --presets [--only Q4_K_M,IQ4_XS] [--reps N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
only="" reps=3 presets=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --presets) presets=1; shift ;;
    *) echo "bench-families: unknown argument \`$1\`; use --presets, --only A,B or --reps N" >&2; exit 2 ;;
  esac
done
python="$(bash scripts/setup-reference.sh)"
server="$(bash scripts/build-llama-server.sh --bench)"
llama="$(dirname "$(dirname "$server")")"
bench=(cargo bench -q -p vauban --bench speed --)
if [ -n "$presets" ]; then
  out=target/bench-presets
  "$python" scripts/reference/bench_models.py "$llama" "$out" --presets "$only"
  chosen="${only:-$("$python" -c 'import sys; sys.path.insert(0, "scripts/reference"); import bench_models; print(",".join(bench_models.PRESETS))')}"
  files=""
  for p in ${chosen//,/ }; do
    # (cargo runs a bench in its package's folder: the paths must be absolute.)
    files="$files${files:+,}$(pwd)/$out/llama1b.$p.gguf"
  done
  "${bench[@]}" --models "$files" --reps "$reps" --llama-bench "$llama/bin/llama-bench"
  exit 0
fi
out=target/bench-families
"$python" scripts/reference/bench_models.py "$llama" "$out" --only "$only"
for f in "$out"/*.q8_0.gguf; do
  name="$(basename "$f" .q8_0.gguf)"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  echo "== $name ($f)"
  "${bench[@]}" --model "$(pwd)/$f" --reps "$reps" --llama-bench "$llama/bin/llama-bench"
done
