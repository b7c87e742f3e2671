"""Objects of one world made from the other's: aitune_fast's metadata, locators and specs from AITune's and back,
and the conversion of every metadata AITune's live objects hold, at each switch."""

from __future__ import annotations

import gc
from typing import Any

from aitune_fast._core import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec
from aitune_fast._enums import ObjectType
from aitune_fast.patch import _names
from aitune_fast.patch._aitune import OUR_TYPES
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._objects import live_instances, plan_conversion
from aitune_fast.patch._state import state


def ours_of(md: Any) -> Any:
    """aitune_fast metadata equal to AITune's `md`."""
    reference = state().reference
    ours: Any = ExactSampleMetadata if type(md) is reference.get("ExactSampleMetadata") else SampleMetadata
    tensors = [(_our_locator(loc), _spec_as(TensorSpec, spec)) for loc, spec in md._tensor_data]
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
    steps = tuple((accessor, ObjectType(int(kind))) for accessor, kind in loc._access_path)
    return Locator(steps, bool(loc._is_output))


def _spec_as(cls: Any, spec: Any) -> Any:
    """A `cls` (our ``TensorSpec`` or AITune's) equal to `spec` (of the other world's class)."""
    return cls(list(spec.shape), list(spec.min_shape), list(spec.max_shape), spec.dtype, list(spec._bs_multipliers))


def _reference_locator(loc: Any, steps_made: dict[tuple, tuple] | None = None) -> Any:
    """AITune's ``Locator`` equal to our `loc`. With `steps_made` (path so far -> its last step), locators of one
    metadata share the step tuple of each node their paths pass through, as AITune's walk makes them (a child's
    path is its parent's plus one step): pickled together, they come out byte for byte as AITune's."""
    kind = state().reference["ObjectType"]
    steps, is_output = loc.__reduce__()[1]
    path: tuple = ()
    for accessor, step_kind in steps:
        step = (accessor, kind(int(step_kind)))
        if steps_made is not None:
            step = steps_made.setdefault((*path, step), step)
        path = (*path, step)
    return state().reference["Locator"](path, bool(is_output))


def reference_parts(md: Any) -> tuple[list, list, bool, Any]:
    """AITune objects equal to our `md`'s content: (tensor_data, other_data, strict, llm_phase)."""
    # __reduce__ gives fresh (Locator, TensorSpec) pairs without building md's Python view
    tensors, others, strict, phase = md.__reduce__()[1]
    spec_cls = state().reference["TensorSpec"]
    steps_made: dict[tuple, tuple] = {}
    ref_tensors = [(_reference_locator(loc, steps_made), _spec_as(spec_cls, spec)) for loc, spec in tensors]
    ref_others = [(_reference_locator(loc, steps_made), value) for loc, value in others]
    return ref_tensors, ref_others, bool(strict), phase


def reference_of(md: Any) -> Any:
    """AITune metadata equal to our `md` (at unpatch time, when AITune's names are back)."""
    reference = state().reference
    cls = reference.get("ExactSampleMetadata") if isinstance(md, ExactSampleMetadata) else None
    cls = cls or reference["SampleMetadata"]
    tensors, others, strict, phase = reference_parts(md)
    return cls(tuple(tensors), tuple(others), strict, phase)


def reference_object(obj: Any) -> Any:
    """AITune's object equal to our metadata, locator, spec or object type `obj`."""
    if isinstance(obj, SampleMetadata):
        return reference_of(obj)
    if isinstance(obj, Locator):
        return _reference_locator(obj)
    if isinstance(obj, TensorSpec):
        return _spec_as(state().reference["TensorSpec"], obj)
    return state().reference["ObjectType"](int(obj))


def our_object(obj: Any) -> Any:
    """Our object equal to AITune's metadata, locator, spec or object type `obj`."""
    reference = state().reference
    cls = type(obj)
    if cls is reference.get("Locator"):
        return _our_locator(obj)
    if cls is reference.get("TensorSpec"):
        return _spec_as(TensorSpec, obj)
    if cls is reference.get("ObjectType"):
        return ObjectType(int(obj))
    return ours_of(obj)


def convert_live_objects(to_ours: bool) -> None:
    """Give every metadata that AITune's live objects hold the other world's class (to_ours: aitune_fast's).

    Looks into every object of a class defined in ``aitune`` or derived from one (tuned, recording and wrapper
    modules, graph specs, sample stores, kernel profilers, ..., and users' subclasses of them) and the dicts, lists
    and tuples it holds (``_objects.plan_conversion``): a metadata held as a value is replaced; a dict keyed by
    metadata gets its items back in their order with the keys converted, in one step (no dict ever holds keys of
    both classes). Every change is planned first (a failure there changes nothing), then made through the journal.
    """
    for edit in conversion_plan(to_ours):
        JOURNAL.apply(edit)


def conversion_plan(to_ours: bool) -> list[Any]:
    """The journal edits that :func:`convert_live_objects` makes, innermost containers first."""
    reference = state().reference
    if "SampleMetadata" not in reference:
        return []  # AITune's metadata never loaded: no live objects to convert
    source = reference["SampleMetadata"] if to_ours else SampleMetadata
    # not looked into: the metadata, locators and specs the scan converts
    skip = tuple(reference[n] for n in _names.CONVERTED if n in reference and n != "ObjectType") + OUR_TYPES
    convert = ours_of if to_ours else reference_of

    def aitunes(cls: type) -> bool:  # a class of AITune's, or a user's subclass of one (`class M(ait.Module)`)
        try:  # not through a metaclass of the user's
            bases = type.__getattribute__(cls, "__mro__")
            modules = [type.__getattribute__(base, "__module__") for base in bases]
        except AttributeError:
            return False
        return any(isinstance(m, str) and _names.is_aitune(m) for m in modules) and not issubclass(cls, skip)

    attributes = [found for obj in live_instances(aitunes) for found in _instance_dicts(obj)]
    return plan_conversion(attributes, lambda value: isinstance(value, source), convert)[1]


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
