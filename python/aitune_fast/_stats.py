"""How a tuned module's calls were dispatched: ``dispatch_stats()``, opt in.

With ``aitune_fast.configure(dispatch_stats=True)`` (or ``AITUNE_FAST_STATS=1`` at import), the native tuned call of
``patch_aitune()`` counts, per tuned module: its calls, the hits of each graph's backend, its misses (keeping the last
miss's metadata, which holds no tensors), and the path's own time per call (the call less the time inside the
backend), in the core (``rust/patch/stats.rs``). Off, a call pays one atomic load. A stock AITune, or
``patch_aitune(call_path=False)``, collects nothing: ``dispatch_stats()`` then says so.
"""

from __future__ import annotations

import dataclasses
import sys
import weakref
from typing import Any

from aitune_fast import _core
from aitune_fast._explain import DispatchReport, _backend_text, _describe, _report_for, _tuned_modules

__all__ = ["DispatchStats", "GraphHits", "ModuleStats", "dispatch_stats"]

_STATE = "aitune_fast.patch._state"


@dataclasses.dataclass(frozen=True)
class GraphHits:
    """One tuned graph and the calls its backend served."""

    index: int
    """Its place among the module's backends (as in ``explain()``'s reports)."""
    graph: str
    """The graph's key, ``describe(InfoLevel.SHORT)`` (``Tensors: x, y Others: mode=a``)."""
    backend: str
    """The backend's ``describe()``."""
    hits: int
    """Calls its backend served."""


@dataclasses.dataclass(frozen=True)
class ModuleStats:
    """One tuned module's calls since collection began (or its last ``reset()``)."""

    module: str
    """The tuned module's name."""
    calls: int
    """Tuned calls counted: the sum of every graph's hits, ``misses`` and ``other``."""
    graphs: tuple[GraphHits, ...]
    """Every graph of the module, in its backends' order."""
    misses: int
    """Calls that found no backend."""
    other: int
    """Calls whose backend the core did not pick: stock's code did (a backend function that is not AITune's own,
    AITune's context replaced, a call shape that does not bind), the call failed before its lookup, or a backend
    counted no more (a hit on a backend no longer among the module's is counted in its graph no more)."""
    last_miss: DispatchReport | None
    """``explain()``'s report of the last miss, made now from that call's metadata against the module's graphs now;
    None where no call missed."""
    p50_us: float | None
    """The path's own time per call (the call less the time inside the backend), median, in µs; None: no calls.
    From a log-scale histogram: each figure is a bucket's upper end, at most 1/8 above the exact value."""
    p99_us: float | None
    """Likewise, the 99th percentile."""
    max_us: float | None
    """The longest, exactly."""

    def __str__(self) -> str:
        lines = [f"module {self.module!r}: {self.calls} call{'' if self.calls == 1 else 's'}, {self.misses} missed"]
        if self.other:
            lines[0] += f", {self.other} other"
        if self.max_us is not None:
            lines[0] += (
                f"; the path's own time per call: p50 {self.p50_us:.1f} µs, p99 {self.p99_us:.1f} µs, "
                f"max {self.max_us:.1f} µs"
            )
        lines.extend(f"  graph #{g.index} ({g.graph}, {g.backend}): {g.hits} hits" for g in self.graphs)
        if self.last_miss is not None:
            lines.append("  last miss: " + self.last_miss.describe().replace("\n", "\n  "))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The entry as plain data (str, int, float, None, lists and dicts)."""
        return {
            "module": self.module,
            "calls": self.calls,
            "graphs": [dataclasses.asdict(graph) for graph in self.graphs],
            "misses": self.misses,
            "other": self.other,
            "last_miss": None if self.last_miss is None else self.last_miss.to_dict(),
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "max_us": self.max_us,
        }


@dataclasses.dataclass(frozen=True)
class DispatchStats:
    """What ``dispatch_stats()`` read: one entry per tuned module, and why nothing is collected where it is not.

    ``str()`` gives a short text, ``to_dict()`` plain data, ``reset()`` starts these modules' counts again.
    """

    modules: tuple[ModuleStats, ...]
    """One entry per tuned module, in the order found."""
    collecting: str
    """``""`` while calls are counted; otherwise why not (off, AITune not patched, or its call path off)."""
    _tuned: tuple[Any, ...] = dataclasses.field(repr=False, compare=False, default=())

    def __str__(self) -> str:
        lines = [
            "aitune_fast.dispatch_stats" + (f": nothing is collected: {self.collecting}" if self.collecting else ":")
        ]
        lines.extend(str(module) for module in self.modules)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The statistics as plain data."""
        return {"collecting": self.collecting, "modules": [module.to_dict() for module in self.modules]}

    def reset(self) -> None:
        """Drop what was counted for these modules (including calls since this object was read): their counts start
        again from zero."""
        for ref in self._tuned:
            tuned = ref()
            if tuned is not None:
                _core._reset_dispatch_stats(tuned)


def dispatch_stats(module: Any, /) -> DispatchStats:
    """How the tuned modules in `module` dispatched their calls.

    `module` is a tuned ``aitune.torch.Module``, a JIT-tuned model, AITune's ``TunedModule``, or anything holding tuned
    modules (a model, a pipeline), as for ``explain()``. Counted only while
    ``aitune_fast.configure(dispatch_stats=True)`` is on and AITune is patched with its call path
    (``patch_aitune()``); otherwise the entries are empty and ``collecting`` says why. Returns a ``DispatchStats``
    (``str()``, ``to_dict()``, ``reset()``). Raises TypeError where `module` holds no tuned module.
    """
    found = _tuned_modules(module, "dispatch_stats()")
    entries = tuple(_module_stats(name, tuned) for name, tuned in found)
    return DispatchStats(entries, _why_not(), tuple(weakref.ref(tuned) for _, tuned in found))


def _why_not() -> str:
    if not _core._dispatch_stats_on():
        return "dispatch statistics are off (aitune_fast.configure(dispatch_stats=True) turns them on)"
    state_module = sys.modules.get(_STATE)
    state = state_module.state() if state_module is not None else None
    if state is None or not state.active:
        return "AITune is not patched (aitune_fast.patch_aitune())"
    if not state.call_path:
        return "AITune is patched without its call path (patch_aitune(call_path=False))"
    return ""


def _module_stats(name: str, tuned: Any) -> ModuleStats:
    raw = _core._dispatch_stats(tuned) or {}
    hits = {id(backend): count for backend, count in raw.get("hits", ())}
    graphs = tuple(
        GraphHits(index, _describe(key, "SHORT"), _backend_text(backend), hits.pop(id(backend), 0))
        for index, (key, backend) in enumerate(tuned._backends.items())
    )
    metadata = raw.get("last_miss")
    times = [None if raw.get(field) is None else raw[field] / 1000.0 for field in ("p50_ns", "p99_ns", "max_ns")]
    return ModuleStats(
        module=name,
        calls=raw.get("calls", 0),
        graphs=graphs,
        misses=raw.get("misses", 0),
        other=raw.get("other", 0) + sum(hits.values()),  # backends no longer the module's
        last_miss=None if metadata is None else _report_for(tuned, metadata),
        p50_us=times[0],
        p99_us=times[1],
        max_us=times[2],
    )
