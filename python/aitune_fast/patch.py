"""Run a stock AITune on aitune_fast: ``patch_aitune()`` / ``unpatch_aitune()``.

AITune (``aitune`` 0.6.0) imports ``SampleMetadata``, ``ExactSampleMetadata``, ``TensorSpec``, ``Locator``,
``InfoLevel``, ``ObjectType`` and ``batch_tensor`` by name from ``aitune.torch.module.*``. ``patch_aitune()``
replaces those objects with aitune_fast's in every loaded ``aitune`` module (the defining modules and every
module holding them under any name), and in every ``aitune`` module imported later (an import hook on
``sys.meta_path``). It also:

* makes the Rust core read AITune's ``global_context`` (the batch size ``tune()`` sets) and AITune's
  ``config.enable_transformers_integration`` on every call;
* copies the type registrations of AITune's ``Locator`` (``register_user_type``/``ignore_type``) into
  aitune_fast's registry; ``unpatch_aitune()`` hands back the changes made while patched;
* converts every metadata AITune's live objects hold (backend keys, recorded graph specs, strategy maps, sample
  stores), so modules tuned or recorded before the patch keep dispatching; ``unpatch_aitune()`` converts them
  back. Dict keys of both classes stand side by side until the calls in flight at the switch have returned, so a
  toggle never fails a call on another thread;
* makes an ``aitune`` module imported while patched run its own code on AITune's objects (:class:`_ImportView`),
  so nothing it builds at import time captures ours, and makes AITune's ``Locator`` methods act on our registry;
* refuses AITune releases it was not made for (``aitune>=0.6.0,<0.7.0``);
* makes checkpoints written by ``aitune.torch.save`` hold what a stock AITune writes, so a stock AITune without
  aitune_fast loads them: ``TunedModule.to_dict()`` stores each backend key in the reference's pickled layout, and
  the checkpoint file is pickled with AITune's own classes in place of aitune_fast's metadata, locators and specs
  wherever backends put them in their state (the graph specs of the ONNX Runtime and TensorRT backends);
* makes ``aitune.torch.load`` accept both: the checkpoint's AITune classes are rebuilt as AITune's objects and then
  converted to aitune_fast's. The reference's pickled key bytes go through aitune_fast's restricted reader
  (``_legacy``), which runs nothing, and a key it refuses is unpickled as AITune does (unless loads are forced
  weights-only); the checkpoint file itself is read as AITune reads it (``torch.load`` with
  ``weights_only=False``), with nothing more admitted than AITune admits.

``AUTOWRAPT_BOOTSTRAP=aitune_fast`` patches AITune as soon as ``aitune.torch`` is imported (an entry point in
the ``aitune_fast`` group, the convention AITune's own ``aitune_enable_jit_tuning`` uses).
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.metadata
import importlib.util
import io
import logging
import os
import pickle
import re
import sys
import threading
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aitune_fast
from aitune_fast import _config, _switch, _tuned_call
from aitune_fast._switch import SwitchRefused

# the module, not the `global_context` object the package exports under the same name
_gc_module = sys.modules["aitune_fast.global_context"]

__all__ = ["SwitchRefused", "is_aitune_patched", "patch_aitune", "unpatch_aitune"]

# where AITune defines the names the patch swaps, and aitune_fast's replacement for each
_DEFINITIONS: dict[str, tuple[str, ...]] = {
    "aitune.torch.module.locator": ("Locator", "ObjectType"),
    "aitune.torch.module.tensor_spec": ("TensorSpec", "InfoLevel"),
    "aitune.torch.module.sample_metadata": ("SampleMetadata", "batch_tensor"),
    "aitune.torch.module.exact_sample_metadata": ("ExactSampleMetadata",),
}
_OURS: dict[str, Any] = {
    "Locator": aitune_fast.Locator,
    "ObjectType": aitune_fast.ObjectType,
    "TensorSpec": aitune_fast.TensorSpec,
    "InfoLevel": aitune_fast.InfoLevel,
    "SampleMetadata": aitune_fast.SampleMetadata,
    "batch_tensor": aitune_fast.batch_tensor,
    "ExactSampleMetadata": aitune_fast.ExactSampleMetadata,
}
# the swapped classes whose objects are converted between AITune's and ours: metadata, locators, specs, object types
_CONVERTED = ("SampleMetadata", "ExactSampleMetadata", "Locator", "TensorSpec", "ObjectType")
_OUR_TYPES = tuple(_OURS[name] for name in _CONVERTED)
_GLOBAL_CONTEXT_MODULE = "aitune.global_context"
_CONFIG_MODULE = "aitune.torch.config"
_TUNED_MODULE = "aitune.torch.module.tuned_module"
_STORAGE_TASKS = "aitune.torch.checkpoint.storage_tasks"

_logger = logging.getLogger(__name__)

# the AITune releases the patch was made for (their metadata API, checkpoint layout and module names): [low, high)
_SUPPORTED_AITUNE = ((0, 6, 0), (0, 7, 0))
_SUPPORTED_AITUNE_TEXT = "aitune>=0.6.0,<0.7.0"

# AITune's entry points into its metadata code: while a switch runs, new calls wait there (`_switch.quiescent`):
# (module, class or "" for a module-level function, attribute)
_GATED: tuple[tuple[str, str, str], ...] = (
    ("aitune.torch.module.recording_module", "RecordingModule", "__call__"),
    ("aitune.torch.module.tuned_module", "TunedModule", "__call__"),
    ("aitune.torch.module.tuned_module", "TunedModule", "from_dict"),
    ("aitune.torch.module.tuned_module", "TunedModule", "to_dict"),
    ("aitune.torch.module.wrapper_module", "Module", "tune"),
    ("aitune.torch.checkpoint.storage_tasks", "TorchSaveTask", "save"),
    ("aitune.torch.checkpoint.storage_tasks", "TorchLoadTask", "load"),
)
# more code that holds a metadata between building it and storing or looking it up: a switch waits for the calls in
# it (and in the gated entries) to return; a thread inside it passes the gates
_CALL_CODE: tuple[tuple[str, str, str], ...] = (
    ("aitune.torch.module.tuned_module", "TunedModule", "safe_call_backend"),
    ("aitune.torch.module.tuned_module", "TunedModule", "call_unique_backend"),
    ("aitune_fast._tuned_call", "", "_call"),  # the call path's TunedModule.__call__, entered from its _forward
    ("aitune_fast._tuned_call", "", "_backend_for"),
)
# work that holds metadata in local variables for long (tuning, checkpoint files): a switch refuses while it runs
_LONG_CODE: tuple[tuple[str, str, str], ...] = (
    ("aitune.torch.tuning", "", "tune"),
    ("aitune.torch.tuning", "", "save"),
    ("aitune.torch.tuning", "", "load"),
    ("aitune.torch.module.wrapper_module", "Module", "tune"),
    ("aitune.torch.module.wrapper_module", "Module", "from_dict"),
)
_CONTAINER_DEPTH = 8  # how deep the conversion looks into containers held by AITune's objects

# AITune's Locator methods that act on aitune_fast's registry while patched
_REGISTRY_METHODS = ("register_user_type", "unregister_user_type", "ignore_type", "unignore_type", "find_leaves")
# the methods of AITune's classes that keep their own globals while patched (`_keep_stock_equality`)
_EQUALITY_METHODS = ("__eq__", "__ne__", "__hash__")


class _State:
    """Everything ``unpatch_aitune()`` needs to restore stock AITune exactly: one object per patched period, put
    in place and taken away by a journaled step of the switch."""

    def __init__(self, active: bool = False) -> None:
        self.active = active
        self.complete = False  # every step of the patch done
        self.call_path = True
        self.reference: dict[str, Any] = {}  # name -> AITune's object
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(AITune's object) -> (it, ours)
        self.swapped: list[tuple[Any, str, Any]] = []  # (module, attribute, AITune's object)
        self.swapped_names: dict[tuple[str, str], Any] = {}  # (module name, attribute) -> AITune's object
        self.seen: dict[str, Any] = {}  # module name -> the module object already swapped
        self.finder: _Finder | None = None
        self.registry_at_patch: tuple[dict[type, bool], set[type]] | None = None
        self.replaced: dict[str, tuple[Any, str, Any]] = {}  # what -> (owner, attribute, AITune's function)
        self.holders: list[Any] = []  # modules holding swapped names
        self.importing = 0  # hooked imports running (all threads)
        self.views: list[Any] = []  # modules whose class is _ImportView now


_state = _State()
_importing = threading.local()  # .depth: hooked aitune imports running on this thread


def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect (also True while an interrupted switch has left some of it in
    place: ``unpatch_aitune()`` then takes the rest away, ``patch_aitune()`` completes it)."""
    return _state.active


