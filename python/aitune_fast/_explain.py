"""Why a call of a tuned AITune module would, or would not, find a backend: ``explain()``.

A tuned ``aitune.torch.Module`` serves a call with the backend whose key (the ``SampleMetadata`` of a graph seen
during tuning) equals the call's metadata. When none does, AITune raises ``RuntimeError: No backend found for a
graph with metadata: Tensors: ...``, naming the call's tensors only. ``explain()`` builds the call's metadata as
the tuned call builds it and compares it with every graph, without calling a backend. ``note_miss()`` adds the
same report to that error as an exception note, when ``aitune_fast.configure(explain_misses=True)`` is on.

It works on a stock AITune and under ``aitune_fast.patch_aitune()``: it reads the tuned module the way AITune's own
call does (its forward signature, its config's strict mode, the ``SampleMetadata`` class AITune's tuned module uses).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from aitune_fast._config import config

__all__ = ["Difference", "DispatchReport", "GraphReport", "explain", "note_miss"]

_TUNED_MODULE = "aitune.torch.module.tuned_module"
_WRAPPER_MODULE = "aitune.torch.module.wrapper_module"
_JIT_PATCHED = "aitune.torch.jit.patched_module"
_JIT_PATCHER = "aitune.torch.jit.patcher"
_MISS_PREFIX = "No backend found"
_SHORT_GRAPHS = 5  # graphs str() shows, nearest first
_MAX_MODULES = 100_000  # modules looked through for tuned ones in an object holding them
_EXPLAINED = "_aitune_fast_explained"  # set on an error that got its note: an outer call adds no second one

# the kinds of difference that make a graph's key differ from the call's where the graph has no LLM phase (the others,
# "dtype" and "shape", dispatch never checks; "phase" always blocks)
_KEY_KINDS = ("missing_tensor", "extra_tensor", "rank", "missing_value", "extra_value", "value")


@dataclasses.dataclass(frozen=True)
class Difference:
    """One way a call differs from a tuned graph."""

    kind: str
    """``phase``, ``missing_tensor`` (the graph has it, the call does not), ``extra_tensor``, ``rank``,
    ``missing_value``, ``extra_value``, ``value`` (non-tensor values, strict mode), ``dtype``, ``shape`` (a size
    outside the min/max seen during tuning)."""
    path: str
    """Where, as the locator's access path (``past_key_values.layers[0].keys``); ``""`` for the LLM phase."""
    call: Any
    """The call's side: a shape (``rank``, ``extra_tensor``), dtype, value or size; for ``missing_tensor``, the
    non-tensor value the call has there; None where the call has nothing there."""
    graph: Any
    """The graph's side; for ``shape``, the ``(min, max)`` seen."""
    blocking: bool
    """Whether it keeps this graph's key from equalling the call's (``dtype`` and ``shape`` never do)."""
    axis: int | None = None
    """The axis of a ``shape`` difference."""

    def __str__(self) -> str:
        text = _TEXTS[self.kind](self)
        if self.kind in _KEY_KINDS and not self.blocking:
            text += " (not compared: the graph's LLM phase alone decides)"
        return text


def _text_phase(d: Difference) -> str:
    return f"LLM phase: the call's is {d.call or 'none'}, the graph's {d.graph or 'none'}"


def _text_missing_tensor(d: Difference) -> str:
    there = "" if d.call is None else f" (the call has {d.call} there)"
    return f"{d.path}: a tensor of shape {d.graph} in the graph, missing from the call{there}"


def _text_shape(d: Difference) -> str:
    low, high = d.graph
    return (
        f"{d.path}: axis {d.axis} is {d.call}, outside {low}..{high} seen during tuning "
        "(warning: dispatch does not check sizes)"
    )


