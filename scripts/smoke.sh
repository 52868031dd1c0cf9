#!/usr/bin/env bash
# The main job on its built-in default, on the CPU (configs/smoke-cpu.toml):
# a tiny random Qwen3 with a small BPE, the generated practice repository and
# its tasks from history, an evaluation with the scripted teacher, then GRPO
# training of the tiny model (rollouts with tools, advantages, clipped loss,
# AdamW, checkpoints) and an evaluation of the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin fusegrpo
bin=target/release/fusegrpo
run=checkpoints/smoke
mkdir -p "$run"
[ -f "$run/model/config.json" ] || $bin init-tiny --out "$run/model" --small-vocab 4096 --seed 0
$bin practice-repo --out "$run/repos" --seed 0 --force
$bin tasks from-history --repo practice/shop --repos-dir "$run/repos" --out "$run/tasks.jsonl" --max 24
echo "== the scripted teacher on the practice tasks"
$bin eval --config configs/smoke-cpu.toml --tasks "$run/tasks.jsonl" --policy scripted --group 1 --max-tasks 8
echo "== GRPO on the tiny model"
$bin train --config configs/smoke-cpu.toml --out "$run/grpo" --resume auto
echo "== metrics: $run/grpo/metrics.jsonl; checkpoints: $run/grpo/step_*"
tail -n 2 "$run/grpo/metrics.jsonl"
$bin plot "$run/grpo"
