"""Parity of ``ExactSampleMetadata``: exact-shape equality and hashing on top of ``SampleMetadata``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from parity import arange_tensor, assert_raises_alike, assert_same_eq_hash_classes, assert_same_tree, md_snap

t = arange_tensor
NAN = float("nan")


def ESM(impl):  # noqa: N802 - reads like the class
    return impl.exact_sample_metadata.ExactSampleMetadata


def exact(impl, inputs):
    return ESM(impl).from_inputs(inputs)


@dataclasses.dataclass
class Point:
    x: object
    y: object = None


CASES = {
    "tensors_and_others": lambda: {"x": t((2, 3)), "n": 1, "s": "a", "l": [t((1,)), None]},
    "empty": lambda: {},
    "tensor_root": lambda: t((4,)),
    "scalar_root": lambda: 7,
    "nested": lambda: {"p": Point(x=t((1, 2)), y={"k": {1, 2}}), (1, 2): (t(()), 3.5)},
    "cache_position": lambda: {"input_ids": t((1, 4)), "cache_position": torch.arange(4)},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_inputs_is_always_strict_and_renders_like_sample_metadata(ref, fast, case):
    ref_md = exact(ref, CASES[case]())
    fast_md = exact(fast, CASES[case]())
    assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
    assert (fast_md.strict, fast_md.llm_phase, type(fast_md).__name__) == (True, "", "ExactSampleMetadata")
    plain = ref.sample_metadata.SampleMetadata.from_inputs(CASES[case](), strict=True)
    assert (str(fast_md), repr(fast_md)) == (str(plain), repr(plain))


def test_from_inputs_ignores_the_global_batch_size_and_cache_position(ref, fast):
    def run(impl):
        gc = impl.global_context
        with gc.global_context:
            gc.global_context.set(gc.BATCH_SIZE_KEY, 2)
            md = exact(impl, {"x": t((4, 3)), "cache_position": torch.tensor([0])})
        return md_snap(impl, md), md.tensor_specs[0]._bs_multipliers

    (ref_snap, ref_multipliers), (fast_snap, fast_multipliers) = run(ref), run(fast)
    assert fast_snap == ref_snap
    assert all(x != x for x in fast_multipliers + ref_multipliers)
    assert ref_snap["llm_phase"] == ("str", "")


def test_from_inputs_takes_no_strict_or_batch_size_argument(ref, fast):
    assert_raises_alike(lambda: ESM(ref).from_inputs({}, strict=True), lambda: ESM(fast).from_inputs({}, strict=True))
    assert_raises_alike(lambda: ESM(ref).from_inputs({}, True), lambda: ESM(fast).from_inputs({}, True))


def _samples():
    shared_nan = float("nan")
    return [
        {"x": t((2, 3))},
        {"x": t((2, 3))},
        {"x": t((2, 4))},
        {"x": t((3, 2))},
        {"x": t((2, 3, 1))},
        {"x": t((2, 3), torch.int8)},
        {"y": t((2, 3))},
        {"x": t((2, 3)), "n": 1},
        {"n": 1, "x": t((2, 3))},
        {"x": t((2, 3)), "n": 2},
        {"x": t((2, 3)), "n": 1.0},
        {"x": t((2, 3)), "n": {1, 2}},
        {"x": t((2, 3)), "n": {2, 1}},
        {"x": t((2, 3)), "n": shared_nan},
        {"x": t((2, 3)), "n": shared_nan},
        {"x": t((2, 3)), "n": float("nan")},
        {"x": t(())},
        {"x": t((0,))},
        {"x": t((1,))},
        {},
        {"cache_position": torch.tensor([0])},
        {"cache_position": torch.tensor([5])},
        {"x": [t((2, 3))]},
        {"x": (t((2, 3)),)},
    ]


def test_equality_and_hash_use_exact_shapes_and_other_data(ref, fast):
    ref_mds = [exact(ref, x) for x in _samples()] + [None, "x"]
    fast_mds = [exact(fast, x) for x in _samples()] + [None, "x"]
    assert_same_eq_hash_classes(ref_mds, fast_mds)
    mds = fast_mds
    assert mds[0] == mds[1] == mds[5] and mds[0] != mds[2] and mds[0] != mds[3] and mds[0] != mds[6]
    assert mds[7] == mds[8] == mds[10] != mds[9] and mds[11] == mds[12] and hash(mds[11]) == hash(mds[12])
    assert mds[13] == mds[14] != mds[15] and mds[20] == mds[21] and mds[22] == mds[23]


def test_exact_and_plain_sample_metadata_are_never_equal(ref, fast):
    def run(impl):
        inputs = {"x": t((2, 3)), "n": 1}
        plain = impl.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)
        exact_md = exact(impl, inputs)
        return [plain == exact_md, exact_md == plain, plain != exact_md, exact_md != plain]

    assert run(fast) == run(ref) == [False, False, True, True]


def test_constructor_is_inherited_and_llm_phase_does_not_affect_equality(ref, fast):
    def build(impl):
        locator = impl.locator
        x = locator.Locator((("x", locator.ObjectType.DICT),))
        spec = impl.tensor_spec.TensorSpec.from_tensor(t((2, 3)), NAN)
        other_spec = impl.tensor_spec.TensorSpec.from_tensor(t((2, 4)), NAN)
        return [
            ESM(impl)(((x, spec),), (), True, "prefill"),
            ESM(impl)(((x, spec),), (), True, "decode"),
            ESM(impl)(((x, other_spec),), (), False, "prefill"),
            ESM(impl)(((x, spec),), ()),
        ]

    assert_same_eq_hash_classes(build(ref), build(fast))
    for ref_md, fast_md in zip(build(ref), build(fast), strict=True):
        assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
    mds = build(fast)
    assert mds[0] == mds[1] == mds[3] != mds[2]


def test_inherited_factories_return_plain_sample_metadata(ref, fast):
    """`from_outputs` as the reference. `from_dict` differs on purpose for aitune_fast's own dicts, which say which
    class wrote them: an ExactSampleMetadata comes back as one (the reference's pickled dicts do not say, and load
    as a plain SampleMetadata, as in the reference: test_serialization.py)."""

    def run(impl):
        cls = ESM(impl)
        out = cls.from_outputs((t((2,)), 1), strict=True)
        round_trip = cls.from_dict(exact(impl, {"x": t((2, 3)), "n": 1}).to_dict())
        return type(out).__name__, type(round_trip).__name__, md_snap(impl, out), md_snap(impl, round_trip)

    theirs, ours = run(ref), run(fast)
    assert theirs[:2] == ("SampleMetadata", "SampleMetadata")
    assert ours[:2] == ("SampleMetadata", "ExactSampleMetadata")
    assert ours[2] == theirs[2]
    assert {k: v for k, v in ours[3].items() if k != "type"} == {k: v for k, v in theirs[3].items() if k != "type"}


def test_update_shapes_seen_changes_the_shapes_that_equality_compares(ref, fast):
    def run(impl):
        first = exact(impl, {"x": t((2, 3))})
        second = exact(impl, {"x": t((4, 3))})
        before = (first == second, first == exact(impl, {"x": t((2, 3))}))
        first.update_shapes_seen(second)
        after = (first == second, first == exact(impl, {"x": t((2, 3))}))
        twin = exact(impl, {"x": t((2, 3))})
        twin.update_shapes_seen(exact(impl, {"x": t((9, 3))}))
        return before, after, first == twin, hash(first) == hash(twin), md_snap(impl, first)

    assert run(fast) == run(ref)
    assert run(ref)[:4] == ((False, True), (False, False), True, True)


def test_live_spec_mutation_changes_exact_equality(ref, fast):
    def run(impl):
        first = exact(impl, {"x": t((2, 3))})
        second = exact(impl, {"x": t((2, 3))})
        first.tensor_specs[0].shape[0] = 5
        return first == second, first == exact(impl, {"x": t((5, 3))}), md_snap(impl, first)

    assert run(fast) == run(ref)
    assert run(ref)[:2] == (False, True)


def test_make_batch_is_inherited(ref, fast):
    results = []
    for impl in (ref, fast):
        md = exact(impl, {"x": t((2, 3)), "n": 1})
        md.update_shapes_seen(exact(impl, {"x": t((4, 3)), "n": 1}))
        results.append(md.make_batch({"x": t((2, 3)), "n": 1}, 3))
    assert_same_tree(results[1], results[0])
