#!/usr/bin/env bash
# `localize` against `eval` on the same tasks, model and settings (issue
# 36): for each task, the files and functions `fusegrpo localize --rev
# <base_commit>` ranks, beside the answer of the task's `eval` episode.
#
#   scripts/localize-vs-eval.sh CONFIG TASKS REPOS_DIR [extra eval/localize args, e.g. --adapter A]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
config=$1 tasks=$2 repos=$3; shift 3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
$bin eval --config "$config" --tasks "$tasks" --repos-dir "$repos" --group 1 --policy model --out "$work/eval.jsonl" --skip-bad-tasks "$@" >/dev/null
same=0 n=0
while IFS= read -r line; do
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["instance_id"])' "$line")
  grep -q "\"task_id\": *\"$id\"" "$work/eval.jsonl" || { echo "$id: skipped (eval could not run it)"; continue; }
  repo=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["repo"].replace("/","__"))' "$line")
  rev=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["base_commit"])' "$line")
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["problem_statement"])' "$line" > "$work/issue.txt"
  $bin --log warn localize --config "$config" --repo "$repos/$repo" --rev "$rev" --issue "$work/issue.txt" --policy model --json "$@" > "$work/loc.json"
  verdict=$(python3 - "$work/eval.jsonl" "$work/loc.json" "$id" <<'PY'
import json, sys
eps = {json.loads(l)["task_id"]: json.loads(l) for l in open(sys.argv[1]) if l.strip()}
loc = json.load(open(sys.argv[2]))
e = eps[sys.argv[3]]
ans = set(e["answer"]) | {a.split(":")[0] for a in e["answer"]}
# What localize ranks, and what it lists apart as not in the repository.
ours = {r["entity"] for r in loc["files"] + loc["functions"]} | {n["entity"] for n in loc.get("not_in_repository", [])}
print(("same" if ans == ours else "DIFFERENT") + f"  eval {sorted(ans)}  localize {sorted(ours)}  (F1 file {e['score']['f1_file']:.2f})")
PY
)
  echo "$id: $verdict"
  n=$((n + 1)); case $verdict in same*) same=$((same + 1));; esac
done < "$tasks"
echo "$same of $n tasks: localize names the same files and functions as eval"