_TEXTS = {
    "phase": _text_phase,
    "missing_tensor": _text_missing_tensor,
    "extra_tensor": lambda d: f"{d.path}: a tensor of shape {d.call} in the call, which the graph does not have",
    "rank": lambda d: (
        f"{d.path}: rank {len(d.call)} (shape {d.call}) in the call, rank {len(d.graph)} (shape {d.graph}) in the graph"
    ),
    "missing_value": lambda d: f"{d.path}: value {d.graph} in the graph (strict mode), missing from the call",
    "extra_value": lambda d: f"{d.path}: value {d.call} in the call (strict mode), which the graph does not have",
    "value": lambda d: f"{d.path}: value {d.call} in the call, {d.graph} in the graph (strict mode)",
    "dtype": lambda d: f"{d.path}: dtype {d.call}, tuned with {d.graph} (warning: dispatch does not check dtypes)",
    "shape": _text_shape,
}


@dataclasses.dataclass(frozen=True)
class GraphReport:
    """One tuned graph compared with the call."""

    index: int
    """Its place among the tuned module's backends (their order in ``backends``)."""
    backend: str
    """The backend's ``describe()``."""
    llm_phase: str
    """The graph's LLM phase (``""``: none)."""
    tensors: int
    """How many tensors its key holds."""
    matches: bool
    """Whether its key equals the call's metadata (the backend this call would find)."""
    differences: tuple[Difference, ...]
    """Blocking differences first, then warnings."""
    description: str = dataclasses.field(repr=False, default="")
    """The key's ``describe(InfoLevel.FULL)``."""

    @property
    def blocking(self) -> tuple[Difference, ...]:
        """The differences that keep its key from equalling the call's."""
        return tuple(d for d in self.differences if d.blocking)

    @property
    def label(self) -> str:
        """How the report names it: ``graph #1 (decode, 8 tensors, TorchEagerBackend())``."""
        phase = f"{self.llm_phase}, " if self.llm_phase else ""
        tensors = f"{self.tensors} tensor{'' if self.tensors == 1 else 's'}"
        return f"graph #{self.index} ({phase}{tensors}, {self.backend})"


@dataclasses.dataclass(frozen=True)
class DispatchReport:
    """What ``explain()`` found: whether the call would find a backend, and how it differs from each graph.

    ``str()`` gives a short text (the first difference per graph), ``describe(level)`` more, ``to_dict()`` the same
    as plain data.
    """

    module: str
    """The tuned module's name."""
    found: bool
    """Whether the call would find a backend."""
    checked: bool
    """False where the module serves every call with its only backend, unchecked (``check_graph=False``)."""
    graph: int | None
    """The index of the graph whose backend serves the call, or None."""
    backend: str | None
    """That backend's ``describe()``."""
    graphs: tuple[GraphReport, ...]
    """Every graph, nearest first."""
    call: str = dataclasses.field(repr=False, default="")
    """The call's metadata, ``describe(InfoLevel.FULL)``."""
    message: str = dataclasses.field(repr=False, default="")
    """The error a miss raises (AITune's ``No backend found ...``); ``""`` when the call finds a backend."""

    def __str__(self) -> str:
        return self.describe()

    def headline(self) -> str:
        """The first line: the module and what the call would find."""
        count = len(self.graphs)
        where = f"module {self.module!r} ({count} graph{'' if count == 1 else 's'})"
        if not self.found:
            return f"aitune_fast.explain: {where}: no backend found for this call; nearest graphs first:"
        served = next(g for g in self.graphs if g.index == self.graph)
        how = "" if self.checked else " (unchecked: the module's only backend serves every call)"
        return f"aitune_fast.explain: {where}: {served.label} serves this call{how}."

    def describe(self, info_level: Any = None) -> str:
        """The report as text. ``InfoLevel.SHORT`` (the default): the first difference per graph, for the nearest
        graphs; ``MEDIUM``: every difference of every graph; ``FULL``: also the call's and each graph's metadata.
        aitune_fast's ``InfoLevel`` or AITune's."""
        level = _level_name(info_level)
        lines = [self.headline()]
        shown = self.graphs if level != "SHORT" else self.graphs[:_SHORT_GRAPHS]
        for graph in shown:
            lines.extend(_graph_lines(graph, level, self.found))
        if len(shown) < len(self.graphs):
            lines.append(f"  ... and {len(self.graphs) - len(shown)} more graphs (describe(InfoLevel.MEDIUM))")
        if level == "FULL":
            lines.extend(["The call:", self.call.rstrip("\n")])
            for graph in self.graphs:
                lines.extend([f"{graph.label}:", graph.description.rstrip("\n")])
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (str, int, bool, None, lists and dicts)."""
        return {
            "module": self.module,
            "found": self.found,
            "checked": self.checked,
            "graph": self.graph,
            "backend": self.backend,
            "message": self.message,
            "graphs": [_graph_dict(graph) for graph in self.graphs],
        }


def _level_name(info_level: Any) -> str:
    name = "SHORT" if info_level is None else getattr(info_level, "name", None)
    if name not in ("SHORT", "MEDIUM", "FULL"):
        raise TypeError(f"describe() takes an InfoLevel (SHORT, MEDIUM or FULL), not {info_level!r}")
    return name


def _graph_lines(graph: GraphReport, level: str, found: bool) -> list[str]:
    """A graph's lines in the report: its label and its first (SHORT) or every difference."""
    if found and not graph.matches and level == "SHORT":
        return []  # a hit: only the graph that serves it, with its warnings
    differences = graph.differences
    if not differences:
        return [f"  {graph.label}: no difference"]
    if level == "SHORT":
        more = f" (+{len(differences) - 1} more)" if len(differences) > 1 else ""
        return [f"  {graph.label}: {differences[0]}{more}"]
    return [f"  {graph.label}:", *(f"    {d}" for d in differences)]


