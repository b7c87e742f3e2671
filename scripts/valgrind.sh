#!/usr/bin/env bash
# Run the extension under valgrind memcheck on a small workload (scripts/valgrind_workload.py) and sort the
# errors into those with a frame in aitune_fast's extension (_core*.so) and the rest (CPython, glibc, torch).
# Slow: torch alone takes minutes to import under memcheck. Usage: bash scripts/valgrind.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/valgrind}"
mkdir -p "$OUT"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
PYTHONMALLOC=malloc RUST_BACKTRACE=0 valgrind --tool=memcheck --error-limit=no --num-callers=40 \
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --track-origins=no --xml=yes --xml-file="$OUT/memcheck.xml" --log-file="$OUT/memcheck.log" \
    .venv/bin/python scripts/valgrind_workload.py | tee "$OUT/workload.out"
.venv/bin/python - "$OUT/memcheck.xml" <<'PY' | tee "$OUT/summary.txt"
import collections, sys, xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
ours, theirs = [], collections.Counter()
for err in root.iter("error"):
    kind = err.findtext("kind")
    frames = [(f.findtext("obj") or "", f.findtext("fn") or "?") for f in err.iter("frame")]
    if any("_core.cpython" in obj for obj, _ in frames):
        text = err.findtext("what") or err.findtext("xwhat/text") or ""
        ours.append((kind, text, [fn for obj, fn in frames[:12]]))
    else:
        skip = ("vgpreload", "/libc.so")  # the allocator and libc: name the library that called them
        objs = [obj.rsplit("/", 1)[-1] for obj, _ in frames if obj and not any(s in obj for s in skip)]
        theirs[(kind, objs[0] if objs else "?")] += 1
print(f"errors with a frame in aitune_fast's _core extension: {len(ours)}")
for kind, text, fns in ours:
    print(f"  {kind}: {text}\n    " + "\n    ".join(fns))
print(f"other errors (CPython, glibc, torch...): {sum(theirs.values())}")
for (kind, lib), n in theirs.most_common(20):
    print(f"  {n:5d}  {kind:28s} first object: {lib}")
PY
