#!/usr/bin/env bash
# A short load check of `fusegrpo serve` (issue 66): 50 clients at once
# (keep-alive, Connection: close and HTTP/1.0, slow senders, clients that
# hang up), bounded in time; prints requests answered, p50/p99 latency and
# the server's peak RSS (scripts/serve_load.py), exit 1 if any request of a
# client that stayed went unanswered.
#
#   scripts/serve-load.sh                       # a tiny random Qwen3 (init-tiny)
#   MODEL=dir scripts/serve-load.sh             # a real model folder
#
# FUSEGRPO_BIN (default the release build), CLIENTS (50), MAX_TOKENS (32).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
[ -n "${FUSEGRPO_BIN:-}" ] || cargo build --release --bin fusegrpo
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
model="${MODEL:-}"
if [ -z "$model" ]; then
  model="$work/tiny"
  $bin --log warn init-tiny --out "$model" --small-vocab 2048 --seed 3 >/dev/null
fi
$bin --log warn serve --model "$model" --host 127.0.0.1 --port 0 > "$work/addr" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 600); do grep -q listening "$work/addr" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's|^listening on http://||p' "$work/addr")
[ -n "$addr" ] || { cat "$work/serve.log"; echo "serve did not start" >&2; exit 1; }
timeout 300 python3 scripts/serve_load.py --addr "$addr" --pid "$pid" --clients "${CLIENTS:-50}" --max-tokens "${MAX_TOKENS:-32}"