def _graph_dict(graph: GraphReport) -> dict[str, Any]:
    return {
        "index": graph.index,
        "backend": graph.backend,
        "llm_phase": graph.llm_phase,
        "tensors": graph.tensors,
        "matches": graph.matches,
        "differences": [
            {
                "kind": d.kind,
                "path": d.path,
                "axis": d.axis,
                "call": _plain(d.call),
                "graph": _plain(d.graph),
                "blocking": d.blocking,
                "text": str(d),
            }
            for d in graph.differences
        ],
    }


def _plain(value: Any) -> Any:
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return [_plain(item) for item in value]
    return str(value)


# ---------------------------------------------------------------------------------------------- explain


def explain(module: Any, /, *args: Any, **kwargs: Any) -> DispatchReport:
    """Explain how a tuned module would dispatch ``module(*args, **kwargs)``, without calling a backend.

    `module` is a tuned ``aitune.torch.Module``, a JIT-tuned model, AITune's ``TunedModule``, or anything holding
    tuned modules (a model or a pipeline: the one whose forward signature binds the arguments). The call is bound as
    the module's forward signature binds it and its metadata built as the tuned call builds it (strict mode as the
    module's AITune config says). Works with a stock AITune and under ``aitune_fast.patch_aitune()``.

    Returns a ``DispatchReport``: whether a backend would serve the call and which; otherwise the graphs,
    nearest first, each with every difference (missing or extra tensor, rank, non-tensor value in strict mode, LLM
    phase) by its path, and, as warnings, dtypes and sizes outside the min/max seen during tuning, which dispatch
    does not check. Raises TypeError where `module` holds no tuned module, ValueError where it holds several that
    bind the arguments, and whatever the forward signature raises for arguments it cannot bind.
    """
    tuned, _ = _pick(_tuned_modules(module), args, kwargs, module)
    return _report(tuned, args, kwargs)


