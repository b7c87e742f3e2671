"""Helpers shared by the parity tests: canonical forms, snapshots and comparison of observable behaviour.

Nothing here imports either implementation; everything takes an implementation namespace (``ref`` or ``fast``)
or objects produced by one, and returns plain, comparable data.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import UserDict, namedtuple
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import torch

# ---------------------------------------------------------------------------------- container types used by the tests

Pair = namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Point:
    x: object
    y: object = None


@dataclasses.dataclass(frozen=True)
class FrozenPoint:
    x: object


class TensorHolder:
    """An unregistered object holding a tensor: a leaf that make_batch deep-copies but does not batch."""

    def __init__(self, tensor):
        self.tensor = tensor


# --------------------------------------------------------------------------------------------- canonical forms


def canon(x: Any) -> Any:
    """A type-sensitive, NaN-tolerant, implementation-independent form of ``x`` (compare with ``==``)."""
    if isinstance(x, Enum):
        return ("enum", x.name, canon(x.value))
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int):
        return ("int", int(x))
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else x)
    if isinstance(x, str):
        return ("str", x)
    if x is None:
        return ("None",)
    if isinstance(x, torch.dtype):
        return ("dtype", str(x))
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), str(x.dtype), x.tolist())
    if isinstance(x, (dict, UserDict)):
        return (type(x).__name__, [(canon(k), canon(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [canon(v) for v in x])
    if isinstance(x, (set, frozenset)):
        return (type(x).__name__, sorted(repr(canon(v)) for v in x))
    return ("obj", type(x).__qualname__, repr(x))


def outcome(fn: Callable[[], Any]) -> Any:
    """``("ok", canon(result))`` or ``("raise", exception class name)``."""
    try:
        return ("ok", canon(fn()))
    except Exception as exc:  # noqa: BLE001 - the exception type is the observable
        return ("raise", type(exc).__name__)


def text(fn: Callable[[], Any]) -> Any:
    """``fn()`` (a rendering), or ``("raise", exception class name)``."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the exception type is the observable
        return ("raise", type(exc).__name__)


def raised(fn: Callable[[], Any]) -> BaseException | None:
    """The exception ``fn()`` raises, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def assert_raises_alike(ref_fn: Callable[[], Any], fast_fn: Callable[[], Any]) -> BaseException:
    """Both raise; the fast exception is an instance of the reference exception's class. Returns the ref one."""
    ref_exc = raised(ref_fn)
    fast_exc = raised(fast_fn)
    assert ref_exc is not None, "the reference did not raise; the test case is wrong"
    assert fast_exc is not None, f"aitune_fast did not raise, the reference raised {type(ref_exc).__name__}: {ref_exc}"
    assert isinstance(fast_exc, type(ref_exc)), f"{type(fast_exc).__name__}: {fast_exc} is not a {type(ref_exc)}"
    return ref_exc


# --------------------------------------------------------------------------------------------- snapshots


def levels(impl) -> tuple:
    info = impl.tensor_spec.InfoLevel
    return (info.SHORT, info.MEDIUM, info.FULL)


def loc_snap(loc) -> dict:
    """Everything a Locator exposes, in plain form."""
    return {
        "display_path": loc.display_path,
        "str": str(loc),
        "repr": repr(loc),
        "path": canon(loc.path),
        "depth": loc.depth,
        "root_name": canon(loc.root_name),
        "leaf_name": outcome(lambda: loc.leaf_name),
        "path_iter": [(canon(acc), getattr(t, "name", None), int(t)) for acc, t in loc.path_iter()],
        "accessor_at": [canon(loc.accessor_at(i)) for i in range(loc.depth)],
    }


def spec_snap(impl, spec) -> dict:
    """Everything a TensorSpec exposes, in plain form."""
    return {
        "fields": canon([spec.shape, spec.min_shape, spec.max_shape, spec.dtype, spec._bs_multipliers]),
        "describe": [spec.describe(level) for level in levels(impl)],
        "describe_default": spec.describe(),
        "str": str(spec),
        "repr": repr(spec),
        "has_batch_axis": spec.has_batch_axis(),
        "has_dynamic_axis": spec.has_dynamic_axis(),
        "batch_axis_multipliers": outcome(spec.get_batch_axis_multipliers),
        "max_batch_size": outcome(spec.get_max_batch_size),
        "min_batch_size": outcome(spec.get_min_batch_size),
    }


def md_snap(impl, md) -> dict:
    """Everything a SampleMetadata exposes without arguments, in plain form."""
    json_dict = md.to_json_dict()
    return {
        "type": type(md).__name__,
        # tabulate takes a row whose first cell is "\x01" for a separating line and then fails with
        # IndexError on a one-row table: in the reference too, so the outcome is compared
        "describe": [text(lambda level=level: md.describe(level)) for level in levels(impl)],
        "describe_default": text(md.describe),
        "str": text(lambda: str(md)),
        "repr": text(lambda: repr(md)),
        "to_json_dict": canon(json_dict),
        "json.dumps": json.dumps(json_dict),
        "strict": canon(md.strict),
        "llm_phase": canon(md.llm_phase),
        "has_batch_axis": md.has_batch_axis(),
        "detected_dynamic_axis": md.detected_dynamic_axis(),
        "tensor_data": [(loc_snap(loc), spec_snap(impl, spec)) for loc, spec in md.tensor_data],
        "tensor_specs": [spec_snap(impl, spec) for spec in md.tensor_specs],
        "other_data": [(loc_snap(loc), canon(value)) for loc, value in md.other_data],
    }


