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
* makes ``TunedModule.to_dict()`` (what ``aitune.torch.save`` writes) store metadata in the reference's pickled
  layout, so a stock AITune without aitune_fast loads the checkpoint. Loading reads both layouts; the
  reference's pickled bytes go through aitune_fast's restricted reader (``_legacy``), which runs nothing.

``AUTOWRAPT_BOOTSTRAP=aitune_fast`` patches AITune as soon as ``aitune.torch`` is imported (an entry point in
the ``aitune_fast`` group, the convention AITune's own ``aitune_enable_jit_tuning`` uses).
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import io
import pickle
import sys
import threading
from typing import Any

import aitune_fast
from aitune_fast import _config

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


class _State:
    """Everything ``unpatch_aitune()`` needs to restore stock AITune exactly."""

    def __init__(self) -> None:
        self.active = False
        self.lock = threading.RLock()
        self.reference: dict[str, Any] = {}  # name -> AITune's object
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(AITune's object) -> (it, ours)
        self.swapped: list[tuple[Any, str, Any]] = []  # (module, attribute, AITune's object)
        self.seen: dict[str, Any] = {}  # module name -> the module object already swapped
        self.finder: _Finder | None = None
        self.registry_at_patch: tuple[dict[type, bool], set[type]] | None = None
        self.to_dict_wrapped: tuple[type, Any] | None = None


_state = _State()


def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect."""
    return _state.active


def patch_aitune() -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast.

    Idempotent. Raises ImportError when ``aitune`` is not installed.
    """
    with _state.lock:
        if _state.active:
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
    finder = _state.finder
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for module, attribute, original in reversed(_state.swapped):
        setattr(module, attribute, original)
    if _state.to_dict_wrapped is not None:
        cls, original = _state.to_dict_wrapped
        cls.to_dict = original
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
    if name == _GLOBAL_CONTEXT_MODULE and hasattr(module, "global_context"):
        _gc_module._source[0] = module.global_context
    elif name == _CONFIG_MODULE and hasattr(module, "config"):
        _config._source[0] = module.config
    elif name == _TUNED_MODULE and hasattr(module, "TunedModule"):
        _wrap_to_dict(module.TunedModule)


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


def _reference_parts(md: Any) -> tuple[list, list, bool, Any]:
    """AITune objects equal to our `md`'s content: (tensor_data, other_data, strict, llm_phase)."""
    reference = _state.reference
    locator, kind, spec_cls = reference["Locator"], reference["ObjectType"], reference["TensorSpec"]
    # __reduce__ gives fresh (Locator, TensorSpec) pairs without building md's Python view
    tensors, others, strict, phase = md.__reduce__()[1]

    def ref_locator(loc: Any) -> Any:
        steps, is_output = loc.__reduce__()[1]
        return locator(tuple((accessor, kind(int(step_kind))) for accessor, step_kind in steps), bool(is_output))

    def ref_spec(spec: Any) -> Any:
        return spec_cls(
            list(spec.shape), list(spec.min_shape), list(spec.max_shape), spec.dtype, list(spec._bs_multipliers)
        )

    ref_tensors = [(ref_locator(loc), ref_spec(spec)) for loc, spec in tensors]
    ref_others = [(ref_locator(loc), value) for loc, value in others]
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


def _wrap_to_dict(tuned_module: type) -> None:
    """``TunedModule.to_dict`` stores each metadata in the reference's layout (stock AITune reads it)."""
    original = tuned_module.__dict__.get("to_dict")
    if original is None or _state.to_dict_wrapped is not None:
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

    to_dict.__doc__ = original.__doc__
    to_dict.__wrapped__ = original  # type: ignore[attr-defined]
    tuned_module.to_dict = to_dict
    _state.to_dict_wrapped = (tuned_module, original)


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
    names = {}
    for attribute in ("Locator", "ObjectType", "TensorSpec"):
        obj = _state.reference[attribute]
        names[id(obj)] = (obj, obj.__module__, obj.__qualname__)
    buffer = io.BytesIO()
    _ReferencePickler(buffer, names).dump(value)
    return buffer.getvalue()


class _ReferencePickler(pickle._Pickler):  # type: ignore[name-defined]
    """A pickler that names AITune's classes by their home even while the patch has put ours there."""

    def __init__(self, file: Any, names: dict[int, tuple[Any, str, str]]) -> None:
        super().__init__(file, protocol=4)
        self._names = names

    def save_global(self, obj: Any, name: Any = None) -> None:
        entry = self._names.get(id(obj))
        if entry is None or entry[0] is not obj:
            return super().save_global(obj, name)
        _, module, qualname = entry
        self.save(module)
        self.save(qualname)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)


# ---------------------------------------------------------------------------------------------- autowrapt


def _autowrapt_hook(_module: Any = None) -> None:
    """Entry point for ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: called once ``aitune.torch`` is imported."""
    patch_aitune()
