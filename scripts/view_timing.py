"""== and hash of a metadata before and after its Python view (`tensor_data`) was read.

Issue 9's "performance trap": reading `tensor_data` used to make every later `==`/`hash` against that
metadata re-read its Python specs. Prints medians in µs per call (not a test; run on a quiet machine):

    .venv/bin/python scripts/view_timing.py
"""

from __future__ import annotations

import statistics
import sys
import timeit

import torch
from aitune_fast import Locator, SampleMetadata
from aitune_fast.bench.workloads import USER_TYPES, llm_decode


def cases():
    for cls in USER_TYPES:
        Locator.register_user_type(cls, only_tensors=True)
    with_cp = llm_decode()
    without_cp = dict(with_cp)
    del without_cp["cache_position"]
    fifty = {f"t{i}": torch.empty(2, 3, i % 5 + 1) for i in range(50)}
    return {"llm_decode (68, phase)": with_cp, "llm_decode (67, no phase)": without_cp, "50 tensors": fifty}


def per_call_us(fn, number: int = 2000, repeat: int = 7) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(inputs: dict) -> tuple:
    key = SampleMetadata.from_inputs(inputs, strict=True)
    probe = SampleMetadata.from_inputs(inputs, strict=True)
    assert key == probe
    before = (per_call_us(lambda: key == probe), per_call_us(lambda: hash(key)))
    _ = key.tensor_data, key.other_data  # what AITune's tuning does to its backend keys
    after = (per_call_us(lambda: key == probe), per_call_us(lambda: hash(key)))
    _ = probe.tensor_data
    both = (per_call_us(lambda: key == probe), per_call_us(lambda: hash(probe)))
    key.tensor_specs[0].shape.append(1)  # a real change: the Python view is read from now on
    changed = (per_call_us(lambda: key == probe, number=200), per_call_us(lambda: hash(key), number=200))
    return before, after, both, changed


def main() -> int:
    rows = [(name, *measure(inputs)) for name, inputs in cases().items()]
    print(f"{'case':28} {'':6} {'not read':>9} {'key read':>9} {'both read':>9} {'changed':>9}  (µs/call, median)")
    for name, before, after, both, changed in rows:
        for k, what in enumerate(("==", "hash")):
            print(f"{name:28} {what:6} {before[k]:9.2f} {after[k]:9.2f} {both[k]:9.2f} {changed[k]:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
