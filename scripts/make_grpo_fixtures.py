#!/usr/bin/env python3
"""Golden fixtures for GRPO's maths and the optimizer, from TRL and PyTorch.

Not run by tests: run it by hand when the fixtures must change, from a venv
outside the repository that has torch, transformers and trl (1.16.0 was used):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers trl
    /tmp/ref/bin/python scripts/make_grpo_fixtures.py trainer/tests/fixtures/grpo

Writes under <out>/:
  advantages.json   reward groups (ties, all-equal groups) and TRL's advantages
                    for scale_rewards group / batch / none, frac_reward_zero_std.
  loss.json         inputs (logp, old and ref log-probs, advantages, mask) and,
                    per loss_type x beta (and mu == 1), the loss, d(loss)/d(logp)
                    and TRL's metrics, all from TRL's own
                    GRPOTrainer._compute_loss called on a stand-in trainer whose
                    log-prob function returns the given logp.
  tis.json          truncated importance sampling against the rollout's log-probs
                    (vllm_importance_sampling_mode = "token_truncate", cap 2.0):
                    the ratio as TRL computes it from old and sampling log-probs,
                    then TRL's _compute_loss with the correction on (loss,
                    d(loss)/d(logp)) and TRL's sampling/* metrics.
                    `--only tis` writes just this file.
  clip-edges.json   on-policy (mu == 1: the ratio is exactly 1) with an
                    epsilon of 0 on one side or both, where the ratio sits on
                    the clip range's end: torch.clamp passes the gradient at
                    its ends and torch.min halves it on ties, so the gradient
                    is A per token as elsewhere. Per loss_type x beta x
                    (eps_low, eps_high): the loss and d(loss)/d(logp).
                    `--only clip-edges` writes just this file.
  gspo.json         GSPO (importance_sampling_level = "sequence"): the episodes
                    of loss.json and tis.json again (same seeds, same tensors),
                    plus stored old log-probs shifted per sequence so that
                    sequence ratios clip on both sides; per loss_type x beta x
                    old (stored, shifted, current) the loss, d(loss)/d(logp)
                    and the clip metrics, and with TIS (token_truncate) per
                    loss_type x beta. `--only gspo` writes just this file.
  optim.safetensors / optim.json
                    torch.optim.AdamW (weight decay) over 3 steps with
                    clip_grad_norm_ before each: parameters, gradients, norms,
                    moments; and transformers' LR schedule values.
  update.json / update.safetensors
                    one full GRPO update of the tiny `untied` model fixture
                    (../untied): per-token log-probs at a temperature from the
                    transformers model, TRL's _compute_loss (dapo, beta > 0,
                    stored old log-probs), backward, clip_grad_norm_, AdamW;
                    the reference model is the fixture scaled by 1.03.
"""
import json
import math
import os
import sys
from collections import defaultdict
from types import SimpleNamespace

import torch
import trl
from safetensors.torch import save_file
from transformers.optimization import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
)
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.utils import nanstd


def tolist(t):
    return t.detach().double().tolist()


# ---------------------------------------------------------------- advantages
def trl_advantages(rewards, num_generations, scale_rewards):
    """TRL 1.16.0 _generate_and_score_completions, sum_then_normalize, one
    reward function of weight 1 (copied line for line)."""
    rewards = torch.tensor(rewards, dtype=torch.float32)
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))
    return {
        "advantages": tolist(advantages),
        "frac_reward_zero_std": is_std_zero.float().mean().item(),
        "reward": torch.nanmean(rewards).item(),
        "reward_std": nanstd(rewards).item(),
    }


def advantages_cases():
    cases = []
    groups = [
        ([1.0, 0.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.9, 0.1, 0.9, 0.3], 4),  # ties, an all-equal group
        ([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.2, 0.7, 0.7], 3),  # two all-equal groups
        ([0.3, 0.8, 0.8, 0.3, 0.55, 0.05, 1.0, 0.6], 2),
    ]
    for rewards, g in groups:
        case = {"rewards": rewards, "group_size": g}
        for scale in ["group", "batch", "none"]:
            case[scale] = trl_advantages(rewards, g, scale)
        cases.append(case)
    return cases


# ---------------------------------------------------------------- loss
class Accel:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def stand_in(loss_type, beta, logp, entropies, max_completion_length, eps_low, eps_high, level="token"):
    s = SimpleNamespace()
    s._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies, None)
    s.top_entropy_quantile = 1.0
    s.off_policy_mask_threshold = None
    s.importance_sampling_level = level
    s.beta = beta
    s.loss_type = loss_type
    s.epsilon_low = eps_low
    s.epsilon_high = eps_high
    s.args = SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1)
    s.use_vllm = False
    s.vllm_importance_sampling_correction = False
    s.model = SimpleNamespace(training=True)
    s.current_gradient_accumulation_steps = 1
    s.max_completion_length = max_completion_length
    s.accelerator = Accel()
    s._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    s._entropy_bonus_enabled = False
    s.aux_loss_enabled = False
    return s


