#!/usr/bin/env python3
"""Golden chat-template fixtures for `rollout/tests/suite/chat_template.rs`.

Renders each conversation below with transformers' `apply_chat_template` on the
real Qwen3 tokenizer and writes `rollout/tests/fixtures/chat/<case>.json`:

    {"name": ..., "messages": [...], "tools": [...] | null,
     "add_generation_prompt": bool, "enable_thinking": bool | null,
     "expected": {"text": "...", "ids": [...]}}

Not run by the tests (they only read the JSON files). Regenerate with:

    python scripts/make_chat_fixtures.py [TOKENIZER_DIR]

With `--llama3 DIR` it renders the same conversations with the small
Llama 3-format tokenizer (Llama 3.1's header tokens, `configs/llama3-tools.jinja`)
that the tests train, into `rollout/tests/fixtures/chat-llama3/`; make DIR with

    fusegrpo init-tiny --out DIR --small-vocab 1500 --chat-format llama3

TOKENIZER_DIR defaults to $FUSEGRPO_QWEN_TOKENIZER, else
~/.cache/fusegrpo/qwen3-tokenizer (see scripts/fetch-qwen-tokenizer.sh).
Needs `transformers`, `tokenizers` and `jinja2`.
"""
import json
import os
import re
import sys
from pathlib import Path

from transformers import AutoTokenizer

OUT = Path(__file__).resolve().parent.parent / "rollout" / "tests" / "fixtures" / "chat"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the repository. Returns <contents> & 'metadata'.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the repo root"},
                    "max_lines": {"type": "integer", "minimum": 1, "default": 200},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite; ratio in [0.0, 1.5].",
            "parameters": {
                "type": "object",
                "properties": {
                    "filter": {"type": ["string", "null"]},
                    "timeout_s": {"type": "number", "default": 30.5},
                    "verbose": {"type": "boolean", "default": False},
                },
                "required": [],
            },
        },
    },
]

NONASCII_TOOL = {
    "type": "function",
    "function": {
        "name": "traduire",
        "description": "Traduit un texte — 翻译文本 🌍 (déjà vérifié)",
        "parameters": {
            "type": "object",
            "properties": {"texte": {"type": "string", "description": "Le texte à traduire, p.ex. «café»"}},
            "required": ["texte"],
        },
    },
}


def call(name, arguments, call_id=None):
    tc = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id:
        tc["id"] = call_id
    return tc


SYSTEM = {"role": "system", "content": "You are a careful coding agent."}

