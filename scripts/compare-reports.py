#!/usr/bin/env python3
"""Compares two report.json files in substance.

    python3 scripts/compare-reports.py BEFORE/report.json AFTER/report.json

Ignores what differs between any two runs: stage times and notes, the
creation time, the output folder, bundle and trace hashes (the traces
record timings), the tool's own version and command line, artifact
numbers (`a17-...`). Prints every
other difference as `path: before -> after` and a count; exits 1 when
there is any. Numbers are equal when within --tol (default 1e-9).
"""
import argparse
import json
import math
import re
import sys

IGNORED = [
    r"^created_at$",
    r"^reproducibility\.stages",
    r"^reproducibility\.(created|command|tool_version|output|config_path)",
    r"^reproducibility\.bundles\.[a-z]+\.(sha256|path|manifest_sha256|bytes|reused)",
    r"^reproducibility\.config_sha256",
]


def ignored(path):
    return any(re.search(p, path) for p in IGNORED)


def normalise(v, roots):
    if isinstance(v, str):
        for r in roots:
            v = v.replace(r, "<OUT>")
        # Artifact ids number a trace's artifacts in order of making: a new
        # kind of artifact renumbers the later ones without changing them.
        v = re.sub(r"\ba\d+-", "a#-", v)
    return v


def walk(a, b, path, tol, roots, out):
    if ignored(path):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in a:
                if not ignored(p):
                    out.append(f"{p}: (absent) -> {json.dumps(b[k])[:200]}")
            elif k not in b:
                if not ignored(p):
                    out.append(f"{p}: {json.dumps(a[k])[:200]} -> (absent)")
            else:
                walk(a[k], b[k], p, tol, roots, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items -> {len(b)} items")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", tol, roots, out)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if not (a == b or math.isclose(a, b, rel_tol=tol, abs_tol=tol)):
            out.append(f"{path}: {a} -> {b}")
    else:
        a2, b2 = normalise(a, roots), normalise(b, roots)
        if a2 != b2:
            out.append(f"{path}: {json.dumps(a2)[:300]} -> {json.dumps(b2)[:300]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--root", action="append", default=[],
                    help="an output folder to write as <OUT> (repeatable)")
    args = ap.parse_args()
    a = json.load(open(args.before))
    b = json.load(open(args.after))
    out = []
    walk(a, b, "", args.tol, args.root, out)
    for line in out:
        print(line)
    print(f"{len(out)} difference(s)")
    sys.exit(1 if out else 0)


if __name__ == "__main__":
    main()
