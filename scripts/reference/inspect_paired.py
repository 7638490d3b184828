"""The paired comparison of two Inspect logs, computed independently of
vauban: the logs read by Inspect's own reader (`read_eval_log`), each
sample's score converted by Inspect's own `value_to_float` and averaged
over its epochs, samples paired by id, and McNemar's exact two-sided test
on the discordant pairs when every mean is 0 or 1.

    python inspect_paired.py BASELINE_LOG CANDIDATE_LOG SCORER

Prints JSON: n (paired samples), epochs per side, each side's mean, the
discordant counts and the p-value (null when the means are not all 0/1).
"""

import json
import math
import sys
from collections import defaultdict

from inspect_ai.log import read_eval_log
from inspect_ai.scorer import value_to_float


def per_sample(path, scorer):
    log = read_eval_log(path)
    to_float = value_to_float()
    values = defaultdict(list)
    for s in log.samples:
        if s.error is not None or scorer not in (s.scores or {}):
            continue
        values[str(s.id)].append(to_float(s.scores[scorer].value))
    epochs = {len(v) for v in values.values()}
    return {k: sum(v) / len(v) for k, v in values.items()}, sorted(epochs)


def mcnemar_exact(b, c):
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def main():
    base_path, cand_path, scorer = sys.argv[1:4]
    base, base_epochs = per_sample(base_path, scorer)
    cand, cand_epochs = per_sample(cand_path, scorer)
    ids = sorted(set(base) & set(cand))
    pairs = [(base[i], cand[i]) for i in ids]
    binary = all(x in (0.0, 1.0) for p in pairs for x in p)
    down = sum(1 for b, c in pairs if b == 1.0 and c == 0.0)
    up = sum(1 for b, c in pairs if b == 0.0 and c == 1.0)
    print(json.dumps({
        "n": len(pairs),
        "epochs": [base_epochs, cand_epochs],
        "baseline_mean": sum(b for b, _ in pairs) / len(pairs),
        "candidate_mean": sum(c for _, c in pairs) / len(pairs),
        "down": down,
        "up": up,
        "p_value": mcnemar_exact(down, up) if binary else None,
    }))


main()
