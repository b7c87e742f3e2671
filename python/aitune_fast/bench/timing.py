"""Interleaved timing: each repeat times a loop of N calls per candidate, in turn, with the collector paused.

The statements are compiled into ``timeit`` loops (no per-call function-call overhead).  Before each
repeat ``gc.collect()`` runs, so one implementation's garbage is never collected on another's clock;
``timeit`` pauses the collector inside the loop unless ``gc_on`` asks for the collector-on figure.
"""

from __future__ import annotations

import gc
import statistics
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Candidate:
    """One column of a row: a statement and the names it uses."""

    key: str
    stmt: str
    namespace: dict[str, Any]


@dataclass
class Timing:
    """What was measured for one candidate: the loop size and the per-call time of every repeat."""

    number: int
    per_call_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_call_s)

    @property
    def min_s(self) -> float:
        return min(self.per_call_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "number": self.number,
            "repeats": len(self.per_call_s),
            "per_call_s": self.per_call_s,
        }


def _timer(cand: Candidate, gc_on: bool) -> timeit.Timer:
    setup = "import gc as _gc; _gc.enable()" if gc_on else "pass"
    return timeit.Timer(cand.stmt, setup=setup, globals=cand.namespace)


def calibrate(timer: timeit.Timer, target_s: float) -> int:
    """The loop size N for which one repeat takes about ``target_s`` (at least 1); warms up too."""
    gc.collect()
    number, elapsed = 1, timer.timeit(1)
    while elapsed < target_s * 0.2:
        factor = min(100.0, max(2.0, target_s * 0.5 / max(elapsed, 1e-9)))
        number = int(number * factor) + 1
        gc.collect()
        elapsed = timer.timeit(number)
    return max(1, round(number * target_s / elapsed))


def measure(
    candidates: list[Candidate],
    repeats: int,
    target_s: float,
    gc_on: bool = False,
    tick: Callable[[], None] = lambda: None,
) -> dict[str, Timing]:
    """Time every candidate ``repeats`` times, interleaved (c1, c2, c3, c1, c2, c3, ...).

    ``tick`` is called after each calibration and each timed repeat (the progress bar).
    """
    timers = {c.key: _timer(c, gc_on) for c in candidates}
    results: dict[str, Timing] = {}
    for cand in candidates:
        results[cand.key] = Timing(calibrate(timers[cand.key], target_s))
        tick()
    for _ in range(repeats):
        for cand in candidates:
            timing = results[cand.key]
            gc.collect()
            elapsed = timers[cand.key].timeit(timing.number)
            timing.per_call_s.append(elapsed / timing.number)
            tick()
    return results
