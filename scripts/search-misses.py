#!/usr/bin/env python3
"""The tasks where `eval --policy search` has no gold file in its top k,
counted by cause (BENCHMARKS.md "Search"):

- gold in a test, doc or example (a file the priors lower);
- no identifier in the issue (no backticked code, snake_case, CamelCase or
  dotted name);
- gold not ranked at all (none of the query's terms in it, or past the
  20 ranked);
- ranked below k (the issue's names match other files better).

    scripts/search-misses.py TASKS.jsonl search.ranked.jsonl [K]
"""
import json
import re
import sys

IDENT = re.compile(r"`[^`\n]+`|\b[A-Za-z_]\w*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b|\b\w+\.\w+\.\w+\b")


def role(path):
    parts = path.lower().split("/")
    dirs, name = parts[:-1], parts[-1]
    stem = name.split(".")[0]
    if any(d in ("tests", "test", "testing", "__tests__", "spec") or d.startswith("test_") or d.endswith("_tests") for d in dirs) \
            or stem.startswith("test_") or stem.endswith("_test") or stem.endswith("_tests") or stem == "conftest":
        return "test"
    if not name.endswith((".py", ".pyi", ".pyx", ".rs", ".go", ".java", ".js", ".ts", ".c", ".h", ".cpp")) or any(d in ("docs", "doc") for d in dirs):
        return "doc"
    if any(d in ("examples", "example", "benchmarks", "benchmark", "bench", "samples", "scripts") for d in dirs):
        return "example"
    return "source"


def main():
    tasks = {t["instance_id"]: t for t in map(json.loads, open(sys.argv[1]))}
    rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    causes = {}
    total = 0
    for r in rows:
        s = r["score"]
        if s["gold_files"] == 0:
            continue
        total += 1
        first = s["first_gold_file"]
        if first is not None and first <= k:
            continue
        task = tasks[r["task_id"]]
        gold = (task.get("gold") or {}).get("files") or []
        if gold and all(role(g) != "source" for g in gold):
            cause = "gold in a test, doc or example"
        elif not IDENT.search(task["problem_statement"]):
            cause = "no identifier in the issue"
        elif first is None:
            cause = "gold not ranked (no query term in it, or past the 20 ranked)"
        else:
            cause = f"ranked below {k} (other files match the issue's names better)"
        causes[cause] = causes.get(cause, 0) + 1
    print(f"{sum(causes.values())} of {total} tasks with a gold file have none in the top {k}:")
    for c, n in sorted(causes.items(), key=lambda x: -x[1]):
        print(f"- {c}: {n}")


if __name__ == "__main__":
    main()
