#!/usr/bin/env bash
# A model on the 8 SWE-bench Verified rows of psf/requests (issue 18's first
# real-repository figure; a benchmark, not a test):
#
#   scripts/eval-requests.sh MODEL_DIR [NAME] [POLICY]
#       MODEL_DIR  a Hugging Face folder or a checkpoint (e.g. checkpoints/learn/seed1/grpo/step_00000008)
#       NAME       names the outputs (default: the folder's name)
#       POLICY     model (default) or scripted (the scripted teacher; MODEL_DIR then gives the tokenizer)
#   -> checkpoints/requests/NAME.jsonl (episodes) and the summary table on stdout
#
# The setting of BENCHMARKS.md's psf/requests rows for SmolLM2
# (configs/smollm2-requests.toml: 4 turns of at most 256 tokens, 8,192 in
# all, default tool limits, greedy, the ChatML template with tools). The repository is cloned
# into checkpoints/requests/repos once, from REPOS_SOURCE, a URL or path
# template as `fusegrpo repos fetch --source` takes it (default
# https://github.com/{owner}/{name}.git; e.g. /mirrors/{owner}+{name}/repo
# for a local clone with the full history). TASKS overrides the task file (default
# data/real/swebench-verified-requests.jsonl); FUSEGRPO_BIN the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,19p "$0" >&2; exit 2; }
[ -d "$1" ] || { echo "eval-requests: no model folder $1" >&2; exit 2; }
model=$(realpath "$1")
name=${2:-$(basename "$model")}
policy=${3:-model}
case "$policy" in model|scripted) ;; *) echo "eval-requests: POLICY is model or scripted, not $policy" >&2; exit 2;; esac
tasks=$(realpath "${TASKS:-data/real/swebench-verified-requests.jsonl}")
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
out=$(mkdir -p checkpoints/requests && realpath checkpoints/requests)
github='https://github.com/{owner}/{name}.git'
$bin repos fetch --tasks "$tasks" --repos-dir "$out/repos" --source "${REPOS_SOURCE:-$github}"
# Greedy decoding gives a model one episode per task; the scripted teacher
# varies its episodes, so it gets the default group of 4.
group=(); [ "$policy" = model ] && group=(--group 1)
time $bin eval --config configs/smollm2-requests.toml --model "$model" --repos-dir "$out/repos" \
  --tasks "$tasks" --policy "$policy" "${group[@]}" --out "$out/$name.jsonl"
