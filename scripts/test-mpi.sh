#!/usr/bin/env bash
# The data-parallel tests (docs/data-parallel.md): installs OpenMPI and
# libclang from Debian when missing (root, as on CI), builds `fusegrpo` with
# `--features mpi`, then runs the e2e tests of tests/tests/suite/mpi.rs,
# which start it under `mpirun -n 2 --oversubscribe`. Those tests are
# `#[ignore]`d in the README's test command; here they run with `--ignored`
# from the end-to-end suite's test binary that command built (found through
# `cargo test --no-run`, so nothing is compiled twice). .ci/run calls it
# after the README's test command. The binary left in target/release is the
# MPI build (a plain `cargo build --release` makes the default one again).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
scripts/install-mpi.sh
# The suite's binary first: `cargo test` builds `fusegrpo` again without MPI.
echo "== the end-to-end suite's test binary (cargo test --workspace --release --no-run)"
suite=$(cargo test --workspace --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "suite" \
            and m["manifest_path"].endswith("tests/Cargo.toml") and m.get("executable"):
        print(m["executable"])')
[ -x "$suite" ] || { echo "test-mpi: the end-to-end suite's test binary was not found" >&2; exit 1; }
echo "$suite"
echo "== cargo build --release --features mpi --bin fusegrpo"
cargo build --release --features mpi --bin fusegrpo
echo "== the data-parallel tests under mpirun"
# From the package's folder, as `cargo test` runs it (the tests' relative paths).
(cd tests && "$suite" mpi:: --ignored --nocapture --test-threads 1)
