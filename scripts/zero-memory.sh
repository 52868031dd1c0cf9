#!/usr/bin/env bash
# ZeRO-1's memory on the CPU, measured: two GRPO steps of a 63M-parameter
# random Qwen3 (f32, so AdamW's moments are 2 x 4 B per parameter) on the
# practice repository under `mpirun -n 2`, with [optim] zero_stage = 0 and
# then 1; prints each rank's peak resident memory (/usr/bin/time's maximum
# RSS) beside the planner's per-rank moments for --gpus 2. Needs OpenMPI and
# a binary built with --features mpi (scripts/test-mpi.sh builds one).
#
#   FUSEGRPO_BIN=target/release/fusegrpo scripts/zero-memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${FUSEGRPO_BIN:-target/release/fusegrpo}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FUSEGRPO_LOG=warn
"$bin" practice-repo --out "$work/repos" --seed 0 > /dev/null
"$bin" tasks from-history --repo practice/shop --repos-dir "$work/repos" --out "$work/tasks.jsonl" > /dev/null
"$bin" init-tiny --out "$work/model" --small-vocab 8192 --seed 0 --hidden-size 768 --intermediate-size 2048 \
  --layers 8 --heads 12 --kv-heads 4 --head-dim 64 --corpus-repo practice/shop --repos-dir "$work/repos" > /dev/null
for stage in 0 1; do
  cat > "$work/zero$stage.toml" <<TOML
name = "zero$stage"
[model]
path = "model"
[env]
repos_dir = "repos"
[episode]
max_turns = 2
max_turn_tokens = 32
max_total_tokens = 2048
[sampling]
temperature = 0.7
[rollout]
group = 2
[train]
tasks = "tasks.jsonl"
steps = 2
tasks_per_step = 2
micro_batch_rows = 2
save_every = 1
mask_truncated = false
[grpo]
beta = 0.0
[optim]
lr = 1e-4
weight_decay = 0.1
zero_stage = $stage
TOML
  moments=$("$bin" plan --config "$work/zero$stage.toml" --gpus 2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["parts"]["grpo_update"]["moments"])')
  # Each rank under /usr/bin/time, its maximum RSS into a file named by its rank.
  mpirun -n 2 --oversubscribe -x RAYON_NUM_THREADS=1 -x FUSEGRPO_LOG \
    sh -c "/usr/bin/time -f %M -o $work/rss-$stage-\$OMPI_COMM_WORLD_RANK $bin train --config $work/zero$stage.toml --out $work/run$stage" > /dev/null
  r0=$(tail -n 1 "$work/rss-$stage-0"); r1=$(tail -n 1 "$work/rss-$stage-1")
  echo "zero_stage = $stage: planned AdamW moments per rank $((moments >> 20)) MiB; measured peak RSS rank 0 $((r0 >> 10)) MiB, rank 1 $((r1 >> 10)) MiB"
done
cmp -s "$work/run0/step_00000002/model.safetensors" "$work/run1/step_00000002/model.safetensors" \
  && echo "the two runs' weights after the step: identical" || { echo "the two runs' weights differ" >&2; exit 1; }
