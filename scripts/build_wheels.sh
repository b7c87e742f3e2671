#!/usr/bin/env bash
# Build the release artifacts of the committed HEAD, from a clean checkout of it:
#   - one wheel per CPython 3.10, 3.11, 3.12 and 3.13 for this machine's architecture (x86_64), tagged
#     manylinux_2_28 (glibc 2.28 and later, as torch's own wheels): `maturin build --release --zig
#     --compatibility manylinux_2_28`, zig (from PyPI) linking against glibc 2.28's symbol versions whatever the
#     build machine's glibc; maturin checks the result against the policy and, with `auditwheel = "check"` in
#     pyproject.toml, fails rather than vendor any library;
#   - the sdist (`maturin sdist`).
#
#   bash scripts/build_wheels.sh OUT_DIR      # OUT_DIR gets exactly these five files (older aitune_fast-*
#                                             # wheels and sdists in it are removed first)
#
# Idempotent and cached under $AITUNE_FAST_CACHE (default ~/.cache/aitune_fast; tools: see release_tools.sh):
#   dist/KEY/   the five artifacts of one source tree, KEY = hash of the committed tree, the tool pins, rustc
#               and the interpreters: a second run for the same commit only copies them (seconds);
#   build/      a persistent checkout (reset to HEAD and `git clean`ed, so it is clean, and unchanged files keep
#               their timestamps) and one cargo target dir per interpreter: a commit that changes no Rust
#               rebuilds nothing, one that does rebuilds only this crate (a fat-LTO release build, ~1.5-3 min).
# The interpreters are built AITUNE_FAST_BUILD_JOBS at a time (default: the number of CPUs, at most 4).
# Uncommitted changes are NOT built (it says so). Exit status 0 when all five artifacts were written.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/release_tools.sh
. "$ROOT/scripts/release_tools.sh"
PYTHONS=(3.10 3.11 3.12 3.13)
POLICY=manylinux_2_28
KEEP_DISTS=4 # artifact sets kept in the cache (newest first)

T0=$SECONDS
say() { printf '[build_wheels %4ds] %s\n' "$((SECONDS - T0))" "$*"; }
die() {
    printf '[build_wheels] FAILED: %s\n' "$*" >&2
    exit 1
}

[ "$#" -eq 1 ] || die "usage: bash scripts/build_wheels.sh OUT_DIR"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
ensure_tools || die "cannot install the release tools from PyPI (see scripts/release_tools.sh)"

SHA="$(git -C "$ROOT" rev-parse HEAD)"
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
    printf '\n!!!!!!!!!! build_wheels: uncommitted changes are NOT built (it builds commit %s) !!!!!!!!!!\n\n' \
        "${SHA:0:10}" >&2
fi
declare -A PY
for v in "${PYTHONS[@]}"; do
    PY[$v]="$(find_python "$v")" || die "no CPython $v found (pyenv versions or python$v on PATH)"
done

exec 9>"$CACHE/build.lock" # one build per cache at a time: the checkout and target dirs are shared
flock 9

cache_key() {
    local v
    {
        git -C "$ROOT" rev-parse "HEAD^{tree}"
        echo "${TOOL_PINS[*]} $POLICY"
        rustc -Vv
        for v in "${PYTHONS[@]}"; do "${PY[$v]}" -c 'import sys; print(sys.version)'; done
    } | sha256sum | cut -c1-16
}
STORE="$CACHE/dist/$(cache_key)"