def leaves_snap(leaves: Iterable) -> list:
    """``find_leaves`` output as (locator snapshot, id of the value): run both on the *same* object."""
    return [(loc_snap(loc), id(value)) for loc, value in leaves]


# --------------------------------------------------------------------------------------------- equality classes


def eq_matrix(objs: list) -> list[list[bool]]:
    return [[a == b for b in objs] for a in objs]


def ne_matrix(objs: list) -> list[list[bool]]:
    return [[a != b for b in objs] for a in objs]


def assert_same_eq_hash_classes(ref_objs: list, fast_objs: list) -> None:
    """Same ``==``/``!=`` answers for every ordered pair, and wherever the reference has ``a == b`` with equal
    hashes, the fast hashes are equal too (hash values themselves may differ between implementations)."""
    assert len(ref_objs) == len(fast_objs)
    assert eq_matrix(fast_objs) == eq_matrix(ref_objs), "== differs"
    assert ne_matrix(fast_objs) == ne_matrix(ref_objs), "!= differs"
    ref_hashes = [hash(o) for o in ref_objs]
    fast_hashes = [hash(o) for o in fast_objs]
    for i, a in enumerate(ref_objs):
        for j, b in enumerate(ref_objs):
            if a == b and ref_hashes[i] == ref_hashes[j]:
                assert fast_hashes[i] == fast_hashes[j], f"items {i} and {j} are equal but hash differently"


# --------------------------------------------------------------------------------------------- plain trees


def iter_tensors(obj: Any, _seen: set | None = None) -> Iterable[torch.Tensor]:
    """Every tensor reachable through builtin containers, dataclasses and plain objects (independent walker)."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (dict, UserDict)):
        for value in obj.values():
            yield from iter_tensors(value, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from iter_tensors(value, seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            yield from iter_tensors(getattr(obj, field.name), seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for value in vars(obj).values():
            yield from iter_tensors(value, seen)


def storage_spans(obj: Any) -> list[tuple[int, int]]:
    spans = []
    for tensor in iter_tensors(obj):
        storage = tensor.untyped_storage()
        if storage.nbytes():
            spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return spans


def assert_no_aliasing(result: Any, inputs: Any) -> None:
    """No non-empty tensor of ``result`` points into the storage of a tensor of ``inputs``."""
    spans = storage_spans(inputs)
    for tensor in iter_tensors(result):
        if tensor.numel() == 0:
            continue
        ptr = tensor.data_ptr()
        for lo, hi in spans:
            assert not lo <= ptr < hi, f"result tensor {tuple(tensor.shape)} aliases an input tensor's storage"


def assert_same_tree(a: Any, b: Any, path: str = "root") -> None:
    """Same types and structure, tensors equal (shape, dtype, values), other leaves canonically equal."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape, f"{path}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} != {b.dtype}"
        assert torch.equal(a, b), f"{path}: values differ"
    elif isinstance(a, (dict, UserDict)):
        assert [canon(k) for k in a] == [canon(k) for k in b], f"{path}: keys differ"
        for key in a:
            assert_same_tree(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tree(x, y, f"{path}[{i}]")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for field in dataclasses.fields(a):
            assert_same_tree(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    elif hasattr(a, "__dict__") and not isinstance(a, type) and type(a).__module__ != "builtins":
        assert sorted(vars(a)) == sorted(vars(b)), f"{path}: attributes differ"
        for key in vars(a):
            assert_same_tree(vars(a)[key], vars(b)[key], f"{path}.{key}")
    else:
        assert canon(a) == canon(b), f"{path}: {a!r} != {b!r}"


def arange_tensor(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor with distinct, deterministic values (so batching results can be compared by value)."""
    numel = math.prod(shape)
    values = torch.arange(numel, dtype=torch.int64)
    if dtype == torch.bool:
        return (values % 2 == 1).reshape(shape)
    return (values % 100).to(dtype).reshape(shape)


def container_ids(obj: Any) -> set[int]:
    """ids of every mutable container / object reachable from ``obj`` (tensors excluded)."""
    found: set[int] = set()

    def walk(x: Any) -> None:
        if id(x) in found or isinstance(x, (torch.Tensor, str, bytes, int, float, type(None))):
            return
        if isinstance(x, (dict, UserDict)):
            found.add(id(x))
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            if isinstance(x, list):
                found.add(id(x))
            for v in x:
                walk(v)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            found.add(id(x))
            for field in dataclasses.fields(x):
                walk(getattr(x, field.name))
        elif hasattr(x, "__dict__") and not isinstance(x, type) and not callable(x):
            found.add(id(x))
            for v in vars(x).values():
                walk(v)

    walk(obj)
    return found


def assert_no_shared_containers(result: Any, inputs: Any) -> None:
    shared = container_ids(result) & container_ids(inputs)
    assert not shared, "the result shares mutable containers with the input"
