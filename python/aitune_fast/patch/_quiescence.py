"""What makes a switch of the patch atomic: it converts and renames while no AITune call is in the middle of
building, storing or looking up a metadata, and every change it makes can be undone.

A switch (``patch_aitune()`` / ``unpatch_aitune()``) runs under :data:`LOCK` inside :func:`quiescent`, which

1. closes the gates (:class:`_Gates`): each entry point of AITune's metadata code (a recording call, a tuned call,
   ``Module.tune``, a checkpoint's keys and files) becomes a function that holds new calls until the switch is over
   and then runs whatever is in place by then. A call already inside that code (its frame is on the thread's stack)
   passes, so nested calls finish in the world they started in; a call on the switching thread itself (a signal
   handler, a finalizer or a callback that runs in the middle of the switch) is refused with a RuntimeError;
2. refuses at once (:class:`SwitchRefused`) while another thread tunes or saves or loads a checkpoint (minutes of
   work that holds metadata in local variables), and otherwise waits until no other thread runs AITune's metadata
   code; a call still running after :data:`CALLS_IN_FLIGHT_LIMIT_S` makes the switch refuse. While every call in
   flight waits in ``threading`` (a future's result, a queue, a join: maybe for a call its forward handed to
   another thread), the callers held at the gates are let through (:meth:`_Gates.admit`): nothing is changed yet,
   so they run in the world from before the switch, which waits for them as for the calls in flight;
3. yields: the switch writes each change to the journal (``_journal``) before making it, so an exception or
   KeyboardInterrupt at any point is rolled back, by the switch itself or, when the roll back was interrupted too,
   by the next switch;
4. checks that nobody slipped in meanwhile (:func:`settled`) and opens the gates.

The gates are the switch's own stand-ins, up only while it runs; the registry of replacements (``_registry``)
reads and writes attributes through :func:`attr` and :func:`put`, behind a gate where one stands.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aitune_fast import _core
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._state import LOCK

CALLS_IN_FLIGHT_LIMIT_S = 5.0  # the longest a switch waits for the calls in flight to return
_ENTRY_GRACE_S = 0.002  # a GIL release before the first scan: a thread that looked up an entry point just before its
# gate closed runs into it (its frame then shows in the scan)
_POLL_S = 0.0005  # between two scans of the calls in flight
_WAITER_POLL_S = 0.01  # how often a caller held at a gate checks that the switch is still running


class SwitchRefused(RuntimeError):
    """The patch could not be switched without breaking AITune work running in other threads.

    Raised while another thread runs a ``tune()`` or a checkpoint's save or load, or when calls are still running
    after 5 seconds: nothing was changed.
    """


@dataclass(frozen=True)
class Entry:
    """An entry point of AITune's metadata code: ``owner.attribute`` (a class or a module)."""

    owner: Any
    attribute: str


@dataclass(frozen=True)
class Codes:
    """The code a switch must not run beside. `calls`: short calls (dispatch, recording, a key's conversion), waited
    for; a thread inside one passes the gates. `long`: tuning and checkpoint files, refused while running.
    `entering`: those of `calls` that reach a gate themselves on their way in (the call path's shims, whose native
    call meets the gate at ``TunedModule.__call__``): as a gate's own caller such a frame is not yet inside a call."""

    calls: frozenset[Any]
    long: frozenset[Any]
    entering: frozenset[Any] = frozenset()


def code_chain(function: Any) -> list[Any]:
    """The code objects that are `function`'s own: the innermost function it wraps (``__wrapped__``,
    staticmethods), and aitune_fast's wrappers on the way. Not other decorators' wrappers: their code is shared by
    every function they decorate (AITune's hardware-metrics wrapper decorates ``Backend.infer`` as well)."""
    codes = []
    seen: set[int] = set()
    while function is not None and id(function) not in seen:
        seen.add(id(function))
        function = foreign_attr(function, "__func__") or function
        code = foreign_attr(function, "__code__")
        if isinstance(code, types.CodeType):
            codes.append(code)
        function = foreign_attr(function, "__wrapped__")
    own = __file__.rsplit("/", 1)[0]
    return [code for i, code in enumerate(codes) if i == len(codes) - 1 or code.co_filename.startswith(own)]


def foreign_attr(value: Any, name: str) -> Any:
    """``getattr(value, name, None)``, also None where the lookup fails otherwise (an unset proxy, a lazy object):
    what AITune's modules and classes hold is looked at, not trusted."""
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - a foreign object's failing lookup means "not a function"
        return None


# ---------------------------------------------------------------------------------------------- gates


@dataclass
class _Gate:
    entry: Entry
    under: Any  # what the attribute holds behind the gate (replaced through `put` while the gate stands)
    installed: Any  # the gate function (or staticmethod) at the attribute


