"""PyTorch counterpart of the Rust attention benchmark: causal GQA
torch.nn.functional.scaled_dot_product_attention, f32 CPU, one row; forward,
and with --backward also (out * g).sum().backward(). One warm-up, then --reps
timed runs; prints one JSON line {"seconds": median, "all_seconds": [..],
"checksum": .., "peak_rss_mib": .., "rss_inputs_mib": .., ...}.

    /work/venv/bin/python scripts/bench_attention_torch.py --tokens 2048 --backward --threads 2
"""

import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F

def has_enable_gqa() -> bool:
    """enable_gqa exists since torch 2.5; probe it rather than parse versions."""
    x = torch.zeros(1, 2, 1, 4)
    try:
        F.scaled_dot_product_attention(x, x[:, :1], x[:, :1], enable_gqa=True)
        return True
    except TypeError:
        return False


def vm_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--backward", action="store_true")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    t, d = a.tokens, a.head_dim
    q = torch.randn(1, a.heads, t, d).requires_grad_(a.backward)
    k = torch.randn(1, a.kv_heads, t, d).requires_grad_(a.backward)
    v = torch.randn(1, a.kv_heads, t, d).requires_grad_(a.backward)
    g = torch.randn(1, a.heads, t, d)
    rss_inputs = vm_rss_mib()
    gqa = has_enable_gqa()

    def run() -> torch.Tensor:
        if gqa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = a.heads // a.kv_heads
            out = F.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), is_causal=True)
        if a.backward:
            (out * g).sum().backward()
        return out

    run()  # warm-up, not counted
    times = []
    for _ in range(a.reps):
        for x in (q, k, v):
            x.grad = None
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)

    print(json.dumps({
        "seconds": statistics.median(times), "all_seconds": times,
        "checksum": float(out.detach().sum()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_inputs_mib": rss_inputs, "enable_gqa": gqa,
        "tokens": t, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": d,
        "backward": a.backward, "reps": a.reps, "seed": a.seed,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
