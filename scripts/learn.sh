#!/usr/bin/env bash
# A pretrained model that learns (issue 18): SmolLM2-135M-Instruct, imported
# from its GGUF (scripts/fetch-smollm2.sh), trained on the demo's practice
# repository by SFT on scripted-teacher trajectories then GRPO, and evaluated
# before SFT, after SFT and after GRPO on the same held-out tasks with the
# same episode seeds (report.json: reward_ci95 per stage, paired differences).
#
#   scripts/learn.sh [SEED]      # -> checkpoints/learn/seed<SEED>/report.json
#
# Each stage leaves its output in the run folder, so a rerun (after an
# interruption, or in a later session) continues where it stopped.
# CONFIG=configs/other.toml picks another config.
set -euo pipefail
cd "$(dirname "$0")/.."
seed="${1:-0}"
config="${CONFIG:-configs/smollm2-cpu.toml}"
# FUSEGRPO_BIN=path/to/fusegrpo runs a copy (so a rebuild during the hours
# of the run does not matter); by default the release build.
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
export FUSEGRPO_BIN="$bin"
run=checkpoints/learn
mkdir -p "$run"
model=$(scripts/fetch-smollm2.sh)
[ -e "$run/model" ] || ln -s "$model" "$run/model"
[ -d "$run/repos/practice__shop" ] || $bin practice-repo --out "$run/repos" --seed 0 >/dev/null
# The tasks: the practice repository's history (57) and one synthetic task
# per function of its tree (53, scripted writer): 110, of which the config
# holds some out.
if [ ! -f "$run/tasks.jsonl" ]; then
  $bin tasks from-history --repo practice/shop --repos-dir "$run/repos" --out "$run/history.jsonl"
  $bin tasks synth --repo practice/shop --repos-dir "$run/repos" --count 1000 --seed 0 --out "$run/synth.jsonl"
  cat "$run/history.jsonl" "$run/synth.jsonl" > "$run/tasks.jsonl.partial"
  mv "$run/tasks.jsonl.partial" "$run/tasks.jsonl"
fi
out="$run/seed$seed"
time $bin pipeline --config "$config" --out "$out" --seed "$seed"
[ -f "$out/grpo/metrics.jsonl" ] && $bin plot "$out/grpo"
echo "== report: $out/report.json; GRPO curves: $out/grpo/plot.png"
