#!/usr/bin/env bash
# The activation primitive in a traced run, fused kernel against tensor path.
#
# SmolLM2-135M-Instruct (the Q4_1 file the tests fetch) with `subtract`
# along one direction after every one of its 30 blocks, a prompt of about
# 40 tokens and a 64-token greedy completion, traced by `vauban trace`
# with `--primitive fused` and with `--primitive tensor`, alternating,
# ROUNDS times each (default 5). For each path it prints the median of:
# the intervene span's time (every call of the primitive, prefill and
# decode), the decode rate in tok/s, and the whole trace's wall time; and
# checks the two paths generated the same tokens (the gate's behaviour
# half; the unit gate is `cargo test -p vauban-exec the_fused_kernel`).
#
#   cargo build --release -p vauban-cli
#   bash scripts/bench-primitive.sh [ROUNDS]
#
# VAUBAN (default target/release/vauban) and VAUBAN_MODELS override the
# binary and the model folder. Prints figures; asserts nothing but that
# the tokens agree.
set -euo pipefail

rounds="${1:-5}"
vauban="${VAUBAN:-target/release/vauban}"
model="${VAUBAN_MODELS:-$HOME/.cache/vauban/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -x "$vauban" ] || { echo "bench-primitive: no $vauban; cargo build --release -p vauban-cli" >&2; exit 1; }
[ -f "$model" ] || { echo "bench-primitive: no $model; bash scripts/fetch-model.sh" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A unit direction of width 576 as .npy (written with the standard library).
python3 - "$work/direction.npy" <<'EOF'
import math, struct, sys
d = 576
v = [math.sin(0.37 * i + 1.0) for i in range(d)]
n = math.sqrt(sum(x * x for x in v))
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % d
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % d, *[x / n for x in v]))
EOF

interventions=()
for layer in $(seq 0 29); do
  interventions+=(--intervene "layer=$layer,mode=subtract,direction=$work/direction.npy")
done
prompt="Write a short paragraph about why the sea is salty, in plain words a child would follow."

for round in $(seq 1 "$rounds"); do
  for path in fused tensor; do
    start=$(date +%s%N)
    "$vauban" trace --model "$model" --prompt "$prompt" --max-tokens 64 \
      "${interventions[@]}" --primitive "$path" --out "$work/$path-$round" >/dev/null 2>&1
    echo "$(( ($(date +%s%N) - start) / 1000000 ))" > "$work/$path-$round/wall_ms"
  done
done

python3 - "$work" "$rounds" <<'EOF'
import json, pathlib, statistics, sys
work, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
rows, tokens = {}, {}
for path in ["fused", "tensor"]:
    iv, rate, wall = [], [], []
    for r in range(1, rounds + 1):
        b = work / f"{path}-{r}"
        m = json.loads((b / "manifest.json").read_text())
        t = json.loads((b / m["traces"][0]["file"]).read_text())
        spans = {s["stage"]: s["profile"] for s in t["spans"]}
        iv.append(spans["intervene"]["duration_ns"] / 1e6)
        dec = spans["decode"]
        rate.append(dec["token_count"] / (dec["duration_ns"] / 1e9))
        wall.append(int((b / "wall_ms").read_text()))
        ids = next(a["data"]["ids"] for a in t["artifacts"]
                   if a["kind"] == "tokens" and a.get("labels", {}).get("role") == "completion")
        tokens.setdefault(path, ids)
        note = spans["intervene"]["notes"].get("primitive", "")
    rows[path] = (statistics.median(iv), statistics.median(rate), statistics.median(wall), note)
print(f"SmolLM2-135M Q4_1, subtract after all 30 blocks, 64 tokens, median of {rounds} rounds")
print(f"{'path':<8} {'intervene ms':>13} {'decode tok/s':>13} {'wall ms':>9}  note")
for path, (iv, rate, wall, note) in rows.items():
    print(f"{path:<8} {iv:>13.1f} {rate:>13.1f} {wall:>9d}  {note}")
f, t = rows["fused"], rows["tensor"]
print(f"intervene time: fused is {t[0] / f[0]:.1f}x faster; decode rate {f[1] / t[1]:.3f}x")
same = tokens["fused"] == tokens["tensor"]
print(f"completion tokens the same on both paths: {same}")
sys.exit(0 if same else 1)
EOF
