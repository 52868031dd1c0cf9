"""A real MCP client drives `fusegrpo mcp` (issue 36): the official Python SDK
(`mcp`, pinned by scripts/mcp-check.sh) starts the server over stdio, lists
its tools, calls `localize` on held-out practice tasks and checks the
structured result (files present, F1 against each task's gold printed),
checks every structured result against the tool's declared output schema,
checks each tool's annotations (read-only) and `attempts`' declared range,
the progress notifications (per model turn, counting the model's attempts
apart from the search), sends an issue over its token budget (cut, and said
in the text and the structured result), then sends each bad input (an
unknown argument, a wrong type, `attempts` out of 1-64 among them) and
checks that the server answers a tool error, in words that name the
argument, and serves the next call.

    python mcp_client_check.py --bin B --config C --tasks T --repos-dir D \
        [--policy scripted|model|combined] [--model M] [--adapter A] [--n 5]
"""

import argparse
import asyncio
import json

import jsonschema
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def f1(predicted, gold):
    predicted, gold = set(predicted), set(gold)
    if not predicted or not gold:
        return 0.0
    hit = len(predicted & gold)
    if hit == 0:
        return 0.0
    p, r = hit / len(predicted), hit / len(gold)
    return 2 * p * r / (p + r)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def check(args):
    tasks = [json.loads(l) for l in Path(args.tasks).read_text().splitlines() if l.strip()][: args.n]
    assert tasks, f"no task in {args.tasks}"
    server_args = ["mcp", "--config", args.config, "--policy", args.policy]
    if args.model:
        server_args += ["--model", args.model]
    if args.adapter:
        server_args += ["--adapter", args.adapter]
    params = StdioServerParameters(command=args.bin, args=server_args)
    failures = []

    def expect(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            expect(init.server_info.name == "fusegrpo", f"server_info.name = {init.server_info.name}")
            tools = {t.name: t for t in (await session.list_tools()).tools}
            expect({"localize", "grep", "glob", "read_file"} <= set(tools), f"tools listed: {sorted(tools)}")
            expect("issue" in tools["localize"].input_schema.get("required", []), "localize requires `issue`")
            for name, tool in sorted(tools.items()):
                a = tool.annotations
                expect(a is not None and a.read_only_hint is True and a.destructive_hint is False,
                       f"{name} declares itself read-only (annotations {a})")
            attempts = tools["localize"].input_schema.get("properties", {}).get("attempts", {})
            expect((attempts.get("minimum"), attempts.get("maximum")) == (1, 64), f"`attempts` declares its range 1-64 ({attempts})")
            schema = tools["localize"].output_schema or {}
            expect(schema.get("type") == "object" and {"files", "functions", "cost"} <= set(schema.get("properties", {})),
                   f"localize declares an output schema ({sorted(schema.get('properties', {}))})")
            jsonschema.Draft202012Validator.check_schema(schema)
            described = (tools["localize"].description or "") + (init.instructions or "")
            expect("file F1" in described and "hint" in described and "s per attempt" in described,
                   "the description and instructions say what the result is worth and costs")

            def conforms(structured, what):
                errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(structured or {})]
                expect(not errors, f"{what}: the structured result validates against the output schema {errors[:2]}")

            f1s = []
            for t in tasks:
                repo = str(Path(args.repos_dir) / t["repo"].replace("/", "__"))
                progress = []

                async def on_progress(p, total, message, progress=progress):
                    progress.append((p, total, message))

                r = await session.call_tool(
                    "localize",
                    {"issue": t["problem_statement"], "repo": repo, "rev": t["base_commit"], "attempts": 2},
                    progress_callback=on_progress,
                )
                s = r.structured_content or {}
                files = [x["entity"] for x in s.get("files", [])]
                gold = t["gold"]["files"] if t.get("gold") else []
                score = f1(files, gold)
                f1s.append(score)
                expect(not r.is_error and "files" in s and "cost" in s, f"{t['instance_id']}: structured result")
                conforms(s, t["instance_id"])
                # 2 attempts asked: they are the model's; the search (index
                # or scripted) runs once besides, and is not counted as one.
                want = {"scripted": 0, "model": 2, "combined": 2}[args.policy]
                expect(s.get("cost", {}).get("attempts") == want, f"{t['instance_id']}: cost counts {want} model attempts ({s.get('cost')})")
                messages = [m or "" for _, _, m in progress]
                rising = all(a[0] < b[0] <= b[1] for a, b in zip(progress, progress[1:]))
                expect(bool(progress) and rising, f"{t['instance_id']}: progress notifications rise within their total {progress}")
                if want:
                    expect(any(m.startswith("model turn 1 ") for m in messages) and "model attempt 2 of 2 done" in messages
                           and not any("of 3" in m for m in messages),
                           f"{t['instance_id']}: progress per model turn, out of the model's 2 attempts {messages}")
                else:
                    expect(messages == ["the scripted search done"], f"{t['instance_id']}: the scripted search's progress {messages}")
                print(f"     {t['instance_id']}: answered {s.get('answered')}, files {files[:3]}, gold {gold}, F1 {score:.3f}")
                if not files:
                    expect(text_of(r).startswith("the localizer"), f"{t['instance_id']}: no file found is said first, not an error")
            mean = sum(f1s) / len(f1s)
            print(f"mean file F1 over {len(f1s)} tasks ({args.policy}): {mean:.3f}")
            if args.min_f1 is not None:
                expect(mean >= args.min_f1, f"mean file F1 {mean:.3f} >= {args.min_f1}")

            good = {"issue": tasks[0]["problem_statement"], "repo": str(Path(args.repos_dir) / tasks[0]["repo"].replace("/", "__")),
                    "rev": tasks[0]["base_commit"]}

            # An issue over its budget (a pasted log) is cut, not refused, and said.
            long_issue = tasks[0]["problem_statement"] + "\n" + "Traceback (most recent call last): line 1 in <module>\n" * 400
            r = await session.call_tool("localize", {**good, "issue": long_issue, "max_issue_tokens": 200})
            s = r.structured_content or {}
            cut = s.get("issue_cut") or {}
            expect(not r.is_error and "tokens of its middle were dropped" in text_of(r), f"a long issue is cut and the text says so ({text_of(r)[:120]!r})")
            expect(cut.get("dropped_tokens", 0) > 0 and cut.get("max_issue_tokens") == 200, f"... and the structured result says how much: {cut}")
            conforms(s, "the long issue")
            with tempfile.TemporaryDirectory() as tmp:
                plain = Path(tmp) / "not-a-repo"
                plain.mkdir()
                # A plain folder (not a repository) with source is searched as it is.
                folder = Path(tmp) / "plain-source"
                (folder / "pkg").mkdir(parents=True)
                (folder / "pkg" / "totals.py").write_text("def frobnicate_total(order):\n    return order.total - 1\n")
                r = await session.call_tool("localize", {"issue": "`frobnicate_total` subtracts one from every order.", "repo": str(folder)})
                files = [x["entity"] for x in (r.structured_content or {}).get("files", [])]
                expect(not r.is_error, f"a plain folder is searched ({text_of(r)[:100]!r}, files {files})")
                docs = Path(tmp) / "docs-only"
                docs.mkdir()
                subprocess.run(["git", "init", "-q", str(docs)], check=True)
                (docs / "README.md").write_text("# Nothing to parse here\n")
                bad = [
                    ("an empty folder", {**good, "repo": str(plain), "rev": None}, "no source file"),
                    ("a revision of a plain folder", {**good, "repo": str(folder)}, "not a git repository but a plain folder"),
                    ("a path that does not exist", {**good, "repo": str(Path(tmp) / "nowhere")}, "does not exist"),
                    ("an unknown revision", {**good, "rev": "no-such-revision"}, "no-such-revision"),
                    ("an empty issue", {**good, "issue": "   "}, "issue is empty"),
                    ("a repository with no parseable source", {**good, "repo": str(docs), "rev": None}, "no source file"),
                    ("too many attempts", {**good, "attempts": 1000}, "argument `attempts`: expected a whole number from 1 to 64"),
                    ("no attempt", {**good, "attempts": 0}, "argument `attempts`: expected a whole number from 1 to 64"),
                    ("attempts of the wrong type", {**good, "attempts": "two"}, "argument `attempts`: expected a whole number from 1 to 64"),
                    ("an issue of the wrong type", {**good, "issue": ["a", "list"]}, "argument `issue`: expected a string"),
                    ("an unknown argument", {**good, "atempts": 2}, "unknown argument `atempts`"),
                    ("a 2 MB issue", {**good, "issue": "shop " * 400_000}, "capped at 1048576 bytes"),
                ]
                for what, arguments, needle in bad:
                    arguments = {k: v for k, v in arguments.items() if v is not None}
                    r = await session.call_tool("localize", arguments)
                    expect(r.is_error and needle in text_of(r) and "usize" not in text_of(r) and "deserialize" not in text_of(r),
                           f"{what}: tool error naming it ({text_of(r)[:100]!r})")
                    r = await session.call_tool("localize", good)
                    expect(not r.is_error, f"... and the next call is served")

            r = await session.call_tool("grep", {"pattern": "def ", "repo": good["repo"], "rev": good["rev"]})
            expect(not r.is_error and ":" in text_of(r), "grep answers")
            r = await session.call_tool("grep", {"pattern": "def ", "patern": "x", "repo": good["repo"]})
            expect(r.is_error and "unknown argument `patern`" in text_of(r), f"grep refuses an unknown argument, naming it ({text_of(r)[:80]!r})")
            r = await session.call_tool("read_file", {"path": "x.py", "start_line": "ten", "repo": good["repo"]})
            expect(r.is_error and "argument `start_line`: expected a whole number" in text_of(r),
                   f"read_file names a wrong type ({text_of(r)[:80]!r})")
            r = await session.call_tool("read_file", {"path": "no/such/file.py", "repo": good["repo"], "rev": good["rev"]})
            expect(r.is_error, "read_file of a missing file is a tool error")
            r = await session.call_tool("glob", {"pattern": "**/*.py", "repo": good["repo"], "rev": good["rev"]})
            expect(not r.is_error and ".py" in text_of(r), "glob answers")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--repos-dir", required=True)
    ap.add_argument("--policy", default="scripted", choices=["scripted", "model", "combined"])
    ap.add_argument("--model")
    ap.add_argument("--adapter")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--min-f1", type=float, help="fail when the mean file F1 is lower")
    sys.exit(asyncio.run(check(ap.parse_args())))


if __name__ == "__main__":
    main()
