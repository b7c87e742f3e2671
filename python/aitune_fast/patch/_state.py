"""What a switch is about: the one lock, and the one record of whether the patch (and its call path) is on and of
what it learnt of AITune. Everything else reads these; only the switch (and the call-path toggle) writes them."""

from __future__ import annotations

import threading
from typing import Any

# the switch lock, for the life of the process: held by a switch from start to end, by the call-path toggle and by
# hooked imports
LOCK = threading.RLock()


class State:
    """One patched period (or the unpatched world between two), put in place and taken away by a journaled step of
    the switch."""

    def __init__(self, active: bool = False) -> None:
        self.active = active  # the patch is (partly) in place: `is_aitune_patched()`
        self.complete = False  # every step of the patch done
        self.call_path = False  # the tuned-call path is on (`_call_path`)
        self.reference: dict[str, Any] = {}  # name -> AITune's object
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(AITune's object) -> (it, ours)
        self.seen: dict[str, Any] = {}  # module name -> the module object already swapped
        self.registry_at_patch: tuple[dict[type, bool], set[type]] | None = None
        self.holders: list[Any] = []  # modules holding swapped names
        self.importing = 0  # hooked imports running (all threads)
        self.views: list[Any] = []  # modules whose class is _ImportView now


class _Current:
    """Holds the state now in place (`state()`); replaced whole by the switch (`_switch.set_state`)."""

    def __init__(self) -> None:
        self.state = State()


CURRENT = _Current()


def state() -> State:
    """The state now in place."""
    return CURRENT.state
