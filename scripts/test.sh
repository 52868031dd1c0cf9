#!/usr/bin/env bash
# The test command (README.md): fetch what tests need, build, test everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-qwen-tokenizer.sh >/dev/null
cargo build --release --bin fusegrpo
# The first GPU call's script, its whole sequence on the CPU (~20 s): at most
# 8 files, every step reached.
gf=$(mktemp -d)
scripts/gpu-first "$gf/out" --dry-run --budget 240
grep -q '^gpu-first: done' "$gf/out/summary.txt"
[ "$(ls "$gf/out" | wc -l)" -le 8 ]
grep -q '"backend":"cpu"' "$gf/out/attention.txt"
rm -rf "$gf"
cargo test --workspace --release -- --nocapture
