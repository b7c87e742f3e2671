"""The time of ``patch_aitune()`` + ``unpatch_aitune()`` with one tuned and one recording module alive (the models of
tests/integration/switch_child.py): the median of 5 cycles in each of ROUNDS rounds (default 2).

    PYTHONPATH=tests/integration:tests/fixtures/tensorrt_stub .venv/bin/python benches/switch_time.py [ROUNDS]

benches/PERFORMANCE.md "Switching the patch" logs the figures (interleave two trees' runs: the machine is noisy).
"""

import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore")
from switch_child import setup, two_graph_module  # noqa: E402

ait, torch, aitune_fast, _ = setup()
tuned, _m, _x = two_graph_module(ait, torch)
tuned.tune(device="cpu")
recording, _m2, _x2 = two_graph_module(ait, torch)
aitune_fast.patch_aitune()
aitune_fast.unpatch_aitune()
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        aitune_fast.patch_aitune()
        aitune_fast.unpatch_aitune()
        times.append(time.perf_counter() - t0)
    print(f"round {r + 1}: median {statistics.median(times):.3f} s  ({', '.join(f'{t:.3f}' for t in times)})")
