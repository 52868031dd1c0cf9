#!/usr/bin/env bash
# Issue 17's comparisons against PyTorch/transformers, both sides in one run,
# alternated (not a test; BENCHMARKS.md records what it printed):
#   - `bench step` (SmolLM2-135M's shape, 2 x 1,024 tokens), recompute off and
#     per layer, beside scripts/bench_step_torch.py (recompute off);
#   - the same step training a LoRA adapter (r = 16 and 64 on all seven
#     projections, issue 32) beside PyTorch + PEFT (PYTHON needs peft);
#   - greedy decode, scripts/bench_generate.py (both sides), small and
#     qwen-vocab shapes, 16 and 64 rows;
#   - fused token log-probs (N=1,024, d=2,560, V=151,936) beside
#     scripts/bench_logprob_torch.py.
# Each line it prints is one JSON result, after a "== what round time" line.
# Usage: scripts/bench-vs-torch.sh [STEP_ROUNDS] [OTHER_ROUNDS]   (5 and 2 by default)
# Env: FUSEGRPO (binary, default target/release/fusegrpo), PYTHON (with torch
# and transformers). Check that nothing else runs first: PyTorch's OpenMP
# threads collapse when another job shares the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
step_rounds=${1:-5} other_rounds=${2:-2}
BIN=${FUSEGRPO:-target/release/fusegrpo}
PY=${PYTHON:-python3}
"$PY" -c 'import torch, transformers, peft' || { echo "bench-vs-torch: $PY cannot import torch, transformers and peft (set PYTHON)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "bench-vs-torch: no binary at $BIN (cargo build --release, or set FUSEGRPO)" >&2; exit 2; }
say() { echo "== $* $(date -u +%H:%M:%S)"; }
# The sides' progress goes to a log, shown if one of them fails.
errlog=$(mktemp)
trap 'echo "bench-vs-torch: a run failed; the end of its output:" >&2; tail -20 "$errlog" >&2' ERR
trap 'rm -f "$errlog"' EXIT
echo "== $(date -u +%FT%TZ) $(uname -m) nproc=$(nproc) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for r in $(seq "$step_rounds"); do
  say "step off, round $r";       "$BIN" bench step --reps 3 2>>"$errlog" | tail -1
  say "step per-layer, round $r"; "$BIN" bench step --reps 3 --recompute per-layer 2>>"$errlog" | tail -1
  say "torch step off, round $r"; "$PY" scripts/bench_step_torch.py --reps 3 --threads 2 2>>"$errlog" | tail -1
  for lora in 16 64; do
    say "step lora r=$lora, round $r";       "$BIN" bench step --reps 3 --lora-r "$lora" 2>>"$errlog" | tail -1
    say "torch+peft step lora r=$lora, round $r"; "$PY" scripts/bench_step_torch.py --reps 3 --threads 2 --lora-r "$lora" 2>>"$errlog" | tail -1
  done
done
for r in $(seq "$other_rounds"); do
  for shape in small qwen-vocab; do for rows in 16 64; do
    say "decode $shape x $rows, round $r"
    "$PY" scripts/bench_generate.py "$BIN" --shape "$shape" --rows "$rows" --reps 3 2>>"$errlog" | tail -1
  done; done
  say "logprob fused, round $r"; "$BIN" bench logprob --mode fused --reps 3 2>>"$errlog" | tail -1
  say "torch logprob, round $r"; "$PY" scripts/bench_logprob_torch.py --reps 3 --threads 2 2>>"$errlog" | tail -1
done
say end
