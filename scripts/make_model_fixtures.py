#!/usr/bin/env python3
"""Golden fixtures for the model (Qwen3, Llama, Qwen2), made with PyTorch + transformers.

Not run by tests: run it by hand when the fixtures must change, from a venv
outside the repository that has torch and transformers:

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers
    /tmp/ref/bin/python scripts/make_model_fixtures.py lm/tests/fixtures [CASE ...]

With CASE names, only those cases are (re)written, so the others stay
byte-identical.

For each tiny checkpoint it writes, under <out>/<name>/:
  config.json, safetensors weights (sharded with an index, or single file),
  expected.json  {"score": [{"ids", "logprobs"}], "greedy": [{"prompt", "new"}],
                  "grad": {"ids", "loss"}},
  grads.safetensors  d(loss)/d(param) for every parameter (HF names), where
                     loss = -mean_t log p(ids[t] | ids[:t]) over one sequence.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ARCHS = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}

CASES = {
    # head_dim * heads (64) != hidden (32); GQA 2:1; tied; sharded.
    "tied_sharded": dict(vocab_size=211, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16,
                         tie_word_embeddings=True, rope_theta=10000.0,
                         rms_norm_eps=1e-6, shards=3),
    # multi-query (4:1), untied head, other theta/eps; single file.
    "untied": dict(vocab_size=173, hidden_size=48, intermediate_size=80,
                   num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=24,
                   tie_word_embeddings=False, rope_theta=1e6,
                   rms_norm_eps=1e-5, shards=1),
    # Llama (SmolLM2's family): tied, no q/k norm, llama3 rope scaling with
    # an original context short enough that the test sequences reach the
    # interpolated and the divided bands.
    "llama_tied_rope3": dict(arch="llama", vocab_size=199, hidden_size=48,
                             intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=6, num_key_value_heads=2,
                             head_dim=8, tie_word_embeddings=True,
                             rope_theta=100000.0, rms_norm_eps=1e-5,
                             rope_scaling=dict(rope_type="llama3", factor=8.0,
                                               low_freq_factor=1.0,
                                               high_freq_factor=4.0,
                                               original_max_position_embeddings=256),
                             attention_bias=False, mlp_bias=False, shards=1),
    # Qwen2: q/k/v biases (o none), untied, head_dim = hidden / heads.
    "qwen2_bias": dict(arch="qwen2", vocab_size=181, hidden_size=40,
                       intermediate_size=72, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2,
                       tie_word_embeddings=False, rope_theta=1e6,
                       rms_norm_eps=1e-6, use_sliding_window=False, shards=1),
}


def make_model(spec, seed):
    spec = dict(spec)
    spec.pop("shards")
    config_class, model_class = ARCHS[spec.pop("arch", "qwen3")]
    if model_class is Qwen3ForCausalLM:
        spec.update(attention_bias=False, use_sliding_window=False)
    cfg = config_class(**spec, max_position_embeddings=4096, bos_token_id=None,
                       eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    return model


def token_logprobs(model, ids):
    logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def main(out_root, only):
    g = torch.Generator().manual_seed(1234)
    for k, (name, spec) in enumerate(CASES.items()):
        if only and name not in only:
            continue
        if only:
            g = torch.Generator().manual_seed(1234 + k)
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        model = make_model(spec, seed=100 + k)
        vocab = spec["vocab_size"]
        total = sum(p.numel() * 4 for p in model.parameters())
        shard = f"{(total // spec['shards']) // 1000 + 2}KB" if spec["shards"] > 1 else "10GB"
        model.save_pretrained(out, max_shard_size=shard, safe_serialization=True)

        def rand_ids(n):
            return torch.randint(0, vocab, (n,), generator=g).tolist()

        score = []
        with torch.no_grad():
            for n in (2, 7, 33, 96):
                ids = rand_ids(n)
                lp = token_logprobs(model, ids).tolist()
                score.append({"ids": ids, "logprobs": [None] + lp})
            greedy = []
            for n in (3, 11, 20):
                prompt = rand_ids(n)
                gen = model.generate(torch.tensor([prompt]), max_new_tokens=16,
                                     do_sample=False, eos_token_id=None,
                                     pad_token_id=0,
                                     attention_mask=torch.ones(1, n, dtype=torch.long))
                greedy.append({"prompt": prompt, "new": gen[0, n:].tolist()})

        ids = rand_ids(29)
        model.zero_grad()
        loss = -token_logprobs(model, ids).mean()
        loss.backward()
        grads = {n: p.grad.detach().contiguous() for n, p in model.named_parameters()}
        if spec["tie_word_embeddings"]:
            grads.pop("lm_head.weight", None)
        save_file(grads, os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})
        expected = {"score": score, "greedy": greedy, "grad": {"ids": ids, "loss": loss.item()}}
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, "->", sorted(os.listdir(out)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lm/tests/fixtures", set(sys.argv[2:]))
