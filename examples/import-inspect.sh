#!/usr/bin/env bash
# Recipe 14: evals you already ran. Did the change move the scores of an
# eval another tool ran, and is that significant with a paired test?
#
# The question: an Inspect eval was run on two models (here Inspect's own
# `includes()` scorer on tests/inspect/capitals.py, 12 samples × 2 epochs,
# against the test model behind `vauban serve`: answers of up to 16 tokens,
# then cut to 2, a stand-in for a worse model). `vauban import inspect`
# turns each log (.eval or .json) into a trace bundle: each sample and
# epoch a trace, Inspect's scores as metrics, the log's sha256, task, model
# and Inspect version in the manifest. `vauban diff` pairs the samples by
# id, averages each sample's epochs, and gives the report of any run: the
# paired test (McNemar's exact here), the multiplicity correction, the
# claim check at the level the imported evidence reaches (text: black box).
# Without --config it writes the comparison's config to the output folder
# (edit it: gates, vauban's own scorers on the imported text).
#
# Run it from the repository's root:
#
#   VAUBAN=target/debug/vauban bash examples/import-inspect.sh   # 1 s on 2 cores
#
# The logs in examples/inspect/ are the files Inspect 0.3.285 wrote; make
# your own with `inspect eval TASK --model openai-api/NAME/MODEL` (any
# OpenAI-compatible server: NAME_BASE_URL and NAME_API_KEY in the
# environment) and import them the same way.
#
# What it shows here: inspect.includes 0.917 → 0 on 12 paired samples
# (11 right answers lost, none gained), McNemar's exact p = 0.00098, one
# claim accepted at black_box_behavioral_diff; the same p-value Inspect's
# own reader and score conversion give (scripts/reference/inspect_paired.py).
set -euo pipefail
vauban=${VAUBAN:-vauban}
rm -rf out/import
"$vauban" import inspect examples/inspect/capitals-16-tokens.eval --out out/import/16-tokens
"$vauban" import inspect examples/inspect/capitals-2-tokens.eval --out out/import/2-tokens
"$vauban" diff out/import/16-tokens out/import/2-tokens --out out/import/diff
