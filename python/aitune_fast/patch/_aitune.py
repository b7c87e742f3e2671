"""What the patch learns of AITune as its modules load, each thing once: AITune's own metadata classes (before their
names are swapped), its global context and config (which the core and the call path then read), and its
``Locator``'s type registrations (carried over to aitune_fast's registry and back)."""

from __future__ import annotations

import sys
import types
from typing import Any

from aitune_fast import _config
from aitune_fast._core import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec, _type_registry
from aitune_fast._enums import InfoLevel, ObjectType
from aitune_fast._helpers import batch_tensor
from aitune_fast.patch import _names
from aitune_fast.patch._journal import JOURNAL, Step
from aitune_fast.patch._registry import REGISTRY, Layer
from aitune_fast.patch._state import LearntContext, Registry, state

# the module, not the `global_context` object the package exports under the same name
_gc_module = sys.modules["aitune_fast.global_context"]

# aitune_fast's object for each name the patch swaps (`_names.DEFINITIONS`)
OURS: dict[str, Any] = {
    "Locator": Locator,
    "ObjectType": ObjectType,
    "TensorSpec": TensorSpec,
    "InfoLevel": InfoLevel,
    "SampleMetadata": SampleMetadata,
    "batch_tensor": batch_tensor,
    "ExactSampleMetadata": ExactSampleMetadata,
}
OUR_TYPES: tuple[type, ...] = tuple(OURS[name] for name in _names.CONVERTED)


def learn_definitions(module: Any) -> None:
    """Record AITune's objects defined in `module` (before they are swapped)."""
    now = state()
    for attribute in _names.DEFINITIONS[module.__name__]:
        value = module.__dict__.get(attribute)
        ours = OURS[attribute]
        if value is None or value is ours or attribute in now.reference:
            continue
        now.reference[attribute] = value
        now.by_id[id(value)] = (value, ours)
        if attribute == "Locator":
            registry_over(value)
    keep_stock_equality(module)


def keep_stock_equality(module: Any) -> None:
    """AITune's own classes keep stock's equality while patched.

    Their ``__eq__`` checks ``isinstance(other, Locator)`` (or ``TensorSpec``) through the module's name, which the
    patch points at aitune_fast's class: two equal AITune locators made before the patch would compare unequal, and
    a dict keyed by one would not find the other. The equality methods that name a swapped class run, while patched,
    with globals of their own that give AITune's objects under those names.
    """
    now = state()
    theirs = {id(ours): ref for ref, ours in now.by_id.values()}
    namespace = {name: theirs.get(id(value), value) for name, value in vars(module).items()}
    swapped = set(OURS)
    for attribute in _names.DEFINITIONS[module.__name__]:
        cls = now.reference.get(attribute)
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        for name in _names.EQUALITY_METHODS:
            function = vars(cls).get(name)
            if isinstance(function, types.FunctionType) and swapped & set(function.__code__.co_names):
                own = types.FunctionType(
                    function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
                )
                own.__kwdefaults__ = function.__kwdefaults__
                own.__qualname__ = function.__qualname__
                REGISTRY.replace_function(Layer.METADATA_CODE, cls, name, own)


def learn_global_context(module: Any) -> None:
    """``aitune.global_context`` loaded: the core reads AITune's context from now on, the call path learns it."""
    if not hasattr(module, "global_context"):
        return
    REGISTRY.replace_item(Layer.CONTEXT, _gc_module._source, 0, module.global_context)
    state().context = LearntContext(  # dropped with the state it belongs to, at unpatch or a rolled-back patch
        module.global_context,
        getattr(module, "GlobalContext", None),
        getattr(module, "MODULE_CONTEXT_KEY", ""),
        getattr(module, "BACKEND_CONTEXT_KEY", ""),
    )


def learn_config(module: Any) -> None:
    """``aitune.torch.config`` loaded: the core reads AITune's config (``enable_transformers_integration``)."""
    if hasattr(module, "config"):
        REGISTRY.replace_item(Layer.CONTEXT, _config._source, 0, module.config)


