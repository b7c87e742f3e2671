"""What a switch is: ``patch_aitune()`` / ``unpatch_aitune()``, their steps in order, and the version check.

A switch takes the lock, finishes what an interrupted one left (its gates opened, its journal rolled back), then
runs its steps inside ``_quiescence.quiescent`` (gates closed, calls in flight returned, every change journaled)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import types
from typing import Any

from aitune_fast.patch import _call_path, _names
from aitune_fast.patch._aitune import learn_definitions, registry_back
from aitune_fast.patch._convert import convert_live_objects
from aitune_fast.patch._journal import JOURNAL, Step
from aitune_fast.patch._loading import (
    Finder,
    forget_other_threads_imports,
    on_loaded,
    set_call_path,
    views_back,
    views_off,
)
from aitune_fast.patch._quiescence import (
    GATES,
    Codes,
    Entry,
    attr,
    code_chain,
    foreign_attr,
    quiescent,
    settled,
    wait_for_calls,
)
from aitune_fast.patch._registry import REGISTRY, UNDO_ORDER, Layer
from aitune_fast.patch._state import CURRENT, LOCK, State, state


def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect (also True while an interrupted switch has left some of it in
    place: ``unpatch_aitune()`` then takes the rest away, ``patch_aitune()`` completes it)."""
    return state().active


