#!/usr/bin/env bash
# Lints and docs, as CI runs them: clippy on every crate and target with
# warnings as errors (the lints allowed, each with its reason, are in the
# root Cargo.toml, [workspace.lints]), then the API docs with broken
# intra-doc links as errors (also [workspace.lints.rustdoc]).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo doc --workspace --no-deps --document-private-items (a broken intra-doc link fails)"
cargo doc --workspace --no-deps --document-private-items
echo "lint: clippy and docs clean"
