#!/usr/bin/env bash
# CI's CUDA job on a machine with no GPU and no CUDA install: installs the
# pinned CUDA 13.0 toolchain (scripts/cuda-toolchain.sh, cached in
# ~/.cache/fusegrpo/cuda13), builds `fusegrpo` with `--features cuda,nccl,mpi`
# (candle's CUDA backend and our kernels/cuda/*.cu as PTX, NCCL's gradient
# sums, MPI ranks; OpenMPI from Debian via scripts/install-mpi.sh), then
# starts the binary with the stub driver and asserts that
#   0. NCCL and MPI are linked in (ldd),
#   1. it starts (`--help`),
#   2. `--device cuda` fails with a clear message (stub driver, `--device cpu`),
#      and so does `selftest --device cuda`,
#   3. the CPU path still works in the CUDA build (init-tiny, score, generate).
# With --clean it deletes its build output afterwards (CI's disk is small).
#
#   scripts/ci-cuda-build.sh [--clean]
set -euo pipefail
cd "$(dirname "$0")/.."
clean=0
for arg in "$@"; do
  case "$arg" in
    --clean) clean=1 ;;
    *) echo "usage: $0 [--clean]" >&2; exit 2 ;;
  esac
done
export CARGO_TERM_COLOR=never
target="${CARGO_TARGET_DIR:-target}"
start=$SECONDS
tmp_ldd=$(mktemp)

echo "== CUDA 13.0 toolchain (PyPI wheels + stub driver)"
eval "$(scripts/cuda-toolchain.sh)"

echo "== OpenMPI and libclang (features mpi, nccl)"
scripts/install-mpi.sh

echo "== cargo build --release --features cuda,nccl,mpi --bin fusegrpo"
cargo build --release --features cuda,nccl,mpi --bin fusegrpo
echo "cuda build: $((SECONDS - start)) s"
bin="$target/release/fusegrpo"
echo "== NCCL and MPI are linked in"
ldd "$bin" > "$tmp_ldd" 2>&1 || true
grep -q 'libnccl.so.2 => /' "$tmp_ldd" || { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libnccl.so.2 not resolved" >&2; exit 1; }
grep -q 'libmpi.so' "$tmp_ldd" || { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libmpi not linked" >&2; exit 1; }
grep -E 'libnccl|libmpi\.' "$tmp_ldd"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "ci-cuda-build: FAIL: $*" >&2; exit 1; }
expect_in() {  # expect_in FILE TEXT: FILE contains TEXT (fixed string)
  grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "expected \"$2\" in the output above"; }
}

echo "== the binary starts"
"$bin" --help > "$tmp/help.txt" || fail "fusegrpo --help exited $?"
expect_in "$tmp/help.txt" "selftest"

echo "== a tiny model and input on the CPU"
"$bin" init-tiny --out "$tmp/model" --small-vocab 512 --seed 0 > /dev/null 2>&1 || fail "init-tiny"
printf '{"ids": [1, 2, 3, 4, 5]}\n{"ids": [7, 8]}\n' > "$tmp/in.jsonl"

echo "== --device cuda is refused clearly (stub driver, no GPU)"
for cmd in score selftest; do
  set +e
  if [ "$cmd" = score ]; then
    "$bin" score --model "$tmp/model" --input "$tmp/in.jsonl" --output "$tmp/cuda.jsonl" --device cuda 2> "$tmp/err.txt"
  else
    "$bin" selftest --device cuda 2> "$tmp/err.txt"
  fi
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "$cmd --device cuda succeeded on a machine without a GPU"
  expect_in "$tmp/err.txt" "--device cuda"
  expect_in "$tmp/err.txt" "stub"
  expect_in "$tmp/err.txt" "--device cpu"
  echo "$cmd --device cuda: exit $rc: $(tail -n 1 "$tmp/err.txt")"
done

echo "== the CPU path works in the CUDA build"
"$bin" score --model "$tmp/model" --input "$tmp/in.jsonl" --output "$tmp/cpu.jsonl" --device cpu 2> "$tmp/err.txt" \
  || { cat "$tmp/err.txt" >&2; fail "score --device cpu"; }
[ "$(grep -c '"logprobs"' "$tmp/cpu.jsonl")" = 2 ] || fail "score --device cpu: expected 2 rows in $(cat "$tmp/cpu.jsonl")"
"$bin" generate --model "$tmp/model" --input "$tmp/in.jsonl" --output "$tmp/gen.jsonl" --max-new-tokens 4 --device cpu 2> "$tmp/err.txt" \
  || { cat "$tmp/err.txt" >&2; fail "generate --device cpu"; }
[ "$(wc -l < "$tmp/gen.jsonl")" = 2 ] || fail "generate --device cpu: expected 2 rows"

echo "ci-cuda-build: OK in $((SECONDS - start)) s"
if [ "$clean" = 1 ]; then
  echo "== --clean: removing $target/release"
  rm -rf "$target/release"
fi
