#!/usr/bin/env bash
# CI's CUDA job on a machine with no GPU and no CUDA install: installs the
# pinned CUDA toolchain (scripts/cuda-toolchain.sh: 13.0 by default, 12.4
# with --cuda 12, cached in ~/.cache/fusegrpo/cuda<N>), builds `fusegrpo`
# with `--features cuda,nccl,mpi,cudnn` (candle's CUDA backend and our
# kernels/cuda/*.cu as PTX, NCCL's gradient sums, MPI ranks; OpenMPI from
# Debian via scripts/install-mpi.sh; cuDNN's fused attention through the
# shim kernels/cudnn/sdpa.cpp, headers from scripts/cudnn-headers.sh), then
# starts the binary with the stub driver and asserts that
#   0. NCCL and MPI are linked in, and the CUDA libraries of that major
#      version (ldd); every PTX module embedded is of that toolkit's PTX ISA
#      (8.4 for CUDA 12.4: a 12.x driver cannot load 9.x PTX); the cuDNN
#      shim is in and libcudnn is not linked (it is opened at run time),
#   1. it starts (`--help`),
#   2. `--device cuda` fails with a clear message (stub driver, `--device cpu`),
#      and so does `selftest --device cuda`; `kernels status` names the
#      attention that runs (cuDNN's where it takes the call) and where
#      libcudnn was looked for, and a bad FUSEGRPO_ATTENTION is named,
#   3. the CPU path still works in the CUDA build (init-tiny, score, generate).
# One target folder serves both toolkits: cudarc and our kernels rebuild
# when CUDA_HOME/NVCC change, and Candle's kernels' build output is removed
# when the last CUDA build here was of the other version (they would keep
# their PTX); check 0 catches any PTX left of the other toolkit. With --clean it deletes its build output afterwards
# (CI's disk is small). With --fast it builds the `ci-cuda` profile
# (Cargo.toml: release without optimisation, into target/ci-cuda): what CI
# checks is that the CUDA path compiles, links and starts, not its speed. It
# needs none of the tests' release build (CI deletes that first, for disk)
# and is about as fast as a release build reusing it (547 vs 582 s here:
# nvcc on Candle's kernels is ~490 s of either). A binary to run on a GPU
# comes from the default (release) build.
#
#   scripts/ci-cuda-build.sh [--cuda 12|13] [--fast] [--clean]
set -euo pipefail
cd "$(dirname "$0")/.."
clean=0
cuda=13
profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --clean) clean=1; shift ;;
    --fast) profile=ci-cuda; shift ;;
    --cuda) cuda="${2:-}"; shift 2 || true ;;
    *) echo "usage: $0 [--cuda 12|13] [--fast] [--clean]" >&2; exit 2 ;;
  esac
done
case "$cuda" in
  12) ptx_isa="8.4" ;;
  13) ptx_isa="9.0" ;;
  *) echo "usage: $0 [--cuda 12|13] [--fast] [--clean]" >&2; exit 2 ;;
esac
export CARGO_TERM_COLOR=never
target="${CARGO_TARGET_DIR:-target}"
out="$target/$profile"
start=$SECONDS
tmp_ldd=$(mktemp)

echo "== CUDA $cuda toolchain (scripts/cuda-toolchain.sh $cuda, stub driver)"
eval "$(scripts/cuda-toolchain.sh "$cuda")"

echo "== OpenMPI and libclang (features mpi, nccl)"
scripts/install-mpi.sh

echo "== cudnn-frontend and cuDNN headers (feature cudnn; scripts/cudnn-headers.sh)"
eval "$(scripts/cudnn-headers.sh)"

# Candle's kernels keep their PTX in their build folder and do not compile
# it again for another toolkit: a build made with another CUDA version goes.
stamp="$out/.cuda-toolkit"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$cuda" ]; then
  echo "== the last CUDA build here used CUDA $(cat "$stamp"): removing candle-kernels' build output"
  rm -rf "$out"/build/candle-kernels-*
