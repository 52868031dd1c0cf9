#!/usr/bin/env python3
"""Golden fixtures for LoRA adapters in PEFT's format, made with PyTorch + PEFT.

Not run by tests: run it by hand when the fixtures must change, from a venv
outside the repository that has torch, transformers, peft and trl. Made with
torch 2.15.0 (PyPI's default build, run on the CPU), transformers 5.24.0,
peft 0.21.2, trl 1.16.0, safetensors 0.8.0, Python 3.11.7:

    python3 -m venv /work/venvs/peft
    /work/venvs/peft/bin/pip install torch==2.15.0 transformers==5.24.0 \
        peft==0.21.2 trl==1.16.0
    /work/venvs/peft/bin/python scripts/make_lora_fixtures.py lm/tests/fixtures [CASE ...]

Run it from the repository root: the base checkpoints are read from
<fixtures>/<base> and adapter_config.json records that path as
base_model_name_or_path. CASE is any of tied_sharded, llama_tied_rope3,
qwen2_bias, grpo; with CASE names only those folders are (re)written. The
script re-runs itself with PYTHONHASHSEED=0, since PEFT writes target_modules
(a set) in hash order.

The base checkpoints are the existing fixtures (not regenerated), loaded with
from_pretrained in float32 with eager attention. Every adapter is
LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none",
task_type="CAUSAL_LM", target_modules=[q_proj, k_proj, v_proj, o_proj,
gate_proj, up_proj, down_proj]) on every layer; after get_peft_model every
lora_A and lora_B is redrawn as 0.1 * N(0, 1) from torch.manual_seed(seed),
in named_parameters() order, so B is non-zero and the adapter changes the
outputs. The adapted projection is
    y = base(x) + scale * (x @ A^T) @ B^T,   A: [r, in], B: [out, r],
with scale = lora_alpha / r = 2.0, except qwen2_bias, which has
use_rslora=True: scale = lora_alpha / sqrt(r) = 16 / sqrt(8) = 5.656854...

Writes under <out>/lora/:
  <case>/ for case (base, seed) in tied_sharded (qwen3, 200),
          llama_tied_rope3 (llama, 201), qwen2_bias (qwen2 + rsLoRA, 202):
    adapter_config.json, adapter_model.safetensors
                     PeftModel.save_pretrained, less the README.md model
                     card it writes (tensor names like
                     base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight).
    expected.json    {"base", "r", "lora_alpha", "use_rslora", "scale",
                      "score": [{"ids", "logprobs"}], "grad": {"ids", "loss"}}:
                     score ids are the base case's expected.json score ids;
                     logprobs[0] = null, logprobs[t] = log p(ids[t] | ids[:t])
                     for t >= 1 with the PEFT model (log-softmax of the f32
                     logits, no temperature). grad ids are the base case's
                     grad ids; loss = -mean_{t>=1} log p(ids[t] | ids[:t]).
    grads.safetensors
                     d(loss)/d(tensor) for every lora_A and lora_B, f32, named
                     as in adapter_model.safetensors.
    merged.safetensors
                     merge_and_unload()'s state_dict (HF names, f32), only the
                     seven projection weights of each layer (the rest equals
                     the base).
  grpo/  one GRPO loss and its gradient with LoRA on the `untied` model
         (../untied, Qwen3), seed 203; the episodes (tokens, mask,
         advantages) are grpo/update.json's, read from that file:
    adapter_config.json, adapter_model.safetensors   the adapter (scale 2.0).
    update.json      {"tokens", "mask", "advantages", "logp", "old_logp",
                      "ref_logp", "temperature", "loss_type", "beta",
                      "eps_low", "eps_high", "max_completion_length",
                      "num_items_in_batch", "scale", "loss", "kl",
                      "clip_ratio/low_mean", "clip_ratio/high_mean",
                      "clip_ratio/region_mean", "trl_version", "peft_version"}.
                     All per-token arrays are [B, T] and aligned with tokens:
                     column t holds log p(tokens[t] | tokens[:t]) from
                     logits / temperature, column 0 = 0 (make_grpo_fixtures'
                     model_logps, rows right-padded with 0, no attention mask).
                     logp: the PEFT policy's; old_logp: logp + U(-0.4, 0.4)
                     noise (torch.Generator seeded 203), fixed inputs;
                     ref_logp: the same model inside PEFT's disable_adapter()
                     (the untied base). loss is TRL's GRPOTrainer._compute_loss
                     on make_grpo_fixtures' stand-in trainer: loss_type "dapo",
                     temperature 0.8, beta 0.05 (k3 KL to ref), eps_low 0.2,
                     eps_high 0.28, token-level ratios exp(logp - old_logp), no
                     importance-sampling correction, num_items_in_batch =
                     mask.sum(), one process, no gradient accumulation, so
                     loss = sum(mask * per_token_loss) / sum(mask).
    grads.safetensors
                     d(loss)/d(tensor) for every lora_A and lora_B, f32, named
                     as in adapter_model.safetensors.

Sanity checks printed (and asserted): the PEFT log-probs differ from the
base's by a clear margin, and merge_and_unload()'s log-probs equal the PEFT
model's within 1e-5.
"""
import copy
import json
import math
import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import peft
import torch
import trl
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from trl.trainer.grpo_trainer import GRPOTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_grpo_fixtures import model_logps, stand_in, tolist  # noqa: E402
from make_model_fixtures import token_logprobs  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA, STD = 8, 16, 0.1