def patch_aitune(call_path: bool = True) -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast.

    `call_path`: also run a tuned module's per-call path (``Module._forward``, ``TunedModule.__call__``,
    ``Backend.infer``) on aitune_fast's implementation (``_tuned_call``); False keeps AITune's own, with only the
    metadata swapped. Calling it again while patched switches the call path. Idempotent.

    The switch is atomic: calls into AITune made meanwhile by other threads wait for it, the calls already running
    finish first, and any failure (or KeyboardInterrupt) leaves AITune as it was. Raises ImportError when ``aitune``
    is not installed, RuntimeError when its version is not one the patch was made for (``aitune>=0.6.0,<0.7.0``),
    and :class:`SwitchRefused` (a RuntimeError) while another thread tunes or saves or loads a checkpoint, or when
    AITune calls of other threads have not returned within 5 seconds: call it again once they have.
    """
    with _switch.LOCK:
        _recover()
        if _state.active and _state.complete:
            _tuned_call.enable(call_path)  # the call path switch (issue 20)
            _state.call_path = call_path
            return
        if "aitune" not in sys.modules and importlib.util.find_spec("aitune") is None:
            raise ImportError(
                "aitune_fast.patch_aitune() needs AITune installed (`pip install aitune`), the package it patches"
            )
        _check_aitune_version()
        with _switch.quiescent(_entries(), _codes(), "patch_aitune"):
            if _state.active:  # a switch interrupted earlier left part of the patch: take it away first
                _unpatch_steps()
            _patch_steps(call_path)
            _settle("patch_aitune", to_ours=True)


def unpatch_aitune() -> None:
    """Undo ``patch_aitune()``: AITune's own objects everywhere again, its ``Locator`` registry updated with the
    registrations made while patched, and live tuned modules' backend keys converted back. Idempotent, atomic as
    ``patch_aitune()`` is, and refused (:class:`SwitchRefused`) in the same cases."""
    with _switch.LOCK:
        _recover()
        if not _state.active:
            return
        with _switch.quiescent(_entries(), _codes(), "unpatch_aitune"):
            _unpatch_steps()
            _settle("unpatch_aitune", to_ours=False)


def _recover() -> None:
    """Finish what an interrupted switch left: its gates opened, its changes rolled back (the switch that was
    interrupted then never happened)."""
    _switch.GATES.open()
    _switch.JOURNAL.roll_back()


def _patch_steps(call_path: bool) -> None:
    """The patch, each change through the journal."""
    journal = _switch.JOURNAL
    _set_state(_State(active=True))
    finder = _Finder()
    _state.finder = finder
    journal.apply(_switch.Step(lambda: sys.meta_path.insert(0, finder), lambda: _remove(sys.meta_path, finder)))
    for name in sorted(_DEFINITIONS):
        module = sys.modules.get(name)
        if module is not None:
            _learn_definitions(module)
    _convert_live_objects(to_ours=True)
    for name in sorted(n for n in list(sys.modules) if _is_aitune(n)):
        module = sys.modules.get(name)
        if module is not None:
            _on_loaded(module)
    previous = _tuned_call.enabled()
    journal.apply(_switch.Step(lambda: _tuned_call.enable(call_path), lambda: _tuned_call.enable(previous)))
    _state.call_path = call_path
    _state.complete = True


def _unpatch_steps() -> None:
    """The patch undone, each change through the journal (a roll back puts the patch back whole)."""
    journal = _switch.JOURNAL
    state = _state
    call_path = _tuned_call.enabled()
    # the call path (issue 20) first: stock classes and live modules' wrappers back
    journal.apply(_switch.Step(lambda: _tuned_call.enable(False), lambda: _tuned_call.enable(call_path)))
    finder = state.finder
    if finder is not None:
        journal.apply(_switch.Step(lambda: _remove(sys.meta_path, finder), lambda: _insert_once(finder)))
    _convert_live_objects(to_ours=False)
    views, importing = list(state.views), state.importing
    journal.apply(_switch.Step(lambda: _views_off(everything=True), lambda: _views_back(views, importing)))
    # AITune's metadata code first (its modules' names, its Locator's methods), then the modules calling it
    for defining in (True, False):
        for module, attribute, original in reversed(state.swapped):
            if (getattr(module, "__name__", None) in _DEFINITIONS) is defining:
                journal.apply(_switch.SetAttr(module, attribute, vars(module).get(attribute), original))
        for key, (owner, attribute, original) in reversed(list(state.replaced.items())):
            if key.startswith(("Locator.", "stock ")) is defining:
                journal.apply(_switch.SetAttr(owner, attribute, _switch.attr(owner, attribute), original))
    journal.apply(_switch.SetItem(_gc_module._source, 0, _gc_module._source[0], _gc_module.global_context))
    journal.apply(_switch.SetItem(_config._source, 0, _config._source[0], _config.config))
    _registry_back()
    _set_state(_State())


def _set_state(new: _State) -> None:
    global _state
    old = _state

    def put(state: _State) -> None:
        global _state
        _state = state

    _switch.JOURNAL.apply(_switch.Step(lambda: put(new), lambda: put(old)))


def _remove(items: list, item: Any) -> None:
    while item in items:
        items.remove(item)


def _insert_once(finder: Any) -> None:
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)


def _settle(what: str, to_ours: bool) -> None:
    """A thread that looked an entry point up just before its gate closed may have entered it after the scan: wait
    for it and convert what it stored; refuse (the switch is rolled back) when it does not return in time."""
    codes = _codes()
    if _switch.settled(codes):
        return
    _switch.wait_for_calls(codes, what)
    _convert_live_objects(to_ours=to_ours)


def _lookup(module_name: str, class_name: str, attribute: str) -> tuple[Any, Any] | None:
    """(owner, value) of ``module.class.attribute`` (or ``module.attribute``) where loaded, else None."""
    module = sys.modules.get(module_name)
    owner = getattr(module, class_name, None) if class_name else module
    if not isinstance(owner, (type, types.ModuleType)):
        return None
    value = _switch.attr(owner, attribute)
    return (owner, value) if value is not None else None


def _entries() -> list[_switch.Entry]:
    found = (_lookup(*where) for where in _GATED)
    return [_switch.Entry(hit[0], where[2]) for where, hit in zip(_GATED, found, strict=True) if hit is not None]


def _codes() -> _switch.Codes:
    def codes(table: tuple[tuple[str, str, str], ...]) -> set[Any]:
        out: set[Any] = set()
        for where in table:
            hit = _lookup(*where)
            if hit is not None:
                out.update(_switch.code_chain(hit[1]))
        return out

    long = codes(_LONG_CODE)
    return _switch.Codes(calls=frozenset((codes(_GATED) | codes(_CALL_CODE)) - long), long=frozenset(long))


def _check_aitune_version() -> None:
    """Refuse an AITune the patch was not made for (other releases differ in the API the patch relies on)."""
    try:
        version = importlib.metadata.version("aitune")
    except importlib.metadata.PackageNotFoundError:
        version = getattr(sys.modules.get("aitune"), "__version__", None)
    release = _release(version)
    low, high = _SUPPORTED_AITUNE
    if release is None or not low <= release < high:
        raise RuntimeError(
            f"aitune_fast.patch_aitune() supports {_SUPPORTED_AITUNE_TEXT} (the releases it was made for); "
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


# ---------------------------------------------------------------------------------------------- modules


def _is_aitune(name: str) -> bool:
    return name == "aitune" or name.startswith("aitune.")


def _learn_definitions(module: Any) -> None:
    """Record AITune's objects defined in `module` (before they are swapped)."""
    for attribute in _DEFINITIONS[module.__name__]:
        value = module.__dict__.get(attribute)
        ours = _OURS[attribute]
        if value is None or value is ours or attribute in _state.reference:
            continue
        _state.reference[attribute] = value
        _state.by_id[id(value)] = (value, ours)
        if attribute == "Locator":
            _registry_over(value)
    _keep_stock_equality(module)


