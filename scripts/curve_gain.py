#!/usr/bin/env python3
"""Did a GRPO run's training reward rise? The mean of its last N steps minus
the mean of its first N, with a 95% bootstrap interval (steps resampled with
replacement inside each window; each step's value is the mean over its
episodes). Standard library only.

    python3 scripts/curve_gain.py RUN/metrics.jsonl [--key reward] [--window 10] [--resamples 10000] [--seed 0]

`reward` is R (the reward every table reports); `train_reward` adds the
answer term the run trained on. Prints one line, and a JSON object with
--json.

Each step draws a few tasks, and their difficulty moves the step's mean more
than learning does. `--baseline EPISODES.jsonl` (the pipeline's difficulty
probe, `RUN/difficulty/episodes.jsonl`: the starting policy's episodes on the
same tasks) reads each step as the mean over its tasks of (the task's R this
step - the task's mean R in EPISODES), which takes the draw out. It needs the
steps' `tasks` (each task's mean R in the step, written by GRPO since the
step that added it; `--tasks-of FILE` supplies them for older runs: one JSON
line per step, {"step": N, "tasks": [ids]}, the step's reward then spread
evenly over its tasks, which holds when each task has as many episodes).
"""
import argparse
import json
import random
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics")
    ap.add_argument("--key", default="reward")
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--baseline", help="episodes of the starting policy (the difficulty probe's)")
    ap.add_argument("--tasks-of", help="the steps' task ids, for runs whose metrics lack `tasks`")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.metrics) if line.strip()]
    if a.baseline:
        values = adjusted(rows, a)
    else:
        values = [r[a.key] for r in rows if a.key in r and r[a.key] is not None]
    if len(values) < 2 * a.window:
        sys.exit(f"{a.metrics}: {len(values)} steps with `{a.key}`, fewer than two windows of {a.window}")
    first, last = values[: a.window], values[-a.window :]
    mean = lambda xs: sum(xs) / len(xs)
    gain = mean(last) - mean(first)
    rng = random.Random(a.seed)
    draws = sorted(
        mean([rng.choice(last) for _ in last]) - mean([rng.choice(first) for _ in first]) for _ in range(a.resamples)
    )
    lo, hi = draws[int(0.025 * a.resamples)], draws[int(0.975 * a.resamples) - 1]
    key = f"{a.key} - baseline" if a.baseline else a.key
    out = {"key": key, "steps": len(values), "window": a.window, "first": mean(first), "last": mean(last), "gain": gain, "ci95": [lo, hi]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{key}: first {a.window} steps {out['first']:.4f}, last {a.window} {out['last']:.4f}, gain {gain:+.4f} [{lo:+.4f}, {hi:+.4f}] (95% bootstrap over steps, {len(values)} steps)")


def adjusted(rows, a):
    """Each step's mean over its tasks of R minus the task's baseline R."""
    if a.key != "reward":
        sys.exit("--baseline reads R per task: use it with --key reward")
    sums = {}
    for n, line in enumerate(open(a.baseline), 1):
        if not line.strip():
            continue
        e = json.loads(line)
        try:
            r = (e.get("score") or {}).get("reward", 0.0)
            s = sums.setdefault(e["task_id"], [0.0, 0])
        except (KeyError, AttributeError):
            sys.exit(f"{a.baseline}:{n}: not an episode (needs task_id and score)")
        s[0] += r
        s[1] += 1
    base = {t: s / n for t, (s, n) in sums.items()}
    given = {}
    if a.tasks_of:
        for line in open(a.tasks_of):
            if line.strip():
                t = json.loads(line)
                given[t["step"]] = t["tasks"]
    values = []
    for r in rows:
        tasks = r.get("tasks")
        if tasks is None and r["step"] in given:
            tasks = {t: r["reward"] for t in given[r["step"]]}
        if tasks is None:
            sys.exit(f"{a.metrics}: step {r['step']} has no `tasks` (a run older than them: give --tasks-of)")
        missing = [t for t in tasks if t not in base]
        if missing:
            sys.exit(f"{a.baseline}: no episode of {missing[0]} (step {r['step']})")
        values.append(sum(v - base[t] for t, v in tasks.items()) / len(tasks))
    return values


if __name__ == "__main__":
    main()
