"""Scenarios for the robustness tests, run in child processes by ``child.run_child``.

Every public function here runs one scenario and returns JSON-ready data for the parent test to check: a record
of ``robust_results.py``, a dict of them keyed by case, or an ``Outcome``; ``child.run_scenario`` reads a result
back as the type the function's signature names, so the tests read fields by name. The scenarios import torch,
the reference and aitune_fast lazily, so that importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import traceback
from collections import UserDict
from types import MappingProxyType
from typing import Any

from impls import fast, outcome, ref
from robust_results import (
    Battery,
    Codecs,
    Comparison,
    ConcurrentUse,
    CycleCall,
    Cycles,
    DeepOps,
    EndlessRun,
    GetterError,
    NestedLayouts,
    Outcome,
    Panic,
    PeakRss,
    Renderings,
    SharedReferences,
    SharedSublists,
    SmallStackCorpus,
    Threads,
    TooDeep,
)

SMALL_STACK = 512 * 1024  # macOS's default for secondary threads; far below glibc's 8 MiB
DEEP = 100_000


def vm_hwm_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def in_thread(fn, stack: int):
    """Run ``fn()`` in a thread with a ``stack``-byte stack (0: the main thread) and return its result."""
    if not stack:
        return fn()
    box: dict[str, Any] = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = "".join(traceback.format_exception(exc))

    old = threading.stack_size(stack)
    try:
        th = threading.Thread(target=target)
        th.start()
    finally:
        threading.stack_size(old)
    th.join()
    if "error" in box:
        raise RuntimeError(box["error"])
    return box["result"]


# ============================================================================================== cycles


@dataclasses.dataclass
class Node:
    value: Any = None
    nxt: Any = None


class UserNode:
    """Registered as a user type by the scenarios that need it."""

    def __init__(self, tensor=None):
        self.tensor = tensor
        self.child = None


class TensorsOnly:
    """Registered as a user type with ``only_tensors=True``."""

    def __init__(self):
        self.t = None
        self.back = None


@dataclasses.dataclass
class Link:
    inner: Any


class UserLink:
    """A registered user type with a single attribute, for deep chains."""

    def __init__(self, inner):
        self.inner = inner


class MyDict(dict):
    pass


class MyList(list):
    pass


def _cycle_inputs(case: str):
    import torch

    t = torch.zeros(2, 3)
    if case == "list":
        x = [t]
        x.append(x)
        return {"x": x}, "x[1]"
    if case == "dict":
        d = {"t": t}
        d["self"] = d
        return {"x": d}, 'x["self"]'
    if case == "tuple_through_list":
        inner: list = [t]
        outer = (inner,)
        inner.append(outer)
        return {"x": outer}, "x[0][1]"
    if case == "dataclass":
        n = Node(t)
        n.nxt = [n]
        return {"x": n}, "x.nxt[0]"
    if case == "user_type":
        u = UserNode(t)
        u.child = UserNode(t)
        u.child.child = u
        return {"x": u}, "x.child.child"
    if case == "user_type_only_tensors":
        o = TensorsOnly()
        o.t = t
        o.back = {"again": [o]}
        return {"x": o}, 'x.back["again"][0]'
    if case == "userdict":
        ud = UserDict({"t": t})
        ud["me"] = ud
        return {"x": ud}, 'x["me"]'
    if case == "dict_subclass":
        md = MyDict(t=t)
        md["me"] = md
        return {"x": md}, 'x["me"]'
    if case == "list_subclass":
        ml = MyList([t])
        ml.append([ml])
        return {"x": ml}, "x[1][0]"
    if case == "root":
        r: dict = {"t": t}
        r["again"] = r
        return r, "again"
    if case == "long_ring":
        first: dict = {"t": t}
        cur = first
        for _ in range(10_000):
            nxt: dict = {}
            cur["n"] = nxt
            cur = nxt
        cur["n"] = first
        return {"x": first}, 'x["n"]["n"]'
    raise ValueError(case)


CYCLE_CASES = [
    "list",
    "dict",
    "tuple_through_list",
    "dataclass",
    "user_type",
    "user_type_only_tensors",
    "userdict",
    "dict_subclass",
    "list_subclass",
    "root",
    "long_ring",
]


def cycles() -> Cycles:
    """Every cyclic argument, through every entry point: the outcome, the message, and whether all stays usable."""
    import torch

    F = fast()
    F.Locator.register_user_type(UserNode)
    F.Locator.register_user_type(TensorsOnly, only_tensors=True)
    entry_points = {
        "from_inputs": lambda x: F.SampleMetadata.from_inputs(x),
        "from_inputs_strict": lambda x: F.SampleMetadata.from_inputs(x, strict=True),
        "from_outputs": lambda x: F.SampleMetadata.from_outputs(x, strict=True),
        "exact": lambda x: F.ExactSampleMetadata.from_inputs(x),
        "find_leaves": lambda x: list(F.Locator.find_leaves(x)),
        "find_leaves_tensors": lambda x: list(F.Locator.find_leaves(x, only_tensors=True)),
    }
    results = {}
    start_hwm = vm_hwm_mib()
    for case in CYCLE_CASES:
        for ep, fn in entry_points.items():
            inputs, path = _cycle_inputs(case)
            t0 = time.perf_counter()
            first = outcome(lambda: fn(inputs))  # noqa: B023
            again = outcome(lambda: fn(inputs))  # noqa: B023
            results[f"{case}/{ep}"] = CycleCall(first, again, path, time.perf_counter() - t0)
    ok = F.SampleMetadata.from_inputs({"x": torch.zeros(1)}, strict=True)
    return Cycles(
        cases=results,
        usable_after=ok.to_json_dict()["tensor_data"][0]["shape"] == [1],
        hwm_growth_mib=vm_hwm_mib() - start_hwm,
    )


class Endless:
    """A registered user type whose ``child`` is a new ``Endless`` on every access: infinitely deep, no cycle."""


class _FreshChild:
    def __get__(self, obj, owner):
        return 0 if obj is None else Endless()


Endless.child = _FreshChild()  # type: ignore[attr-defined]


def endless() -> EndlessRun:
    """An argument that is infinitely deep without being cyclic is rejected, with bounded time and memory."""
    F = fast()
    F.Locator.register_user_type(Endless)
    before = vm_hwm_mib()
    t0 = time.perf_counter()
    out = outcome(lambda: F.SampleMetadata.from_inputs({"x": Endless()}))
    return EndlessRun(
        outcome=out[:2] + [out[2][:200]] if out[0] == "raise" else out,
        seconds=time.perf_counter() - t0,
        hwm_growth_mib=vm_hwm_mib() - before,
        max_depth=getattr(F._core, "MAX_DEPTH", None),
    )


class LayoutNode:
    """A registered user type whose instances each have their own attribute names."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def nested_layouts() -> NestedLayouts:
    """A user-type instance nesting instances of its own type laid out otherwise: the walk keeps one layout per
    type for lookups, and the outer instance's layout must stay readable while its inner ones replace it."""
    import torch

    R, F = ref(), fast()
    for impl in (R.locator.Locator, F.Locator):
        impl.register_user_type(LayoutNode)

    def nest(depth):
        if depth == 0:
            return LayoutNode(leaf=torch.zeros(1))
        names = [f"f{depth}_{i}" for i in range(8)]
        fields = {name: i for i, name in enumerate(names)}
        fields[names[3]] = nest(depth - 1)
        return LayoutNode(**fields)

    def paths(impl, obj):
        return [
            (str(loc), repr(value) if not isinstance(value, torch.Tensor) else "tensor")
            for loc, value in impl.find_leaves(obj)
        ]

    try:
        rounds = []
        for _ in range(3):
            obj = {"root": nest(6), "again": nest(3)}
            rounds.append(paths(F.Locator, obj) == paths(R.locator.Locator, obj))
        return NestedLayouts(same=rounds, n=len(paths(F.Locator, obj)))
    finally:
        for impl in (R.locator.Locator, F.Locator):
            impl.unregister_user_type(LayoutNode)