def trl_inputs(mask, advantages, old=None, ref=None, **extra):
    """The batch TRL's _compute_loss reads, for `mask`'s [b, t] completions."""
    b, t = mask.shape
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1),
        "completion_ids": torch.zeros(b, t, dtype=torch.long), "completion_mask": mask,
        "advantages": advantages, "num_items_in_batch": mask.sum(),
    }
    if old is not None:
        inputs["old_per_token_logps"] = old
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    inputs.update(extra)
    return inputs


def loss_inputs():
    """loss.json's episodes: (mask, logp, old, ref, advantages, entropies)."""
    torch.manual_seed(0)
    b, t = 4, 9
    lengths = [8, 5, 3, 7]  # policy tokens start at column 1
    mask = torch.zeros(b, t)
    for i, n in enumerate(lengths):
        mask[i, 1 : 1 + n] = 1.0
    mask[3, 4] = 0.0  # a tool-response token inside an episode
    logp = -torch.rand(b, t) * 3.0
    logp[:, 0] = 0.0
    # ratios spread over [0.5, 1.6]: clipping active on both sides
    old = logp - torch.empty(b, t).uniform_(-0.7, 0.5)
    ref = logp + 0.3 * torch.randn(b, t)
    advantages = torch.tensor([1.2, -0.8, 0.5, -1.5])
    entropies = torch.rand(b, t)
    return mask, logp, old, ref, advantages, entropies


def loss_cases():
    mask, logp, old, ref, advantages, entropies = loss_inputs()
    max_completion_length = 10
    eps_low, eps_high = 0.2, 0.28
    out = {
        "trl_version": trl.__version__,
        "logp": tolist(logp), "old_logp": tolist(old), "ref_logp": tolist(ref),
        "advantages": tolist(advantages), "mask": tolist(mask),
        "max_completion_length": max_completion_length, "eps_low": eps_low, "eps_high": eps_high,
        "cases": [],
    }
    for loss_type in ["grpo", "bnpo", "dr_grpo", "dapo"]:
        for beta, mu1 in [(0.0, False), (0.04, False), (0.04, True)]:
            leaf = logp.clone().requires_grad_(True)
            s = stand_in(loss_type, beta, leaf, entropies, max_completion_length, eps_low, eps_high)
            inputs = trl_inputs(mask, advantages, old=None if mu1 else old, ref=ref if beta != 0.0 else None)
            loss = GRPOTrainer._compute_loss(s, None, inputs)
            loss.backward()
            m = s._metrics["train"]
            out["cases"].append({
                "loss_type": loss_type, "beta": beta, "old": "current" if mu1 else "stored",
                "loss": loss.item(), "grad_logp": tolist(leaf.grad),
                "kl": m["kl"][0] if "kl" in m else None,
                "clip_ratio/low_mean": m["clip_ratio/low_mean"][0],
                "clip_ratio/high_mean": m["clip_ratio/high_mean"][0],
                "clip_ratio/region_mean": m["clip_ratio/region_mean"][0],
            })
    return out


def tis_inputs():
    """tis.json's episodes: (mask, logp, old, sampling, ref, advantages, entropies)."""
    torch.manual_seed(1)
    b, t = 3, 8
    mask = torch.zeros(b, t)
    for i, n in enumerate([7, 4, 6]):
        mask[i, 1 : 1 + n] = 1.0
    mask[2, 3] = 0.0
    logp = -torch.rand(b, t) * 3.0
    logp[:, 0] = 0.0
    old = logp - torch.empty(b, t).uniform_(-0.6, 0.4)
    sampling = (old + torch.empty(b, t).uniform_(-1.0, 1.0)) * mask
    ref = logp + 0.3 * torch.randn(b, t)
    advantages = torch.tensor([0.9, -1.1, 0.4])
    entropies = torch.rand(b, t)
    return mask, logp, old, sampling, ref, advantages, entropies


def tis_ratio(old, sampling, mask, cap):
    """TRL's _generate_and_score_completions, token_truncate, no clip_min."""
    return torch.clamp(torch.exp((old - sampling) * mask), max=cap)


