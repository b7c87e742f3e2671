#!/usr/bin/env bash
# The whole test suite: set-up (scripts/setup.sh), the Rust unit tests, pytest, and the benchmark in
# smoke mode (it checks that the harness works and that both implementations agree; no timing claims).
# Every step runs even when an earlier one fails; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="$ROOT/.venv/bin/python"

bash scripts/setup.sh || { echo "test.sh: set-up failed" >&2; exit 1; }

failed=()
step() {
    local name="$1"
    shift
    echo
    echo "==> $name"
    "$@"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "==> $name FAILED (exit $rc)" >&2
        failed+=("$name")
    fi
}

# `cargo test` builds the crate without `extension-module`, so its test binaries link libpython and run
# an embedded interpreter.  PYO3_PYTHON points PyO3 at the venv's interpreter (the one maturin builds
# against; the same value also keeps cargo from rebuilding PyO3 for every switch).  Cargo sets no rpath,
# so the loader would find the first libpython3.x.so on its search path, possibly the system's build of
# the same minor version; LD_LIBRARY_PATH names the venv interpreter's own library folder first.
# PYTHONPATH lets embedded tests import the venv's packages (torch) and the package sources.
rust_tests() {
    local libdir site
    libdir="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')"
    site="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    PYO3_PYTHON="$PY" \
        LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        PYTHONPATH="$ROOT/python:$site${PYTHONPATH:+:$PYTHONPATH}" \
        cargo test --no-default-features --quiet
}

step "cargo test (Rust unit tests)" rust_tests
step "pytest" "$PY" -m pytest -q tests
step "benchmark smoke run" "$PY" -m aitune_fast.bench --smoke

echo
if [ "${#failed[@]}" -ne 0 ]; then
    printf 'test.sh: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "test.sh: all passed"
