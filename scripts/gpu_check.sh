#!/usr/bin/env bash
# The checks that need a CUDA device, as one script for a machine lent with one (under 8 minutes): the CUDA tests
# (dispatch, make_batch on the device, cache_position on the device, a tuned call with CUDA tensors, stock against
# patched) and the tuned-call benchmark. Needs the project's .venv (bash scripts/setup.sh). Without CUDA the tests
# skip and this script says so.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
out="${1:-$root/gpu-check}"
mkdir -p "$out"
cd "$root"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda:", torch.cuda.is_available(),
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' | tee "$out/device.txt"
timeout 300 "$py" -m pytest -q -rs tests/cuda 2>&1 | tee "$out/cuda_tests.txt"
PYTHONPATH="$root/tests/fixtures/tensorrt_stub${PYTHONPATH:+:$PYTHONPATH}" \
    timeout 240 "$py" -m aitune_fast.bench.aitune_tuned --mode quick --table 2>&1 | tail -40 | tee "$out/aitune_tuned.txt"