def tis_cases():
    mask, logp, old, sampling, ref, advantages, entropies = tis_inputs()
    cap, max_completion_length, eps_low, eps_high = 2.0, 10, 0.2, 0.28
    ratio = tis_ratio(old, sampling, mask, cap)
    delta = torch.abs(old - sampling)[mask.bool()]
    flat = ratio[mask.bool()]
    out = {
        "trl_version": trl.__version__, "cap": cap,
        "logp": tolist(logp), "old_logp": tolist(old), "sampling_logp": tolist(sampling),
        "ref_logp": tolist(ref), "advantages": tolist(advantages), "mask": tolist(mask),
        "max_completion_length": max_completion_length, "eps_low": eps_low, "eps_high": eps_high,
        "sampling/sampling_logp_difference/mean": delta.mean().item(),
        "sampling/sampling_logp_difference/max": delta.max().item(),
        "sampling/importance_sampling_ratio/min": flat.min().item(),
        "sampling/importance_sampling_ratio/mean": flat.mean().item(),
        "sampling/importance_sampling_ratio/max": flat.max().item(),
        "cases": [],
    }
    for loss_type in ["grpo", "dapo"]:
        for beta in [0.0, 0.04]:
            leaf = logp.clone().requires_grad_(True)
            s = stand_in(loss_type, beta, leaf, entropies, max_completion_length, eps_low, eps_high)
            s.use_vllm = True
            s.vllm_importance_sampling_correction = True
            inputs = trl_inputs(mask, advantages, old=old, ref=ref if beta != 0.0 else None, importance_sampling_ratio=ratio)
            loss = GRPOTrainer._compute_loss(s, None, inputs)
            loss.backward()
            out["cases"].append({"loss_type": loss_type, "beta": beta, "loss": loss.item(), "grad_logp": tolist(leaf.grad)})
    return out


def gspo_cases():
    """GSPO, TRL's importance_sampling_level = "sequence", on loss.json's and
    tis.json's episodes."""
    mask, logp, old, ref, advantages, entropies = loss_inputs()
    max_completion_length, eps_low, eps_high = 10, 0.2, 0.28
    # Sequence shifts of the log-ratio (exp: 1.65, 0.61, 1.0, 1.0) so that
    # sequence 0 (A > 0) clips high and sequence 1 (A < 0) clips low.
    g = torch.Generator().manual_seed(5)
    noise = torch.empty(mask.shape).uniform_(-0.3, 0.3, generator=g)
    shifted = logp - (torch.tensor([[0.5], [-0.5], [0.0], [0.0]]) + noise)
    out = {
        "trl_version": trl.__version__,
        "logp": tolist(logp), "old_logp": tolist(old), "shifted_old_logp": tolist(shifted), "ref_logp": tolist(ref),
        "advantages": tolist(advantages), "mask": tolist(mask),
        "max_completion_length": max_completion_length, "eps_low": eps_low, "eps_high": eps_high,
        "cases": [],
    }
    olds = {"stored": old, "shifted": shifted, "current": None}
    for loss_type in ["grpo", "bnpo", "dr_grpo", "dapo"]:
        for beta in [0.0, 0.04]:
            for which, o in olds.items():
                leaf = logp.clone().requires_grad_(True)
                s = stand_in(loss_type, beta, leaf, entropies, max_completion_length, eps_low, eps_high, "sequence")
                inputs = trl_inputs(mask, advantages, old=o, ref=ref if beta != 0.0 else None)
                loss = GRPOTrainer._compute_loss(s, None, inputs)
                loss.backward()
                m = s._metrics["train"]
                out["cases"].append({
                    "loss_type": loss_type, "beta": beta, "old": which,
                    "loss": loss.item(), "grad_logp": tolist(leaf.grad),
                    "kl": m["kl"][0] if "kl" in m else None,
                    "clip_ratio/low_mean": m["clip_ratio/low_mean"][0],
                    "clip_ratio/high_mean": m["clip_ratio/high_mean"][0],
                    "clip_ratio/region_mean": m["clip_ratio/region_mean"][0],
                })
    # With TIS (token_truncate): the sequence ratio's surrogate, per token
    # times the truncated token ratio.
    mask, logp, old, sampling, ref, advantages, entropies = tis_inputs()
    cap = 2.0
    ratio = tis_ratio(old, sampling, mask, cap)
    tis = {
        "cap": cap, "logp": tolist(logp), "old_logp": tolist(old), "sampling_logp": tolist(sampling),
        "ref_logp": tolist(ref), "advantages": tolist(advantages), "mask": tolist(mask), "cases": [],
    }
    for loss_type in ["grpo", "bnpo", "dr_grpo", "dapo"]:
        for beta in [0.0, 0.04]:
            leaf = logp.clone().requires_grad_(True)
            s = stand_in(loss_type, beta, leaf, entropies, max_completion_length, eps_low, eps_high, "sequence")
            s.use_vllm = True
            s.vllm_importance_sampling_correction = True
            inputs = trl_inputs(mask, advantages, old=old, ref=ref if beta != 0.0 else None, importance_sampling_ratio=ratio)
            loss = GRPOTrainer._compute_loss(s, None, inputs)
            loss.backward()
            tis["cases"].append({"loss_type": loss_type, "beta": beta, "loss": loss.item(), "grad_logp": tolist(leaf.grad)})
    out["tis"] = tis
    return out


