#!/usr/bin/env bash
# GRPO that learns on real repositories (issue 33): SmolLM2-135M-Instruct,
# a LoRA adapter trained by SFT on scripted-teacher trajectories then GRPO,
# on tasks from ~75 real Python repositories, evaluated on the tasks of 17
# other repositories that no training step sees.
#
#   scripts/learn-real.sh            # -> checkpoints/real/run/report.json
#   scripts/learn-real.sh search     # issue 64: the same with the `search` tool and the
#                                    # guided teacher (configs/smollm2-search-recipe.toml)
#                                    # -> checkpoints/real/search-run/report.json
#
# The variant (`real`, the default, or `search`) names the recipe, the run
# folder (run, search-run), the requests folder (requests, search-requests),
# the shipped form (localizer, search-localizer) and the episode setting of
# the evaluations (configs/smollm2-real-v1.toml, the previous localizer's,
# for `real`; configs/smollm2-real.toml, `search` on, for `search`); the
# repositories and corpus are shared.
#
# Stages (each leaves its output and is skipped when that output exists, so
# a rerun after an interruption at any point continues where it stopped):
#   1. repos    clone the repositories of data/real/repos.txt
#               (REPO_SOURCE: a URL or path template, default GitHub)
#   2. corpus   SWE-smith and SWE-Gym rows imported (`tasks import`), tasks
#               from each repository's history and synthetic tasks
#               (`tasks from-history`, `tasks synth`), split by repository
#               (`tasks split`, data/real/heldout-repos.txt held out)
#   3. run      `fusegrpo pipeline --config configs/smollm2-real-recipe.toml`:
#               teacher trajectories -> SFT -> difficulty filter -> GRPO
#               learning-rate pilot -> the long GRPO run -> evaluation of
#               base, teacher, SFT and GRPO on the held-out tasks
#   4. requests the 8 SWE-bench Verified rows of psf/requests, same stages
#   5. ship     the GRPO adapter in bf16 (`fusegrpo export-adapter`) and its
#               own evaluation on the held-out tasks (in the variant's setting),
#               episodes and ranked answers (the model, the search, combined)
#
# FUSEGRPO_BIN=path runs a copy of the binary (so a rebuild during the
# hours of the run does not touch it); by default the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-real}
case $variant in
  real) recipe=configs/smollm2-real-recipe.toml prefix= eval_config=configs/smollm2-real-v1.toml teacher_policy=scripted ;;
  search) recipe=configs/smollm2-search-recipe.toml prefix=search- eval_config=configs/smollm2-real.toml teacher_policy=guided ;;
  *) echo "usage: scripts/learn-real.sh [real|search]" >&2; exit 2 ;;
esac
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
# (The default in a variable: a `}` inside ${VAR:-...} would end the expansion.)
github='https://github.com/{owner}/{name}.git'
source="${REPO_SOURCE:-$github}"
real=checkpoints/real
repos=$real/repos
mkdir -p "$real/corpus/history" "$real/corpus/synth"
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

# 1. Repositories.
log "repos: data/real/repos.txt into $repos"
$bin repos fetch --list data/real/repos.txt --repos-dir "$repos" --source "$source"

