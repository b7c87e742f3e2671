"""The one registry of what the integration replaced in AITune and the world around it.

Every swap goes through it: a name in an AITune module, a method on an AITune class, a slot the core reads
(``_source[0]``), and changes of other kinds (the import hook on ``sys.meta_path``, the live modules' forward
wrappers) as a pair of functions. Each replacement belongs to a :class:`Layer`; :meth:`Registry.restore` takes one
layer back, newest first, and :data:`UNDO_ORDER` is the order ``unpatch_aitune()`` takes them back in. Every
change, the registry's own record included, goes through the journal (``_journal``), so a switch interrupted
anywhere rolls back whole; outside a switch (the call-path toggle, a hooked import) the same steps are just made,
and a restore interrupted half way is finished by the next one.
"""

from __future__ import annotations

import enum
import itertools
import types
from dataclasses import dataclass, field
from typing import Any

from aitune_fast.patch._journal import JOURNAL, Step
from aitune_fast.patch._quiescence import attr, put


class Layer(enum.Enum):
    """What a replacement is part of."""

    CALL_PATH = "the tuned-call path's functions on AITune's classes"
    CALL_PATH_LIVE = "the tuned-call path in live modules' forward wrappers"
    IMPORT_HOOK = "the import hook that swaps names in AITune modules imported while patched"
    METADATA_CODE = "AITune's metadata code: its defining modules' names, its Locator's and classes' methods"
    CALLERS = "the modules calling AITune's metadata code: their names, the checkpoint functions"
    CONTEXT = "the slots through which the core reads AITune's global context and config"


# The order unpatch_aitune() takes the layers back in (the call path first: stock classes, then live modules'
# wrappers rebuilt from them; AITune's metadata code before the modules calling it).
UNDO_ORDER = (
    Layer.CALL_PATH,
    Layer.CALL_PATH_LIVE,
    Layer.IMPORT_HOOK,
    Layer.METADATA_CODE,
    Layer.CALLERS,
    Layer.CONTEXT,
)


@dataclass(eq=False)
class Replacement:
    """``owner.attribute`` (``owner[attribute]`` when `item`) set to `value` in place of `original`; or, with
    `do`/`undo`, any other change."""

    layer: Layer
    owner: Any
    attribute: Any
    original: Any = None
    value: Any = None
    item: bool = False
    do: Any = None
    undo: Any = None
    order: int = field(default_factory=itertools.count().__next__)

    def put_value(self) -> None:
        if self.do is not None:
            self.do()
        elif self.item:
            self.owner[self.attribute] = self.value
        else:
            put(self.owner, self.attribute, self.value)

    def put_original(self) -> None:
        if self.undo is not None:
            self.undo()
        elif self.item:
            self.owner[self.attribute] = self.original
        else:
            put(self.owner, self.attribute, self.original)


class Registry:
    """The replacements in place, by (owner, attribute)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Any], Replacement] = {}
        self._by_name: dict[tuple[str, str], Any] = {}  # (AITune module's name, attribute) -> AITune's object

    def replace(self, layer: Layer, owner: Any, attribute: str, value: Any) -> bool:
        """Put `value` at ``owner.attribute`` (behind a gate standing there) until its layer is restored; False
        (nothing done) when that attribute is already replaced or absent."""
        original = attr(owner, attribute)
        if original is None or (id(owner), attribute) in self._entries:
            return False
        self._record(Replacement(layer, owner, attribute, original, value))
        return True

    def replace_function(self, layer: Layer, owner: Any, attribute: str, function: Any) -> bool:
        """:meth:`replace` with a function (or staticmethod) of the integration's, which takes the docstring of the
        one it replaces and names it as ``__wrapped__``."""
        original = attr(owner, attribute)
        if original is None or (id(owner), attribute) in self._entries:
            return False
        inner = function.__func__ if isinstance(function, staticmethod) else function
        if isinstance(inner, types.FunctionType):  # aitune_fast's own methods (builtins) keep their own
            inner.__doc__ = getattr(original, "__doc__", None)
            inner.__wrapped__ = getattr(original, "__func__", original)  # type: ignore[attr-defined]
        return self.replace(layer, owner, attribute, function)

    def replace_item(self, layer: Layer, owner: Any, key: Any, value: Any) -> None:
        """Put `value` at ``owner[key]`` until its layer is restored (again: `value` replaces the last one)."""
        entry = self._entries.get((id(owner), key))
        original = owner[key] if entry is None else entry.original
        if entry is not None:
            JOURNAL.apply(Step(lambda: self._forget(entry), lambda: self._add(entry)))
        self._record(Replacement(layer, owner, key, original, value, item=True))

    def step(self, layer: Layer, name: str, do: Any, undo: Any) -> None:
        """Make a change of another kind (`do`), taken back with its layer (`undo`); each safe to run again."""
        self._record(Replacement(layer, self, name, do=do, undo=undo))

    def restore(self, layer: Layer) -> None:
        """Take `layer`'s replacements back, newest first: each is forgotten once its original is back."""
        for entry in sorted(self.entries(layer), key=lambda e: e.order, reverse=True):
            JOURNAL.apply(Step(entry.put_original, entry.put_value))
            JOURNAL.apply(Step(lambda entry=entry: self._forget(entry), lambda entry=entry: self._add(entry)))

    def entries(self, layer: Layer | None = None) -> list[Replacement]:
        return [e for e in self._entries.values() if layer is None or e.layer is layer]

    def original(self, owner: Any, attribute: str) -> Any:
        """What `owner.attribute` held before it was replaced (None when it is not replaced)."""
        entry = self._entries.get((id(owner), attribute))
        return entry.original if entry is not None and entry.owner is owner else None

    def stock_name(self, module_name: str, attribute: str) -> Any:
        """AITune's object that the module of that name held under `attribute` before the patch swapped it."""
        return self._by_name.get((module_name, attribute))

    def _record(self, entry: Replacement) -> None:
        """Written down first (the entry, then the change), so that a roll back or a restore finds it."""
        JOURNAL.apply(Step(lambda: self._add(entry), lambda: self._forget(entry)))
        JOURNAL.apply(Step(entry.put_value, entry.put_original))

    def _add(self, entry: Replacement) -> None:
        self._entries[(id(entry.owner), entry.attribute)] = entry
        if isinstance(entry.owner, types.ModuleType) and not entry.item:
            self._by_name[(entry.owner.__name__, entry.attribute)] = entry.original

    def _forget(self, entry: Replacement) -> None:
        key = (id(entry.owner), entry.attribute)
        if self._entries.get(key) is entry:
            del self._entries[key]
            if isinstance(entry.owner, types.ModuleType) and not entry.item:
                self._by_name.pop((entry.owner.__name__, entry.attribute), None)


REGISTRY = Registry()