def note_miss(module: Any, args: tuple, kwargs: dict, error: BaseException) -> None:
    """Add the ``explain()`` report to `error` as an exception note, where it is the "No backend found" error of
    calling `module` (a tuned module or its ``aitune.torch.Module``) with these arguments and
    ``config.explain_misses`` is on. The message stays AITune's; nothing else changes. Never raises: a report that
    cannot be made becomes a note saying why."""
    if not config.explain_misses or getattr(error, _EXPLAINED, False) or not str(error).startswith(_MISS_PREFIX):
        return
    try:
        found = _tuned_modules(module)
    except TypeError:
        return  # not a tuned module's call (a recording one, around a tuned one that missed)
    if len(found) != 1:
        return
    try:
        report = _report(found[0][1], args, kwargs)
        if report.found or report.message != str(error):
            return  # not this module's miss: one nested in its backend, explained there if at all
        note = str(report)
    except Exception as exc:  # noqa: BLE001 - the note must not hide the miss
        note = f"aitune_fast.explain could not explain this miss: {type(exc).__name__}: {exc}"
    _add_note(error, note)
    try:
        setattr(error, _EXPLAINED, True)
    except AttributeError:
        pass


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (Python 3.11+), or a ``__notes__`` list as ``exceptiongroup`` keeps on 3.10."""
    add = getattr(error, "add_note", None)
    if add is not None:
        add(note)
        return
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]
    notes.append(note)


# ---------------------------------------------------------------------------------------------- finding tuned modules


def _aitune_class(module_name: str, name: str) -> Any:
    """AITune's class `name` in `module_name`, if that module is loaded (nothing is imported here)."""
    return getattr(sys.modules.get(module_name), name, None)


def _is(obj: Any, cls: Any) -> bool:
    """Whether `obj`'s real type (not a proxy's ``__class__``) is `cls` or a subclass."""
    return isinstance(cls, type) and issubclass(type(obj), cls)


def _tuned_modules(obj: Any, what: str = "explain()") -> list[tuple[str, Any]]:
    """The (name, TunedModule) pairs `obj` is or holds; raises TypeError (naming `what`) where AITune is not loaded or
    `obj` is a module of AITune's that is not tuned."""
    tuned_cls = _aitune_class(_TUNED_MODULE, "TunedModule")
    if tuned_cls is None:
        raise TypeError(f"{what} takes a tuned aitune.torch.Module, and aitune.torch is not imported")
    if _is(obj, tuned_cls):
        return [(str(obj._module_name), obj)]
    own = _own_tuned(obj, tuned_cls)
    if own is not None:
        return [own]
    found = {id(t): (name, t) for name, t in _held_tuned(obj, tuned_cls)}
    if not found:
        raise TypeError(f"{what} takes a tuned aitune.torch.Module or an object holding one, not {_kind(obj)}")
    return list(found.values())


def _own_tuned(obj: Any, tuned_cls: type) -> tuple[str, Any] | None:
    """`obj`'s tuned module where `obj` is an ``aitune.torch.Module`` or a JIT ``PatchedModule``; TypeError where
    it is one that is not tuned."""
    if _is(obj, _aitune_class(_WRAPPER_MODULE, "Module")):
        wrapper, what = obj._self_wrapper, f"aitune.torch.Module {obj._self_name!r}"
    elif _is(obj, _aitune_class(_JIT_PATCHED, "PatchedModule")):
        wrapper, what = getattr(obj, "_wrapper", None), f"JIT-patched module {type(obj.__wrapped__).__name__}"
    else:
        return None
    if not _is(wrapper, tuned_cls):
        raise TypeError(f"{what} is not tuned (it holds a {type(wrapper).__name__})")
    return str(wrapper._module_name), wrapper


def _held_tuned(obj: Any, tuned_cls: type) -> Iterator[tuple[str, Any]]:
    """The tuned modules in `obj`: its submodules (a ``torch.nn.Module``) or its attributes (a pipeline) that are
    tuned ``aitune.torch.Module``s, and the JIT-tuned modules among them."""
    torch = sys.modules.get("torch")
    roots = [obj] if torch is not None and isinstance(obj, torch.nn.Module) else _attributes(obj)
    members = {id(m): m for root in roots for m in _submodules(root, torch)}
    for member in members.values():
        try:
            own = _own_tuned(member, tuned_cls)
        except TypeError:
            continue
        if own is not None:
            yield own
    for patched in getattr(_aitune_class(_JIT_PATCHER, "Patcher"), "_patched_modules", ()):
        if id(getattr(patched, "__wrapped__", None)) in members and _is(getattr(patched, "_wrapper", None), tuned_cls):
            yield str(patched._wrapper._module_name), patched._wrapper


def _attributes(obj: Any) -> list[Any]:
    namespace = getattr(obj, "__dict__", None)
    return list(namespace.values()) if isinstance(namespace, dict) else []


