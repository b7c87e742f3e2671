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
# A first set-up downloads and unpacks torch (a CUDA build) and the test dependencies: about 8 GiB in .venv, more
# while pip works. Say so up front where the disk is short, so that pip's "No space left on device" is not a puzzle.
NEEDED_GIB=10
if [ ! -f "$STAMP" ]; then
    FREE_GIB="$(df -Pk "$VENV" | awk 'NR == 2 { print int($4 / 1048576) }')"
    if [ "${FREE_GIB:-0}" -lt "$NEEDED_GIB" ]; then
        echo "setup.sh: only ${FREE_GIB} GiB free where .venv lives; a first set-up needs about ${NEEDED_GIB} GiB" \
            "(torch and the test dependencies). Free some space if pip fails with 'No space left on device'." >&2
    fi
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q torch numpy pytest hypothesis optree tabulate nvtx maturin matplotlib jsonschema
    "$PY" -m pip install -q --no-deps aitune==0.6.0
    touch "$STAMP"
fi
# The linters at the versions scripts/lint.sh runs (ruff, mypy, shellcheck), pinned in scripts/lint_pins.sh.
# shellcheck source=scripts/lint_pins.sh
. scripts/lint_pins.sh
ensure_lint_pins "$PY" || { echo "cannot install the linters ${VENV_LINT_PINS[*]}" >&2; exit 1; }
# AITune's own dependencies (what PyPI serves: not tensorrt/torch-tensorrt), so the integration tests can
# `import aitune.torch` (with a stand-in tensorrt from tests/fixtures/). torch is pinned to the installed
# version so pip never swaps it.
AITUNE_STAMP="$VENV/.aitune-deps-v1"
if [ ! -f "$AITUNE_STAMP" ]; then
    TORCH_PIN="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
    CONSTRAINTS="$VENV/.torch-constraint.txt"
    echo "torch==$TORCH_PIN" > "$CONSTRAINTS"
    "$PY" -m pip install -q -c "$CONSTRAINTS" "nvidia-modelopt[onnx]>=0.33.0" "torchao>=0.12" "onnxscript>=0.2.0" \
        "onnx-ir>=0.1.11" "pandas>=2.3" psutil "wrapt~=2.0" "autowrapt>=1.0" "dill>=0.3.8" nvidia-ml-py \
        requests huggingface_hub
    touch "$AITUNE_STAMP"
fi
# transformers and diffusers for the integration tests with real models (tests/integration/test_hf_models.py), at
# the versions those tests were written against: transformers 4.57 is the last release whose models take the
# `cache_position` by which AITune 0.6.0 tells an LLM's prefill from its decode (5.x dropped it), diffusers 0.39
# the newest that installs beside it (later ones need huggingface_hub 1.x, transformers 4.57 one below 1.0).
# torch pinned as above.
HF_STAMP="$VENV/.hf-deps-v1"
if [ ! -f "$HF_STAMP" ]; then
    CONSTRAINTS="$VENV/.torch-constraint.txt"
    if [ ! -f "$CONSTRAINTS" ]; then
        "$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' > "$CONSTRAINTS"
    fi
    "$PY" -m pip install -q -c "$CONSTRAINTS" transformers==4.57.6 tokenizers==0.22.2 diffusers==0.39.0
    touch "$HF_STAMP"
fi
# The documentation site's tools: pyproject.toml's `docs` dependency group (mkdocs-material, mkdocstrings), pinned
# there; reinstalled when those pins change. tests/packaging/test_docs.py builds the site with them.
DOCS_STAMP="$VENV/.docs-group"
DOCS_PINS="$(grep '^docs = ' pyproject.toml)"
if [ "$(cat "$DOCS_STAMP" 2>/dev/null)" != "$DOCS_PINS" ]; then
    "$PY" -m pip install -q "pip>=25.1" # the first pip that installs dependency groups (--group)
    "$PY" -m pip install -q --group docs
    echo "$DOCS_PINS" >"$DOCS_STAMP"
fi
# A browser for the documentation's headless test: Debian's chromium, installed with apt-get where none is on PATH
# and this runs as root; elsewhere the test skips and says why.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >/dev/null ||
            echo "setup.sh: apt-get could not install chromium: the documentation's browser test will skip" >&2
    else
        echo "setup.sh: no Chromium on PATH (as root: apt-get install chromium): the documentation's browser test will skip" >&2
    fi
fi
# The release tools (scripts/release_tools.sh: maturin, zig, auditwheel, actionlint), kept in the cache folder and
# made once; tests/packaging/test_packaging.py lints the release workflow with actionlint.
. scripts/release_tools.sh
ensure_tools || { echo "cannot install the release tools (scripts/release_tools.sh)" >&2; exit 1; }
# maturin develop rebuilds only what changed; --release because the benchmark measures this build.
VIRTUAL_ENV="$PWD/$VENV" "$VENV/bin/maturin" develop --release --quiet
"$PY" -c "import aitune_fast._core" || { echo "the extension failed to build or import" >&2; exit 1; }
