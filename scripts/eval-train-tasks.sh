#!/usr/bin/env bash
# Did GRPO improve the policy on the tasks it trained on? (issue 33; the
# training curve mixes learning with which 4 tasks each step drew.) After
# scripts/learn-real.sh: the SFT checkpoint and the GRPO run's last one
# play the GRPO tasks (checkpoints/real/run/tasks/grpo.jsonl) afresh, at the
# recipe's sampling temperature with another seed than the difficulty
# probe's (whose episodes chose these tasks for their spread, so their
# rewards are not a fair baseline), and `fusegrpo compare` pairs them by task.
#
#   scripts/eval-train-tasks.sh      # -> checkpoints/real/train-tasks/compare.md
#
# SEED (default 1), GROUP episodes per task (default 2), CHUNK tasks per
# eval call (default 16; a call's episodes run in one batch); each call's
# output is kept, so a rerun continues. FUSEGRPO_BIN as in learn-real.sh.
# Takes about 20 min (SFT) + 13 min (GRPO) on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
seed=${SEED:-1}; group=${GROUP:-2}; chunk=${CHUNK:-16}
run=checkpoints/real/run
out=checkpoints/real/train-tasks
tasks=$run/tasks/grpo.jsonl
sft=$(ls -d $run/sft/step_* 2>/dev/null | tail -1)
grpo=$(ls -d $run/grpo/step_* 2>/dev/null | tail -1)
[ -f "$tasks" ] && [ -n "$sft" ] && [ -n "$grpo" ] || { echo "no finished run in $run: run scripts/learn-real.sh first" >&2; exit 1; }
mkdir -p "$out"
# The recipe with another sampling seed; its relative paths made absolute,
# since the copy lives elsewhere.
cfg=$out/recipe-seed$seed.toml
sed -e "s/^seed = .*/seed = $seed/" \
    -e "s#^repos_dir = .*#repos_dir = \"$PWD/checkpoints/real/repos\"#" \
    -e "s#^chat_template = \"#chat_template = \"$PWD/configs/#" configs/smollm2-real-recipe.toml > "$cfg"
grep -q "^seed = $seed$" "$cfg" || { echo "$cfg: could not set the sampling seed" >&2; exit 1; }
rm -f "$out"/tasks.*
split -l "$chunk" -d -a 3 "$tasks" "$out/tasks."
for m in "sft:$sft" "grpo:$grpo"; do
  name=${m%%:*}; ckpt=${m#*:}
  for t in "$out"/tasks.???; do
    part=$out/$name.seed$seed.$(basename "$t").jsonl
    [ -s "$part" ] && continue
    echo "== $(date -u +%H:%M:%S) $name ($ckpt) on $(basename "$t")" >&2
    nice -n 10 $bin eval --config "$cfg" --tasks "$t" --adapter "$ckpt" --group "$group" --out "$part.partial" > /dev/null
    mv "$part.partial" "$part"
  done
  cat "$out/$name.seed$seed".tasks.???.jsonl > "$out/$name.seed$seed.jsonl"
done
$bin compare "$out/sft.seed$seed.jsonl" "$out/grpo.seed$seed.jsonl" --json "$out/compare.json" | tee "$out/compare.md"