def _keep_stock_equality(module: Any) -> None:
    """AITune's own classes keep stock's equality while patched.

    Their ``__eq__`` checks ``isinstance(other, Locator)`` (or ``TensorSpec``) through the module's name, which the
    patch points at aitune_fast's class: two equal AITune locators made before the patch would compare unequal, and
    a dict keyed by one would not find the other. The equality methods that name a swapped class run, while patched,
    with globals of their own that give AITune's objects under those names.
    """
    theirs = {id(ours): ref for ref, ours in _state.by_id.values()}
    namespace = {name: theirs.get(id(value), value) for name, value in vars(module).items()}
    swapped = set(_OURS)
    for attribute in _DEFINITIONS[module.__name__]:
        cls = _state.reference.get(attribute)
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        for name in _EQUALITY_METHODS:
            function = vars(cls).get(name)
            if isinstance(function, types.FunctionType) and swapped & set(function.__code__.co_names):
                own = types.FunctionType(
                    function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
                )
                own.__kwdefaults__ = function.__kwdefaults__
                own.__qualname__ = function.__qualname__
                _replace(f"stock {cls.__qualname__}.{name}", cls, name, own)


def _on_loaded(module: Any) -> None:
    """Swap AITune's objects for ours in a freshly loaded (or already loaded) ``aitune`` module."""
    name = getattr(module, "__name__", None)
    if not isinstance(name, str) or _state.seen.get(name) is module:
        return
    if name in _DEFINITIONS:
        _learn_definitions(module)
    namespace = getattr(module, "__dict__", None)
    if namespace is None:
        return
    holds = False
    for attribute, value in list(namespace.items()):
        pair = _state.by_id.get(id(value))
        if pair is not None and pair[0] is value:
            _state.swapped.append((module, attribute, value))  # written down first: unpatch puts it back
            _state.swapped_names[(name, attribute)] = value
            _switch.JOURNAL.apply(_switch.SetAttr(module, attribute, value, pair[1]))
            holds = True
    _state.seen[name] = module
    if holds:
        _state.holders.append(module)
        if _state.importing:
            _view(module)
    if "Locator" in _state.reference and name == "aitune.torch.module.locator":
        _registry_redirect(_state.reference["Locator"])
    if name == _GLOBAL_CONTEXT_MODULE and hasattr(module, "global_context"):
        _gc_module._source[0] = module.global_context
    elif name == _CONFIG_MODULE and hasattr(module, "config"):
        _config._source[0] = module.config
    elif name == _TUNED_MODULE and hasattr(module, "TunedModule"):
        _wrap_to_dict(module.TunedModule)
    elif name == _STORAGE_TASKS:
        _wrap_checkpoint_files(module)
    _tuned_call.on_loaded(module)  # the call path (issue 20), when enabled


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
            original = _state.swapped_names.get((module_name, name))
            if original is not None and _state.by_id.get(id(original), (None, None))[1] is value:
                return original
        return value