# base fixture folder -> (seed, use_rslora)
CASES = {
    "tied_sharded": (200, False),
    "llama_tied_rope3": (201, False),
    "qwen2_bias": (202, True),
}
GRPO_SEED = 203


def load_base(path):
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager").float().eval()


def make_peft(base, seed, use_rslora):
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, bias="none",
                     task_type="CAUSAL_LM", target_modules=TARGETS,
                     use_rslora=use_rslora)
    model = get_peft_model(base, cfg)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(STD * torch.randn_like(p))
    scale = ALPHA / math.sqrt(R) if use_rslora else ALPHA / R
    for name, m in model.named_modules():
        if hasattr(m, "scaling") and isinstance(m.scaling, dict) and "default" in m.scaling:
            assert abs(m.scaling["default"] - scale) < 1e-12, (name, m.scaling)
    return model, scale


def save_adapter(model, out):
    """save_pretrained, then check that the saved names are the parameters'
    names less the adapter name; returns {saved name: parameter}."""
    model.save_pretrained(out, safe_serialization=True)
    os.remove(os.path.join(out, "README.md"))  # PEFT's empty model card
    saved = load_file(os.path.join(out, "adapter_model.safetensors"))
    params = {n.replace(".default.", "."): p for n, p in model.named_parameters()
              if ".lora_A." in n or ".lora_B." in n}
    assert set(saved) == set(params), (sorted(saved)[:3], sorted(params)[:3])
    for n, t in saved.items():
        assert t.dtype == torch.float32 and torch.equal(t, params[n].detach()), n
    return params


def lora_grads(params):
    return {n: p.grad.detach().float().contiguous() for n, p in sorted(params.items())}


def adapter_case(fixtures, case, seed, use_rslora):
    base_dir = os.path.join(fixtures, case)
    out = os.path.join(fixtures, "lora", case)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(base_dir, "expected.json")) as f:
        base_expected = json.load(f)

    model, scale = make_peft(load_base(base_dir), seed, use_rslora)
    params = save_adapter(model, out)

    score, max_diff_base, max_diff_merged = [], 0.0, 0.0
    merged = copy.deepcopy(model).merge_and_unload().eval()
    with torch.no_grad():
        for s in base_expected["score"]:
            ids = s["ids"]
            lp = token_logprobs(model, ids)
            lp_merged = token_logprobs(merged, ids)
            base_lp = torch.tensor(s["logprobs"][1:])
            max_diff_base = max(max_diff_base, (lp - base_lp).abs().max().item())
            max_diff_merged = max(max_diff_merged, (lp - lp_merged).abs().max().item())
            score.append({"ids": ids, "logprobs": [None] + lp.tolist()})
        # the adapter off gives the base fixture back
        with model.disable_adapter():
            off = token_logprobs(model, base_expected["score"][-1]["ids"])
        off_diff = (off - torch.tensor(base_expected["score"][-1]["logprobs"][1:])).abs().max().item()

    ids = base_expected["grad"]["ids"]
    model.zero_grad()
    loss = -token_logprobs(model, ids).mean()
    loss.backward()
    save_file(lora_grads(params), os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})

    base_sd = load_base(base_dir).state_dict()
    changed = {}
    for n, t in merged.state_dict().items():
        if not torch.equal(t, base_sd[n]):
            changed[n] = t.detach().float().contiguous()
    want = {n for n in base_sd if n.endswith(".weight") and n.split(".")[-2] in TARGETS}
    assert set(changed) == want, sorted(set(changed) ^ want)
    save_file(changed, os.path.join(out, "merged.safetensors"), metadata={"format": "pt"})

    expected = {"base": case, "r": R, "lora_alpha": ALPHA, "use_rslora": use_rslora,
                "scale": scale, "score": score, "grad": {"ids": ids, "loss": loss.item()}}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(f"{case}: scale {scale:.6f}; max |logp_peft - logp_base| {max_diff_base:.4f}; "
          f"max |logp_merged - logp_peft| {max_diff_merged:.2e}; adapter off vs base "
          f"{off_diff:.2e}; loss {loss.item():.6f} (base {base_expected['grad']['loss']:.6f})")
    assert max_diff_base > 0.1, "adapter too weak"
    assert max_diff_merged < 1e-5, "merged model differs"
    assert off_diff < 1e-5, "disabled adapter differs from the base"
    print(case, "->", sorted(os.listdir(out)))


