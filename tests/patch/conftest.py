"""Fixtures of the in-process tests of the switch and what it installs (``test_switch.py``, ``test_loading.py``,
``test_checkpoint.py``).

This process holds AITune's metadata modules loaded under stub parent packages (``aitune_fast._reference``), and the
differential suites that run after these tests compare against them: ``world`` checks that a test leaves the patch
off and every ``aitune`` module, the classes they define, ``sys.meta_path``, the slots the core reads, both type
registries and the switch's own records exactly as it found them (what differs is put back, then reported).
``world.add_module`` registers a small stand-in module under an ``aitune`` name for the length of a test.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
from aitune_fast import _config
from aitune_fast._core import _type_registry
from aitune_fast.patch import _loading, _names
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._quiescence import GATES
from aitune_fast.patch._registry import REGISTRY, UNDO_ORDER
from aitune_fast.patch._state import CURRENT, LOCK, State, state
from aitune_fast.patch._switch import unpatch_aitune

_gc_module = sys.modules["aitune_fast.global_context"]
# what Python itself caches on a class (copyreg, the first time one of its objects is pickled)
_CACHES = frozenset({"__slotnames__"})


@dataclass
class Snapshot:
    """What the switch may touch, held by identity."""

    modules: dict[str, tuple[types.ModuleType, type, dict[str, Any]]] = field(default_factory=dict)
    classes: dict[int, tuple[type, dict[str, Any]]] = field(default_factory=dict)
    meta_path: list[Any] = field(default_factory=list)
    slots: tuple[Any, Any] = (None, None)
    locator: Any = None  # AITune's Locator (its registry)
    registries: Any = None


def _aitune_modules() -> dict[str, types.ModuleType]:
    return {
        name: module
        for name, module in list(sys.modules.items())
        if _names.is_aitune(name) and isinstance(module, types.ModuleType)
    }


def _registries(theirs: Any) -> Any:
    user_types, ignored = _type_registry()
    return (dict(user_types), set(ignored)), (dict(theirs._user_types), set(theirs._ignored_types))


def snapshot(ref: Any) -> Snapshot:
    found = Snapshot()
    for name, module in _aitune_modules().items():
        found.modules[name] = (module, type(module), dict(vars(module)))
        for value in list(vars(module).values()):
            if isinstance(value, type) and _names.is_aitune(str(getattr(value, "__module__", ""))):
                found.classes[id(value)] = (value, dict(vars(value)))
    found.meta_path = list(sys.meta_path)
    found.slots = (_gc_module._source[0], _config._source[0])
    found.locator = ref.locator.Locator
    found.registries = _registries(found.locator)
    return found


def _dict_changes(where: str, before: dict, after: dict) -> list[str]:
    changed = [f"{where}.{key} added" for key in after.keys() - before.keys()]
    changed += [f"{where}.{key} removed" for key in before.keys() - after.keys()]
    changed += [f"{where}.{key} replaced" for key in before.keys() & after.keys() if before[key] is not after[key]]
    return changed


def changes(before: Snapshot) -> list[str]:
    """What differs from `before` (an empty list when nothing does)."""
    now = _aitune_modules()
    found = [f"module {name} added" for name in now.keys() - before.modules.keys()]
    for name, (module, cls, names) in before.modules.items():
        if now.get(name) is not module:
            found.append(f"module {name} replaced or removed")
        if type(module) is not cls:
            found.append(f"module {name} is a {type(module).__name__}")
        found += _dict_changes(name, names, dict(vars(module)))
    for cls, names in before.classes.values():
        now_names = {key: value for key, value in vars(cls).items() if key not in _CACHES}
        found += _dict_changes(cls.__qualname__, {k: v for k, v in names.items() if k not in _CACHES}, now_names)
    if sys.meta_path != before.meta_path:
        found.append("sys.meta_path changed")
    if (_gc_module._source[0], _config._source[0]) != before.slots:
        found.append("the core reads another global context or config")
    if _registries(before.locator) != before.registries:
        found.append("a type registry changed")
    now_state = state()
    if now_state.active or now_state.importing or now_state.views:
        found.append("the state is not the unpatched one")
    if REGISTRY.entries() or JOURNAL.edits or JOURNAL.recording or GATES.standing:
        found.append("the switch's records are not empty")
    if getattr(_loading._importing, "depth", 0):
        found.append("this thread counts a hooked import")
    return found


def put_back(before: Snapshot) -> None:
    """Undo whatever differs from `before` (after a failing test, so that the tests that follow run as usual)."""
    with LOCK:
        GATES.open()
        JOURNAL.recording = False
        JOURNAL.roll_back()
        for layer in UNDO_ORDER:
            REGISTRY.restore(layer)
        CURRENT.state = State()
        _loading._importing.depth = 0
    for name in _aitune_modules().keys() - before.modules.keys():
        del sys.modules[name]
    for name, (module, cls, names) in before.modules.items():
        sys.modules[name] = module
        module.__class__ = cls
        namespace = vars(module)
        for key in namespace.keys() - names.keys():
            del namespace[key]
        namespace.update(names)
    for cls, names in before.classes.values():
        for key, value in names.items():
            if vars(cls).get(key) is not value:
                setattr(cls, key, value)
    sys.meta_path[:] = before.meta_path
    _gc_module._source[0], _config._source[0] = before.slots


class World:
    """The process as the test found it, and the stand-in modules the test registered (``add_module``)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.before = snapshot(ref)
        self.added: list[str] = []

    def add_module(self, name: str, **names: Any) -> types.ModuleType:
        """A module registered under `name` until the test ends."""
        module = types.ModuleType(name)
        vars(module).update(names)
        sys.modules[name] = module
        self.added.append(name)
        return module

    def changes(self) -> list[str]:
        """What differs from the world the test found, apart from the modules it registered."""
        found = changes(self.before)
        return [line for line in found if not (line.startswith("module ") and line.split(" ")[1] in self.added)]


@pytest.fixture
def world(ref):
    """Unpatch after the test, drop the modules it registered, and fail it when it left anything the switch may
    touch changed."""
    found = World(ref)
    try:
        yield found
    finally:
        try:
            if state().active:
                unpatch_aitune()
        finally:
            for name in found.added:
                sys.modules.pop(name, None)
            try:
                left = changes(found.before)
            except Exception as exc:  # noqa: BLE001 - reported below, after the world is put back
                left = [f"the check itself failed: {exc!r}"]
            if left:
                put_back(found.before)
    assert left == [], "the test left the process changed"
