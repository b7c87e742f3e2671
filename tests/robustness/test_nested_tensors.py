"""Nested tensors: the jagged layout is described (a symbolic ragged axis); the strided layout, to which torch gives
no shape ("Internal error: NestedTensorImpl doesn't support sizes. Please file an issue.", which the reference
passes on), is refused with a TypeError of ours that says what to use instead, torch's error as its cause."""

from __future__ import annotations

import warnings

import pytest
import torch
from aitune_fast import Locator, SampleMetadata, TensorSpec, _core


def _nested(layout: torch.layout) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: the strided layout's nested tensors are a prototype
        return torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=layout)


@pytest.fixture(params=_core.tensor_readers_available())
def reader(request):
    """Each tensor reader this process could use, in turn (the fast ones hand nested tensors to Python)."""
    selected = _core.tensor_reader()
    _core._force_tensor_reader(request.param)
    yield request.param
    _core._force_tensor_reader(selected)


@pytest.mark.parametrize(
    "describe",
    [
        lambda t: SampleMetadata.from_inputs({"x": t, "y": 1}),
        lambda t: SampleMetadata.from_outputs((t,)),
        lambda t: TensorSpec.from_tensor(t, 1),
    ],
    ids=["from_inputs", "from_outputs", "TensorSpec.from_tensor"],
)
def test_a_strided_nested_tensor_is_refused_clearly(reader, describe):
    with pytest.raises(TypeError, match=r"nested tensor of the torch\.strided layout.*layout=torch\.jagged") as err:
        describe(_nested(torch.strided))
    assert isinstance(err.value.__cause__, RuntimeError) and "NestedTensorImpl" in str(err.value.__cause__)


def test_a_jagged_nested_tensor_is_described(reader):
    md = SampleMetadata.from_inputs({"x": _nested(torch.jagged)})
    (spec,) = md.tensor_specs
    assert len(spec.shape) == 3 and spec.shape[0] == 2 and spec.shape[2] == 3 and spec.dtype == torch.float32
    # the walk itself reads no shape: the strided one is still found as a leaf
    assert [loc.path for loc, _ in Locator.find_leaves({"x": _nested(torch.strided)})] == ["x"]


def test_a_tensor_whose_shape_fails_otherwise_keeps_its_own_error():
    class Broken(torch.Tensor):
        @property
        def shape(self):
            raise RuntimeError("this subclass's own error")

    t = torch.randn(2).as_subclass(Broken)
    with pytest.raises(RuntimeError, match="this subclass's own error"):
        SampleMetadata.from_inputs({"x": t})
