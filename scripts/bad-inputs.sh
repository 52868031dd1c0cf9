#!/usr/bin/env bash
# Runs fusegrpo on the bad inputs a user makes (issue 37): configs, task
# files, models, checkpoints, run folders, arguments. For each case it
# prints the exit status and the first line of the message, as a Markdown
# table, and checks that no case panics, hangs (60 s) or exits with the
# wrong status, and that the cases marked `same` leave the run folder
# byte-identical. Exit status 1 when any check fails.
#
#   scripts/bad-inputs.sh            # builds the release binary first
#   FUSEGRPO=path/to/fusegrpo scripts/bad-inputs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ -z "${FUSEGRPO:-}" ]; then
    cargo build --release --bin fusegrpo >&2
    FUSEGRPO=$root/target/release/fusegrpo
fi
B=$FUSEGRPO
[ -x "$B" ] || { echo "bad-inputs.sh: no fusegrpo binary at $B" >&2; exit 1; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
export FUSEGRPO_LOG=warn

# A small world: the practice repository, its tasks, a tiny model, a config.
scripts/tiny-world.sh "$B" "$w" bad-inputs
cd "$w"
# A config with one line changed: variant NAME FROM TO.
variant() { sed "s|$2|$3|" cfg.toml > "$1.toml"; cmp -s cfg.toml "$1.toml" && { echo "variant $1: '$2' not in cfg.toml" >&2; exit 1; }; true; }
# A task file with one row changed by a Python expression on `t` (the first task).
taskvariant() {
    python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open("tasks.jsonl")]
t = dict(rows[0]); exec(sys.argv[2])
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows[1:4] + [t]))
PY
}

# The run folder every `same` case must leave as it was: 2 GRPO steps.
$B train --config cfg.toml --out run --max-steps 2 2>/dev/null
fingerprint() { find "$1" -type f | sort | xargs md5sum | md5sum | cut -c1-32; }
$B synth --config cfg.toml --tasks tasks.jsonl --teacher scripted --samples 1 --max-tasks 4 --out traj.jsonl 2>/dev/null
cp cfg.toml sftcfg.toml; printf '[sft]\nepochs = 1\nbatch_rows = 1\n[sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\n' >> sftcfg.toml
$B sft --config sftcfg.toml --data traj.jsonl --out sftrun --max-steps 1 2>/dev/null

failures=0
echo "| case | expected | exit | first line of the message |"
echo "|---|---|---|---|"
# check NAME EXPECTED_STATUS same|- COMMAND...
# With `inputs="FILE..."` set before it, those files must also be
# byte-identical afterwards (reset after each check); with `leak=TEXT`,
# the output must not contain TEXT; with `expect=TEXT`, stdout must.
inputs=""
leak=""
expect=""
check() {
    local name=$1 want=$2 keep=$3; shift 3
    local before="" status=0 kept=""
    [ "$keep" = same ] && before=$(fingerprint run; fingerprint sftrun)
    [ -n "$inputs" ] && kept=$(md5sum $inputs)
    if declare -F "$1" > /dev/null; then
        # A shell function of this script (exported below): timeout runs it in bash.
        timeout 60 bash -c '"$@"' _ "$@" > out.txt 2> err.txt < /dev/null || status=$?
    else
        timeout 60 "$@" > out.txt 2> err.txt < /dev/null || status=$?
    fi
    local line
    line=$( (grep -v '^\s*$' err.txt || true) | head -1 | cut -c1-220 | sed 's/|/\\|/g')
    [ -n "$line" ] || line=$(head -c 220 out.txt | head -1 | sed 's/|/\\|/g')
    local bad=""
    [ "$status" = "$want" ] || bad="wrong status"
    [ "$status" = 124 ] && bad="hung (60 s)"
    grep -q "panicked" err.txt && bad="panicked"
    if [ "$keep" = same ] && [ "$before" != "$(fingerprint run; fingerprint sftrun)" ]; then bad="changed the run folder"; fi
    if [ -n "$inputs" ] && [ "$kept" != "$(md5sum $inputs)" ]; then bad="changed an input ($inputs)"; fi
    if [ -n "$leak" ] && grep -q "$leak" out.txt err.txt; then bad="read outside the repository"; fi
    if [ -n "$expect" ] && ! grep -q "$expect" out.txt; then bad="no $expect in the output"; fi
    inputs=""; leak=""; expect=""
    if [ -n "$bad" ]; then failures=$((failures + 1)); line="**$bad** $line"; fi
    echo "| $name | $want | $status | ${line//$w\//} |"
}

