"""Child-process scenarios for ``test_view.py``: Python code that changes a metadata's lists while a call
is reading them, threads sharing one metadata, and the process-wide dtype table. Each returns JSON-ready data; the
parent runs it with a time bound (``child.run_child``), so a panic, a crash or a hang fails the test cleanly."""

from __future__ import annotations

import threading
from typing import Any

from impls import fast, ref

NAN = float("nan")


def _outcome(fn) -> list:
    """``outcome`` plus whether the exception is an ``Exception`` (pyo3's PanicException is not)."""
    try:
        value = fn()
        return ["ok", value]
    except BaseException as exc:  # noqa: BLE001
        return ["raise", type(exc).__name__, isinstance(exc, Exception), str(exc)[:160]]


# ============================================================================================== shrinking


def _shrink_case(impl, trigger: str) -> dict:
    """A user-built metadata whose ``tensor_data`` list loses its entries while ``update_shapes_seen`` runs.

    ``trigger``: ``shape_iter`` (iterating a spec's shape list empties the list), ``key_eq`` (comparing a locator
    key empties it), ``thread`` (comparing a key lets another thread empty it, and waits until it has)."""
    import torch

    Loc = impl.locator.Locator
    TS = impl.tensor_spec.TensorSpec
    SM = impl.sample_metadata.SampleMetadata
    pairs: list = []
    armed = {"on": False}

    def shrink():
        if armed["on"]:
            armed["on"] = False
            del pairs[:]

    def shrink_in_thread():
        if armed["on"]:
            armed["on"] = False
            th = threading.Thread(target=lambda: pairs.clear())
            th.start()
            th.join()

    class ShrinkingShape(list):
        def __iter__(self):
            shrink()
            return super().__iter__()

    class Key:
        def __init__(self, name):
            self.name = name

        def __eq__(self, other):
            (shrink_in_thread if trigger == "thread" else shrink)()
            return isinstance(other, Key) and other.name == self.name

        def __hash__(self):
            return hash(self.name)

    def spec(shape, cls=list):
        return TS(cls(shape), list(shape), list(shape), torch.float32, [s / 2 for s in shape])

    def loc(i):
        if trigger == "shape_iter":
            return Loc(((f"t{i}", 1),))
        return Loc(((Key(f"t{i}"), 1),))

    shape_cls = ShrinkingShape if trigger == "shape_iter" else list
    specs = [spec([2, 3], shape_cls if i == 1 else list) for i in range(3)]
    pairs.extend((loc(i), s) for i, s in enumerate(specs))
    mine = SM(pairs, ())
    theirs = SM(tuple((loc(i), spec([4, 3])) for i in range(3)), ())
    armed["on"] = True
    result = _outcome(lambda: mine.update_shapes_seen(theirs))
    after = _outcome(lambda: [list(s.shape) for s in specs])
    usable = _outcome(lambda: hash(SM.from_inputs({"x": torch.zeros(2)})) is not None)
    return {"result": result, "specs": after, "usable": usable, "pairs_left": len(pairs)}


def shrink_during_update(trigger: str) -> dict:
    return {"fast": _shrink_case(fast(), trigger), "ref": _shrink_case(ref(), trigger)}


def user_list_mutation() -> dict:
    """Append, remove and replace pairs of a user-built metadata's list between calls: ``==`` and ``hash``
    follow the list, as in the reference."""
    import torch

    out: dict[str, Any] = {}
    for name, impl in (("fast", fast()), ("ref", ref())):
        Loc = impl.locator.Locator
        TS = impl.tensor_spec.TensorSpec
        SM = impl.sample_metadata.SampleMetadata

        def spec(*shape, TS=TS):
            return TS(list(shape), list(shape), list(shape), torch.float32, [NAN] * len(shape))

        pairs = [(Loc((("a", 1),)), spec(2, 3)), (Loc((("b", 1),)), spec(4))]
        md = SM(pairs, ())
        twin = SM([(Loc((("a", 1),)), spec(5, 3)), (Loc((("b", 1),)), spec(4))], ())
        steps = [md == twin, hash(md) == hash(twin)]
        pairs.append((Loc((("c", 1),)), spec(1)))
        steps += [md == twin, len(md.tensor_data)]
        pairs.pop()
        steps += [md == twin, hash(md) == hash(twin)]
        pairs[1] = (Loc((("b", 1),)), spec(4, 4))
        steps += [md == twin, hash(md) == hash(twin)]
        pairs[1] = (Loc((("z", 1),)), spec(4))
        steps += [md == twin]
        out[name] = steps
    return out


