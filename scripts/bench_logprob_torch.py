"""PyTorch baseline for `fusegrpo bench logprob`: per-token log-probs of
hidden @ lm_head^T / T (matmul, log_softmax, gather), forward + backward on
the CPU, at the same shapes and thread count: one warm-up run, then --reps timed runs
(median). Prints one JSON line like the Rust command: {"seconds": .., "logprob_sum": .., ...}.

    /usr/bin/time -v python scripts/bench_logprob_torch.py --tokens 1024 --hidden 2560 --vocab 151936 --threads 2
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
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(a.seed)
    # Same distributions as the Rust benchmark (not the same numbers: different RNGs).
    hidden = ((torch.rand(a.tokens, a.hidden, generator=g) * 2 - 1)).requires_grad_()
    lm_head = ((torch.rand(a.vocab, a.hidden, generator=g) * 2 - 1) * 0.05).requires_grad_()
    targets = torch.randint(0, a.vocab, (a.tokens,), generator=g)

    def once() -> tuple[float, float]:
        hidden.grad = lm_head.grad = None
        t0 = time.perf_counter()
        logits = hidden @ lm_head.T / a.temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        total = logp.sum()
        total.backward()
        return time.perf_counter() - t0, total.item()

    first, _ = once()  # warm-up, not counted
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
    }))


if __name__ == "__main__":
    main()