# Configs.
check "config: missing file" 1 same $B train --config nope.toml --out run
printf 'name = "x"\n[grpo\n' > syntax.toml
check "config: TOML syntax" 1 same $B train --config syntax.toml --out run
variant type "temperature = 0.7" 'temperature = "hot"'
check "config: TOML type" 1 same $B train --config type.toml --out run
variant unknown "\[grpo\]" '[grpo]\nbetta = 0.1'
check "config: unknown key" 1 same $B train --config unknown.toml --out run
variant nan "temperature = 0.7" "temperature = nan"
check "config: temperature = nan" 1 same $B train --config nan.toml --out run
variant beta "beta = 0.0" "beta = -1.0"
check "config: grpo.beta = -1" 1 same $B train --config beta.toml --out run
variant ctx "max_total_tokens = 2048" "max_total_tokens = 10"
check "config: max_total_tokens below the prompt" 1 same $B train --config ctx.toml --out fresh1
variant group "group = 2" "group = 0"
check "config: rollout.group = 0" 1 same $B train --config group.toml --out run
variant vllm "group = 2" 'group = 2\nengine = "vllm"\n[rollout.vllm]\nurl = "http://127.0.0.1:9"\nserved_model = "m"\nmax_retries = 1'
check "config: engine = vllm for training (no weight sync yet)" 1 same $B train --config vllm.toml --out vllmrun
check "vllm engine: no server at the URL" 1 same $B eval --config vllm.toml --tasks tasks.jsonl
variant vllmkey "group = 2" 'group = 2\nengine = "vllm"'
check "config: engine = vllm without [rollout.vllm]" 1 same $B eval --config vllmkey.toml --tasks tasks.jsonl
variant lr "lr = 1e-4" "lr = 0.0"
check "config: optim.lr = 0" 1 same $B train --config lr.toml --out run
variant topp "temperature = 0.7" 'temperature = 0.7\ntop_p = 0.0'
check "config: sampling.top_p = 0" 1 same $B train --config topp.toml --out run
variant norepos 'repos_dir = "repos"' 'repos_dir = "nowhere"'
check "config: repos_dir missing" 1 same $B train --config norepos.toml --out fresh2

# Task files.
variant notasks 'tasks = "tasks.jsonl"' 'tasks = "none.jsonl"'
check "tasks: file missing" 1 same $B train --config notasks.toml --out fresh3
{ head -2 tasks.jsonl; echo '{"instance_id": "x",'; } > broken.jsonl
check "tasks: malformed JSON line" 1 same $B eval --config cfg.toml --tasks broken.jsonl --policy scripted
taskvariant nogold.jsonl 't.pop("patch", None); t.pop("gold", None)'
check "tasks: neither patch nor gold" 1 same $B eval --config cfg.toml --tasks nogold.jsonl --policy scripted
taskvariant commit.jsonl 't["base_commit"] = "0" * 40'
check "tasks: base commit missing" 1 same $B eval --config cfg.toml --tasks commit.jsonl --policy scripted
taskvariant empty.jsonl 't.pop("patch", None); t["gold"] = {"files": [], "functions": []}'
check "tasks: empty gold" 1 same $B eval --config cfg.toml --tasks empty.jsonl --policy scripted
taskvariant reponame.jsonl 't["repo"] = "../etc"'
check "tasks: repository name escapes" 1 same $B eval --config cfg.toml --tasks reponame.jsonl --policy scripted
check "tasks: --skip-bad-tasks drops them" 0 same $B eval --config cfg.toml --tasks commit.jsonl --policy scripted --skip-bad-tasks --group 1

