"""Type stubs for the Rust extension `aitune_fast._core`.

The public modules (`aitune_fast.sample_metadata`, `.locator`, `.tensor_spec`,
`.exact_sample_metadata`) re-export these classes; import them from there.
"""

import enum
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, final, overload

import torch
from typing_extensions import Self, disjoint_base

from aitune_fast._enums import InfoLevel, ObjectType

__all__ = [
    "Locator",
    "TensorSpec",
    "SampleMetadata",
    "ExactSampleMetadata",
    "_type_registry",
    "_safe_enum_table",
    "_gc_objects_but_tuples",
    "_frames_running",
    "_still_running",
    "_set_dispatch_stats",
    "_dispatch_stats_on",
    "_dispatch_stats",
    "_reset_dispatch_stats",
    "_CallPath",
    "_BindPlan",
    "_BindCache",
    "_DescribeCache",
    "_ClassGuard",
    "_NameGuard",
    "_ContextPart",
    "_ForwardPart",
    "_TunedCallPart",
    "_InferPart",
    "_EagerPart",
    "_MetricsPart",
    "_ModuleCallPart",
    "MAX_DEPTH",
    "_STOCK_STEP",
    "tensor_reader",
    "tensor_readers_available",
    "_force_tensor_reader",
    "_dlpack_stats",
    "_stable_abi_extent",
]

MAX_DEPTH: int
"""The deepest nesting a walk accepts; deeper arguments raise ValueError."""
_STOCK_STEP: object
"""What an entry of ``_CallPath`` returns, having done nothing, where its shim is to run stock's step instead: its
part is not learned, or the calling thread has too little C stack left for the native path."""

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

def _safe_enum_table() -> dict[str, type[enum.Enum]]:
    """The allow-list itself (`{qualified name: class}`), for `aitune_fast._safe_enums` to change."""

def _gc_objects_but_tuples() -> list[Any]:
    """What `gc.get_objects()` lists, less the tuples, taken without running Python code (a tuple another thread
    is still filling must have no other reference); for the patch's scans of live objects."""

def _frames_running(codes: set[Any], me: int) -> list[tuple[int, Any]]:
    """For every thread but `me`: its innermost frame running one of `codes`, as (thread id, frame); the frames
    are walked in one step no other thread can run in the middle of."""

def _still_running(pending: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Of `pending` ((thread id, frame) pairs), those whose frame is still on its thread's stack."""

def _set_dispatch_stats(on: bool) -> None:
    """Switches dispatch statistics on or off (``aitune_fast.configure(dispatch_stats=...)``)."""

def _dispatch_stats_on() -> bool:
    """Whether dispatch statistics are collected."""

def _dispatch_stats(tuned: Any) -> dict[str, Any] | None:
    """`tuned`'s record as a dict (``calls``, ``other``, ``misses``, ``hits``: a list of ``(backend, hits)`` of the
    backends alive, ``last_miss``: the last miss's metadata or None, ``p50_ns``, ``p99_ns``, ``max_ns``), or None
    where it has none."""

def _reset_dispatch_stats(tuned: Any) -> None:
    """Drops `tuned`'s record: its counts start again from zero."""

@final
class _BindPlan:
    """A call shape's binding, kept (``aitune_fast.patch._call_path.compile_binder``): where each value of the
    normalized ``args``, ``kwargs`` and ``arguments`` comes from (a positional index or a keyword name of the call)."""

    def __new__(cls, args: tuple[Any, ...], kwargs: dict[str, Any], arguments: dict[str, Any], /) -> Self: ...
    def __call__(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], /
    ) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
        """The normalized ``(args, kwargs, arguments)`` of a call of this plan's shape."""

