#!/usr/bin/env python3
"""The Universal Scalability Law fitted by scipy, the reference for
`vauban trace sweep --fit usl`.

    python3 scripts/reference/fit_usl.py SWEEP.json

SWEEP.json is `vauban trace sweep BUNDLE --axis batch_size --json`: the
points' (axis_value, mean_tokens_per_s). Prints {"lambda", "sigma",
"kappa"} as JSON: scipy.optimize.curve_fit (Levenberg-Marquardt on the
squared error of X) from a start that is vauban's only in that both use
the model's linear form, N/X = 1/λ + (σ/λ)(N−1) + (κ/λ)N(N−1), here solved
by numpy's least squares.
"""
import json
import sys

import numpy as np
from scipy.optimize import curve_fit


def usl(n, lam, sigma, kappa):
    return lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


def main():
    sweep = json.load(open(sys.argv[1]))
    n = np.array([p["axis_value"] for p in sweep["points"]], dtype=float)
    x = np.array([p["mean_tokens_per_s"] for p in sweep["points"]], dtype=float)
    design = np.stack([np.ones_like(n), n - 1, n * (n - 1)], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(design, n / x, rcond=None)
    start = [1 / a, b / a, c / a]
    params, _ = curve_fit(usl, n, x, p0=start, method="lm", xtol=1e-15, ftol=1e-15, maxfev=100000)
    print(json.dumps(dict(zip(["lambda", "sigma", "kappa"], map(float, params)))))


if __name__ == "__main__":
    main()
