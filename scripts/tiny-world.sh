#!/usr/bin/env bash
# The small world the check scripts run in: the practice repository
# (seed 0), its history's tasks, a tiny random Qwen3 (1,024-token
# vocabulary) and a run config, cfg.toml, of 3 GRPO steps on the CPU.
#
#   scripts/tiny-world.sh FUSEGRPO_BIN DIR NAME
#
# Writes DIR/repos, DIR/tasks.jsonl, DIR/model and DIR/cfg.toml (name =
# NAME); a script edits cfg.toml for what it checks.
set -euo pipefail
B=$1 w=$2 name=$3
$B practice-repo --out "$w/repos" --seed 0 >/dev/null
$B tasks from-history --repo practice/shop --repos-dir "$w/repos" --out "$w/tasks.jsonl" 2>/dev/null
$B init-tiny --out "$w/model" --small-vocab 1024 --seed 0 --corpus-repo practice/shop --repos-dir "$w/repos" 2>/dev/null
cat > "$w/cfg.toml" <<TOML
name = "$name"
[model]
path = "model"
[env]
repos_dir = "repos"
[episode]
max_turns = 2
max_turn_tokens = 16
max_total_tokens = 2048
[rollout]
group = 2
[sampling]
temperature = 0.7
[train]
tasks = "tasks.jsonl"
steps = 3
tasks_per_step = 1
save_every = 1
keep_last = 3
[grpo]
beta = 0.0
[optim]
lr = 1e-4
TOML
