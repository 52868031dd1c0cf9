#!/usr/bin/env python3
"""The table of BENCHMARKS.md "Search": two `eval --ranked` files (earlier,
later), each policy's means (set F1, file and function accuracy@1/3/5/10)
and the later minus the earlier paired by task, with 95% bootstrap
intervals over the tasks (10,000 resamples, seed 0). `fusegrpo compare`
gives the same pairs for @1/3/5 (its own bootstrap); this adds @10.

    scripts/search-table.py scripted.ranked.jsonl search.ranked.jsonl
"""
import json
import random
import sys


def rows(path):
    with open(path) as f:
        return {r["task_id"]: r for r in map(json.loads, filter(str.strip, f))}


def at(score, level, k):
    gold = score["gold_files" if level == "file" else "gold_functions"]
    if gold == 0:
        return None
    first = score["first_gold_file" if level == "file" else "first_gold_function"]
    return 1.0 if first is not None and first <= k else 0.0


METRICS = [("file F1", lambda s: s["f1_file"]), ("function F1", lambda s: s["f1_func"])]
for level in ("file", "function"):
    for k in (1, 3, 5, 10):
        METRICS.append((f"{level} @{k}", lambda s, level=level, k=k: at(s, level, k)))


def paired(a, b, f, rng):
    pairs = [(f(a[t]["score"]), f(b[t]["score"])) for t in a if t in b]
    d = [y - x for x, y in pairs if x is not None and y is not None]
    if not d:
        return 0, 0.0, (0.0, 0.0)
    n = len(d)
    means = sorted(sum(rng.choice(d) for _ in range(n)) / n for _ in range(10000))
    return n, sum(d) / n, (means[249], means[9749])


def main():
    earlier, later = rows(sys.argv[1]), rows(sys.argv[2])
    le = next(iter(earlier.values()))["policy"]
    ll = next(iter(later.values()))["policy"]
    rng = random.Random(0)
    print(f"| metric | tasks | {le} | {ll} | {ll} - {le} [95% CI] |")
    print("|---|---|---|---|---|")
    for name, f in METRICS:
        n, mean, (lo, hi) = paired(earlier, later, f, rng)
        vals = lambda rs: [v for v in (f(rs[t]["score"]) for t in rs if t in earlier and t in later) if v is not None]
        ve, vl = vals(earlier), vals(later)
        side = " (above 0)" if lo > 0 else " (below 0)" if hi < 0 else ""
        print(f"| {name} | {n} | {sum(ve) / max(len(ve), 1):.3f} | {sum(vl) / max(len(vl), 1):.3f} | {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]{side} |")


if __name__ == "__main__":
    main()
