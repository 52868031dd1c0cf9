"""PyTorch counterpart of the Rust attention benchmark: causal GQA
torch.nn.functional.scaled_dot_product_attention, one row (f32 on the CPU by
default; --device cuda --dtype bf16 on a GPU, with --backend to pin sdpa's
FLASH, CUDNN, EFFICIENT or MATH backend); forward, and with --backward also
(out * g).sum().backward(). --warmup untimed runs, then --reps timed runs,
each between synchronized clock reads (CUDA); prints one JSON line
{"seconds": median, "all_seconds": [..], "checksum": .., "peak_rss_mib": ..,
"gpu_peak_allocated_mib": .., ...}. A backend that rejects enable_gqa gets
k and v repeated to the query heads before the clock starts ("gqa":
"repeated").

    /work/venv/bin/python scripts/bench_attention_torch.py --tokens 2048 --backward --threads 2
    python3 scripts/bench_attention_torch.py --device cuda --dtype bf16 --backend flash --tokens 16384 --backward
"""

import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F

BACKENDS = ["default", "flash", "cudnn", "efficient", "math"]

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
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--backend", choices=BACKENDS, default="default",
                   help="pin sdpa's backend (torch.nn.attention.sdpa_kernel); default: PyTorch's choice")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t, d = a.tokens, a.head_dim
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape).to(device=dev, dtype=dtype)
    q = randn(1, a.heads, t, d).requires_grad_(a.backward)
    k = randn(1, a.kv_heads, t, d).requires_grad_(a.backward)
    v = randn(1, a.kv_heads, t, d).requires_grad_(a.backward)
    g = randn(1, a.heads, t, d)
    rss_inputs = vm_rss_mib()
    gqa = has_enable_gqa()

    def pinned():
        """The context that pins the backend (none for "default")."""
        if a.backend == "default":
            import contextlib
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        name = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[a.backend]
        return sdpa_kernel(getattr(SDPBackend, name))

    rep = a.heads // a.kv_heads
    state = {"gqa": "enable_gqa" if gqa else "repeated", "k": k, "v": v}

    def repeat_kv() -> None:
        """k and v repeated to the query heads, as leaves (outside the clock)."""
        state["gqa"] = "repeated"
        state["k"] = k.detach().repeat_interleave(rep, dim=1).requires_grad_(a.backward)
        state["v"] = v.detach().repeat_interleave(rep, dim=1).requires_grad_(a.backward)

    if not gqa:
        repeat_kv()

    def run() -> torch.Tensor:
        with pinned():
            if state["gqa"] == "enable_gqa":
                out = F.scaled_dot_product_attention(q, state["k"], state["v"], is_causal=True, enable_gqa=True)
            else:
                out = F.scaled_dot_product_attention(q, state["k"], state["v"], is_causal=True)
        if a.backward:
            (out * g).sum().backward()
        return out

    try:
        run()
    except RuntimeError:
        if state["gqa"] != "enable_gqa":
            raise
        repeat_kv()  # this backend has no GQA: k and v repeated
        run()
    sync()
    for _ in range(max(a.warmup - 1, 0)):
        run()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.reps):
        for x in (q, state["k"], state["v"]):
            x.grad = None
        sync()
        t0 = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - t0)

    print(json.dumps({
        "seconds": statistics.median(times), "all_seconds": times,
        "checksum": float(out.detach().float().sum()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_inputs_mib": rss_inputs, "enable_gqa": gqa, "gqa": state["gqa"],
        "gpu_peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None,
        "device": a.device, "dtype": a.dtype, "backend": a.backend, "warmup": a.warmup,
        "tokens": t, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": d,
        "backward": a.backward, "reps": a.reps, "seed": a.seed,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