# Models.
variant nomodel 'path = "model"' 'path = "nomodel"'
check "model: folder missing" 1 same $B train --config nomodel.toml --out fresh4
cp -r model badweights; head -c 100 model/model.safetensors > badweights/model.safetensors
variant badw 'path = "model"' 'path = "badweights"'
check "model: corrupt safetensors" 1 same $B train --config badw.toml --out fresh5
cp -r model badarch; sed -i 's/"model_type": *"qwen3"/"model_type": "gpt2"/' badarch/config.json
variant bada 'path = "model"' 'path = "badarch"'
check "model: unsupported architecture" 1 same $B train --config bada.toml --out fresh6

# Run folders and checkpoints.
check "run: rerun without --resume" 1 same $B train --config cfg.toml --out run --max-steps 1
check "run: sft rerun without --resume" 1 same $B sft --config sftcfg.toml --data traj.jsonl --out sftrun --max-steps 1
check "run: --resume on the run folder" 1 same $B train --config cfg.toml --out run --resume run
check "run: --resume a missing folder" 1 same $B train --config cfg.toml --out run --resume run/step_00000009
check "run: resume older, newer present" 1 same $B train --config cfg.toml --out run --resume run/step_00000001
variant changed "lr = 1e-4" "lr = 2e-4"
check "run: config changed on resume" 1 same $B train --config changed.toml --out run --resume auto --max-steps 3
$B init-tiny --out model2 --small-vocab 1024 --seed 1 --corpus-repo practice/shop --repos-dir repos 2>/dev/null
variant moved 'path = "model"' 'path = "model2"'
check "run: model changed on resume" 1 same $B train --config moved.toml --out run --resume auto --max-steps 3 --allow-config-change
cp -r run corrupt; echo garbage > corrupt/step_00000002/state.json
check "run: corrupt newest checkpoint" 1 - $B train --config cfg.toml --out corrupt --resume auto --max-steps 3
cp -r run trunc; head -c 1000 run/step_00000002/optimizer.safetensors > trunc/step_00000002/optimizer.safetensors
check "run: truncated optimizer state" 1 - $B train --config cfg.toml --out trunc --resume auto --max-steps 3
cp -r run nodone; rm nodone/step_00000002/DONE
check "run: --resume an incomplete checkpoint" 1 - $B train --config cfg.toml --out nodone --resume nodone/step_00000002

