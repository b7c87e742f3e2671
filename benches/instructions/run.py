"""The loop that `count.sh` counts: ``make()`` from the case file, 200 calls uncounted, then N inside
``functools.reduce`` (callgrind collects only while reduce runs)."""

import functools
import runpy
import sys

f = runpy.run_path(sys.argv[1])["make"]()
for _ in range(200):
    f()
functools.reduce(lambda _acc, _i: f(), range(int(sys.argv[2])), None)