# 2. The corpus.
c=$real/corpus
if [ ! -f "$c/train.jsonl" ]; then
  log "corpus: importing the SWE-smith and SWE-Gym rows"
  [ -f "$c/smith.jsonl" ] || $bin tasks import --format swe-smith --input data/real/swe-smith-rows.jsonl \
    --repos-dir "$repos" --out "$c/smith.jsonl" --report "$c/smith.report.json"
  [ -f "$c/gym.jsonl" ] || $bin tasks import --format swe-gym --input data/real/swe-gym-rows.jsonl \
    --repos-dir "$repos" --out "$c/gym.jsonl" --report "$c/gym.report.json"
  # Up to 10 tasks from each repository's history (newest first), and 8
  # synthetic tasks from each training repository's tree (none from the
  # held-out ones: their evaluation is on real issues and commits).
  grep -v '^#' data/real/repos.txt | while read -r repo; do
    [ -n "$repo" ] || continue
    dir=${repo/\//__}
    [ -f "$c/history/$dir.jsonl" ] || $bin --log warn tasks from-history --repo "$repo" --repos-dir "$repos" \
      --max 10 --out "$c/history/$dir.jsonl" || log "from-history $repo failed; skipped"
    if ! grep -qx "$repo" data/real/heldout-repos.txt && [ ! -f "$c/synth/$dir.jsonl" ]; then
      $bin --log warn tasks synth --repo "$repo" --repos-dir "$repos" --count 8 --seed 0 \
        --out "$c/synth/$dir.jsonl" || log "synth $repo failed; skipped"
    fi
  done
  $bin tasks split --input "$c/smith.jsonl" "$c/gym.jsonl" "$c"/history/*.jsonl "$c"/synth/*.jsonl \
    --heldout-repos data/real/heldout-repos.txt --max-statement-chars 2000 --train "$c/train.jsonl.partial" --heldout "$c/heldout.jsonl"
  mv "$c/train.jsonl.partial" "$c/train.jsonl"
fi
log "corpus: $(wc -l < "$c/train.jsonl") training tasks, $(wc -l < "$c/heldout.jsonl") held out"

# 3. The recipe: teacher trajectories, SFT, difficulty filter, pilot, GRPO,
# evaluation (each stage resumes; see $recipe).
scripts/fetch-smollm2.sh >/dev/null
run=$real/${prefix}run
log "run: fusegrpo pipeline --config $recipe into $run"
nice -n 10 $bin pipeline --config "$recipe" --out "$run"
[ -f "$run/grpo/metrics.jsonl" ] && $bin plot "$run/grpo"

# 4. The 8 SWE-bench Verified rows of psf/requests (never trained on):
# base, teacher, SFT and GRPO, greedy, one episode each.
r=$real/${prefix}requests
mkdir -p "$r"
$bin repos fetch --tasks data/real/swebench-verified-requests.jsonl --repos-dir "$repos" --source "$source"
[ -f "$r/tasks.jsonl" ] || $bin tasks import --format swe-bench --input data/real/swebench-verified-requests.jsonl \
  --repos-dir "$repos" --out "$r/tasks.jsonl"
sft=$(sed -n 's/.*"checkpoint": *"\([^"]*\)".*/\1/p' "$run/sft/complete.json")
grpo=$(sed -n 's/.*"checkpoint": *"\([^"]*\)".*/\1/p' "$run/grpo/complete.json")
# Each row records the checkpoint it was made with ($stage.source); a row of
# another checkpoint (a longer GRPO run) is kept aside under its step's name
# and made again.
set_aside() {  # FILE... : moved to <name>.<tag>.<ext>, never over a file
  local tag=$1; shift
  for f in "$@"; do
    [ -e "$f" ] || continue
    local dir name to
    dir=$(dirname "$f"); name=$(basename "$f")
    case $name in
      *.*) to="$dir/${name%%.*}.$tag.${name#*.}" ;;
      *) to="$dir/$name.$tag" ;;
    esac
    [ -e "$to" ] && { echo "$to exists: not overwriting it with $f" >&2; exit 1; }
    mv "$f" "$to"
  done
}
for stage in base teacher sft grpo; do
  case $stage in
    base) args=(--policy model --no-adapter); from=none ;;
    teacher) args=(--policy "$teacher_policy" --no-adapter); from=none ;;
    sft) args=(--policy model --adapter "$sft"); from=$sft ;;
    grpo) args=(--policy model --adapter "$grpo"); from=$grpo ;;
  esac
  if [ -f "$r/$stage.source" ] && [ "$(cat "$r/$stage.source")" != "$from" ]; then
    set_aside "$(basename "$(cat "$r/$stage.source")")" "$r/$stage.jsonl" "$r/$stage.table" "$r/$stage.source"
  fi
  [ -f "$r/$stage.source" ] || echo "$from" > "$r/$stage.source"
  [ -f "$r/$stage.jsonl" ] && continue
  log "requests: $stage"
  nice -n 10 $bin eval --config "$eval_config" --tasks "$r/tasks.jsonl" --repos-dir "$repos" \
    --group 1 "${args[@]}" --out "$r/$stage.jsonl.partial" --skip-bad-tasks > "$r/$stage.table"
  mv "$r/$stage.jsonl.partial" "$r/$stage.jsonl"
done
for stage in base teacher sft grpo; do echo "== requests, $stage"; cat "$r/$stage.table"; done

# 5. The shipped form of the localizer: the GRPO adapter in bf16 (PEFT's
# files, no optimizer state), evaluated itself on the held-out tasks in
# $eval_config's setting (greedy, one episode per task).
ship=$real/${prefix}localizer
if [ -f "$ship.source" ] && [ "$(cat "$ship.source")" != "$grpo" ]; then
  set_aside "$(basename "$(cat "$ship.source")")" "$ship" "$ship-heldout.jsonl" "$ship-heldout.ranked.jsonl" "$ship-heldout.table" "$ship.source"
fi
[ -f "$ship/adapter_model.safetensors" ] || $bin export-adapter --adapter "$grpo" --out "$ship" --dtype bf16
[ -f "$ship.source" ] || echo "$grpo" > "$ship.source"
# `combined` (eval's default), so that the ranked file has the model alone,
# the index search and the two combined (scripts/compare-localizers.sh).
if [ ! -f "$ship-heldout.jsonl" ] || [ ! -f "$ship-heldout.ranked.jsonl" ]; then
  log "the shipped adapter on the $(wc -l < "$c/heldout.jsonl") held-out tasks"
  nice -n 10 $bin eval --config "$eval_config" --tasks "$c/heldout.jsonl" --repos-dir "$repos" --group 1 \
    --adapter "$ship" --policy combined --out "$ship-heldout.jsonl.partial" --ranked "$ship-heldout.ranked.jsonl.partial" \
    --skip-bad-tasks > "$ship-heldout.table"
  mv "$ship-heldout.jsonl.partial" "$ship-heldout.jsonl"
  mv "$ship-heldout.ranked.jsonl.partial" "$ship-heldout.ranked.jsonl"
fi
cat "$ship-heldout.table"
log "done: $run/report.json, $r/*.table, $ship (the adapter $eval_config loads: copy it there to ship it)"
