#!/usr/bin/env python3
"""Generation throughput: `fusegrpo generate` vs transformers' `generate`,
same tiny checkpoint, same batch, same machine, back to back (not a test).

    /tmp/ref/bin/python scripts/bench_generate.py target/release/fusegrpo [--rows 16 --new 256 --reps 2]

Makes a tiny Qwen3 with `fusegrpo init-tiny` (small BPE vocabulary), then
times greedy generation of --new tokens for --rows prompts of 32 tokens
with each implementation, --reps times alternating, and prints tokens/s and
the ratio. Both sides include the prefill and exclude model loading.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

import torch
from transformers import Qwen3ForCausalLM


def ours(binary, model, prompts_path, out_path, new):
    t0 = time.perf_counter()
    res = subprocess.run([binary, "generate", "--model", model, "--input", prompts_path,
                          "--output", out_path, "--max-new-tokens", str(new), "--log", "info"],
                         check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    # The binary logs its own generation time (excluding loading).
    for line in re.sub(r"\x1b\[[0-9;]*m", "", res.stderr).splitlines():
        if "generated" in line and "secs=" in line:
            secs = float(line.split("secs=")[1].split()[0])
            return secs, wall
    raise RuntimeError(res.stderr)


def theirs(model_dir, prompts, new):
    model = Qwen3ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor(prompts)
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                             min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
        secs = time.perf_counter() - t0
    assert out.shape[1] == ids.shape[1] + new
    return secs, out[:, ids.shape[1]:].tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        subprocess.run([a.binary, "init-tiny", "--out", model, "--small-vocab", "4096", "--seed", "1",
                        "--hidden-size", "256", "--intermediate-size", "768", "--layers", "4",
                        "--heads", "8", "--kv-heads", "4", "--head-dim", "32"], check=True, capture_output=True)
        prompts = [[(r * 131 + j * 17) % 4000 + 10 for j in range(a.prompt_len)] for r in range(a.rows)]
        pin = os.path.join(tmp, "p.jsonl")
        with open(pin, "w") as f:
            for p in prompts:
                f.write(json.dumps({"ids": p}) + "\n")
        pout = os.path.join(tmp, "o.jsonl")
        tokens = a.rows * a.new
        rows = []
        for rep in range(a.reps):
            our_s, _ = ours(a.binary, model, pin, pout, a.new)
            their_s, their_ids = theirs(model, prompts, a.new)
            our_ids = [json.loads(l)["ids"] for l in open(pout)]
            same = sum(x == y for x, y in zip(our_ids, their_ids))
            rows.append((our_s, their_s))
            print(f"rep {rep}: fusegrpo {tokens / our_s:8.1f} tok/s ({our_s:.2f}s)  transformers "
                  f"{tokens / their_s:8.1f} tok/s ({their_s:.2f}s)  ratio {their_s / our_s:.2f}x  "
                  f"identical greedy rows {same}/{a.rows}")
        best_ours = min(r[0] for r in rows)
        best_theirs = min(r[1] for r in rows)
        print(json.dumps({"rows": a.rows, "new_tokens": a.new, "threads": os.cpu_count(),
                          "fusegrpo_tok_s": tokens / best_ours, "transformers_tok_s": tokens / best_theirs,
                          "speedup": best_theirs / best_ours, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
