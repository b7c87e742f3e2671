#!/usr/bin/env bash
# Build aitune_fast's wheel from a clean clone of the committed HEAD, as a user would, and check it
# end to end in fresh virtual environments:
#   - the wheel (scripts/inspect_wheel.py): its interpreter and manylinux tags, the LICENSE, torch
#     declared, nothing vendored, an extension that needs only the C runtime and has no RPATH/RUNPATH;
#   - installed with its `bench` extra next to a given torch: it imports from the venv, not the sources;
#     runtime_info() names the fast reader ("dlpack"; "python" expected only below torch 2.10);
#     AITUNE_FAST_TENSOR_READER=python forces the fallback; the benchmark smoke run passes against the
#     reference (aitune 0.6.0, installed --no-deps as the README says).
#
#   bash scripts/check_wheel.sh                      # the default matrix below (what CI runs)
#   bash scripts/check_wheel.sh 3.12:torch==2.9.*:maturin 3.11:torch:pip   # PYTHON:TORCH_SPEC:BUILD ...
#
# BUILD is `pip` (`pip wheel .`: PEP 517, isolated build, no flags) or `maturin` (`maturin build
# --release -i PYTHON`). Each interpreter is found in pyenv's versions (or as pythonX.Y on PATH).
# Caches, outside the repository: $AITUNE_FAST_CACHE (default ~/.cache/aitune_fast): tools/ (a venv with
# uv, maturin, auditwheel), uv/ (uv's package cache: torch is downloaded once, about 3 GB per torch
# version, then every venv is made afresh from it by hard links in seconds), venvs/ (this run's venvs,
# re-created every run). The newest torch is looked up on PyPI on every run; offline, the cached one is
# used and the script says so. The clone and the build are always fresh.
# Exit status: 0 when every check passed; 1 otherwise. It never skips a check silently.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${AITUNE_FAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aitune_fast}"
DEFAULT_MATRIX=(
    "3.10:torch==2.10.*:pip"  # the oldest torch with the DLPack exchange API, the oldest Python; pip wheel .
    "3.13:torch:maturin"      # the newest torch on PyPI, the newest Python; maturin build --release
)
MATRIX=("$@")
[ "${#MATRIX[@]}" -eq 0 ] && MATRIX=("${DEFAULT_MATRIX[@]}")
BENCH_REQS=(tabulate optree matplotlib nvtx)  # what `aitune_fast[bench]` and the reference need

T0=$SECONDS
say() { printf '[check_wheel %4ds] %s\n' "$((SECONDS - T0))" "$*"; }
die() {
    printf '\n[check_wheel] FAILED: %s\n' "$*" >&2
    exit 1
}
loud() { printf '\n!!!!!!!!!! check_wheel: %s !!!!!!!!!!\n\n' "$*" >&2; }