def shared_references() -> dict[str, SharedReferences]:
    """Shared, acyclic references (the same tensor, list, dataclass or user object in several places) describe
    exactly as in the reference."""
    import torch
    from parity import assert_same_eq_hash_classes, md_snap

    R, F = ref(), fast()
    for impl in (R.locator.Locator, F.Locator):
        impl.register_user_type(UserNode)

    def build(variant: int):
        t = torch.zeros(2, 3 + variant)
        lst = [t, 1, "a"]
        dc = Node(t, lst)
        u = UserNode(t)
        diamond = [lst, lst]
        return {
            "a": t,
            "b": (t, t),
            "c": lst,
            "d": {"again": lst, "dc": dc, "dc2": dc},
            "e": [diamond, diamond, (diamond,)],
            "u": [u, u],
            "n": None,
        }

    out = {}
    try:
        for strict in (False, True):
            r = [R.sample_metadata.SampleMetadata.from_inputs(build(v), strict=strict) for v in range(2)]
            f = [F.SampleMetadata.from_inputs(build(v), strict=strict) for v in range(2)]
            try:
                assert_same_eq_hash_classes(r, f)
                classes = True
            except AssertionError as exc:
                classes = str(exc)
            out[f"strict={strict}"] = SharedReferences(
                snap_same=md_snap(R, r[0]) == md_snap(F, f[0]),
                classes=classes,
                n_tensors=[len(r[0].tensor_data), len(f[0].tensor_data)],
            )
    finally:
        for impl in (R.locator.Locator, F.Locator):
            impl.unregister_user_type(UserNode)
    return out


# ============================================================================================== depth


def _nest(kind: str, depth: int, leaf):
    x = leaf
    if kind == "list":
        for _ in range(depth):
            x = [x]
    elif kind == "tuple":
        for _ in range(depth):
            x = (x,)
    elif kind == "dict":
        for _ in range(depth):
            x = {"k": x}
    elif kind == "dataclass":
        for _ in range(depth):
            x = Link(x)
    elif kind == "user_type":
        for _ in range(depth):
            x = UserLink(x)
    elif kind == "mixed":
        for i in range(depth):
            x = (x,) if i % 3 == 0 else [x] if i % 3 == 1 else {i: x}
    else:
        raise ValueError(kind)
    return x


DEPTH_KINDS = ["list", "tuple", "dict", "dataclass", "user_type", "mixed"]


def deep(stack: int) -> dict[str, DeepOps]:
    """100,000-deep arguments of every container kind through every operation, on a thread with ``stack`` bytes
    of stack (0: the main thread)."""
    import torch

    F = fast()
    F.Locator.register_user_type(UserLink)

    def work():
        res = {}
        for kind in DEPTH_KINDS:
            a = {"x": _nest(kind, DEEP, torch.zeros(2, 3)), "s": 1}
            b = {"x": _nest(kind, DEEP, torch.zeros(4, 3)), "s": 1}
            ma = F.SampleMetadata.from_inputs(a, strict=True)
            mb = F.SampleMetadata.from_inputs(b, strict=True)
            exact = F.ExactSampleMetadata.from_inputs
            leaves = list(F.Locator.find_leaves(a))
            loc = leaves[0][0]
            new = torch.ones(1)
            res[kind] = DeepOps(
                n_tensors=len(ma.tensor_data),
                depth=ma.tensor_data[0][0].depth,
                eq=outcome(lambda: ma == mb),  # noqa: B023
                hash_eq=outcome(lambda: hash(ma) == hash(mb)),  # noqa: B023
                json=outcome(lambda: len(ma.to_json_dict()["tensor_data"][0]["access_path"])),  # noqa: B023
                str=outcome(lambda: len(str(ma))),  # noqa: B023
                update=outcome(lambda: ma.update_shapes_seen(mb)),  # noqa: B023
                learned=ma.tensor_data[0][1].shape,
                exact=outcome(lambda: exact(a) == exact(a)),  # noqa: B023
                outputs=outcome(lambda: len(F.SampleMetadata.from_outputs(a["x"]).tensor_data)),  # noqa: B023
                leaves=len(leaves),
                get_value=outcome(lambda: loc.get_value(a) is leaves[0][1]),  # noqa: B023
                set_value=outcome(lambda: loc.get_value(loc.set_value(a, new)) is new),  # noqa: B023
                to_json=outcome(lambda: len(ma.to_json())),  # noqa: B023
            )
        return res

    return in_thread(work, stack)


def deep_parity() -> dict:
    """A 100,000-deep list and dict describe exactly as in the reference (which walks them iteratively too)."""
    import torch

    R, F = ref(), fast()
    out = {}
    for kind in ("list", "dict"):
        results = []
        for impl in (R.sample_metadata.SampleMetadata, F.SampleMetadata):
            x = {"x": _nest(kind, DEEP, torch.zeros(2, 3)), "y": torch.zeros(1)}
            md = impl.from_inputs(x)
            results.append(md.to_json_dict())
        out[kind] = results[0] == results[1]
    return out


