"""PyTorch counterpart of the Rust training-step benchmark: one micro-batch of a
random transformers Qwen3ForCausalLM (f32 on the CPU by default; --device cuda
--dtype bf16 on a GPU, timed with synchronisation, the GPU's peak from
torch.cuda.max_memory_allocated), forward + backward of the mean next-token
NLL. One warm-up step, then --reps timed steps; prints one JSON line
{"seconds": median, "all_seconds": [..], "loss": .., "peak_rss_mib": .., ...}.

    /work/venv/bin/python scripts/bench_step_torch.py --layers 30 --tokens 1024 --rows 2 --threads 2
    /work/venv/bin/python scripts/bench_step_torch.py --layers 2 --tokens 128 --vocab 4096 --reps 2 --recompute per-layer
    python3 scripts/bench_step_torch.py --device cuda --dtype bf16 --hidden 2560 --intermediate 9728 --layers 4 \
        --heads 32 --kv-heads 8 --head-dim 128 --vocab 151936 --rows 1 --tokens 16384 --recompute per-layer --reps 1
"""

import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--recompute", choices=["off", "per-layer"], default="off")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--lora-r", type=int, default=0,
                   help="train a PEFT LoRA adapter of this rank (alpha 2r, all seven projections, B drawn non-zero) instead of every weight")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    cfg = Qwen3Config(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, head_dim=a.head_dim, tie_word_embeddings=True,
        max_position_embeddings=max(a.tokens, 128), rope_theta=1e6, rms_norm_eps=1e-6,
        attention_dropout=0.0, use_cache=False, attn_implementation=a.attn,
    )
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    dev = torch.device(a.device)
    model = Qwen3ForCausalLM(cfg).to(dtype=dtype, device=dev)
    model.train()  # dropout is 0, so train mode only matters for checkpointing
    if a.lora_r:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=a.lora_r, lora_alpha=2 * a.lora_r, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        with torch.no_grad():
            for name, p_ in model.named_parameters():
                if "lora_B" in name:
                    p_.normal_(0.0, 0.01)
    if a.recompute == "per-layer":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # Same ids as the Rust benchmark: row-major, id_i = (i*7919 + 13) % vocab.
    n = a.rows * a.tokens
    ids = ((torch.arange(n, dtype=torch.int64) * 7919 + 13) % a.vocab).view(a.rows, a.tokens).to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step() -> float:
        logits = model(input_ids=ids).logits  # [rows, tokens, vocab]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, a.vocab).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        return loss.item()

    step()  # warm-up, not counted
    rss_first = peak_rss_mib()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()  # the peak of the timed steps
    times, loss = [], float("nan")
    for _ in range(a.reps):
        model.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)

    peak_steps = peak_rss_mib()
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None
    # One AdamW step after the timed ones: the optimizer's state and the peak with it.
    trained = [p_ for p_ in model.parameters() if p_.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-5)
    model.zero_grad(set_to_none=True)
    step()
    opt.step()
    opt_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    print(json.dumps({
        "seconds": statistics.median(times), "all_seconds": times, "loss": loss,
        "peak_rss_mib": peak_steps, "peak_rss_mib_first_step": rss_first, "gpu_peak_allocated_mib": gpu_peak,
        "device": a.device, "dtype": a.dtype,
        "peak_rss_mib_with_optimizer": peak_rss_mib(), "optimizer_state_mib": opt_bytes / 2**20,
        "trained_parameters": sum(p_.numel() for p_ in trained), "lora_r": a.lora_r or None,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hidden": a.hidden, "intermediate": a.intermediate, "layers": a.layers,
        "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
        "vocab": a.vocab, "rows": a.rows, "tokens": a.tokens, "reps": a.reps,
        "recompute": a.recompute, "attn": a.attn, "seed": a.seed,
    }))


if __name__ == "__main__":
    main()
