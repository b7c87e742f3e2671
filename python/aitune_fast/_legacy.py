"""Reading the pickled parts of dicts written by the reference's ``SampleMetadata.to_dict()``.

The reference (``aitune`` 0.6.0) stores ``pickle.dumps(tensor_data)`` and ``pickle.dumps(other_data)``.
Unpickling runs whatever the bytes ask for, so a crafted checkpoint could run any code. This module reads
those bytes with a restricted unpickler instead:

* a pre-scan (``pickletools.genops``, which only parses) refuses the opcodes such data never holds
  (persistent ids, extension codes, protocol-0/1 instance building), memo indices beyond the data's size
  (a few bytes could otherwise make the unpickler allocate gigabytes), and trailing bytes;
* ``find_class`` admits only the reference's ``Locator``, ``ObjectType`` and ``TensorSpec``, torch dtypes,
  and ``set``/``frozenset``/``complex``/``bytearray`` and ``_codecs.encode`` (which pickle builds builtin
  values with, by calling them, in some protocols),
  and returns inert stand-ins for them: plain classes whose ``__setstate__`` only stores checked data, and
  small functions that check their arguments. Anything else, any other callable or unknown global, is
  refused with a ``ValueError`` naming it, before anything runs;
* the stand-ins are then mapped onto plain data, which the Rust core turns into aitune_fast's own classes.

Nothing in the payload is executed: the only code that runs is the unpickler's own and the stand-ins'.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from collections.abc import Callable
from typing import Any

__all__ = ["load_other_data", "load_tensor_data"]

_LOCATOR_MODULE = "aitune.torch.module.locator"
_TENSOR_SPEC_MODULE = "aitune.torch.module.tensor_spec"

# opcodes reference-written metadata never holds, and that would reach code or state beyond find_class
_REFUSED_OPCODES = {
    "PERSID": "persistent ids",
    "BINPERSID": "persistent ids",
    "EXT1": "the copyreg extension registry",
    "EXT2": "the copyreg extension registry",
    "EXT4": "the copyreg extension registry",
    "INST": "protocol-0 instance building",
    "OBJ": "protocol-1 instance building",
}
_PUT_OPCODES = {"PUT", "BINPUT", "LONG_BINPUT"}


class _Refused(pickle.UnpicklingError):
    """Raised inside the unpickler; turned into ValueError by :func:`_load`."""


class _StandIn:
    __slots__ = ()

    def __reduce__(self):  # never pickled again
        raise TypeError(f"{type(self).__name__} is internal to aitune_fast._legacy")


class _Kind(_StandIn):
    """A reference ``ObjectType`` member."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __setstate__(self, state: Any) -> None:
        raise _Refused("an ObjectType member was given state")


class _Dtype(_StandIn):
    """A torch dtype, by name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"torch.{self.name} was given state")


def _merge_state(state: Any, what: str) -> dict:
    """``BUILD`` state: a dict, or ``(dict or None, slots dict or None)``."""
    if isinstance(state, tuple) and len(state) == 2:
        merged: dict = {}
        for part in state:
            if part is None:
                continue
            if type(part) is not dict:
                raise _Refused(f"{what} state holds a {type(part).__name__}, not a dict")
            merged.update(part)
        state = merged
    if type(state) is not dict:
        raise _Refused(f"{what} state is a {type(state).__name__}, not a dict")
    for key in state:
        if type(key) is not str:
            raise _Refused(f"{what} state has a non-string key {key!r}")
    return state


class _Locator(_StandIn):
    """A reference ``Locator``: ``_access_path`` and ``_is_output`` (``display_path`` is derived)."""

    __slots__ = ("access_path", "is_output", "built")

    def __setstate__(self, state: Any) -> None:
        if getattr(self, "built", False):
            raise _Refused("a Locator was given state twice")
        state = _merge_state(state, "Locator")
        unknown = set(state) - {"_access_path", "_is_output", "display_path"}
        if unknown:
            raise _Refused(f"Locator state has unknown attributes {sorted(unknown)}")
        if "_access_path" not in state:
            raise _Refused("Locator state has no _access_path")
        self.access_path = state["_access_path"]
        self.is_output = state.get("_is_output", False)
        self.built = True


_SPEC_FIELDS = ("shape", "min_shape", "max_shape", "dtype", "_bs_multipliers")


class _TensorSpec(_StandIn):
    """A reference ``TensorSpec`` (a slots dataclass): its five fields."""

    __slots__ = ("fields", "built")

    def __setstate__(self, state: Any) -> None:
        if getattr(self, "built", False):
            raise _Refused("a TensorSpec was given state twice")
        if type(state) is list and len(state) == len(_SPEC_FIELDS):  # dataclass __getstate__ of some Pythons
            state = dict(zip(_SPEC_FIELDS, state, strict=True))
        state = _merge_state(state, "TensorSpec")
        if set(state) != set(_SPEC_FIELDS):
            raise _Refused(f"TensorSpec state has attributes {sorted(state)}, expected {sorted(_SPEC_FIELDS)}")
        self.fields = state
        self.built = True


def _object_type(value: Any) -> _Kind:
    if type(value) is not int or not 0 <= value <= 3:
        raise _Refused(f"ObjectType({value!r}) is not a member (0 to 3)")
    return _Kind(value)


def _items(value: Any, what: str) -> list:
    if type(value) not in (list, tuple):
        raise _Refused(f"{what}() takes a list or tuple here, got {type(value).__name__}")
    return list(value)


def _make_set(items: Any = ()) -> set:
    return set(_items(items, "set"))


def _make_frozenset(items: Any = ()) -> frozenset:
    return frozenset(_items(items, "frozenset"))


def _make_complex(real: Any = 0.0, imag: Any = 0.0) -> complex:
    for part in (real, imag):
        if type(part) not in (int, float):
            raise _Refused(f"complex() takes numbers here, got {type(part).__name__}")
    return complex(real, imag)


def _make_bytearray(data: Any = b"", *rest: Any) -> bytearray:
    if type(data) is bytes and not rest:
        return bytearray(data)
    if type(data) is str and len(rest) == 1 and rest[0] == "latin-1":  # protocol 2
        return bytearray(data, "latin-1")
    raise _Refused("bytearray() takes bytes here")


def _latin1_bytes(text: Any, encoding: Any = None) -> bytes:
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise _Refused("_codecs.encode() takes (str, 'latin1') here")
    return text.encode("latin1")


_BUILTINS = {"set": _make_set, "frozenset": _make_frozenset, "complex": _make_complex, "bytearray": _make_bytearray}


class _Callable(_StandIn):
    """What ``find_class`` hands out for an admitted callable: no ``__dict__``, and no state can be set on it
    (a plain function would let a ``BUILD`` opcode write attributes such as ``__defaults__``)."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Any, name: str) -> None:
        self.fn = fn
        self.name = name

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"{self.name} was given state")


