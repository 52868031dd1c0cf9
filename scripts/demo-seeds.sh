#!/usr/bin/env bash
# The CPU demo over several seeds (default 0 1 2): runs scripts/smoke.sh for
# each and prints the mean and spread of each stage's held-out metrics, so a
# gain is judged against seed noise.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${*:-0 1 2}"
for s in $seeds; do SEED=$s scripts/smoke.sh; done
python3 - $seeds <<'PY'
import json, statistics, sys
seeds = sys.argv[1:]
reports = [json.load(open(f"checkpoints/smoke/pipeline-seed{s}/report.json")) for s in seeds]
keys = ["reward", "f1_file", "f1_func", "e", "answered", "well_formed_calls", "calls_per_turn", "turns"]
print(f"{len(seeds)} seeds ({' '.join(seeds)}): mean (min..max) on held-out tasks")
print("stage   " + "".join(f"{k:>24}" for k in keys))
for stage in ["base", "sft", "grpo"]:
    cells = []
    for k in keys:
        v = [r["stages"][stage][k] for r in reports]
        cells.append(f"{statistics.mean(v):.3f} ({min(v):.3f}..{max(v):.3f})")
    print(f"{stage:<8}" + "".join(f"{c:>24}" for c in cells))
gain = [r["stages"]["grpo"]["reward"] - r["stages"]["sft"]["reward"] for r in reports]
print("reward gain grpo - sft per seed:", " ".join(f"{g:+.3f}" for g in gain))
PY
