"""Reference cycles through objects a metadata, Locator or TensorSpec holds are freed by ``gc.collect()``.

Each case builds a cycle that runs through one kind of held object (a dict key in a path, an other value, a
handed-out ``TensorSpec``, the cached ``tensor_data``/``other_data`` pairs, the pairs a metadata was built from),
drops every outside reference and checks with a weak reference that the collector freed it.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from aitune_fast import ExactSampleMetadata, Locator, ObjectType, SampleMetadata, TensorSpec, _core


class Key:
    """A hashable dict key (or leaf) that can point back at what was built from it."""

    back = None


def key_in_path():
    k = Key()
    k.back = SampleMetadata.from_inputs({"d": {k: torch.zeros(2)}})
    return k


def key_in_exact_path():
    k = Key()
    k.back = ExactSampleMetadata.from_inputs({"d": {k: torch.zeros(2)}})
    return k


def key_in_path_after_tensor_data():
    k = Key()
    md = SampleMetadata.from_inputs({"d": {k: torch.zeros(2)}, "o": {k: 1}}, strict=True)
    assert len(md.tensor_data) == 1 and len(md.other_data) == 1  # handed-out pairs share the path arena
    k.back = md
    return k


def key_in_path_with_its_locators():
    k = Key()
    md = SampleMetadata.from_inputs({"d": {k: torch.zeros(2)}, "o": {k: 1}}, strict=True)
    k.back = (md, md.tensor_data[0][0], md.other_data[0][0])  # the metadata and two locators share one arena
    return k


def key_in_found_leaves():
    k = Key()
    k.back = Locator.find_leaves({"d": {k: torch.zeros(2), "e": torch.ones(1)}})  # two locators, one arena
    return k


def key_in_outputs_path():
    k = Key()
    k.back = SampleMetadata.from_outputs({k: torch.zeros(2)})
    return k


def key_in_a_locator():
    k = Key()
    k.back = Locator(((k, ObjectType.DICT),))
    return k


def key_in_json_decoded_path():
    k = Key()
    md = SampleMetadata.from_json(SampleMetadata.from_inputs({"d": {(1, 2): torch.zeros(2)}}).to_json())
    k.back = md
    md.tensor_data[0][1].shape.append(k)  # a handed-out spec's list holds the key
    return k


def other_value():
    k = Key()
    k.back = SampleMetadata.from_inputs({"v": k, "t": torch.zeros(2)}, strict=True)
    return k


def handed_spec():
    k = Key()
    md = SampleMetadata.from_inputs({"t": torch.zeros(2)})
    md.tensor_data[0][1].dtype = k
    k.back = md
    return k


def python_pairs():
    k = Key()
    spec = TensorSpec([2], [2], [2], torch.float32, [1.0])
    md = SampleMetadata([(Locator((("t", ObjectType.DICT),)), spec)], [(Locator((("o", ObjectType.DICT),)), k)])
    k.back = md
    return k


def class_in_a_guard():
    k = Key()
    cls = type("Guarded", (), {"f": lambda self: None, "held": k})
    k.back = _core._ClassGuard(cls, ("f", "held"))  # the guard holds the class and what it held
    return k


def namespace_in_a_guard():
    k = Key()
    namespace = {"k": k}
    k.back = _core._NameGuard(namespace, ("k",))
    return k


def shim_in_a_call_path():
    k = Key()  # a call path's part holds the Python steps it calls, and the path its parts
    guard = _core._ClassGuard(Key, ("back",))
    part = _core._ForwardPart(init_state=k, nn_setattr=k, stock_swap=k, guard=guard)
    k.back = _core._CallPath(forward=part)
    return k


CASES = [
    class_in_a_guard,
    namespace_in_a_guard,
    shim_in_a_call_path,
    key_in_path,
    key_in_exact_path,
    key_in_path_after_tensor_data,
    key_in_path_with_its_locators,
    key_in_found_leaves,
    key_in_outputs_path,
    key_in_a_locator,
    key_in_json_decoded_path,
    other_value,
    handed_spec,
    python_pairs,
]


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_a_cycle_through_a_held_object_is_freed_by_the_collector(make):
    gc.collect()
    refs = [weakref.ref(make()) for _ in range(100)]
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of 100 cycles survived gc.collect()"


def test_a_locator_kept_by_the_user_keeps_the_keys_of_its_path_alive():
    """A Locator the user keeps holds the keys of its path: they stay alive (and reachable) until it goes."""
    k = Key()
    md = SampleMetadata.from_inputs({"d": {k: torch.zeros(2)}})
    loc = md.tensor_data[0][0]
    k.back = md
    ref = weakref.ref(k)
    del k, md
    gc.collect()
    assert ref() is not None and ref().back is not None
    assert loc.path[-1] is ref()
    del loc
    gc.collect()
    assert ref() is None
