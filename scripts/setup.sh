#!/usr/bin/env bash
# Idempotent set-up: .venv at the repo root, the Python dependencies (torch, the reference
# aitune==0.6.0 without its heavy dependencies, test and benchmark tools), and a release build
# of the extension installed into the venv. Safe to run again and again; later runs only rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
fi
STAMP="$VENV/.deps-v2"
if [ ! -f "$STAMP" ]; then
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q torch numpy pytest hypothesis optree tabulate nvtx maturin ruff matplotlib jsonschema
    "$PY" -m pip install -q --no-deps aitune==0.6.0
    touch "$STAMP"
fi
# maturin develop rebuilds only what changed; --release because the benchmark measures this build.
VIRTUAL_ENV="$PWD/$VENV" "$VENV/bin/maturin" develop --release --quiet
"$PY" -c "import aitune_fast._core" || { echo "the extension failed to build or import" >&2; exit 1; }
