#!/usr/bin/env python3
"""Loads a LoRA adapter in PEFT's format (one the trainer wrote, say) with
PEFT itself and scores a token sequence with it.

Not run by tests: run it by hand from a venv outside the repository that has
torch, transformers and peft (see scripts/make_lora_fixtures.py for the
versions used):

    /work/venvs/peft/bin/python scripts/check_peft_adapter.py \
        --base lm/tests/fixtures/tied_sharded \
        --adapter lm/tests/fixtures/lora/tied_sharded \
        --ids 201,181,5,77 [--merged-out DIR]

The base is loaded with transformers' AutoModelForCausalLM (float32, eager
attention), the adapter with PeftModel.from_pretrained(base, ADAPTER). Prints
one JSON line {"logprobs": [...]} with n - 1 values for n ids: logprobs[i] =
log p(ids[i + 1] | ids[:i + 1]) (log-softmax of the f32 logits, no
temperature; there is no entry for ids[0]). With --merged-out DIR it also
writes merge_and_unload() there as a transformers model folder (safetensors),
after checking that the merged model gives the same log-probs (within 1e-4)
as the adapter.
"""
import argparse
import json
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM


def token_logprobs(model, ids):
    logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="transformers model folder")
    ap.add_argument("--adapter", required=True, help="PEFT adapter folder")
    ap.add_argument("--ids", required=True, help="comma-separated token ids, at least 2")
    ap.add_argument("--merged-out", help="write merge_and_unload() here")
    args = ap.parse_args()
    ids = [int(x) for x in args.ids.split(",") if x.strip()]
    if len(ids) < 2:
        sys.exit("--ids needs at least 2 ids")

    base = AutoModelForCausalLM.from_pretrained(
        args.base, dtype=torch.float32, attn_implementation="eager").float().eval()
    model = PeftModel.from_pretrained(base, args.adapter).eval()
    with torch.no_grad():
        lp = token_logprobs(model, ids)
        if args.merged_out:
            merged = model.merge_and_unload().eval()
            diff = (token_logprobs(merged, ids) - lp).abs().max().item()
            if diff > 1e-4:
                sys.exit(f"merged model's log-probs differ from the adapter's by {diff}")
            merged.save_pretrained(args.merged_out, safe_serialization=True)
    print(json.dumps({"logprobs": lp.tolist()}))


if __name__ == "__main__":
    main()
