"""The loop that `count.sh` counts: ``make()`` from the case file, 200 calls uncounted, then N inside
``functools.reduce`` (callgrind collects only while reduce runs).

With ``CALLGRIND_GATE`` set (count.sh sets it), valgrind starts with instrumentation off, so the set-up (importing
torch, tuning) runs several times faster; after the warm-up this writes ``$CALLGRIND_GATE.ready`` and waits for
``$CALLGRIND_GATE.go``, which count.sh creates once it has switched instrumentation on."""

import functools
import os
import runpy
import sys
import time

f = runpy.run_path(sys.argv[1])["make"]()
for _ in range(200):
    f()
gate = os.environ.get("CALLGRIND_GATE")
if gate:
    with open(gate + ".ready", "w") as ready:
        ready.write(str(os.getpid()))
    while not os.path.exists(gate + ".go"):
        time.sleep(0.05)
functools.reduce(lambda _acc, _i: f(), range(int(sys.argv[2])), None)
