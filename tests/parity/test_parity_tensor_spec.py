"""Parity of ``TensorSpec`` and ``InfoLevel``: construction, rendering, rank equality, shape merging, batch axes,
serialisation and the live-list fields."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch
from parity import assert_raises_alike, assert_same_eq_hash_classes, canon, outcome, spec_snap

NAN = float("nan")


def spec_from(impl, shape, batch_size=NAN, dtype=torch.float32):
    return impl.tensor_spec.TensorSpec.from_tensor(torch.empty(shape, dtype=dtype), batch_size)


def make_spec(impl, shape, min_shape=None, max_shape=None, dtype=torch.float32, multipliers=None):
    return impl.tensor_spec.TensorSpec(
        shape=list(shape),
        min_shape=list(min_shape if min_shape is not None else shape),
        max_shape=list(max_shape if max_shape is not None else shape),
        dtype=dtype,
        _bs_multipliers=list(multipliers if multipliers is not None else [NAN] * len(shape)),
    )


def both(ref, fast, fn):
    """Apply ``fn(impl)`` to each implementation and return the two snapshots of the resulting spec."""
    return spec_snap(ref, fn(ref)), spec_snap(fast, fn(fast))


# ------------------------------------------------------------------------------------------- InfoLevel


def test_info_level_has_short_medium_full(ref, fast):
    def members(impl):
        return [(m.name, m.value) for m in impl.tensor_spec.InfoLevel]

    assert members(fast) == members(ref) == [("SHORT", 1), ("MEDIUM", 2), ("FULL", 3)]


# ------------------------------------------------------------------------------------------- from_tensor

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool, torch.complex64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (1, 2, 3, 4), (2, 1, 1, 2, 3)], ids=str)
@pytest.mark.parametrize("batch_size", [NAN, 1, 2, 3, 2.0, 0.5], ids=repr)
def test_from_tensor_records_shape_bounds_dtype_and_batch_multipliers(ref, fast, shape, dtype, batch_size):
    ref_snap, fast_snap = both(ref, fast, lambda impl: spec_from(impl, shape, batch_size, dtype))
    assert fast_snap == ref_snap


def test_from_tensor_multipliers_are_dimension_over_batch_size(ref, fast):
    for impl in (ref, fast):
        spec = spec_from(impl, (4, 6, 3), 2)
        assert canon(spec._bs_multipliers) == canon([2.0, 3.0, 1.5])
        assert canon(spec_from(impl, (4, 6), NAN)._bs_multipliers) == canon([NAN, NAN])


def test_from_tensor_shape_and_bounds_are_distinct_lists(ref, fast):
    for impl in (ref, fast):
        spec = spec_from(impl, (2, 3), 2)
        spec.shape[0] = 7
        assert (spec.min_shape, spec.max_shape) == ([2, 3], [2, 3])


def test_from_tensor_with_zero_batch_size_raises_zero_division_for_non_scalars(ref, fast):
    assert_raises_alike(lambda: spec_from(ref, (2,), 0), lambda: spec_from(fast, (2,), 0))
    ref_snap, fast_snap = both(ref, fast, lambda impl: spec_from(impl, (), 0))
    assert fast_snap == ref_snap


def test_from_tensor_accepts_non_contiguous_and_expanded_tensors(ref, fast):
    for make in (lambda: torch.empty(3, 4).t(), lambda: torch.empty(1, 4).expand(5, 4), lambda: torch.empty(6)[::2]):
        ref_snap = spec_snap(ref, ref.tensor_spec.TensorSpec.from_tensor(make(), 1))
        assert spec_snap(fast, fast.tensor_spec.TensorSpec.from_tensor(make(), 1)) == ref_snap


# ------------------------------------------------------------------------------------------- constructor, fields


def test_keyword_constructor_keeps_the_given_fields(ref, fast):
    def build(impl):
        return impl.tensor_spec.TensorSpec(
            shape=["batch0", 3, "dim2"],
            min_shape=[1, 3, 4],
            max_shape=[8, 3, 9],
            dtype=torch.int32,
            _bs_multipliers=[1.0, NAN, NAN],
        )

    ref_snap, fast_snap = both(ref, fast, build)
    assert fast_snap == ref_snap
    full = "shape=[batch0, 3, dim2] min_shape=[1, 3, 4] max_shape=[8, 3, 9] dtype=torch.int32"
    assert ref_snap["describe"][2] == full


def test_positional_constructor_follows_field_order(ref, fast):
    ref_snap, fast_snap = both(
        ref, fast, lambda impl: impl.tensor_spec.TensorSpec([2, "dim1"], [2, 1], [2, 5], torch.float16, [2.0, NAN])
    )
    assert fast_snap == ref_snap


def test_constructor_accepts_none_dtype(ref, fast):
    ref_snap, fast_snap = both(ref, fast, lambda impl: make_spec(impl, (2,), dtype=None))
    assert fast_snap == ref_snap
    assert ref_snap["describe"][1] == "shape=[2] dtype=None"


def test_constructor_requires_all_fields(ref, fast):
    assert_raises_alike(
        lambda: ref.tensor_spec.TensorSpec(shape=[1], min_shape=[1], max_shape=[1], dtype=None),
        lambda: fast.tensor_spec.TensorSpec(shape=[1], min_shape=[1], max_shape=[1], dtype=None),
    )


def test_unknown_attributes_cannot_be_set(ref, fast):
    def set_unknown(impl):
        spec = spec_from(impl, (1,))
        spec.unknown = 1

    assert_raises_alike(lambda: set_unknown(ref), lambda: set_unknown(fast))


# ------------------------------------------------------------------------------------------- describe, str, repr


@pytest.mark.parametrize(
    ("shape", "min_shape", "max_shape", "dtype"),
    [
        ([], [], [], torch.float32),
        ([2, 3], [2, 3], [2, 3], torch.bfloat16),
        (["batch0", "dim1", 5], [1, 2, 5], [16, 128, 5], torch.int64),
        ([0], [0], [0], torch.bool),
        (["custom", 1], [1, 1], [2, 1], None),
    ],
)
def test_describe_str_and_repr_render_the_same_text(ref, fast, shape, min_shape, max_shape, dtype):
    ref_snap, fast_snap = both(ref, fast, lambda impl: make_spec(impl, shape, min_shape, max_shape, dtype))
    assert fast_snap == ref_snap


def test_describe_levels_add_dtype_then_bounds_and_default_to_full(ref, fast):
    for impl in (ref, fast):
        info = impl.tensor_spec.InfoLevel
        spec = make_spec(impl, ["batch0", 3], [1, 3], [4, 3], torch.float32)
        assert spec.describe(info.SHORT) == str(spec) == "shape=[batch0, 3]"
        assert spec.describe(info.MEDIUM) == repr(spec) == "shape=[batch0, 3] dtype=torch.float32"
        full = "shape=[batch0, 3] min_shape=[1, 3] max_shape=[4, 3] dtype=torch.float32"
        assert spec.describe(info.FULL) == spec.describe() == full


# ------------------------------------------------------------------------------------------- equality, hash


def test_specs_are_equal_and_hash_alike_when_ranks_match(ref, fast):
    def specs(impl):
        return [
            make_spec(impl, ()),
            make_spec(impl, (), dtype=torch.int8),
            make_spec(impl, (1,)),
            make_spec(impl, (7,), dtype=torch.bool),
            make_spec(impl, ("batch0",), [1], [9]),
            make_spec(impl, (1, 1)),
            make_spec(impl, (2, 7)),
            make_spec(impl, (1, 4, 2)),
            make_spec(impl, (2, 2, 4)),
            make_spec(impl, (1, 1, 1, 1)),
            None,
            3,
            (1,),
        ]

    assert_same_eq_hash_classes(specs(ref), specs(fast))
    ref_specs = specs(ref)
    assert ref_specs[2] == ref_specs[4] and ref_specs[2] != ref_specs[5]


def test_specs_are_usable_as_dict_keys_by_rank(ref, fast):
    for impl in (ref, fast):
        table = {make_spec(impl, (1, 2)): "rank2"}
        assert table[make_spec(impl, ("batch0", 9))] == "rank2"
        assert make_spec(impl, (1,)) not in table


# ------------------------------------------------------------------------------------------- update_shapes_seen

SEQUENCES = {
    "batch_axis": [((2, 3), 2), ((4, 3), 4)],
    "batch_and_dynamic": [((2, 5), 2), ((4, 7), 4)],
    "stacked_batch_multiplier_two": [((4, 3), 2), ((8, 3), 4)],
    "non_integer_multiplier_is_dynamic": [((3, 2), 2), ((6, 2), 4)],
    "unknown_batch_size_is_dynamic": [((2, 3), NAN), ((4, 3), NAN)],
    "mixed_known_unknown": [((2, 3), 2), ((4, 3), NAN)],
    "unchanged_shape_stays_static": [((2, 3), 2), ((2, 3), 4)],
    "batch_then_changed_multiplier_becomes_dynamic": [((2, 3), 2), ((4, 3), 4), ((6, 3), 2)],
    "dynamic_stays_dynamic": [((2, 5), 2), ((4, 7), 4), ((8, 14), 8)],
    "shrinking": [((8, 4), 8), ((2, 4), 2), ((1, 4), 1)],
    "three_axes": [((1, 2, 3, 4), 1), ((2, 8, 6, 4), 2)],
    "float_batch_sizes": [((2, 3), 2.0), ((4, 3), 4.0)],
    "batch_size_one_multiplier": [((1, 10), 1), ((3, 30), 3)],
    "scalar": [((), 1), ((), 2)],
    "zero_sized": [((0, 3), 1), ((0, 3), 2), ((2, 3), 2)],
    "returns_to_first_shape": [((2, 3), 2), ((4, 3), 4), ((2, 3), 2)],
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_update_shapes_seen_merges_observations_into_static_batch_and_dynamic_axes(ref, fast, name):
    observations = SEQUENCES[name]

    def run(impl):
        first = spec_from(impl, *observations[0])
        snaps = [spec_snap(impl, first)]
        for shape, batch_size in observations[1:]:
            other = spec_from(impl, shape, batch_size)
            first.update_shapes_seen(other)
            snaps.append((spec_snap(impl, first), spec_snap(impl, other)))
        return snaps

    assert run(fast) == run(ref)


@pytest.mark.parametrize(
    ("name", "expected_shape"),
    [
        ("batch_axis", ["batch0", 3]),
        ("batch_and_dynamic", ["batch0", "dim1"]),
        ("stacked_batch_multiplier_two", ["batch0", 3]),
        ("non_integer_multiplier_is_dynamic", ["dim0", 2]),
        ("unknown_batch_size_is_dynamic", ["dim0", 3]),
        ("batch_then_changed_multiplier_becomes_dynamic", ["dim0", 3]),
        ("three_axes", ["batch0", "dim1", "batch2", 4]),
    ],
)
def test_update_shapes_seen_names_batch_axes_batchN_and_dynamic_axes_dimN(ref, fast, name, expected_shape):
    observations = SEQUENCES[name]
    for impl in (ref, fast):
        spec = spec_from(impl, *observations[0])
        for shape, batch_size in observations[1:]:
            spec.update_shapes_seen(spec_from(impl, shape, batch_size))
        assert spec.shape == expected_shape


def test_update_shapes_seen_tracks_min_and_max_per_axis(ref, fast):
    for impl in (ref, fast):
        spec = spec_from(impl, (4, 5), 4)
        for shape, batch_size in [((2, 9), 2), ((8, 1), 8)]:
            spec.update_shapes_seen(spec_from(impl, shape, batch_size))
        assert (spec.min_shape, spec.max_shape) == ([2, 1], [8, 9])
        assert canon(spec._bs_multipliers) == canon([1.0, NAN])


def test_update_shapes_seen_with_different_ranks_raises_value_error(ref, fast):
    exc = assert_raises_alike(
        lambda: spec_from(ref, (2, 3)).update_shapes_seen(spec_from(ref, (2,))),
        lambda: spec_from(fast, (2, 3)).update_shapes_seen(spec_from(fast, (2,))),
    )
    assert isinstance(exc, ValueError)
    fast_exc = pytest.raises(ValueError, spec_from(fast, (2, 3)).update_shapes_seen, spec_from(fast, (2,)))
    assert str(fast_exc.value) == str(exc) == "Tensors must have the same rank"


def test_update_shapes_seen_between_two_merged_specs_keeps_equal_symbolic_axes_untouched(ref, fast):
    def run(impl):
        left = make_spec(impl, ["batch0", 3], [2, 3], [4, 3], multipliers=[1.0, NAN])
        right = make_spec(impl, ["batch0", 5], [1, 5], [16, 5], multipliers=[1.0, NAN])
        left.update_shapes_seen(right)
        return spec_snap(impl, left), spec_snap(impl, right)

    assert run(fast) == run(ref)
    assert run(ref)[0]["fields"] == canon([["batch0", "dim1"], [2, 3], [4, 5], torch.float32, [1.0, NAN]])


def test_update_shapes_seen_symbolic_against_concrete_axis(ref, fast):
    def run(impl):
        merged = make_spec(impl, ["batch0", 3], [2, 3], [4, 3], multipliers=[1.0, NAN])
        merged.update_shapes_seen(spec_from(impl, (8, 3), 8))
        merged.update_shapes_seen(spec_from(impl, (3, 3), 1))
        return spec_snap(impl, merged)

    assert run(fast) == run(ref)


# ------------------------------------------------------------------------------------------- batch axes


@pytest.mark.parametrize(
    ("shape", "min_shape", "max_shape", "multipliers"),
    [
        ([2, 3], [2, 3], [2, 3], [1.0, 1.5]),
        (["batch0", 3], [2, 3], [8, 3], [1.0, 1.5]),
        (["batch0", "dim1", "batch2"], [2, 1, 4], [8, 9, 16], [1.0, NAN, 2.0]),
        (["batch0"], [0], [0], [3.0]),
        (["dim0", 4], [1, 4], [9, 4], [NAN, 2.0]),
        (["batchX", "dimension", "seq"], [1, 2, 3], [4, 5, 6], [2.0, NAN, NAN]),
        ([], [], [], []),
        (["batch0"], [1], [1], [0.5]),
    ],
)
def test_batch_axis_queries_agree(ref, fast, shape, min_shape, max_shape, multipliers):
    def run(impl):
        spec = make_spec(impl, shape, min_shape, max_shape, multipliers=multipliers)
        return spec_snap(impl, spec), outcome(lambda: spec.get_batch_axis_multipliers())

    assert run(fast) == run(ref)


def test_batch_axis_multipliers_map_batch_axes_to_int_multipliers(ref, fast):
    for impl in (ref, fast):
        spec = make_spec(
            impl, ["batch0", "dim1", "batch2", 5], [1, 1, 2, 5], [8, 9, 16, 5], multipliers=[1.0, NAN, 2.0, 5.0]
        )
        multipliers = spec.get_batch_axis_multipliers()
        assert multipliers == {0: 1, 2: 2}
        assert all(type(v) is int for v in multipliers.values())
        assert (spec.get_max_batch_size(), spec.get_min_batch_size()) == (16, 1)


def test_max_batch_size_is_one_and_min_batch_size_none_without_batch_axes(ref, fast):
    for impl in (ref, fast):
        spec = make_spec(impl, ["dim0", 3], [5, 3], [9, 3])
        assert (spec.get_max_batch_size(), spec.get_min_batch_size()) == (1, None)


@pytest.mark.parametrize(
    ("shape", "min_shape", "multipliers"),
    [
        (["batch0", 3], ["x", 3], [1.0, 1.5]),  # min_shape holds a string: the query does not read it
        (["batch0", 3], [2, 3], [1.0, "x"]),  # a non-batch axis's multiplier: not read either
        ([2.5, "batch1"], [2, 3], [NAN, 2.0]),  # a float size is no batch axis
        ([2, 3], [2, 3], []),  # no batch axis: the multipliers are not read
    ],
)
def test_batch_axis_multipliers_read_only_the_shape_and_the_batch_axes_multipliers(
    ref, fast, shape, min_shape, multipliers
):
    def run(impl):
        spec = make_spec(impl, shape, min_shape, [9] * len(shape), multipliers=multipliers)
        return outcome(spec.get_batch_axis_multipliers)

    assert run(fast) == run(ref)
    assert run(fast)[0] == "ok"


def test_batch_axis_with_nan_multiplier_cannot_be_converted(ref, fast):
    assert_raises_alike(
        lambda: make_spec(ref, ["batch0"], [1], [2]).get_batch_axis_multipliers(),
        lambda: make_spec(fast, ["batch0"], [1], [2]).get_batch_axis_multipliers(),
    )


@pytest.mark.parametrize(
    "shape", [[1, 2], ["batch0"], ["dim0"], ["batchy", "dimx"], ["seq"], ["xbatch"], ["Batch0"], [], [1, "dim1"]]
)
def test_has_batch_axis_and_has_dynamic_axis_check_string_prefixes(ref, fast, shape):
    def run(impl):
        spec = make_spec(impl, shape, [1] * len(shape), [1] * len(shape))
        return spec.has_batch_axis(), spec.has_dynamic_axis()

    assert run(fast) == run(ref)


# ------------------------------------------------------------------------------------------- matches


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ([1, 2], [1, 2]),
        ([1, 2], [1, "dim1"]),
        ([1, 2], [1, "batch1"]),
        (["batch0", 2], [5, 2]),
        ([1, 2], [1, 3]),
        ([1, 2], [1, 2, 3]),
        ([], []),
        ([], [1]),
        (["dim0"], ["batch0"]),
    ],
)
def test_matches_compares_concrete_dims_of_equal_rank(ref, fast, left, right):
    def run(impl):
        lhs = make_spec(impl, left, [1] * len(left), [1] * len(left))
        rhs = make_spec(impl, right, [1] * len(right), [1] * len(right))
        return lhs.matches(rhs), rhs.matches(lhs)

    assert run(fast) == run(ref)


# ------------------------------------------------------------------------------------------- serialisation


def test_to_dict_names_the_type_and_holds_copies_of_the_fields(ref, fast):
    def run(impl):
        spec = make_spec(impl, ["batch0", 3], [1, 3], [8, 3], torch.int8, [1.0, NAN])
        data = spec.to_dict()
        result = canon(data)
        data["shape"].append(99)
        data["min_shape"][0] = -1
        return result, list(data), spec_snap(impl, spec)

    assert run(fast) == run(ref)
    assert run(ref)[1] == ["type", "shape", "min_shape", "max_shape", "dtype", "_bs_multipliers"]


def test_from_dict_round_trips_to_dict(ref, fast):
    def run(impl):
        spec = spec_from(impl, (2, 5), 2)
        spec.update_shapes_seen(spec_from(impl, (4, 7), 4))
        again = impl.tensor_spec.TensorSpec.from_dict(spec.to_dict())
        again.shape[0] = "changed"
        return spec_snap(impl, spec), spec_snap(impl, impl.tensor_spec.TensorSpec.from_dict(spec.to_dict()))

    assert run(fast) == run(ref)
    assert run(ref)[0] == run(ref)[1]


def test_from_dict_consumes_the_type_key_of_its_argument(ref, fast):
    def run(impl):
        data = make_spec(impl, [1], [1], [1]).to_dict()
        impl.tensor_spec.TensorSpec.from_dict(data)
        return sorted(data)

    assert run(fast) == run(ref)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("type", "Other"),
        lambda d: d.pop("type"),
        lambda d: d.__setitem__("extra", 1),
        lambda d: d.pop("dtype"),
    ],
    ids=["wrong_type", "missing_type", "extra_key", "missing_field"],
)
def test_from_dict_rejects_malformed_dicts(ref, fast, mutate):
    def run(impl):
        data = make_spec(impl, [1], [1], [1]).to_dict()
        mutate(data)
        return impl.tensor_spec.TensorSpec.from_dict(data)

    assert_raises_alike(lambda: run(ref), lambda: run(fast))


@pytest.mark.parametrize("value", [0, 1, -3, 2.0, 2.5, -0.5, NAN, 1e300, True, 0.0, 3.0000000001])
def test_is_int_checks_the_value_not_the_type(ref, fast, value):
    assert outcome(lambda: fast.tensor_spec.TensorSpec.is_int(value)) == outcome(
        lambda: ref.tensor_spec.TensorSpec.is_int(value)
    )


@pytest.mark.parametrize("value", [math.inf, -math.inf, "1", None])
def test_is_int_raises_for_infinities_and_non_numbers(ref, fast, value):
    assert_raises_alike(
        lambda: ref.tensor_spec.TensorSpec.is_int(value), lambda: fast.tensor_spec.TensorSpec.is_int(value)
    )


# ------------------------------------------------------------------------------------------- live lists


def test_fields_return_the_same_list_object_on_every_access(ref, fast):
    for impl in (ref, fast):
        spec = spec_from(impl, (2, 3), 2)
        for name in ("shape", "min_shape", "max_shape", "_bs_multipliers"):
            assert getattr(spec, name) is getattr(spec, name)


def test_item_assignment_on_a_field_changes_what_the_spec_reports(ref, fast):
    def run(impl):
        spec = spec_from(impl, (2, 3), 2)
        before = spec_snap(impl, spec)
        spec.shape[1] = "dim1"
        spec.shape[0] = "batch0"
        spec.max_shape[0] = 32
        spec.min_shape.append(0)
        return before, spec_snap(impl, spec)

    assert run(fast) == run(ref)
    assert run(ref)[1]["describe"][0] == "shape=[batch0, dim1]"


def test_assigning_a_new_list_changes_rank_equality_and_hash_class(ref, fast):
    def run(impl):
        spec = spec_from(impl, (2, 3))
        rank2 = spec_from(impl, (5, 5))
        scalar = spec_from(impl, ())
        spec.shape = []
        return spec_snap(impl, spec), spec == rank2, spec == scalar, hash(spec) == hash(scalar)

    assert run(fast) == run(ref)
    assert run(ref)[1:] == (False, True, True)


def test_list_passed_to_the_constructor_stays_live(ref, fast):
    def run(impl):
        shape = [2, 3]
        spec = make_spec(impl, [0], [0], [0])
        spec.shape = shape
        shape.append(4)
        direct = [1]
        other = impl.tensor_spec.TensorSpec(
            shape=direct, min_shape=[1], max_shape=[1], dtype=None, _bs_multipliers=[NAN]
        )
        direct[0] = "dim0"
        return spec_snap(impl, spec), spec_snap(impl, other)

    assert run(fast) == run(ref)


def test_mutating_multipliers_changes_batch_axis_multipliers(ref, fast):
    def run(impl):
        spec = spec_from(impl, (4, 3))
        spec.shape[0] = "batch0"
        spec._bs_multipliers[0] = 2.0
        spec.dtype = torch.int16
        return spec_snap(impl, spec)

    assert run(fast) == run(ref)
    assert run(ref)["batch_axis_multipliers"] == ("ok", canon({0: 2}))


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_spec_survives_pickle_deepcopy_and_copy(ref, fast, how):
    def run(impl):
        spec = spec_from(impl, (2, 5), 2)
        spec.update_shapes_seen(spec_from(impl, (4, 7), 4))
        again = {"pickle": lambda s: pickle.loads(pickle.dumps(s)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how](
            spec
        )
        again.shape.append(1)
        return spec_snap(impl, spec), spec_snap(impl, again), type(again).__name__

    assert run(fast) == run(ref)


def test_update_shapes_seen_with_a_merged_other_takes_its_min_and_max_bounds(ref, fast):
    def run(impl):
        spec = spec_from(impl, (4, 3), 4)
        merged_other = make_spec(impl, ["batch0", "dim1"], [1, 1], [16, 12], multipliers=[1.0, NAN])
        spec.update_shapes_seen(merged_other)
        return spec_snap(impl, spec)

    assert run(fast) == run(ref)
    assert run(ref)["fields"] == canon([["batch0", "dim1"], [1, 1], [16, 12], torch.float32, [1.0, NAN]])