def too_deep(stack: int) -> TooDeep:
    """Beyond ``MAX_DEPTH`` an argument is rejected with a clear ``ValueError``, on any thread."""
    import torch

    F = fast()
    limit = getattr(F._core, "MAX_DEPTH", None)
    if limit is None:
        return TooDeep(limit=None)
    x = _nest("list", limit + 1, torch.zeros(1))

    def work():
        t0 = time.perf_counter()
        out = outcome(lambda: F.SampleMetadata.from_inputs({"x": x}))
        head = out[:2] + [out[2][:120]] if out[0] == "raise" else out
        return TooDeep(limit=limit, outcome=head, seconds=time.perf_counter() - t0)

    return in_thread(work, stack)


def deep_other_data(stack: int, depth: int) -> dict[str, Renderings]:
    """Non-container leaves nested ``depth`` deep (frozensets, mapping proxies, a list inside a set...) in strict
    mode: hash, ==, rendering and JSON never crash. The reference raises RecursionError for these."""
    import torch

    F = fast()

    def frozen(n):
        x = frozenset([1])
        for _ in range(n):
            x = frozenset([x])
        return x

    def proxies(n):
        x = MappingProxyType({"k": 1})
        for _ in range(n):
            x = MappingProxyType({"k": x})
        return x

    values = {"frozenset": frozen, "mappingproxy": proxies}

    def work():
        res = {}
        for name, make in values.items():
            a = F.SampleMetadata.from_inputs({"v": make(depth), "t": torch.zeros(1)}, strict=True)
            b = F.SampleMetadata.from_inputs({"v": make(depth), "t": torch.zeros(1)}, strict=True)
            res[name] = Renderings(
                hash=outcome(lambda: hash(a)),  # noqa: B023
                eq=outcome(lambda: a == b),  # noqa: B023
                json=outcome(lambda: a.to_json_dict()),  # noqa: B023
                str=outcome(lambda: str(a)),  # noqa: B023
            )
        return res

    return in_thread(work, stack)


TINY_STACKS = [256 * 1024, 128 * 1024]  # server thread pools; musl's default thread stack is 128 KiB


def _deep_document(depth: int) -> str:
    """A ``to_json()`` document whose other value is a list nested ``depth`` deep."""
    import torch

    md = fast().SampleMetadata.from_inputs({"t": torch.zeros(2), "o": 1}, strict=True)
    nested = "[" * depth + "1" + "]" * depth
    text = md.to_json().replace('"exact_value":1,"value":1', f'"exact_value":{nested},"value":{nested}')
    assert nested in text
    return text


def nested_documents(stack: int, depth: int) -> Codecs:
    """The codecs on a document whose other value is nested ``depth`` deep, on a ``stack``-byte thread: each
    operation works or raises RecursionError (the C stack is checked before each level), never crashes."""
    SM = fast().SampleMetadata
    text = _deep_document(depth)
    md = SM.from_json(text)  # on this (main) thread's large stack
    data = md.to_dict()

    def work():
        return Codecs(
            from_json=outcome(lambda: SM.from_json(text)),
            to_json=outcome(md.to_json),
            to_dict=outcome(md.to_dict),
            from_dict=outcome(lambda: SM.from_dict(data)),
            round_trip=outcome(lambda: SM.from_json(md.to_json()) == md),
            hash=outcome(lambda: hash(md)),
        )

    return in_thread(work, stack)


def deep_mapping_hash(stack: int, depth: int) -> Outcome:
    """``hash()`` of a strict metadata whose other value is a mapping proxy holding a list nested ``depth`` deep
    (a leaf the walk does not open, hashed recursively), on a ``stack``-byte thread."""
    import torch

    x: Any = 1
    for _ in range(depth):
        x = [x]
    md = fast().SampleMetadata.from_inputs({"t": torch.zeros(2), "o": MappingProxyType({"k": x})}, strict=True)
    return in_thread(lambda: outcome(lambda: hash(md)), stack)


def shared_sublists(depth: int) -> SharedSublists:
    """A reference-format dict whose pickled other value shares its sub-lists (``x = [x, x]``, ``depth`` times:
    a few hundred bytes that expand to ``2**depth`` lists): to_dict/to_json finish quickly, with the value
    written in full or refused with an error that says why."""
    import pickle

    R = ref().locator
    x: Any = [1]
    for _ in range(depth):
        x = [x, x]
    loc = R.Locator((("o", R.ObjectType.DICT),))
    data = {"tensor_data": pickle.dumps(()), "other_data": pickle.dumps(((loc, x),)), "strict": True, "llm_phase": None}
    md = fast().SampleMetadata.from_dict(data)

    def timed(encode) -> tuple[Outcome, float]:
        t0 = time.perf_counter()
        return outcome(lambda: len(encode())), time.perf_counter() - t0

    to_dict, to_dict_seconds = timed(md.to_dict)
    to_json, to_json_seconds = timed(md.to_json)
    round_trip = fast().SampleMetadata.from_json(md.to_json()) == md if to_json[0] == "ok" else None
    return SharedSublists(len(data["other_data"]), to_dict, to_dict_seconds, to_json, to_json_seconds, round_trip)


SMALL_STACK_NESTING = 100  # CPython 3.11's own repr of mapping proxies nested 200 deep overflows 128 KiB


def nested_reference_pickles(stack: int, depth: int) -> dict[str, Outcome]:
    """``from_dict`` of reference-format dicts whose pickled other value nests tuples, frozensets or lists
    ``depth`` deep, on a ``stack``-byte thread (the restricted reader converts values recursively, in Python)."""
    import pickle
    import sys

    R = ref().locator
    loc = R.Locator((("o", R.ObjectType.DICT),))
    wrap = {"tuple": lambda x: (x,), "frozenset": lambda x: frozenset([x]), "list": lambda x: [x]}
    data = {}
    for kind, make in wrap.items():
        x: Any = 1
        for _ in range(depth):
            x = make(x)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * depth + 100))  # pickling a frozenset takes several levels
        try:
            other = pickle.dumps(((loc, x),))
        finally:
            sys.setrecursionlimit(limit)
        data[kind] = {"tensor_data": pickle.dumps(()), "other_data": other, "strict": True, "llm_phase": None}
    SM = fast().SampleMetadata
    return in_thread(lambda: {k: outcome(lambda: SM.from_dict(d)) for k, d in data.items()}, stack)  # noqa: B023


def small_stack_corpus(stack: int, examples: int) -> SmallStackCorpus:
    """The robustness battery, the cycle cases, nested other data, shared references and the hostile fuzz, all
    on one ``stack``-byte thread. The other data is nested only as deep as CPython's own ``==`` and ``repr``
    survive on such a stack (they recurse in C without checking it before 3.12); deeper values are in
    ``deep_mapping_hash`` and ``nested_documents``."""
    import hostile_cases

    def work():
        return SmallStackCorpus(
            battery=battery(),
            cycles=cycles(),
            deep_other_data=deep_other_data(0, SMALL_STACK_NESTING),
            shared=shared_references(),
            hostile=hostile_cases.fuzz(examples, 0),
        )

    return in_thread(work, stack)