# ============================================================================================== threads


class _SlowKey:
    """A dict key whose ``__eq__`` signals that it is running and then waits for the other thread to finish."""

    inside = threading.Event()
    release = threading.Event()

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        if _SlowKey.release.is_set():
            return isinstance(other, _SlowKey) and other.name == self.name
        _SlowKey.inside.set()
        _SlowKey.release.wait(10)
        return isinstance(other, _SlowKey) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"SlowKey({self.name!r})"


def concurrent_reads() -> dict:
    """While one thread is inside ``==`` of a shared metadata (held there by a key's ``__eq__``), another thread
    reads it: ``tensor_data`` (first and later access), ``other_data``, ``tensor_specs``, ``hash``, ``==``, ``str``,
    ``to_json_dict``, ``to_json``, ``copy.copy``, ``copy.deepcopy``. The README documents all of them as safe to
    share. Each reader's outcome (kind and value, or exception type), the same read's outcome single-threaded, and
    the comparing thread's result."""
    import copy

    import torch

    F = fast()
    SM = F.SampleMetadata
    readers = {
        "tensor_data": lambda md: len(md.tensor_data),
        "other_data": lambda md: len(md.other_data),
        "tensor_specs": lambda md: len(md.tensor_specs),
        "hash": lambda md: hash(md) == hash(md),
        "eq": lambda md: md == md,
        "str": lambda md: str(md),
        "to_json_dict": lambda md: len(md.to_json_dict()["tensor_data"]),
        "to_json": lambda md: len(md.to_json()) > 0,
        "copy": lambda md: len(copy.copy(md).tensor_data),
        "deepcopy": lambda md: len(copy.deepcopy(md).tensor_data),
    }
    results: dict[str, Any] = {}
    for name, read in readers.items():
        for handed_out in (False, True):
            _SlowKey.inside.clear()
            _SlowKey.release.clear()
            inputs = {"x": torch.zeros(2), "d": {_SlowKey("k"): 1, "t": torch.zeros(3)}}
            md = SM.from_inputs(inputs, strict=True)
            other = SM.from_inputs({"x": torch.zeros(2), "d": {_SlowKey("k"): 1, "t": torch.zeros(3)}}, strict=True)
            if handed_out:
                md.tensor_data  # noqa: B018
            _SlowKey.release.set()
            alone = SM.from_inputs({"x": torch.zeros(2), "d": {_SlowKey("k"): 1, "t": torch.zeros(3)}}, strict=True)
            if handed_out:
                alone.tensor_data  # noqa: B018
            expected = _outcome(lambda alone=alone, read=read: read(alone))[:2]
            _SlowKey.release.clear()
            box: dict[str, Any] = {}

            def compare(md=md, other=other, box=box):
                box["eq"] = _outcome(lambda: md == other)

            th = threading.Thread(target=compare)
            th.start()
            if not _SlowKey.inside.wait(10):
                results[f"{name}/{handed_out}"] = ["comparison never reached the key"]
                _SlowKey.release.set()
                th.join()
                continue
            got = _outcome(lambda md=md, read=read: read(md))
            _SlowKey.release.set()
            th.join()
            results[f"{name}/{handed_out}"] = [got[:2], expected, box["eq"]]
    return results


# ============================================================================================== dtypes


