"""What happens when an AITune module loads under the patch (or is found loaded when the patch comes): its
AITune names swapped for aitune_fast's, and what :data:`ON_LOAD` installs for that module. AITune modules imported
while patched go through an import hook (:class:`Finder`) that runs their code with AITune's own objects in view
(:class:`_ImportView`) and swaps their names after."""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aitune_fast.patch import _call_path, _names
from aitune_fast.patch._aitune import learn_config, learn_definitions, learn_global_context, registry_redirect
from aitune_fast.patch._checkpoint import wrap_checkpoint_files, wrap_to_dict
from aitune_fast.patch._journal import JOURNAL, Step
from aitune_fast.patch._registry import REGISTRY, Layer
from aitune_fast.patch._state import LOCK, state


@dataclass(frozen=True)
class Part:
    """What is installed for a module: `install(module)`; `call_path`: only while the call path is on."""

    install: Callable[[Any], None]
    call_path: bool = False


# AITune's module name -> what is installed when it loads (in this order; the call path's parts also when the call
# path is turned on, in the table's order)
ON_LOAD: dict[str, tuple[Part, ...]] = {
    _names.GLOBAL_CONTEXT: (Part(learn_global_context),),
    _names.CONFIG: (Part(learn_config),),
    _names.LOCATOR: (Part(registry_redirect),),
    _names.STORAGE_TASKS: (Part(wrap_checkpoint_files),),
    _names.BACKEND: (Part(_call_path.install_infer, call_path=True),),
    _names.EAGER_BACKEND: (Part(_call_path.learn_eager_infer, call_path=True),),
    _names.TUNED_MODULE: (Part(wrap_to_dict), Part(_call_path.install_tuned_call, call_path=True)),
    _names.WRAPPER_MODULE: (Part(_call_path.install_forward, call_path=True),),
    _names.JIT_MODULE: (Part(_call_path.install_jit_swap, call_path=True),),
}

_importing = threading.local()  # .depth: hooked aitune imports running on this thread


def on_loaded(module: Any) -> None:
    """Swap AITune's objects for ours in a freshly loaded (or already loaded) ``aitune`` module, and install what
    :data:`ON_LOAD` names for it."""
    now = state()
    name = getattr(module, "__name__", None)
    if not isinstance(name, str) or now.seen.get(name) is module:
        return
    if name in _names.DEFINITIONS:
        learn_definitions(module)
    namespace = getattr(module, "__dict__", None)
    if namespace is None:
        return
    layer = Layer.METADATA_CODE if name in _names.DEFINITIONS else Layer.CALLERS
    holds = False
    for attribute, value in list(namespace.items()):
        pair = now.by_id.get(id(value))
        if pair is not None and pair[0] is value:
            holds = REGISTRY.replace(layer, module, attribute, pair[1]) or holds
    now.seen[name] = module
    if holds:
        now.holders.append(module)
        if now.importing:
            _view(module)
    for part in ON_LOAD.get(name, ()):
        if now.call_path or not part.call_path:
            part.install(module)


def set_call_path(on: bool) -> None:
    """Put the tuned-call path in place (`on`) in every loaded AITune module and live object, or take it out (which
    also finishes what an interrupted earlier switch of it left)."""
    now = state()
    was = now.call_path
    JOURNAL.apply(Step(lambda: setattr(now, "call_path", on), lambda: setattr(now, "call_path", was)))
    if not on:
        REGISTRY.restore(Layer.CALL_PATH)
        REGISTRY.restore(Layer.CALL_PATH_LIVE)
        return
    for name, parts in ON_LOAD.items():
        module = sys.modules.get(name)
        for part in parts if module is not None else ():
            if part.call_path:
                part.install(module)


# ---------------------------------------------------------------------------------------------- import hook


class _ImportView(types.ModuleType):
    """The class of the ``aitune`` modules holding swapped names while an ``aitune`` module is imported under the
    patch: to the thread running that import they give AITune's own objects under those names.

    So an ``aitune`` module imported while patched runs its own code on AITune's objects only: what it builds from
    them at import time (subclasses such as ``ExactSampleMetadata``, default arguments such as
    ``describe(level=InfoLevel.FULL)``, closures, class attributes, annotations, aliases such as
    ``dict[SampleMetadata, ...]``) is AITune's, exactly as in an unpatched process; its names are swapped once its
    code has run (:class:`_Loader`), and put back by ``unpatch_aitune()``. Other threads see the swapped names.
    """

    def __getattribute__(self, name: str) -> Any:
        value = types.ModuleType.__getattribute__(self, name)
        if getattr(_importing, "depth", 0):
            module_name = types.ModuleType.__getattribute__(self, "__name__")
            original = REGISTRY.stock_name(module_name, name)
            if original is not None and state().by_id.get(id(original), (None, None))[1] is value:
                return original
        return value


def _view(module: Any) -> None:
    if type(module) is types.ModuleType:
        module.__class__ = _ImportView
        state().views.append(module)


def _views_on() -> None:
    """A hooked import begins (under the lock): the modules holding swapped names take :class:`_ImportView`."""
    now = state()
    now.importing += 1
    if now.importing == 1:
        for module in now.holders:
            _view(module)


def views_off(everything: bool = False) -> None:
    """A hooked import ended (or the patch is undone: `everything`): plain modules again when none runs."""
    now = state()
    now.importing = 0 if everything else max(0, now.importing - 1)
    if now.importing == 0:
        for module in now.views:
            if type(module) is _ImportView:
                module.__class__ = types.ModuleType  # type: ignore[assignment]
        now.views.clear()


def views_back(views: list[Any], importing: int) -> None:
    """Undo :func:`views_off`."""
    state().importing = importing
    for module in views:
        _view(module)


def forget_other_threads_imports() -> None:
    """In a forked child, where only the forking thread goes on: the hooked imports other threads were running never
    end there, so the views are counted for this thread's imports alone (plain modules again when it runs none)."""
    now = state()
    mine = getattr(_importing, "depth", 0)
    if now.importing > mine:
        if mine:
            now.importing = mine
        else:
            views_off(everything=True)


class _Loader(importlib.abc.Loader):
    """Runs the real loader with AITune's own objects in view (:class:`_ImportView`), then swaps names in the
    new module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with LOCK:
            patched = state() if state().active else None
            if patched is not None:
                _views_on()
        _importing.depth = getattr(_importing, "depth", 0) + 1
        try:
            self._loader.exec_module(module)
        finally:
            _importing.depth -= 1
            with LOCK:
                if patched is not None and patched is state():
                    try:
                        on_loaded(module)
                    finally:  # an install step that fails leaves no module in view
                        views_off()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of every ``aitune`` module imported while patched."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not _names.is_aitune(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None
