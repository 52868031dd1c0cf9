#!/usr/bin/env bash
# OpenMPI and libclang (rsmpi's bindings) from Debian, for `--features mpi`:
# installs what is missing (as root, as on CI); prints the MPI version.
set -euo pipefail
need=()
command -v mpirun >/dev/null || need+=(openmpi-bin)
[ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || [ -e /usr/include/mpi.h ] || need+=(libopenmpi-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ "${#need[@]}" -gt 0 ]; then
  echo "== apt-get install ${need[*]}" >&2
  [ "$(id -u)" = 0 ] || { echo "install-mpi: need ${need[*]} (apt-get install as root)" >&2; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
mpirun --version | head -n 1 >&2
