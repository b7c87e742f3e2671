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
* converts the backend keys (and recorded graph specs) of modules tuned or recorded before the patch, so they
  keep dispatching; ``unpatch_aitune()`` converts them back;
* makes checkpoints written by ``aitune.torch.save`` hold what a stock AITune writes, so a stock AITune without
  aitune_fast loads them: ``TunedModule.to_dict()`` stores each backend key in the reference's pickled layout, and
  the checkpoint file is pickled with AITune's own classes in place of aitune_fast's metadata, locators and specs
  wherever backends put them in their state (the graph specs of the ONNX Runtime and TensorRT backends);
* makes ``aitune.torch.load`` accept both: the checkpoint's AITune classes are rebuilt as AITune's objects and then
  converted to aitune_fast's. The reference's pickled key bytes go through aitune_fast's restricted reader
  (``_legacy``), which runs nothing; the checkpoint file itself is read as AITune reads it (``torch.load`` with
  ``weights_only=False``), with nothing more admitted than AITune admits.

``AUTOWRAPT_BOOTSTRAP=aitune_fast`` patches AITune as soon as ``aitune.torch`` is imported (an entry point in
the ``aitune_fast`` group, the convention AITune's own ``aitune_enable_jit_tuning`` uses).
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import io
import logging
import os
import pickle
import sys
import threading
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aitune_fast
from aitune_fast import _config, _tuned_call

# the module, not the `global_context` object the package exports under the same name
_gc_module = sys.modules["aitune_fast.global_context"]

__all__ = ["is_aitune_patched", "patch_aitune", "unpatch_aitune"]

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
_GLOBAL_CONTEXT_MODULE = "aitune.global_context"
_CONFIG_MODULE = "aitune.torch.config"
_TUNED_MODULE = "aitune.torch.module.tuned_module"
_STORAGE_TASKS = "aitune.torch.checkpoint.storage_tasks"

_logger = logging.getLogger(__name__)


class _State:
    """Everything ``unpatch_aitune()`` needs to restore stock AITune exactly."""

    def __init__(self) -> None:
        self.active = False
        self.lock = threading.RLock()
        self.reference: dict[str, Any] = {}  # name -> AITune's object
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(AITune's object) -> (it, ours)
        self.swapped: list[tuple[Any, str, Any]] = []  # (module, attribute, AITune's object)
        self.swapped_names: dict[tuple[str, str], Any] = {}  # (module name, attribute) -> AITune's object
        self.seen: dict[str, Any] = {}  # module name -> the module object already swapped
        self.finder: _Finder | None = None
        self.registry_at_patch: tuple[dict[type, bool], set[type]] | None = None
        self.replaced: dict[str, tuple[Any, str, Any]] = {}  # what -> (owner, attribute, AITune's function)


_state = _State()


def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect."""
    return _state.active


def patch_aitune(call_path: bool = True) -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast.

    `call_path`: also run a tuned module's per-call path (``Module._forward``, ``TunedModule.__call__``,
    ``Backend.infer``) on aitune_fast's implementation (``_tuned_call``); False keeps AITune's own, with only the
    metadata swapped. Calling it again while patched switches the call path. Idempotent. Raises ImportError when
    ``aitune`` is not installed.
    """
    with _state.lock:
        if _state.active:
            _tuned_call.enable(call_path)  # the call path switch (issue 20)
            return
        if "aitune" not in sys.modules and importlib.util.find_spec("aitune") is None:
            raise ImportError(
                "aitune_fast.patch_aitune() needs AITune installed (`pip install aitune`), the package it patches"
            )
        _state.active = True
        _state.finder = _Finder()
        sys.meta_path.insert(0, _state.finder)
        try:
            for name in sorted(_DEFINITIONS):
                module = sys.modules.get(name)
                if module is not None:
                    _learn_definitions(module)
            for name in sorted(n for n in list(sys.modules) if _is_aitune(n)):
                module = sys.modules.get(name)
                if module is not None:
                    _on_loaded(module)
            _convert_live_objects(to_ours=True)
            _tuned_call.enable(call_path)  # the call path (issue 20): now and as AITune's modules load
        except BaseException:
            _unpatch_locked()
            raise


def unpatch_aitune() -> None:
    """Undo ``patch_aitune()``: AITune's own objects everywhere again, its ``Locator`` registry updated with the
    registrations made while patched, and live tuned modules' backend keys converted back. Idempotent."""
    with _state.lock:
        if _state.active:
            _unpatch_locked()


def _unpatch_locked() -> None:
    _tuned_call.enable(False)  # the call path (issue 20) first: stock classes and live modules' wrappers back
    finder = _state.finder
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for module, attribute, original in reversed(_state.swapped):
        setattr(module, attribute, original)
    for owner, attribute, original in reversed(list(_state.replaced.values())):
        setattr(owner, attribute, original)
    _gc_module._source[0] = _gc_module.global_context
    _config._source[0] = _config.config
    _registry_back()
    try:
        _convert_live_objects(to_ours=False)
    finally:
        _state.__init__()


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
    _state.seen[name] = module
    for attribute, value in list(namespace.items()):
        pair = _state.by_id.get(id(value))
        if pair is not None and pair[0] is value:
            setattr(module, attribute, pair[1])
            _state.swapped.append((module, attribute, value))
            _state.swapped_names[(name, attribute)] = value
    if name == _GLOBAL_CONTEXT_MODULE and hasattr(module, "global_context"):
        _gc_module._source[0] = module.global_context
    elif name == _CONFIG_MODULE and hasattr(module, "config"):
        _config._source[0] = module.config
    elif name == _TUNED_MODULE and hasattr(module, "TunedModule"):
        _wrap_to_dict(module.TunedModule)
    elif name == _STORAGE_TASKS:
        _wrap_checkpoint_files(module)
    _tuned_call.on_loaded(module)  # the call path (issue 20), when enabled


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then swaps names in the new module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        with _state.lock:
            if _state.active:
                _on_loaded(module)

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
    tensors = [(_our_locator(loc), _our_spec(spec)) for loc, spec in md._tensor_data]
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


def _our_spec(spec: Any) -> Any:
    return aitune_fast.TensorSpec(
        list(spec.shape), list(spec.min_shape), list(spec.max_shape), spec.dtype, list(spec._bs_multipliers)
    )


def _reference_locator(loc: Any) -> Any:
    """AITune's ``Locator`` equal to our `loc`."""
    reference = _state.reference
    kind = reference["ObjectType"]
    steps, is_output = loc.__reduce__()[1]
    return reference["Locator"](
        tuple((accessor, kind(int(step_kind))) for accessor, step_kind in steps), bool(is_output)
    )


def _reference_spec(spec: Any) -> Any:
    """AITune's ``TensorSpec`` equal to our `spec`."""
    return _state.reference["TensorSpec"](
        list(spec.shape), list(spec.min_shape), list(spec.max_shape), spec.dtype, list(spec._bs_multipliers)
    )


def _reference_parts(md: Any) -> tuple[list, list, bool, Any]:
    """AITune objects equal to our `md`'s content: (tensor_data, other_data, strict, llm_phase)."""
    # __reduce__ gives fresh (Locator, TensorSpec) pairs without building md's Python view
    tensors, others, strict, phase = md.__reduce__()[1]
    ref_tensors = [(_reference_locator(loc), _reference_spec(spec)) for loc, spec in tensors]
    ref_others = [(_reference_locator(loc), value) for loc, value in others]
    return ref_tensors, ref_others, bool(strict), phase


def _reference_of(md: Any) -> Any:
    """AITune metadata equal to our `md` (at unpatch time, when AITune's names are back)."""
    reference = _state.reference
    cls = reference.get("ExactSampleMetadata") if isinstance(md, aitune_fast.ExactSampleMetadata) else None
    cls = cls or reference["SampleMetadata"]
    tensors, others, strict, phase = _reference_parts(md)
    return cls(tuple(tensors), tuple(others), strict, phase)


def _convert_live_objects(to_ours: bool) -> None:
    """Re-key the backends and recorded specs of live tuned/recording modules and graph specs."""
    reference = _state.reference
    if "SampleMetadata" not in reference:
        return  # AITune's metadata never loaded: no live objects to convert
    targets = []
    for name, attribute in (
        ("aitune.torch.module.tuned_module", "TunedModule"),
        ("aitune.torch.module.recording_module", "RecordingModule"),
        ("aitune.torch.module.graph_spec", "GraphSpec"),
    ):
        cls = getattr(sys.modules.get(name), attribute, None)
        if isinstance(cls, type):
            targets.append(cls)
    if not targets:
        return
    source = reference["SampleMetadata"] if to_ours else aitune_fast.SampleMetadata
    convert = _ours_of if to_ours else _reference_of
    memo: dict[int, Any] = {}

    def conv(md: Any) -> Any:
        if not isinstance(md, source):
            return md
        done = memo.get(id(md))
        if done is None:
            done = memo[id(md)] = (md, convert(md))
        return done[1]

    def rekey(mapping: Any) -> None:
        if not isinstance(mapping, dict) or not any(isinstance(k, source) for k in mapping):
            return
        items = list(mapping.items())
        mapping.clear()
        for key, value in items:
            mapping[conv(key)] = value

    targets_tuple = tuple(targets)
    for obj in gc.get_objects():
        if not issubclass(type(obj), targets_tuple):
            continue
        state = getattr(obj, "__dict__", None)
        if state is None:
            continue
        for attribute in ("_backends", "_samples", "_graph_specs"):
            rekey(state.get(attribute))
        for attribute in ("input_spec", "output_spec", "post_input_spec"):
            value = state.get(attribute)
            if value is not None:
                state[attribute] = conv(value)


# ---------------------------------------------------------------------------------------------- checkpoints


def _replace(key: str, owner: Any, attribute: str, replacement: Any) -> None:
    """Put `replacement` at `owner.attribute` until unpatch (which puts AITune's function back)."""
    original = vars(owner).get(attribute)
    if original is None or key in _state.replaced:
        return
    replacement.__doc__ = getattr(original, "__doc__", None)
    replacement.__wrapped__ = original
    setattr(owner, attribute, replacement)
    _state.replaced[key] = (owner, attribute, original)


def _wrap_to_dict(tuned_module: type) -> None:
    """``TunedModule.to_dict`` stores each backend key in the reference's layout (stock AITune reads it)."""
    original = vars(tuned_module).get("to_dict")
    if original is None:
        return
    key = getattr(tuned_module, "BACKENDS_KEY", "backends")

    def to_dict(self: Any) -> Any:
        state = original(self)
        backends = getattr(self, "_backends", None)
        entries = state.get(key) if isinstance(state, dict) else None
        if isinstance(backends, dict) and isinstance(entries, list) and len(entries) == len(backends):
            state[key] = [
                (reference_dict(md) if isinstance(md, aitune_fast.SampleMetadata) else md_dict, backend_dict)
                for md, (md_dict, backend_dict) in zip(backends, entries, strict=True)
            ]
        return state

    _replace("TunedModule.to_dict", tuned_module, "to_dict", to_dict)


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

        if os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in ("1", "y", "yes", "true"):
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
        "tensor_data": _dumps(tensors),
        "other_data": _dumps(others),
        "strict": strict,
        "llm_phase": phase if phase else None,
    }


def _dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    _ReferencePickler(buffer, protocol=4).dump(value)
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
        return _reference_spec(obj)
    return _state.reference["ObjectType"](int(obj))


def _our_object(obj: Any) -> Any:
    """Our object equal to AITune's metadata, locator, spec or object type `obj`."""
    reference = _state.reference
    cls = type(obj)
    if cls is reference.get("Locator"):
        return _our_locator(obj)
    if cls is reference.get("TensorSpec"):
        return _our_spec(obj)
    if cls is reference.get("ObjectType"):
        return aitune_fast.ObjectType(int(obj))
    return _ours_of(obj)


_OUR_TYPES = (
    aitune_fast.SampleMetadata,
    aitune_fast.ExactSampleMetadata,
    aitune_fast.Locator,
    aitune_fast.TensorSpec,
    aitune_fast.ObjectType,
)


class _ReferencePickler(pickle._Pickler):  # type: ignore[name-defined]
    """A pickler that names AITune's classes by their home even while the patch has put ours there, and writes
    AITune's equal object in place of each of our metadata, locators, specs and object types.

    The pure-Python pickler: the C one cannot be told how to name a class.
    """

    def __init__(self, file: Any, protocol: int | None = None, **kwargs: Any) -> None:
        super().__init__(file, protocol, **kwargs)
        self._names = _reference_names()
        complete = all(n in _state.reference for n in ("SampleMetadata", "Locator", "ObjectType", "TensorSpec"))
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


_CONVERTED = ("SampleMetadata", "ExactSampleMetadata", "Locator", "TensorSpec", "ObjectType")


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
    """Entry point for ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: called once ``aitune.torch`` is imported."""
    patch_aitune()