def clip_edges_cases():
    torch.manual_seed(2)
    b, t = 3, 7
    mask = torch.zeros(b, t)
    for i, n in enumerate([6, 3, 5]):
        mask[i, 1 : 1 + n] = 1.0
    mask[2, 2] = 0.0
    logp = -torch.rand(b, t) * 3.0
    logp[:, 0] = 0.0
    ref = logp + 0.3 * torch.randn(b, t)
    advantages = torch.tensor([1.3, -0.6, 0.0])
    entropies = torch.rand(b, t)
    max_completion_length = 8
    out = {
        "trl_version": trl.__version__,
        "logp": tolist(logp), "ref_logp": tolist(ref), "advantages": tolist(advantages), "mask": tolist(mask),
        "max_completion_length": max_completion_length, "cases": [],
    }
    for eps_low, eps_high in [(0.0, 0.28), (0.2, 0.0), (0.0, 0.0)]:
        for loss_type in ["grpo", "bnpo", "dr_grpo", "dapo"]:
            for beta in [0.0, 0.04]:
                leaf = logp.clone().requires_grad_(True)
                s = stand_in(loss_type, beta, leaf, entropies, max_completion_length, eps_low, eps_high)
                inputs = trl_inputs(mask, advantages, ref=ref if beta != 0.0 else None)
                loss = GRPOTrainer._compute_loss(s, None, inputs)
                loss.backward()
                out["cases"].append({
                    "loss_type": loss_type, "beta": beta, "eps_low": eps_low, "eps_high": eps_high,
                    "loss": loss.item(), "grad_logp": tolist(leaf.grad),
                })
    return out