def grpo_case(fixtures):
    out = os.path.join(fixtures, "lora", "grpo")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(fixtures, "grpo", "update.json")) as f:
        upd = json.load(f)
    tokens = torch.tensor(upd["tokens"], dtype=torch.long)
    mask = torch.tensor(upd["mask"], dtype=torch.float32)
    advantages = torch.tensor(upd["advantages"], dtype=torch.float32)
    b, t = tokens.shape
    temperature, beta, eps_low, eps_high = 0.8, 0.05, 0.2, 0.28
    assert (temperature, beta, eps_low, eps_high, t) == (
        upd["temperature"], upd["beta"], upd["eps_low"], upd["eps_high"], upd["max_completion_length"])

    model, scale = make_peft(load_base(os.path.join(fixtures, "untied")), GRPO_SEED, False)
    model.train()  # dropout is 0: train and eval give the same numbers
    params = save_adapter(model, out)

    g = torch.Generator().manual_seed(GRPO_SEED)
    with torch.no_grad():
        old = model_logps(model, tokens, temperature) + torch.empty(b, t).uniform_(-0.4, 0.4, generator=g)
        with model.disable_adapter():
            ref_lp = model_logps(model, tokens, temperature)
    model.zero_grad()
    logp = model_logps(model, tokens, temperature)
    s = stand_in("dapo", beta, logp, torch.zeros(b, t), t, eps_low, eps_high)
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1),
        "completion_ids": tokens, "completion_mask": mask, "advantages": advantages,
        "num_items_in_batch": mask.sum(), "old_per_token_logps": old, "ref_per_token_logps": ref_lp,
    }
    loss = GRPOTrainer._compute_loss(s, None, inputs)
    loss.backward()
    save_file(lora_grads(params), os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})

    m = s._metrics["train"]
    adapter_shift = ((logp.detach() - ref_lp).abs() * mask).max().item()
    meta = {
        "tokens": tokens.tolist(), "mask": tolist(mask), "advantages": tolist(advantages),
        "logp": tolist(logp), "old_logp": tolist(old), "ref_logp": tolist(ref_lp),
        "temperature": temperature, "loss_type": "dapo", "beta": beta,
        "eps_low": eps_low, "eps_high": eps_high, "max_completion_length": t,
        "num_items_in_batch": mask.sum().item(), "scale": scale,
        "loss": loss.item(), "kl": m["kl"][0],
        "clip_ratio/low_mean": m["clip_ratio/low_mean"][0],
        "clip_ratio/high_mean": m["clip_ratio/high_mean"][0],
        "clip_ratio/region_mean": m["clip_ratio/region_mean"][0],
        "trl_version": trl.__version__, "peft_version": peft.__version__,
    }
    with open(os.path.join(out, "update.json"), "w") as f:
        json.dump(meta, f)
    print(f"grpo: loss {loss.item():.6f}; kl {m['kl'][0]:.6f}; max masked |logp - ref_logp| "
          f"{adapter_shift:.4f}; clip low/high {m['clip_ratio/low_mean'][0]:.3f}/"
          f"{m['clip_ratio/high_mean'][0]:.3f}")
    assert adapter_shift > 0.1, "adapter too weak"
    print("grpo ->", sorted(os.listdir(out)))


def main(fixtures, only):
    torch.set_num_threads(1)
    for case, (seed, use_rslora) in CASES.items():
        if not only or case in only:
            adapter_case(fixtures, case, seed, use_rslora)
    if not only or "grpo" in only:
        grpo_case(fixtures)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lm/tests/fixtures", set(sys.argv[2:]))
