"""A small workload that drives every part of the Rust core, for running under valgrind (scripts/valgrind.sh).

Kept small on purpose: under memcheck torch alone takes minutes to import. Every entry point runs a few times,
with the ordinary paths and the error paths (cycles, structure mismatches, raising getters, bad JSON).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import threading
from collections import UserDict
from concurrent.futures import ThreadPoolExecutor

import aitune_fast
import numpy as np
import torch
from aitune_fast import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec


@dataclasses.dataclass
class Point:
    x: object
    y: object = None


class Box:
    def __init__(self, t, n):
        self.t = t
        self.n = n


class Raises:
    @property
    def __dict__(self):
        raise KeyError("no dict")


def inputs(n: int):
    return {
        "x": torch.zeros(n, 3),
        "v": torch.zeros(2, n).t(),
        "meta": torch.empty(n, 2, device="meta"),
        "p": torch.nn.Parameter(torch.zeros(n)),
        "s": torch.zeros(3, 4).to_sparse(),
        "b": torch.zeros(n, dtype=torch.bfloat16),
        "items": [1, 2.5, "a", None, 2**80, float("nan"), (torch.zeros(1), b"x")],
        "d": {"k": Point(torch.zeros(n, 2), [3, 4]), 7: UserDict({"u": torch.zeros(1)})},
        "box": Box(torch.zeros(2, n), n),
        "np": np.zeros(3),
        "npf": np.float32(1.5),
    }


def expect(exc_types, fn):
    try:
        fn()
    except exc_types:
        return
    raise AssertionError(f"{fn} did not raise {exc_types}")


def round_trip(i: int) -> None:
    a = SampleMetadata.from_inputs(inputs(2), strict=True, batch_size=2)
    b = SampleMetadata.from_inputs(inputs(4), strict=True, batch_size=4)
    assert a == a and hash(a) == hash(a)
    _ = a == b, a != b, hash(b), str(a), repr(b)
    a.update_shapes_seen(b)
    _ = a.tensor_data, a.other_data, a.tensor_specs, a.detected_dynamic_axis(), a.has_batch_axis()
    _ = a.to_json_dict(), b.to_json_dict(), a.describe()
    c = SampleMetadata.from_inputs({"x": torch.zeros(2, 3), "y": [1, 2]}, strict=True, batch_size=2)
    c.update_shapes_seen(SampleMetadata.from_inputs({"x": torch.zeros(4, 3), "y": [1, 2]}, strict=True, batch_size=4))
    text = c.to_json()
    assert SampleMetadata.from_json(text) == c
    d = c.to_dict()
    assert SampleMetadata.from_dict(d) == c
    batched = c.make_batch({"x": torch.zeros(2, 3), "y": [1, 2]}, 3)
    assert batched["x"].shape == (3, 3)
    e = ExactSampleMetadata.from_inputs(inputs(2))
    _ = e == ExactSampleMetadata.from_inputs(inputs(2)), hash(e)
    o = SampleMetadata.from_outputs((torch.zeros(2), {"z": torch.zeros(1)}), strict=True)
    _ = str(o), o.to_json_dict()
    for loc, value in Locator.find_leaves(inputs(2)):
        _ = loc.get_value(inputs(2)), loc.display_path, loc.path, hash(loc), loc == loc, value
    loc = Locator((("d", 1), ("k", 1), ("x", 2)))
    new = loc.set_value(inputs(2), torch.ones(1))
    assert loc.get_value(new).shape == (1,)
    spec = TensorSpec.from_tensor(torch.zeros(2, 3), 2)
    other = TensorSpec.from_tensor(torch.zeros(4, 3), 4)
    spec.update_shapes_seen(other)
    _ = spec.describe(), spec.get_batch_axis_multipliers(), spec.to_dict(), spec == other, hash(spec)

    # error paths
    cyclic: list = [torch.zeros(1)]
    cyclic.append({"back": cyclic})
    expect(ValueError, lambda: SampleMetadata.from_inputs({"c": cyclic}))
    expect(ValueError, lambda: list(Locator.find_leaves({"c": cyclic})))
    expect(KeyError, lambda: SampleMetadata.from_inputs({"r": Raises()}))
    expect(ValueError, lambda: a.update_shapes_seen(SampleMetadata.from_inputs({"q": torch.zeros(1)})))
    expect(Exception, lambda: SampleMetadata.from_json("{not json"))
    expect(Exception, lambda: SampleMetadata.from_json('{"format": "nope"}'))
    deep = torch.zeros(1)
    for _ in range(2000):
        deep = [deep]
    _ = hash(SampleMetadata.from_inputs({"deep": deep}))
    nested = frozenset([1])
    for _ in range(200):
        nested = frozenset([nested])
    _ = hash(SampleMetadata.from_inputs({"n": nested}, strict=True))


def panic_paths() -> None:
    """Calls that have made the core panic: the unwinding into a Python exception runs under memcheck too."""
    nan = float("nan")
    loc = Locator((("x", 1),))
    spec = TensorSpec([2, 3], [2], [2], torch.float32, [nan, nan])
    short = SampleMetadata(((loc, spec),), ())
    longer = SampleMetadata(((loc, TensorSpec([4, 3], [4, 3], [4, 3], torch.float32, [nan, nan])),), ())
    holder = {}

    class Reenters:
        def __hash__(self):
            holder["md"].update_shapes_seen(holder["other"])
            return 1

    holder["md"] = SampleMetadata.from_inputs({"x": torch.zeros(2), "r": Reenters()}, strict=True)
    holder["other"] = SampleMetadata.from_inputs({"x": torch.zeros(3)})
    for call in (lambda: short.update_shapes_seen(longer), lambda: hash(holder["md"])):
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - pyo3's PanicException is a BaseException
            assert not isinstance(exc, (KeyboardInterrupt, SystemExit))


def main() -> None:
    panic_paths()
    Locator.register_user_type(Box)
    Locator.register_user_type(Raises)
    for i in range(3):
        round_trip(i)
    # long lists (walked with prefetching), list items decoded out of order, and a document over
    # 32 MiB written straight into its str (growing it), with a non-ASCII tail moving it to Rust
    n = 150_000
    for last in ("z", "\u00fc"):
        big = SampleMetadata.from_inputs({"k" * 100: [torch.empty(2, 1)] * n, last: torch.empty(3)}, strict=True)
        assert SampleMetadata.from_json(big.to_json()) == big
    del big
    small = SampleMetadata.from_inputs({"l": [torch.empty(2, i) for i in range(1, 40)]}, strict=True)
    doc = json.loads(small.to_dict()["tensor_data"])
    doc["paths"] = doc["paths"][:1] + doc["paths"][1:][::-1] + [doc["paths"][1]]
    try:
        SampleMetadata.from_dict({**small.to_dict(), "tensor_data": json.dumps(doc).encode()})
    except ValueError:
        pass

    # a few threads at once, with the registry changing
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            fresh = type("Fresh", (), {})
            Locator.register_user_type(fresh)
            Locator.ignore_type(fresh)
            Locator.unignore_type(fresh)

    def work():
        for _ in range(3):
            m = SampleMetadata.from_inputs(inputs(2), strict=True)
            _ = hash(m), m == m, m.to_json_dict()

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            for done in [pool.submit(work) for _ in range(4)]:
                done.result()  # a worker's error fails the workload
    finally:
        stop.set()
        churner.join()
    gc.collect()
    print("valgrind workload done", aitune_fast.__version__)


if __name__ == "__main__":
    main()