def _view(module: Any) -> None:
    if type(module) is types.ModuleType:
        module.__class__ = _ImportView
        _state.views.append(module)


def _views_on() -> None:
    """A hooked import begins (under the lock): the modules holding swapped names take :class:`_ImportView`."""
    _state.importing += 1
    if _state.importing == 1:
        for module in _state.holders:
            _view(module)


def _views_off(everything: bool = False) -> None:
    """A hooked import ended (or the patch is undone: `everything`): plain modules again when none runs."""
    _state.importing = 0 if everything else max(0, _state.importing - 1)
    if _state.importing == 0:
        for module in _state.views:
            if type(module) is _ImportView:
                module.__class__ = types.ModuleType
        _state.views.clear()


def _views_back(views: list[Any], importing: int) -> None:
    """Undo :func:`_views_off`."""
    _state.importing = importing
    for module in views:
        _view(module)


class _Loader(importlib.abc.Loader):
    """Runs the real loader with AITune's own objects in view (:class:`_ImportView`), then swaps names in the
    new module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with _switch.LOCK:
            state = _state if _state.active else None
            if state is not None:
                _views_on()
        _importing.depth = getattr(_importing, "depth", 0) + 1
        try:
            self._loader.exec_module(module)
        finally:
            _importing.depth -= 1
            with _switch.LOCK:
                if state is not None and state is _state:
                    _on_loaded(module)
                    _views_off()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of every ``aitune`` module imported while patched."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not _is_aitune(fullname):
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


# ---------------------------------------------------------------------------------------------- registry


def _registry_snapshot() -> tuple[dict[type, bool], set[type]]:
    user_types, ignored = aitune_fast._core._type_registry()
    return dict(user_types), set(ignored)


def _registry_over(reference_locator: Any) -> None:
    """Copy the registrations of AITune's ``Locator`` into ours (at patch time)."""
    for cls, only_tensors in dict(getattr(reference_locator, "_user_types", {})).items():
        aitune_fast.Locator.register_user_type(cls, only_tensors=bool(only_tensors))
    for cls in set(getattr(reference_locator, "_ignored_types", ())):
        aitune_fast.Locator.ignore_type(cls)
    _state.registry_at_patch = _registry_snapshot()


def _registry_redirect(reference_locator: Any) -> None:
    """While patched, AITune's ``Locator`` (a name bound before the patch) registers and walks with aitune_fast's
    registry: its methods read ``Locator._user_types`` through the module name the patch swapped."""
    for name in _REGISTRY_METHODS:
        if name in vars(reference_locator):
            _replace(f"Locator.{name}", reference_locator, name, staticmethod(getattr(aitune_fast.Locator, name)))


def _registry_back() -> None:
    """Apply to AITune's ``Locator`` the registrations changed while patched (at unpatch time)."""
    reference_locator = _state.reference.get("Locator")
    if reference_locator is None or _state.registry_at_patch is None:
        return
    before_user, before_ignored = _state.registry_at_patch
    after_user, after_ignored = _registry_snapshot()
    for cls in before_user.keys() - after_user.keys():
        reference_locator.unregister_user_type(cls)
    for cls in before_ignored - after_ignored:
        reference_locator.unignore_type(cls)
    for cls, only_tensors in after_user.items():
        if before_user.get(cls) != only_tensors:
            reference_locator.register_user_type(cls, only_tensors=only_tensors)
    for cls in after_ignored - before_ignored:
        reference_locator.ignore_type(cls)


# ---------------------------------------------------------------------------------------------- conversion


