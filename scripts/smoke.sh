#!/usr/bin/env bash
# The main job on its built-in default, on the CPU. Today (before `train`
# lands, issues 5 and 7) it exercises the whole model path end to end:
# a random tiny Qwen3 with a small BPE, a chat prompt rendered with Qwen3's
# template, batched generation with the KV cache, and per-token scoring.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin fusegrpo
bin=target/release/fusegrpo
run=${1:-checkpoints/smoke}
mkdir -p "$run"
$bin init-tiny --out "$run/model" --small-vocab 4096 --seed 0
cat > "$run/conversation.json" <<'JSON'
{"messages": [{"role": "system", "content": "You localize code."},
              {"role": "user", "content": "Where is the retry limit of the HTTP adapter set?"}],
 "tools": [{"type": "function", "function": {"name": "grep", "description": "Search file contents",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}}],
 "add_generation_prompt": true}
JSON
$bin chat render --tokenizer "$run/model" --input "$run/conversation.json" > "$run/prompt.json"
python3 -c 'import json,sys; print(json.dumps({"ids": json.load(open(sys.argv[1]))["ids"]}))' "$run/prompt.json" > "$run/prompts.jsonl"
$bin generate --model "$run/model" --input "$run/prompts.jsonl" --output "$run/generated.jsonl" --max-new-tokens 32 --temperature 0.8 --seed 1
$bin score --model "$run/model" --input "$run/prompts.jsonl" --output "$run/scores.jsonl"
echo "smoke run complete: $run (prompt $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["ids"]))' "$run/prompt.json") tokens, 32 generated)"