class _Gates:
    """The gates of the switch running now (none between switches)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.standing: dict[tuple[int, str], _Gate] = {}
        self.owner: int | None = None  # the switching thread
        self.pass_codes: frozenset[Any] = frozenset()
        self.entering: frozenset[Any] = frozenset()  # Codes.entering
        self._tickets = 0  # callers held so far (each took the next number)
        self._held: set[int] = set()  # the numbers of the callers held now
        # the threads held at a gate now: blocked on their way into a call, whatever code called the gate (code that
        # became call code since the gates closed included), so not in one (in_flight leaves them out)
        self.held_threads: set[int] = set()
        self._admitted: set[int] = set()  # callers let through by admit that have not woken yet
        self._passing: set[int] = set()  # callers let through by admit whose call has not returned

    def close(self, entries: list[Entry], codes: Codes) -> None:
        self.owner = threading.get_ident()
        self.pass_codes = codes.calls
        self.entering = codes.entering
        with self.cond:  # what an earlier switch admitted is its own (a call still running is in flight anyway)
            self._admitted.clear()
            self._passing.clear()
        for entry in entries:
            key = (id(entry.owner), entry.attribute)
            under = vars(entry.owner).get(entry.attribute)
            if key in self.standing or not _gateable(under):
                continue
            gate = _gate_function(entry)
            installed = staticmethod(gate) if isinstance(under, staticmethod) else gate
            self.standing[key] = _Gate(entry, under, installed)  # written down before it is put in place
            setattr(entry.owner, entry.attribute, installed)

    def open(self) -> None:
        """Put back what stands behind each gate and let the callers held there go on (idempotent)."""
        self.owner = None  # first: an open that is interrupted leaves gates any thread may open
        while self.standing:
            key, gate = next(iter(self.standing.items()))
            if vars(gate.entry.owner).get(gate.entry.attribute) is gate.installed:
                setattr(gate.entry.owner, gate.entry.attribute, gate.under)
            del self.standing[key]
        with self.cond:
            self.cond.notify_all()

    def reset_after_fork(self) -> None:
        """In a forked child: the condition's lock may be held by a thread that does not exist there, and the callers
        counted held or passing are threads that do not exist there."""
        self.cond = threading.Condition(threading.Lock())
        self.owner = None
        self._held, self._admitted, self._passing = set(), set(), set()
        self.held_threads = set()

    @property
    def held(self) -> bool:
        """Whether callers are held at the gates now."""
        return bool(self._held)

    @property
    def passing(self) -> bool:
        """Whether a caller let through by :meth:`admit` has not returned yet."""
        return bool(self._passing)

    def admit(self) -> None:
        """Let the callers held now through, each for the one call it is making (the switch has changed nothing yet,
        and waits for them: :attr:`passing`); callers held later wait as before."""
        with self.cond:
            new = self._held - self._passing
            self._admitted |= new
            self._passing |= new
            self.cond.notify_all()

    def passed(self, ticket: int) -> None:
        """The call of the caller admitted under `ticket` returned."""
        with self.cond:
            self._passing.discard(ticket)

    def wait(self, caller_frame: Any) -> int | None:
        """Hold a caller from outside AITune's metadata code until the gates open, or until the switch admits it
        (its number, which the caller gives :meth:`passed` when its call returns; else None); refuse one on the
        switching thread itself (a signal handler, a finalizer, a callback run in the middle of the switch), which
        would run in a half-switched world and cannot wait for a switch that waits for it."""
        me = threading.get_ident()
        if self.owner == me and self.standing:
            raise RuntimeError(
                "aitune_fast: an AITune call was made while this thread switches the patch (from a signal handler, "
                "a finalizer or a callback run in the middle of patch_aitune() or unpatch_aitune()); it is refused "
                "rather than run half-switched. Make the call after the switch returns."
            )
        entering = caller_frame is not None and caller_frame.f_code in self.entering
        outer = caller_frame.f_back if entering else caller_frame  # inside a call if a frame further out is
        if not self.standing or _on_stack(outer, self.pass_codes):
            return None
        with self.cond:
            ticket = self._tickets
            self._tickets += 1
            self._held.add(ticket)
            self.held_threads.add(me)
        through = False
        try:
            while True:
                with self.cond:
                    if ticket in self._admitted or not self.standing:
                        through = True
                        return ticket if ticket in self._admitted else None
                    self.cond.wait(_WAITER_POLL_S)
                if self.standing and LOCK.acquire(blocking=False):
                    try:  # nobody is switching (a switch holds the lock): gates an interrupted switch left standing
                        self.open()
                    finally:
                        LOCK.release()
        finally:
            with self.cond:
                self._held.discard(ticket)
                self._admitted.discard(ticket)
                self.held_threads.discard(me)
                if not through:  # interrupted (a KeyboardInterrupt while held): no call of its own to wait for
                    self._passing.discard(ticket)

    def target(self, entry: Entry) -> Any:
        gate = self.standing.get((id(entry.owner), entry.attribute))
        return gate.under if gate is not None else vars(entry.owner).get(entry.attribute)


GATES = _Gates()


def _gateable(value: Any) -> bool:
    function = value.__func__ if isinstance(value, staticmethod) else value
    return isinstance(function, types.FunctionType)


def _gate_function(entry: Entry) -> Any:
    def gate(*args: Any, **kwargs: Any) -> Any:
        admitted = GATES.wait(sys._getframe(1))
        try:
            target = GATES.target(entry)
            function = target.__func__ if isinstance(target, staticmethod) else target
            return function(*args, **kwargs)
        finally:
            if admitted is not None:
                GATES.passed(admitted)

    gate.__wrapped__ = vars(entry.owner).get(entry.attribute)  # type: ignore[attr-defined]
    gate.__qualname__ = f"aitune_fast gate of {getattr(entry.owner, '__qualname__', entry.owner)}.{entry.attribute}"
    return gate


def _on_stack(frame: Any, codes: frozenset[Any]) -> bool:
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def attr(owner: Any, attribute: str) -> Any:
    """``vars(owner)[attribute]`` as it is behind a gate standing there (None when absent)."""
    gate = GATES.standing.get((id(owner), attribute))
    return gate.under if gate is not None else vars(owner).get(attribute)


def put(owner: Any, attribute: str, value: Any) -> None:
    """``setattr(owner, attribute, value)``, behind the gate when one stands there (it puts `value` back on opening)."""
    gate = GATES.standing.get((id(owner), attribute))
    if gate is not None:
        gate.under = value
    else:
        setattr(owner, attribute, value)


# ---------------------------------------------------------------------------------------------- in flight


def in_flight(codes: frozenset[Any]) -> list[tuple[int, Any]]:
    """(thread id, frame) of the other threads running one of `codes` (not those held at a gate on their way in)."""
    if not codes:
        return []
    running = _core._frames_running(set(codes), threading.get_ident())
    return [(ident, frame) for ident, frame in running if ident not in GATES.held_threads]


def _describe(pending: list[tuple[int, Any]]) -> str:
    names = {
        f"{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)} (thread {ident})" for ident, frame in pending
    }
    return ", ".join(sorted(names))


def _refuse_long(codes: Codes, what: str) -> None:
    busy = in_flight(codes.long)
    if busy:
        raise SwitchRefused(
            f"aitune_fast.{what}() refused: AITune is tuning or saving/loading a checkpoint in another thread "
            f"({_describe(busy)}); switching would leave that work with metadata of the other class. "
            f"Call {what}() before or after it."
        )


def wait_for_calls(codes: Codes, what: str, admit: bool = False) -> None:
    """Return once no other thread runs `codes.calls`; refuse while one runs `codes.long`, or after the limit.
    `admit` (before the switch changes anything): while every call in flight waits in ``threading``, let the
    callers held at the gates through (one of them may be what it waits for) and wait for them too."""
    deadline = time.monotonic() + CALLS_IN_FLIGHT_LIMIT_S
    while True:
        _refuse_long(codes, what)
        busy = in_flight(codes.calls)
        if not busy and not (admit and GATES.passing):
            return
        if admit and busy and GATES.held and _all_waiting_in_threading(busy):
            GATES.admit()
        if time.monotonic() > deadline:
            raise SwitchRefused(
                f"aitune_fast.{what}() refused: AITune calls in other threads were still running after "
                f"{CALLS_IN_FLIGHT_LIMIT_S} s ({_describe(busy)}); nothing was changed. Call {what}() again once "
                f"they have returned."
            )
        time.sleep(_POLL_S)


def _all_waiting_in_threading(busy: list[tuple[int, Any]]) -> bool:
    """Whether each thread of `busy` runs ``threading``'s code at its innermost frame: it waits for a lock, a
    condition, an event, a future's result, a queue or a join (all of which wait in ``threading``)."""
    frames = sys._current_frames()
    for ident, _ in busy:
        frame = frames.get(ident)
        if frame is None or frame.f_code.co_filename != threading.__file__:
            return False
    return True