find_python() { # X.Y -> path of a CPython X.Y interpreter
    local v="$1" p root="${PYENV_ROOT:-$HOME/.pyenv}"
    for p in $(ls -d "$root"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V -r) "$(command -v "python$v" || true)"; do
        if [ -n "$p" ] && "$p" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# --- tools: uv (venvs from a local cache), maturin, auditwheel -------------------------------------
TOOLS="$CACHE/tools"
TOOLS_STAMP="$TOOLS/.stamp-v1"
export UV_CACHE_DIR="$CACHE/uv"
mkdir -p "$CACHE"
if [ ! -f "$TOOLS_STAMP" ] || ! "$TOOLS/bin/python" -c "import elftools" 2>/dev/null ||
    ! "$TOOLS/bin/uv" --version >/dev/null 2>&1 || ! "$TOOLS/bin/maturin" --version >/dev/null 2>&1; then
    say "creating the tools venv $TOOLS"
    rm -rf "$TOOLS"
    TOOL_PY="$(find_python 3.12 || find_python 3.11 || command -v python3)"
    "$TOOL_PY" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q "uv>=0.5" "maturin>=1.9,<2" auditwheel ||
        die "cannot install the tools (uv, maturin, auditwheel) from PyPI"
    touch "$TOOLS_STAMP"
fi
UV="$TOOLS/bin/uv"

# --- a clean clone of the committed HEAD ---------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/aitune_fast_wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
SHA="$(git -C "$ROOT" rev-parse HEAD)"
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
    loud "the working tree has uncommitted changes: they are NOT in this check (it builds commit ${SHA:0:10})"
fi
SRC="$WORK/src"
git clone -q --no-checkout "$ROOT" "$SRC"
git -C "$SRC" checkout -q --detach "$SHA"
say "clean clone of ${SHA:0:10} in $SRC"

failed=()
for entry in "${MATRIX[@]}"; do
    IFS=: read -r PYV TORCH_SPEC BUILD <<<"$entry"
    NAME="py$PYV-$(echo "$TORCH_SPEC" | sed -e 's/[=<>!~,]\{1,\}/-/g; s/\*/x/g; s/[^A-Za-z0-9.-]/_/g')-$BUILD"
    echo
    say "=== $NAME: Python $PYV, $TORCH_SPEC, built by $BUILD"
    set +e # the subshell runs with -e (a subshell tested by || or if would not), its status read after
    (
        set -euo pipefail
        PY="$(find_python "$PYV")" || die "no CPython $PYV found (pyenv versions or python$PYV on PATH)"
        TAG="cp${PYV/./}"
        VENV="$CACHE/venvs/$NAME"
        rm -rf "$VENV"
        mkdir -p "$CACHE/venvs"
        "$UV" venv -q --seed -p "$PY" "$VENV"
        VPY="$VENV/bin/python"
        # torch and the bench requirements, from uv's cache (online first: "torch" means the newest)
        if ! "$UV" pip install -q -p "$VPY" "$TORCH_SPEC" "${BENCH_REQS[@]}"; then
            loud "PyPI unreachable? installing $TORCH_SPEC from the local cache only (may not be the newest)"
            "$UV" pip install -q --offline -p "$VPY" "$TORCH_SPEC" "${BENCH_REQS[@]}" ||
                die "cannot install $TORCH_SPEC, even from the cache"
        fi
        # the reference, as the README says (aitune 0.6.0 declares Python < 3.13; its modules run on 3.13)
        "$VPY" -m pip install -q --no-deps --ignore-requires-python aitune==0.6.0 ||
            die "cannot install the reference aitune==0.6.0"
        say "venv $VENV: $("$VPY" -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")' 2>/dev/null)"

        OUT="$WORK/wheels/$NAME"
        export CARGO_TARGET_DIR="$WORK/target-$NAME"  # a fresh build: nothing cached from earlier runs
        case "$BUILD" in
            pip) (cd "$WORK" && "$VPY" -m pip wheel -q --no-deps -w "$OUT" "$SRC") ;;
            maturin) "$TOOLS/bin/maturin" build --release -i "$VPY" -o "$OUT" -m "$SRC/Cargo.toml" 2>&1 | sed '/^ *Compiling /d' ;;
            *) die "unknown build $BUILD (pip or maturin)" ;;
        esac
        WHL="$(ls "$OUT"/aitune_fast-*.whl)"
        say "built $(basename "$WHL")"
        "$TOOLS/bin/python" "$SRC/scripts/inspect_wheel.py" "$WHL" --python-tag "$TAG" --repo "$SRC" \
            --auditwheel "$TOOLS/bin/auditwheel" || die "the wheel has problems (above)"

        # the wheel with its bench extra: its dependencies must already be met by what is installed
        "$VPY" -m pip install -q "$WHL[bench]" || die "pip cannot install the wheel"
        cd "$WORK" # away from the sources: the installed package is what runs
        "$VPY" - "$VENV" "$(basename "$WHL")" <<'EOF' || die "the installed wheel misbehaves (above)"
import json, os, sys
venv, wheel = sys.argv[1], sys.argv[2]
import torch
import aitune_fast
from aitune_fast import SampleMetadata

info = aitune_fast.runtime_info()
print("  runtime_info():", json.dumps(info))
assert os.path.realpath(aitune_fast.__file__).startswith(os.path.realpath(venv)), aitune_fast.__file__
assert info["version"] == aitune_fast.__version__ == wheel.split("-")[1], (info, wheel)
assert info["torch"] == torch.__version__ and info["python"] == sys.version.split()[0], info
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
expected = {"dlpack", "stable_abi"} if (major, minor) >= (2, 10) else {"python"}
assert info["tensor_reader"] in expected, f"torch {torch.__version__}: reader {info['tensor_reader']}, expected {expected}"
x = {"input_ids": torch.ones(1, 7, dtype=torch.int64), "cache_position": torch.tensor([5]), "scale": 0.5}
m = SampleMetadata.from_inputs(x, strict=True)
assert {m: 1}[SampleMetadata.from_inputs(dict(x), strict=True)] == 1
assert SampleMetadata.from_json(m.to_json()) == m
print("  ok    imports from the venv; reader", info["tensor_reader"], "as expected; from_inputs/dispatch/to_json work")
EOF
        AITUNE_FAST_TENSOR_READER=python "$VPY" -c \
            'import aitune_fast as a; r = a.runtime_info()["tensor_reader"]; assert r == "python", r' ||
            die "AITUNE_FAST_TENSOR_READER=python does not force the python reader"
        say "  ok    AITUNE_FAST_TENSOR_READER=python forces the fallback"
        "$VPY" -m aitune_fast.bench --smoke --no-progress --out "$WORK/smoke-$NAME" >"$WORK/smoke-$NAME.log" 2>&1 || {
            cat "$WORK/smoke-$NAME.log"
            die "the benchmark smoke run failed"
        }
        grep -E '^ *(workload|llm_decode +dispatch)' "$WORK/smoke-$NAME.log" | sed 's/^/  /' || true
        say "  ok    benchmark smoke run (python -m aitune_fast.bench --smoke) from the installed wheel"
    )
    rc=$?
    set -e
    [ "$rc" -eq 0 ] || failed+=("$NAME")
done

echo
if [ "${#failed[@]}" -ne 0 ]; then
    printf '[check_wheel] FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
say "all passed: ${MATRIX[*]}"
