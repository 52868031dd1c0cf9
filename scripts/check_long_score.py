#!/usr/bin/env python3
"""`fusegrpo score` at long context (issue 13): peak RSS of one row of
16,384 tokens on a 1-layer model with Qwen3-4B's attention shapes (32 query
heads, 8 key/value heads, head_dim 128) and Qwen3's 151,936 vocabulary, and
its log-probs at 2,048 tokens against transformers' (tolerance 1e-4).
Not run by tests (needs torch + transformers):

    /work/venv/bin/python scripts/check_long_score.py target/release/fusegrpo [--tokens 16384]

Peak RSS comes from /usr/bin/time -v around each `score` process.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

TOL = 1e-4


def score(binary, model, ids, tmp):
    inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps({"ids": ids}) + "\n")
    run = subprocess.run(["/usr/bin/time", "-v", binary, "score", "--model", model, "--input", inp,
                          "--output", out, "--log", "warn"], check=True, capture_output=True, text=True)
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    secs = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", run.stderr).group(1)
    return json.loads(open(out).readline())["logprobs"], peak_kib, secs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--parity-tokens", type=int, default=2048)
    p.add_argument("--tokenizer", default=os.path.expanduser("~/.cache/fusegrpo/qwen3-tokenizer"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        subprocess.run([a.binary, "init-tiny", "--out", model, "--tokenizer", a.tokenizer, "--layers", "1",
                        "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--seed", "3"],
                       check=True, capture_output=True)
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        ids = [(i * 7919 + 13) % vocab for i in range(a.tokens)]
        long_lp, long_kib, long_secs = score(a.binary, model, ids, tmp)
        assert len(long_lp) == a.tokens and all(x is not None for x in long_lp[1:])
        print(json.dumps({"tokens": a.tokens, "vocab": vocab, "peak_rss_mib": round(long_kib / 1024),
                          "wall": long_secs}))
        short = ids[:a.parity_tokens]
        ours, short_kib, _ = score(a.binary, model, short, tmp)

        import torch
        from transformers import Qwen3ForCausalLM
        torch.manual_seed(0)
        m = Qwen3ForCausalLM.from_pretrained(model, torch_dtype=torch.float32, attn_implementation="sdpa").eval()
        with torch.no_grad():
            logits = m(torch.tensor([short])).logits[0].float()
            ref = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(short[1:]).unsqueeze(1)).squeeze(1)
        diff = max(abs(o - r) for o, r in zip(ours[1:], ref.tolist()))
        # The first 2,048 log-probs of the long row are the short row's (causal).
        prefix = max(abs(lo - so) for lo, so in zip(long_lp[1:a.parity_tokens], ours[1:]))
        print(json.dumps({"tokens": a.parity_tokens, "max_abs_diff_vs_transformers": diff,
                          "long_row_prefix_vs_short_row": prefix, "peak_rss_mib": round(short_kib / 1024)}))
        assert diff <= TOL, f"log-probs differ from transformers by {diff:.3e} > {TOL}"


if __name__ == "__main__":
    main()
