#!/usr/bin/env python3
"""Compare the results.json files of two runs of the same drills (for
example one `make test` on an older commit and one on a newer, with their
pytest folders kept): which keys one has and the other lacks, and how far
each number moved, matched by the file's path under each folder.

    python3 bench/results_diff.py OLD_DIR NEW_DIR [--top N]

Keys are compared in full (every level); numbers are summarized per key
path as the largest relative change, so that a drill's run-to-run noise
can be told from a changed behaviour by eye. No root, nothing runs.
"""

import argparse
import json
import math
import os
import sys
from collections import defaultdict


def walk(obj, path=()):
    """(key path, value) of every leaf; list items share their list's path
    (a series' points are one quantity)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, path + (str(k),))
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v, path + ("[]",))
    else:
        yield path, obj


def keys(obj):
    return {p for p, _ in walk(obj)}


def numbers(obj):
    out = defaultdict(list)
    for p, v in walk(obj):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[p].append(float(v))
    return out


def files(base):
    found = {}
    for root, _dirs, names in os.walk(base):
        if "results.json" in names:
            found[os.path.relpath(root, base)] = os.path.join(root, "results.json")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--top", type=int, default=15, help="largest relative changes to list per file")
    args = ap.parse_args()
    old, new = files(args.old), files(args.new)
    both = sorted(set(old) & set(new))
    only_old, only_new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    print(f"{len(both)} runs in both; only in old: {only_old}; only in new: {only_new}")
    added, dropped = defaultdict(int), defaultdict(int)
    for name in both:
        try:
            with open(old[name]) as fh:
                a = json.load(fh)
            with open(new[name]) as fh:
                b = json.load(fh)
        except ValueError:
            a = b = None  # a test's deliberately broken file
        if not isinstance(a, dict) or not isinstance(b, dict):
            print(f"\n{name}: not a drill's results (skipped)")
            continue
        for p in keys(b) - keys(a):
            added[".".join(p)] += 1
        for p in keys(a) - keys(b):
            dropped[".".join(p)] += 1
        na, nb = numbers(a), numbers(b)
        moved = []
        for p in set(na) & set(nb):
            x, y = sum(na[p]) / len(na[p]), sum(nb[p]) / len(nb[p])
            scale = max(abs(x), abs(y))
            if scale > 0:
                moved.append((abs(y - x) / scale, ".".join(p), x, y))
        moved.sort(reverse=True)
        verdicts = f"passed {a.get('passed')} -> {b.get('passed')}"
        print(f"\n{name}: {verdicts}; largest moves (mean over a key's values):")
        for rel, p, x, y in moved[: args.top]:
            print(f"  {rel:6.1%}  {p}: {x:.4g} -> {y:.4g}")
    print("\nkeys only in new (runs):", json.dumps(dict(sorted(added.items())), indent=1))
    print("keys only in old (runs):", json.dumps(dict(sorted(dropped.items())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
