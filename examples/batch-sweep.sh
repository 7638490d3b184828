#!/usr/bin/env bash
# Recipe 11: a batch-size sweep. How does throughput scale with the batch,
# and where would it stop scaling?
#
# The question: before serving or auditing at scale, how much does
# batching buy on this machine and model, and is there a batch size past
# which throughput falls? A controlled sweep traces the same prompts at
# each batch size (full batches of distinct prompts, after a warm-up pass
# that is not recorded) into one bundle; `trace sweep --fit usl` fits the
# Universal Scalability Law X(N) = λN / (1 + σ(N−1) + κN(N−1)) to the
# points' throughput, with 95% bootstrap intervals and each point's
# residual (docs/profiles.md).
#
# Run it from the repository's root (`vauban` is the built binary; the
# model is the one the tests fetch, scripts/fetch-model.sh):
#
#   VAUBAN=target/debug/vauban bash examples/batch-sweep.sh   # 3 s on 2 cores
#
# For your own model set M, the sizes (the largest at most the number of
# prompts) and --max-tokens; on a GPU, sweep further (1 to 64).
#
# What it shows here (SmolLM2-135M-Instruct Q4_1, 2 cores, the test
# profile's build): 675, 824, 994 and 1237 tokens/s at batch 1, 2, 4 and
# 8; the fit gives λ ≈ 673 tokens/s (95% CI 666-678) and a negative κ,
# which the output names: throughput still grows faster than the law's
# contention and coherency allow (a batch amortises the weight reads), so
# no peak is in sight at 8. The timings move from run to run; the fit's
# intervals say by how much within one.
set -euo pipefail
vauban=${VAUBAN:-vauban}
M=${VAUBAN_MODELS:-$HOME/.cache/vauban/models}/SmolLM2-135M-Instruct.Q4_1.gguf
prompts=()
while IFS= read -r text; do
  prompts+=(--prompt "$text")
done < <(python3 -c '
import json, sys
for line in open("examples/prompts/everyday.jsonl"):
    if line.strip():
        print(json.loads(line)["text"])
' | head -8)
"$vauban" trace --model "$M" "${prompts[@]}" --max-tokens 16 \
  --sweep-batch 1,2,4,8 --out out/batch-sweep --replace
"$vauban" trace sweep out/batch-sweep --axis batch_size --fit usl
