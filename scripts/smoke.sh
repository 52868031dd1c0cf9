#!/usr/bin/env bash
# The main job on its built-in default, on the CPU (configs/smoke-cpu.toml):
# the FuseSearch recipe at toy scale. The generated practice repository and
# its tasks from history, a tiny random Qwen3 whose small BPE is trained on
# that repository, then `fusegrpo pipeline`: the scripted teacher's
# trajectories (synth), the dual-metric filter, SFT, GRPO, and the table of
# the base, SFT and GRPO models on held-out tasks (report.json), plus a plot
# of the GRPO run. SEED=n picks the sampling/SFT seed (default 0); a rerun
# skips the stages that are done. FUSEGRPO_BIN=path runs that build instead
# of building target/release/fusegrpo.
set -euo pipefail
cd "$(dirname "$0")/.."
seed="${SEED:-0}"
if [ -n "${FUSEGRPO_BIN:-}" ]; then
  bin=$FUSEGRPO_BIN
  [ -x "$bin" ] || { echo "smoke.sh: FUSEGRPO_BIN=$bin is not an executable" >&2; exit 2; }
else
  cargo build --release --bin fusegrpo
  bin=target/release/fusegrpo
fi
run=checkpoints/smoke
mkdir -p "$run"
[ -d "$run/repos/practice__shop" ] || $bin practice-repo --out "$run/repos" --seed 0 >/dev/null
[ -f "$run/tasks.jsonl" ] || $bin tasks from-history --repo practice/shop --repos-dir "$run/repos" --out "$run/tasks.jsonl"
[ -f "$run/model/config.json" ] || $bin init-tiny --out "$run/model" --small-vocab 8192 --seed 0 \
    --hidden-size 128 --intermediate-size 384 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 \
    --corpus-repo practice/shop --repos-dir "$run/repos"
out="$run/pipeline-seed$seed"
time $bin pipeline --config configs/smoke-cpu.toml --out "$out" --seed "$seed"
$bin plot "$out/grpo"
echo "== report: $out/report.json; GRPO curves: $out/grpo/plot.png; SFT metrics: $out/sft/metrics.jsonl"
