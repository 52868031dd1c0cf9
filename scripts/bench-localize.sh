#!/usr/bin/env bash
# Wall time of one-attempt `fusegrpo localize` calls, two builds alternated
# (old, new, old, new per row), on psf/requests' SWE-bench Verified rows with
# the shipped config (a benchmark, not a test):
#
#   scripts/bench-localize.sh OLD_BIN NEW_BIN [ROUNDS]
#       OLD_BIN, NEW_BIN  two fusegrpo binaries (copy the old one aside before building)
#       ROUNDS            runs of each build per row (default 2)
#   -> a line per call (row, build, wall s, user s, sys s, exit status,
#      answer digest), then per build the median wall time over the rows
#      both builds answered, its range and quartiles, whether the answers
#      agree, the CPU and the load average
#
# TASKS (default data/real/swebench-verified-requests.jsonl), CONFIG
# (default configs/smollm2-real.toml: scripts/fetch-smollm2.sh first), REPO
# (default checkpoints/requests/repos/psf__requests; made by
# `fusegrpo repos fetch` from REPOS_SOURCE, a URL or path template as
# scripts/eval-requests.sh takes it), OUT (default a temporary folder: the
# answers and the table).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,19p "$0" >&2; exit 2; }
old=$(realpath "$1"); new=$(realpath "$2"); rounds=${3:-2}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "bench-localize: $b is not an executable" >&2; exit 2; }; done
tasks=$(realpath "${TASKS:-data/real/swebench-verified-requests.jsonl}")
config=$(realpath "${CONFIG:-configs/smollm2-real.toml}")
repo=${REPO:-checkpoints/requests/repos/psf__requests}
if [ ! -d "$repo" ]; then
  github='https://github.com/{owner}/{name}.git'
  "$new" repos fetch --tasks "$tasks" --repos-dir "$(dirname "$repo")" --source "${REPOS_SOURCE:-$github}" >&2
fi
repo=$(realpath "$repo")
out=${OUT:-$(mktemp -d)}; mkdir -p "$out/issues" "$out/answers"
python3 - "$tasks" "$out/issues" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    open(f"{sys.argv[2]}/{t['instance_id']}.txt", "w").write(t["problem_statement"])
    print(t["instance_id"], t["base_commit"], file=open(f"{sys.argv[2]}/{t['instance_id']}.rev", "w"))
EOF
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)" | tee "$out/machine.txt"
table="$out/calls.tsv"
printf 'row\tbuild\twall_s\tuser_s\tsys_s\tstatus\tanswer\n' > "$table"
for issue in "$out"/issues/*.txt; do
  row=$(basename "$issue" .txt); rev=$(cut -d' ' -f2 "${issue%.txt}.rev")
  for round in $(seq "$rounds"); do
    for build in old new; do
      bin=$old; [ $build = new ] && bin=$new
      ans="$out/answers/$row.$build.$round.json"
      start=$(date +%s.%N)
      set +e
      /usr/bin/time -f '%U %S' -o "$out/time" "$bin" localize --config "$config" --repo "$repo" --rev "$rev" \
        --issue "$issue" --json --log warn > "$ans" 2> "$out/answers/$row.$build.$round.err"
      status=$?
      set -e
      wall=$(echo "$(date +%s.%N) - $start" | bc)
      read -r user sys < <(tail -1 "$out/time")
      # The answer without its cost: the same episode gives the same digest.
      digest=$(python3 -c 'import json,sys,hashlib
try: d=json.load(open(sys.argv[1]))
except Exception: print("-"); sys.exit()
d.pop("cost", None); print(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12])' "$ans")
      printf '%s\t%s\t%.2f\t%s\t%s\t%s\t%s\n' "$row" $build "$wall" "$user" "$sys" $status "$digest" | tee -a "$table"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"
python3 - "$table" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
ok = {r["row"] for r in rows if r["status"] == "0"}
both = sorted(x for x in ok if all(r["status"] == "0" for r in rows if r["row"] == x))
print(f"rows answered by both builds: {len(both)} of {len({r['row'] for r in rows})}")
for build in ("old", "new"):
    walls = [float(r["wall_s"]) for r in rows if r["build"] == build and r["row"] in both]
    cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rows if r["build"] == build and r["row"] in both]
    if not walls:
        continue
    q = statistics.quantiles(walls, n=4) if len(walls) > 1 else walls * 3
    print(f"{build}: median wall {statistics.median(walls):.2f} s over {len(walls)} calls (min {min(walls):.2f}, quartiles {q[0]:.2f} / {q[2]:.2f}, max {max(walls):.2f}); median CPU (user+sys) {statistics.median(cpu):.2f} s")
per_row = {}
for r in rows:
    per_row.setdefault((r["row"], r["build"]), []).append(float(r["wall_s"]))
for x in both:
    o, n = statistics.median(per_row[(x, "old")]), statistics.median(per_row[(x, "new")])
    print(f"  {x}: old {o:.2f} s, new {n:.2f} s, {o / n:.2f}x")
same = all(len({r["answer"] for r in rows if r["row"] == x}) == 1 for x in both)
print("answers (files, functions, evidence) identical across builds and rounds:", same)
EOF
echo "table: $table"
