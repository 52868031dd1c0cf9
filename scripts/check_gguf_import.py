#!/usr/bin/env python3
"""`fusegrpo import-gguf` against transformers' own GGUF load of the same file
(not run by tests; the import's CI test uses the tiny fixture of
scripts/make_gguf_fixtures.py).

    /work/venv/bin/python scripts/check_gguf_import.py FILE.gguf IMPORTED_DIR [target/release/fusegrpo]

IMPORTED_DIR is what `fusegrpo import-gguf --gguf FILE.gguf --out IMPORTED_DIR`
wrote. transformers reads FILE.gguf with
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)` (package `gguf`)
and tokenizes with `AutoTokenizer.from_pretrained(dir, gguf_file=...)`;
`fusegrpo score` encodes the same texts with IMPORTED_DIR/tokenizer.json and
scores them. Prints, per text, whether the ids are identical, and for the
scored texts the max |log-prob difference| (tolerance 1e-4).
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TOL = 1e-4
TOOLS = ('<|im_start|>system\nYou localize code. Tools:\n<tools>\n{"type": "function", "function": '
         '{"name": "grep", "parameters": {"pattern": "string"}}}\n</tools>\n<|im_end|>\n'
         '<|im_start|>user\nDiscounts over 100% make the total negative.<|im_end|>\n'
         '<|im_start|>assistant\n<tool_call>\n{"name": "grep", "arguments": {"pattern": "def compute_discount"}}\n'
         '</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nshop/pricing.py:12: def compute_discount(price, rate):\n'
         '</tool_response><|im_end|>\n<|im_start|>assistant\n')
SCORED = [
    TOOLS,
    "def compute_discount(price, rate):\n    \"\"\"Price after a discount.\"\"\"\n    return price * (1 - rate)\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n",
]
TEXTS = SCORED + [
    "Hello world",
    "  two leading spaces",
    "tabs\tand\nnewlines\n\n\nend",
    "numbers 1234567890 and 3.14159 and 2023-12-01",
    "naïve café résumé",
    "Grüße aus München",
    "東京は日本の首都です",
    "emoji 🙂🚀 and ZWJ 👩‍💻",
    "import os, sys\nfrom pathlib import Path\n",
    "class Session(SessionRedirectMixin):\n    def request(self, method, url, **kwargs):",
    "fn main() { println!(\"{}\", 42); }",
    "SELECT * FROM users WHERE id = 7;",
    "<|endoftext|>after the end",
    "<|im_start|>assistant\n<think>\nhmm\n</think>\n",
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='example.com', port=443)",
    "x=1;y=2;z=x+y",
    "   ",
    "CamelCaseIdentifiers and snake_case_ones and SCREAMING_CASE",
    "Ünïcödé ẞ ﬁ ligature",
]


def main(gguf_file, imported, binary):
    folder, name = os.path.split(os.path.abspath(gguf_file))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for t in TEXTS:
                f.write(json.dumps({"text": t}) + "\n")
        subprocess.run([binary, "score", "--model", imported, "--input", inp, "--output", out],
                       check=True, capture_output=True)
        ours = [json.loads(line) for line in open(out)]
    same = 0
    for t, row in zip(TEXTS, ours):
        ref_ids = tok(t, add_special_tokens=False)["input_ids"]
        ok = ref_ids == row["ids"]
        same += ok
        if not ok:
            print(f"ids differ on {t!r}:\n  transformers {ref_ids}\n  fusegrpo     {row['ids']}")
    print(f"token ids identical on {same}/{len(TEXTS)} texts")
    worst_all = 0.0
    for t, row in zip(SCORED, ours):
        ids = row["ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        ref = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
        worst = max(abs(a - b) for a, b in zip(row["logprobs"][1:], ref))
        worst_all = max(worst_all, worst)
        print(f"{len(ids)} tokens ({t[:30]!r}...): max |logprob diff| = {worst:.3e}")
    ok = worst_all <= TOL and same == len(TEXTS)
    print("OK" if ok else "FAIL", f"(log-prob tolerance {TOL})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "target/release/fusegrpo"))