fi
mkdir -p "$out"
echo "$cuda" > "$stamp"
echo "== cargo build --profile $profile --features cuda,nccl,mpi,cudnn --bin fusegrpo"
cargo build --profile "$profile" --features cuda,nccl,mpi,cudnn --bin fusegrpo
echo "cuda $cuda build: $((SECONDS - start)) s"
bin="$out/fusegrpo"
echo "== NCCL and MPI are linked in"
ldd "$bin" > "$tmp_ldd" 2>&1 || true
grep -q 'libnccl.so.2 => /' "$tmp_ldd" || { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libnccl.so.2 not resolved" >&2; exit 1; }
grep -q 'libmpi.so' "$tmp_ldd" || { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libmpi not linked" >&2; exit 1; }
grep -E 'libnccl|libmpi\.' "$tmp_ldd"
echo "== the cuDNN shim is in, libcudnn is not linked (opened at run time)"
grep -q 'libcudnn' "$tmp_ldd" && { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libcudnn is linked; it must be opened at run time" >&2; exit 1; }
grep -aq 'fg_cudnn_execute' "$bin" || { echo "ci-cuda-build: FAIL: no cuDNN shim (fg_cudnn_execute) in $bin" >&2; exit 1; }
echo "fg_cudnn_execute present; no libcudnn in ldd"
echo "== CUDA $cuda libraries and PTX ISA $ptx_isa"
grep -q "libcublas.so.$cuda => /" "$tmp_ldd" || { cat "$tmp_ldd" >&2; echo "ci-cuda-build: FAIL: libcublas.so.$cuda not linked" >&2; exit 1; }
isas=$(grep -ao '^\.version [0-9.]*' "$bin" | sort | uniq -c)
echo "$isas"
[ -n "$isas" ] || { echo "ci-cuda-build: FAIL: no PTX module found in the binary" >&2; exit 1; }
if echo "$isas" | grep -v " \.version $ptx_isa\$" | grep -q .; then
  echo "ci-cuda-build: FAIL: PTX of another ISA than $ptx_isa (CUDA $cuda) in the binary" >&2; exit 1
fi

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

echo "== cuDNN attention: which attention runs, libcudnn looked for at run time (kernels status)"
"$bin" kernels status --cuda-kernels on > "$tmp/status.txt" 2>&1 || { cat "$tmp/status.txt" >&2; fail "kernels status --cuda-kernels on"; }
expect_in "$tmp/status.txt" "attention on CUDA: cuDNN's fused attention where it takes the call"
tail -n 1 "$tmp/status.txt"
FUSEGRPO_ATTENTION=flash "$bin" kernels status --cuda-kernels on > "$tmp/status.txt" 2>&1 || true
expect_in "$tmp/status.txt" 'FUSEGRPO_ATTENTION="flash": expected "auto", "cudnn" or "kernel"'

echo "== the CPU path works in the CUDA build"
"$bin" score --model "$tmp/model" --input "$tmp/in.jsonl" --output "$tmp/cpu.jsonl" --device cpu 2> "$tmp/err.txt" \
  || { cat "$tmp/err.txt" >&2; fail "score --device cpu"; }
[ "$(grep -c '"logprobs"' "$tmp/cpu.jsonl")" = 2 ] || fail "score --device cpu: expected 2 rows in $(cat "$tmp/cpu.jsonl")"
"$bin" generate --model "$tmp/model" --input "$tmp/in.jsonl" --output "$tmp/gen.jsonl" --max-new-tokens 4 --device cpu 2> "$tmp/err.txt" \
  || { cat "$tmp/err.txt" >&2; fail "generate --device cpu"; }
[ "$(wc -l < "$tmp/gen.jsonl")" = 2 ] || fail "generate --device cpu: expected 2 rows"

echo "ci-cuda-build: OK in $((SECONDS - start)) s"
if [ "$clean" = 1 ]; then
  echo "== --clean: removing $out"
  rm -rf "$out"
fi
