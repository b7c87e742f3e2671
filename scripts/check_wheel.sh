#!/usr/bin/env bash
# The release artifacts as users get them, checked end to end: a clean clone of the committed HEAD runs
# scripts/build_wheels.sh (the sdist and the manylinux_2_28 wheels for CPython 3.10-3.13), then
#   - every wheel (scripts/inspect_wheel.py): its interpreter and manylinux tags (glibc 2.28 or older), the
#     ELF's highest GLIBC symbol version (<= 2.28), the LICENSE, torch declared, nothing vendored, an extension
#     that needs only the C runtime and has no RPATH/RUNPATH, `auditwheel show` agreeing with the tag;
#   - the sdist: what a build from it needs is in it;
#   - the release workflow (.github/workflows/) passes actionlint;
#   - installed into fresh venvs next to a given torch: a wheel (by the README's wheel install block, as written),
#     the clean clone itself (the README's install from a clone, as written: a plain `pip install .`, pip building
#     it with Rust through build-backend/), or the sdist (`pip install aitune_fast-VERSION.tar.gz`, built the same
#     way): scripts/wheel_smoke.py (imports from the venv, the fast reader, AITUNE_FAST_TENSOR_READER=python, the
#     benchmark smoke run against the reference, aitune 0.6.0 installed --no-deps as the docs say); for a wheel or
#     the clone, scripts/readme_check.py then runs the README's quick start and docs/aitune.md's CPU example (AITune
#     installed as that page says); for a wheel, it also installs the benchmark as docs/performance.md says (the
#     `bench` extra) and runs its tuned-module workload, whose rows must print.
#     The default matrix compiles once with pip, from the clone (what users do before a release); the sdist, which
#     pip compiles the same way from the same files, is compiled and tested by release.yml on every push, and here
#     on request (`3.13:torch:sdist`); its contents are checked here on every run.
#
#   bash scripts/check_wheel.sh                                  # the default matrix below (what CI runs)
#   bash scripts/check_wheel.sh 3.12:torch==2.9.*:wheel 3.11:torch:sdist   # PYTHON:TORCH_SPEC:wheel|clone|sdist
#
# Caches, outside the repository, under $AITUNE_FAST_CACHE (default ~/.cache/aitune_fast): tools/ and the
# build caches of build_wheels.sh (a second run for the same commit reuses its artifacts), uv/ (uv's package
# cache: torch is downloaded once, about 3 GB per torch version, then every venv is made afresh from it by hard
# links in seconds), venvs/ (this run's venvs, re-created every run). The newest torch is looked up on PyPI on
# every run; offline, the cached one is used and the script says so. The sdist is always compiled afresh.
# Exit status: 0 when every check passed; 1 otherwise. It never skips a check silently.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/release_tools.sh
. "$ROOT/scripts/release_tools.sh"
DEFAULT_MATRIX=(
    "3.10:torch==2.10.*:wheel" # the oldest torch with the DLPack exchange API, the oldest Python
    "3.13:torch:wheel"         # the newest torch on PyPI, the newest Python
    "3.13:torch:clone"         # the README's `pip install .` in a clean clone, built here with Rust
)
MATRIX=("$@")
[ "${#MATRIX[@]}" -eq 0 ] && MATRIX=("${DEFAULT_MATRIX[@]}")
BENCH_REQS=(tabulate optree matplotlib nvtx) # what `aitune_fast[bench]` and the reference need
MAX_GLIBC=2.28                               # torch's own wheels need glibc 2.28

T0=$SECONDS
say() { printf '[check_wheel %4ds] %s\n' "$((SECONDS - T0))" "$*"; }
die() {
    printf '\n[check_wheel] FAILED: %s\n' "$*" >&2
    exit 1
}
loud() { printf '\n!!!!!!!!!! check_wheel: %s !!!!!!!!!!\n\n' "$*" >&2; }

ensure_tools || die "cannot install the tools (see scripts/release_tools.sh) from PyPI"
UV="$TOOLS/bin/uv"

# --- a clean clone of the committed HEAD, and the artifacts built by its build_wheels.sh -----------------
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
DIST="$WORK/dist"
bash "$SRC/scripts/build_wheels.sh" "$DIST" || die "scripts/build_wheels.sh failed"
VERSION="$(package_version "$SRC")" # as the artifacts' names and metadata spell it (0.2.0.dev0)
SDIST="$DIST/aitune_fast-$VERSION.tar.gz"