def _on_own_stack(codes: Codes) -> bool:
    return _on_stack(sys._getframe(1), codes.calls | codes.long)


@contextmanager
def quiescent(entries: list[Entry], codes: Codes, what: str) -> Iterator[None]:
    """Close the gates at `entries`, wait until no other thread runs `codes`, yield (the switch: its journal's edits
    are committed when it returns and rolled back when it raises anything), open the gates."""
    if _on_own_stack(codes):
        raise SwitchRefused(
            f"aitune_fast.{what}() cannot run inside AITune's own calls (a tuned or recording module's forward, "
            f"tune(), a checkpoint's save or load); call it outside them."
        )
    GATES.open()  # gates an interrupted switch left standing
    GATES.close(entries, codes)
    try:
        time.sleep(_ENTRY_GRACE_S)
        wait_for_calls(codes, what, admit=True)
        JOURNAL.recording = True
        try:
            yield
        except BaseException:
            JOURNAL.roll_back()
            raise
        JOURNAL.commit()
    finally:
        JOURNAL.recording = False
        GATES.open()


def settled(codes: Codes) -> bool:
    """Whether no other thread entered AITune's metadata code while the switch ran (a thread that had looked an
    entry point up before its gate closed and had not called it yet when the switch scanned)."""
    return not in_flight(codes.calls | codes.long)
