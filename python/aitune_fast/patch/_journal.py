"""The switch's journal: each change written down before it is made, so that a switch that fails (an exception, a
KeyboardInterrupt at any line) is rolled back, by the switch itself or, when that roll back was interrupted too,
by the next switch. Outside a switch (a hooked import, the call-path toggle) changes are made without a record.

Each edit has ``do()`` and ``undo()``, each safe to run again: the journal may undo an edit whose ``do()`` was
interrupted before it made its change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SetItem:
    """``container[key] = new`` (a dict value, a list item, a module's or an object's attribute dict entry)."""

    container: Any
    key: Any
    old: Any
    new: Any

    def do(self) -> None:
        self.container[self.key] = self.new

    def undo(self) -> None:
        self.container[self.key] = self.old


@dataclass
class Step:
    """Any other change: `do` makes it, `undo` takes it back (each safe to run again)."""

    do: Any
    undo: Any


@dataclass
class Rekey:
    """A dict's items replaced by `new` (its keys converted), in their order, in the same dict object."""

    mapping: Any
    old: list[tuple[Any, Any]]
    new: list[tuple[Any, Any]]

    def do(self) -> None:
        self.mapping.clear()
        self.mapping.update(self.new)

    def undo(self) -> None:
        self.mapping.clear()
        self.mapping.update(self.old)


class Journal:
    """The changes of the switch running now, each written down before it is made: the switch rolls them back when
    it fails; when that roll back is interrupted too, the next switch finishes it before it starts. Empty between
    switches."""

    def __init__(self) -> None:
        self.edits: list[Any] = []
        self.recording = False  # a switch is running (outside one, changes such as hooked imports' are just made)

    def apply(self, edit: Any) -> None:
        if self.recording:
            self.edits.append(edit)
        edit.do()

    def commit(self) -> None:
        self.edits = []

    def roll_back(self) -> bool:
        """Undo every change still written down, newest first; whether there was any."""
        had = bool(self.edits)
        while self.edits:
            self.edits[-1].undo()
            self.edits.pop()
        return had


JOURNAL = Journal()
