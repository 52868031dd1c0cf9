#!/usr/bin/env python3
"""Greedy decoding throughput: `fusegrpo bench decode` vs transformers'
`generate`, same checkpoint, same prompts, same machine, one after the other
(not a test).

    /work/venv/bin/python scripts/bench_generate.py target/release/fusegrpo --shape small [--rows 16 --new 256 --reps 3]
    /work/venv/bin/python scripts/bench_generate.py target/release/fusegrpo --shape qwen-vocab --rows 64

Shapes (random weights from `fusegrpo init-tiny`):
  small       vocab 4,096 (small BPE), hidden 256, 4 layers, 8/4 heads of 32
  qwen-vocab  Qwen3's tokenizer (vocab 151,936), hidden 64, 3 layers, 4/2 heads of 32
Both sides: one warm-up run, then --reps timed runs, the median reported;
prefill of --prompt-len tokens included, model loading excluded; every row
generates --new tokens (no stop token). Prints one line per side and a JSON
summary with the speed-up and how many rows have identical tokens.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch
from transformers import Qwen3ForCausalLM

SHAPES = {
    "small": ["--small-vocab", "4096", "--hidden-size", "256", "--intermediate-size", "768",
              "--layers", "4", "--heads", "8", "--kv-heads", "4", "--head-dim", "32"],
    "qwen-vocab": ["--tokenizer", os.path.expanduser("~/.cache/fusegrpo/qwen3-tokenizer"),
                   "--hidden-size", "64", "--intermediate-size", "128", "--layers", "3",
                   "--heads", "4", "--kv-heads", "2", "--head-dim", "32"],
}


def prompts(rows, length, vocab):
    """The prompts of `fusegrpo bench decode`."""
    span = max(vocab - 10, 1)
    return [[min((r * 131 + j * 17) % span + 10, vocab - 1) for j in range(length)] for r in range(rows)]


def ours(binary, model, a, out_path):
    res = subprocess.run([binary, "bench", "decode", "--model", model, "--rows", str(a.rows),
                          "--new", str(a.new), "--prompt-len", str(a.prompt_len), "--reps", str(a.reps),
                          "--output", out_path], check=True, capture_output=True, text=True)
    report = json.loads(res.stdout.strip().splitlines()[-1])
    ids = [json.loads(line)["ids"] for line in open(out_path)]
    return report["seconds"], report["all_seconds"], ids


def theirs(model_dir, a):
    model = Qwen3ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor(prompts(a.rows, a.prompt_len, model.config.vocab_size))

    def once():
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new,
                                 min_new_tokens=a.new, do_sample=False, eos_token_id=None, pad_token_id=0)
            secs = time.perf_counter() - t0
        assert out.shape[1] == ids.shape[1] + a.new
        return secs, out[:, ids.shape[1]:].tolist()

    once()  # warm-up
    runs = [once() for _ in range(a.reps)]
    times = [r[0] for r in runs]
    return statistics.median(times), times, runs[-1][1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        subprocess.run([a.binary, "init-tiny", "--out", model, "--seed", "1"] + SHAPES[a.shape],
                       check=True, capture_output=True)
        tokens = a.rows * a.new
        our_s, our_all, our_ids = ours(a.binary, model, a, os.path.join(tmp, "o.jsonl"))
        their_s, their_all, their_ids = theirs(model, a)
        same = sum(x == y for x, y in zip(our_ids, their_ids))
        print(f"fusegrpo     {tokens / our_s:9.1f} tok/s (median {our_s:.2f}s of {[round(x, 2) for x in our_all]})")
        print(f"transformers {tokens / their_s:9.1f} tok/s (median {their_s:.2f}s of {[round(x, 2) for x in their_all]})")
        print(json.dumps({"shape": a.shape, "rows": a.rows, "new_tokens": a.new, "threads": os.cpu_count(),
                          "fusegrpo_tok_s": tokens / our_s, "transformers_tok_s": tokens / their_s,
                          "speedup": their_s / our_s, "identical_rows": same, "of_rows": a.rows,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