failed=()
echo
for WHL in "$DIST"/aitune_fast-*.whl; do
    TAG="$(basename "$WHL" | cut -d- -f3)"
    "$TOOLS/bin/python" "$SRC/scripts/inspect_wheel.py" "$WHL" --python-tag "$TAG" --repo "$SRC" \
        --max-glibc "$MAX_GLIBC" --auditwheel "$TOOLS/bin/auditwheel" || failed+=("inspect $(basename "$WHL")")
done
say "$(basename "$SDIST")"
missing=()
for f in Cargo.toml Cargo.lock pyproject.toml LICENSE README.md build-backend/aitune_fast_build.py rust/lib.rs \
    python/aitune_fast/__init__.py; do
    tar -tzf "$SDIST" "aitune_fast-$VERSION/$f" >/dev/null 2>&1 || missing+=("$f")
done
if [ "${#missing[@]}" -eq 0 ]; then
    say "  ok    holds the crate, its lock file, the package, the build backend and the LICENSE"
else
    say "  FAIL  the sdist lacks: ${missing[*]}"
    failed+=("sdist contents")
fi
if actionlint -version >/dev/null && (cd "$SRC" && actionlint -no-color); then
    say "  ok    actionlint $(actionlint -version | head -1): $(cd "$SRC/.github/workflows" && printf '%s ' *)"
else
    failed+=("actionlint")
fi

for entry in "${MATRIX[@]}"; do
    IFS=: read -r PYV TORCH_SPEC BUILD <<<"$entry"
    NAME="py$PYV-$(echo "$TORCH_SPEC" | sed -e 's/[=<>!~,]\{1,\}/-/g; s/\*/x/g; s/[^A-Za-z0-9.-]/_/g')-$BUILD"
    echo
    say "=== $NAME: Python $PYV, $TORCH_SPEC, installed from the $BUILD"
    set +e # the subshell runs with -e (a subshell tested by || or if would not), its status read after
    (
        set -euo pipefail
        PY="$(find_python "$PYV")" || die "no CPython $PYV found (pyenv versions or python$PYV on PATH)"
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
        case "$BUILD" in
            wheel)
                WHL="$(ls "$DIST"/aitune_fast-"$VERSION"-cp"${PYV/./}"-*.whl)"
                # the README's install block as written, the wheel's name put in (scripts/readme_check.py)
                "$VPY" "$SRC/scripts/readme_check.py" install --wheel "$WHL" ||
                    die "the README's install fails with $(basename "$WHL")"
                say "installed $(basename "$WHL") as the README says"
                ;;
            clone)
                # the README's install block as written, its `git clone` standing for the clean clone: a plain
                # `pip install .` there, pip building it in an isolated environment (maturin from PyPI, cargo)
                "$VPY" "$SRC/scripts/readme_check.py" clone --src "$SRC" || die "the README's install from a clone fails"
                say "installed the clean clone as the README says: $("$VPY" -m pip show -f aitune_fast |
                    grep -o 'aitune_fast/_core[^ ]*\.so')"
                ;;
            sdist)
                # pip builds it in an isolated environment (maturin from PyPI, cargo from PATH), no flags
                (cd "$WORK" && "$VPY" -m pip install -q "$SDIST") || die "pip cannot install $(basename "$SDIST")"
                say "installed $(basename "$SDIST"), built by pip: $("$VPY" -m pip show -f aitune_fast |
                    grep -o 'aitune_fast/_core[^ ]*\.so')"
                ;;
            *) die "unknown build $BUILD (wheel, clone or sdist)" ;;
        esac
        cd "$WORK" # away from the sources: the installed package is what runs
        "$VPY" "$SRC/scripts/wheel_smoke.py" --version "$VERSION" --out "$WORK/smoke-$NAME" ||
            die "the installed $BUILD misbehaves (above)"
        if [ "$BUILD" != sdist ]; then
            # the README's quick start and docs/aitune.md's CPU example (tune, call, save, load, unpatch), as written
            "$VPY" "$SRC/scripts/readme_check.py" quickstart || die "the README's quick start fails"
            "$VPY" "$SRC/scripts/readme_check.py" aitune || die "docs/aitune.md's CPU example fails"
        fi
        if [ "$BUILD" = wheel ]; then
            # the benchmark installed as docs/performance.md says (the bench extra, AITune's dependencies with it)
            # runs the tuned-module workload and prints its rows
            "$VPY" "$SRC/scripts/readme_check.py" bench --wheel "$WHL" --out "$WORK/tuned-$NAME" ||
                die "the documented benchmark install prints no tuned-call rows"
        fi
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
say "all passed: the artifacts of ${SHA:0:10}; ${MATRIX[*]}"
