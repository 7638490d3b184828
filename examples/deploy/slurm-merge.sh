#!/usr/bin/env bash
# Recipe 15 (part 2 of 2): once every shard of the array has finished
# (`sbatch --dependency=afterok:ARRAY_JOB_ID`), merge them and write the
# report: `vauban merge` refuses a missing, duplicated, unfinished or
# foreign shard by name, and `vauban diff` replays the merged bundles with
# the config into the unsharded run's report (examples/deploy/slurm-shard.sh
# says how to submit both).
#
#SBATCH --job-name=vauban-merge
#SBATCH --cpus-per-task=2
#SBATCH --time=00:30:00
set -euo pipefail
vauban=${VAUBAN:-vauban}
config=${VAUBAN_CONFIG:-examples/system-prompt.toml}
shards=${VAUBAN_SHARDS:-out/shards}
rm -rf "$shards/merged" "$shards/report"
"$vauban" merge "$shards"/*-of-* --out "$shards/merged"
"$vauban" diff "$shards/merged/traces/baseline" "$shards/merged/traces/candidate" \
  --config "$config" --out "$shards/report"
