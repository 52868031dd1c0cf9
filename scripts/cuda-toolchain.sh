#!/usr/bin/env bash
# Install a CUDA build toolchain without a CUDA install or a GPU, cached
# outside the repository, plus a stub driver (libcuda.so.1) so a
# `--features cuda` binary links and starts. Idempotent: a second run only
# re-checks and prints.
#
#   CUDA 13.0 (default, driver >= 580): the pinned NVIDIA PyPI wheels (NCCL
#   included) in a Python 3.11 venv.
#   CUDA 12.4 (driver >= 550): PyPI's cu12 wheels have headers, libraries,
#   libdevice and ptxas but no nvcc, cicc or cudafe++; those come from
#   Debian's nvidia-cuda-toolkit 12.4.131 package (non-free, sha256-pinned,
#   unpacked with dpkg-deb, nothing installed system-wide). One CUDA_HOME
#   tree of links is made of both.
#
# Prints, on stdout, the environment to export (logs go to stderr):
#
#   eval "$(scripts/cuda-toolchain.sh)"        # -> ~/.cache/fusegrpo/cuda13
#   eval "$(scripts/cuda-toolchain.sh 12)"     # -> ~/.cache/fusegrpo/cuda12
#   FUSEGRPO_CUDA_TOOLCHAIN=/some/dir scripts/cuda-toolchain.sh [12|13]
#
# Switching toolkits in one target folder: cudarc follows CUDA_HOME and our
# kernels NVCC (both set here), but Candle's kernels keep their PTX: remove
# target/release/build/candle-kernels-* first (scripts/ci-cuda-build.sh
# does), or use a CARGO_TARGET_DIR per toolkit. The stub driver's entry points all return
# CUDA_ERROR_STUB_LIBRARY (34); on a machine with a real driver, put its
# libcuda first (or drop the stub dir from LD_LIBRARY_PATH).
set -euo pipefail

version="${1:-13}"
case "$version" in
  12|13) ;;
  *) echo "usage: $0 [12|13]   (the CUDA major version; default 13)" >&2; exit 2 ;;
esac
dest="${FUSEGRPO_CUDA_TOOLCHAIN:-$HOME/.cache/fusegrpo/cuda$version}"
# Python 3.11 when present (the wheels are py3-none: any Python 3 works).
python="${FUSEGRPO_PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ "$version" = 13 ]; then
  pins=(
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
    nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.0.35 nvidia-cublas==13.0.2.14
    nvidia-nccl-cu13==2.32.3
  )
else
  # 12.4, matching Debian's nvcc, but for the CCCL headers (libcu++, CUB,
  # Thrust): both 12.4 wheels of them are yanked on PyPI and lack `nv/`, so
  # 12.5's (CCCL supports every CUDA 12 compiler).
  pins=(
    nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127
    nvidia-cuda-cccl-cu12==12.5.39 nvidia-cuda-nvrtc-cu12==12.4.127
    nvidia-curand-cu12==10.3.5.147 nvidia-cublas-cu12==12.4.5.8
    nvidia-nccl-cu12==2.21.5
  )
  deb_url=https://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb
  deb_sha=cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319
fi
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

# CUDA 12: nvcc, cicc and cudafe++ from Debian's package, unpacked once.
install_deb() {
  local stamp="$dest/.deb" deb="$dest/nvidia-cuda-toolkit.deb"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$deb_sha" ]; then return 0; fi
  log "downloading $deb_url"
  rm -rf "$dest/deb"
  curl -fsSL --retry 3 -o "$deb" "$deb_url"
  echo "$deb_sha  $deb" | sha256sum -c --quiet - || { log "sha256 mismatch for $deb"; exit 1; }
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$deb" "$dest/deb"
  else
    mkdir -p "$dest/deb"
    (cd "$dest/deb" && ar p "$deb" data.tar.xz | tar -xJ)
  fi
  rm -f "$deb"
  echo "$deb_sha" > "$stamp"
}

# CUDA 12: the CUDA_HOME tree of links: Debian's compiler driver and tools,
# the wheels' headers, libraries and libdevice, and an nvcc.profile that
# points nvcc at them.
cuda12_tree() {
  local site="$1" root="$dest/root" d f
  rm -rf "$root"
  mkdir -p "$root/bin" "$root/include" "$root/lib" "$root/nvvm/bin" "$root/nvvm/libdevice" "$root/nvvm/lib64"
  ln -s lib "$root/lib64"
  ln -s "$dest/deb/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$root/bin/nvcc"
  ln -s "$dest/deb/usr/lib/nvidia-cuda-toolkit/bin/crt" "$root/bin/crt"
  ln -s "$dest/deb/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$root/nvvm/bin/cicc"
  for f in cudafe++ ptxas fatbinary nvlink bin2c nvprune cuobjdump cu++filt; do
    ln -s "$dest/deb/usr/bin/$f" "$root/bin/$f"
  done
  ln -s "$site/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$root/nvvm/libdevice/libdevice.10.bc"
  ln -s "$site/cuda_nvcc/nvvm/lib64/libnvvm.so" "$root/nvvm/lib64/libnvvm.so"
  for d in cuda_runtime cuda_nvcc cuda_cccl cuda_nvrtc curand cublas nccl; do
    for f in "$site/$d/include"/*; do
      case "${f##*/}" in __init__.py|__pycache__) continue ;; esac
      [ -e "$root/include/${f##*/}" ] || ln -s "$f" "$root/include/${f##*/}"
    done
    [ -d "$site/$d/lib" ] || continue
    for f in "$site/$d/lib"/lib*.so*; do
      ln -sf "$f" "$root/lib/${f##*/}"
    done
  done
  for f in "$root"/lib/lib*.so.*; do
    local base="${f##*/}"; base="${base%%.so.*}.so"
    [ -e "$root/lib/$base" ] || ln -s "${f##*/}" "$root/lib/$base"
  done
  cat > "$root/bin/nvcc.profile" <<'PROFILE'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib"
PROFILE
}

install_wheels
site="$("$dest/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia"
if [ "$version" = 13 ]; then
  root="$site/cu13"
  link_tree "$root"
  link_nccl "$root"
else
  install_deb
  cuda12_tree "$site"
  root="$dest/root"
fi
build_stub
"$root/bin/nvcc" --version | tail -n 2 >&2

cat <<ENV
export CUDA_HOME="$root"
export CUDA_ROOT="$root"
export CUDA_PATH="$root"
export CUDA_COMPUTE_CAP=90
export NVCC="$root/bin/nvcc"
export PATH="$root/bin:\$PATH"
export LIBRARY_PATH="$root/lib:$dest/stub\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$root/lib:$dest/stub\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
