#!/usr/bin/env bash
# Issue 55's TensorBoard check: the `tensorboard` package's own reader
# (EventAccumulator) reads every scalar of a 3-step GRPO run equal to its
# metrics.jsonl: after 2 steps, after a resume to step 3, and after a
# resume from step 2 that redoes step 3 (no step twice). Also an SFT run
# with `--tensorboard DIR`. Exit status 1 when a check fails.
#
#   scripts/tensorboard-check.sh                     # builds the release binary first
#   FUSEGRPO_BIN=path/to/fusegrpo scripts/tensorboard-check.sh
#
# The venv (outside the repository) is $TB_VENV, by default
# ~/.cache/fusegrpo/venv-tb; made with `pip install tensorboard==2.21.0`
# when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ -z "${FUSEGRPO_BIN:-}" ]; then
    cargo build --release --bin fusegrpo >&2
    FUSEGRPO_BIN=$root/target/release/fusegrpo
fi
B=$FUSEGRPO_BIN
[ -x "$B" ] || { echo "tensorboard-check.sh: no fusegrpo binary at $B" >&2; exit 1; }
venv=${TB_VENV:-$HOME/.cache/fusegrpo/venv-tb}
if ! "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
    echo "tensorboard-check.sh: making $venv (pip install tensorboard==2.21.0)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q tensorboard==2.21.0
fi
"$venv/bin/python" -c "import tensorboard; print('tensorboard', tensorboard.__version__)" >&2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
trap 'echo "tensorboard-check.sh: failed (status $?): $BASH_COMMAND" >&2' ERR
export FUSEGRPO_LOG=warn

# A small world (scripts/tiny-world.sh), with 2 tasks a step, a KL term, a
# higher learning rate and an SFT section whose filter keeps what it gets.
scripts/tiny-world.sh "$B" "$w" tensorboard-check
sed -i 's/^tasks_per_step = 1$/tasks_per_step = 2/; s/^beta = 0.0$/beta = 0.04/; s/^lr = 1e-4$/lr = 1e-3/' "$w/cfg.toml"
cat >> "$w/cfg.toml" <<EOF
[sft]
epochs = 1
batch_rows = 1
[sft.filter]
min_f1 = 0
min_e = 0
min_calls_per_turn = 0
require_answer = false
[log]
tensorboard = true
EOF
cd "$w"

failures=0
# check WHAT RUN_DIR EVENT_DIR STEPS: TensorBoard's reader against metrics.jsonl.
check() {
    if "$venv/bin/python" - "$2" "$3" "$4" <<'PY'; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
import json, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run, events, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

def flat(prefix, v, out):
    # metrics.jsonl's scalars as the event files hold them: numbers and
    # booleans at any depth (keys joined by /), as f32; no step, no nulls.
    if isinstance(v, bool):
        out[prefix] = 1.0 if v else 0.0
    elif isinstance(v, (int, float)):
        out[prefix] = float(np.float32(v))
    elif isinstance(v, dict):
        for k, x in v.items():
            # Per-task rewards stay in metrics.jsonl ([log] tensorboard_tasks is off).
            if not prefix and k == "tasks":
                continue
            flat(f"{prefix}/{k}" if prefix else k, x, out)

want = {}
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip()]
for row in rows:
    step = row.pop("step")
    scalars = {}
    flat("", row, scalars)
    for tag, v in scalars.items():
        want.setdefault(tag, {})[step] = v
ea = EventAccumulator(events, size_guidance={"scalars": 0})
ea.Reload()
got = {}
for tag in ea.Tags()["scalars"]:
    events_of = ea.Scalars(tag)
    got[tag] = {e.step: e.value for e in events_of}
    if len(got[tag]) != len(events_of):
        sys.exit(f"{tag}: a step logged twice: {[e.step for e in events_of]}")
problems = []
if len(rows) != steps:
    problems.append(f"metrics.jsonl has {len(rows)} steps, expected {steps}")
for tag in sorted(set(want) | set(got)):
    if want.get(tag) != got.get(tag):
        problems.append(f"{tag}: metrics.jsonl {want.get(tag)} != TensorBoard {got.get(tag)}")
if problems:
    sys.exit("\n".join(problems))
print(f"     {len(got)} tags x {len(rows)} steps equal", file=sys.stderr)
PY
}

$B train --config cfg.toml --out run --max-steps 2 2>/dev/null
check "GRPO, 2 steps" run run/tensorboard 2
$B train --config cfg.toml --out run --resume auto 2>/dev/null
check "GRPO, resumed to step 3" run run/tensorboard 3
$B train --config cfg.toml --out run --resume run/step_00000002 --overwrite 2>/dev/null
check "GRPO, resumed from step 2 again (step 3 redone)" run run/tensorboard 3
# One event file per start, less the second's: it held step 3 alone, redone by the third.
files=$(ls run/tensorboard | wc -l)
[ "$files" = 2 ] && echo "ok   2 event files (steps 1-2, step 3)" || { echo "FAIL 2 event files expected: $(ls run/tensorboard)"; failures=$((failures + 1)); }

$B synth --config cfg.toml --tasks tasks.jsonl --teacher scripted --samples 1 --max-tasks 3 --out traj.jsonl 2>/dev/null
$B sft --config cfg.toml --data traj.jsonl --out sft --max-steps 1 --tensorboard tb-sft 2>/dev/null
$B sft --config cfg.toml --data traj.jsonl --out sft --resume auto --tensorboard tb-sft 2>/dev/null
check "SFT with --tensorboard DIR, resumed" sft tb-sft "$(wc -l < sft/metrics.jsonl)"

[ "$failures" = 0 ] || { echo "$failures check(s) failed" >&2; exit 1; }
