#!/usr/bin/env python3
"""How grounded a policy's episodes are: does it search for what the issue
names, does the gold file show up in its tool outputs, and does it answer
with files it has seen?

    python3 scripts/grounding.py EPISODES.jsonl TASKS.jsonl [EPISODES2.jsonl ...]

EPISODES: `fusegrpo eval` / `rollout` / `synth` output (or a pipeline run's
eval/<stage>.jsonl); TASKS: the tasks they ran on (a pipeline run's
tasks/heldout.jsonl or tasks/train.jsonl). Gold files are the files the
task's patch touches. Standard library only.

Columns (fractions of episodes unless said otherwise):
  copied      a grep pattern is a verbatim substring of the issue text
  gold_seen   a gold file path appears in some tool output
  answered    the episode ended with a non-empty answer
  hit         the answer names a gold file
  from_seen   answered, and every answered file appeared in a tool output
  hit|seen    among gold_seen episodes, the share whose answer names a gold file

A policy at chance names a gold file about as often whether or not it has
seen it (hit|seen ~ hit); a grounded one copies what its tools showed.
"""
import json
import re
import sys

PATH_RE = re.compile(r"[\w./-]+\.\w+")


def gold_files(patch):
    files = set(re.findall(r"^\+\+\+ b/(\S+)", patch, re.M))
    files |= set(re.findall(r"^--- a/(\S+)", patch, re.M))
    return files


def calls(episode):
    for turn in episode.get("turns") or []:
        for call in turn.get("calls") or []:
            yield call


def row(episode, task):
    gold = gold_files(task["patch"])
    outputs = "\n".join(str(c.get("output", "")) for c in calls(episode))
    seen = set(PATH_RE.findall(outputs))
    patterns = [
        c["arguments"].get("pattern", "")
        for c in calls(episode)
        if c.get("name") == "grep" and isinstance(c.get("arguments"), dict)
    ]
    answer = {a.split(":")[0] for a in episode.get("answer") or []}
    return {
        "copied": any(p and p in task["problem_statement"] for p in patterns),
        "gold_seen": bool(gold & seen),
        "answered": bool(answer),
        "hit": bool(gold & answer),
        "from_seen": bool(answer) and answer <= seen,
    }


def summary(path, tasks):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            episode = json.loads(line)
            task = tasks.get(episode.get("task_id"))
            if task is None:
                sys.exit(f"{path}:{n}: task {episode.get('task_id')!r} is not in the tasks file")
            rows.append(row(episode, task))
    if not rows:
        sys.exit(f"{path}: no episodes")
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    seen = [r for r in rows if r["gold_seen"]]
    mean["hit|seen"] = sum(r["hit"] for r in seen) / len(seen) if seen else float("nan")
    return len(rows), mean


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    files = [argv[1]] + argv[3:]
    tasks_file = argv[2]
    tasks = {}
    with open(tasks_file) as f:
        for n, line in enumerate(f, 1):
            t = json.loads(line)
            if "instance_id" not in t or "patch" not in t or "problem_statement" not in t:
                sys.exit(f"{tasks_file}:{n}: a task needs instance_id, problem_statement and patch")
            tasks[t["instance_id"]] = t
    keys = ["copied", "gold_seen", "answered", "hit", "from_seen", "hit|seen"]
    print(f"{'episodes file':<40}{'n':>5}" + "".join(f"{k:>11}" for k in keys))
    for path in files:
        n, mean = summary(path, tasks)
        print(f"{path[-40:]:<40}{n:>5}" + "".join(f"{mean[k]:>11.2f}" for k in keys))


if __name__ == "__main__":
    main(sys.argv)
