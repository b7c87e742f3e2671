"""make_batch on many small tensors of one shape: batched together (one stack, one copy each), the results equal the
reference's, each a contiguous tensor with its own storage; tensors the group path does not take are batched alone."""

from __future__ import annotations

import copy

import aitune_fast._helpers as helpers
import pytest
import torch
from parity import (
    TensorHolder,
    arange_tensor,
    assert_no_aliasing,
    assert_no_shared_containers,
    assert_same_tree,
)


def SM(impl):  # noqa: N802 - reads like the class
    return impl.sample_metadata.SampleMetadata


def learned(impl, build, batch_sizes=(2, 4)):
    md = SM(impl).from_inputs(build(batch_sizes[0]), strict=True, batch_size=batch_sizes[0])
    for batch_size in batch_sizes[1:]:
        md.update_shapes_seen(SM(impl).from_inputs(build(batch_size), strict=True, batch_size=batch_size))
    return md


def distinct(shape, i, dtype=torch.float32):
    """Tensors of one shape with different values (so a result in the wrong place shows)."""
    if dtype == torch.bool:
        return (torch.arange(i, i + int(torch.tensor(shape).prod())) % 3 == 0).reshape(shape)
    return (arange_tensor(shape, torch.int64) + i).to(dtype)


def many(bs, n=12, skew=False):
    """`n` tensors of each of several shapes and dtypes, batch axes leading, inner and both; with `skew`, two batch
    axes of which one grows and the other shrinks."""
    return {
        "skew": [distinct((1, 10) if skew else (bs, 2 * bs), i, torch.int32) for i in range(n)],
        "rows": [distinct((bs, 3), i) for i in range(n)],
        "inner": [distinct((3, bs), i, torch.int64) for i in range(n)],
        "both": [distinct((bs, 2 * bs), i, torch.bfloat16) for i in range(n)],
        "flags": [distinct((bs, 2), i, torch.bool) for i in range(n)],
        "lone": distinct((bs, 7), 0),
        "static": [distinct((5,), i) for i in range(3)],
        "n": 3,
    }


def run_both(ref, fast, build, inputs_of, target):
    results = []
    for impl in (ref, fast):
        md = learned(impl, build)
        inputs = inputs_of()
        pristine = copy.deepcopy(inputs)
        result = md.make_batch(inputs, target)
        assert_same_tree(inputs, pristine)
        assert_no_aliasing(result, inputs)
        assert_no_shared_containers(result, inputs)
        results.append((inputs, result))
    assert_same_tree(results[1][1], results[0][1])
    return results


