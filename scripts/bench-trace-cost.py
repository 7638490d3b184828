#!/usr/bin/env python3
"""What recording evidence costs a whole `vauban` process.

    cargo build --release --locked -p vauban-cli
    python3 scripts/bench-trace-cost.py [--reps 11] [--prompts 1] [--batch 8]
        [--vauban PATH] [--against PATH]

Runs, on SmolLM2-135M-Instruct Q4_1 (scripts/fetch-model.sh puts it in
~/.cache/vauban/models), a plain generation (`vauban generate`, 32 new
tokens after a 56-token prompt) and `vauban trace` of the same prompt at
growing depth, each as its own process, interleaved rep by rep, and
prints each one's median wall-clock time and its ratio to the plain
generation's:

- trace-min: the trace's text, tokens and profile only;
- trace-lp: + logits and log-probabilities at every position (summaries);
- trace-lp-raw: + the two kept raw;
- trace-full: + every layer's residual stream, raw (the bundle: 25 MB).

The first run of a model hashes its file (remembered afterwards while the
file is unchanged, ~/.cache/vauban/sha256), so one unmeasured run comes
first. With --prompts N, N prompts are traced in one process (`--batch`
at a time) against N generations in one process. --against PATH runs
another build's binary too (built from an earlier commit, say), in the
same rounds, each build's ratios to its own generation. Prints figures;
asserts nothing. Timings on a shared machine move by 5-10% between runs: compare
ratios within a run.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = (
    "The history of the printing press begins in the fifteenth century, when "
    "Johannes Gutenberg combined movable metal type, oil-based inks and a "
    "wooden screw press into a system that could produce books quickly. Within "
    "fifty years, presses had spread to more than two hundred cities across "
    "Europe, and"
)
ENDINGS = ["the", "many", "books", "scholars", "printers", "readers", "merchants", "churches"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--prompts", type=int, default=1, choices=range(1, len(ENDINGS) + 1))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    ap.add_argument("--vauban", help="the binary (default: target/release/vauban)")
    ap.add_argument("--against", help="another build's binary, run in the same rounds")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    vauban = args.vauban or os.path.join(root, "target", "release", "vauban")
    models = os.environ.get("VAUBAN_MODELS", os.path.expanduser("~/.cache/vauban/models"))
    model = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    for path, fix in [
        (vauban, "cargo build --release --locked -p vauban-cli"),
        (model, "bash scripts/fetch-model.sh"),
    ] + ([(args.against, "build it")] if args.against else []):
        if not os.path.exists(path):
            sys.exit(f"bench-trace-cost: {path} is absent; run `{fix}`")

    prompts = []
    for ending in ENDINGS[: args.prompts]:
        prompts += ["--prompt", f"{PROMPT} {ending}"]
    common = ["--model", model, "--raw", "--max-tokens", str(args.tokens)] + prompts
    out = os.path.join(tempfile.mkdtemp(prefix="vauban-trace-cost-"), "bundle")
    layers = ",".join(str(i) for i in range(30))

    def runs_of(binary):
        trace = [binary, "-q", "trace", *common, "--out", out, "--batch", str(args.batch)]
        return {
            "generate": [binary, "-q", "generate", *common],
            "trace-min": trace,
            "trace-lp": trace + ["--logprobs"],
            "trace-lp-raw": trace + ["--logprobs", "--raw-tensors"],
            "trace-full": trace + ["--layers", layers, "--logprobs", "--raw-tensors"],
        }

    builds = {"this build": runs_of(vauban)}
    if args.against:
        builds[args.against] = runs_of(args.against)

    def once(cmd):
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
        return time.perf_counter() - start

    for runs in builds.values():
        once(runs["trace-full"])  # the model's hash, the page cache
    times = {b: {name: [] for name in runs} for b, runs in builds.items()}
    for _ in range(args.reps):
        for b, runs in builds.items():
            for name, cmd in runs.items():
                times[b][name].append(once(cmd))
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)

    print(
        f"SmolLM2-135M-Instruct Q4_1, {args.prompts} prompt(s) of 56 tokens, "
        f"{args.tokens} new tokens each, trace --batch {args.batch}, "
        f"median of {args.reps} processes"
    )
    for b, by_run in times.items():
        plain = statistics.median(by_run["generate"])
        print(f"{b}:")
        print(f"  {'run':<14} {'median ms':>10} {'min ms':>8} {'ratio':>7}")
        for name, t in by_run.items():
            m = statistics.median(t)
            print(f"  {name:<14} {m * 1e3:>10.1f} {min(t) * 1e3:>8.1f} {m / plain:>6.2f}x")


if __name__ == "__main__":
    main()
