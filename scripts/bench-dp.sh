#!/usr/bin/env bash
# 1 process (2 threads, then 1) vs `mpirun -n 2` (1 thread each) on the CPU demo's GRPO step (BENCHMARKS.md,
# "Data parallelism"): the demo's inputs and config (8 tasks x 8 episodes a
# step, turns of up to 200 tokens), the tiny random model, KL on and
# zero-spread groups kept so every step updates, STEPS steps each way; prints
# each step's rollout and update seconds and tokens/s from metrics.jsonl and
# their medians. Needs the binary built with --features mpi
# (scripts/test-mpi.sh builds it) and OpenMPI.
#
#   scripts/bench-dp.sh [STEPS]        # default 4; work in checkpoints/bench-dp
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-4}"
bin=target/release/fusegrpo
work=checkpoints/bench-dp
mkdir -p "$work"
[ -d "$work/repos/practice__shop" ] || $bin practice-repo --out "$work/repos" --seed 0 > /dev/null
[ -f "$work/tasks.jsonl" ] || $bin tasks from-history --repo practice/shop --repos-dir "$work/repos" --out "$work/tasks.jsonl" 2> /dev/null
[ -f "$work/model/config.json" ] || $bin init-tiny --out "$work/model" --small-vocab 8192 --seed 0 \
    --hidden-size 128 --intermediate-size 384 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 \
    --corpus-repo practice/shop --repos-dir "$work/repos" > /dev/null 2>&1
sed -e 's#^path = .*#path = "model"#' -e 's#^repos_dir = .*#repos_dir = "repos"#' \
    -e '/^\[train\]/a tasks = "tasks.jsonl"' -e "s/^steps = .*/steps = $steps/" -e 's/^save_every = .*/save_every = 1000/' \
    -e 's/^beta = .*/beta = 0.04/' -e 's/^zero_std_groups = .*/zero_std_groups = "keep"/' \
    configs/smoke-cpu.toml > "$work/run.toml"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FUSEGRPO_LOG=warn
rm -rf "$work/one" "$work/one-thread" "$work/two"
echo "== 1 process, $(nproc) threads"
$bin train --config "$work/run.toml" --out "$work/one" > /dev/null 2>&1
echo "== 1 process, 1 thread"
RAYON_NUM_THREADS=1 $bin train --config "$work/run.toml" --out "$work/one-thread" > /dev/null 2>&1
echo "== mpirun -n 2, 1 thread each"
mpirun -n 2 --oversubscribe -x RAYON_NUM_THREADS=1 -x FUSEGRPO_LOG $bin train --config "$work/run.toml" --out "$work/two" > /dev/null 2>&1
python3 - "$work/one/metrics.jsonl" "$work/one-thread/metrics.jsonl" "$work/two/metrics.jsonl" <<'PY'
import json, statistics, sys
for name, path in zip([f"1 process x 2 threads", "1 process x 1 thread", "2 ranks x 1 thread"], sys.argv[1:4]):
    rows = [json.loads(l) for l in open(path)]
    for r in rows:
        print(f"{name} step {r['step']}: rollout {r['seconds_rollout']:.1f} s, update {r['seconds_update']:.1f} s, "
              f"{r['tokens']} tokens, {r['tokens_per_second']:.0f} tok/s")
    med = lambda k: statistics.median(r[k] for r in rows)
    print(f"{name} median: rollout {med('seconds_rollout'):.1f} s, update {med('seconds_update'):.1f} s, "
          f"step {med('seconds_rollout') + med('seconds_update'):.1f} s, {med('tokens_per_second'):.0f} tok/s")
PY
