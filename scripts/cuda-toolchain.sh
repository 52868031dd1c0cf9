#!/usr/bin/env bash
# Install a CUDA 13.0 build toolchain without a CUDA install or a GPU: the
# pinned NVIDIA PyPI wheels (NCCL included) in a Python 3.11 venv, cached outside the
# repository, plus a stub driver (libcuda.so.1) so a `--features cuda` binary
# links and starts. Idempotent: a second run only re-checks and prints.
#
# Prints, on stdout, the environment to export (logs go to stderr):
#
#   eval "$(scripts/cuda-toolchain.sh)"        # -> ~/.cache/fusegrpo/cuda13
#   FUSEGRPO_CUDA_TOOLCHAIN=/some/dir scripts/cuda-toolchain.sh
#
# Never newer than CUDA 13.0: the GPU machines run driver 580. The stub
# driver's entry points all return CUDA_ERROR_STUB_LIBRARY (34); on a machine
# with a real driver, put its libcuda first (or drop the stub dir from
# LD_LIBRARY_PATH).
set -euo pipefail

dest="${FUSEGRPO_CUDA_TOOLCHAIN:-$HOME/.cache/fusegrpo/cuda13}"
# Python 3.11 when present (the wheels are py3-none: any Python 3 works).
python="${FUSEGRPO_PYTHON:-$(command -v python3.11 || command -v python3)}"
pins=(
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
  nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.0.35 nvidia-cublas==13.0.2.14
  nvidia-nccl-cu13==2.32.3
)
here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "cuda-toolchain: $*" >&2; }

# 1. The venv and the pinned wheels (skipped when the recorded pins match).
install_wheels() {
  local stamp="$dest/.pins"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ]; then return 0; fi
  log "installing ${pins[*]} into $dest/venv"
  "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || log "note: $("$python" --version 2>&1), not 3.11 (set FUSEGRPO_PYTHON to choose)"
  rm -rf "$dest/venv"
  mkdir -p "$dest"
  "$python" -m venv "$dest/venv"
  "$dest/venv/bin/python" -m pip install --quiet --no-cache-dir --no-deps \
    --only-binary=:all: --index-url https://pypi.org/simple "${pins[@]}" >&2
  echo "${pins[*]}" > "$stamp"
}

# 2. The wheels' tree as a CUDA_HOME: lib64 -> lib, unversioned .so links.
link_tree() {
  local root="$1" so base
  [ -x "$root/bin/nvcc" ] || { log "no nvcc in $root/bin"; exit 1; }
  [ -e "$root/lib64" ] || ln -s lib "$root/lib64"
  for so in "$root"/lib/lib*.so.*; do
    base="${so##*/}"; base="${base%%.so.*}.so"
    [ -e "$root/lib/$base" ] || ln -s "${so##*/}" "$root/lib/$base"
  done
}

# 3. The stub driver: every entry point cudarc resolves returns 34.
build_stub() {
  local stub="$dest/stub"
  if [ -f "$stub/libcuda.so.1" ] && [ "$stub/libcuda.so.1" -nt "$here/cuda-stub-driver.c" ]; then
    return 0
  fi
  log "building the stub driver in $stub"
  mkdir -p "$stub"
  gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$stub/libcuda.so.1" "$here/cuda-stub-driver.c"
  ln -sf libcuda.so.1 "$stub/libcuda.so"
}

# 2b. NCCL (feature `nccl`) ships in its own tree, nvidia/nccl/lib: link it
# into the CUDA tree's lib so the linker and the loader find it there too.
link_nccl() {
  local root="$1" nccl="$1/../nccl/lib/libnccl.so.2"
  [ -e "$nccl" ] || { log "no libnccl.so.2 in $(dirname "$nccl")"; exit 1; }
  ln -sf "$(cd "$(dirname "$nccl")" && pwd)/libnccl.so.2" "$root/lib/libnccl.so.2"
  ln -sf libnccl.so.2 "$root/lib/libnccl.so"
}

install_wheels
root="$("$dest/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13"
link_tree "$root"
link_nccl "$root"
build_stub
"$root/bin/nvcc" --version | tail -n 2 >&2

cat <<ENV
export CUDA_HOME="$root"
export CUDA_ROOT="$root"
export CUDA_PATH="$root"
export CUDA_COMPUTE_CAP=90
export PATH="$root/bin:\$PATH"
export LIBRARY_PATH="$root/lib:$dest/stub\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$root/lib:$dest/stub\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
