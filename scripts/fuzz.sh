#!/usr/bin/env bash
# Fuzzes one target of vauban::fuzz_targets with libFuzzer for a given time:
#   bash scripts/fuzz.sh TARGET [SECONDS]     (TARGET: config, suite, bundle, claims)
# On stable Rust (`cargo fuzz run --sanitizer none`); cargo-fuzz is installed
# once under ~/.cache/vauban/tools. The committed seeds in fuzz/corpus/TARGET
# are read; new inputs that reach new code go to fuzz/work/TARGET (ignored by
# git: copy the ones worth keeping into the corpus, which `cargo test`
# replays); a crash is written to fuzz/artifacts/TARGET/ and the script
# exits 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target="${1:?usage: scripts/fuzz.sh config|suite|bundle|claims [SECONDS]}"
seconds="${2:-60}"
version="0.13.2"
tools="${XDG_CACHE_HOME:-$HOME/.cache}/vauban/tools/cargo-fuzz-$version"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz $version into $tools (once)"
  cargo install cargo-fuzz --version "$version" --locked --root "$tools"
fi
export PATH="$tools/bin:$PATH"
mkdir -p "fuzz/work/$target"
cargo fuzz run --sanitizer none "$target" "fuzz/work/$target" "fuzz/corpus/$target" -- \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
