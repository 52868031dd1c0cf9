#!/usr/bin/env bash
# The headers the `cudnn` feature compiles against (kernels/cudnn/sdpa.cpp),
# without a cuDNN install: NVIDIA's cudnn-frontend (header-only C++, PyPI
# wheel nvidia-cudnn-frontend) and cuDNN 9's C headers (cudnn*.h, from the
# ~540 MB wheel nvidia-cudnn-cu13, of which only include/ is kept). Pinned
# versions, sha256-checked, downloaded once into ~/.cache/fusegrpo/cudnn
# (FUSEGRPO_CUDNN_HEADERS overrides); a second run only prints. Nothing is
# linked at build time: libcudnn.so.9 is opened when the binary first runs
# attention on a GPU (docs/gpu.md, "cuDNN attention").
#
# Prints, on stdout, the environment kernels/build.rs reads:
#
#   eval "$(scripts/cudnn-headers.sh)"   # CUDNN_FRONTEND_INCLUDE, CUDNN_INCLUDE
set -euo pipefail

dest="${FUSEGRPO_CUDNN_HEADERS:-$HOME/.cache/fusegrpo/cudnn}"
python="${FUSEGRPO_PYTHON:-$(command -v python3.11 || command -v python3)}"
# name==version, the wheel's file name, its sha256.
frontend=(nvidia-cudnn-frontend==1.32.0
  nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
  c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0)
cudnn=(nvidia-cudnn-cu13==9.27.0.42
  nvidia_cudnn_cu13-9.27.0.42-py3-none-manylinux_2_27_x86_64.whl
  9677e76f21862eb5da7ee5ed69d544738b2d8b5c3ce7e5ec125c5592e6cdbdc8)
log() { echo "cudnn-headers: $*" >&2; }

# fetch NAME==VERSION FILE SHA256 INCLUDE_PREFIX OUT: the wheel's include/
# files (below INCLUDE_PREFIX in the wheel) into OUT/include.
fetch() {
  local pin="$1" file="$2" sha="$3" prefix="$4" out="$5" tmp
  if [ -f "$out/.sha256" ] && [ "$(cat "$out/.sha256")" = "$sha" ]; then return 0; fi
  tmp="$(mktemp -d)"
  log "downloading $pin (only its headers are kept)"
  # The wheel for CPython 3.11 on manylinux x86-64, whatever Python runs pip:
  # the headers are the same in every one of its wheels.
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --index-url https://pypi.org/simple -d "$tmp" "$pin" >&2
  [ -f "$tmp/$file" ] || { log "pip did not fetch $file (got: $(ls "$tmp"))"; rm -rf "$tmp"; exit 1; }
  echo "$sha  $tmp/$file" | sha256sum -c --quiet - || { log "sha256 mismatch for $file"; rm -rf "$tmp"; exit 1; }
  rm -rf "$out"
  mkdir -p "$out"
  # Python's zipfile, not unzip (a clean machine may lack it): the files under $prefix only.
  "$python" - "$tmp/$file" "$prefix" "$tmp" <<'PY'
import sys, zipfile
wheel, prefix, dest = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3]
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith(prefix)])
PY
  mv "$tmp/$prefix" "$out/include"
  rm -rf "$tmp"
  echo "$sha" > "$out/.sha256"
}

fetch "${frontend[@]}" include "$dest/frontend"
fetch "${cudnn[@]}" nvidia/cudnn/include "$dest/cudnn"
[ -f "$dest/frontend/include/cudnn_frontend.h" ] || { log "no cudnn_frontend.h in $dest/frontend/include"; exit 1; }
[ -f "$dest/cudnn/include/cudnn.h" ] || { log "no cudnn.h in $dest/cudnn/include"; exit 1; }
log "cudnn-frontend ${frontend[0]#*==}, cuDNN ${cudnn[0]#*==} headers in $dest"

cat <<ENV
export CUDNN_FRONTEND_INCLUDE="$dest/frontend/include"
export CUDNN_INCLUDE="$dest/cudnn/include"
ENV