# ---------------------------------------------------------------- optimizer
def optim_case():
    torch.manual_seed(1)
    params = {
        "model.layers.0.mlp.up_proj.weight": torch.randn(5, 3),
        "model.layers.0.input_layernorm.weight": 1.0 + 0.1 * torch.randn(3),
        "lm_head.weight": torch.randn(4, 3),
    }
    names = list(params)
    ps = [torch.nn.Parameter(params[n].clone()) for n in names]
    lrs = [1e-2, 5e-3, 2e-3]
    opt = torch.optim.AdamW(ps, lr=lrs[0], betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    tensors = {f"init.{n}": params[n].clone() for n in names}
    norms = []
    scales = [3.0, 0.05, 0.7]  # step 1 clipped, step 2 not
    for k, lr in enumerate(lrs):
        for n, p in zip(names, ps):
            p.grad = scales[k] * torch.randn_like(p)
            tensors[f"grad{k}.{n}"] = p.grad.clone()
        norms.append(torch.nn.utils.clip_grad_norm_(ps, max_norm=1.0).item())
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        for n, p in zip(names, ps):
            tensors[f"after{k}.{n}"] = p.detach().clone()
    for n, p in zip(names, ps):
        st = opt.state[p]
        tensors[f"exp_avg.{n}"] = st["exp_avg"].clone()
        tensors[f"exp_avg_sq.{n}"] = st["exp_avg_sq"].clone()
    meta = {"names": names, "lrs": lrs, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
            "max_norm": 1.0, "total_norms": norms, "torch_version": torch.__version__}
    return tensors, meta


def schedules():
    p = [torch.nn.Parameter(torch.zeros(1))]
    steps = list(range(0, 14))
    out = {"steps": steps}
    for key, make in [
        ("warmup_cosine", lambda o: get_cosine_schedule_with_warmup(o, 3, 10)),
        ("warmup_cosine_min_0.1", lambda o: get_cosine_with_min_lr_schedule_with_warmup(o, 3, 10, min_lr_rate=0.1)),
        ("warmup_constant", lambda o: get_constant_schedule_with_warmup(o, 4)),
    ]:
        sched = make(torch.optim.SGD(p, lr=1.0))
        out[key] = [sched.lr_lambdas[0](s) for s in steps]
    return out


# ---------------------------------------------------------------- full update
def model_logps(model, tokens, temperature):
    """TRL's _get_per_token_logps_and_entropies on right-padded rows, aligned
    with the tokens (column 0 = 0): logits[:, :-1] / T, log-softmax, gather."""
    logits = model(input_ids=tokens).logits[:, :-1, :].float() / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return torch.cat([torch.zeros(tokens.shape[0], 1), lp], dim=1)


def update_case(model_dir):
    from transformers import Qwen3ForCausalLM
    torch.manual_seed(3)
    model = Qwen3ForCausalLM.from_pretrained(model_dir, attn_implementation="eager").float().train()
    ref = Qwen3ForCausalLM.from_pretrained(model_dir, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.mul_(1.03)
    b, t, temperature = 4, 12, 0.8
    lengths = [12, 7, 10, 5]
    tokens = torch.zeros(b, t, dtype=torch.long)
    mask = torch.zeros(b, t)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(0, model.config.vocab_size, (n,))
        mask[i, 2:n] = 1.0
    mask[0, 5:7] = 0.0  # a tool response
    advantages = torch.tensor([0.9, -1.1, 0.3, -0.4])
    with torch.no_grad():
        old = model_logps(model, tokens, temperature) + torch.empty(b, t).uniform_(-0.4, 0.4)
        ref_lp = model_logps(ref, tokens, temperature)
    beta, eps_low, eps_high, lr, max_norm = 0.05, 0.2, 0.28, 1e-3, 0.5
    logp = model_logps(model, tokens, temperature)
    s = stand_in("dapo", beta, logp, torch.zeros(b, t), t, eps_low, eps_high)
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1),
        "completion_ids": tokens, "completion_mask": mask, "advantages": advantages,
        "num_items_in_batch": mask.sum(), "old_per_token_logps": old, "ref_per_token_logps": ref_lp,
    }
    loss = GRPOTrainer._compute_loss(s, None, inputs)
    loss.backward()
    params = dict(model.named_parameters())
    grads = {f"grad.{n}": p.grad.detach().clone() for n, p in params.items()}
    norm = torch.nn.utils.clip_grad_norm_(params.values(), max_norm=max_norm).item()
    # eps 1e-6, not 1e-8: Adam's first step is ~lr * sign(g), which turns
    # float-noise gradients (|g| ~ 1e-10, true value 0) into +-lr updates in
    # one implementation or the other; a larger eps damps exactly those.
    opt = torch.optim.AdamW(params.values(), lr=lr, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01, foreach=False)
    opt.step()
    tensors = {f"after.{n}": p.detach().clone() for n, p in params.items()}
    tensors.update(grads)
    meta = {
        "tokens": tokens.tolist(), "mask": tolist(mask), "advantages": tolist(advantages),
        "old_logp": tolist(old), "ref_logp": tolist(ref_lp), "temperature": temperature,
        "beta": beta, "eps_low": eps_low, "eps_high": eps_high, "lr": lr, "max_norm": max_norm,
        "betas": [0.9, 0.99], "eps": 1e-6, "weight_decay": 0.01, "max_completion_length": t,
        "loss": loss.item(), "grad_norm": norm, "kl": s._metrics["train"]["kl"][0],
    }
    return tensors, meta


def main():
    only = None
    args = sys.argv[1:]
    if "--only" in args:
        i = args.index("--only")
        only = args[i + 1] if i + 1 < len(args) else ""
        args = args[:i] + args[i + 2 :]
    out = args[0] if args else "trainer/tests/fixtures/grpo"
    small = {"tis": tis_cases, "clip-edges": clip_edges_cases, "gspo": gspo_cases}
    if only is not None and only not in small:
        sys.exit(f"--only {only}: expected one of {', '.join(small)}")
    os.makedirs(out, exist_ok=True)
    for name, make in small.items():
        if only in (None, name):
            with open(os.path.join(out, name + ".json"), "w") as f:
                json.dump(make(), f, indent=1)
    if only is not None:
        print("wrote", os.path.join(out, only + ".json"))
        return
    with open(os.path.join(out, "advantages.json"), "w") as f:
        json.dump(advantages_cases(), f, indent=1)
    with open(os.path.join(out, "loss.json"), "w") as f:
        json.dump(loss_cases(), f, indent=1)
    tensors, meta = optim_case()
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "optim.safetensors"))
    meta["schedules"] = schedules()
    with open(os.path.join(out, "optim.json"), "w") as f:
        json.dump(meta, f, indent=1)
    tensors, meta = update_case(os.path.join(out, "..", "untied"))
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "update.safetensors"))
    with open(os.path.join(out, "update.json"), "w") as f:
        json.dump(meta, f)
    print("wrote", out)


if __name__ == "__main__":
    main()