# ============================================================================================== tensor kinds


def _sparse_csr():
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.eye(3).to_sparse_csr()


class SubTensor:
    """Filled in lazily with a ``torch.Tensor`` subclass (torch is imported only in the child)."""


def _subtensor_type():
    import torch

    global SubTensor
    if not isinstance(SubTensor, type) or not issubclass(SubTensor, torch.Tensor):

        class _SubTensor(torch.Tensor):
            pass

        _SubTensor.__name__ = _SubTensor.__qualname__ = "SubTensor"
        SubTensor = _SubTensor  # type: ignore[misc]
    return SubTensor


def _tensor_kind(name: str, variant: int):
    import torch

    base = torch.arange(24.0).reshape(2, 3, 4)
    v = variant
    kinds = {
        "parameter": lambda: torch.nn.Parameter(torch.zeros(2 + v, 3)),
        "parameter_no_grad": lambda: torch.nn.Parameter(torch.zeros(2 + v), requires_grad=False),
        "zero_dim": lambda: torch.tensor(3.0 + v),
        "empty": lambda: torch.zeros(0 + v, 5),
        "empty_middle": lambda: torch.zeros(2, 0, 3 + v),
        "transposed": lambda: base.transpose(0, 2),
        "strided_view": lambda: base[:, :: 2 + v, 1:],
        "expanded": lambda: torch.zeros(1, 3).expand(4 + v, 3),
        "as_strided": lambda: torch.zeros(10).as_strided((3 + v, 2), (1, 3)),
        "meta": lambda: torch.empty(2 + v, 3, device="meta"),
        "sparse_coo": lambda: torch.zeros(3 + v, 4).to_sparse(),
        "sparse_csr": lambda: _sparse_csr(),
        "bfloat16": lambda: torch.zeros(2 + v, dtype=torch.bfloat16),
        "float16": lambda: torch.zeros(2 + v, dtype=torch.float16),
        "float8_e4m3fn": lambda: torch.zeros(2 + v, dtype=torch.float8_e4m3fn),
        "float8_e5m2": lambda: torch.zeros(2 + v, dtype=torch.float8_e5m2),
        "complex64": lambda: torch.zeros(2 + v, dtype=torch.complex64),
        "complex128": lambda: torch.zeros(2, 2 + v, dtype=torch.complex128),
        "bool": lambda: torch.zeros(2 + v, dtype=torch.bool),
        "uint8": lambda: torch.zeros(2 + v, dtype=torch.uint8),
        "int64": lambda: torch.zeros(2 + v, dtype=torch.int64),
        "quantized": lambda: torch.quantize_per_tensor(torch.zeros(2 + v), 0.1, 0, torch.quint8),
        "subclass": lambda: torch.zeros(2 + v, 3).as_subclass(_subtensor_type()),
        "requires_grad_view": lambda: (torch.zeros(3 + v, 2, requires_grad=True) * 2)[1:],
        "nested_list_of_kinds": lambda: [torch.zeros(0), torch.tensor(1), torch.zeros(2 + v, device="meta")],
    }
    return kinds[name]()


TENSOR_KINDS = [
    "parameter",
    "parameter_no_grad",
    "zero_dim",
    "empty",
    "empty_middle",
    "transposed",
    "strided_view",
    "expanded",
    "as_strided",
    "meta",
    "sparse_coo",
    "sparse_csr",
    "bfloat16",
    "float16",
    "float8_e4m3fn",
    "float8_e5m2",
    "complex64",
    "complex128",
    "bool",
    "uint8",
    "int64",
    "quantized",
    "subclass",
    "requires_grad_view",
    "nested_list_of_kinds",
]


def _first_diff(a: Any, b: Any, path: str = "") -> str:
    if type(a) is not type(b):
        return f"{path}: {a!r:.300} != {b!r:.300}"
    if isinstance(a, dict):
        for k in a:
            if k not in b:
                return f"{path}.{k} missing"
            if a[k] != b[k]:
                return _first_diff(a[k], b[k], f"{path}.{k}")
        return f"{path}: keys differ"
    if isinstance(a, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_diff(x, y, f"{path}[{i}]")
    return f"{path}: {a!r:.300} != {b!r:.300}"


def _compare(fn_ref, fn_fast) -> Comparison:
    """Run the same check on both implementations; equal results, or where they differ the first difference."""
    try:
        r = ["ok", fn_ref()]
    except Exception as exc:  # noqa: BLE001
        r = ["raise", type(exc).__name__, str(exc)[:200]]
    try:
        f = ["ok", fn_fast()]
    except BaseException as exc:  # noqa: BLE001
        f = ["raise", type(exc).__name__, str(exc)[:200]]
    if r == f:
        return Comparison(same=True, ref=r[0])
    return Comparison(same=False, ref=r[0], fast=f[0], diff=_first_diff(r, f)[:1500])


def tensor_kinds() -> dict[str, dict[str, Comparison]]:
    """Every tensor kind: the same description, equality, hash classes, shape learning and exact metadata as the
    reference."""
    from parity import assert_same_eq_hash_classes, md_snap

    R, F = ref(), fast()
    impls = {"ref": R, "fast": F}
    SM = {"ref": R.sample_metadata.SampleMetadata, "fast": F.SampleMetadata}
    ESM = {"ref": R.exact_sample_metadata.ExactSampleMetadata, "fast": F.ExactSampleMetadata}
    out = {}
    for kind in TENSOR_KINDS:

        def snap(key, kind=kind):
            md = SM[key].from_inputs({"x": _tensor_kind(kind, 0), "k": kind}, strict=True)
            return md_snap(impls[key], md)

        def learned(key, kind=kind):
            a = SM[key].from_inputs({"x": _tensor_kind(kind, 0)}, batch_size=2)
            a.update_shapes_seen(SM[key].from_inputs({"x": _tensor_kind(kind, 1)}, batch_size=3))
            return md_snap(impls[key], a)

        def exact(key, kind=kind):
            a = ESM[key].from_inputs({"x": _tensor_kind(kind, 0)})
            return [a == ESM[key].from_inputs({"x": _tensor_kind(kind, v)}) for v in (0, 1)]

        def outputs(key, kind=kind):
            return md_snap(impls[key], SM[key].from_outputs(_tensor_kind(kind, 0), strict=True))

        out[kind] = {
            "snap": _compare(lambda snap=snap: snap("ref"), lambda snap=snap: snap("fast")),
            "learned": _compare(lambda f=learned: f("ref"), lambda f=learned: f("fast")),
            "exact": _compare(lambda f=exact: f("ref"), lambda f=exact: f("fast")),
            "outputs": _compare(lambda f=outputs: f("ref"), lambda f=outputs: f("fast")),
        }

    # equality and hash classes across all kinds (and a second sample of each)
    def all_md(key):
        return [SM[key].from_inputs({"x": _tensor_kind(kind, v)}, strict=True) for kind in TENSOR_KINDS for v in (0, 1)]

    try:
        assert_same_eq_hash_classes(all_md("ref"), all_md("fast"))
        out["__eq_hash_classes__"] = {"classes": Comparison(same=True)}
    except BaseException as exc:  # noqa: BLE001
        out["__eq_hash_classes__"] = {"classes": Comparison(same=False, diff=f"{type(exc).__name__}: {exc}"[:1000])}
    return out


# ============================================================================================== symbolic sizes


def _symbolic_fake(shape, dynamic):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    ctx = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dynamic],
    )
    return mode.from_tensor(torch.zeros(*shape), symbolic_context=ctx), env