def _submodules(root: Any, torch: Any) -> list[Any]:
    """`root` and the modules under it as their parents hold them (an ``aitune.torch.Module`` is a proxy, which
    ``nn.Module.modules()`` would step through, yielding the module it wraps)."""
    if torch is None or not isinstance(root, torch.nn.Module):
        return []
    found: dict[int, Any] = {}
    stack = [root]
    while stack and len(found) < _MAX_MODULES:
        module = stack.pop()
        if id(module) in found:
            continue
        found[id(module)] = module
        children = getattr(module, "_modules", None)
        if isinstance(children, dict):
            stack.extend(reversed([child for child in children.values() if child is not None]))
    return list(found.values())


def _kind(obj: Any) -> str:
    return f"a {type(obj).__module__}.{type(obj).__qualname__}"


def _pick(found: list[tuple[str, Any]], args: tuple, kwargs: dict, obj: Any) -> tuple[Any, str]:
    """The one tuned module of `found` the call is for: the only one, or the only one whose signature binds it."""
    if len(found) == 1:
        return found[0][1], found[0][0]
    binding = [(name, t) for name, t in found if _binds(t, args, kwargs)]
    if len(binding) == 1:
        return binding[0][1], binding[0][0]
    names = ", ".join(repr(name) for name, _ in (binding or found))
    raise ValueError(f"{_kind(obj)} holds several tuned modules ({names}) that this call could be for: pass one")


def _binds(tuned: Any, args: tuple, kwargs: dict) -> bool:
    try:
        tuned._forward_signature.normalize(args, kwargs)
    except Exception:  # noqa: BLE001 - a signature that does not bind the call
        return False
    return True


# ---------------------------------------------------------------------------------------------- the report


def _call_metadata(tuned: Any, args: tuple, kwargs: dict) -> Any:
    """The call's metadata as the tuned call builds it: bound twice by the forward signature (``__call__``, then
    ``safe_call_backend``), from the bound arguments, in the strict mode of the module's config, with the
    ``SampleMetadata`` class AITune's tuned module uses (aitune_fast's under the patch)."""
    signature = tuned._forward_signature
    first = signature.normalize(args, kwargs)
    bound = signature.normalize(first.args, first.kwargs)
    metadata_cls = sys.modules[_TUNED_MODULE].SampleMetadata
    return metadata_cls.from_inputs(bound.arguments, strict=tuned._config.strict_mode)


def _served(tuned: Any, metadata: Any) -> tuple[Any, bool]:
    """The key of the graph whose backend serves the call (or None), and whether dispatch checks it at all."""
    func = getattr(getattr(tuned, "_backend_func", None), "__func__", None)
    backends = tuned._backends
    if getattr(func, "__name__", None) == "call_unique_backend":
        return next(iter(backends)), False
    if metadata not in backends:
        return None, True
    backend = backends[metadata]
    return next(key for key, value in backends.items() if value is backend and key == metadata), True


def _report(tuned: Any, args: tuple, kwargs: dict) -> DispatchReport:
    return _report_for(tuned, _call_metadata(tuned, args, kwargs))


def _report_for(tuned: Any, metadata: Any) -> DispatchReport:
    """The report of a call whose metadata is `metadata` (``dispatch_stats()``: the last miss's)."""
    served, checked = _served(tuned, metadata)
    graphs = [
        _graph_report(index, key, backend, metadata, key is served)
        for index, (key, backend) in enumerate(tuned._backends.items())
    ]
    graphs.sort(key=lambda g: (not g.matches, len(g.blocking), len(g.differences), g.index))
    match = next((g for g in graphs if g.matches), None)
    message = "" if served is not None else str(tuned.ERROR_NO_BACKEND_FOUND.format(metadata))
    return DispatchReport(
        module=str(tuned._module_name),
        found=match is not None,
        checked=checked,
        graph=match.index if match else None,
        backend=match.backend if match else None,
        graphs=tuple(graphs),
        call=_describe(metadata, "FULL"),
        message=message,
    )


