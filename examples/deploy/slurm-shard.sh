#!/usr/bin/env bash
# Recipe 15 (part 1 of 2): an audit over a Slurm array. One array task per
# shard traces its slice of the suite; part 2 (slurm-merge.sh), a job that
# depends on the whole array, merges the shards and writes the report.
#
#   jid=$(sbatch --parsable --array=1-4 examples/deploy/slurm-shard.sh)
#   sbatch --dependency=afterok:$jid examples/deploy/slurm-merge.sh
#
# Run it from the repository's root (or set VAUBAN_CONFIG to your config
# and VAUBAN_SHARDS to a folder every node sees). Each task writes
# $VAUBAN_SHARDS/K-of-N/ (its traces and, last, shard.json); a task that
# failed or was preempted leaves no shard.json, so the merge names it and
# `sbatch --array=K` reruns just that one (it reuses what it had traced).
# Without Slurm, the same commands run by hand (what the test does):
#
#   SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2 VAUBAN=target/debug/vauban \
#     bash examples/deploy/slurm-shard.sh        # and again with ID=2
#
# What it shows here (examples/system-prompt.toml, SmolLM2, 2 shards on
# one 2-core machine): 7 and 9 of the 16 prompts, merged into the report
# the unsharded run gives, with a note saying how it was sharded.
#
#SBATCH --job-name=vauban-shard
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=02:00:00
# For a model on a GPU (executor = "torch", device = "cuda"):
##SBATCH --gres=gpu:1
set -euo pipefail
vauban=${VAUBAN:-vauban}
config=${VAUBAN_CONFIG:-examples/system-prompt.toml}
shards=${VAUBAN_SHARDS:-out/shards}
n=${SLURM_ARRAY_TASK_COUNT:?submit with sbatch --array=1-N (or set SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT)}
k=${SLURM_ARRAY_TASK_ID:?submit with sbatch --array=1-N}
"$vauban" run "$config" --shard "$k/$n" --out "$shards/$k-of-$n"
