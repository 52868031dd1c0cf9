#!/usr/bin/env bash
# The index search (`--policy search`, issue 62) against the scripted search
# on the held-out tasks of scripts/learn-real.sh (17 repositories), paired
# by task. Rebuilds only the held-out part of that script's corpus: the
# SWE-smith and SWE-Gym rows of those repositories and up to 10 tasks from
# each one's history, split as learn-real.sh splits them.
#
#   REPO_SOURCE='/mirror/{owner}+{name}/repo' scripts/search-heldout.sh
#   # -> checkpoints/search/{heldout.jsonl, search.ranked.jsonl,
#   #    scripted.ranked.jsonl, search.table, scripted.table, compare.md}
#
# REPO_SOURCE: where to clone from (default GitHub); REPOS: the repos dir
# (default checkpoints/real/repos, learn-real.sh's); CONFIG: the config
# whose episode setting and tokenizer the scripted search runs under
# (default configs/smollm2-real.toml, after scripts/fetch-smollm2.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
github='https://github.com/{owner}/{name}.git'
source="${REPO_SOURCE:-$github}"
repos="${REPOS:-checkpoints/real/repos}"
config="${CONFIG:-configs/smollm2-real.toml}"
out=checkpoints/search
c=$out/corpus
mkdir -p "$c/history"
log() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

list=$out/heldout-repos.txt
grep -v '^#' data/real/heldout-repos.txt | grep . > "$list"
log "repos: the $(wc -l < "$list") held-out repositories into $repos"
$bin repos fetch --list "$list" --repos-dir "$repos" --source "$source"

if [ ! -f "$out/heldout.jsonl" ]; then
  # The rows of the held-out repositories only (the others' repositories
  # are not fetched here).
  python3 - "$list" <<'EOF'
import json, sys
held = set(open(sys.argv[1]).read().split())
for src, dst in [("data/real/swe-smith-rows.jsonl", "checkpoints/search/corpus/smith-rows.jsonl"),
                 ("data/real/swe-gym-rows.jsonl", "checkpoints/search/corpus/gym-rows.jsonl")]:
    with open(src) as f, open(dst, "w") as o:
        for line in f:
            row = json.loads(line)
            if row["repo"] in held:
                o.write(line)
EOF
  [ -f "$c/smith.jsonl" ] || $bin tasks import --format swe-smith --input "$c/smith-rows.jsonl" \
    --repos-dir "$repos" --out "$c/smith.jsonl" --report "$c/smith.report.json"
  [ -f "$c/gym.jsonl" ] || $bin tasks import --format swe-gym --input "$c/gym-rows.jsonl" \
    --repos-dir "$repos" --out "$c/gym.jsonl" --report "$c/gym.report.json"
  while read -r repo; do
    dir=${repo/\//__}
    [ -f "$c/history/$dir.jsonl" ] || $bin --log warn tasks from-history --repo "$repo" --repos-dir "$repos" \
      --max 10 --out "$c/history/$dir.jsonl" || log "from-history $repo failed; skipped"
  done < "$list"
  $bin tasks split --input "$c/smith.jsonl" "$c/gym.jsonl" "$c"/history/*.jsonl \
    --heldout-repos data/real/heldout-repos.txt --max-statement-chars 2000 --train "$c/train.jsonl" --heldout "$out/heldout.jsonl.partial"
  mv "$out/heldout.jsonl.partial" "$out/heldout.jsonl"
fi
log "held out: $(wc -l < "$out/heldout.jsonl") tasks"

for policy in search scripted; do
  [ -f "$out/$policy.ranked.jsonl" ] && continue
  log "eval --policy $policy"
  start=$(date +%s.%N)
  group=(); [ "$policy" = scripted ] && group=(--group 1)
  nice -n 10 $bin --log warn eval --config "$config" --tasks "$out/heldout.jsonl" --repos-dir "$repos" "${group[@]}" \
    --policy "$policy" --ranked "$out/$policy.ranked.jsonl.partial" > "$out/$policy.table"
  end=$(date +%s.%N)
  echo "wall seconds: $(echo "$end - $start" | bc)" >> "$out/$policy.table"
  mv "$out/$policy.ranked.jsonl.partial" "$out/$policy.ranked.jsonl"
done
$bin compare "$out/scripted.ranked.jsonl" "$out/search.ranked.jsonl" > "$out/compare.md"
python3 scripts/search-table.py "$out/scripted.ranked.jsonl" "$out/search.ranked.jsonl" > "$out/table.md"
cat "$out/table.md"