@final
class _BindCache:
    """The plans of the call shapes that repeat, per forward signature (``aitune_fast.patch._call_path``): a shape's
    first call binds as stock does, its second compiles it with `compile`."""

    def __new__(
        cls, *, signature_cls: type, guard: _ClassGuard, compile: Callable[[Any, int, tuple[str, ...]], Any]
    ) -> Self: ...
    def plan(self, signature: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> _BindPlan | None:
        """The plan of this call's shape, or None where stock's ``normalize`` must bind it."""

@final
class _DescribeCache:
    """Backends' ``describe()`` results, kept where a description is a function of the backend's class, its config's
    class and the config's field values; `decide(backend_cls, config_cls)` says where (``(guards, getter)``). A config
    object holding one of `config_functions` itself is described every call."""

    def __new__(
        cls,
        *,
        decide: Callable[[type, type], tuple[Any, Any]],
        config_functions: tuple[str, ...],
        immutable: frozenset[type],
    ) -> Self: ...
    def describe(self, backend: Any) -> Any:
        """``backend.describe()``, kept where that is a function of the key."""

@final
class _ContextPart:
    """AITune's global context, pushed and popped in place of ``with global_context:`` and ``set``."""

    def __new__(
        cls,
        *,
        obj: Any,
        context_cls: type,
        module_key: Any,
        backend_key: Any,
        guard: _ClassGuard,
        names: tuple[_NameGuard, ...],
    ) -> Self: ...
    @property
    def obj(self) -> Any: ...
    @property
    def context_cls(self) -> type: ...
    @property
    def module_key(self) -> Any: ...
    @property
    def backend_key(self) -> Any: ...
    @property
    def guard(self) -> _ClassGuard: ...
    @property
    def names(self) -> tuple[_NameGuard, ...]: ...

@final
class _ForwardPart:
    """``Module._forward``'s hook swap, done in the wrapped module's ``__dict__``."""

    def __new__(cls, *, init_state: Any, nn_setattr: Any, stock_swap: Any, guard: _ClassGuard) -> Self: ...
    @property
    def init_state(self) -> Any: ...
    @property
    def nn_setattr(self) -> Any: ...
    @property
    def stock_swap(self) -> Any: ...
    @property
    def guard(self) -> _ClassGuard: ...

@final
class _TunedCallPart:
    """``TunedModule.__call__``: binding, the module's context, the backend lookup."""

    def __new__(
        cls,
        *,
        tuned_cls: type,
        shim: Any,
        owner: Any,
        binder: _BindCache,
        stock_steps: Any,
        safe_call: Any,
        unique_call: Any,
    ) -> Self: ...
    @property
    def tuned_cls(self) -> type: ...
    @property
    def shim(self) -> Any: ...
    @property
    def owner(self) -> Any: ...
    @property
    def binder(self) -> _BindCache: ...
    @property
    def stock_steps(self) -> Any: ...
    @property
    def safe_call(self) -> Any: ...
    @property
    def unique_call(self) -> Any: ...

@final
class _InferPart:
    """``Backend.infer``: its context, nvtx range, hardware-metrics scope and state check."""

    def __new__(
        cls,
        *,
        shim: Any,
        stock: Any,
        describe: _DescribeCache,
        annotation: Any,
        nvtx_decorator: Any,
        nvtx_module: Any,
        metrics_module: Any,
        scope: str,
        states: tuple[Any, ...],
        annotations: dict[str, Any],
        annotate_cls: list[Any],
    ) -> Self: ...
    @property
    def shim(self) -> Any: ...
    @property
    def stock(self) -> Any: ...
    @property
    def describe(self) -> _DescribeCache: ...
    @property
    def annotation(self) -> Any: ...
    @property
    def nvtx_decorator(self) -> Any: ...
    @property
    def nvtx_module(self) -> Any: ...
    @property
    def metrics_module(self) -> Any: ...
    @property
    def scope(self) -> str: ...
    @property
    def states(self) -> tuple[Any, ...]: ...
    @property
    def annotations(self) -> dict[str, Any]: ...
    @property
    def annotate_cls(self) -> list[Any]: ...

@final
class _EagerPart:
    """Stock TorchEager's ``_infer``: the module called with grad off."""

    def __new__(cls, *, infer: Any, grad_enabled: Any, set_grad_enabled: Any, grad_guards: tuple[Any, ...]) -> Self: ...
    @property
    def infer(self) -> Any: ...
    @property
    def grad_enabled(self) -> Any: ...
    @property
    def set_grad_enabled(self) -> Any: ...
    @property
    def grad_guards(self) -> tuple[Any, ...]: ...

@final
class _MetricsPart:
    """The hardware-metrics scope while AITune's collector is its no-op one (metrics off, as they are unless enabled):
    then ``start_scope`` and ``end_scope`` do nothing, and the path skips them."""

    def __new__(
        cls, *, session: Any, session_guard: _ClassGuard, enabled: Any, noop_guard: _ClassGuard, names: tuple[Any, ...]
    ) -> Self: ...
    @property
    def session(self) -> Any: ...
    @property
    def session_guard(self) -> _ClassGuard: ...
    @property
    def enabled(self) -> Any: ...
    @property
    def noop_guard(self) -> _ClassGuard: ...
    @property
    def names(self) -> tuple[Any, ...]: ...

@final
class _ModuleCallPart:
    """``nn.Module.__call__`` where it would only call ``forward``."""

    def __new__(cls, *, call: Any, call_impl: Any, globals: dict[str, Any], is_tracing: Any) -> Self: ...
    @property
    def call(self) -> Any: ...
    @property
    def call_impl(self) -> Any: ...
    @property
    def globals(self) -> dict[str, Any]: ...
    @property
    def is_tracing(self) -> Any: ...

@final
class _CallPath:
    """A tuned module's per-call path under ``patch_aitune()`` in one native call, built from the parts
    ``aitune_fast.patch._call_path`` learned (None where one was not: its step runs stock's code)."""

    def __new__(
        cls,
        *,
        context: _ContextPart | None = None,
        forward: _ForwardPart | None = None,
        tuned: _TunedCallPart | None = None,
        infer: _InferPart | None = None,
        eager: _EagerPart | None = None,
        module_call: _ModuleCallPart | None = None,
        metrics: _MetricsPart | None = None,
    ) -> Self: ...
    def forward(self, proxy: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> Any:
        """``Module._forward``: the hook swap around the tuned wrapper's call."""
    def call(self, tuned: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> Any:
        """``TunedModule.__call__``: binding, AITune's context, the backend lookup and its ``infer``."""
    def infer(self, backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> Any:
        """``Backend.infer``: its context, nvtx range, metrics scope, state check and ``_infer``."""

@final
class _ClassGuard:
    """Whether a class still holds, under some names, the objects it held when the guard was made (its version tag
    compared while nothing changed; the names looked up again, without descriptors, when something did)."""

    def __new__(cls, owner: type, names: tuple[str, ...], /) -> Self: ...
    def holds(self) -> bool:
        """Whether the class holds the same objects under the guarded names as when the guard was made."""
    @property
    def cls(self) -> type:
        """The guarded class."""
    @property
    def names(self) -> tuple[str, ...]:
        """The guarded names, in the order given."""

@final
class _NameGuard:
    """Whether a namespace (a module's ``vars()``) still names, under some names, the objects it named when the guard
    was made."""

    def __new__(cls, namespace: dict[str, Any], names: tuple[str, ...], /) -> Self: ...
    def holds(self) -> bool:
        """Whether the namespace holds the same objects under the guarded names."""

_Accessor = int | str | Any

@disjoint_base
class Locator:
    """A path into a nested structure of arguments or outputs.

    Built from `((accessor, ObjectType), ...)` steps; equal when the steps are equal (whether the
    locator points into outputs does not matter for equality, only for `display_path`).

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
        """Number of steps in the path."""
    @property
    def leaf_name(self) -> _Accessor:
        """The last step's accessor.

        Raises IndexError for the empty path.
        """
    @property
    def root_name(self) -> _Accessor:
        """The first step's accessor, or `""` for the empty path."""
    @property
    def path(self) -> _Accessor | tuple[_Accessor, ...]:
        """The accessors without their container types, e.g. `("inputs", "tokens", 0)`; one step alone is bare."""
    @property
    def display_path(self) -> str:
        """The path rendered like Python code: `x`, `kwargs["k"][0]`, `cache.layers[3].keys`, `output[1]`."""
    def accessor_at(self, index: int) -> _Accessor:
        """The accessor of step `index` (negative indexes count from the end)."""
    def path_iter(self) -> Iterator[tuple[_Accessor, ObjectType]]:
        """Iterate over `(accessor, ObjectType)` steps."""
    def get_value(self, obj: Any) -> Any:
        """The value this locator points to inside `obj`.

        A step that is missing raises KeyError, IndexError or AttributeError saying which step failed.
        """
    def set_value(self, obj: Any, value: Any) -> Any:
        """Put `value` at this locator inside `obj` and return the (possibly new) root.

        Containers are changed in place; tuples cannot be, so each tuple on the way is rebuilt
        and put back into its parent, up to the root if needed.
        """
    @staticmethod
    def find_leaves(obj: Any, only_tensors: bool = False, is_output: bool = False) -> Iterator[tuple[Locator, Any]]:
        """Walk `obj` and return an iterator of `(Locator, leaf)` pairs, in the reference's order.

        Walks dicts, UserDicts, lists, tuples, dataclasses and registered user types; raises ValueError on a
        cyclic argument.
        """
    @staticmethod
    def register_user_type(cls: type, only_tensors: bool = False) -> None:
        """Walk instances of `cls` like dataclasses, over their public data attributes.
        With `only_tensors=True` only tensors are collected inside them.
        """
    @staticmethod
    def unregister_user_type(cls: type) -> None:
        """Undo `register_user_type(cls)`: instances of `cls` are leaves again."""
    @staticmethod
    def ignore_type(cls: type) -> None:
        """Skip instances of `cls` entirely: neither walked nor reported as leaves."""
    @staticmethod
    def unignore_type(cls: type) -> None:
        """Undo `ignore_type(cls)`: instances of `cls` are walked or reported again."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class TensorSpec:
    """Metadata of one tensor: its shape (ints, or `batchN`/`dimN` for axes learned to vary), the
    smallest and largest sizes seen on each axis, its dtype, and each axis's size divided by the
    batch size it was recorded at.

    Two specs are equal when they have the same rank: sizes may differ on dynamic axes.

    The fields are plain lists: changing them changes what the spec (and any metadata holding it) reports.
    """

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
        """The spec of `tensor`, with multipliers relative to `batch_size` (NaN when unknown)."""
    def describe(self, info_level: InfoLevel | None = None) -> str:
        """Shape (SHORT), plus dtype (MEDIUM), plus min/max shapes (FULL, the default; also for None). Any enum
        member named SHORT, MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError."""
    def update_shapes_seen(self, other: TensorSpec) -> None:
        """Learn from `other`, a later sample of the same tensor (see the class docs).

        Changed axes become ``batchN`` (the same integer multiple of the batch size in both samples) or
        ``dimN``. Raises ValueError when the ranks differ.
        """
    def get_batch_axis_multipliers(self) -> dict[int, int]:
        """`{axis: multiplier}` for every batch axis."""
    def get_max_batch_size(self) -> int:
        """The largest size seen on any batch axis (1 when there is none)."""
    def get_min_batch_size(self) -> int | None:
        """The smallest size seen on any batch axis, or None when there is none."""
    def has_batch_axis(self) -> bool:
        """Whether an axis was learned to be a batch axis (``batchN``)."""
    def has_dynamic_axis(self) -> bool:
        """Whether an axis was learned to vary apart from the batch size (``dimN``)."""
    def matches(self, other: TensorSpec) -> bool:
        """Same rank, and equal sizes wherever both specs hold a concrete size."""
    def to_dict(self) -> dict[str, Any]:
        """The reference's dict: ``type`` (``"TensorSpec"``) and the five fields."""
    @staticmethod
    def from_dict(data: dict[str, Any]) -> TensorSpec:
        """Build a spec from `to_dict()` output. Like the reference, removes the `"type"` key from `data`."""
    @staticmethod
    def is_int(value: float) -> bool:
        """Whether `value` is a whole number (by value, not by type); NaN is not."""

@disjoint_base
class SampleMetadata:
    """Metadata of the inputs (args and kwargs) or outputs of a call: every tensor's spec at its
    locator, and, in strict mode, every other leaf value.

    Equal metadata selects the same compiled backend: tensors compare by rank, other values by
    equality, dict key order does not matter. When an LLM phase (`"prefill"`/`"decode"`, from the
    `cache_position` argument) is known, it alone decides equality and hash.

    Build with `from_inputs`/`from_outputs`.
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
        """Describe `inputs` (forward arguments keyed by parameter name). In strict mode non-tensor
        leaves are recorded too. `batch_size` defaults to the one in `global_context`.
        """
    @staticmethod
    def from_outputs(output: Any, strict: bool | None = None, batch_size: int | None = None) -> SampleMetadata:
        """Describe the outputs of a call; locators render as `output...`."""
    @staticmethod
    def from_dict(data: dict[str, Any]) -> SampleMetadata:
        """Rebuild metadata from `to_dict()` output (of the class that wrote it, as `from_json`), or
        from a dict written by the reference (its pickled data is read by a restricted reader that
        runs nothing; a `SampleMetadata`, as the reference's `from_dict` returns).

        What is wrong inside a part's JSON text raises `aitune_fast.MetadataDecodeError` placed in that
        text; a wrong key or value type of the dict, or a refused pickle, a `ValueError`. Enum members
        are read back only while their class is allowed (`aitune_fast.add_safe_enums`).
        """
    def to_dict(self) -> dict[str, Any]:
        """A dict with the reference's keys (`tensor_data`, `other_data`, `strict`, `llm_phase`)
        whose data uses aitune_fast's versioned encoding: no pickle.

        An `ExactSampleMetadata`'s dict names its class.

        Other values are kept exactly: plain Python data, `torch.dtype`, `torch.device`, and members of
        Enum classes allowed with `aitune_fast.add_safe_enums`; any other value raises `TypeError`
        naming the ways out (the allow-list, `pickle`, `strict=False`).
        """
    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: paths, shapes and dtypes; other values as the reference renders them.

        Identical to the reference's `to_json_dict()`.
        """
    def to_json(self) -> str:
        """The JSON text of this metadata: `to_json_dict()`'s content plus what an exact round trip
        needs (see `from_json`), and for an `ExactSampleMetadata` its class.

        Other values as `to_dict()` keeps them: plain Python data, `torch.dtype`, `torch.device`, and
        members of Enum classes allowed with `aitune_fast.add_safe_enums`; anything else is a
        `TypeError` naming the ways out.
        """
    @staticmethod
    def from_json(text: str | bytes | bytearray | memoryview) -> SampleMetadata:
        """Rebuild metadata from `to_json()` text (a `str`, or its UTF-8 as `bytes`, `bytearray` or
        `memoryview`): a `SampleMetadata`, or an `ExactSampleMetadata` where the document says it
        was one (whichever class this is called on). Text it cannot read raises
        `aitune_fast.MetadataDecodeError`, a `json.JSONDecodeError` with its position. Lone
        surrogates in a `str` are read inside strings as `json.loads` reads them, and are an
        error anywhere else.
        """
    def describe(self, info_level: InfoLevel | None = None) -> str:
        """A table of the tensors (and other values) at SHORT, MEDIUM or FULL detail.

        SHORT lists the tensor paths, MEDIUM and FULL (the default; also for None) render tables. Any enum member
        named SHORT, MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError (the
        reference renders nothing).
        """
    def detected_dynamic_axis(self) -> bool:
        """Whether any tensor has a dynamic or batch axis."""
    def has_batch_axis(self) -> bool:
        """Whether every tensor has a batch axis (true when there are no tensors)."""
    def update_shapes_seen(self, other: SampleMetadata) -> None:
        """Learn dynamic and batch axes from `other`, a later sample with the same tensors.
        Raises `ValueError` (showing both) when the tensors differ in locators or ranks.
        """
    def make_batch(self, inputs: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """Copies of `inputs` with every tensor sliced or repeated along its batch axes to `batch_size`.
        The input is left untouched and the result shares no memory with it.

        `batch_size` must be an integer of at least 1 (TypeError/ValueError otherwise; the reference slices
        silently).
        """
    def update_max_batch_size(self, inputs: dict[str, Any], max_batch_size: int) -> None:
        """Learn the batch axes' largest sizes from `inputs` batched to `max_batch_size`.

        `max_batch_size` must be an integer of at least 1, as `make_batch`'s `batch_size`.
        """
    def _describe_rows(self, full: bool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The MEDIUM (or, with `full`, FULL) tables' rows, ``(tensor_rows, other_rows)``; for `describe`."""
    def _batch_reads(
        self, pairs: list[tuple[Locator, TensorSpec]], inputs: Any
    ) -> tuple[list[int], list[Any], list[tuple[tuple[int, int], ...]]]:
        """``(indices, values, axes)`` of the `pairs` whose spec has batch axes: the pair's index, the value read
        from `inputs` at its locator and its ``(axis, multiplier)`` pairs; for `make_batch`."""
    @property
    def llm_phase(self) -> Literal["prefill", "decode", ""]:
        """`"prefill"`, `"decode"`, or `""` when no LLM phase was detected."""
    @property
    def strict(self) -> bool:
        """Whether non-tensor leaves were recorded."""
    @property
    def tensor_data(self) -> tuple[tuple[Locator, TensorSpec], ...]:
        """`((Locator, TensorSpec), ...)`. The specs are live: changing them changes this metadata."""
    @property
    def other_data(self) -> tuple[tuple[Locator, Any], ...]:
        """`((Locator, value), ...)` for the non-tensor leaves (strict mode)."""
    @property
    def tensor_specs(self) -> list[TensorSpec]:
        """The tensor specs, in order."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __copy__(self) -> Self:
        """A new metadata of the same class sharing this one's `(Locator, TensorSpec)` pairs (`copy.copy`)."""

class ExactSampleMetadata(SampleMetadata):
    """Exact-shape metadata for bucketing recorded samples: equal only with the same locators,
    the same exact shapes (dtype ignored) and the same other values; never equal to a plain
    `SampleMetadata`.
    """

    @staticmethod
    def from_inputs(inputs: dict[str, Any]) -> ExactSampleMetadata:  # type: ignore[override]
        """Describe `inputs` with exact shapes, recording every leaf."""
