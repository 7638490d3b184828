#!/usr/bin/env bash
# Throughput of the Torch executor's batched passes against Hugging Face
# transformers (issue 39), on the same random-weight model, the same
# prompts and the same device, in one run: prefill and decode tokens/s at
# each batch size, and the cost of recording the residual stream after
# every block against a plain generation. Prints JSON lines (vauban's, then
# transformers'); asserts nothing.
#
#   bash scripts/bench-throughput.sh [--layout smollm2|llama3-8b]
#        [--device cpu|cuda] [--dtype f32|bf16|f16] [--batches 1,8,32]
#        [--prompt-len 128] [--new-tokens 128]
#
# Defaults: the layout of SmolLM2-135M on the CPU in f32 (what a 2-core
# machine can time). On a GPU: --layout llama3-8b --device cuda --dtype
# bf16 (16 GB of random weights, made once on the device and cached).
#
# PYTHON is an interpreter with torch and transformers (default: the
# reference environment setup-reference.sh makes). VAUBAN_THROUGHPUT_BIN is
# a torch_throughput binary built elsewhere (a machine without cargo);
# otherwise the example is built here (--release, --features torch, after
# setup-torch.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

layout=smollm2 device=cpu dtype=f32 batches=1,8,32 prompt_len=128 new_tokens=128
while [ $# -gt 0 ]; do
  case "$1" in
    --layout) layout="$2" ;;
    --device) device="$2" ;;
    --dtype) dtype="$2" ;;
    --batches) batches="$2" ;;
    --prompt-len) prompt_len="$2" ;;
    --new-tokens) new_tokens="$2" ;;
    *) echo "bench-throughput: unknown argument \`$1\`" >&2; exit 2 ;;
  esac
  shift 2
done

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  python="$(bash "$here/setup-reference.sh" | tail -1)"
fi
model="$cache/bench/random-$layout"
if [ ! -f "$model/tokenizer.json" ]; then
  "$python" "$here/reference/hf_throughput.py" make "$model" --layout "$layout" --device "$device"
fi

bin="${VAUBAN_THROUGHPUT_BIN:-}"
if [ -z "$bin" ]; then
  eval "$(bash "$here/setup-torch.sh")"
  (cd "$here/.." && cargo build --release --locked -p vauban-exec --features torch --example torch_throughput)
  bin="$here/../target/release/examples/torch_throughput"
fi

ids="$(mktemp)"
trap 'rm -f "$ids"' EXIT
"$bin" "$model" --device "$device" --dtype "$dtype" --batches "$batches" \
  --prompt-len "$prompt_len" --new-tokens "$new_tokens" --ids "$ids"
"$python" "$here/reference/hf_throughput.py" time "$model" --ids "$ids" --batches "$batches" \
  --new-tokens "$new_tokens" --device "$device" --dtype "$dtype"