CASES = [
    {
        "name": "no_system_generation_prompt",
        "messages": [{"role": "user", "content": "What is 2 + 2?"}],
        "add_generation_prompt": True,
    },
    {
        "name": "system_no_generation_prompt",
        "messages": [SYSTEM, {"role": "user", "content": "Hello!"}],
        "add_generation_prompt": False,
    },
    {
        "name": "multi_turn_earlier_assistant",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "<think>\nSmall primes: 2, 3, 5.\n</think>\n\n7 is prime."},
            {"role": "user", "content": "And an even one?"},
            {"role": "assistant", "content": "2 is the only even prime."},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "multi_turn_generation_prompt",
        "messages": [
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7 is prime.", "reasoning_content": "Pick a small one."},
            {"role": "user", "content": "Another?"},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "tools_declared_with_system",
        "messages": [SYSTEM, {"role": "user", "content": "Run the tests please."}],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "tools_declared_no_system",
        "messages": [{"role": "user", "content": "Show me README.md"}],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "single_tool_call",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Show me README.md"},
            {"role": "assistant", "content": "", "tool_calls": [call("read_file", {"path": "README.md", "max_lines": 20}, "c1")]},
            {"role": "tool", "content": "# fusegrpo\nGRPO in Rust.", "tool_call_id": "c1"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "parallel_tool_calls",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Read a.py, b.py and run the tests."},
            {
                "role": "assistant",
                "content": "I'll do all three at once.",
                "tool_calls": [
                    call("read_file", {"path": "a.py"}),
                    call("read_file", {"path": "b.py", "max_lines": 5}),
                    call("run_tests", {"filter": None, "timeout_s": 12.5, "verbose": True}),
                ],
            },
            {"role": "tool", "content": "def a():\n    return 1\n"},
            {"role": "tool", "content": "def b():\n    return 2\n"},
            {"role": "tool", "content": "3 passed, 0 failed"},
            {"role": "assistant", "content": "Both files are trivial and all tests pass."},
        ],
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "arguments_as_string",
        "messages": [
            {"role": "user", "content": "Read src/lib.rs"},
            {"role": "assistant", "content": "", "tool_calls": [call("read_file", "{\"path\":\"src/lib.rs\",\"max_lines\":  7}")]},
            {"role": "tool", "content": "pub mod chat;"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "tool_call_without_function_wrapper",
        "messages": [
            {"role": "user", "content": "Run tests."},
            {"role": "assistant", "content": "Running.", "tool_calls": [{"name": "run_tests", "arguments": {"verbose": False}}]},
            {"role": "tool", "content": "ok"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "reasoning_content_after_last_query",
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Fix the bug in a.py"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "\nFirst I should look at the file.\n",
                "tool_calls": [call("read_file", {"path": "a.py"})],
            },
            {"role": "tool", "content": "def a(:\n    pass"},
            {
                "role": "assistant",
                "content": "\n\nThe signature has a syntax error.",
                "reasoning_content": "The paren is misplaced.",
            },
        ],
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "inline_think_multi_step",
        "messages": [
            {"role": "user", "content": "Fix the bug in a.py"},
            {
                "role": "assistant",
                "content": "<think>\nLook first.\n</think>\n\nReading it.",
                "tool_calls": [call("read_file", {"path": "a.py"})],
            },
            {"role": "tool", "content": "def a(:\n    pass"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("run_tests", {})],
            },
            {"role": "tool", "content": "1 failed"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    {
        "name": "enable_thinking_false",
        "messages": [SYSTEM, {"role": "user", "content": "Quick: capital of France?"}],
        "add_generation_prompt": True,
        "enable_thinking": False,
    },
    {
        "name": "enable_thinking_true",
        "messages": [{"role": "user", "content": "Think hard: 17 * 23?"}],
        "add_generation_prompt": True,
        "enable_thinking": True,
    },
    {
        "name": "non_ascii",
        "messages": [
            {"role": "system", "content": "Réponds en français, s'il te plaît. 请用中文回答。"},
            {"role": "user", "content": "Traduis «naïve café» en 日本語 🍣🎉 — merci! Ünïcödé ñ"},
            {
                "role": "assistant",
                "content": "<think>\nJe dois appeler l'outil… 考虑一下 🤔\n</think>\n\nVoilà:",
                "tool_calls": [call("traduire", {"texte": "naïve café — 日本語 🍣", "langue": "ja"})],
            },
            {"role": "tool", "content": "ナイーブなカフェ 🍵"},
            {"role": "assistant", "content": "«ナイーブなカフェ» ✅"},
        ],
        "tools": [NONASCII_TOOL],
        "add_generation_prompt": False,
    },
    {
        "name": "json_escapes_and_numbers",
        "messages": [
            {"role": "user", "content": "Tabs\tand \"quotes\" and <html> & 'apostrophes' \\ backslash"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call(
                        "run_tests",
                        {
                            "filter": "a<b && c>d 'x' \"y\" \\ \n\t\u0001",
                            "nested": {"z": [1, 2.0, -3.25, 1e-07, 1e+20, 123456789012, True, None], "empty": {}, "e": []},
                            "ratio": 0.1,
                        },
                    )
                ],
            },
        ],
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    {
        "name": "user_text_with_tool_response_tags",
        "messages": [
            {"role": "user", "content": "Explain this."},
            {"role": "assistant", "content": "Sure, calling.", "tool_calls": [call("run_tests", {})]},
            {"role": "user", "content": "<tool_response>\nmanual result\n</tool_response>"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
]


def main():
    args = sys.argv[1:]
    out = OUT
    if args[:1] == ["--llama3"]:
        if len(args) != 2:
            sys.exit("usage: make_chat_fixtures.py --llama3 DIR (made by fusegrpo init-tiny --small-vocab 1500 --chat-format llama3)")
        tok_dir, out = args[1], OUT.parent / "chat-llama3"
    else:
        tok_dir = args[0] if args else os.environ.get("FUSEGRPO_QWEN_TOKENIZER", os.path.expanduser("~/.cache/fusegrpo/qwen3-tokenizer"))
    tok = AutoTokenizer.from_pretrained(tok_dir)
    out.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        kwargs = {}
        if case.get("enable_thinking") is not None:
            kwargs["enable_thinking"] = case["enable_thinking"]
        common = dict(tools=case.get("tools"), add_generation_prompt=case["add_generation_prompt"], **kwargs)
        text = tok.apply_chat_template(case["messages"], tokenize=False, **common)
        ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=False, **common)
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = [int(i) for i in ids]
        assert ids == tok(text, add_special_tokens=False)["input_ids"], case["name"]
        record = {
            "name": case["name"],
            "messages": case["messages"],
            "tools": case.get("tools"),
            "add_generation_prompt": case["add_generation_prompt"],
            "enable_thinking": case.get("enable_thinking"),
            "expected": {"text": text, "ids": ids},
        }
        path = out / f"{case['name']}.json"
        text_out = json.dumps(record, ensure_ascii=False, indent=1)
        # Keep the id list on one line so the files stay small and diffable.
        text_out = re.sub(r"\[\s*-?\d+(?:,\s*-?\d+)*\s*\]", lambda m: json.dumps(json.loads(m.group(0))), text_out)
        path.write_text(text_out + "\n", encoding="utf-8")
        print(f"{path.name}: {len(text)} chars, {len(ids)} ids")


if __name__ == "__main__":
    main()
