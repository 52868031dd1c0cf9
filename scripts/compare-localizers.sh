#!/usr/bin/env bash
# Issue 64's held-out comparison, after `scripts/learn-real.sh search`: the
# localizer that run made (its shipped form, checkpoints/real/search-localizer,
# evaluated with `search` on) against the previous shipped adapter in its
# own setting, and against the index search alone; all greedy, one episode
# per task, on the 284 held-out tasks of 17 repositories, paired by task
# with 95% bootstrap intervals (`fusegrpo compare`).
#
#   scripts/compare-localizers.sh     # -> checkpoints/real/compare/compare.md
#
# OLD_ADAPTER, OLD_CONFIG: the previous localizer and the config it was
# trained and measured with (default models/smollm2-135m-localizer-v1 and
# configs/smollm2-real-v1.toml). FUSEGRPO_BIN as in learn-real.sh.
#
# The tables, in compare.md:
#   1. GRPO - SFT of the run (its report.json, reward paired by task)
#   2. episodes: new - old (R, file F1, function F1, answered)
#   3. ranked answers, each policy of each file (the model alone, `combined`
#      and the search itself) against the index search: file and function
#      F1, accuracy@1/3/5 (`compare --against search`)
#   4. the same columns against the previous model alone (`--against model`)
# Each evaluation is kept and reused by a rerun (delete it to make it again).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
old_adapter=${OLD_ADAPTER:-models/smollm2-135m-localizer-v1}
old_config=${OLD_CONFIG:-configs/smollm2-real-v1.toml}
real=checkpoints/real
run=$real/search-run
ship=$real/search-localizer
heldout=$real/corpus/heldout.jsonl
out=$real/compare
for f in "$run/report.json" "$ship-heldout.jsonl" "$ship-heldout.ranked.jsonl" "$heldout" "$old_adapter/adapter_model.safetensors" "$old_config"; do
  [ -e "$f" ] || { echo "compare-localizers: $f is missing (run scripts/learn-real.sh search first)" >&2; exit 1; }
done
mkdir -p "$out"
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

# The previous localizer in its own setting (no `search` tool); `combined`
# (the default policy) so that its ranked file has the model alone as well.
if [ ! -f "$out/old.ranked.jsonl" ]; then
  log "the previous localizer ($old_adapter) on the $(wc -l < "$heldout") held-out tasks"
  nice -n 10 $bin eval --config "$old_config" --tasks "$heldout" --repos-dir "$real/repos" --group 1 \
    --adapter "$old_adapter" --out "$out/old.jsonl.partial" --ranked "$out/old.ranked.jsonl.partial" --skip-bad-tasks > "$out/old.table"
  mv "$out/old.jsonl.partial" "$out/old.jsonl"
  mv "$out/old.ranked.jsonl.partial" "$out/old.ranked.jsonl"
fi

{
  echo "# Issue 64: the held-out comparison ($(date -u +%F))"
  echo
  echo "## 1. GRPO - SFT ($run/report.json)"
  echo
  python3 - "$run/report.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))["paired"]["grpo_vs_sft"]
print(f"R: {p['mean']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] over {p['tasks']} tasks")
EOF
  echo
  echo "## 2. Episodes: the new localizer - the previous one"
  echo
  $bin compare "$out/old.jsonl" "$ship-heldout.jsonl" --json "$out/episodes.json"
  echo
  echo "## 3. Ranked answers against the index search"
  echo
  $bin compare "$ship-heldout.ranked.jsonl" "$out/old.ranked.jsonl" --against search --json "$out/ranked.json"
  echo
  echo "## 4. Ranked answers against the previous model alone"
  echo
  $bin compare "$out/old.ranked.jsonl" "$ship-heldout.ranked.jsonl" --against model --json "$out/models.json"
} > "$out/compare.md"
cat "$out/compare.md"