build_all() { # the five artifacts of $SHA into $STORE
    local build="$CACHE/build" src="$CACHE/build/src" stage="$STORE.partial" v jobs pids=() names=()
    if [ ! -d "$src/.git" ]; then
        rm -rf "$src"
        git -c init.defaultBranch=main clone -q --no-checkout "$ROOT" "$src"
    fi
    git -C "$src" fetch -q "$ROOT" HEAD
    git -C "$src" checkout -q --force --detach FETCH_HEAD
    [ "$(git -C "$src" rev-parse HEAD)" = "$SHA" ] || die "HEAD moved while building (now $(git -C "$ROOT" rev-parse HEAD))"
    git -C "$src" clean -q -ffdx
    say "clean checkout of ${SHA:0:10} in $src"
    rm -rf "$stage"
    mkdir -p "$stage" "$build/logs"
    local ZIG_CACHE="${ZIG_GLOBAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zig}"
    jobs="${AITUNE_FAST_BUILD_JOBS:-$(nproc)}"
    [ "$jobs" -le 4 ] || jobs=4
    for v in "${PYTHONS[@]}"; do
        local tag="cp${v/./}"
        say "building the $tag wheel (log: $build/logs/$tag.log)"
        # Each build gets its own XDG cache: maturin's zig support writes its `zig cc` wrapper scripts there,
        # and two builds rewriting the same script while the other runs it fail with "Text file busy"
        # (os error 26). Zig's own compile cache stays shared (it locks its entries).
        XDG_CACHE_HOME="$build/xdg-$tag" ZIG_GLOBAL_CACHE_DIR="$ZIG_CACHE" \
            CARGO_TARGET_DIR="$build/target-$tag" maturin build --release --locked --zig --compatibility "$POLICY" \
            -i "${PY[$v]}" -o "$stage" -m "$src/Cargo.toml" >"$build/logs/$tag.log" 2>&1 &
        pids+=("$!")
        names+=("$tag")
        if [ "${#pids[@]}" -ge "$jobs" ]; then
            wait_builds
        fi
    done
    wait_builds
    maturin sdist -o "$stage" -m "$src/Cargo.toml" >"$build/logs/sdist.log" 2>&1 ||
        die "maturin sdist failed: $(tail -20 "$build/logs/sdist.log")"
    check_stage "$stage"
    rm -rf "$STORE"
    mv "$stage" "$STORE"
    echo "$SHA" >"$STORE/.commit"
    # keep the newest sets only (by modification time)
    find "$CACHE/dist" -mindepth 1 -maxdepth 1 -type d -printf '%T@\t%p\n' | sort -rn |
        tail -n +"$((KEEP_DISTS + 1))" | cut -f2- | xargs -r -d '\n' rm -rf
}

wait_builds() { # waits for the builds in pids/names; dies with the log of the first that failed
    local i failed=""
    for i in "${!pids[@]}"; do
        if wait "${pids[$i]}"; then
            say "  ${names[$i]}: $(grep -o 'Finished.*' "$CACHE/build/logs/${names[$i]}.log" | sed 's/.* in /cargo build in /')"
        else
            failed="$failed ${names[$i]}"
            tail -30 "$CACHE/build/logs/${names[$i]}.log" >&2
        fi
    done
    pids=()
    names=()
    [ -z "$failed" ] || die "maturin build failed for:$failed (logs above and in $CACHE/build/logs)"
}

check_stage() { # exactly one wheel per interpreter with the policy's tag, and one sdist
    local stage="$1" v n version
    version="$(package_version "$CACHE/build/src")" # as maturin spells it in the names (0.2.0.dev0)
    for v in "${PYTHONS[@]}"; do
        n="aitune_fast-$version-cp${v/./}-cp${v/./}-${POLICY}_$(uname -m).whl"
        [ -f "$stage/$n" ] || die "expected $n, found: $(ls "$stage")"
    done
    [ -f "$stage/aitune_fast-$version.tar.gz" ] || die "expected aitune_fast-$version.tar.gz, found: $(ls "$stage")"
    n="$(find "$stage" -maxdepth 1 -type f | wc -l)"
    [ "$n" -eq "$((${#PYTHONS[@]} + 1))" ] || die "unexpected files in the output: $(ls "$stage")"
}

if [ -f "$STORE/.commit" ]; then
    say "reusing the artifacts built for this tree (commit $(cut -c1-10 "$STORE/.commit")): $STORE"
else
    build_all
fi
rm -f "$OUT"/aitune_fast-*.whl "$OUT"/aitune_fast-*.tar.gz
cp "$STORE"/aitune_fast-* "$OUT"/
say "wrote to $OUT:"
for f in "$OUT"/aitune_fast-*; do
    awk -v n="$(basename "$f")" -v s="$(stat -c %s "$f")" 'BEGIN { printf "  %-60s %6.2f MB\n", n, s / 1e6 }'
done
