#!/usr/bin/env bash
# Walk the Qwen3-4B recipe (README, "Train Qwen3-4B on a GPU") on the CPU,
# with a tiny random stand-in model, up to GRPO's first step: SWE-bench rows
# as tasks, `repos fetch`, `tasks gold`, a copy of
# configs/qwen3-4b-fusesearch.toml with only the model, device, dtype and
# sizes changed, then `fusegrpo train --max-steps 1` and its metrics line.
#
#   scripts/walk-4b-recipe.sh [SOURCE_TEMPLATE]
#
# SOURCE_TEMPLATE is `repos fetch --source` for the rows' repository (no
# network clone of psf/requests is possible here), e.g. a bare mirror:
#   scripts/walk-4b-recipe.sh '/work/.mirror/{owner}+{name}/repo'
# Without it, or without the rows (ROWS=..., default
# data/real/swebench-verified-requests.jsonl), the generated practice
# repository and its tasks from history stand in. Everything is written to
# a temporary folder (printed; kept for inspection). FUSEGRPO_BIN picks the
# binary (default: the release build, built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rows=${ROWS:-data/real/swebench-verified-requests.jsonl}
[ ! -f "$rows" ] || rows=$(realpath "$rows")
template=${1:-}
bin=${FUSEGRPO_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/fusegrpo}
[ -x "$bin" ] || cargo build --release --bin fusegrpo
work=$(mktemp -d "${TMPDIR:-/tmp}/walk-4b.XXXXXX")
echo "== walk-4b-recipe: working in $work"
cd "$work"
mkdir -p data configs

# 1-2. Tasks and their repositories (the layout the 4B config expects:
# ../data/tasks.jsonl and ../repos from configs/).
if [ -f "$rows" ]; then
    have_rows=1
else
    echo "== $rows is absent: the practice repository stands in for SWE-bench rows"
    have_rows=0
fi
if [ "$have_rows" = 1 ] && [ -n "$template" ]; then
    echo "== tasks: the SWE-bench rows of $rows ($(wc -l <"$rows") rows)"
    cp "$rows" data/tasks.jsonl
else
    [ "$have_rows" = 0 ] || echo "== no SOURCE_TEMPLATE given (no network clone here): the practice repository stands in"
    "$bin" practice-repo --out source --seed 0 --commits 30 >/dev/null
    "$bin" tasks from-history --repo practice/shop --repos-dir source --out data/tasks.jsonl --max 8
    template="$work/source/{owner}__{name}"
fi
echo "== repos fetch --source $template"
"$bin" repos fetch --tasks data/tasks.jsonl --repos-dir repos --source "$template"
"$bin" tasks gold --repos-dir repos --input data/tasks.jsonl --output data/gold.jsonl
echo "== tasks gold: $(wc -l <data/gold.jsonl) rows; first: $(head -n 1 data/gold.jsonl | cut -c 1-300)"

# 3. A tiny random Qwen3 with the real tokenizer when it is cached, else a small BPE.
tok=${FUSEGRPO_QWEN_TOKENIZER:-$HOME/.cache/fusegrpo/qwen3-tokenizer}
if [ -f "$tok/tokenizer.json" ]; then
    echo "== init-tiny with the real Qwen3 tokenizer ($tok)"
    "$bin" init-tiny --out model --tokenizer "$tok" --seed 0
else
    echo "== init-tiny with a small BPE ($tok has no tokenizer.json)"
    "$bin" init-tiny --out model --small-vocab 4096 --seed 0
fi

# 4. The 4B config with the stand-in model on the CPU and toy sizes; every
# replaced line must be there exactly once (so a changed preset fails here).
python3 - "$root/configs/qwen3-4b-fusesearch.toml" configs/walk.toml <<'EOF'
import sys
text = open(sys.argv[1]).read()
swaps = [
    ('name = "qwen3-4b-fusesearch"', 'name = "qwen3-4b-walk"'),
    ('path = "Qwen/Qwen3-4B"', 'path = "../model"'),
    ('dtype = "bf16"', 'dtype = "f32"'),
    ('device = "cuda"', 'device = "cpu"'),
    ('max_turns = 8', 'max_turns = 2'),
    ('max_turn_tokens = 1024', 'max_turn_tokens = 48'),
    ('max_total_tokens = 16384', 'max_total_tokens = 8192'),
    ('group = 8', 'group = 2'),
    ('max_batch_tokens = 147456', 'max_batch_tokens = 32768'),
    ('steps = 200\n', 'steps = 1\n'),
    ('tasks_per_step = 4', 'tasks_per_step = 2'),
]
for old, new in swaps:
    n = text.count(old)
    if n != 1:
        sys.exit(f"walk-4b-recipe: `{old.strip()}` occurs {n} times in {sys.argv[1]}, expected once")
    text = text.replace(old, new)
open(sys.argv[2], "w").write(text)
EOF
echo "== configs/walk.toml: the 4B config with"
diff "$root/configs/qwen3-4b-fusesearch.toml" configs/walk.toml | grep '^>' || true

# 5. GRPO's first step.
"$bin" train --config configs/walk.toml --out run --max-steps 1
echo "== metrics line (run/metrics.jsonl):"
tail -n 1 run/metrics.jsonl
