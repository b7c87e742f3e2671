"""Type stubs for the Rust extension `aitune_fast._core`.

The public modules (`aitune_fast.sample_metadata`, `.locator`, `.tensor_spec`,
`.exact_sample_metadata`) re-export these classes; import them from there.
"""

from collections.abc import Iterable, Iterator
from typing import Any, Literal, overload

import torch
from typing_extensions import Self, disjoint_base

from aitune_fast._enums import InfoLevel, ObjectType

__all__ = [
    "Locator",
    "TensorSpec",
    "SampleMetadata",
    "ExactSampleMetadata",
    "_type_registry",
    "_gc_objects_but_tuples",
    "_frames_running",
    "_still_running",
    "MAX_DEPTH",
    "tensor_reader",
    "tensor_readers_available",
    "_force_tensor_reader",
    "_dlpack_stats",
    "_stable_abi_extent",
]

MAX_DEPTH: int
"""The deepest nesting a walk accepts; deeper arguments raise ValueError."""

def tensor_reader() -> Literal["dlpack", "stable_abi", "python"]:
    """The tensor reader in use, chosen on first call from ``AITUNE_FAST_TENSOR_READER`` (``auto``,
    ``dlpack``, ``stable_abi``, ``python``): RuntimeError when the one named is unavailable, saying why;
    ValueError for an unknown name."""

def tensor_readers_available() -> list[str]:
    """The readers this process could use, fastest first (``"python"`` always)."""

def _force_tensor_reader(name: str) -> None:
    """Switch readers in this process (tests); the reader must be available."""

def _stable_abi_extent(use_it: bool) -> bool:
    """Whether torch's stable C ABI (torch 2.14+) is found to give ``cache_position``'s storage extent;
    ``use_it=False`` makes Python give it instead (tests)."""

def _dlpack_stats() -> tuple[int, int]:
    """``(refused, skipped)``: reads torch refused the selected fast reader so far, and reads the back-off then
    sent to Python."""

def _type_registry() -> tuple[dict[type, bool], list[type]]:
    """The registered user types (with `only_tensors`) and the ignored types; for `aitune_fast.patch`."""

def _gc_objects_but_tuples() -> list[Any]:
    """What `gc.get_objects()` lists, less the tuples, taken without running Python code (a tuple another thread
    is still filling must have no other reference); for the patch's scans of live objects."""

def _frames_running(codes: set[Any], me: int) -> list[tuple[int, Any]]:
    """For every thread but `me`: its innermost frame running one of `codes`, as (thread id, frame); the frames
    are walked in one step no other thread can run in the middle of."""

