"""Batch sizes and multipliers at the edges: `make_batch` with integral batch sizes side by side with the
reference (single tensors, grouped ones, two batch axes); with a NaN, infinite, zero, negative or non-integral one
aitune_fast refuses what the reference slices silently (a documented departure); and
`get_batch_axis_multipliers` of multipliers past 64 bits (the reference's `int()` is exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from parity import canon, outcome

# integers of at least 1, of the types the reference takes: batched side by side with it
GOOD_BATCH_SIZES = [1, 3, True, np.int64(2), torch.tensor(3)]
# refused with a ValueError (integers below 1) or a TypeError (anything else), where the reference slices silently
# or fails inside torch
BAD_BATCH_SIZES = {
    ValueError: [0, -1, -3, np.int32(0)],
    TypeError: [
        float("nan"),
        float("inf"),
        float("-inf"),
        0.0,
        -0.0,
        -1.0,
        -0.5,
        0.5,
        1.5,
        2.5,
        1.0,
        2.0,
        1e30,
        "2",
        None,
    ],
}


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
@pytest.mark.parametrize("batch_size", GOOD_BATCH_SIZES, ids=repr)
def test_make_batch_integral_batch_sizes_match_the_reference(ref, fast, build, batch_size):
    got = [outcome(lambda impl=impl: learned(impl, build).make_batch(build(2), batch_size)) for impl in (ref, fast)]
    assert got[1] == got[0]


BAD_CASES = [(error, size) for error, sizes in BAD_BATCH_SIZES.items() for size in sizes]


@pytest.mark.parametrize("build", [one, grouped, two_axes], ids=["one", "grouped", "two_axes"])
@pytest.mark.parametrize(("error", "batch_size"), BAD_CASES, ids=[repr(size) for _, size in BAD_CASES])
def test_make_batch_refuses_batch_sizes_that_are_not_positive_integers(fast, build, error, batch_size):
    md = learned(fast, build)
    inputs = build(2)
    with pytest.raises(error, match=r"^batch_size must be (at least 1, got|an integer \(int or numpy integer\), got)"):
        md.make_batch(inputs, batch_size)
    with pytest.raises(error, match=r"^max_batch_size must be"):
        md.update_max_batch_size(inputs, batch_size)
    spec = md.tensor_data[0][1]
    with pytest.raises(error, match=r"^batch_size must be"):
        fast.sample_metadata.batch_tensor(torch.ones(2, 2), spec, batch_size)


def test_batch_tensor_checks_the_batch_size_even_without_batch_axes(fast):
    spec = fast.sample_metadata.SampleMetadata.from_inputs(one(2), strict=True, batch_size=2).tensor_data[0][1]
    assert not spec.get_batch_axis_multipliers()
    with pytest.raises(ValueError, match="batch_size must be at least 1, got -1"):
        fast.sample_metadata.batch_tensor(torch.ones(2, 2), spec, -1)


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


def _number_batch_sizes():
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    return [
        np.int64(2),
        np.float32(2.0),
        np.float64(3.0),
        torch.tensor(2),
        torch.tensor(2.5),
        Fraction(3, 2),
        Decimal("2"),
        Decimal("NaN"),
        2**60 + 1,
        2**80,
    ]


def _multipliers(md):
    return [[(type(m).__name__, repr(m)) for m in spec._bs_multipliers] for _, spec in md.tensor_data]


@pytest.mark.parametrize("from_context", [False, True], ids=["argument", "global_context"])
@pytest.mark.parametrize("batch_size", _number_batch_sizes(), ids=repr)
def test_batch_sizes_of_other_number_types_keep_their_type_in_the_multipliers(ref, fast, batch_size, from_context):
    """`size / batch_size` as the reference divides: a numpy, tensor, Fraction or Decimal batch size (or an int
    past 2**53) gives multipliers of the type that division gives, given as an argument or by AITune's global
    context; what is built from them (batch axes, merged shapes, make_batch) agrees too."""
    got = []
    for impl in (ref, fast):
        SM = impl.sample_metadata.SampleMetadata  # noqa: N806 - the class
        context = impl.global_context.global_context
        with context:  # the autouse fixture clears what is left
            if from_context:
                context.set(impl.global_context.BATCH_SIZE_KEY, batch_size)
            given = {} if from_context else {"batch_size": batch_size}
            md = SM.from_inputs({"x": torch.zeros(3, 2), "k": 1}, strict=True, **given)
        multipliers = _multipliers(md)
        learned_md = SM.from_inputs({"x": torch.zeros(2, 2)}, strict=True, batch_size=2)
        other = SM.from_inputs({"x": torch.zeros(3, 2)}, strict=True, batch_size=batch_size)
        merged = outcome(lambda md=learned_md, other=other: md.update_shapes_seen(other) or _multipliers(md))
        axes = outcome(md.tensor_data[0][1].get_batch_axis_multipliers)
        got.append((multipliers, merged, axes, md == SM.from_inputs({"x": torch.zeros(3, 2), "k": 1}, strict=True)))
    assert got[1] == got[0]
