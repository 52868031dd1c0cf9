#!/usr/bin/env bash
# The data-parallel tests (docs/data-parallel.md): installs OpenMPI and
# libclang from Debian when missing (root, as on CI), builds `fusegrpo` with
# `--features mpi`, then runs the e2e tests of tests/tests/suite/mpi.rs,
# which start it under `mpirun -n 2 --oversubscribe`. .ci/run calls it after
# the README's test command. The binary left in target/release is the MPI
# build (a plain `cargo build --release` makes the default one again).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
scripts/install-mpi.sh
echo "== cargo build --release --features mpi --bin fusegrpo"
cargo build --release --features mpi --bin fusegrpo
echo "== the data-parallel tests under mpirun"
cargo test --release -p e2e --features mpi --test suite mpi:: -- --nocapture --test-threads 1
