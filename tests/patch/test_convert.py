"""``patch/_convert.py`` in process: aitune_fast's metadata, locators and specs made from AITune's and back, equal
to what each library builds itself, and pickled byte for byte as AITune pickles its own. AITune's metadata modules
are loaded under stub parent packages (``aitune_fast._reference``); the patch itself is not applied."""

from __future__ import annotations

import pickle
from collections import OrderedDict

import pytest
import torch
from aitune_fast import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec
from aitune_fast._enums import ObjectType
from aitune_fast._reference import load_reference
from aitune_fast.patch import _convert, _state


@pytest.fixture(scope="module")
def ref():
    return load_reference()


@pytest.fixture
def reference(ref, monkeypatch):
    """A patched period's state that knows AITune's classes, as the switch records them."""
    now = _state.State(active=True)
    now.reference.update(
        SampleMetadata=ref.sample_metadata.SampleMetadata,
        ExactSampleMetadata=ref.exact_sample_metadata.ExactSampleMetadata,
        Locator=ref.locator.Locator,
        TensorSpec=ref.tensor_spec.TensorSpec,
        ObjectType=ref.locator.ObjectType,
    )
    monkeypatch.setattr(_state.CURRENT, "state", now)
    return now.reference


def _inputs():
    x = torch.zeros(2, 3)
    past = [(torch.zeros(1, 4, 5), torch.zeros(1, 4, 5)) for _ in range(2)]
    return ((x,), {"past": past, "mask": OrderedDict(a=torch.ones(2, dtype=torch.bool)), "scale": 0.5, "name": "n"})


@pytest.mark.parametrize("strict", [False, True])
def test_ours_of_equals_our_own_walk(reference, strict):
    theirs = reference["SampleMetadata"].from_inputs(_inputs(), strict=strict)
    ours = _convert.ours_of(theirs)
    own = SampleMetadata.from_inputs(_inputs(), strict=strict)
    assert type(ours) is SampleMetadata
    assert ours == own and hash(ours) == hash(own)
    assert ours.to_json() == own.to_json()


@pytest.mark.parametrize("strict", [False, True])
def test_reference_of_equals_and_pickles_as_aitunes_own(reference, strict):
    theirs = reference["SampleMetadata"].from_inputs(_inputs(), strict=strict)
    back = _convert.reference_of(SampleMetadata.from_inputs(_inputs(), strict=strict))
    assert type(back) is reference["SampleMetadata"]
    assert back == theirs and hash(back) == hash(theirs)
    assert pickle.dumps(back) == pickle.dumps(theirs)  # locators share their step tuples as AITune's walk makes them


def test_the_exact_class_goes_both_ways(reference):
    exact = reference["ExactSampleMetadata"]
    theirs = exact.from_inputs(_inputs())
    ours = _convert.ours_of(theirs)
    assert type(ours) is ExactSampleMetadata
    back = _convert.reference_of(ours)
    assert type(back) is exact and back == theirs


def test_values_json_cannot_hold_keep_the_python_form(reference):
    class Opaque:
        pass

    theirs = reference["SampleMetadata"].from_inputs(((torch.zeros(1),), {"o": Opaque()}), strict=True)
    ours = _convert.ours_of(theirs)
    assert type(ours) is SampleMetadata and len(ours.other_data) == 1
    assert _convert.reference_of(ours) == theirs


def test_locators_specs_and_kinds_each_way(reference):
    theirs = reference["SampleMetadata"].from_inputs(_inputs())
    locator, spec = theirs._tensor_data[0]
    ours_locator = _convert.our_object(locator)
    own_locator, own_spec = SampleMetadata.from_inputs(_inputs()).tensor_data[0]
    assert type(ours_locator) is Locator and ours_locator == own_locator and str(ours_locator) == str(locator)
    assert _convert.reference_object(ours_locator) == locator
    ours_spec = _convert.our_object(spec)
    assert type(ours_spec) is TensorSpec and ours_spec == own_spec
    assert _convert.reference_object(ours_spec) == spec
    kind = reference["ObjectType"](1)
    assert _convert.our_object(kind) is ObjectType(1)
    assert _convert.reference_object(ObjectType(1)) is kind


def test_no_conversion_is_planned_before_aitunes_metadata_loaded(monkeypatch):
    monkeypatch.setattr(_state.CURRENT, "state", _state.State(active=True))
    assert _convert.conversion_plan(to_ours=True) == []
    assert _convert.conversion_plan(to_ours=False) == []