# Arguments.
echo '{"kept": true}' > kept.jsonl
check "eval --group 0" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --group 0 --out kept.jsonl
check "rollout --max-tasks 0" 1 same $B rollout --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 0 --out kept.jsonl
grep -q kept kept.jsonl || { echo "kept.jsonl was changed" >&2; failures=$((failures + 1)); }
check "eval --policy nonsense" 2 same $B eval --config cfg.toml --tasks tasks.jsonl --policy nonsense
echo '{"ids": [1, 2, 3]}' > in.jsonl; echo '{"ids": []}' > emptyin.jsonl; echo '{"ids": [99999]}' > vocab.jsonl
check "generate --max-new-tokens 100000000" 1 same $B generate --model model --input in.jsonl --output g.jsonl --max-new-tokens 100000000
check "generate: empty prompt" 1 same $B generate --model model --input emptyin.jsonl --output g.jsonl --max-new-tokens 4
check "generate: id outside the vocabulary" 1 same $B generate --model model --input vocab.jsonl --output g.jsonl --max-new-tokens 4
check "generate --temperature -1" 1 same $B generate --model model --input in.jsonl --output g.jsonl --max-new-tokens 4 --temperature=-1
check "reward --task missing file" 1 same $B reward --task missing.json --episode '{"turns": []}'
check "reward --episode bad inline JSON" 1 same $B reward --task '{"instance_id":"a","repo":"x/y","base_commit":"c","problem_statement":"p","gold":{"files":["a.py"],"functions":[]}}' --episode '{"turns": '
check "plan --gpu-memory 1e999GB" 2 same $B plan --config cfg.toml --gpu-memory 1e999GB
check "train --gpu-memory 0" 2 same $B train --config cfg.toml --out run --gpu-memory 0
check "unknown subcommand" 2 same $B trian --config cfg.toml
commit=$(python3 -c 'import json; print(json.loads(open("tasks.jsonl").readline())["base_commit"])')
check "tool: read_file reversed range (error text for the model)" 0 same $B tool --repos-dir repos --repo practice/shop --commit "$commit" --call '{"name": "read_file", "arguments": {"path": "README.md", "start_line": 10, "end_line": 2}}'
check "tool: path escaping the repository (error text for the model)" 0 same $B tool --repos-dir repos --repo practice/shop --commit "$commit" --call '{"name": "read_file", "arguments": {"path": "../../etc/passwd"}}'
check "tool: unknown commit" 1 same $B tool --repos-dir repos --repo practice/shop --commit 0000000 --call '{"name": "glob", "arguments": {"pattern": "*"}}'
check "pipeline: config without [pipeline]" 1 same $B pipeline --config cfg.toml --out pipe

# Issue 52: nothing escapes, nothing lost.
# A committed folder replaced by a symlink to a folder outside the repository.
mkdir -p outside && echo SECRET_42 > outside/passwd
git init -q sym && (cd sym && echo 'x = 1' > a.py && mkdir -p sub deep/er && echo placeholder > sub/passwd && echo placeholder > deep/er/passwd \
    && git add -A && git -c user.name=t -c user.email=t@t commit -qm init && rm -rf sub deep/er && ln -s "$w/outside" sub && ln -s "$w/outside" deep/er)
echo "SECRET_42 is wrong in passwd" > issue.txt
printf '%s\n' 'name = "loc"' '[model]' 'path = "model"' '[env]' 'repos_dir = "repos"' '[episode]' 'max_turns = 4' 'max_turn_tokens = 400' 'max_total_tokens = 16000' > loc.toml
leak=SECRET_42
check "localize: a folder replaced by a symlink is not followed" 0 same $B localize --config loc.toml --policy scripted --repo sym --issue issue.txt
# Issue 56: made-up settings of the localizer, and a plain folder's link out.
check "localize: --temperature 0 with 4 attempts" 1 same $B localize --config loc.toml --repo sym --issue issue.txt --attempts 4 --temperature 0
check "localize: --max-issue-tokens 0" 1 same $B localize --config loc.toml --policy scripted --repo sym --issue issue.txt --max-issue-tokens 0
mkdir -p plainsym && echo 'x = 1' > plainsym/a.py && ln -sfn "$w/outside" plainsym/sub
leak=SECRET_42
check "localize: a plain folder's link out is not followed" 0 same $B localize --config loc.toml --policy scripted --repo plainsym --issue issue.txt
check "localize: --rev on a plain folder" 1 same $B localize --config loc.toml --policy scripted --repo plainsym --rev HEAD --issue issue.txt
mcp_read() { printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"$1\",\"arguments\":$2}}" \
    | { cat; sleep 2; } | $B mcp --config loc.toml --policy scripted --repo sym; }
export -f mcp_read
export B
for call in 'read_file {"path":"sub/passwd"}' 'read_file {"path":"deep/er/passwd"}' 'grep {"pattern":"SECRET_42"}' 'glob {"pattern":"**/passwd"}'; do
    leak=SECRET_42
    [ "${call%% *}" = glob ] && leak='sub/passwd\|er/passwd'
    expect='"id":2,'
    check "mcp $call through a symlinked folder" 0 same mcp_read "${call%% *}" "${call#* }"