def fresh_dtypes(n: int) -> dict:
    """``n`` specs built from JSON documents (a fresh ``str`` dtype each), each asked for its batch axes, compared,
    hashed and learned from; then a bfloat16 tensor, never seen before in this process, is described. Also the
    process's RSS growth over the second half of the loop."""
    import json

    import torch

    F = fast()
    TS = F.TensorSpec
    SM = F.SampleMetadata
    Loc = F.Locator
    doc = '{"type": "TensorSpec", "shape": ["batch0", 3], "min_shape": [1, 3], "max_shape": [8, 3], '
    doc += '"dtype": "torch.float32", "_bs_multipliers": [1.0, 3.0]}'

    def rss_kib() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    errors: list[str] = []
    half = 0
    loc = Loc((("x", 1),))
    other = SM(((loc, TS([4, 3], [4, 3], [4, 3], "torch.float32", [4.0, 3.0])),), ())
    for i in range(n):
        if i == n // 2:
            half = rss_kib()
        spec = TS.from_dict(json.loads(doc.replace("torch.float32", f"torch.float32#{i % 7}")))
        try:
            spec.get_batch_axis_multipliers()
            md = SM(((loc, spec),), ())
            hash(md)
            md.update_shapes_seen(other)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{i}: {type(exc).__name__}: {exc}")
            if len(errors) > 3:
                break
    growth_kib = rss_kib() - half
    t = torch.zeros(2, 3, dtype=torch.bfloat16)
    md = SM.from_inputs({"x": t}, strict=True)
    spec = TS.from_tensor(t, 2.0)
    bf16 = [str(md.tensor_specs[0].dtype), str(spec.dtype), md.to_json_dict()["tensor_data"][0]["dtype"]]
    return {"errors": errors, "bf16": bf16, "growth_kib": growth_kib}


# ============================================================================================== short lists


def short_spec_lists() -> dict:
    """Batch-size queries on a spec whose ``min_shape``/``max_shape`` are shorter than its shape: the reference raises
    IndexError (``self.max_shape[axis]``); aitune_fast used to index past the end (a panic)."""
    import torch

    out: dict[str, Any] = {}
    for name, impl in (("fast", fast()), ("ref", ref())):
        TS = impl.tensor_spec.TensorSpec
        spec = TS(["batch0", 3], [], [], torch.float32, [1.0, 3.0])
        out[name] = [
            _outcome(spec.get_max_batch_size)[:3],
            _outcome(spec.get_min_batch_size)[:3],
            _outcome(spec.get_batch_axis_multipliers),
        ]
    return out


def handed_out_during_update() -> dict:
    """``update_shapes_seen`` on a compact metadata, where Python code run at the end of the call (a finalizer of
    an object the other metadata's list dropped meanwhile) reads ``tensor_data`` of the metadata being updated:
    its specs are then the truth, so the compact form must not learn alone. The call raises RuntimeError ("changed
    during update_shapes_seen") or the handed-out specs learn; never a panic, never a silent no-op."""
    import torch

    F = fast()
    SM = F.SampleMetadata
    TS = F.TensorSpec
    holder: dict[str, Any] = {}

    class Key:
        def __init__(self, name):
            self.name = name

        def __eq__(self, other):
            pairs = holder.get("pairs")
            if pairs:
                pairs.clear()  # the only other reference to the spec is now the call's snapshot
            return isinstance(other, Key) and other.name == self.name

        def __hash__(self):
            return hash(self.name)

    class Shape(list):
        def __del__(self):
            holder["handed"] = len(holder["mine"].tensor_data)

    mine = SM.from_inputs({Key("x"): torch.zeros(2, 3)}, strict=True)
    holder["mine"] = mine
    pairs = [(F.Locator(((Key("x"), 1),)), TS(Shape([4, 3]), [4, 3], [4, 3], torch.float32, [NAN, NAN]))]
    theirs = SM(pairs, ())
    holder["pairs"] = pairs
    result = _outcome(lambda: mine.update_shapes_seen(theirs))
    return {
        "result": result[:3],
        "handed": holder.get("handed"),
        "shape": list(mine.tensor_specs[0].shape),
        "hash_ok": hash(mine) == hash(mine),
    }