def _ours_of(md: Any) -> Any:
    """aitune_fast metadata equal to AITune's `md`."""
    reference = _state.reference
    ours = aitune_fast.ExactSampleMetadata if type(md) is reference.get("ExactSampleMetadata") else None
    ours = ours or aitune_fast.SampleMetadata
    tensors = [(_our_locator(loc), _spec_as(aitune_fast.TensorSpec, spec)) for loc, spec in md._tensor_data]
    others = [(_our_locator(loc), value) for loc, value in md._other_data]
    built = ours(tensors, others, md._strict, md._llm_phase)
    # Metadata built from Python lists compares through those lists; a JSON round trip gives the
    # compact form, which dispatch compares in well under a microsecond.  Values JSON cannot hold
    # (symbolic sizes, arbitrary objects) keep the Python form.
    try:
        compact = ours.from_json(built.to_json())
    except (TypeError, ValueError):
        return built
    return compact if type(compact) is type(built) and compact == built else built


def _our_locator(loc: Any) -> Any:
    steps = tuple((accessor, aitune_fast.ObjectType(int(kind))) for accessor, kind in loc._access_path)
    return aitune_fast.Locator(steps, bool(loc._is_output))


def _spec_as(cls: Any, spec: Any) -> Any:
    """A `cls` (our ``TensorSpec`` or AITune's) equal to `spec` (of the other world's class)."""
    return cls(list(spec.shape), list(spec.min_shape), list(spec.max_shape), spec.dtype, list(spec._bs_multipliers))


def _reference_locator(loc: Any, steps_made: dict[tuple, tuple] | None = None) -> Any:
    """AITune's ``Locator`` equal to our `loc`. With `steps_made` (path so far -> its last step), locators of one
    metadata share the step tuple of each node their paths pass through, as AITune's walk makes them (a child's
    path is its parent's plus one step): pickled together, they come out byte for byte as AITune's."""
    kind = _state.reference["ObjectType"]
    steps, is_output = loc.__reduce__()[1]
    path: tuple = ()
    for accessor, step_kind in steps:
        step = (accessor, kind(int(step_kind)))
        if steps_made is not None:
            step = steps_made.setdefault((*path, step), step)
        path = (*path, step)
    return _state.reference["Locator"](path, bool(is_output))


def _reference_parts(md: Any) -> tuple[list, list, bool, Any]:
    """AITune objects equal to our `md`'s content: (tensor_data, other_data, strict, llm_phase)."""
    # __reduce__ gives fresh (Locator, TensorSpec) pairs without building md's Python view
    tensors, others, strict, phase = md.__reduce__()[1]
    spec_cls = _state.reference["TensorSpec"]
    steps_made: dict[tuple, tuple] = {}
    ref_tensors = [(_reference_locator(loc, steps_made), _spec_as(spec_cls, spec)) for loc, spec in tensors]
    ref_others = [(_reference_locator(loc, steps_made), value) for loc, value in others]
    return ref_tensors, ref_others, bool(strict), phase


def _reference_of(md: Any) -> Any:
    """AITune metadata equal to our `md` (at unpatch time, when AITune's names are back)."""
    reference = _state.reference
    cls = reference.get("ExactSampleMetadata") if isinstance(md, aitune_fast.ExactSampleMetadata) else None
    cls = cls or reference["SampleMetadata"]
    tensors, others, strict, phase = _reference_parts(md)
    return cls(tuple(tensors), tuple(others), strict, phase)


def _convert_live_objects(to_ours: bool) -> None:
    """Give every metadata that AITune's live objects hold the other world's class (to_ours: aitune_fast's).

    Looks into every object of a class defined in ``aitune`` (tuned, recording and wrapper modules, graph specs,
    sample stores, kernel profilers, ...) and the dicts, lists and tuples it holds, however nested: a metadata held
    as a value is replaced; a dict keyed by metadata gets its items back in their order with the keys converted, in
    one step (no dict ever holds keys of both classes). Every change is planned first (a failure there changes
    nothing), then made through the journal.
    """
    for edit in _conversion_plan(to_ours):
        _switch.JOURNAL.apply(edit)


def _conversion_plan(to_ours: bool) -> list[Any]:
    """The journal edits that :func:`_convert_live_objects` makes, innermost containers first."""
    reference = _state.reference
    if "SampleMetadata" not in reference:
        return []  # AITune's metadata never loaded: no live objects to convert
    source = reference["SampleMetadata"] if to_ours else aitune_fast.SampleMetadata
    # not looked into: the metadata, locators and specs the scan converts
    skip = tuple(reference[n] for n in _CONVERTED if n in reference and n != "ObjectType") + _OUR_TYPES
    convert = _ours_of if to_ours else _reference_of
    memo: dict[int, tuple[Any, Any]] = {}
    edits: list[Any] = []
    seen: set[int] = set()

    def conv(md: Any) -> Any:
        done = memo.get(id(md))
        if done is None:
            done = memo[id(md)] = (md, convert(md))
        return done[1]

    def walk(value: Any, depth: int) -> Any:
        """`value` converted (a new object for a metadata or a tuple holding one; edits planned for containers)."""
        if isinstance(value, source):
            return conv(value)
        cls = type(value)
        if depth > _CONTAINER_DEPTH or not (cls is tuple or isinstance(value, (dict, list))) or id(value) in seen:
            return value
        seen.add(id(value))
        if cls is tuple:
            items = tuple(walk(item, depth + 1) for item in value)
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        if isinstance(value, list):
            for index, item in enumerate(list(value)):
                new = walk(item, depth + 1)
                if new is not item:
                    edits.append(_switch.SetItem(value, index, item, new))
            return value
        pairs = list(value.items())
        new_pairs = [(conv(k) if isinstance(k, source) else k, walk(v, depth + 1)) for k, v in pairs]
        if any(a[0] is not b[0] for a, b in zip(pairs, new_pairs, strict=True)):
            _check_distinct(new_pairs)
            edits.append(_switch.Rekey(value, pairs, new_pairs))
        else:
            edits.extend(
                _switch.SetItem(value, k, v, new)
                for (k, v), (_, new) in zip(pairs, new_pairs, strict=True)
                if new is not v
            )
        return value

    def aitunes(cls: type) -> bool:
        try:
            module = type.__getattribute__(cls, "__module__")  # not through a metaclass of the user's
        except AttributeError:
            return False
        return isinstance(module, str) and _is_aitune(module) and not issubclass(cls, skip)

    for obj in _switch.live_instances(aitunes):
        for state in _instance_dicts(obj):
            walk(state, 0)
    return edits


