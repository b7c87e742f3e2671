"""Checkpoints a stock AITune reads, and AITune's checkpoints read under the patch.

* ``TunedModule.to_dict()`` stores each backend key in the reference's pickled layout (:func:`reference_dict`), and
  ``TunedModule.from_dict()`` reads keys in that layout with the trust AITune gives them;
* the checkpoint file is pickled with AITune's own classes in place of aitune_fast's metadata, locators and specs
  wherever backends put them in their state (:class:`_ReferencePickler`), and read back into ours.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

from aitune_fast._core import Locator as _Locator
from aitune_fast._core import SampleMetadata
from aitune_fast._enums import ObjectType
from aitune_fast.patch import _names
from aitune_fast.patch._aitune import OUR_TYPES
from aitune_fast.patch._convert import our_object, ours_of, reference_object, reference_parts
from aitune_fast.patch._objects import plan_conversion
from aitune_fast.patch._quiescence import attr
from aitune_fast.patch._registry import REGISTRY, Layer
from aitune_fast.patch._state import state

_logger = logging.getLogger("aitune_fast.patch")


def wrap_to_dict(module: Any) -> None:
    """``TunedModule.to_dict`` stores each backend key in the reference's layout (stock AITune reads it), and
    ``TunedModule.from_dict`` reads keys in that layout as AITune does (:func:`_wrap_from_dict`)."""
    tuned_module = getattr(module, "TunedModule", None)
    if tuned_module is None:
        return
    original = attr(tuned_module, "to_dict")
    if original is not None:

        def to_dict(self: Any) -> Any:
            backends = getattr(self, "_backends", None)
            if not isinstance(backends, dict) or not any(isinstance(md, SampleMetadata) for md in backends):
                return original(self)
            # AITune's to_dict on a view whose keys write AITune's layout: it never calls our to_dict(), which
            # refuses values that only pickle can hold (enums, devices, paths, ...)
            keys = OrderedDict(
                (_ReferenceKey(md) if isinstance(md, SampleMetadata) else md, backend)
                for md, backend in backends.items()
            )
            return original(_BackendsView(self, keys))

        REGISTRY.replace_function(Layer.CALLERS, tuned_module, "to_dict", to_dict)
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
    original = attr(tuned_module, "from_dict")
    if not isinstance(original, staticmethod):
        return
    function = original.__func__
    key = getattr(tuned_module, "BACKENDS_KEY", "backends")

    def from_dict(module: Any, state_dict: dict) -> Any:
        entries: Any = state_dict.get(key) if isinstance(state_dict, dict) else None
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

    REGISTRY.replace_function(Layer.CALLERS, tuned_module, "from_dict", staticmethod(from_dict))


def _stand_in_key(index: int) -> Any:
    locator = _Locator((("aitune_fast.patch stand-in key", ObjectType.DICT),))
    return SampleMetadata([], [(locator, index)], True)


def _trusted_key(key: Any) -> Any:
    """Our metadata for a key dict in AITune's layout that aitune_fast's restricted reader refuses, unpickled as
    AITune unpickles it; None when the restricted reader reads it (or when loads are forced weights-only)."""
    if not isinstance(key, dict) or not isinstance(key.get("other_data"), bytes) or _weights_only_forced():
        return None
    try:
        SampleMetadata.from_dict(key)
        return None
    except (TypeError, ValueError):
        pass
    cls = state().reference["SampleMetadata"]
    tensors = _ReferenceUnpickler(io.BytesIO(key["tensor_data"])).load()
    others = _ReferenceUnpickler(io.BytesIO(key["other_data"])).load()
    return ours_of(cls(tensors, others, key["strict"], key.get("llm_phase")))


def _weights_only_forced() -> bool:
    return os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in ("1", "y", "yes", "true")


def wrap_checkpoint_files(storage_tasks: Any) -> None:
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

        REGISTRY.replace_function(Layer.CALLERS, save_task, "save", save)

    original_load = vars(storage_tasks).get("torch_load_with_custom_types")

    def load(path: Path) -> dict:
        import torch

        if _weights_only_forced():
            # torch then loads weights-only whatever the caller asks, and refuses a pickle module: AITune's own
            # loader, with AITune's classes also allowed under their names (which now name ours)
            reference = [state().reference[n] for n in _names.CONVERTED if n in state().reference]
            with torch.serialization.safe_globals(reference):
                loaded = original_load(path)
        else:
            # AITune reads checkpoints with weights_only=False (backends store their own objects); so does this,
            # with the same unpickler apart from find_class
            loaded = torch.load(path, weights_only=False, pickle_module=_checkpoint_pickle)
        return _ours_in(loaded)

    REGISTRY.replace_function(Layer.CALLERS, storage_tasks, "torch_load_with_custom_types", load)


def _ours_in(loaded: Any) -> Any:
    """`loaded` with AITune's metadata, locators, specs and object types in its plain containers replaced by ours
    (dicts and lists changed in place, tuples rebuilt)."""
    kinds = _reference_types()
    [converted], edits = plan_conversion([loaded], lambda value: id(type(value)) in kinds, our_object)
    for edit in edits:
        edit.do()
    return converted


def _holds_metadata(value: Any) -> bool:
    """Whether the plain containers in `value` hold our or AITune's metadata, locators, specs."""
    kinds = {id(t) for t in OUR_TYPES} | _reference_types()
    found: list[Any] = []
    plan_conversion([value], lambda item: id(type(item)) in kinds, found.append)
    return bool(found)


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
    if "SampleMetadata" not in state().reference:
        raise RuntimeError("reference_dict() needs AITune's classes: call patch_aitune() after importing aitune")
    tensors, others, strict, phase = reference_parts(md)
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
    for obj in state().reference.values():
        if isinstance(obj, type):
            names[id(obj)] = (obj, obj.__module__, obj.__qualname__)
    return names


