#!/usr/bin/env bash
# The static checks, all of which must pass: rustfmt, clippy (warnings are errors), ruff (lint and format) on
# python/ tests/ scripts/ benches/, mypy on the package, stubtest (the .pyi stubs against the built extension),
# and ShellCheck on the shell scripts. Needs the set-up of scripts/setup.sh (.venv with the extension built);
# installs the linters pinned in scripts/lint_pins.sh into .venv if they are not there yet (as setup.sh does).
# Every check runs even when an earlier one fails; the exit status is non-zero if any failed. Warm: about a minute,
# most of it stubtest.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT="$PWD"
PY="$ROOT/.venv/bin/python"
PY_PATHS=(python tests scripts benches)
SHELL_SCRIPTS=(scripts/*.sh .ci/run)
# shellcheck source=scripts/lint_pins.sh
. scripts/lint_pins.sh

if [ ! -x "$PY" ]; then
    echo "lint.sh: no $PY; run scripts/setup.sh first" >&2
    exit 1
fi
ensure_lint_pins "$PY" || { echo "lint.sh: cannot install ${VENV_LINT_PINS[*]}" >&2; exit 1; }

failed=()
check() {
    local name="$1"
    shift
    echo "--> $name"
    if ! "$@"; then
        echo "--> $name FAILED" >&2
        failed+=("$name")
    fi
}

# PYO3_PYTHON: the interpreter PyO3 configures for, as in scripts/test.sh (the same value lets clippy and
# `cargo test` share PyO3's build). Beyond the defaults: no deprecated API (PyO3's renames fail here, not at the
# next upgrade), functions fit on a screen (at most 100 lines) and every unsafe block says, in a `// SAFETY:`
# comment, what Python or torch guarantees that makes it sound.
clippy() {
    PYO3_PYTHON="$PY" cargo clippy --quiet --all-targets -- -D warnings -D deprecated \
        -W clippy::too_many_lines -W clippy::undocumented_unsafe_blocks
}

check "cargo fmt --check" cargo fmt --check
check "cargo clippy" clippy
check "ruff check" "$ROOT/.venv/bin/ruff" check --quiet "${PY_PATHS[@]}"
check "ruff format --check" "$ROOT/.venv/bin/ruff" format --check --quiet "${PY_PATHS[@]}"
# [tool.mypy] in pyproject.toml; stubtest reads it too (it does not look for it by itself).
check "shellcheck" "$ROOT/.venv/bin/shellcheck" "${SHELL_SCRIPTS[@]}"
check "mypy" "$PY" -m mypy python/aitune_fast
check "stubtest" "$PY" -m mypy.stubtest --mypy-config-file pyproject.toml \
    --allowlist scripts/stubtest_allowlist.txt aitune_fast

if [ "${#failed[@]}" -ne 0 ]; then
    printf 'lint.sh: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "lint.sh: all clean"