def _check_distinct(pairs: list[tuple[Any, Any]]) -> None:
    """Refuse a conversion that would make two keys of one dict equal (the dict would lose an entry)."""
    if len(dict(pairs)) != len(pairs):
        raise RuntimeError(
            "aitune_fast: converting the metadata keys of an AITune object would make two of them equal; nothing "
            "was changed. Please report this with the keys' describe() output."
        )


def _instance_dicts(obj: Any) -> list[dict]:
    """The attribute dicts of `obj`: its ``__dict__``, and for a proxy (AITune's ``Module`` is a ``wrapt`` object
    proxy, whose ``__dict__`` is the wrapped object's) the dict of its own ``_self_`` attributes."""
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        own = None
    dicts = [own] if type(own) is dict else []
    dicts += [r for r in gc.get_referents(obj) if type(r) is dict and r is not own]
    return dicts


# ---------------------------------------------------------------------------------------------- checkpoints


def _replace(key: str, owner: Any, attribute: str, replacement: Any) -> None:
    """Put `replacement` at `owner.attribute` until unpatch (which puts AITune's function back)."""
    original = _switch.attr(owner, attribute)
    if original is None or key in _state.replaced:
        return
    function = replacement.__func__ if isinstance(replacement, staticmethod) else replacement
    if isinstance(function, types.FunctionType):  # aitune_fast's own methods (builtins) keep their own
        function.__doc__ = getattr(original, "__doc__", None)
        function.__wrapped__ = getattr(original, "__func__", original)
    _state.replaced[key] = (owner, attribute, original)  # written down first: unpatch puts it back
    _switch.JOURNAL.apply(_switch.SetAttr(owner, attribute, original, replacement))


def _wrap_to_dict(tuned_module: type) -> None:
    """``TunedModule.to_dict`` stores each backend key in the reference's layout (stock AITune reads it), and
    ``TunedModule.from_dict`` reads keys in that layout as AITune does (:func:`_wrap_from_dict`)."""
    original = _switch.attr(tuned_module, "to_dict")
    if original is not None:

        def to_dict(self: Any) -> Any:
            backends = getattr(self, "_backends", None)
            if not isinstance(backends, dict) or not any(isinstance(md, aitune_fast.SampleMetadata) for md in backends):
                return original(self)
            # AITune's to_dict on a view whose keys write AITune's layout: it never calls our to_dict(), which
            # refuses values that only pickle can hold (enums, devices, paths, ...)
            keys = OrderedDict(
                (_ReferenceKey(md) if isinstance(md, aitune_fast.SampleMetadata) else md, backend)
                for md, backend in backends.items()
            )
            return original(_BackendsView(self, keys))

        _replace("TunedModule.to_dict", tuned_module, "to_dict", to_dict)
    _wrap_from_dict(tuned_module)


class _ReferenceKey:
    """Stands for a backend key in ``TunedModule.to_dict``: its ``to_dict()`` is AITune's layout of it."""

    __slots__ = ("_state",)

    def __init__(self, md: Any) -> None:
        self._state = reference_dict(md)

    def to_dict(self) -> dict[str, Any]:
        return self._state


class _BackendsView:
    """A tuned module as its ``to_dict`` sees it, with other backend keys."""

    def __init__(self, module: Any, backends: dict) -> None:
        self._module = module
        self._backends = backends

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _wrap_from_dict(tuned_module: type) -> None:
    """Backend keys in AITune's pickled layout are read with the trust AITune gives them.

    Stock ``SampleMetadata.from_dict`` unpickles them, and the checkpoint file that holds them is read with
    ``weights_only=False``; aitune_fast's ``from_dict`` reads them with its restricted reader, which refuses any
    global it does not know (an enum of the user's, a ``Path``, ...). Under the patch a key that reader refuses is
    unpickled as AITune would, with AITune's classes for their names, and converted. With
    ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` (the checkpoint file itself loaded weights-only) only the restricted reader
    reads them.
    """
    original = _switch.attr(tuned_module, "from_dict")
    if not isinstance(original, staticmethod):
        return
    function = original.__func__
    key = getattr(tuned_module, "BACKENDS_KEY", "backends")

    def from_dict(module: Any, state_dict: dict) -> Any:
        entries = state_dict.get(key) if isinstance(state_dict, dict) else None
        trusted = [_trusted_key(entry[0]) for entry in entries] if isinstance(entries, list) else []
        if not any(md is not None for md in trusted):
            return function(module, state_dict)
        # AITune's from_dict with stand-in keys where the restricted reader refuses, then the real keys in place
        stand_ins = {i: _stand_in_key(i) for i, md in enumerate(trusted) if md is not None}
        changed = [(stand_ins[i].to_dict(), e[1]) if i in stand_ins else e for i, e in enumerate(entries)]
        tuned = function(module, {**state_dict, key: changed})
        real = {stand_ins[i]: trusted[i] for i in stand_ins}
        backends = tuned._backends
        items = list(backends.items())
        backends.clear()
        for md, backend in items:
            backends[real.get(md, md)] = backend
        return tuned

    _replace("TunedModule.from_dict", tuned_module, "from_dict", staticmethod(from_dict))


