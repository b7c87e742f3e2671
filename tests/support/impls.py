"""The two implementations, each loaded once per process, for the fixtures and the child-process scenarios.

``ref()`` is the reference ``aitune`` 0.6.0 (a namespace: ``sample_metadata``, ``exact_sample_metadata``,
``locator``, ``tensor_spec``, ``global_context``, ``config``, ``serialization``); ``load_reference()`` cannot run
twice in one process (the second ``find_spec("aitune")`` meets the stub package it registered, whose ``__spec__``
is None), so the first result is kept. ``fast()`` is the ``aitune_fast`` package with its submodules imported.
``outcome(fn)`` is how a scenario reports one call as JSON-ready data.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"

_REFERENCE: SimpleNamespace | None = None


def _load_reference_function() -> Callable[[], SimpleNamespace]:
    try:
        from aitune_fast._reference import load_reference
    except ImportError:
        # The package itself does not import (e.g. the extension is not built yet): load the stdlib-only
        # ``_reference.py`` straight from its file so that reference-vs-reference runs still work.
        spec = importlib.util.spec_from_file_location(
            "_aitune_fast_reference", PYTHON_DIR / "aitune_fast" / "_reference.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        load_reference = module.load_reference
    return load_reference


def ref() -> SimpleNamespace:
    """The reference modules, loaded on the first call and shared by every later caller in this process."""
    global _REFERENCE
    if _REFERENCE is None:
        _REFERENCE = _load_reference_function()()
    return _REFERENCE


def fast():
    """The ``aitune_fast`` package, with the submodules the scenarios reach through it imported."""
    import aitune_fast
    import aitune_fast.exact_sample_metadata
    import aitune_fast.global_context
    import aitune_fast.locator
    import aitune_fast.sample_metadata
    import aitune_fast.tensor_spec

    return aitune_fast


def outcome(fn: Callable[[], Any]) -> list:
    """``["ok", repr-ish]`` or ``["raise", exception class name, message head]``; a PanicException counts too."""
    try:
        value = fn()
    except BaseException as exc:  # noqa: BLE001 - PanicException derives from BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return ["raise", type(exc).__name__, str(exc)[:300]]
    if isinstance(value, (bool, int, str, type(None))):
        return ["ok", value]
    return ["ok", type(value).__name__]