def symbolic() -> dict[str, Comparison]:
    """Tensors whose shape holds symbolic sizes: under a fake tensor mode with a shape environment, under
    ``make_fx(tracing_mode="symbolic")`` and under ``torch.compile(dynamic=True)``. Same results as the reference
    and the symbols stay symbolic (no guard is added, no size is specialised)."""
    import torch

    R, F = ref(), fast()
    SM = {"ref": R.sample_metadata.SampleMetadata, "fast": F.SampleMetadata}
    out = {}

    def fake_mode(key):
        ft, env = _symbolic_fake((2, 3), (True, False))
        ft2, _ = _symbolic_fake((5, 3), (True, False))
        guards_before = len(env.guards)
        md = SM[key].from_inputs({"x": ft, "y": torch.zeros(1)})
        md2 = SM[key].from_inputs({"x": ft2, "y": torch.zeros(1)})
        res = {
            "json": md.to_json_dict(),
            "str": str(md),
            "repr": repr(md),
            "eq": md == md2,
            "hash_eq": hash(md) == hash(md2),
            "tensor_shapes": [str(s.shape) for _, s in md.tensor_data],
        }
        res["still_symbolic"] = isinstance(ft.shape[0], torch.SymInt) and str(ft.shape[0]).startswith("s")
        res["guards_added"] = len(env.guards) - guards_before
        return res

    def fake_plain(key):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            x = torch.zeros(2, 3)
        return SM[key].from_inputs({"x": x}).to_json_dict()

    def traced(key):
        from torch.fx.experimental.proxy_tensor import make_fx

        seen = {}

        def fn(x):
            md = SM[key].from_inputs({"x": x, "n": 3}, strict=True)
            seen["json"] = md.to_json_dict()
            seen["str"] = str(md)
            return x * 2

        make_fx(fn, tracing_mode="symbolic")(torch.zeros(4, 5))
        return seen

    def compiled(key):
        import torch._dynamo

        torch._dynamo.reset()
        seen = []

        def fn(x):
            md = SM[key].from_inputs({"x": x})
            seen.append(md.to_json_dict())
            return x + 1

        g = torch.compile(fn, backend="eager", dynamic=True)
        g(torch.zeros(4, 5))
        g(torch.zeros(6, 5))
        return seen

    for name, fn in (("fake_mode", fake_mode), ("fake_plain", fake_plain), ("make_fx", traced), ("compile", compiled)):
        out[name] = _compare(lambda fn=fn: fn("ref"), lambda fn=fn: fn("fast"))
    return out


# ============================================================================================== other data


class Fixed:
    """Objects with a fixed repr, so that renderings compare across implementations."""

    def __repr__(self):
        return f"{type(self).__name__}<fixed>"


class EqRaises(Fixed):
    def __eq__(self, other):
        raise KeyError("eq raised")

    __hash__ = Fixed.__hash__


class HashRaises(Fixed):
    def __hash__(self):
        raise RuntimeError("hash raised")


class HashTypeError(Fixed):
    def __hash__(self):
        raise TypeError("unhashable on purpose")


class KeyEqRaises(Fixed):
    def __hash__(self):
        return 7

    def __eq__(self, other):
        raise LookupError("key eq raised")


class BoolRaises(Fixed):
    """``==`` returns an object whose truth value raises (like numpy arrays do)."""

    def __eq__(self, other):
        return self

    def __bool__(self):
        raise ValueError("truth value raised")

    __hash__ = Fixed.__hash__


def _other_case(name: str):
    """Two fresh, equal-looking argument dicts for case ``name``."""
    import numpy as np
    import torch

    def pair(make):
        return make(), make()

    nan = float("nan")
    shared_nan = float("nan")
    shared_eq = EqRaises()
    shared_arr = np.arange(3.0)
    cases = {
        "huge_int": lambda: pair(lambda: {"a": 2**200, "b": -(2**100), "c": [10**40, 1]}),
        "huge_int_key": lambda: pair(lambda: {"d": {2**80: torch.zeros(1), -(2**70): 1}}),
        "huge_int_vs_float": lambda: ({"a": 2**53 + 1}, {"a": float(2**53 + 1)}),
        "int_float_bool": lambda: ({"a": 1, "b": 0}, {"a": 1.0, "b": False}),
        "nan_distinct": lambda: pair(lambda: {"a": float("nan")}),
        "nan_shared": lambda: pair(lambda: {"a": shared_nan}),
        "nan_in_tuple": lambda: pair(lambda: {"a": (1, shared_nan)}),
        "nan_key": lambda: pair(lambda: {"d": {nan: torch.zeros(1)}}),
        "nan_key_distinct": lambda: pair(lambda: {"d": {float("nan"): torch.zeros(1)}}),
        "inf": lambda: pair(lambda: {"a": float("inf"), "b": -float("inf")}),
        "eq_raises": lambda: pair(lambda: {"a": EqRaises()}),
        "eq_raises_shared": lambda: pair(lambda: {"a": shared_eq}),
        "hash_raises": lambda: pair(lambda: {"a": HashRaises()}),
        "hash_raises_nested": lambda: pair(lambda: {"a": frozenset({1}), "b": (HashRaises(),)}),
        "hash_type_error": lambda: pair(lambda: {"a": HashTypeError()}),
        "key_eq_raises": lambda: pair(lambda: {"d": {KeyEqRaises(): torch.zeros(1)}}),
        "bool_raises": lambda: pair(lambda: {"a": BoolRaises()}),
        "numpy_array": lambda: pair(lambda: {"a": np.zeros(3)}),
        "numpy_array_shared": lambda: pair(lambda: {"a": shared_arr}),
        "numpy_array_one": lambda: pair(lambda: {"a": np.ones(1)}),
        "numpy_array_empty": lambda: pair(lambda: {"a": np.zeros(0)}),
        "numpy_scalars": lambda: pair(
            lambda: {"f": np.float32(1.5), "i": np.int64(3), "b": np.bool_(True), "u": np.uint8(7)}
        ),
        "numpy_nan_scalar": lambda: pair(lambda: {"a": np.float64("nan")}),
        "numpy_scalar_vs_python": lambda: ({"a": np.int64(3), "b": np.float64(0.5)}, {"a": 3, "b": 0.5}),
        "numpy_scalar_key": lambda: pair(lambda: {"d": {np.int64(1): torch.zeros(1)}}),
        "numpy_structured": lambda: pair(lambda: {"a": np.zeros(2, dtype=[("x", "i4"), ("y", "f8")])}),
        "complex_and_bytes": lambda: pair(lambda: {"c": 1 + 2j, "b": b"\x00\xff", "ba": bytearray(b"x")}),
        "sets": lambda: ({"s": {1, 2, 3}, "f": frozenset({"a"})}, {"s": {3, 2, 1}, "f": frozenset({"a"})}),
        "mappingproxy_with_list": lambda: pair(lambda: {"m": MappingProxyType({"k": [1, 2]})}),
        "dtype_and_device": lambda: pair(lambda: {"d": torch.float16, "v": torch.device("cpu")}),
        "frozenset_value": lambda: pair(lambda: {"s": frozenset({1})}),
    }
    return cases[name]()