def _stand_in_key(index: int) -> Any:
    locator = aitune_fast.Locator((("aitune_fast.patch stand-in key", aitune_fast.ObjectType.DICT),))
    return aitune_fast.SampleMetadata([], [(locator, index)], True)


def _trusted_key(state: Any) -> Any:
    """Our metadata for a key dict in AITune's layout that aitune_fast's restricted reader refuses, unpickled as
    AITune unpickles it; None when the restricted reader reads it (or when loads are forced weights-only)."""
    if not isinstance(state, dict) or not isinstance(state.get("other_data"), bytes) or _weights_only_forced():
        return None
    try:
        aitune_fast.SampleMetadata.from_dict(state)
        return None
    except (TypeError, ValueError):
        pass
    cls = _state.reference["SampleMetadata"]
    tensors = _ReferenceUnpickler(io.BytesIO(state["tensor_data"])).load()
    others = _ReferenceUnpickler(io.BytesIO(state["other_data"])).load()
    return _ours_of(cls(tensors, others, state["strict"], state.get("llm_phase")))


def _weights_only_forced() -> bool:
    return os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in ("1", "y", "yes", "true")


def _wrap_checkpoint_files(storage_tasks: Any) -> None:
    """The checkpoint file: written with AITune's classes in place of ours, read back into ours.

    AITune's backends put metadata into their own state (``GraphSpec.to_dict()`` holds the ``SampleMetadata``
    objects themselves), and ``TorchSaveTask`` pickles the whole state with ``torch.save``. A plain pickler cannot
    name AITune's classes while the patch has put ours in their place, so the save runs ``torch.save`` with
    :data:`_checkpoint_pickle`, whose pickler writes AITune's objects wherever ours are; the load runs
    ``torch.load`` as AITune does, with an unpickler that gives AITune's classes for their names, and converts
    what it built into ours.
    """
    save_task = getattr(storage_tasks, "TorchSaveTask", None)
    file_name = getattr(storage_tasks, "STATE_DICT_FILE", None)
    if isinstance(save_task, type) and isinstance(file_name, str):

        def save(self: Any, path: Path, state_dict: dict) -> None:
            import torch

            file_path = Path(path) / file_name
            written = False
            if not _holds_metadata(state_dict):
                try:  # the C pickler, as nothing seen needs AITune's names (keys are bytes by now)
                    torch.save(state_dict, file_path, pickle_module=_probe_pickle)
                    written = True
                except _NeedsReferenceNames:  # metadata inside some object: write it again, naming AITune's classes
                    pass
            if not written:
                torch.save(state_dict, file_path, pickle_module=_checkpoint_pickle)
            _logger.info("State dict saved to %s (%d bytes, AITune's metadata layout)", file_path, _size(file_path))

        _replace("TorchSaveTask.save", save_task, "save", save)

    original_load = vars(storage_tasks).get("torch_load_with_custom_types")

    def load(path: Path) -> dict:
        import torch

        if _weights_only_forced():
            # torch then loads weights-only whatever the caller asks, and refuses a pickle module: AITune's own
            # loader, with AITune's classes also allowed under their names (which now name ours)
            reference = [_state.reference[n] for n in _CONVERTED if n in _state.reference]
            with torch.serialization.safe_globals(reference):
                state = original_load(path)
        else:
            # AITune reads checkpoints with weights_only=False (backends store their own objects); so does this,
            # with the same unpickler apart from find_class
            state = torch.load(path, weights_only=False, pickle_module=_checkpoint_pickle)
        return _ours_in(state, _reference_types(), {}, set())

    _replace("torch_load_with_custom_types", storage_tasks, "torch_load_with_custom_types", load)


def _holds_metadata(state: Any) -> bool:
    """Whether plain containers (dicts, lists, tuples) in `state` hold our or AITune's metadata, locators, specs."""
    kinds = {id(t) for t in _OUR_TYPES} | _reference_types()
    stack, seen = [state], set()
    while stack:
        value = stack.pop()
        cls = type(value)
        if id(cls) in kinds:
            return True
        if (cls is dict or cls is OrderedDict or cls is list or cls is tuple) and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value.values() if isinstance(value, dict) else value)
    return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def reference_dict(md: Any) -> dict[str, Any]:
    """The dict AITune 0.6.0's ``SampleMetadata.to_dict()`` writes for `md`: pickled AITune objects.

    Needs AITune's classes (known once ``patch_aitune()`` has seen ``aitune.torch.module``). The result loads in
    a stock AITune, and in aitune_fast's ``from_dict`` through the restricted reader.
    """
    if "SampleMetadata" not in _state.reference:
        raise RuntimeError("reference_dict() needs AITune's classes: call patch_aitune() after importing aitune")
    tensors, others, strict, phase = _reference_parts(md)
    return {
        "tensor_data": _dumps(tuple(tensors)),  # stock pickles its tuples, at pickle's default protocol
        "other_data": _dumps(tuple(others)),
        "strict": strict,
        "llm_phase": phase if phase else None,
    }


def _dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    _ReferencePickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    return buffer.getvalue()


def _reference_names() -> dict[int, tuple[Any, str, str]]:
    """id(AITune's class) -> (it, module, qualname): how a stock AITune names it."""
    names = {}
    for obj in _state.reference.values():
        if isinstance(obj, type):
            names[id(obj)] = (obj, obj.__module__, obj.__qualname__)
    return names


def _reference_object(obj: Any) -> Any:
    """AITune's object equal to our metadata, locator, spec or object type `obj`."""
    if isinstance(obj, aitune_fast.SampleMetadata):
        return _reference_of(obj)
    if isinstance(obj, aitune_fast.Locator):
        return _reference_locator(obj)
    if isinstance(obj, aitune_fast.TensorSpec):
        return _spec_as(_state.reference["TensorSpec"], obj)
    return _state.reference["ObjectType"](int(obj))