def _still_running(pending: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Of `pending` ((thread id, frame) pairs), those whose frame is still on its thread's stack."""

_Accessor = int | str | Any

@disjoint_base
class Locator:
    """A path to one leaf of a nested argument: ``((accessor, ObjectType), ...)`` steps.

    Equal (and hashing alike) when the steps are equal; `is_output` only changes `display_path`.
    Immutable.
    """

    @overload
    def __new__(cls, access_path: None = None, is_output: Literal[False] = False) -> Self:
        """A blank locator, as unpickling a stock AITune pickle makes one (see `__setstate__`)."""
    @overload
    def __new__(cls, access_path: Iterable[tuple[_Accessor, ObjectType | int]], is_output: bool = False) -> Self: ...
    def __setstate__(self, state: dict[str, Any]) -> None:
        """Fill a blank object (made with no arguments, as unpickling a stock AITune pickle makes one) from
        the state the stock class pickles, once; bad states raise TypeError/ValueError."""
    @property
    def depth(self) -> int:
        """Number of steps."""
    @property
    def leaf_name(self) -> _Accessor:
        """The last step's accessor (IndexError for the empty path)."""
    @property
    def root_name(self) -> _Accessor:
        """The first step's accessor, or ``""`` for the empty path."""
    @property
    def path(self) -> _Accessor | tuple[_Accessor, ...]:
        """The accessors without container types; a one-step path is returned bare."""
    @property
    def display_path(self) -> str:
        """The path as Python code: ``x``, ``kwargs["k"][0]``, ``cache.layers[3].keys``, ``output[1]``."""
    def accessor_at(self, index: int) -> _Accessor:
        """The accessor of step `index` (negative counts from the end)."""
    def path_iter(self) -> Iterator[tuple[_Accessor, ObjectType]]:
        """The `(accessor, ObjectType)` steps."""
    def get_value(self, obj: Any) -> Any:
        """The value at this path inside `obj` (KeyError/IndexError/AttributeError saying which step failed)."""
    def set_value(self, obj: Any, value: Any) -> Any:
        """Put `value` at this path inside `obj`; tuples on the way are rebuilt. Returns the new root."""
    @staticmethod
    def find_leaves(obj: Any, only_tensors: bool = False, is_output: bool = False) -> Iterator[tuple[Locator, Any]]:
        """Walk `obj` (dicts, UserDicts, lists, tuples, dataclasses, registered user types) and
        yield `(Locator, leaf)` pairs. Raises ValueError on a cyclic argument."""
    @staticmethod
    def register_user_type(cls: type, only_tensors: bool = False) -> None:
        """Walk instances of `cls` over their public data attributes (class and instance).
        With `only_tensors`, only tensors are collected inside them."""
    @staticmethod
    def unregister_user_type(cls: type) -> None: ...
    @staticmethod
    def ignore_type(cls: type) -> None:
        """Neither walk nor report instances of exactly `cls`."""
    @staticmethod
    def unignore_type(cls: type) -> None: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class TensorSpec:
    """Shape, dtype and learned axes of one tensor. The fields are plain lists: changing them
    changes what the spec (and any metadata holding it) reports. Equal when the ranks are equal."""

    shape: list[int | str]
    min_shape: list[int]
    max_shape: list[int]
    dtype: torch.dtype | None
    _bs_multipliers: list[float]
    @overload
    def __new__(
        cls,
        shape: None = None,
        min_shape: None = None,
        max_shape: None = None,
        dtype: None = None,
        _bs_multipliers: None = None,
    ) -> Self:
        """A blank spec, as unpickling a stock AITune pickle makes one (see `__setstate__`)."""
    @overload
    def __new__(
        cls,
        shape: list[int | str],
        min_shape: list[int],
        max_shape: list[int],
        dtype: torch.dtype | None,
        _bs_multipliers: list[float],
    ) -> Self: ...
    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Fill a blank object (made with no arguments, as unpickling a stock AITune pickle makes one) from
        the state the stock class pickles, once; bad states raise TypeError/ValueError."""
    @staticmethod
    def from_tensor(tensor: torch.Tensor, batch_size: float) -> TensorSpec:
        """The spec of `tensor`; multipliers are sizes divided by `batch_size` (NaN when unknown)."""
    def describe(self, info_level: InfoLevel | None = None) -> str:
        """Shape (SHORT), plus dtype (MEDIUM), plus min/max shapes (FULL, the default; also for None). Any enum
        member named SHORT, MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError."""
    def update_shapes_seen(self, other: TensorSpec) -> None:
        """Learn from another sample: changed axes become ``batchN`` (same integer multiplier of
        the batch size) or ``dimN``. ValueError when the ranks differ."""
    def get_batch_axis_multipliers(self) -> dict[int, int]: ...
    def get_max_batch_size(self) -> int: ...
    def get_min_batch_size(self) -> int | None: ...
    def has_batch_axis(self) -> bool: ...
    def has_dynamic_axis(self) -> bool: ...
    def matches(self, other: TensorSpec) -> bool:
        """Same rank and equal sizes wherever both hold a concrete size."""
    def to_dict(self) -> dict[str, Any]: ...
    @staticmethod
    def from_dict(data: dict[str, Any]) -> TensorSpec:
        """Inverse of `to_dict` (removes the ``"type"`` key from `data`, like the reference)."""
    @staticmethod
    def is_int(value: float) -> bool: ...

@disjoint_base
class SampleMetadata:
    """The description of a call's inputs or outputs that selects a compiled backend.

    Tensors are recorded by locator and spec; in strict mode other leaves by value. Equality (and
    hash) compare locators, tensor ranks and other values, ignoring dict key order; an LLM phase
    detected from ``cache_position`` replaces all of that. Build with `from_inputs`/`from_outputs`.
    """

    @overload
    def __new__(
        cls, tensor_data: None = None, other_data: None = None, strict: None = None, llm_phase: None = None
    ) -> Self:
        """A blank metadata, as unpickling a stock AITune pickle makes one (see `__setstate__`)."""
    @overload
    def __new__(
        cls,
        tensor_data: Iterable[tuple[Locator, TensorSpec]],
        other_data: Iterable[tuple[Locator, Any]],
        strict: bool | None = None,
        llm_phase: Literal["prefill", "decode"] | None = None,
    ) -> Self: ...
    def __setstate__(self, state: dict[str, Any]) -> None:
        """Fill a blank object (made with no arguments, as unpickling a stock AITune pickle makes one) from
        the state the stock class pickles, once; bad states raise TypeError/ValueError."""
    @staticmethod
    def from_inputs(
        inputs: dict[str, Any], strict: bool | None = None, batch_size: int | None = None
    ) -> SampleMetadata:
        """Describe forward inputs keyed by parameter name; `batch_size` defaults to global_context's."""
    @staticmethod
    def from_outputs(output: Any, strict: bool | None = None, batch_size: int | None = None) -> SampleMetadata: ...
    @staticmethod
    def from_dict(data: dict[str, Any]) -> SampleMetadata:
        """Inverse of `to_dict`, of the class that wrote it (an `ExactSampleMetadata`'s dict gives one back,
        whichever class this is called on); also reads dicts written by the reference, without running pickle (a
        `SampleMetadata`, as the reference's `from_dict` returns)."""
    def to_dict(self) -> dict[str, Any]:
        """The reference's keys with aitune_fast's versioned, pickle-free encoding (naming the class when it is an
        `ExactSampleMetadata`)."""
    def to_json_dict(self) -> dict[str, Any]:
        """A dict for `json.dumps`, identical to the reference's."""
    def to_json(self) -> str:
        """JSON text: `to_json_dict()`'s content plus what `from_json` needs for an exact round trip, and the class
        when it is an `ExactSampleMetadata`."""
    @staticmethod
    def from_json(text: str) -> SampleMetadata:
        """Inverse of `to_json`: a `SampleMetadata` or, where the document says so, an `ExactSampleMetadata`."""
    def describe(self, info_level: InfoLevel | None = None) -> str:
        """Tensor paths (SHORT) or tables (MEDIUM, FULL: the default; also for None). Any enum member named SHORT,
        MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError (the reference renders
        nothing)."""
    def detected_dynamic_axis(self) -> bool: ...
    def has_batch_axis(self) -> bool: ...
    def update_shapes_seen(self, other: SampleMetadata) -> None:
        """Learn dynamic and batch axes from a later sample; ValueError when the tensors differ."""
    def make_batch(self, inputs: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """A copy of `inputs` with tensors sliced/repeated along batch axes; the input is untouched
        and the result shares no memory with it."""
    def update_max_batch_size(self, inputs: dict[str, Any], max_batch_size: int) -> None: ...
    def _describe_rows(self, full: bool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The MEDIUM (or, with `full`, FULL) tables' rows, ``(tensor_rows, other_rows)``; for `describe`."""
    def _batch_reads(
        self, pairs: list[tuple[Locator, TensorSpec]], inputs: Any
    ) -> tuple[list[int], list[Any], list[tuple[tuple[int, int], ...]]]:
        """``(indices, values, axes)`` of the `pairs` whose spec has batch axes: the pair's index, the value read
        from `inputs` at its locator and its ``(axis, multiplier)`` pairs; for `make_batch`."""
    @property
    def llm_phase(self) -> Literal["prefill", "decode", ""]: ...
    @property
    def strict(self) -> bool: ...
    @property
    def tensor_data(self) -> tuple[tuple[Locator, TensorSpec], ...]:
        """The tensors' locators and specs; the specs are live (see TensorSpec)."""
    @property
    def other_data(self) -> tuple[tuple[Locator, Any], ...]: ...
    @property
    def tensor_specs(self) -> list[TensorSpec]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __copy__(self) -> Self:
        """A new metadata of the same class sharing this one's `(Locator, TensorSpec)` pairs (`copy.copy`)."""

class ExactSampleMetadata(SampleMetadata):
    """Equal only with the same locators, exact shapes and other values; never equal to a plain
    SampleMetadata. For bucketing recorded samples."""

    @staticmethod
    def from_inputs(inputs: dict[str, Any]) -> ExactSampleMetadata: ...  # type: ignore[override]