done
# Malformed MCP frames after the handshake: each gets its JSON-RPC error
# (mcp_send FRAME... or @FILE).
mcp_send() { { printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}'; for f in "$@"; do case $f in @*) cat "${f#@}" ;; *) printf '%s\n' "$f" ;; esac; done; sleep 2; } \
    | $B mcp --config loc.toml --policy scripted --repo repos/practice__shop; }
export -f mcp_send
# mcp_case NAME ID CODE FRAME: the reply to ID (null: unreadable) carries CODE.
mcp_case() { expect="\"id\":$2,\"error\":{\"code\":$3"; check "mcp: $1" 0 same mcp_send "$4"; }
mcp_case "a line that is not JSON" null -32700 'hello'
mcp_case "a lone \\ud800 in a string" 1 -32700 '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"\ud800"}}}'
mcp_case "invalid UTF-8 in a string" 1 -32700 $'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"\xff"}}}'
mcp_case "truncated JSON" 1 -32700 '{"jsonrpc":"2.0","id":1,"method":"tools/li'
mcp_case "a batch array" 1 -32600 '[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]'
mcp_case "jsonrpc 1.0" 1 -32600 '{"jsonrpc":"1.0","id":1,"method":"tools/list"}'
mcp_case "tools/call without params" 1 -32602 '{"jsonrpc":"2.0","id":1,"method":"tools/call"}'
mcp_case "tools/call with non-object arguments" 1 -32602 '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grep","arguments":"x"}}'
python3 -c "import json; print(json.dumps({'jsonrpc':'2.0','id':1,'method':'tools/call','params':{'name':'read_file','arguments':{'path':'a'*10485760}}}))" > longpath.json
expect='capped at 4096 bytes'
check "mcp: read_file with a 10 MB path (not echoed)" 0 same mcp_send @longpath.json
[ "$(wc -c < out.txt)" -lt 100000 ] || { echo "the 10 MB path was echoed" >&2; failures=$((failures + 1)); }
# Outputs that are inputs.
cp tasks.jsonl tasks.bak
inputs=tasks.jsonl
check "outputs: eval --out is --tasks" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --out ./tasks.jsonl
inputs=tasks.jsonl
check "outputs: tasks import --out is --input" 1 same $B tasks import --format swe-bench --input tasks.jsonl --repos-dir repos --out tasks.jsonl
echo practice/shop > held.txt
inputs="tasks.jsonl held.txt"
check "outputs: tasks split --train is --heldout" 1 same $B tasks split --input tasks.jsonl --heldout-repos held.txt --train o.jsonl --heldout o.jsonl
[ -e o.jsonl ] && { echo "tasks split wrote o.jsonl" >&2; failures=$((failures + 1)); }
cp tasks.bak tasks.jsonl   # the cases below need it whole, whatever happened above
echo Practice/Nope > nope.txt
check "tasks split: a held-out name that matches nothing" 1 same $B tasks split --input tasks.jsonl --heldout-repos nope.txt --train a.jsonl --heldout b.jsonl
# Imports and task files.
(head -1 tasks.jsonl; head -1 tasks.jsonl) > dupid.jsonl
check "tasks: a repeated instance_id" 1 same $B eval --config cfg.toml --tasks dupid.jsonl --policy scripted
check "tasks import: a repeated instance_id" 1 same $B tasks import --format swe-bench --input dupid.jsonl --repos-dir repos --out dupimp.jsonl
taskvariant noid.jsonl 't["instance_id"] = ""'
check "tasks: an empty instance_id" 1 same $B eval --config cfg.toml --tasks noid.jsonl --policy scripted
check "eval: --out under a file (before any episode)" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --out tasks.jsonl/e.jsonl
python3 -c "import json;r=json.loads(open('traj.jsonl').readline());r['score']['reward']=1e300;print(json.dumps(r))" > huge.jsonl
check "compare: a reward out of range" 1 same $B compare traj.jsonl huge.jsonl
# A closed stderr: the job's status, no panic (101).
closed_stderr() { "$@" 2>&1 >/dev/null | true; return "${PIPESTATUS[0]}"; }
export -f closed_stderr
taskvariant badcommit.jsonl 't["base_commit"] = "0" * 40'
check "stderr a closed pipe (a refused task file)" 1 same closed_stderr $B eval --config cfg.toml --tasks badcommit.jsonl --policy scripted
# Issue 66: streams that fail, MCP frames out of turn, a huge issue, hostile .gitignore files.
full_stdout() { "$@" > /dev/full; }
full_stderr() { "$@" 2> /dev/full; }
export -f full_stdout full_stderr
check "stdout /dev/full (localize --json: the result is lost)" 1 same full_stdout $B localize --config loc.toml --policy scripted --repo repos/practice__shop --issue issue.txt --json
check "stderr /dev/full with a warning (train, off-policy on the CPU)" 0 - full_stderr $B train --config cfg.toml --out fullerr --max-steps 1 --set rollout.off_policy=1 --set grpo.rollout_correction=tis
[ -f fullerr/step_00000001/model.safetensors ] || { echo "train with stderr /dev/full saved no step" >&2; failures=$((failures + 1)); }
mcp_preinit() { { printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}' '{"jsonrpc":"2.0","id":9,"result":{}}' \
    '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"glob","arguments":{"pattern":"**"}}}'; sleep 2; } \
    | $B mcp --config loc.toml --policy scripted --repo repos/practice__shop; }
