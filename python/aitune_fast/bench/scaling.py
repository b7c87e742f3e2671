"""Scaling: aitune_fast's cost per tensor at 10,000, 100,000 and 1,000,000 tensors.

The ``large_graph`` structure (``large_graph_10k``, ``scale_1m``) at each size, each size in a fresh
process (so what one size left in the allocator cannot help or hurt another), and every call timed on
its own after a 64 MiB buffer is written, which evicts the caches. Measured that way, a small size is
not flattered by finding its whole structure in cache from the previous call, which no size beyond
the last-level cache can do, and a ratio of cost per tensor measures the algorithm: a quadratic step
shows as a ratio growing with size. The main table's loops, by contrast, time 10k with warm caches.

Operations: ``from_inputs``, ``update_shapes_seen``, ``to_json`` and ``from_dict``. Each call's
minor page faults are recorded too: what the operating system adds when a result needs fresh memory
(glibc serves every allocation above 32 MiB with new pages and unmaps them when freed, so a million-
tensor result is faulted in afresh on every call, a 10,000-tensor one reuses freed memory). The cost
of one fault is measured in the same process (touching a fresh 64 MiB mapping) so that the table can
also give each ratio with the faults' time taken out.

One size alone: ``python -c "import sys; from aitune_fast.bench.scaling import main; main(sys.argv[1:])"
TENSORS [CALLS]`` prints one JSON object.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

OPS = ("from_inputs", "update_shapes_seen", "to_json", "from_dict")
SIZES = {"full": (10_000, 100_000, 1_000_000), "quick": (10_000, 100_000), "smoke": (1_000, 10_000)}
SECONDS = {"full": 60.0, "quick": 12.0, "smoke": 6.0}  # about what a run takes, for the progress bar
FLUSH_BYTES = 64 << 20


def _calls_for(tensors: int) -> int:
    return max(5, min(31, 3_000_000 // tensors))


def fault_cost_s() -> float:
    """Seconds per minor page fault: the median of three fresh 64 MiB mappings touched page by page."""
    import mmap

    costs = []
    for _ in range(3):
        m = mmap.mmap(-1, FLUSH_BYTES)
        pages = FLUSH_BYTES // mmap.PAGESIZE
        start = time.perf_counter()
        m[:: mmap.PAGESIZE] = b"\1" * pages
        costs.append((time.perf_counter() - start) / pages)
        m.close()
    return statistics.median(costs)


def measure_size(tensors: int, calls: int) -> dict[str, Any]:
    """Time each operation ``calls`` times on ``tensors`` tensors, in this process."""
    import torch  # noqa: F401  - aitune_fast needs it imported first

    from aitune_fast import SampleMetadata as SM

    from .workloads import large_graph

    a, b = large_graph(num_blocks=tensors // 100), large_graph(num_blocks=tensors // 100)
    ma, mb = SM.from_inputs(a, strict=True), SM.from_inputs(b, strict=True)
    data = ma.to_dict()
    ops: dict[str, Callable[[], object]] = {
        "from_inputs": lambda: SM.from_inputs(a, strict=True),
        "update_shapes_seen": lambda: ma.update_shapes_seen(mb),
        "to_json": ma.to_json,
        "from_dict": lambda: SM.from_dict(data),
    }
    flush, zeros = bytearray(FLUSH_BYTES), bytes(FLUSH_BYTES // 64)  # both made once: no garbage per call
    fault_s = fault_cost_s()
    out: dict[str, Any] = {"tensors": tensors, "calls": calls, "fault_s": fault_s, "ops": {}}
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for name in OPS:
            fn, times, faults = ops[name], [], []
            for _ in range(calls):
                flush[::64] = zeros  # one write per cache line
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                result = fn()
                times.append(time.perf_counter() - start)
                faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
                del result  # freed outside the timed region, as the next call's memory
            med, med_faults = statistics.median(times), statistics.median(faults)
            out["ops"][name] = {
                "median_s": med,
                "ns_per_tensor": med / tensors * 1e9,
                "minor_faults": med_faults,
                "ns_per_tensor_less_faults": max(0.0, med - med_faults * fault_s) / tensors * 1e9,
            }
    finally:
        gc.enable()
        gc.unfreeze()
    return out


def run(mode: str, threads: int = 1) -> dict[str, Any]:
    """Every size of ``mode``, each in a child process; ratios against the smallest size."""
    sizes = SIZES[mode]
    results = []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    for tensors in sizes:
        calls = 3 if mode == "smoke" else _calls_for(tensors)
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(tensors), str(calls)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"scaling at {tensors} tensors failed: {proc.stderr.strip()[-2000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = results[0]
    for r in results:
        for name, cell in r["ops"].items():
            first = base["ops"][name]
            cell["vs_smallest"] = cell["ns_per_tensor"] / first["ns_per_tensor"]
            cell["vs_smallest_less_faults"] = cell["ns_per_tensor_less_faults"] / first["ns_per_tensor_less_faults"]
    return {
        "method": "fresh process per size; each call alone after a 64 MiB buffer is written (caches "
        "flushed); median per call; less faults: minus the median call's minor faults times the cost of one "
        "fault measured in the same process",
        "sizes": results,
    }


def main(argv: list[str]) -> None:
    """One size, printed as one JSON object: ``TENSORS [CALLS]``."""
    n = int(argv[0])
    print(json.dumps(measure_size(n, int(argv[1]) if len(argv) > 1 else _calls_for(n))))


# the child's entry (not `-m`: the package's __init__ imports this module before it would run as __main__)
_CHILD = "import sys; from aitune_fast.bench.scaling import main; main(sys.argv[1:])"
