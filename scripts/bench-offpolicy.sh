#!/usr/bin/env bash
# Wall time per GRPO step, `[rollout] off_policy = 0` against `1`, with the
# built-in engine: SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh) in f32 on
# the practice repository's tasks, 2 tasks x 4 episodes a step, a KL term
# and every group kept (so each step updates), TIS on both sides. Each run
# is STEPS steps from the same start on the same tasks; the two settings
# alternate, ROUNDS runs each. Prints each run's wall seconds per step (the
# sum of its steps' `seconds_step` over STEPS: the off-policy run makes the
# same batches, all but the first during an update) and the medians.
#
#   scripts/bench-offpolicy.sh [ROUNDS=2] [STEPS=4]   # -> checkpoints/bench-offpolicy/
#
# FUSEGRPO_BIN=path runs another build. On 2 CPU cores both sides share the
# cores, so little gain is expected; the figure that matters is on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
steps="${2:-4}"
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
bin=$(realpath "$bin")
model=$(scripts/fetch-smollm2.sh)
w=checkpoints/bench-offpolicy
rm -rf "$w"
mkdir -p "$w"
$bin practice-repo --out "$w/repos" --seed 0 >/dev/null
$bin tasks from-history --repo practice/shop --repos-dir "$w/repos" --out "$w/tasks.jsonl" 2>/dev/null
cat > "$w/run.toml" <<EOF
name = "bench-offpolicy"
[model]
path = "$model"
chat_template = "$PWD/configs/chatml-tools.jinja"
dtype = "f32"
device = "cpu"
[env]
repos_dir = "$PWD/$w/repos"
[env.tools]
max_grep_matches = 5
max_read_lines = 12
max_output_bytes = 600
max_line_chars = 80
[episode]
max_turns = 4
max_turn_tokens = 200
max_total_tokens = 2048
[sampling]
temperature = 0.7
seed = 0
[rollout]
group = 4
[reward]
answer_bonus = 0.5
[train]
tasks = "$PWD/$w/tasks.jsonl"
steps = $steps
tasks_per_step = 2
micro_batch_rows = 1
save_every = $steps
keep_last = 1
[grpo]
beta = 0.01
aggregation = "dapo"
rollout_correction = "tis"
zero_std_groups = "keep"
[optim]
lr = 2e-5
EOF
echo "$(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds rounds x $steps steps" | tee "$w/summary.txt"
for round in $(seq "$rounds"); do
  for p in 0 1; do
    echo "== $(date -u +%H:%M:%S) off_policy = $p, round $round" >&2
    $bin train --config "$w/run.toml" --out "$w/run-$p-$round" --set rollout.off_policy=$p 2> "$w/run-$p-$round.log"
  done
done
python3 - "$w" "$rounds" "$steps" <<'PY' | tee -a "$w/summary.txt"
import json, statistics, sys
w, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = {}
for p in (0, 1):
    for k in range(1, rounds + 1):
        m = [json.loads(l) for l in open(f"{w}/run-{p}-{k}/metrics.jsonl")]
        assert len(m) == steps, f"run-{p}-{k}: {len(m)} steps"
        per.setdefault(p, []).append(sum(r["seconds_step"] for r in m) / steps)
        parts = ", ".join(f"{r['seconds_step']:.1f} (rollout {r['seconds_rollout']:.1f}, update {r['seconds_update']:.1f})" for r in m)
        print(f"off_policy = {p}, run {k}: {per[p][-1]:.2f} s/step; steps: {parts}")
for p in (0, 1):
    print(f"off_policy = {p}: median {statistics.median(per[p]):.2f} s/step over {rounds} runs")
print(f"off_policy 1 / 0: {statistics.median(per[1]) / statistics.median(per[0]):.2f}")
PY