export -f mcp_preinit
expect='"id":2,"result"'
check "mcp: a notification and a response before initialize" 0 same mcp_preinit
mcp_case "a request whose id is in flight" 7 -32600 "$(printf '%s\n' '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"def"}}}' '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"return"}}}')"
python3 -c "import json; print(json.dumps({'jsonrpc':'2.0','id':1,'method':'tools/call','params':{'name':'localize','arguments':{'issue':'shop '*2000000,'policy':'scripted'}}}))" > bigissue.json
expect='capped at 1048576 bytes'
check "mcp: localize with a 10 MB issue" 0 same mcp_send @bigissue.json
mkdir -p fifo && printf 'def a():\n    pass\n' > fifo/a.py && mkfifo fifo/.gitignore
check "localize: a plain folder whose .gitignore is a FIFO" 0 same $B localize --config loc.toml --policy scripted --repo fifo --issue issue.txt
mkdir -p zero && printf 'def a():\n    pass\n' > zero/a.py && ln -s /dev/zero zero/.gitignore
check "localize: a plain folder whose .gitignore links to /dev/zero" 0 same $B localize --config loc.toml --policy scripted --repo zero --issue issue.txt
# Adapters and configs.
printf '[sft]\nepochs = 1\nbatch_rows = 1\n[sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\n[lora]\nr = 4\nalpha = 8\n' | cat cfg.toml - > lora.toml
$B sft --config lora.toml --data traj.jsonl --out lrun --max-steps 1 2>/dev/null
cp -r lrun/step_00000001 r8 && sed -i 's/"r": 4/"r": 8/' r8/adapter_config.json
check "export-adapter: r disagrees with the tensors" 1 same $B export-adapter --adapter r8 --out exported
[ -e exported ] && { echo "export-adapter wrote exported/" >&2; failures=$((failures + 1)); }
check "export-adapter: a model folder as --adapter" 1 same $B export-adapter --adapter model --out exported
# --set overrides and --tensorboard (issue 55).
check "--set: unknown key" 1 same $B train --config cfg.toml --out run --resume auto --set grpo.betaa=0.1
check "--set: wrong type" 1 same $B train --config cfg.toml --out run --resume auto --set train.steps=x
check "--set: bad value" 1 same $B train --config cfg.toml --out run --resume auto --set grpo.beta=-1
check "--set: not KEY=VALUE" 2 same $B train --config cfg.toml --out run --resume auto --set grpo.beta
check "--tensorboard: a file" 1 same $B train --config cfg.toml --out run --resume auto --tensorboard cfg.toml
variant tis "beta = 0.0" 'beta = 0.0\nrollout_correction = "tis"\ntis_cap = 0.5'
check "config: grpo.tis_cap = 0.5 (at load)" 1 same $B train --config tis.toml --out fresh7
[ -e fresh7 ] && { echo "tis_cap = 0.5 started a run" >&2; failures=$((failures + 1)); }
# GSPO and resampling (issue 55).
variant gspo "beta = 0.0" 'beta = 0.0\nimportance_sampling = "seq"'
check "config: grpo.importance_sampling = seq" 1 same $B train --config gspo.toml --out fresh8
check "--set: a bad importance_sampling" 1 same $B train --config cfg.toml --out run --resume auto --set grpo.importance_sampling=seq
variant resample0 "beta = 0.0" 'beta = 0.0\nzero_std_groups = "resample"\nmax_resample_draws = 0'
check "config: grpo.max_resample_draws = 0" 1 same $B train --config resample0.toml --out fresh8
variant resamplekeep "beta = 0.0" 'beta = 0.0\nmax_resample_draws = 4'
check "config: grpo.max_resample_draws without resample" 1 same $B train --config resamplekeep.toml --out fresh8
[ -e fresh8 ] && { echo "a bad grpo setting started a run" >&2; failures=$((failures + 1)); }
# Off-policy rollouts (issue 55).
check "--set: rollout.off_policy = 2" 1 same $B train --config cfg.toml --out run --resume auto --set rollout.off_policy=2
check "--set: rollout.off_policy = 1 without TIS" 1 same $B train --config cfg.toml --out run --resume auto --set rollout.off_policy=1
offp=(--set rollout.off_policy=1 --set grpo.rollout_correction=tis)
$B train --config cfg.toml --out offp --max-steps 2 "${offp[@]}" 2>/dev/null
head -c 100 offp/step_00000002/next_rollouts.json > nr.json; cp nr.json offp/step_00000002/next_rollouts.json
inputs="offp/step_00000002/next_rollouts.json offp/step_00000002/model.safetensors offp/metrics.jsonl"
check "run: corrupt next_rollouts.json (off_policy)" 1 same $B train --config cfg.toml --out offp --resume auto "${offp[@]}"
inputs=""
printf 'extends = "nope.toml"\nname = "x"\n' > ext.toml
check "config: extends a missing file" 1 same $B train --config ext.toml --out run