OTHER_CASES = [
    "huge_int",
    "huge_int_key",
    "huge_int_vs_float",
    "int_float_bool",
    "nan_distinct",
    "nan_shared",
    "nan_in_tuple",
    "nan_key",
    "nan_key_distinct",
    "inf",
    "eq_raises",
    "eq_raises_shared",
    "hash_raises",
    "hash_raises_nested",
    "hash_type_error",
    "key_eq_raises",
    "bool_raises",
    "numpy_array",
    "numpy_array_shared",
    "numpy_array_one",
    "numpy_array_empty",
    "numpy_scalars",
    "numpy_nan_scalar",
    "numpy_scalar_vs_python",
    "numpy_scalar_key",
    "numpy_structured",
    "complex_and_bytes",
    "sets",
    "mappingproxy_with_list",
    "dtype_and_device",
    "frozenset_value",
]


def _other_observe(SM, name: str) -> dict:
    import json

    from parity import canon

    x, y = _other_case(name)
    res: dict[str, Any] = {}
    for strict in (True, False):
        a = SM.from_inputs(x, strict=strict)
        b = SM.from_inputs(y, strict=strict)
        res[f"{strict}/eq"] = outcome(lambda: a == b)  # noqa: B023
        res[f"{strict}/ne"] = outcome(lambda: a != b)  # noqa: B023
        res[f"{strict}/self_eq"] = outcome(lambda: a == a)  # noqa: B023
        res[f"{strict}/hash"] = outcome(lambda: hash(a) == hash(b))  # noqa: B023
        res[f"{strict}/json"] = outcome(lambda: repr(canon(a.to_json_dict())))  # noqa: B023
        res[f"{strict}/dumps"] = outcome(lambda: json.dumps(a.to_json_dict()))  # noqa: B023
        res[f"{strict}/str"] = outcome(lambda: str(a))  # noqa: B023
        res[f"{strict}/repr"] = outcome(lambda: repr(a))  # noqa: B023
        res[f"{strict}/update"] = outcome(lambda: a.update_shapes_seen(b))  # noqa: B023
        res[f"{strict}/dict_lookup"] = outcome(lambda: {a: 1}.get(b))  # noqa: B023
    return res


def other_data() -> dict[str, Comparison]:
    """Huge ints, NaNs, raising __eq__/__hash__, numpy arrays and scalars: the same outcomes (results or
    exception types) as the reference for ==, !=, hash, JSON, rendering and shape learning."""
    R, F = ref(), fast()
    out = {}
    for name in OTHER_CASES:
        out[name] = _compare(
            lambda n=name: _other_observe(R.sample_metadata.SampleMetadata, n),
            lambda n=name: _other_observe(F.SampleMetadata, n),
        )
    return out


# ============================================================================================== getters


class GetterFailed(Exception):
    pass


def _getter_cases(err: BaseException):
    import torch

    class Descriptor:
        def __get__(self, obj, owner):
            if obj is None:
                return 0  # a plain class attribute, so the field is listed
            raise err

    class ViaDescriptor:
        field = Descriptor()

        def __init__(self):
            self.t = torch.zeros(2)

    class ViaGetattribute:
        def __init__(self):
            self.t = torch.zeros(2)
            self.v = 1

        def __getattribute__(self, name):
            if name == "v":
                raise err
            return object.__getattribute__(self, name)

    class ViaDict:
        def __init__(self):
            self.t = 1

        @property
        def __dict__(self):
            raise err

    @dataclasses.dataclass
    class ViaDataclass:
        t: Any

        def __getattribute__(self, name):
            if name == "t":
                raise err
            return object.__getattribute__(self, name)

    return {
        "descriptor": (ViaDescriptor, True),
        "getattribute": (ViaGetattribute, True),
        "instance_dict": (ViaDict, True),
        "dataclass_field": (ViaDataclass, False),
    }


def getter_errors() -> dict[str, GetterError]:
    """An exception raised by a user type's (or dataclass's) attribute getter propagates unchanged: the very
    same exception object, from every entry point; the reference behaves the same."""
    import torch

    R, F = ref(), fast()
    out: dict[str, dict[str, list]] = {}
    for err_kind in ("custom", "attribute", "keyboard_like"):
        for impl_name, impl in (("ref", R), ("fast", F)):
            err: BaseException
            if err_kind == "custom":
                err = GetterFailed("getter failed")
            elif err_kind == "attribute":
                err = AttributeError("getter raised AttributeError")
            else:
                err = GeneratorExit("a BaseException from a getter")
            Loc = impl.locator.Locator
            SM = impl.sample_metadata.SampleMetadata
            for case, (cls, register) in _getter_cases(err).items():
                if register:
                    Loc.register_user_type(cls)
                obj = cls() if case != "dataclass_field" else cls(torch.zeros(1))
                for ep, fn in (
                    ("from_inputs", lambda o, SM=SM: SM.from_inputs({"x": [o]}, strict=True)),
                    ("from_outputs", lambda o, SM=SM: SM.from_outputs((o,))),
                    ("find_leaves", lambda o, Loc=Loc: list(Loc.find_leaves({"x": o}))),
                ):
                    try:
                        fn(obj)
                        got = ["ok"]
                    except BaseException as exc:  # noqa: BLE001
                        got = ["raise", type(exc).__name__, exc is err]
                    out.setdefault(f"{err_kind}/{case}/{ep}", {})[impl_name] = got
                if register:
                    Loc.unregister_user_type(cls)
    return {key: GetterError(ref=got["ref"], fast=got["fast"]) for key, got in out.items()}