def _graph_report(index: int, key: Any, backend: Any, call: Any, matches: bool) -> GraphReport:
    differences = _differences(call, key)
    differences.sort(key=lambda d: not d.blocking)
    return GraphReport(
        index=index,
        backend=_backend_text(backend),
        llm_phase=key.llm_phase,
        tensors=len(key.tensor_data),
        matches=matches,
        differences=tuple(differences),
        description=_describe(key, "FULL"),
    )


def _backend_text(backend: Any) -> str:
    try:
        return str(backend.describe())
    except Exception:  # noqa: BLE001 - a backend whose describe() fails is named by its type
        return type(backend).__name__


def _describe(metadata: Any, level: str) -> str:
    """``metadata.describe()`` at `level`, with the ``InfoLevel`` of the metadata's own implementation."""
    from aitune_fast._enums import InfoLevel

    levels: Any = InfoLevel
    if type(metadata).__module__.startswith("aitune."):
        levels = sys.modules["aitune.torch.module.tensor_spec"].InfoLevel
    return str(metadata.describe(levels[level]))


# ---------------------------------------------------------------------------------------------- differences


def _path_key(locator: Any) -> tuple:
    """A locator as plain data (its steps): equal across implementations."""
    return tuple((accessor, int(kind)) for accessor, kind in locator.path_iter())


def _leaves(pairs: Any) -> dict[tuple, tuple[str, Any]]:
    return {_path_key(locator): (locator.display_path, value) for locator, value in pairs}


def _differences(call: Any, graph: Any) -> list[Difference]:
    """Every difference between the call's metadata and a graph's key. The key's LLM phase, where it has one,
    alone decides equality: then only a phase difference blocks."""
    found: list[Difference] = []
    if (call.llm_phase or graph.llm_phase) and call.llm_phase != graph.llm_phase:
        found.append(Difference("phase", "", call.llm_phase or None, graph.llm_phase or None, True))
    keyed = not graph.llm_phase
    call_tensors, graph_tensors = _leaves(call.tensor_data), _leaves(graph.tensor_data)
    call_values, graph_values = _leaves(call.other_data), _leaves(graph.other_data)
    found.extend(_tensor_differences(call_tensors, graph_tensors, call_values, keyed))
    found.extend(_value_differences(call_values, graph_values, graph_tensors, keyed))
    return found


def _tensor_differences(calls: dict, graphs: dict, call_values: dict, keyed: bool) -> Iterator[Difference]:
    for key, (path, spec) in graphs.items():
        if key not in calls:
            value = call_values.get(key)
            there = None if value is None else _short(value[1])
            yield Difference("missing_tensor", path, there, list(spec.shape), keyed)
    for key, (path, spec) in calls.items():
        other = graphs.get(key)
        if other is None:
            yield Difference("extra_tensor", path, list(spec.shape), None, keyed)
        elif len(spec.shape) != len(other[1].shape):
            yield Difference("rank", path, list(spec.shape), list(other[1].shape), keyed)
        else:
            yield from _spec_warnings(path, spec, other[1])


def _spec_warnings(path: str, call: Any, graph: Any) -> Iterator[Difference]:
    """Dtype and sizes outside the min/max seen: what dispatch does not check."""
    if call.dtype != graph.dtype:
        yield Difference("dtype", path, str(call.dtype), str(graph.dtype), False)
    for axis, (size, low, high) in enumerate(zip(call.shape, graph.min_shape, graph.max_shape, strict=False)):
        if isinstance(size, int) and not low <= size <= high:
            yield Difference("shape", path, size, (low, high), False, axis)


def _value_differences(calls: dict, graphs: dict, graph_tensors: dict, keyed: bool) -> Iterator[Difference]:
    for key, (path, value) in graphs.items():
        if key not in calls:
            yield Difference("missing_value", path, None, _short(value), keyed)
        elif not _equal(calls[key][1], value):
            yield Difference("value", path, _short(calls[key][1]), _short(value), keyed)
    for key, (path, value) in calls.items():
        if key not in graphs and key not in graph_tensors:
            yield Difference("extra_value", path, _short(value), None, keyed)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values whose == raises or is not a bool differ
        return False


def _short(value: Any, limit: int = 80) -> str:
    """A value as the report prints it: its repr, cut to `limit` characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
