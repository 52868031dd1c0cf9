"""PyTorch baseline for `fusegrpo bench logprob`: per-token log-probs of
hidden @ lm_head^T / T (matmul, log_softmax, gather), forward + backward, at
the same shapes and thread count (f32 on the CPU by default; --device cuda
--dtype bf16 on a GPU: a bf16 GEMM, then log_softmax in f32 as trainers
upcast): one warm-up run, then --reps timed runs (median), each between
synchronized clock reads on CUDA. Prints one JSON line like the Rust
command: {"seconds": .., "logprob_sum": .., "gpu_peak_allocated_mib": .., ...}
(the GPU's peak over the timed runs, inputs included).

    /usr/bin/time -v python scripts/bench_logprob_torch.py --tokens 1024 --hidden 2560 --vocab 151936 --threads 2
    python3 scripts/bench_logprob_torch.py --device cuda --dtype bf16 --tokens 16384
"""

import argparse
import json
import resource
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=2560)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=3, help="timed runs after one warm-up run")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    g = torch.Generator().manual_seed(a.seed)
    # Same distributions as the Rust benchmark (not the same numbers: different RNGs).
    hidden = ((torch.rand(a.tokens, a.hidden, generator=g) * 2 - 1)).to(device=dev, dtype=dtype).requires_grad_()
    lm_head = ((torch.rand(a.vocab, a.hidden, generator=g) * 2 - 1) * 0.05).to(device=dev, dtype=dtype).requires_grad_()
    targets = torch.randint(0, a.vocab, (a.tokens,), generator=g).to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def once() -> tuple[float, float]:
        hidden.grad = lm_head.grad = None
        sync()
        t0 = time.perf_counter()
        logits = (hidden @ lm_head.T).float() / a.temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        total = logp.sum()
        total.backward()
        sync()
        return time.perf_counter() - t0, total.item()

    first, _ = once()  # warm-up, not counted
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    runs = [once() for _ in range(a.reps)]
    times = [r[0] for r in runs]
    seconds, logprob_sum = statistics.median(times), runs[-1][1]

    print(json.dumps({
        "seconds": seconds,
        "all_seconds": times,
        "first_seconds": first,
        "logprob_sum": logprob_sum,
        "mode": "torch",
        "tokens": a.tokens,
        "hidden": a.hidden,
        "vocab": a.vocab,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "gpu_peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None,
        "device": a.device, "dtype": a.dtype,
    }))


if __name__ == "__main__":
    main()