# ============================================================================================== panics


def panics() -> dict[str, Panic]:
    """Operations that have made the Rust core panic. Whatever each does, the process survives, a panic (if any)
    arrives as a Python exception, and the library keeps working afterwards."""
    import torch

    F = fast()
    import aitune_fast.tensor_spec as ts

    nan = float("nan")
    results = {}

    def short_min_shape():
        loc = F.Locator((("x", 1),))
        spec = ts.TensorSpec([2, 3], [2], [2], torch.float32, [nan, nan])
        a = F.SampleMetadata(((loc, spec),), ())
        b = F.SampleMetadata(((loc, ts.TensorSpec([4, 3], [4, 3], [4, 3], torch.float32, [nan, nan])),), ())
        a.update_shapes_seen(b)
        return spec.min_shape

    def reentrant_update():
        holder = {}

        class Reenters:
            def __hash__(self):
                holder["md"].update_shapes_seen(holder["other"])
                return 1

        holder["md"] = F.SampleMetadata.from_inputs({"x": torch.zeros(2), "r": Reenters()}, strict=True)
        holder["other"] = F.SampleMetadata.from_inputs({"x": torch.zeros(3)})
        return hash(holder["md"])

    def reentrant_tensor_data():
        holder = {}

        class Reenters:
            def __eq__(self, other):
                return len(holder["md"].tensor_data) == 1

            __hash__ = object.__hash__

        holder["md"] = F.SampleMetadata.from_inputs({"x": torch.zeros(2), "r": Reenters()}, strict=True)
        other = F.SampleMetadata.from_inputs({"x": torch.zeros(2), "r": Reenters()}, strict=True)
        return holder["md"] == other

    def bad_spec_lists():
        loc = F.Locator((("x", 1),))
        spec = ts.TensorSpec(["batch9", 3], [], [], torch.float32, [])
        md = F.SampleMetadata(((loc, spec),), ())
        return [md.has_batch_axis(), spec.get_batch_axis_multipliers(), md.to_json_dict()]

    def hook():
        core = F._core
        fn = getattr(core, "_test_panic", None)
        if fn is None:
            return "no hook"
        return fn()

    for name, fn in (
        ("short_min_shape", short_min_shape),
        ("reentrant_update", reentrant_update),
        ("reentrant_tensor_data", reentrant_tensor_data),
        ("bad_spec_lists", bad_spec_lists),
        ("hook", hook),
    ):
        got: list
        try:
            fn()
            got = ["ok"]
        except BaseException as exc:  # noqa: BLE001
            got = ["raise", type(exc).__name__, isinstance(exc, Exception), str(exc)[:200]]
        md = F.SampleMetadata.from_inputs({"x": torch.zeros(3)}, strict=True)
        results[name] = Panic(got, md.to_json_dict()["tensor_data"][0]["shape"] == [3] and hash(md) == hash(md))
    return results


# ============================================================================================== threads


class Box:
    """A registered user type used by the thread workers."""

    def __init__(self, t, n):
        self.t = t
        self.n = n


class Toggled:
    """Registered, ignored and released again and again by the churn thread while workers describe it."""

    def __init__(self, t):
        self.t = t


@dataclasses.dataclass
class Pair:
    left: Any
    right: Any


def _worker_inputs(k: int, i: int):
    import torch

    p = i % 4
    return {
        "x": torch.zeros(k + 1, 3 + p),
        "box": Box(torch.zeros(2, k + 1 + p), k),
        "pair": Pair([torch.zeros(1)] * (k % 3 + 1), "s"),
        "n": k,
        "d": {k: (torch.zeros(p + 1),), "s": "abc"[: k % 4]},
    }


def threads(workers: int, iterations: int) -> Threads:
    """``workers`` threads run from_inputs, hash, ==, update_shapes_seen and to_json_dict on their own metadata
    while another thread registers, ignores and releases types; every result is the single-threaded one."""
    import sys

    import torch

    F = fast()
    SM = F.SampleMetadata
    L = F.Locator
    L.register_user_type(Box)
    expected = []
    for k in range(workers):
        rows = []
        for p in range(4):
            md = SM.from_inputs(_worker_inputs(k, p), strict=True)
            rows.append({"json": md.to_json_dict(), "hash": hash(md)})
        learned = SM.from_inputs(_worker_inputs(k, 0), strict=True, batch_size=2)
        for p in range(1, 4):
            learned.update_shapes_seen(SM.from_inputs(_worker_inputs(k, p), strict=True, batch_size=2))
        expected.append({"rows": rows, "learned": learned.to_json_dict()})

    toggled_forms = set()
    L.register_user_type(Toggled)
    toggled_forms.add(repr(SM.from_inputs({"g": Toggled(torch.zeros(1))}).to_json_dict()))
    L.ignore_type(Toggled)
    toggled_forms.add(repr(SM.from_inputs({"g": Toggled(torch.zeros(1))}).to_json_dict()))
    L.unignore_type(Toggled)
    toggled_forms.add(repr(SM.from_inputs({"g": Toggled(torch.zeros(1))}).to_json_dict()))

    errors: list[str] = []
    stop = threading.Event()
    churns = [0]

    def churn():
        try:
            while not stop.is_set():
                fresh = type("Fresh", (), {"a": 1})
                L.register_user_type(fresh)
                L.register_user_type(Toggled, only_tensors=bool(churns[0] % 2))
                L.ignore_type(fresh)
                L.ignore_type(Toggled)
                L.unregister_user_type(fresh)
                L.unignore_type(fresh)
                L.unignore_type(Toggled)
                L.unregister_user_type(Toggled)
                churns[0] += 1
        except BaseException:  # noqa: BLE001
            errors.append("churn: " + traceback.format_exc())

    def work(k: int):
        try:
            exp = expected[k]
            base = SM.from_inputs(_worker_inputs(k, 0), strict=True)
            for i in range(iterations):
                p = i % 4
                md = SM.from_inputs(_worker_inputs(k, i), strict=True)
                if md.to_json_dict() != exp["rows"][p]["json"]:
                    errors.append(f"worker {k} iteration {i}: to_json_dict differs")
                if hash(md) != exp["rows"][p]["hash"]:
                    errors.append(f"worker {k} iteration {i}: hash differs")
                if not (md == base) or md != base:
                    errors.append(f"worker {k} iteration {i}: not equal to its first sample")
                if p == 3:
                    learned = SM.from_inputs(_worker_inputs(k, 0), strict=True, batch_size=2)
                    for q in range(1, 4):
                        learned.update_shapes_seen(SM.from_inputs(_worker_inputs(k, q), strict=True, batch_size=2))
                    if learned.to_json_dict() != exp["learned"]:
                        errors.append(f"worker {k} iteration {i}: learned shapes differ")
                g = repr(SM.from_inputs({"g": Toggled(torch.zeros(1))}).to_json_dict())
                if g not in toggled_forms:
                    errors.append(f"worker {k} iteration {i}: impossible description of a toggled type: {g}")
                if len(errors) > 20:
                    return
        except BaseException:  # noqa: BLE001
            errors.append(f"worker {k}: " + traceback.format_exc())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        churner = threading.Thread(target=churn)
        churner.start()
        pool = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
        t0 = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        stop.set()
        churner.join()
    finally:
        sys.setswitchinterval(old)
    return Threads(errors=errors[:20], churns=churns[0], seconds=time.perf_counter() - t0)


