#!/usr/bin/env python3
"""Teachers compared on the same tasks (issue 62, the guided teacher).

    scripts/teacher-table.py scripted=a.jsonl guided=b.jsonl ... [--min-f1 0.5 --min-e 0.2
        --calls 2,8 --max-tokens 3072 --max-truncation 0.2]

Each file is `fusegrpo synth --out` (episodes, several per task). Per task:
the mean file and function F1 of its episodes, and whether the dual-metric
filter keeps one of them (answered, F1 >= rho_F, e >= rho_e, calls per tool
turn in range, cut to the SFT window losing at most the allowed share: the
rules of rollout/src/episode/filter.rs, `max_per_task = 1`). The first file
is the baseline: every other column gets the paired difference over tasks
with a 95% bootstrap interval (10,000 resamples, seed 0). Standard library
only.
"""
import argparse
import json
import random
import sys
from collections import defaultdict


def fitting_cut(mask, max_tokens):
    if len(mask) <= max_tokens:
        return len(mask)
    for end in range(max_tokens, 0, -1):
        if mask[end - 1] == 1 and mask[end] == 0:
            return end
    return None


def kept(ep, a):
    s = ep["score"]
    if ep.get("stop_reason") != "answer" or s["f1"] < a.min_f1 or s["e"] < a.min_e:
        return False
    tool_turns = [t for t in ep["turns"] if t["calls"]]
    cpt = sum(len(t["calls"]) for t in tool_turns) / len(tool_turns) if tool_turns else 0.0
    lo, hi = a.calls
    if cpt < lo or cpt > hi:
        return False
    cut = fitting_cut(ep["loss_mask"], a.max_tokens)
    return cut is not None and len(ep["tokens"]) - cut <= a.max_truncation * len(ep["tokens"])


def per_task(path, a):
    by = defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.strip():
                ep = json.loads(line)
                by[ep["task_id"]].append(ep)
    out = {}
    for task, eps in by.items():
        n = len(eps)
        out[task] = {
            "f1_file": sum(e["score"]["f1_file"] for e in eps) / n,
            "f1_func": sum(e["score"]["f1_func"] for e in eps) / n,
            "kept": float(any(kept(e, a) for e in eps)),
            "episodes_kept": sum(kept(e, a) for e in eps),
        }
    return out


def interval(diffs, rng):
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(10_000))
    return means[249], means[9_749]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", help="label=episodes.jsonl; the first is the baseline")
    p.add_argument("--min-f1", type=float, default=0.5)
    p.add_argument("--min-e", type=float, default=0.2)
    p.add_argument("--calls", type=lambda s: tuple(float(x) for x in s.split(",")), default=(2.0, 8.0))
    p.add_argument("--max-tokens", type=int, default=3072)
    p.add_argument("--max-truncation", type=float, default=0.2)
    a = p.parse_args()
    runs = []
    for r in a.runs:
        label, _, path = r.partition("=")
        runs.append((label, per_task(path, a)))
    tasks = sorted(set.intersection(*(set(t) for _, t in runs)))
    if not tasks:
        sys.exit("no task is in every file")
    print(f"{len(tasks)} tasks in every file; paired differences against `{runs[0][0]}`, 95% bootstrap intervals\n")
    metrics = ["f1_file", "f1_func", "kept"]
    print("| teacher | " + " | ".join(["file F1", "function F1", "tasks kept by the filter", "episodes kept"]) + " |")
    print("|---|---|---|---|---|")
    base = runs[0][1]
    for label, t in runs:
        cells = []
        for m in metrics:
            mean = sum(t[k][m] for k in tasks) / len(tasks)
            if t is base:
                cells.append(f"{mean:.3f}" if m != "kept" else f"{int(sum(t[k][m] for k in tasks))}")
            else:
                diffs = [t[k][m] - base[k][m] for k in tasks]
                lo, hi = interval(diffs, random.Random(0))
                d = sum(diffs) / len(diffs)
                if m == "kept":
                    n = len(tasks)
                    cells.append(f"{int(sum(t[k][m] for k in tasks))} ({d * n:+.0f} [{lo * n:+.0f}, {hi * n:+.0f}])")
                else:
                    cells.append(f"{mean:.3f} ({d:+.3f} [{lo:+.3f}, {hi:+.3f}])")
        cells.append(str(sum(t[k]["episodes_kept"] for k in tasks)))
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