# Issue 66 (D8-D11, D17, D18): outputs on inputs, counts, tool caps,
# adapters, reused and repeated episodes.
cp loc.toml locc.toml; cp issue.txt iss.txt
inputs=locc.toml
check "localize --out is --config" 1 same $B localize --config locc.toml --policy scripted --repo repos/practice__shop --issue issue.txt --out locc.toml
inputs=iss.txt
check "localize --out is --issue" 1 same $B localize --config loc.toml --policy scripted --repo repos/practice__shop --issue iss.txt --out ./iss.txt
mkdir -p p1copy && printf 'def a():\n    pass\n' > p1copy/a.py
inputs=p1copy/a.py
check "localize --out is a file of --repo" 1 same $B localize --config loc.toml --policy scripted --repo p1copy --issue issue.txt --out p1copy/a.py
check "eval --group 9223372036854775807" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 1 --group 9223372036854775807
check "--set rollout.group=1000000000000" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 1 --set rollout.group=1000000000000
check "--set rollout.group=99999999999999999999 (out of range)" 2 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 1 --set rollout.group=99999999999999999999
variant hugegroup "group = 2" "group = 9223372036854775807"
check "config: rollout.group huge (train)" 1 same $B train --config hugegroup.toml --out hg_run --max-steps 1
[ -e hg_run ] && { echo "a huge rollout.group made hg_run/" >&2; failures=$((failures + 1)); }
check "--set env.tools.max_pattern_chars=0" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 1 --group 1 --set env.tools.max_pattern_chars=0 --out z.jsonl
[ -e z.jsonl ] && { echo "a tool cap of 0 wrote z.jsonl" >&2; failures=$((failures + 1)); }
# Adapters: one LoRA tensor edited (I32, NaN, 1e30 everywhere) or lora_alpha = 1e308.
badlora() {
    python3 - "$1" "$2" <<'PY'
import json, shutil, struct, sys
src, dst, kind = "lrun/step_00000001", sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
b = open(f"{src}/adapter_model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); d = bytearray(b[8 + n:])
name = "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight"
if kind == "i32": h[name]["dtype"] = "I32"
if kind == "nan": s = h[name]["data_offsets"][0]; d[s:s + 4] = struct.pack("<f", float("nan"))
if kind == "huge":
    for k, v in h.items():
        if "lora_" in k: a, z = v["data_offsets"]; d[a:z] = struct.pack("<f", 1e30) * ((z - a) // 4)
if kind == "alpha":
    c = json.load(open(f"{src}/adapter_config.json")); c["lora_alpha"] = 1e308; json.dump(c, open(f"{dst}/adapter_config.json", "w"))
hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(f"{dst}/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(d))
PY
}
for kind in i32 nan alpha; do
    badlora "lora_$kind" $kind
    inputs="lora_$kind/adapter_model.safetensors lora_$kind/adapter_config.json"
    check "export-adapter: $kind" 1 same $B export-adapter --adapter "lora_$kind" --out "ex_$kind"
    check "merge-adapter: $kind" 1 same $B merge-adapter --model model --adapter "lora_$kind" --out "mg_$kind"
    [ -e "ex_$kind" ] || [ -e "mg_$kind" ] && { echo "a broken adapter ($kind) was written" >&2; failures=$((failures + 1)); }
done
badlora lora_huge huge
check "merge-adapter: finite weights whose merge overflows" 1 same $B merge-adapter --model model --adapter lora_huge --out mg_huge
[ -e mg_huge ] && { echo "merge-adapter wrote mg_huge" >&2; failures=$((failures + 1)); }
# eval --reuse of other episodes; compare with a repeated row.
$B eval --config cfg.toml --tasks tasks.jsonl --policy scripted --max-tasks 2 --group 1 --out epS.jsonl > /dev/null 2>&1
$B eval --config cfg.toml --tasks tasks.jsonl --policy model --max-tasks 2 --group 1 --out epM.jsonl > /dev/null 2>&1
inputs=epS.jsonl
check "eval --reuse: scripted episodes as the model's" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy model --max-tasks 2 --group 1 --reuse epS.jsonl
inputs=epM.jsonl
check "eval --reuse: another group" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy model --max-tasks 2 --group 2 --reuse epM.jsonl
inputs=epM.jsonl
check "eval --reuse: another temperature" 1 same $B eval --config cfg.toml --tasks tasks.jsonl --policy model --max-tasks 2 --group 1 --set sampling.temperature=1.3 --reuse epM.jsonl
check "eval --reuse: the same settings" 0 same $B eval --config cfg.toml --tasks tasks.jsonl --policy model --max-tasks 2 --group 1 --reuse epM.jsonl
(cat epS.jsonl; head -1 epS.jsonl) > dupep.jsonl
inputs=dupep.jsonl
check "compare: a repeated (task_id, sample) row" 1 same $B compare epS.jsonl dupep.jsonl

echo
if [ "$failures" -gt 0 ]; then
    echo "bad-inputs.sh: $failures case(s) failed their check" >&2
    exit 1
fi
echo "bad-inputs.sh: every case exited as expected; no panic, no hang, no run folder changed"
