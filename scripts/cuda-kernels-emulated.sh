#!/usr/bin/env bash
# Checks the CUDA kernels' logic without a GPU: compiles kernels/cuda/*.cu
# with g++ against a CPU emulation of the CUDA subset they use
# (kernels/cuda/emu/cuda_bf16.h) and compares every kernel, f32 and bf16,
# with double-precision references (kernels/cuda/emu/harness.cpp). Takes a
# few minutes (one OS thread per CUDA thread). Not part of CI; the GPU check
# is scripts/gpu-check.
#
#   scripts/cuda-kernels-emulated.sh [logprobs|rms|rope|attention|sampling]   # all, or one family
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -std=c++20 -O2 -pthread -w -I kernels/cuda/emu -I kernels/cuda -o "$tmp/harness" kernels/cuda/emu/harness.cpp
"$tmp/harness" "$@"
