#!/usr/bin/env python3
"""A tiny GGUF file and transformers' reading of it: the golden fixture of
`fusegrpo import-gguf` (lm/tests/suite/gguf_import.rs).

Not run by tests: run it by hand when the fixture must change, from a venv
outside the repository with torch, transformers, tokenizers and gguf:

    /work/venv/bin/python scripts/make_gguf_fixtures.py lm/tests/fixtures/gguf_llama

It writes, under <out>/:
  tiny-llama.gguf   a random Llama (tied, GQA 2:1) as llama.cpp's converter
                    writes one: llama.cpp tensor names, Q and K rows permuted,
                    tensors in F32, F16, BF16, Q8_0, Q4_0 and Q4_1, a
                    byte-level BPE tokenizer (pre-tokenizer "smollm": digits
                    split one by one, as SmolLM2's), ChatML control tokens and
                    a chat template;
  expected.json     {"score": [{"ids", "logprobs"}]} from
                    AutoModelForCausalLM.from_pretrained(out, gguf_file=...),
                    {"texts": [{"text", "ids", "ids_transformers_gguf"}]}:
                    "ids" from the tokenizer the file was made from (what the
                    import must reproduce), "ids_transformers_gguf" from
                    transformers' GGUF tokenizer, which ignores the "smollm"
                    pre-tokenizer and so differs on runs of digits.
"""
import json
import os
import sys

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "def compute_discount(price, rate):\n    return price * (1 - rate)\n",
    "The quick brown fox jumps over the lazy dog. 12345 + 678 = 13023",
    "<|im_start|>user\nFind the bug in session.py<|im_end|>\n<|im_start|>assistant\n",
    "import os\nimport sys\nclass Session:\n    def request(self, method, url):\n        pass\n",
    "naïve café — Grüße, 東京, emoji 🙂 and tabs\tand  spaces",
] * 20
TEXTS = [
    "def compute_discount(price, rate):",
    "Grüße aus 東京 🙂",
    "<|im_start|>user\nhello<|im_end|>",
    "version 2.31.0 released in 2023",
    "x = 1234567",
    "   leading spaces and\ttabs\n\nnew lines",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def main(out):
    os.makedirs(out, exist_ok=True)
    tok = train_tokenizer()
    vocab = tok.get_vocab_size()
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, rope_theta=100000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, max_position_embeddings=2048,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(7)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}

    path = os.path.join(out, "tiny-llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_block_count(2)
    w.add_context_length(2048)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    ordered = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    w.add_token_list([t for t, _ in ordered])
    w.add_token_types([3 if t in SPECIAL else 1 for t, _ in ordered])
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    Q = gguf.GGMLQuantizationType
    kinds = {0: {"attn_q": Q.Q4_1, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.F16,
                 "ffn_gate": Q.Q4_1, "ffn_up": Q.BF16, "ffn_down": Q.Q8_0},
             1: {"attn_q": Q.Q8_0, "attn_k": Q.Q4_1, "attn_v": Q.F16, "attn_output": Q.Q4_0,
                 "ffn_gate": Q.F32, "ffn_up": Q.Q4_1, "ffn_down": Q.Q4_1}}
    hf = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj"}

    def add(name, arr, kind):
        if kind == Q.F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif kind == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, kind), raw_dtype=kind)

    add("token_embd.weight", sd["model.embed_tokens.weight"], Q.Q8_0)
    for l in range(2):
        add(f"blk.{l}.attn_norm.weight", sd[f"model.layers.{l}.input_layernorm.weight"], Q.F32)
        add(f"blk.{l}.ffn_norm.weight", sd[f"model.layers.{l}.post_attention_layernorm.weight"], Q.F32)
        for short, kind in kinds[l].items():
            arr = sd[f"model.layers.{l}.{hf[short]}.weight"]
            if short == "attn_q":
                arr = permute(arr, 4)
            if short == "attn_k":
                arr = permute(arr, 2)
            add(f"blk.{l}.{short}.weight", arr, kind)
    add("output_norm.weight", sd["model.norm.weight"], Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ref = AutoModelForCausalLM.from_pretrained(out, gguf_file="tiny-llama.gguf", torch_dtype=torch.float32,
                                               attn_implementation="eager").eval()
    ref_tok = AutoTokenizer.from_pretrained(out, gguf_file="tiny-llama.gguf")
    g = torch.Generator().manual_seed(99)
    score = []
    chat = tok.encode("<|im_start|>user\nfix compute_discount<|im_end|>\n<|im_start|>assistant\n").ids
    seqs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (9, 40)] + [chat]
    with torch.no_grad():
        for ids in seqs:
            logp = torch.log_softmax(ref(torch.tensor([ids])).logits[0].float(), -1)
            lp = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
            score.append({"ids": ids, "logprobs": [None] + lp})
    texts = [{"text": t, "ids": tok.encode(t).ids,
              "ids_transformers_gguf": ref_tok(t, add_special_tokens=False)["input_ids"]} for t in TEXTS]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"score": score, "texts": texts, "vocab_size": vocab}, f)
    differ = sum(t["ids"] != t["ids_transformers_gguf"] for t in texts)
    print(f"{path}: {os.path.getsize(path)} bytes, vocab {vocab}; "
          f"{differ}/{len(texts)} texts tokenized differently by transformers' GGUF tokenizer")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lm/tests/fixtures/gguf_llama")
