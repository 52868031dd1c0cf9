#!/usr/bin/env bash
# A real MCP client against `fusegrpo mcp` (issue 36): the official Python
# SDK (mcp==2.3.0, in a venv outside the repository) starts the server over
# stdio, lists its tools, checks localize's declared output schema (every
# structured result validates against it), the tools' annotations
# (read-only) and `attempts`' range (1-64), localizes 5 tasks of the
# practice repository, a long issue (cut, and said) and a plain folder,
# sends every bad input (unknown arguments and wrong types named in words
# among them), and checks progress per model turn with a tiny random model
# under the default policy (scripts/mcp_client_check.py).
#
#   scripts/mcp-check.sh                      # the scripted policy, then combined with a tiny model
#   MODEL=dir [ADAPTER=dir] scripts/mcp-check.sh   # and then that model
#
# MCP_VENV (default ~/.cache/fusegrpo/venv-mcp), FUSEGRPO_BIN (default the
# release build), CONFIG (the model's run, default configs/smollm2-real.toml:
# the episode setting and chat template of the shipped localizer). The
# scripted run needs only a tokenizer: a tiny one is made here.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
venv="${MCP_VENV:-$HOME/.cache/fusegrpo/venv-mcp}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet mcp==2.3.0
fi
config="${CONFIG:-configs/smollm2-real.toml}"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
$bin practice-repo --out "$work/repos" --seed 0 >/dev/null
# Five tasks of the practice repository's history (its newest commits).
$bin --log warn tasks from-history --repo practice/shop --repos-dir "$work/repos" --out "$work/tasks.jsonl" --max 5
$bin --log warn init-tiny --out "$work/tiny" --small-vocab 1024 --corpus-repo practice/shop --repos-dir "$work/repos" --seed 0 >/dev/null
printf '%s\n' 'name = "mcp-check"' '[model]' 'path = "tiny"' '[env]' 'repos_dir = "repos"' \
  '[episode]' 'max_turns = 4' 'max_turn_tokens = 400' 'max_total_tokens = 16000' > "$work/scripted.toml"
run() { "$venv/bin/python" scripts/mcp_client_check.py --bin "$bin" --tasks "$work/tasks.jsonl" --repos-dir "$work/repos" "$@"; }
echo "== scripted policy"
run --config "$work/scripted.toml" --policy scripted --min-f1 0.5
# The tiny random model answers nothing: its run checks the protocol
# (progress per model turn, the search counted apart), not its F1.
echo "== combined: the index search and the tiny model (progress per model turn)"
run --config "$work/scripted.toml" --policy combined
if [ -n "${MODEL:-}" ]; then
  echo "== model $MODEL ${ADAPTER:+with adapter $ADAPTER}"
  run --config "$config" --policy model --model "$MODEL" ${ADAPTER:+--adapter "$ADAPTER"}
fi
