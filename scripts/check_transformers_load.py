#!/usr/bin/env python3
"""Check that checkpoints written by fusegrpo load in transformers and give
the same per-token log-probs as `fusegrpo score` (not run by tests).

    /tmp/ref/bin/python scripts/check_transformers_load.py target/release/fusegrpo

Writes tiny checkpoints with `fusegrpo init-tiny` (Qwen3 tied + 3 shards,
Qwen3 untied + single file, Llama tied with llama3 rope scaling, Qwen2 with
q/k/v biases), loads each with AutoModelForCausalLM.from_pretrained (which
must pick the class config.json names), scores the same ids both ways and
prints the max |difference| (tolerance 1e-4).
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM

TOL = 1e-4


def main(binary):
    worst_all = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("qwen3-tied3", ["--shards", "3"], "Qwen3ForCausalLM"),
            ("qwen3-untied", ["--untied"], "Qwen3ForCausalLM"),
            ("llama-rope3", ["--architecture", "llama", "--llama3-rope"], "LlamaForCausalLM"),
            ("qwen2-untied", ["--architecture", "qwen2", "--untied"], "Qwen2ForCausalLM"),
        ]
        for name, extra, cls in cases:
            out = os.path.join(tmp, name)
            subprocess.run([binary, "init-tiny", "--out", out, "--small-vocab", "1024",
                            "--seed", "5", *extra], check=True, capture_output=True)
            # 300 positions: past the llama3 case's original context (256).
            ids = [(i * 37 + 11) % 1024 for i in range(300)]
            inp, res = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
            with open(inp, "w") as f:
                f.write(json.dumps({"ids": ids}) + "\n")
            subprocess.run([binary, "score", "--model", out, "--input", inp, "--output", res],
                           check=True, capture_output=True)
            ours = json.loads(open(res).readline())["logprobs"][1:]
            model, info = AutoModelForCausalLM.from_pretrained(
                out, torch_dtype=torch.float32, attn_implementation="eager",
                output_loading_info=True)
            model.eval()
            if type(model).__name__ != cls:
                print(f"{name}: transformers built {type(model).__name__}, expected {cls}")
                return 1
            bad = {k: v for k, v in info.items() if v and k != "error_msgs" or (k == "error_msgs" and v)}
            if bad:
                print(f"{name}: transformers loading issues: {bad}")
                return 1
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
            ref = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
            worst = max(abs(a - b) for a, b in zip(ours, ref))
            worst_all = max(worst_all, worst)
            files = sorted(f for f in os.listdir(out) if "safetensors" in f)
            print(f"{name}: {cls} loaded {files}; max |logprob diff| = {worst:.3e}")
    print("OK" if worst_all <= TOL else "FAIL", f"(tolerance {TOL})")
    return 0 if worst_all <= TOL else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "target/release/fusegrpo"))
