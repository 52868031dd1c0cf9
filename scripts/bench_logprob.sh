#!/usr/bin/env bash
# Fused vs unfused token log-probs (forward + backward) and the PyTorch
# baseline, side by side in one run, each in its own process under
# /usr/bin/time -v (wall time and max RSS). Usage:
#   scripts/bench_logprob.sh [TOKENS] [HIDDEN] [VOCAB] [THREADS]
# Env: FUSEGRPO (binary, default target/release/fusegrpo), PYTHON (with torch;
# the PyTorch row is skipped when it cannot import torch).
set -euo pipefail
N=${1:-1024} D=${2:-2560} V=${3:-151936} T=${4:-$(nproc)}
BIN=${FUSEGRPO:-target/release/fusegrpo}
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # name, command...
  local name=$1; shift
  /usr/bin/time -v "$@" >"$tmp/$name.json" 2>"$tmp/$name.time"
  local rss wall
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$tmp/$name.time")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/$name.time")
  printf '%-8s max_rss_mib=%-6s process_wall=%-8s %s\n' "$name" "$rss" "$wall" "$(cat "$tmp/$name.json")"
}
echo "N=$N d=$D V=$V threads=$T $(date -u +%FT%TZ) $(uname -m) nproc=$(nproc)"
run fused "$BIN" bench logprob --tokens "$N" --hidden "$D" --vocab "$V" --threads "$T" --mode fused
run unfused "$BIN" bench logprob --tokens "$N" --hidden "$D" --vocab "$V" --threads "$T" --mode unfused
if "$PY" -c 'import torch' 2>/dev/null; then
  run torch "$PY" scripts/bench_logprob_torch.py --tokens "$N" --hidden "$D" --vocab "$V" --threads "$T"
fi