class Slow(Fixed):
    """A value whose hash and equality release the GIL for a while, so another thread runs meanwhile."""

    def __hash__(self):
        time.sleep(0.05)
        return 1

    def __eq__(self, other):
        time.sleep(0.05)
        return isinstance(other, Slow)


def shared_metadata() -> dict[str, ConcurrentUse]:
    """One metadata used by two threads at once: one reads it (hash, ==, to_json_dict) while its user values
    release the GIL, the other mutates it (update_shapes_seen, the first tensor_data). Each call either works or
    raises an ordinary exception (RuntimeError); none panics, none crashes."""
    import torch

    F = fast()
    SM = F.SampleMetadata
    results: dict[str, ConcurrentUse] = {}
    readers = {
        "hash": lambda md, other: hash(md),
        "eq": lambda md, other: md == other,
        "json": lambda md, other: md.to_json_dict(),
    }
    writers = {
        "update_shapes_seen": lambda md, other: md.update_shapes_seen(other),
        "tensor_data": lambda md, other: md.tensor_data,
        "other_data": lambda md, other: md.other_data,
        "update_other": lambda md, other: other.update_shapes_seen(md),
        "eq": lambda md, other: md == other,
        "hash": lambda md, other: hash(md),
    }
    for rname, reader in readers.items():
        for wname, writer in writers.items():
            md = SM.from_inputs({"x": torch.zeros(2), "s": Slow()}, strict=True)
            other = SM.from_inputs({"x": torch.zeros(5), "s": Slow()}, strict=True)
            box: dict[str, Any] = {}

            def read(reader=reader, md=md, other=other, box=box):
                box["r"] = outcome(lambda: reader(md, other))

            th = threading.Thread(target=read)
            th.start()
            time.sleep(0.01)
            w = outcome(lambda writer=writer, md=md, other=other: writer(md, other))
            th.join()
            after = outcome(lambda md=md: (hash(md), md.to_json_dict())[0] is not None)
            results[f"{rname}+{wname}"] = ConcurrentUse(reader=box["r"], writer=w, after=after)
    return results


# ============================================================================================== leaks


def _peak_rss(run, warmup: int, cycles: int) -> PeakRss:
    """The peak RSS after ``run(warmup)`` and again after ``run(cycles)``, each followed by a full collection."""
    run(warmup)
    gc.collect()
    before = vm_hwm_mib()
    t0 = time.perf_counter()
    run(cycles)
    gc.collect()
    return PeakRss(before=before, after=vm_hwm_mib(), seconds=time.perf_counter() - t0)


def rss_cycles(warmup: int, cycles: int) -> PeakRss:
    """Peak RSS after ``cycles`` more from_inputs + hash + to_json_dict cycles than a ``warmup``."""
    import torch

    F = fast()
    SM = F.SampleMetadata
    inputs = {"x": torch.zeros(2, 3), "y": [1, "a", (torch.zeros(1), 2.5)], "z": {"k": None}}

    def run(n):
        for _ in range(n):
            md = SM.from_inputs(inputs, strict=True)
            hash(md)
            md.to_json_dict()

    return _peak_rss(run, warmup, cycles)


def rss_everything(warmup: int, cycles: int) -> PeakRss:
    """Peak RSS after ``cycles`` rounds of every other operation and error path, after a ``warmup``."""
    import torch

    F = fast()
    SM = F.SampleMetadata
    F.Locator.register_user_type(UserNode)
    t = torch.zeros(2, 3)
    u = UserNode(t)
    inputs = {"x": t, "y": [1, "a", (torch.zeros(1), 2.5)], "z": {"k": None, 3: Node(t, u)}}
    other = {"x": torch.zeros(4, 3), "y": [1, "a", (torch.zeros(1), 2.5)], "z": {"k": None, 3: Node(t, u)}}
    cyclic: list = [t]
    cyclic.append(cyclic)
    cyclic_dict: dict = {"t": t}
    cyclic_dict["me"] = {"again": cyclic_dict}

    def run(n):
        for _ in range(n):
            md = SM.from_inputs(inputs, strict=True)
            md2 = SM.from_inputs(other, strict=True, batch_size=2)
            _ = md == md2, md != md2, hash(md2)
            md.update_shapes_seen(md2)
            _ = md.tensor_data, md.other_data, md.tensor_specs, str(md), md.to_json_dict()
            _ = md2.to_json()
            ex = F.ExactSampleMetadata.from_inputs(inputs)
            _ = hash(ex), ex == ex
            for loc, _value in F.Locator.find_leaves(inputs):
                loc.get_value(inputs)
            for bad in ({"c": cyclic}, {"e": cyclic_dict}):
                try:
                    SM.from_inputs(bad)
                except ValueError:
                    pass
            try:
                md.update_shapes_seen(SM.from_inputs({"q": t}))
            except ValueError:
                pass
            try:
                SM.from_json("{not json")
            except Exception:  # noqa: BLE001
                pass

    return _peak_rss(run, warmup, cycles)


def battery() -> Battery:
    """The parity checks that need no special thread or memory set-up, in one child process."""
    return Battery(tensor_kinds=tensor_kinds(), other_data=other_data(), getter_errors=getter_errors())
