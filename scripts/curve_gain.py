#!/usr/bin/env python3
"""Did a GRPO run's training reward rise? The mean of its last N steps minus
the mean of its first N, with a 95% bootstrap interval (steps resampled with
replacement inside each window; each step's value is the mean over its
episodes). Standard library only.

    python3 scripts/curve_gain.py RUN/metrics.jsonl [--key reward] [--window 10] [--resamples 10000] [--seed 0]

`reward` is R (the reward every table reports); `train_reward` adds the
answer term the run trained on. Prints one line, and a JSON object with
--json.
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
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.metrics) if line.strip()]
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
    out = {"key": a.key, "steps": len(values), "window": a.window, "first": mean(first), "last": mean(last), "gain": gain, "ci95": [lo, hi]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.key}: first {a.window} steps {out['first']:.4f}, last {a.window} {out['last']:.4f}, gain {gain:+.4f} [{lo:+.4f}, {hi:+.4f}] (95% bootstrap over steps, {len(values)} steps)")


if __name__ == "__main__":
    main()