# ---------------------------------------------------------------------------------------------- Locator registry


def _registry_snapshot() -> Registry:
    user_types, ignored = _type_registry()
    return Registry(dict(user_types), set(ignored))


def _reference_snapshot(reference_locator: Any) -> Registry:
    user_types = dict(getattr(reference_locator, "_user_types", {}))
    ignored = set(getattr(reference_locator, "_ignored_types", ()))
    return Registry({cls: bool(only) for cls, only in user_types.items()}, ignored)


def _set_registry(locator: Any, now: Registry, target: Registry) -> None:
    """Make `locator`'s registry, which holds `now`, hold `target`, through its own methods."""
    for cls in now.user_types.keys() - target.user_types.keys():
        locator.unregister_user_type(cls)
    for cls, only_tensors in target.user_types.items():
        if now.user_types.get(cls) != only_tensors:
            locator.register_user_type(cls, only_tensors=only_tensors)
    for cls in now.ignored - target.ignored:
        locator.unignore_type(cls)
    for cls in target.ignored - now.ignored:
        locator.ignore_type(cls)


def _with_changes(base: Registry, before: Registry, after: Registry) -> Registry:
    """`base` with the changes that took `before` to `after` made to it."""
    user = {
        cls: only for cls, only in base.user_types.items() if cls not in before.user_types or cls in after.user_types
    }
    user.update((cls, only) for cls, only in after.user_types.items() if before.user_types.get(cls) != only)
    return Registry(user, (base.ignored - (before.ignored - after.ignored)) | (after.ignored - before.ignored))


def registry_over(reference_locator: Any) -> None:
    """Copy the registrations of AITune's ``Locator`` into ours (at patch time; journaled: a rolled-back patch, and
    the unpatch, leave ours as it was)."""
    now = state()
    ours = _registry_snapshot()
    merged = _with_changes(ours, Registry({}, set()), _reference_snapshot(reference_locator))

    def over() -> None:
        _set_registry(Locator, _registry_snapshot(), merged)
        now.registry_before_patch, now.registry_at_patch = ours, _registry_snapshot()

    JOURNAL.apply(Step(over, lambda: _set_registry(Locator, _registry_snapshot(), ours)))


def registry_redirect(module: Any) -> None:
    """While patched, AITune's ``Locator`` (a name bound before the patch) registers and walks with aitune_fast's
    registry: its methods read ``Locator._user_types`` through the module name the patch swapped."""
    reference_locator = state().reference.get("Locator")
    if reference_locator is None:
        return
    for name in _names.LOCATOR_REGISTRY_METHODS:
        if name in vars(reference_locator):
            REGISTRY.replace_function(
                Layer.METADATA_CODE, reference_locator, name, staticmethod(getattr(Locator, name))
            )


def registry_back() -> None:
    """At unpatch time (journaled), the registrations changed while patched made to AITune's ``Locator`` and to ours
    as they were before the patch (what was copied in at patch time goes again)."""
    now = state()
    reference_locator = now.reference.get("Locator")
    if reference_locator is None or now.registry_at_patch is None or now.registry_before_patch is None:
        return
    at_patch, before_patch = now.registry_at_patch, now.registry_before_patch
    theirs, ours = _reference_snapshot(reference_locator), _registry_snapshot()
    their_target = _with_changes(theirs, at_patch, ours)
    our_target = _with_changes(before_patch, at_patch, ours)

    def back() -> None:
        _set_registry(reference_locator, _reference_snapshot(reference_locator), their_target)
        _set_registry(Locator, _registry_snapshot(), our_target)

    def undo() -> None:
        _set_registry(reference_locator, _reference_snapshot(reference_locator), theirs)
        _set_registry(Locator, _registry_snapshot(), ours)

    JOURNAL.apply(Step(back, undo))