_PurePickler: Any = pickle._Pickler  # typeshed leaves out the methods the subclass overrides and calls


class _ReferencePickler(_PurePickler):
    """A pickler that names AITune's classes by their home even while the patch has put ours there, and writes
    AITune's equal object in place of each of our metadata, locators, specs and object types.

    The pure-Python pickler: the C one cannot be told how to name a class.
    """

    def __init__(self, file: Any, protocol: int | None = None, **kwargs: Any) -> None:
        super().__init__(file, protocol, **kwargs)
        self._names = _reference_names()
        # without AITune's ExactSampleMetadata, ours is written as AITune's SampleMetadata (`_reference_of`)
        complete = all(n in state().reference for n in _names.CONVERTED if n != "ExactSampleMetadata")
        self._ours = OUR_TYPES if complete else ()
        self._converted: dict[int, tuple[Any, Any]] = {}  # id(ours) -> (ours, AITune's): shared stays shared

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if type(obj) in self._ours:
            done = self._converted.get(id(obj))
            if done is None:
                done = self._converted[id(obj)] = (obj, reference_object(obj))
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
        self._refused = {id(t) for t in OUR_TYPES} | set(_reference_names())

    def reducer_override(self, obj: Any) -> Any:  # the C pickler calls this for objects of non-builtin types only
        if id(type(obj)) in self._refused or id(obj) in self._refused:
            raise _NeedsReferenceNames(type(obj).__name__)
        return NotImplemented


class _ReferenceUnpickler(pickle.Unpickler):
    """The standard unpickler, except that the names the patch swapped give AITune's own objects back."""

    def find_class(self, module: str, name: str) -> Any:
        original = REGISTRY.stock_name(module, name)
        if original is not None:
            return original
        return super().find_class(module, name)


def _reference_types() -> set[int]:
    """ids of AITune's classes that :func:`_ours_in` converts (held in the state's `reference`, so ids stay
    valid)."""
    reference = state().reference
    return {id(reference[name]) for name in _names.CONVERTED if name in reference}


# what torch.save/torch.load get as `pickle_module` for AITune's checkpoint file under the patch
_checkpoint_pickle = types.ModuleType("aitune_fast.patch._checkpoint_pickle")
_checkpoint_pickle.Pickler = _ReferencePickler  # type: ignore[attr-defined]
_checkpoint_pickle.Unpickler = _ReferenceUnpickler  # type: ignore[attr-defined]
_checkpoint_pickle.load = pickle.load  # type: ignore[attr-defined]  # torch's legacy format only
_checkpoint_pickle.dump = pickle.dump  # type: ignore[attr-defined]
_probe_pickle = types.ModuleType("aitune_fast.patch._probe_pickle")
_probe_pickle.Pickler = _ProbePickler  # type: ignore[attr-defined]
_probe_pickle.dump = pickle.dump  # type: ignore[attr-defined]
