#!/usr/bin/env bash
# Runs the documented commands: every fenced block of README.md and
# docs/*.md whose info string is exactly `bash checked`, each in its own
# bash (-e -o pipefail) from the repository root, under a timeout. A block
# fails the script, named by its file and line; the others still run.
#
#   scripts/check-docs.sh                # every checked block
#   scripts/check-docs.sh docs/gpu.md    # the blocks of some files
#   scripts/check-docs.sh --list         # where the blocks are, nothing run
#
# `fusegrpo` in a block (and `target/release/fusegrpo`) runs $FUSEGRPO_BIN
# (default target/release/fusegrpo: build it first, `cargo build --release
# -p fusegrpo`). A block whose first lines say `# needs: PATH...` (paths
# from the repository root, a leading ~/ read as $HOME/, e.g.
# ~/.cache/fusegrpo/smollm2-135m-instruct/config.json) is skipped,
# with a `skipped:` line naming what is missing, when one of them is not
# there; skips are counted in the summary, never passed silently.
# CHECK_DOCS_TIMEOUT: seconds per block (default 300).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

list=0
files=()
for a in "$@"; do
  case "$a" in
    --list) list=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) files+=("$a") ;;
  esac
done
if [ ${#files[@]} -eq 0 ]; then
  files=(README.md docs/*.md)
fi

bin=${FUSEGRPO_BIN:-target/release/fusegrpo}
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
timeout_s=${CHECK_DOCS_TIMEOUT:-300}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Each block into $work/blocks/N.sh, with "file:line" (the fence's line) in N.where.
mkdir -p "$work/blocks" "$work/bin"
n=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "check-docs: $f: no such file" >&2; exit 2; }
  n=$(awk -v f="$f" -v dir="$work/blocks" -v n="$n" '
    inblock && /^```[ \t]*$/ { inblock = 0; close(out); next }
    inblock { print > out; next }
    /^```bash checked[ \t]*$/ { n++; inblock = 1; out = dir "/" n ".sh"; printf "%s:%d\n", f, NR > (dir "/" n ".where"); close(dir "/" n ".where"); printf "" > out; next }
    END { if (inblock) { printf "check-docs: %s: a `bash checked` block never closes\n", f > "/dev/stderr"; exit 3 } print n }
  ' "$f") || exit 2
done

if [ "$list" = 1 ]; then
  for i in $(seq 1 "$n"); do echo "$(cat "$work/blocks/$i.where"): $(grep -m1 -v '^#' "$work/blocks/$i.sh" || true)"; done
  exit 0
fi
if [ "$n" = 0 ]; then
  echo "check-docs: no \`bash checked\` block in ${files[*]}"
  exit 0
fi
if [ ! -x "$bin" ]; then
  echo "check-docs: $bin is not there: build it first (cargo build --release -p fusegrpo) or point FUSEGRPO_BIN at a build" >&2
  exit 2
fi
# `fusegrpo` on the PATH of every block is $FUSEGRPO_BIN.
ln -s "$bin" "$work/bin/fusegrpo"

ok=0 failed=0 skipped=0
failures=()
for i in $(seq 1 "$n"); do
  where=$(cat "$work/blocks/$i.where")
  block="$work/blocks/$i.sh"
  missing=()
  while IFS= read -r line; do
    case "$line" in
      "# needs:"*) for p in ${line#"# needs:"}; do [ -e "${p/#\~\//$HOME/}" ] || missing+=("$p"); done ;;
      "#"*|"") ;;
      *) break ;;
    esac
  done < "$block"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "skipped: $where: needs ${missing[*]}"
    skipped=$((skipped + 1))
    continue
  fi
  sed -i 's#\(^\|[^[:alnum:]_/.-]\)\(\./\)\{0,1\}target/release/fusegrpo\b#\1fusegrpo#g' "$block"
  start=$(date +%s.%N)
  PATH="$work/bin:$PATH" FUSEGRPO_BIN="$bin" timeout "$timeout_s" bash -e -o pipefail "$block" > "$work/out" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 0 ]; then
    echo "ok: $where (${secs} s)"
    ok=$((ok + 1))
  else
    why="exit $rc"
    [ "$rc" = 124 ] && why="timed out after ${timeout_s} s"
    echo "FAIL: $where: $why; the block's last output:"
    tail -n 20 "$work/out" | sed 's/^/    /'
    failed=$((failed + 1))
    failures+=("$where")
  fi
done

echo "check-docs: $ok ok, $failed failed, $skipped skipped (of $n blocks)"
if [ "$failed" -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
  exit 1
fi
