"""A long-running soak: dispatch, JSON round trips and update_shapes_seen, RSS sampled as it goes.

Issue 11: a process that serves for days must not grow. One call here is one of each:
- a dispatch: `SampleMetadata.from_inputs(inputs, strict=True)` and a dict lookup of the backend key (every
  other call again after reading the new metadata's `tensor_data`);
- `to_json` -> `from_json` and `to_dict` -> `from_dict` of that metadata;
- `update_shapes_seen` of a learning metadata with the next batch size (1..8, changing every call);
- a `TensorSpec.from_dict(json.loads(...))` with a fresh `str` dtype (a service reading documents) and its
  `get_batch_axis_multipliers()`.
VmRSS is printed every `--every` calls (default 100,000 of 1,000,000); the spread after the first sample
should stay within 5 MiB. Not a test (it takes minutes):

    .venv/bin/python scripts/soak.py [--calls 1000000] [--every 100000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import torch
from aitune_fast import Locator, SampleMetadata, TensorSpec


class Layer:
    def __init__(self, keys, values):
        self.keys = keys
        self.values = values


def inputs(batch: int) -> dict:
    return {
        "input_ids": torch.empty(batch, 7, dtype=torch.int64),
        "cache": [Layer(torch.empty(batch, 2, 16, 8), torch.empty(batch, 2, 16, 8)) for _ in range(3)],
        "opts": {"temperature": 0.5, "mode": "greedy", "stop": ("a", "b")},
        "scale": 1,
    }


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=100_000)
    args = ap.parse_args()
    Locator.register_user_type(Layer, only_tensors=True)
    samples = [inputs(b) for b in range(1, 9)]
    backends = {SampleMetadata.from_inputs(samples[0], strict=True, batch_size=1): "backend"}
    learner = SampleMetadata.from_inputs(samples[0], strict=True, batch_size=1)
    spec_doc = '{"type": "TensorSpec", "shape": ["batch0", 3], "min_shape": [1, 3], "max_shape": [8, 3], '
    spec_doc += '"dtype": "torch.float32", "_bs_multipliers": [1.0, 3.0]}'
    series = []
    start = time.monotonic()
    for i in range(1, args.calls + 1):
        md = SampleMetadata.from_inputs(samples[i % 8], strict=True, batch_size=i % 8 + 1)
        backends.get(md)
        if i % 2:
            md.tensor_data  # noqa: B018 - the handed-out view, then a dispatch against it
            backends.get(md)
        assert SampleMetadata.from_json(md.to_json()) == md
        assert SampleMetadata.from_dict(md.to_dict()) == md
        learner.update_shapes_seen(md)
        spec = TensorSpec.from_dict(json.loads(spec_doc))
        spec.get_batch_axis_multipliers()
        if i % args.every == 0:
            gc.collect()
            series.append(round(rss_mib(), 2))
            print(f"{i:>9} calls  VmRSS {series[-1]:9.2f} MiB  {time.monotonic() - start:7.1f} s", flush=True)
    later = series[1:] or series
    print(f"RSS series (MiB): {series}")
    print(f"spread after the first sample: {max(later) - min(later):.2f} MiB")
    assert str(learner.tensor_specs[0].shape[0]) == "batch0"
    return 0


if __name__ == "__main__":
    sys.exit(main())