def _torch_dtype_names() -> frozenset[str]:
    import torch

    # vars(torch), not getattr: torch's module __getattr__ may import submodules
    return frozenset(name for name, value in vars(torch).items() if isinstance(value, torch.dtype))


_DTYPE_NAMES: frozenset[str] | None = None


def _dtype_names() -> frozenset[str]:
    global _DTYPE_NAMES
    if _DTYPE_NAMES is None:
        _DTYPE_NAMES = _torch_dtype_names()
    return _DTYPE_NAMES


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler whose globals are the stand-ins above, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _LOCATOR_MODULE and name == "Locator":
            return _Locator
        if module == _LOCATOR_MODULE and name == "ObjectType":
            return _Callable(_object_type, "ObjectType")
        if module == _TENSOR_SPEC_MODULE and name == "TensorSpec":
            return _TensorSpec
        if module == "torch" and name in _dtype_names():
            return _Dtype(name)
        if module in ("builtins", "__builtin__") and name in _BUILTINS:
            return _Callable(_BUILTINS[name], f"builtins.{name}")
        if module == "_codecs" and name == "encode":  # how protocols 2 and lower write bytes
            return _Callable(_latin1_bytes, "_codecs.encode")
        raise _Refused(
            f"refused global {module}.{name}: reference metadata holds only the reference's Locator, "
            "ObjectType and TensorSpec, torch dtypes, and builtin scalars and containers"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("refused a persistent id")


def _prescan(data: bytes) -> None:
    limit = len(data)
    last = None
    for opcode, arg, pos in pickletools.genops(data):
        name = opcode.name
        if name in _REFUSED_OPCODES:
            raise _Refused(f"refused opcode {name} at byte {pos} ({_REFUSED_OPCODES[name]})")
        if name in _PUT_OPCODES and not (isinstance(arg, int) and 0 <= arg <= limit):
            raise _Refused(f"memo index {arg} at byte {pos} is beyond the data's size")
        last = pos
    if last is None or last + 1 != len(data):
        raise _Refused("bytes follow the pickle's STOP opcode")


def _load(data: bytes, what: str) -> Any:
    try:
        _prescan(data)
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise ValueError(f"SampleMetadata.from_dict: {what}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure of malformed data is reported the same way
        raise ValueError(f"SampleMetadata.from_dict: {what}: not a readable reference pickle: {exc!r}") from None


# ------------------------------------------------------------------------------------------- mapping


class _Bad(Exception):
    pass


def _value(value: Any, memo: dict[int, Any]) -> Any:
    """A loaded value with dtype stand-ins replaced by torch dtypes; other stand-ins are refused.

    Containers are converted in place (lists, dicts, sets) or rebuilt (tuples, frozensets), once each,
    so shared and self-referencing containers keep their shape. Items are converted in list comprehensions,
    never in generators consumed by C code: Python-to-Python calls take no C stack, so deep nesting ends in
    RecursionError (reported as a ValueError), not in a C stack overflow on a small thread stack.
    """
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes, complex, bytearray):
        return value
    key = id(value)
    if key in memo:
        return memo[key]
    if kind is _Dtype:
        import torch

        result = vars(torch)[value.name]
    elif kind is list:
        memo[key] = value
        for i, item in enumerate(value):
            value[i] = _value(item, memo)
        return value
    elif kind is dict:
        memo[key] = value
        items = list(value.items())
        value.clear()
        for k, v in items:
            value[_value(k, memo)] = _value(v, memo)
        return value
    elif kind is set:
        memo[key] = value
        items = list(value)
        value.clear()
        value.update([_value(item, memo) for item in items])
        return value
    elif kind is tuple:
        result = tuple([_value(item, memo) for item in value])
    elif kind is frozenset:
        result = frozenset([_value(item, memo) for item in value])
    else:
        name = {_Locator: "a Locator", _TensorSpec: "a TensorSpec", _Kind: "an ObjectType"}.get(kind, kind.__name__)
        raise _Bad(f"{name} where a plain value was expected")
    memo[key] = result
    return result


def _steps(locator: Any, memo: dict[int, Any]) -> tuple[tuple[tuple[Any, int], ...], bool]:
    if type(locator) is not _Locator or not getattr(locator, "built", False):
        raise _Bad(f"expected a Locator, got {type(locator).__name__}")
    path, is_output = locator.access_path, locator.is_output
    if type(path) not in (tuple, list):
        raise _Bad(f"a Locator's _access_path is a {type(path).__name__}, not a tuple")
    if type(is_output) is not bool:
        raise _Bad(f"a Locator's _is_output is a {type(is_output).__name__}, not a bool")
    steps = []
    for step in path:
        if type(step) not in (tuple, list) or len(step) != 2:
            raise _Bad("a Locator step is an (accessor, ObjectType) pair")
        accessor, kind = step
        if type(kind) is _Kind:
            kind = kind.value
        elif type(kind) is not int or not 0 <= kind <= 3:
            raise _Bad(f"a Locator step's object type is {kind!r}, not an ObjectType")
        steps.append((_value(accessor, memo), kind))
    return tuple(steps), is_output


def _pairs(loaded: Any) -> list:
    if type(loaded) not in (tuple, list):
        raise _Bad(f"expected a tuple of (Locator, ...) pairs, got {type(loaded).__name__}")
    for pair in loaded:
        if type(pair) not in (tuple, list) or len(pair) != 2:
            raise _Bad("expected (Locator, ...) pairs")
    return list(loaded)


def _list(value: Any, item_types: tuple[type, ...], what: str) -> list:
    if type(value) not in (list, tuple):
        raise _Bad(f"TensorSpec.{what} is a {type(value).__name__}, not a list")
    for item in value:
        if type(item) not in item_types:
            raise _Bad(f"TensorSpec.{what} holds a {type(item).__name__}")
    return list(value)


def load_tensor_data(data: bytes) -> list[tuple]:
    """``(steps, is_output, shape, min_shape, max_shape, dtype, bs_multipliers)`` for each pickled pair."""
    return _rows(data, "tensor_data", _tensor_row)


def load_other_data(data: bytes) -> list[tuple]:
    """``(steps, is_output, value)`` for each pickled pair."""
    return _rows(data, "other_data", _other_row)


def _rows(data: bytes, what: str, row: Callable[[Any, bool, Any, dict[int, Any]], tuple]) -> list[tuple]:
    """``row(steps, is_output, second, memo)`` for each pickled ``(Locator, second)`` pair of ``what``."""
    loaded = _load(data, what)
    memo: dict[int, Any] = {}
    rows = []
    try:
        for i, (locator, second) in enumerate(_pairs(loaded)):
            try:
                steps, is_output = _steps(locator, memo)
                rows.append(row(steps, is_output, second, memo))
            except _Bad as exc:
                raise _Bad(f"{what}[{i}]: {exc}") from None
    except (_Bad, RecursionError) as exc:
        raise ValueError(f"SampleMetadata.from_dict: {_message(exc)}") from None
    return rows


def _other_row(steps: Any, is_output: bool, value: Any, memo: dict[int, Any]) -> tuple:
    return (steps, is_output, _value(value, memo))


def _tensor_row(steps: Any, is_output: bool, spec: Any, memo: dict[int, Any]) -> tuple:
    if type(spec) is not _TensorSpec or not getattr(spec, "built", False):
        raise _Bad(f"expected a TensorSpec, got {type(spec).__name__}")
    f = spec.fields
    dtype = f["dtype"]
    if dtype is not None and type(dtype) is not _Dtype:
        raise _Bad(f"TensorSpec.dtype is a {type(dtype).__name__}, not a torch dtype")
    return (
        steps,
        is_output,
        _list(f["shape"], (int, str), "shape"),
        _list(f["min_shape"], (int,), "min_shape"),
        _list(f["max_shape"], (int,), "max_shape"),
        None if dtype is None else _value(dtype, memo),
        [float(m) for m in _list(f["_bs_multipliers"], (int, float), "_bs_multipliers")],
    )


def _message(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "a value is nested too deeply"
    return str(exc)
