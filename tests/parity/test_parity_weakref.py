"""Weak references to the four classes: a `weakref.ref`, a `WeakValueDictionary` cache and `weakref.finalize` work,
and the referent dies when its last strong reference goes. The reference's metadata and locators take them; its
`TensorSpec` is a slotted dataclass that does not, where aitune_fast's does (nothing a user does with it breaks)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch


def objects(impl) -> dict[str, object]:
    SM = impl.sample_metadata.SampleMetadata  # noqa: N806 - the class
    md = SM.from_inputs({"x": torch.ones(2, 3), "k": 1}, strict=True)
    locator, spec = md.tensor_data[0]
    return {
        "SampleMetadata": md,
        "ExactSampleMetadata": impl.exact_sample_metadata.ExactSampleMetadata.from_inputs({"x": torch.ones(1)}),
        "Locator": locator,
        "TensorSpec": spec,
        "blank Locator": impl.locator.Locator.__new__(impl.locator.Locator),  # as unpickling makes one
    }


NAMES = ["SampleMetadata", "ExactSampleMetadata", "Locator", "TensorSpec", "blank Locator"]


@pytest.mark.parametrize("name", NAMES)
def test_weak_references_as_the_reference(ref, fast, name):
    for label, impl in (("reference", ref), ("aitune_fast", fast)):
        obj = objects(impl)[name]
        if label == "reference" and name == "TensorSpec":
            with pytest.raises(TypeError, match="weak reference"):
                weakref.ref(obj)
            continue
        handle = weakref.ref(obj)
        assert handle() is obj
        cache = weakref.WeakValueDictionary({"key": obj})
        finalized = []
        weakref.finalize(obj, finalized.append, name)
        del obj
        gc.collect()
        assert handle() is None, f"{label}: {name} outlived its last reference"
        assert "key" not in cache
        assert finalized == [name]


def test_a_metadata_key_in_a_weak_key_dictionary(fast):
    md = fast.sample_metadata.SampleMetadata.from_inputs({"x": torch.ones(2)}, strict=True)
    same = fast.sample_metadata.SampleMetadata.from_inputs({"x": torch.ones(3)}, strict=True)
    table = weakref.WeakKeyDictionary({md: "engine"})
    assert table[same] == "engine"  # found by equality, as a dict finds it
    del md
    gc.collect()
    assert len(table) == 0


def test_subclasses_take_weak_references(fast):
    class Tagged(fast.sample_metadata.SampleMetadata):
        pass

    obj = Tagged()
    assert weakref.ref(obj)() is obj
