#!/usr/bin/env bash
# Inspect (UK AISI's inspect_ai), the eval tool whose logs `vauban import
# inspect` reads: the tests run a small task with it against `vauban
# serve` and import the logs it writes (host/cli/tests/import.rs). In a
# virtual environment of its own (its dependencies are not the reference
# environment's), installed once from PyPI and cached by the pinned
# versions under
#   ${VAUBAN_CACHE:-$HOME/.cache/vauban}/inspect/<key>/
# Prints the environment's python on its last line. About 20 s and 150 MB
# on a fresh machine.
#
# With --cached it installs nothing: it prints the python when the
# environment is there, and exits 3 when it is not (what the tests ask).
set -euo pipefail

# inspect_ai's `openai-api` provider needs the openai package.
packages=(
  "inspect_ai==0.3.285"
  "openai==3.57.0"
)

cache="${VAUBAN_CACHE:-$HOME/.cache/vauban}"
key="$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)"
prefix="$cache/inspect/$key"

if [ -f "$prefix/done" ]; then
  [ "${1:-}" = "--cached" ] || echo "setup-inspect: cached in $prefix" >&2
  echo "$prefix/bin/python"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "setup-inspect: not installed in $prefix; run \`bash scripts/setup-inspect.sh\`" >&2
  exit 3
fi

echo "setup-inspect: installing ${packages[*]} into $prefix" >&2
rm -rf "$prefix"
mkdir -p "$(dirname "$prefix")"
find "$(dirname "$prefix")" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
python3 -m venv "$prefix"
"$prefix/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
"$prefix/bin/python" -c "import inspect_ai, openai; from inspect_ai.log import read_eval_log" || {
  echo "setup-inspect: the environment in $prefix cannot import inspect_ai and openai" >&2
  exit 1
}
touch "$prefix/done"
echo "setup-inspect: installed $prefix" >&2
echo "$prefix/bin/python"
