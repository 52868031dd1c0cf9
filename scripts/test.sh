#!/usr/bin/env bash
# The test command (README.md): fetch what tests need, build, test everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-qwen-tokenizer.sh >/dev/null
cargo build --release --bin fusegrpo
cargo test --workspace --release -- --nocapture
