"""`torch.load(..., weights_only=True)` of saved metadata with `aitune_fast.safe_globals()` allowed."""

from __future__ import annotations

import io
import pickle

import aitune_fast
import pytest
import torch
from aitune_fast import ExactSampleMetadata, SampleMetadata


def saved() -> tuple[dict, bytes]:
    first = SampleMetadata.from_inputs({"x": torch.ones(2, 3), "xs": [torch.ones(2)], "scale": 0.5}, strict=True)
    later = SampleMetadata.from_inputs({"x": torch.ones(4, 3), "xs": [torch.ones(4)], "scale": 0.5}, strict=True)
    first.update_shapes_seen(later)
    exact = ExactSampleMetadata.from_inputs({"x": torch.ones(2, 3), "mode": "a"})
    handed = SampleMetadata.from_inputs({"y": torch.ones(1)}, strict=True)
    handed.tensor_data[0][1].shape[0] = "batch0"  # a handed-out spec, changed: the live form is what is saved
    state = {"learned": first, "exact": exact, "handed": handed, "weights": torch.arange(3.0)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return state, buffer.getvalue()


def test_saved_metadata_loads_weights_only_with_safe_globals():
    state, data = saved()
    with torch.serialization.safe_globals(aitune_fast.safe_globals()):
        loaded = torch.load(io.BytesIO(data), weights_only=True)
    for name in ("learned", "exact", "handed"):
        assert type(loaded[name]) is type(state[name])
        assert loaded[name] == state[name]
        assert loaded[name].describe() == state[name].describe()
    assert torch.equal(loaded["weights"], state["weights"])


def test_without_safe_globals_weights_only_refuses_the_metadata():
    _, data = saved()
    with pytest.raises(pickle.UnpicklingError, match="SampleMetadata"):
        torch.load(io.BytesIO(data), weights_only=True)


def test_safe_globals_admits_nothing_else():
    class RunsCode:
        def __reduce__(self):
            return (print, ("ran",))

    buffer = io.BytesIO()
    torch.save({"md": SampleMetadata.from_inputs({"x": torch.ones(1)}), "evil": RunsCode()}, buffer)
    with torch.serialization.safe_globals(aitune_fast.safe_globals()), pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def test_safe_globals_are_the_public_classes():
    assert set(aitune_fast.safe_globals()) == {
        aitune_fast.SampleMetadata,
        aitune_fast.ExactSampleMetadata,
        aitune_fast.Locator,
        aitune_fast.TensorSpec,
        aitune_fast.ObjectType,
    }