def _our_object(obj: Any) -> Any:
    """Our object equal to AITune's metadata, locator, spec or object type `obj`."""
    reference = _state.reference
    cls = type(obj)
    if cls is reference.get("Locator"):
        return _our_locator(obj)
    if cls is reference.get("TensorSpec"):
        return _spec_as(aitune_fast.TensorSpec, obj)
    if cls is reference.get("ObjectType"):
        return aitune_fast.ObjectType(int(obj))
    return _ours_of(obj)


class _ReferencePickler(pickle._Pickler):  # type: ignore[name-defined]
    """A pickler that names AITune's classes by their home even while the patch has put ours there, and writes
    AITune's equal object in place of each of our metadata, locators, specs and object types.

    The pure-Python pickler: the C one cannot be told how to name a class.
    """

    def __init__(self, file: Any, protocol: int | None = None, **kwargs: Any) -> None:
        super().__init__(file, protocol, **kwargs)
        self._names = _reference_names()
        # without AITune's ExactSampleMetadata, ours is written as AITune's SampleMetadata (`_reference_of`)
        complete = all(n in _state.reference for n in _CONVERTED if n != "ExactSampleMetadata")
        self._ours = _OUR_TYPES if complete else ()
        self._converted: dict[int, tuple[Any, Any]] = {}  # id(ours) -> (ours, AITune's): shared stays shared

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if type(obj) in self._ours:
            done = self._converted.get(id(obj))
            if done is None:
                done = self._converted[id(obj)] = (obj, _reference_object(obj))
            obj = done[1]
        super().save(obj, save_persistent_id)

    def save_global(self, obj: Any, name: Any = None) -> None:
        entry = self._names.get(id(obj))
        if entry is None or entry[0] is not obj:
            return super().save_global(obj, name)
        _, module, qualname = entry
        if self.proto >= 4:
            self.save(module)
            self.save(qualname)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + module.encode("utf-8") + b"\n" + qualname.encode("utf-8") + b"\n")
        self.memoize(obj)


class _NeedsReferenceNames(Exception):
    """Raised by :class:`_ProbePickler` at the first object only :class:`_ReferencePickler` can write."""


class _ProbePickler(pickle.Pickler):
    """The C pickler, stopped at the first of our metadata, locators, specs or object types, or of AITune's
    classes or their instances (the C pickler cannot name those while the patch is on)."""

    def __init__(self, file: Any, protocol: int | None = None, **kwargs: Any) -> None:
        super().__init__(file, protocol, **kwargs)
        self._refused = {id(t) for t in _OUR_TYPES} | set(_reference_names())

    def reducer_override(self, obj: Any) -> Any:  # the C pickler calls this for objects of non-builtin types only
        if id(type(obj)) in self._refused or id(obj) in self._refused:
            raise _NeedsReferenceNames(type(obj).__name__)
        return NotImplemented


class _ReferenceUnpickler(pickle.Unpickler):
    """The standard unpickler, except that the names the patch swapped give AITune's own objects back."""

    def find_class(self, module: str, name: str) -> Any:
        original = _state.swapped_names.get((module, name))
        if original is not None:
            return original
        return super().find_class(module, name)


def _ours_in(value: Any, kinds: set[int], memo: dict[int, tuple[Any, Any]], seen: set[int]) -> Any:
    """`value` with AITune's metadata, locators, specs and object types in plain containers replaced by ours.

    Dicts (and ``OrderedDict``) and lists change in place, tuples are rebuilt when something in them changed;
    other objects are left alone (as AITune's checkpoint code treats collection subclasses).
    """
    cls = type(value)
    if cls is dict or cls is OrderedDict or cls is list:
        if id(value) in seen:
            return value
        seen.add(id(value))
        items = value.items() if cls is not list else enumerate(value)
        for key, item in list(items):
            new = _ours_in(item, kinds, memo, seen)
            if new is not item:
                value[key] = new
        return value
    if cls is tuple:
        new_items = tuple(_ours_in(item, kinds, memo, seen) for item in value)
        return new_items if any(a is not b for a, b in zip(new_items, value, strict=True)) else value
    if id(cls) in kinds:
        done = memo.get(id(value))
        if done is None:
            done = memo[id(value)] = (value, _our_object(value))
        return done[1]
    return value


def _reference_types() -> set[int]:
    """ids of AITune's classes that :func:`_ours_in` converts (held in ``_state.reference``, so ids stay valid)."""
    reference = _state.reference
    return {id(reference[name]) for name in _CONVERTED if name in reference}


# what torch.save/torch.load get as `pickle_module` for AITune's checkpoint file under the patch
_checkpoint_pickle = types.ModuleType("aitune_fast.patch._checkpoint_pickle")
_checkpoint_pickle.Pickler = _ReferencePickler  # type: ignore[attr-defined]
_checkpoint_pickle.Unpickler = _ReferenceUnpickler  # type: ignore[attr-defined]
_checkpoint_pickle.load = pickle.load  # type: ignore[attr-defined]  # torch's legacy format only
_checkpoint_pickle.dump = pickle.dump  # type: ignore[attr-defined]
_probe_pickle = types.ModuleType("aitune_fast.patch._probe_pickle")
_probe_pickle.Pickler = _ProbePickler  # type: ignore[attr-defined]
_probe_pickle.dump = pickle.dump  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- autowrapt


def _autowrapt_hook(_module: Any = None) -> None:
    """Entry point for ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: called once ``aitune.torch`` is imported. An AITune
    the patch was not made for stays unpatched, with a warning (the import itself must not fail)."""
    try:
        patch_aitune()
    except RuntimeError as exc:
        import warnings

        warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
