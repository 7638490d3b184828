#!/usr/bin/env bash
# The independent references the family tests check vauban against:
# Hugging Face transformers on PyTorch, in a virtual environment of its
# own, installed once from PyPI and cached by the pinned versions under
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/reference/<key>/
# Prints the environment's python on its last line. About 45 s and 5 GB
# on a fresh machine (the Linux torch wheel brings its CUDA libraries,
# which `import torch` needs even on a CPU); nothing runs on a GPU.
#
#   python="$(bash scripts/setup-reference.sh)"
#   "$python" scripts/reference/compare_transformers.py target/debug/vauban out/
#
# With --cached it installs nothing: it prints the python when the
# environment is there, and exits 3 when it is not (what the tests ask).
set -euo pipefail

# Pinned together: transformers 5.24 runs every family vauban does; scipy
# fits the USL as vauban's `trace sweep --fit usl` does
# (scripts/reference/fit_usl.py); peft (with the accelerate it needs)
# loads the LoRA adapters vauban writes (scripts/reference/check_lora.py).
packages=(
  "torch==2.13.0"
  "transformers==5.24.0"
  "tokenizers==0.23.3"
  "safetensors==0.8.0"
  "numpy==2.4.6"
  "sentencepiece==0.2.3"
  "protobuf==7.36.2"
  "scipy==1.17.1"
  "peft==0.21.2"
  "accelerate==1.15.0"
)

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
key="$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)"
prefix="$cache/reference/$key"

if [ -f "$prefix/done" ]; then
  [ "${1:-}" = "--cached" ] || echo "setup-reference: cached in $prefix" >&2
  echo "$prefix/bin/python"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "setup-reference: not installed in $prefix; run \`bash scripts/setup-reference.sh\`" >&2
  exit 3
fi

echo "setup-reference: installing ${packages[*]} into $prefix (about 40 s, 4.9 GB)" >&2
rm -rf "$prefix"
mkdir -p "$(dirname "$prefix")"
# An environment of other pins is stale (5 GB each): only this one is used.
find "$(dirname "$prefix")" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
python3 -m venv "$prefix"
"$prefix/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
"$prefix/bin/python" -c "import torch, transformers, scipy.optimize, peft; torch.ones(1)" || {
  echo "setup-reference: the environment in $prefix cannot import torch, transformers, scipy and peft" >&2
  exit 1
}
touch "$prefix/done"
echo "setup-reference: installed $prefix" >&2
echo "$prefix/bin/python"