def patch_aitune(call_path: bool = True) -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast.

    `call_path`: also run a tuned module's per-call path (``Module._forward``, ``TunedModule.__call__``,
    ``Backend.infer``) on aitune_fast's implementation (``_call_path``); False keeps AITune's own, with only the
    metadata swapped. Calling it again while patched switches the call path. Idempotent.

    The switch is atomic: calls into AITune made meanwhile by other threads wait for it, the calls already running
    finish first, and any failure (or KeyboardInterrupt) leaves AITune as it was. Raises ImportError when ``aitune``
    is not installed, RuntimeError when its version is not one the patch was made for (``aitune>=0.6.0,<0.7.0``),
    and ``SwitchRefused`` (a RuntimeError) while another thread tunes or saves or loads a checkpoint, or when
    AITune calls of other threads have not returned within 5 seconds: call it again once they have; TypeError when
    `call_path` is not a bool.

    Swapped with the classes: the core reads AITune's ``global_context`` and ``config``; AITune's ``Locator``
    registrations carry over; live tuned modules' backend keys are converted; ``aitune.torch.save`` writes what a stock
    AITune writes (AITune's pickled key layout, AITune's own metadata objects in backends' graph specs) and
    ``aitune.torch.load`` reads both into aitune_fast's objects.
    """
    if not isinstance(call_path, bool):
        raise TypeError(f"patch_aitune(call_path=...) takes True or False, not {call_path!r}")
    with LOCK:
        recover()
        if state().active and state().complete:
            set_call_path(call_path)  # the call path switch (issue 20)
            return
        if _names.PACKAGE not in sys.modules and importlib.util.find_spec(_names.PACKAGE) is None:
            raise ImportError(
                "aitune_fast.patch_aitune() needs AITune installed (`pip install aitune`), the package it patches"
            )
        check_aitune_version()
        with quiescent(_entries(), codes(), "patch_aitune"):
            if state().active:  # a switch interrupted earlier left part of the patch: take it away first
                _unpatch_steps()
            _patch_steps(call_path)
            _settle("patch_aitune", to_ours=True)


def unpatch_aitune() -> None:
    """Undo ``patch_aitune()``: AITune's own objects everywhere again, its ``Locator`` registry updated with the
    registrations made while patched, and live tuned modules' backend keys converted back. Idempotent, atomic as
    ``patch_aitune()`` is, and refused (``SwitchRefused``) in the same cases.
    """
    with LOCK:
        recover()
        if not state().active:
            return
        with quiescent(_entries(), codes(), "unpatch_aitune"):
            _unpatch_steps()
            _settle("unpatch_aitune", to_ours=False)


def recover() -> None:
    """Finish what an interrupted switch left: its gates opened, its changes rolled back (the switch that was
    interrupted then never happened)."""
    GATES.open()
    JOURNAL.roll_back()


def after_fork_in_child() -> None:
    """In the child of ``os.fork()`` (multiprocessing's fork start method, a DataLoader worker), where only the
    forking thread exists: a switch or hooked import another thread was running never finishes there, and would hold
    the lock and the gates for good (the child's first AITune call, or its ``unpatch_aitune()``, would wait forever).
    The child frees them and undoes that switch as the next switch would: it runs in the world from before the
    switch. A fork made by the switching thread itself (from inside its own switch) leaves the switch to go on."""
    if LOCK.acquire(blocking=False):  # free, or held by this thread
        LOCK.release()
    else:
        LOCK._at_fork_reinit()  # type: ignore[attr-defined]  # held by a thread that does not exist here
        GATES.reset_after_fork()
        JOURNAL.recording = False
        recover()
    forget_other_threads_imports()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork_in_child)


def _patch_steps(call_path: bool) -> None:
    """The patch, each change through the journal: the import hook, AITune's classes learnt, live objects'
    metadata converted, every loaded AITune module swapped and installed into, the call path."""
    set_state(State(active=True))
    finder = Finder()
    REGISTRY.step(Layer.IMPORT_HOOK, "sys.meta_path", lambda: sys.meta_path.insert(0, finder), _remover(finder))
    for name in sorted(_names.DEFINITIONS):
        module = sys.modules.get(name)
        if module is not None:
            learn_definitions(module)
    convert_live_objects(to_ours=True)
    for name in sorted(n for n in list(sys.modules) if _names.is_aitune(n)):
        module = sys.modules.get(name)
        if module is not None:
            on_loaded(module)
    set_call_path(call_path)
    now = state()
    JOURNAL.apply(Step(lambda: setattr(now, "complete", True), lambda: setattr(now, "complete", False)))


def _unpatch_steps() -> None:
    """The patch undone, each change through the journal (a roll back puts the patch back whole): the call path,
    the import hook, live objects' metadata converted back, then the replacements layer by layer
    (``_registry.UNDO_ORDER``), AITune's ``Locator`` registry updated."""
    set_call_path(False)
    REGISTRY.restore(Layer.IMPORT_HOOK)
    convert_live_objects(to_ours=False)
    now = state()
    views, importing = list(now.views), now.importing
    JOURNAL.apply(Step(lambda: views_off(everything=True), lambda: views_back(views, importing)))
    for layer in UNDO_ORDER:
        REGISTRY.restore(layer)
    registry_back()
    set_state(State())


def set_state(new: State) -> None:
    """Put `new` in place of the state now in place (journaled)."""
    old = CURRENT.state
    JOURNAL.apply(Step(lambda: setattr(CURRENT, "state", new), lambda: setattr(CURRENT, "state", old)))


def _remover(finder: Any) -> Any:
    def remove() -> None:
        while finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return remove


def _settle(what: str, to_ours: bool) -> None:
    """A thread that looked an entry point up just before its gate closed may have entered it after the scan: wait
    for it and convert what it stored; refuse (the switch is rolled back) when it does not return in time."""
    found = codes()
    if settled(found):
        return
    wait_for_calls(found, what)
    convert_live_objects(to_ours=to_ours)


def _lookup(module_name: str, class_name: str, attribute: str) -> tuple[Any, Any] | None:
    """(owner, value) of ``module.class.attribute`` (or ``module.attribute``) where loaded, else None."""
    module = sys.modules.get(module_name)
    owner = getattr(module, class_name, None) if class_name else module
    if not isinstance(owner, (type, types.ModuleType)):
        return None
    value = attr(owner, attribute)
    return (owner, value) if value is not None else None


def _entries() -> list[Entry]:
    found = (_lookup(*where) for where in _names.GATED)
    return [Entry(hit[0], where[2]) for where, hit in zip(_names.GATED, found, strict=True) if hit is not None]


def codes() -> Codes:
    """The code a switch waits for (AITune's gated and call code, the call path's) and refuses beside (tuning,
    checkpoint files), as loaded now."""

    def of(table: tuple[tuple[str, str, str], ...]) -> set[Any]:
        out: set[Any] = set()
        for where in table:
            hit = _lookup(*where)
            if hit is not None:
                out.update(code_chain(hit[1]))
        return out

    long = of(_names.LONG_CODE) | tuning_loops()
    own = {code for function in _call_path.CALL_CODE for code in code_chain(function)}
    return Codes(
        calls=frozenset((of(_names.GATED) | of(_names.CALL_CODE) | own) - long),
        long=frozenset(long),
        entering=frozenset(own),
    )


def tuning_loops() -> set[Any]:
    """The code of every loaded AITune function that tunes a module, found by what it does rather than by a list:
    its code calls AITune's module-tuning span (:data:`_names.TUNING_SPAN`), as ``Module.tune`` and the JIT's
    ``PatchedModule.tune`` do. Functions of AITune's modules and of the classes they define, decorators unwrapped."""
    found: set[Any] = set()
    for name, module in list(sys.modules.items()):
        if _names.is_aitune(name) and isinstance(module, types.ModuleType):
            for value in _defined_in(module, name):
                found.update(code for code in code_chain(value) if _names.TUNING_SPAN in code.co_names)
    return found


def _defined_in(module: types.ModuleType, name: str) -> list[Any]:
    """The functions and the classes' attributes that `module` defines itself (not what it imports)."""
    values: list[Any] = []
    for value in list(vars(module).values()):
        if foreign_attr(value, "__module__") != name:
            continue
        if isinstance(value, type):
            values.extend(list(vars(value).values()))
        else:
            values.append(value)
    return values


def check_aitune_version() -> None:
    """Refuse an AITune the patch was not made for (other releases differ in the API the patch relies on)."""
    version: Any
    try:
        version = importlib.metadata.version(_names.PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = getattr(sys.modules.get(_names.PACKAGE), "__version__", None)
    release = _release(version)
    low, high = _names.SUPPORTED
    if release is None or not low <= release < high:
        raise RuntimeError(
            f"aitune_fast.patch_aitune() supports {_names.SUPPORTED_TEXT} (the releases it was made for); "
            f"the installed AITune is {version!r}. Install a supported AITune, or use aitune_fast on its own."
        )


def _release(version: Any) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a final or post release (``0.6.0``, ``0.6.1.post1``, ``0.6.0+local``); None for
    pre-releases, development releases and anything else."""
    found = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.post\d+)?(?:\+[\w.]+)?", version or "")
    if found is None:
        return None
    major, minor, micro = found.groups()
    return int(major), int(minor), int(micro or 0)