def leaves(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from leaves(v)


def assert_fresh_and_separate(result, inputs):
    """Every resized tensor is contiguous and owns a storage of exactly its size, shared with no other result."""
    seen = set()
    for tensor, original in zip(leaves(result), leaves(inputs), strict=True):
        if tensor.shape == original.shape or tensor.numel() == 0:
            continue
        assert tensor.is_contiguous()
        assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        assert tensor.untyped_storage().data_ptr() not in seen
        seen.add(tensor.untyped_storage().data_ptr())


@pytest.fixture
def stacks(monkeypatch):
    """The sizes of the groups make_batch batches together."""
    sizes = []
    batch_group = helpers._batch_group

    def counting(tensors, *args):
        sizes.append(len(tensors))
        return batch_group(tensors, *args)

    monkeypatch.setattr(helpers, "_batch_group", counting)
    return sizes


@pytest.mark.parametrize("target", [1, 3, 5])
def test_make_batch_of_many_tensors_of_one_shape(ref, fast, target, stacks):
    (_, _), (inputs, result) = run_both(ref, fast, many, lambda: many(3), target)
    assert_fresh_and_separate(result, inputs)
    assert sorted(stacks) == ([12] * 5 if target != 3 else [])  # at 3, no shape changes
    assert result["rows"][5].shape == (target, 3) and result["both"][0].shape == (target, 2 * target)


def test_make_batch_of_tensors_with_an_axis_that_grows_and_one_that_shrinks(ref, fast, stacks):
    (_, _), (inputs, result) = run_both(ref, fast, many, lambda: many(3, skew=True), 4)
    assert_fresh_and_separate(result, inputs)
    assert result["skew"][3].shape == (4, 8) and len(stacks) == 5


def test_make_batch_batches_a_few_tensors_of_one_shape_one_at_a_time(ref, fast, stacks):
    (_, _), (inputs, result) = run_both(ref, fast, lambda bs: many(bs, n=3), lambda: many(3, n=3), 5)
    assert_fresh_and_separate(result, inputs)
    assert stacks == []  # fewer than _GROUP_MIN: a stack would cost more than it saves


def test_make_batch_groups_are_split_into_bounded_stacks(ref, fast, monkeypatch, stacks):
    monkeypatch.setattr(helpers, "_GROUP_STACK_BYTES", 40)  # a few tensors per stack
    monkeypatch.setattr(helpers, "_GROUP_MIN", 2)
    (_, _), (inputs, result) = run_both(ref, fast, lambda bs: many(bs, n=30), lambda: many(3, n=30), 5)
    assert_fresh_and_separate(result, inputs)
    # the bool (3, 2) tensors, 6 bytes each, in stacks of 6; the others are larger: one per stack, so alone
    assert stacks == [40 // 6] * 5


def _odd(bs, mixed):
    """Tensors of one shape and batched shape that the group path leaves alone when `mixed` (plain ones to learn from
    otherwise)."""
    plain = [distinct((bs, 3), i) for i in range(5)]
    if not mixed:
        return [distinct((3, bs), 0).t(), *plain[:4], torch.complex(plain[0], plain[1]), *plain[2:]]
    shared = distinct((bs, 3), 100)
    return [
        distinct((3, bs), 8).t(),  # not contiguous
        distinct((bs, 3), 7).requires_grad_(True),
        torch.nn.Parameter(distinct((bs, 3), 9)),
        distinct((bs, 3), 10),
        torch.empty(2 * bs, 3).as_strided((bs, 3), (3, 1), 3).fill_(1),  # a view with an offset
        torch.complex(distinct((bs, 3), 12), distinct((bs, 3), 13)).conj(),
        torch._neg_view(distinct((bs, 3), 14)),
        shared,
        shared,  # the same tensor at two locators: two separate results
    ]


def test_make_batch_batches_unusual_tensors_like_the_reference(ref, fast, stacks):
    def build(bs, mixed=False):
        return {"plain": [distinct((bs, 3), i) for i in range(4)], "odd": _odd(bs, mixed)}

    (_, want), (inputs, got) = run_both(ref, fast, build, lambda: build(2, mixed=True), 4)
    assert stacks == [8]  # the plain ones, and of the odd ones the plain, offset and shared (twice) ones
    assert [x.requires_grad for x in got["odd"]] == [x.requires_grad for x in want["odd"]]
    assert [x.is_leaf for x in got["odd"]] == [True] * len(got["odd"])  # deliberate: never on the input's graph
    assert [(x.is_conj(), x.is_neg()) for x in got["odd"]] == [(x.is_conj(), x.is_neg()) for x in want["odd"]]
    assert got["odd"][-1].untyped_storage().data_ptr() != got["odd"][-2].untyped_storage().data_ptr()
    assert_fresh_and_separate(got["plain"], inputs["plain"])


def test_make_batch_of_a_grouped_tensor_also_held_elsewhere_leaves_that_reference_whole(ref, fast):
    results = []
    for impl in (ref, fast):
        md = learned(impl, lambda bs: {"x": [distinct((bs, 2), i) for i in range(5)]})
        tensors = [distinct((3, 2), i) for i in range(5)]
        inputs = {"x": tensors, "holder": TensorHolder(tensors[2])}
        result = md.make_batch(inputs, 1)
        assert_no_aliasing(result, inputs)
        results.append(result)
    assert_same_tree(results[1]["x"], results[0]["x"])
    assert results[1]["holder"].tensor.shape == results[0]["holder"].tensor.shape == (3, 2)
    assert torch.equal(results[1]["holder"].tensor, results[0]["holder"].tensor)


def test_make_batch_honours_locator_and_spec_subclasses(ref, fast):
    """Overridden `get_value` and `get_batch_axis_multipliers` are called (make_batch reads exact ones in the core)."""

    def run(impl):
        calls = []

        class Loc(impl.locator.Locator):
            def get_value(self, obj):
                calls.append("get_value")
                return super().get_value(obj)

        class Spec(impl.tensor_spec.TensorSpec):
            def get_batch_axis_multipliers(self):
                return {1: 2}  # not what the lists say

        plain = impl.tensor_spec.TensorSpec
        pairs = [
            (Loc((("a", 1),)), Spec(["batch0", 4], [1, 4], [8, 4], torch.float32, [1.0, float("nan")])),
            (impl.locator.Locator((("b", 1),)), plain(["batch0", 4], [1, 4], [8, 4], torch.float32, [1.0, 2.0])),
            (Loc((("c", 1),)), plain(["batch0", 4], [1, 4], [8, 4], torch.float32, [1.0, 2.0])),
        ]
        md = impl.sample_metadata.SampleMetadata(pairs, ())
        inputs = {"a": distinct((2, 4), 0), "b": distinct((2, 4), 1), "c": distinct((2, 4), 2)}
        result = md.make_batch(inputs, 3)
        assert_no_aliasing(result, inputs)
        return result, len(calls)

    results = [run(ref), run(fast)]
    assert_same_tree(results[1][0], results[0][0])
    assert results[1][0]["a"].shape == (2, 6) and results[1][0]["b"].shape == (3, 4)
    assert results[1][1] == results[0][1] == 2
