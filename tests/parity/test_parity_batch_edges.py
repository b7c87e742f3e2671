"""Batch sizes and multipliers at the edges, side by side with the reference: `make_batch` with a NaN, infinite,
zero, negative or non-integral batch size (single tensors, grouped ones, two batch axes), and
`get_batch_axis_multipliers` of multipliers past 64 bits (the reference's `int()` is exact)."""

from __future__ import annotations

import pytest
import torch
from parity import canon, outcome

EDGE_BATCH_SIZES = [
    float("nan"),
    float("inf"),
    float("-inf"),
    0,
    0.0,
    -0.0,
    -1,
    -3,
    -1.0,
    -0.5,
    0.5,
    1.5,
    2.5,
    1.0,
    2.0,
    3.0,
    1e30,
    1,
    3,
    True,
]


def learned(impl, build):
    SM = impl.sample_metadata.SampleMetadata  # noqa: N806 - the class
    md = SM.from_inputs(build(2), strict=True, batch_size=2)
    md.update_shapes_seen(SM.from_inputs(build(4), strict=True, batch_size=4))
    return md


def one(bs):
    return {"x": torch.arange(2.0 * bs).reshape(bs, 2)}


def grouped(bs):
    # more than `_GROUP_MIN` small plain tensors of one shape: the grouped path
    return {"xs": [torch.arange(3.0 * bs).reshape(bs, 3) + i for i in range(10)], "k": 7}


def two_axes(bs):
    return {"x": torch.arange(2.0 * bs * bs).reshape(bs, 2 * bs), "g": torch.ones(bs, 1, requires_grad=True)}


@pytest.mark.parametrize("build", [one, grouped, two_axes], ids=["one", "grouped", "two_axes"])
@pytest.mark.parametrize("batch_size", EDGE_BATCH_SIZES, ids=repr)
def test_make_batch_odd_batch_sizes_match_the_reference(ref, fast, build, batch_size):
    got = [outcome(lambda impl=impl: learned(impl, build).make_batch(build(2), batch_size)) for impl in (ref, fast)]
    assert got[1] == got[0]


def test_make_batch_nan_returns_the_tensors_as_they_are(fast):
    inputs = one(2)
    out = learned(fast, one).make_batch(inputs, float("nan"))
    assert torch.equal(out["x"], inputs["x"])
    assert out["x"] is not inputs["x"]  # a copy, as the reference's deep copy


@pytest.mark.parametrize("multiplier", [1e30, -1e30, 2.0**63, -(2.0**63), 2.0**63 - 1024, 1.5e308, 2**70 + 1, -(2**64)])
def test_batch_axis_multipliers_are_exact_ints(ref, fast, multiplier):
    got = []
    for impl in (ref, fast):
        spec = impl.tensor_spec.TensorSpec(["batch0", 3], [2, 3], [8, 3], torch.float32, [multiplier, 1.0])
        got.append(outcome(spec.get_batch_axis_multipliers))
    assert got[1] == got[0]
    assert got[0][0] == "ok"


def test_tiny_batch_size_gives_the_reference_multiplier(ref, fast):
    got = []
    for impl in (ref, fast):
        SM = impl.sample_metadata.SampleMetadata  # noqa: N806 - the class
        md = SM.from_inputs({"x": torch.zeros(2, 3)}, strict=True, batch_size=1e-30)
        md.update_shapes_seen(SM.from_inputs({"x": torch.zeros(4, 3)}, strict=True, batch_size=2e-30))
        spec = md.tensor_data[0][1]
        got.append(outcome(spec.get_batch_axis_multipliers))
    assert got[1] == got[0]
    assert got[0] == ("ok", canon({0: int(2 / 1e-30)}))
