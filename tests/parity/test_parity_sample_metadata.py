"""Parity of ``SampleMetadata`` and ``batch_tensor``: construction, factories, rendering, JSON, equality and hashing,
LLM phases, batch size sources, shape merging, batching, serialisation and live tensor specs."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import pathlib
import pickle
from collections import UserDict
from types import MappingProxyType

import pytest
import torch
from parity import (
    FrozenPoint,
    Pair,
    Point,
    TensorHolder,
    arange_tensor,
    assert_no_aliasing,
    assert_no_shared_containers,
    assert_raises_alike,
    assert_same_eq_hash_classes,
    assert_same_tree,
    canon,
    md_snap,
)

NAN = float("nan")
t = arange_tensor


def SM(impl):  # noqa: N802 - reads like the class
    return impl.sample_metadata.SampleMetadata


def from_inputs(impl, inputs, **kwargs):
    return SM(impl).from_inputs(inputs, **kwargs)


def from_outputs(impl, outputs, **kwargs):
    return SM(impl).from_outputs(outputs, **kwargs)


def assert_same_md(ref, fast, build, factory="from_inputs", **kwargs):
    """Build fresh inputs for each implementation, apply the factory, compare snapshots; return both metadata."""
    ref_md = getattr(SM(ref), factory)(build(), **kwargs)
    fast_md = getattr(SM(fast), factory)(build(), **kwargs)
    assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
    return ref_md, fast_md


@dataclasses.dataclass
class Step:
    input_ids: object
    cache_position: object


class Color(enum.Enum):
    RED = 1
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Unhashable) and other.value == self.value

    def __repr__(self):
        return f"Unhashable({self.value!r})"


class Opaque:
    def __repr__(self):
        return "Opaque<fixed>"


def shared_function():
    return None


# ------------------------------------------------------------------------------------------- inputs

DESCRIBE_CASES = {
    "docstring_example": lambda: {"t": t((2, 3)), "values": (1, 2, 3, t((2, 2))), "other": "abc"},
    "empty_dict": lambda: {},
    "empty_nested": lambda: {"a": {}, "b": [], "c": ()},
    "tensor_root": lambda: t((2, 3)),
    "int_root": lambda: 5,
    "none_root": lambda: None,
    "list_root": lambda: [t((1,)), 3],
    "tuple_root": lambda: (t((1,)), {"a": t((2, 2))}),
    "dataclass_root": lambda: Point(x=t((2,)), y="s"),
    "numeric_values_column": lambda: {"a": 1, "b": 2.5, "c": "3.50", "d": "1_000", "e": -7, "f": "1e3"},
    "numeric_semantic_paths": lambda: [t((1,)), t((2,)), 3, 4.25],
    "text_values": lambda: {"s": "x\ny", "p": " pad ", "e": "", "tab": "a\tb", "u": "zażółć", "w": "日本"},
    "mixed_values": lambda: {
        "n": None,
        "b": True,
        "f": NAN,
        "inf": float("inf"),
        "set": {3, 1, 2},
        "fs": frozenset({"a"}),
        "bytes": b"x",
        "c": 1 + 2j,
        "neg0": -0.0,
        "big": 10**30,
    },
    "dict_keys": lambda: {
        7: t((1,)),
        (1, "a"): 2,
        True: t((2, 2)),
        None: "n",
        "my key": 1,
        "": 0,
        2.5: [t((3,))],
        "class": "kw",
    },
    "nested_containers": lambda: {
        "d": {"k": [t((1,)), (t((2, 2)), {"x": 1})]},
        "ud": UserDict({"u": t((3,)), "v": "w"}),
        "nt": Pair(t((1,)), 2),
        "dc": Point(x=t((1, 2)), y=[3]),
        "size": torch.Size([2, 3]),
    },
    "dtypes": lambda: {
        str(dtype): t((2,) * rank, dtype)
        for rank, dtype in enumerate(
            [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.bool, torch.uint8]
        )
    },
    "ranks_and_zero_dims": lambda: {"r0": t(()), "r1_empty": t((0,)), "r5": t((1, 2, 1, 2, 1)), "r2": t((3, 0))},
    "json_specials": lambda: {
        "path": pathlib.PurePosixPath("/tmp/x"),
        "color": Color.RED,
        "green": Color.GREEN,
        "level": Level.LOW,
        "when": datetime.datetime(2020, 1, 2, 3, 4, 5),
        "opaque": Opaque(),
        "fn": shared_function,
        "mapping": MappingProxyType({"k": [1, {2}]}),
        "unhashable": Unhashable([1]),
    },
    "long_value": lambda: {"long": "x" * 150, "t": t((1,))},
    "cache_position": lambda: {"input_ids": t((1, 4)), "cache_position": torch.arange(4)},
}


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("factory", ["from_inputs", "from_outputs"])
@pytest.mark.parametrize("case", sorted(DESCRIBE_CASES))
def test_factories_describe_json_and_properties_match(ref, fast, case, factory, strict):
    assert_same_md(ref, fast, DESCRIBE_CASES[case], factory, strict=strict)


def test_docstring_example_renders_the_documented_tables(ref, fast):
    ref_md, fast_md = assert_same_md(ref, fast, DESCRIBE_CASES["docstring_example"], strict=True)
    expected = (
        "Tensors:\n"
        "╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕\n"
        "│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │\n"
        "╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡\n"
        "│ t             │ t               │ [2, 3]  │ [2, 3]      │ [2, 3]      │ torch.float32 │\n"
        "├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤\n"
        "│ values[3]     │ ('values', 3)   │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │\n"
        "╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛\n"
        "Other:\n"
        "╒═══════════════╤═════════════════╤═════════╕\n"
        "│ Access Path   │ Semantic Path   │ Value   │\n"
        "╞═══════════════╪═════════════════╪═════════╡\n"
        "│ values[0]     │ ('values', 0)   │ 1       │\n"
        "├───────────────┼─────────────────┼─────────┤\n"
        "│ values[1]     │ ('values', 1)   │ 2       │\n"
        "├───────────────┼─────────────────┼─────────┤\n"
        "│ values[2]     │ ('values', 2)   │ 3       │\n"
        "├───────────────┼─────────────────┼─────────┤\n"
        "│ other         │ other           │ abc     │\n"
        "╘═══════════════╧═════════════════╧═════════╛\n"
    )
    assert repr(fast_md) == repr(ref_md) == expected
    assert str(fast_md) == "Tensors: t, values[3] Others: values[0]=1, values[1]=2, values[2]=3, other=abc"


def test_medium_level_uses_the_simple_table_format(ref, fast):
    for impl in (ref, fast):
        md = from_inputs(impl, {"ids": t((2, 3))})
        medium = md.describe(impl.tensor_spec.InfoLevel.MEDIUM)
        assert medium == (
            "Tensors:\n"
            "Access Path    Semantic Path    Shape\n"
            "-------------  ---------------  -------\n"
            "ids            ids              [2, 3]\n"
        )


def test_empty_metadata_renders_empty_sections(ref, fast):
    for impl in (ref, fast):
        md = from_inputs(impl, {}, strict=True)
        assert str(md) == "Tensors: "
        assert repr(md) == md.describe(impl.tensor_spec.InfoLevel.MEDIUM) == "Tensors:\n\n"


def test_non_container_outputs_are_located_at_output(ref, fast):
    for impl in (ref, fast):
        assert str(from_outputs(impl, t((2,)))) == "Tensors: output"
        assert str(from_outputs(impl, None, strict=True)) == "Tensors:  Others: output=None"
        assert str(from_outputs(impl, (t((1,)), 2), strict=True)) == "Tensors: output[0] Others: output[1]=2"
        assert str(from_inputs(impl, t((2,)))) == "Tensors: "


def test_to_json_dict_is_json_ready(ref, fast):
    def run(impl):
        inputs = {"x": t((2, 3)), 5: {"s": {1, 2}, (1, 2): Color.RED}, "p": pathlib.PurePosixPath("/a")}
        md = from_inputs(impl, inputs, strict=True)
        md.update_shapes_seen(from_inputs(impl, {"x": t((4, 3)), 5: {}, "p": None}, strict=True))
        return md.to_json_dict()

    assert canon(run(fast)) == canon(run(ref))
    assert run(ref) == {
        "tensor_data": [
            {
                "access_path": "x",
                "semantic_path": "x",
                "shape": ["dim0", 3],
                "min_shape": [2, 3],
                "max_shape": [4, 3],
                "dtype": "torch.float32",
            }
        ],
        "other_data": [
            {"access_path": '[5]["s"]', "semantic_path": [5, "s"], "value": [1, 2]},
            {"access_path": "[5][(1, 2)]", "semantic_path": [5, [1, 2]], "value": 1},
            {"access_path": "p", "semantic_path": "p", "value": "/a"},
        ],
        "strict": True,
        "llm_phase": None,
    }


def test_json_dict_and_describe_of_pairs_from_several_walks_show_each_pair_s_own_path(ref, fast):
    """A metadata built from the pairs of several walks (inputs and outputs whose paths sit at the same places
    of their own walks, under different keys) renders each pair's path, not its neighbour's."""

    def run(impl):
        a = from_inputs(impl, {"a": {"x": t((2,))}, "n": {"k": 1}}, strict=True)
        b = from_inputs(impl, {"b": {"y": t((3,))}, "m": {"j": 2}}, strict=True)
        out = from_outputs(impl, {"c": {"z": t((4,))}})
        tensors = [*a.tensor_data, *b.tensor_data, *out.tensor_data]
        md = SM(impl)(tensors, [*a.other_data, *b.other_data], strict=True)
        full = impl.tensor_spec.InfoLevel.FULL
        return md.to_json_dict(), md.describe(full)

    fast_json, fast_text = run(fast)
    ref_json, ref_text = run(ref)
    assert canon(fast_json) == canon(ref_json)
    assert fast_text == ref_text
    assert [r["access_path"] for r in ref_json["tensor_data"]] == ['a["x"]', 'b["y"]', 'output["c"]["z"]']
    assert [r["semantic_path"] for r in ref_json["other_data"]] == [["n", "k"], ["m", "j"]]


def test_registered_user_types_are_described_by_public_fields(ref, fast, registry):
    class State:
        label = "class-level"

        def __init__(self, scale):
            self.weights = t((2, scale))
            self.count = scale
            self._cache = "hidden"

        @property
        def doubled(self):
            return self.count * 2

    class TensorBag:
        def __init__(self):
            self.a = t((1,))
            self.b = "not a tensor"

    registry.register(State)
    registry.register(TensorBag, only_tensors=True)
    for strict in (False, True):
        ref_md, _ = assert_same_md(ref, fast, lambda: {"state": State(3), "bag": [TensorBag()], "n": 1}, strict=strict)
    assert str(ref_md) == ("Tensors: state.weights, bag[0].a Others: state.count=3, state.label=class-level, n=1")


def test_ignored_types_are_absent_from_metadata(ref, fast, registry):
    class Handle:
        def __init__(self):
            self.t = t((1,))

    registry.ignore(Handle)
    ref_md, _ = assert_same_md(ref, fast, lambda: {"h": Handle(), "x": [Handle(), t((2,))]}, strict=True)
    assert str(ref_md) == "Tensors: x[1]"


# ------------------------------------------------------------------------------------------- construction


def _direct(impl, strict=False, llm_phase=None):
    locator = impl.locator
    dict_type = locator.ObjectType.DICT
    spec = impl.tensor_spec.TensorSpec.from_tensor(t((2, 3)), 2)
    x = locator.Locator((("x", dict_type),))
    n = locator.Locator((("n", dict_type),))
    if llm_phase is None:
        md = SM(impl)(((x, spec),), ((n, 5),), strict)
    else:
        md = SM(impl)(((x, spec),), ((n, 5),), strict, llm_phase)
    return md, spec


@pytest.mark.parametrize(("strict", "llm_phase"), [(False, None), (True, None), (True, "prefill"), (False, "decode")])
def test_constructor_keeps_tensor_data_other_data_strict_and_llm_phase(ref, fast, strict, llm_phase):
    ref_md, _ = _direct(ref, strict, llm_phase)
    fast_md, _ = _direct(fast, strict, llm_phase)
    assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
    assert (fast_md.strict, fast_md.llm_phase) == (strict, llm_phase or "")


def test_constructor_defaults_to_non_strict_without_llm_phase(ref, fast):
    for impl in (ref, fast):
        md = SM(impl)((), ())
        assert (md.strict, md.llm_phase, md.tensor_specs, len(md.tensor_data), len(md.other_data)) == (
            False,
            "",
            [],
            0,
            0,
        )


def test_metadata_holds_the_given_tensor_spec_objects(ref, fast):
    for impl in (ref, fast):
        md, spec = _direct(impl)
        assert md.tensor_specs[0] is spec
        assert md.tensor_data[0][1] is spec


def test_factories_accept_positional_strict_and_batch_size(ref, fast):
    ref_md = SM(ref).from_inputs({"x": t((4, 2)), "n": 1}, True, 2)
    fast_md = SM(fast).from_inputs({"x": t((4, 2)), "n": 1}, True, 2)
    assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
    assert canon(fast_md.tensor_specs[0]._bs_multipliers) == canon([2.0, 1.0])
    ref_out = SM(ref).from_outputs([t((4, 2)), 1], True, 4)
    fast_out = SM(fast).from_outputs([t((4, 2)), 1], True, 4)
    assert md_snap(fast, fast_out) == md_snap(ref, ref_out)


def test_tensor_data_and_other_data_pair_locators_with_specs_and_values(ref, fast):
    for impl in (ref, fast):
        md = from_inputs(impl, {"a": t((1,)), "b": [2, t((2, 2))], "c": "s"}, strict=True)
        assert [(str(loc), spec.shape) for loc, spec in md.tensor_data] == [("a", [1]), ("b[1]", [2, 2])]
        assert [(str(loc), value) for loc, value in md.other_data] == [("b[0]", 2), ("c", "s")]
        assert [spec.shape for spec in md.tensor_specs] == [[1], [2, 2]]


# ------------------------------------------------------------------------------------------- batch size sources


def test_batch_size_comes_from_argument_else_global_context_else_unknown(ref, fast):
    def run(impl):
        gc = impl.global_context
        results = []
        with gc.global_context:
            gc.global_context.set(gc.BATCH_SIZE_KEY, 4)
            results.append(from_inputs(impl, {"x": t((8, 3))}))
            results.append(from_inputs(impl, {"x": t((8, 3))}, batch_size=2))
            results.append(from_inputs(impl, {"x": t((8, 3))}, batch_size=0))
            results.append(from_outputs(impl, t((8, 3))))
            with gc.global_context:
                gc.global_context[gc.BATCH_SIZE_KEY] = 8
                results.append(from_inputs(impl, {"x": t((8, 3))}))
            results.append(from_inputs(impl, {"x": t((8, 3))}))
        results.append(from_inputs(impl, {"x": t((8, 3))}))
        return [canon(md.tensor_specs[0]._bs_multipliers) for md in results]

    assert run(fast) == run(ref)
    assert run(ref) == [
        canon([2.0, 0.75]),
        canon([4.0, 1.5]),
        canon([2.0, 0.75]),
        canon([2.0, 0.75]),
        canon([1.0, 0.375]),
        canon([2.0, 0.75]),
        canon([NAN, NAN]),
    ]


def test_global_context_batch_size_drives_batch_axis_detection(ref, fast):
    def run(impl):
        gc = impl.global_context
        samples = []
        for batch_size in (2, 4):
            with gc.global_context:
                gc.global_context.set(gc.BATCH_SIZE_KEY, batch_size)
                samples.append(from_inputs(impl, {"x": t((batch_size, 3)), "y": t((3 * batch_size,))}))
        samples[0].update_shapes_seen(samples[1])
        return md_snap(impl, samples[0])

    assert run(fast) == run(ref)
    assert [spec["str"] for spec in run(ref)["tensor_specs"]] == ["shape=[batch0, 3]", "shape=[batch0]"]


def test_global_context_module_exposes_a_stack_of_key_value_contexts(ref, fast):
    def run(impl):
        module = impl.global_context
        gc = module.global_context
        log = [module.BATCH_SIZE_KEY, gc.get("k"), gc.get("k", "default")]
        gc.set("k", 1)
        with gc as entered:
            log.append(entered is gc)
            gc["k"] = 2
            log.append((gc.get("k"), gc["k"]))
        log.append(gc["k"])
        gc.clear()
        log.append(gc.get("k"))
        try:
            gc["missing"]
        except KeyError as exc:
            log.append(("KeyError", exc.args))
        return log

    assert run(fast) == run(ref) == ["batch_size", None, "default", True, (2, 2), 1, None, ("KeyError", ("missing",))]


# ------------------------------------------------------------------------------------------- equality and hash


def _eq_inputs():
    shared_nan = float("nan")
    return [
        {"a": 1},
        {"a": 2},
        {"a": 1.0},
        {"a": True},
        {"a": "1"},
        {"a": 1, "b": 1},
        {"b": 1, "a": 1},
        {"a": None},
        {"a": {1, 2}},
        {"a": {2, 1}},
        {"a": frozenset({1, 2})},
        {"a": {1, frozenset({2})}},
        {"a": MappingProxyType({"x": [1, 2]})},
        {"a": MappingProxyType({"x": [1, 2]})},
        {"a": MappingProxyType({"x": [1, 3]})},
        {"a": [1]},
        {"a": (1,)},
        {"a": Unhashable(1)},
        {"a": Unhashable(1)},
        {"a": Unhashable(2)},
        {"a": {"k": 1}.keys()},
        {"a": {"k": 2}.keys()},
        {"a": bytearray(b"x")},
        {"a": bytearray(b"x")},
        {"a": shared_nan},
        {"a": shared_nan},
        {"a": float("nan")},
        {"a": {shared_nan}},
        {"a": {shared_nan}},
        {"a": t((2,))},
        {"a": t((3,))},
        {"a": t((2, 2))},
        {"a": t((2,)), "b": 1},
        {"a": t((2,)), "b": 2},
        {"b": 2, "a": t((5,))},
        {},
        {"a": Color.RED},
        {"a": Color.RED},
        {"a": Level.LOW},
    ]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "nonstrict"])
def test_equality_and_hash_classes_over_many_samples(ref, fast, strict):
    ref_inputs, fast_inputs = _eq_inputs(), _eq_inputs()
    ref_mds = [from_inputs(ref, x, strict=strict) for x in ref_inputs] + [None, 1, "Tensors: "]
    fast_mds = [from_inputs(fast, x, strict=strict) for x in fast_inputs] + [None, 1, "Tensors: "]
    assert_same_eq_hash_classes(ref_mds, fast_mds)


def test_strict_equality_compares_other_data_by_value_regardless_of_order(ref, fast):
    for impl in (ref, fast):
        strict = [from_inputs(impl, x, strict=True) for x in _eq_inputs()]
        assert strict[0] == strict[2] == strict[3] and strict[0] != strict[1] and strict[0] != strict[4]
        assert strict[5] == strict[6] and hash(strict[5]) == hash(strict[6])
        assert strict[8] == strict[9] == strict[10] and hash(strict[8]) == hash(strict[10])
        assert strict[12] == strict[13] != strict[14] and hash(strict[12]) == hash(strict[13])
        assert strict[15] == strict[16]
        assert strict[17] == strict[18] != strict[19] and hash(strict[17]) == hash(strict[18])
        assert strict[20] == strict[21] and hash(strict[20]) == hash(strict[21])


def test_nan_other_data_is_equal_only_to_the_same_nan_object(ref, fast):
    for impl in (ref, fast):
        strict = [from_inputs(impl, x, strict=True) for x in _eq_inputs()]
        assert strict[24] == strict[25] and hash(strict[24]) == hash(strict[25])
        assert strict[24] != strict[26]
        assert strict[27] == strict[28]


def test_tensors_compare_by_rank_only(ref, fast):
    for impl in (ref, fast):
        mds = [from_inputs(impl, x) for x in ({"a": t((2,))}, {"a": t((7,))}, {"a": t((2, 2))}, {"b": t((2,))})]
        assert mds[0] == mds[1] and hash(mds[0]) == hash(mds[1])
        assert mds[0] != mds[2] and mds[0] != mds[3]


def test_non_strict_metadata_ignores_other_data_and_strict_flag_is_not_compared(ref, fast):
    def run(impl):
        inputs = {"a": t((2,)), "b": 1}
        mds = [
            from_inputs(impl, inputs),
            from_inputs(impl, {"a": t((3,)), "b": 2}),
            from_inputs(impl, inputs, strict=True),
            from_inputs(impl, {"a": t((2,))}, strict=True),
        ]
        return mds

    assert_same_eq_hash_classes(run(ref), run(fast))
    mds = run(ref)
    assert mds[0] == mds[1] == mds[3] != mds[2]


def test_directly_constructed_unhashable_dict_values_hash_consistently(ref, fast):
    def build(impl):
        locator = impl.locator
        key = locator.Locator((("d", locator.ObjectType.DICT),))
        values = [{"k": [1, 2]}, {"k": [1, 2]}, {"k": [1, 3]}, {"k": {"n": {1}}}, {"k": {"n": {1}}}, [1, {2}], [1, {2}]]
        return [SM(impl)((), ((key, value),), True) for value in values]

    assert_same_eq_hash_classes(build(ref), build(fast))
    mds = build(fast)
    assert mds[0] == mds[1] and hash(mds[0]) == hash(mds[1]) and mds[3] == mds[4] and hash(mds[5]) == hash(mds[6])


def test_metadata_is_never_equal_to_other_types(ref, fast):
    for impl in (ref, fast):
        md = from_inputs(impl, {"a": t((1,))})
        assert md != None and md != "Tensors: a" and md != md.tensor_data  # noqa: E711
        assert not (md == {"a": t((1,))})


# ------------------------------------------------------------------------------------------- LLM phase


def llm_inputs(cache_position, seq=4):
    return {"input_ids": t((1, seq)), "cache_position": cache_position, "past": [t((1, 2, seq))], "use_cache": True}


def test_cache_position_starting_at_zero_is_prefill_otherwise_decode(ref, fast):
    cases = [torch.arange(4), torch.tensor([7]), torch.tensor([0.0, 1.0]), torch.tensor([0, 9]), torch.tensor([1, 0])]
    for impl in (ref, fast):
        phases = [from_inputs(impl, llm_inputs(pos.clone())).llm_phase for pos in cases]
        assert phases == ["prefill", "decode", "prefill", "prefill", "decode"]
    for pos in cases:
        assert_same_md(ref, fast, lambda pos=pos: llm_inputs(pos.clone()), strict=True)


def test_llm_phase_replaces_all_else_in_equality_and_hash(ref, fast):
    def build(impl):
        return [
            from_inputs(impl, llm_inputs(torch.arange(4))),
            from_inputs(impl, {"cache_position": torch.tensor([0]), "other": t((1, 2, 3))}),
            from_inputs(impl, llm_inputs(torch.tensor([4]), seq=1)),
            from_inputs(impl, {"cache_position": torch.tensor([5])}, strict=True),
            from_inputs(impl, {"input_ids": t((1, 4)), "cache_position": t((4,)), "past": [t((1, 2, 4))]}),
            from_inputs(impl, {"input_ids": t((1, 4)), "past": [t((1, 2, 4))], "use_cache": True}),
            from_inputs(impl, {"input_ids": t((1, 4)), "cache_position": None, "past": [t((1, 2, 4))]}),
        ]

    assert_same_eq_hash_classes(build(ref), build(fast))
    mds = build(ref)
    assert mds[0] == mds[1] and mds[2] == mds[3] and mds[0] != mds[2]


def test_cache_position_none_or_nested_under_another_root_gives_no_phase(ref, fast):
    for build in (
        lambda: {"cache_position": None, "x": t((1,))},
        lambda: {"x": {"cache_position": torch.tensor([0])}},
        lambda: {"cache_positions": torch.tensor([0])},
    ):
        ref_md, _ = assert_same_md(ref, fast, build, strict=True)
        assert ref_md.llm_phase == ""


def test_cache_position_phase_comes_from_the_last_leaf_under_the_cache_position_root(ref, fast):
    ref_md, _ = assert_same_md(ref, fast, lambda: {"cache_position": [torch.tensor([3]), torch.tensor([0])]})
    assert ref_md.llm_phase == "prefill"
    ref_md, _ = assert_same_md(ref, fast, lambda: {"cache_position": {"a": torch.tensor([0]), "b": torch.tensor([2])}})
    assert ref_md.llm_phase == "decode"


def test_cache_position_key_built_at_run_time_sets_the_phase(ref, fast):
    # the core skips the comparison for keys whose cached hash differs from "cache_position"'s: a
    # key equal to it but not the interned literal (its hash cached by the dict) still counts
    def build():
        key = "".join(["cache_", "position"])
        return {"input_ids": t((1, 2)), key: torch.tensor([0]), "cache_positiom": torch.tensor([3])}

    ref_md, _ = assert_same_md(ref, fast, build)
    assert ref_md.llm_phase == "prefill"


def test_cache_position_as_a_dataclass_field_of_the_root_sets_the_phase(ref, fast):
    ref_md, _ = assert_same_md(ref, fast, lambda: Step(input_ids=t((1, 2)), cache_position=torch.tensor([2])))
    assert ref_md.llm_phase == "decode"


@pytest.mark.parametrize(
    "cache_position",
    [lambda: torch.tensor(0), lambda: torch.tensor([], dtype=torch.int64), lambda: 5, lambda: [0, 1]],
    ids=["scalar_tensor", "empty_tensor", "int", "list_of_ints"],
)
def test_unindexable_cache_position_raises_like_the_reference(ref, fast, cache_position):
    assert_raises_alike(
        lambda: from_inputs(ref, {"cache_position": cache_position()}),
        lambda: from_inputs(fast, {"cache_position": cache_position()}),
    )


def test_disabled_transformers_integration_ignores_cache_position(ref, fast):
    def pair(impl):
        return from_inputs(impl, llm_inputs(torch.arange(4))), from_inputs(impl, {"cache_position": torch.tensor([0])})

    for impl in (ref, fast):
        impl.config.config.enable_transformers_integration = False
    ref_md, fast_md = assert_same_md(ref, fast, lambda: llm_inputs(torch.arange(4)))
    assert ref_md.llm_phase == fast_md.llm_phase == ""
    for impl in (ref, fast):
        a, b = pair(impl)
        assert a != b
    for impl in (ref, fast):
        impl.config.config.enable_transformers_integration = True
    for impl in (ref, fast):
        a, b = pair(impl)
        assert a == b and a.llm_phase == "prefill"


def test_from_outputs_never_sets_an_llm_phase(ref, fast):
    ref_md, _ = assert_same_md(ref, fast, lambda: llm_inputs(torch.arange(4)), "from_outputs", strict=True)
    assert ref_md.llm_phase == ""


# ------------------------------------------------------------------------------------------- axes queries


def test_has_batch_axis_requires_every_tensor_and_is_true_without_tensors(ref, fast):
    def run(impl):
        empty = from_inputs(impl, {"n": 1})
        md = from_inputs(impl, {"a": t((2, 3)), "b": t((2,))}, batch_size=2)
        md.update_shapes_seen(from_inputs(impl, {"a": t((4, 3)), "b": t((2,))}, batch_size=4))
        partial = (md.has_batch_axis(), md.detected_dynamic_axis())
        md.update_shapes_seen(from_inputs(impl, {"a": t((4, 3)), "b": t((4,))}, batch_size=4))
        return (
            (empty.has_batch_axis(), empty.detected_dynamic_axis()),
            partial,
            (
                md.has_batch_axis(),
                md.detected_dynamic_axis(),
            ),
        )

    assert run(fast) == run(ref) == ((True, False), (False, True), (True, True))


def test_detected_dynamic_axis_is_true_for_dim_axes_alone(ref, fast):
    for impl in (ref, fast):
        md = from_inputs(impl, {"a": t((2, 3))}, batch_size=2)
        assert not md.detected_dynamic_axis()
        md.update_shapes_seen(from_inputs(impl, {"a": t((2, 5))}, batch_size=2))
        assert md.detected_dynamic_axis() and not md.has_batch_axis()


# ------------------------------------------------------------------------------------------- update_shapes_seen


def llm_batch(batch_size, seq):
    return {
        "input_ids": t((batch_size, seq), torch.int64),
        "mask": t((batch_size, seq), torch.bool),
        "pixels": t((2 * batch_size, 3)),
        "static": t((5,)),
        "scalar": t(()),
        "n": batch_size,
        "nested": (t((batch_size,)), [Point(x=t((3, batch_size)))]),
    }


OBSERVATIONS = [(1, 4), (2, 7), (4, 7), (3, 9)]


def test_update_shapes_seen_learns_batch_and_dynamic_axes_step_by_step(ref, fast):
    def run(impl):
        first = from_inputs(impl, llm_batch(*OBSERVATIONS[0]), batch_size=OBSERVATIONS[0][0], strict=True)
        snaps = [md_snap(impl, first)]
        for batch_size, seq in OBSERVATIONS[1:]:
            other = from_inputs(impl, llm_batch(batch_size, seq), batch_size=batch_size, strict=True)
            first.update_shapes_seen(other)
            snaps.append((md_snap(impl, first), md_snap(impl, other)))
        return first, snaps

    fast_md, fast_snaps = run(fast)
    ref_md, ref_snaps = run(ref)
    assert fast_snaps == ref_snaps
    assert [spec.shape for spec in ref_md.tensor_specs] == [
        ["batch0", "dim1"],
        ["batch0", "dim1"],
        ["batch0", 3],
        [5],
        [],
        ["batch0"],
        [3, "batch1"],
    ]


def test_update_shapes_seen_with_global_context_batch_sizes(ref, fast):
    def run(impl):
        gc = impl.global_context
        mds = []
        for batch_size, seq in OBSERVATIONS:
            with gc.global_context:
                gc.global_context.set(gc.BATCH_SIZE_KEY, batch_size)
                mds.append(from_inputs(impl, llm_batch(batch_size, seq)))
        for other in mds[1:]:
            mds[0].update_shapes_seen(other)
        return md_snap(impl, mds[0])

    assert run(fast) == run(ref)


def test_update_shapes_seen_without_batch_sizes_marks_every_changing_axis_dynamic(ref, fast):
    def run(impl):
        first = from_inputs(impl, llm_batch(1, 4))
        for batch_size, seq in OBSERVATIONS[1:]:
            first.update_shapes_seen(from_inputs(impl, llm_batch(batch_size, seq)))
        return md_snap(impl, first), [spec.shape for spec in first.tensor_specs]

    assert run(fast) == run(ref)
    assert run(ref)[1][0] == ["dim0", "dim1"]


def test_update_shapes_seen_ignores_other_data_llm_phase_and_key_order(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"a": t((2, 3)), "b": t((2,)), "n": 1}, strict=True, batch_size=2)
        other = from_inputs(impl, {"b": t((4,)), "n": "different", "a": t((4, 3))}, strict=True, batch_size=4)
        md.update_shapes_seen(other)
        llm = from_inputs(impl, {"a": t((8, 3)), "b": t((8,)), "cache_position": None}, batch_size=8)
        md.update_shapes_seen(llm)
        return md_snap(impl, md)

    assert run(fast) == run(ref)


@pytest.mark.parametrize(
    "other",
    [
        lambda: {"a": t((2, 3))},
        lambda: {"a": t((2, 3)), "b": t((2,)), "c": t((1,))},
        lambda: {"a": t((2,)), "b": t((2,))},
        lambda: {"a": t((2, 3)), "c": t((2,))},
        lambda: {"a": [t((2, 3))], "b": t((2,))},
        lambda: {},
    ],
    ids=["missing_tensor", "extra_tensor", "different_rank", "different_key", "different_nesting", "empty"],
)
def test_update_shapes_seen_raises_value_error_for_different_tensor_structure(ref, fast, other):
    def run(impl):
        md = from_inputs(impl, {"a": t((2, 3)), "b": t((2,))}, strict=True)
        before = md_snap(impl, md)
        try:
            md.update_shapes_seen(from_inputs(impl, other(), strict=True))
        except ValueError as exc:
            return str(exc), before == md_snap(impl, md)
        raise AssertionError("no ValueError")

    ref_message, ref_unchanged = run(ref)
    assert run(fast) == (ref_message, ref_unchanged)
    assert ref_message.startswith("Cannot update shapes seen, because tensor data is different, Tensors:")


def test_update_shapes_seen_leaves_the_other_metadata_unchanged(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"a": t((2, 3))}, batch_size=2)
        other = from_inputs(impl, {"a": t((4, 3))}, batch_size=4)
        before = md_snap(impl, other)
        md.update_shapes_seen(other)
        return before == md_snap(impl, other)

    assert run(fast) is run(ref) is True


# ------------------------------------------------------------------------------------------- make_batch


def batch_inputs(batch_size):
    return {
        "ids": t((batch_size, 4 + batch_size), torch.int64),
        "pix": t((2 * batch_size, 3)),
        "static": t((5,)),
        "scalar": t(()),
        "nested": (t((batch_size,)), [Point(x=t((batch_size, 2)), y="s")]),
        "nt": Pair(t((batch_size,), torch.bool), 1),
        "ud": UserDict({"u": t((3, batch_size, batch_size))}),
        "n": 3,
        "text": "keep",
    }


def learned(impl, build, batch_sizes=(2, 4)):
    md = from_inputs(impl, build(batch_sizes[0]), batch_size=batch_sizes[0])
    for batch_size in batch_sizes[1:]:
        md.update_shapes_seen(from_inputs(impl, build(batch_size), batch_size=batch_size))
    return md


@pytest.mark.parametrize("target", [1, 2, 3, 5, 8])
def test_make_batch_slices_or_repeats_along_batch_axes(ref, fast, target):
    results = []
    for impl in (ref, fast):
        md = learned(impl, batch_inputs)
        inputs = batch_inputs(3)
        pristine = copy.deepcopy(inputs)
        result = md.make_batch(inputs, target)
        assert_same_tree(inputs, pristine)
        assert_no_aliasing(result, inputs)
        assert_no_shared_containers(result, inputs)
        results.append(result)
    assert_same_tree(results[1], results[0])


def test_make_batch_values_are_leading_slices_or_repeats_of_the_first_item(ref, fast):
    for impl in (ref, fast):
        md = learned(impl, lambda bs: {"x": t((bs, 2)), "y": t((3, 2 * bs))})
        inputs = {"x": t((3, 2)), "y": t((3, 6))}
        small = md.make_batch(inputs, 2)
        assert torch.equal(small["x"], inputs["x"][:2]) and torch.equal(small["y"], inputs["y"][:, :4])
        large = md.make_batch(inputs, 5)
        assert torch.equal(large["x"], inputs["x"][:1].repeat(5, 1))
        assert torch.equal(large["y"], inputs["y"][:, :1].repeat(1, 10))


def _strided_inputs():
    """Tensors whose memory layout the batching view must respect: values count up, so any misread shows."""
    grid = torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5)
    return {
        "transposed": grid.transpose(0, 1),  # non-contiguous
        "offset": grid[1:],  # a view with a storage offset
        "both_axes": torch.arange(32.0).reshape(2, 16)[:, ::2],  # at 3, one axis grows and the other shrinks
        "channels_last": torch.arange(96.0).reshape(2, 3, 4, 4).contiguous(memory_format=torch.channels_last),
        "param": torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)),
        "conj": torch.complex(torch.arange(6.0), torch.ones(6)).reshape(2, 3).conj(),
        "empty": torch.empty(0, 3),
        "bools": torch.arange(12).reshape(3, 4) % 3 == 0,
    }


def _strided_learned(impl):
    def build(bs):
        return {
            "transposed": t((6, bs, 5)),
            "offset": t((bs, 6, 5)),
            "both_axes": t((bs, 2 * bs)),
            "channels_last": t((bs, 3, 4, 4)),
            "param": t((bs, 3)),
            "conj": t((bs, 3), torch.complex64),
            "empty": t((bs, 3)),
            "bools": t((bs, 4), torch.bool),
        }

    return learned(impl, build)


@pytest.mark.parametrize("target", [1, 3])
def test_make_batch_respects_strides_offsets_and_tensor_kinds(ref, fast, target):
    results = []
    for impl in (ref, fast):
        inputs = _strided_inputs()
        pristine = copy.deepcopy(inputs)
        result = _strided_learned(impl).make_batch(inputs, target)
        assert_same_tree(inputs, pristine)
        assert_no_aliasing(result, inputs)
        results.append(result)
    assert_same_tree(results[1], results[0])
    for key, tensor in results[1].items():
        expected = results[0][key]
        assert tensor.requires_grad == expected.requires_grad, key
        if tensor.shape != inputs[key].shape:
            # deliberate difference: a fresh tensor of exactly the result's size, never a view of a larger copy
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), key


def test_make_batch_without_batch_axes_returns_an_equal_deep_copy(ref, fast):
    results = []
    for impl in (ref, fast):
        md = from_inputs(impl, batch_inputs(2))
        inputs = batch_inputs(2)
        result = md.make_batch(inputs, 7)
        assert_no_aliasing(result, inputs)
        assert_no_shared_containers(result, inputs)
        results.append(result)
    assert_same_tree(results[1], results[0])


def test_make_batch_turns_namedtuples_holding_tensors_into_plain_tuples(ref, fast):
    results = []
    for impl in (ref, fast):
        md = from_inputs(impl, {"nt": Pair(t((2,)), 1), "keep": Pair(1, 2)})
        result = md.make_batch({"nt": Pair(t((2,)), 1), "keep": Pair(1, 2)}, 2)
        results.append((type(result["nt"]).__name__, type(result["keep"]).__name__))
    assert results[1] == results[0]


def test_make_batch_on_a_tensor_root_returns_a_tensor(ref, fast):
    results = []
    for impl in (ref, fast):
        md = learned(impl, lambda bs: t((bs, 3)))
        inputs = t((2, 3))
        result = md.make_batch(inputs, 4)
        assert_no_aliasing(result, inputs)
        results.append(result)
    assert_same_tree(results[1], results[0])


def test_make_batch_through_registered_user_types(ref, fast, registry):
    class Holder:
        def __init__(self, batch_size):
            self.t = t((batch_size, 2))
            self.items = [t((batch_size,)), "x"]

    registry.register(Holder)
    results = []
    for impl in (ref, fast):
        md = learned(impl, lambda bs: {"h": Holder(bs)})
        inputs = {"h": Holder(3)}
        result = md.make_batch(inputs, 5)
        assert_no_aliasing(result, inputs)
        assert_no_shared_containers(result, inputs)
        assert inputs["h"].t.shape == (3, 2)
        results.append(result)
    assert_same_tree(results[1], results[0])


class Converting:
    """A registered user type whose deep copy keeps its tensor in float16 (and, trimmed, only its first row)."""

    def __init__(self, tensor, trim=False):
        self.t = tensor
        self.trim = trim

    def __deepcopy__(self, memo):
        tensor = copy.deepcopy(self.t, memo).half()
        return Converting(tensor[:1] if self.trim else tensor, self.trim)


class Restoring:
    """A registered user type whose pickle state (what deep copy goes through) comes back as float16."""

    def __init__(self, tensor):
        self.t = tensor

    def __getstate__(self):
        return {"t": self.t}

    def __setstate__(self, state):
        self.t = state["t"].half()


@pytest.mark.parametrize("hook", ["deepcopy", "deepcopy_trim", "deepcopy_without_memo", "setstate"])
@pytest.mark.parametrize("shared", [False, True])
def test_make_batch_batches_what_the_deep_copy_holds(ref, fast, registry, hook, shared):
    """A user's copy hook that converts its tensor: the result is the batched converted tensor, as the reference
    batches its copy (not the input's tensor); also with the tensor held a second time outside any locator.
    update_max_batch_size learns from the same batched tensors."""
    if hook == "setstate":
        cls, make = registry.register(Restoring), Restoring
    else:
        cls = registry.register(Converting)
        make = lambda tensor: Converting(tensor, trim=hook == "deepcopy_trim")  # noqa: E731
    if hook == "deepcopy_without_memo":
        cls_deepcopy = Converting.__deepcopy__
        Converting.__deepcopy__ = lambda self, memo: Converting(self.t.half(), self.trim)  # type: ignore[method-assign]
    try:
        results, learned_specs = [], []
        for impl in (ref, fast):
            md = learned(impl, lambda bs: {"h": make(t((bs, 2)))})
            tensor = t((3, 2))
            inputs = {"h": make(tensor), "also": [tensor] if shared else []}
            result = md.make_batch(inputs, 5)
            assert isinstance(result["h"], cls) and inputs["h"].t is tensor
            results.append(result["h"].t)
            md.update_max_batch_size({"h": make(t((3, 2)))}, 7)
            learned_specs.append([(spec.shape, spec.min_shape, spec.max_shape) for _, spec in md.tensor_data])
    finally:
        if hook == "deepcopy_without_memo":
            Converting.__deepcopy__ = cls_deepcopy  # type: ignore[method-assign]
    assert results[0].dtype == torch.float16
    assert_same_tree(results[1], results[0])
    assert learned_specs[1] == learned_specs[0]


class HalfOnCopy(torch.Tensor):
    """A tensor subclass whose deep copy is stored as float16."""

    def __deepcopy__(self, memo):
        return self.as_subclass(torch.Tensor).clone().half().as_subclass(HalfOnCopy)


class ScaledOnCopy(torch.Tensor):
    """A tensor subclass whose deep copy scales its values (and is a plain tensor)."""

    def __deepcopy__(self, memo):
        return self.as_subclass(torch.Tensor) * 10


class ClonedOnCopy(torch.Tensor):
    """A tensor subclass whose deep copy is an exact clone, of its own class."""

    def __deepcopy__(self, memo):
        return self.as_subclass(torch.Tensor).clone().as_subclass(ClonedOnCopy)


@pytest.mark.parametrize("cls", [HalfOnCopy, ScaledOnCopy, ClonedOnCopy])
@pytest.mark.parametrize("shared", [False, True])
def test_make_batch_batches_what_the_deep_copy_of_a_tensor_subclass_holds(ref, fast, cls, shared):
    """A tensor subclass whose own __deepcopy__ converts it, at a locator that is resized: the reference batches
    the copy its hook made; so does aitune_fast (it took a shortcut around the hook). update_max_batch_size learns
    from the same batched tensors."""
    results, learned_specs = [], []
    for impl in (ref, fast):
        md = learned(impl, lambda bs: {"x": torch.arange(bs * 3.0).reshape(bs, 3).as_subclass(cls)})
        tensor = torch.arange(9.0).reshape(3, 3).as_subclass(cls)
        inputs = {"x": tensor, "also": [tensor] if shared else []}
        result = md.make_batch(inputs, 5)
        assert inputs["x"] is tensor and tensor.dtype == torch.float32
        results.append(result)
        md.update_max_batch_size({"x": torch.ones(3, 3).as_subclass(cls)}, 7)
        learned_specs.append([(spec.shape, spec.min_shape, spec.max_shape) for _, spec in md.tensor_data])
    assert type(results[1]["x"]) is type(results[0]["x"])
    assert results[1]["x"].dtype == results[0]["x"].dtype
    assert torch.equal(results[1]["x"].as_subclass(torch.Tensor), results[0]["x"].as_subclass(torch.Tensor))
    assert learned_specs[1] == learned_specs[0]


def test_make_batch_on_a_frozen_dataclass_raises_frozen_instance_error(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"f": FrozenPoint(x=t((2,)))})
        return md.make_batch({"f": FrozenPoint(x=t((2,)))}, 2)

    assert isinstance(assert_raises_alike(lambda: run(ref), lambda: run(fast)), dataclasses.FrozenInstanceError)


def test_make_batch_with_a_different_structure_raises_key_error(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"a": t((2,))})
        return md.make_batch({"b": t((2,))}, 2)

    assert_raises_alike(lambda: run(ref), lambda: run(fast))


# ------------------------------------------------------------------------------------------- batch_tensor


def _spec(impl, shape, multipliers):
    return impl.tensor_spec.TensorSpec(
        shape=list(shape),
        min_shape=[1] * len(shape),
        max_shape=[9] * len(shape),
        dtype=torch.float32,
        _bs_multipliers=list(multipliers),
    )


@pytest.mark.parametrize(
    ("shape", "spec_shape", "multipliers", "batch_size"),
    [
        ((3, 2), [3, 2], [NAN, NAN], 5),
        ((3, 2), ["batch0", 2], [1.0, NAN], 2),
        ((3, 2), ["batch0", 2], [1.0, NAN], 3),
        ((3, 2), ["batch0", 2], [1.0, NAN], 7),
        ((4, 3), ["batch0", 3], [2.0, NAN], 2),
        ((4, 3), ["batch0", 3], [2.0, NAN], 1),
        ((4, 3), ["batch0", 3], [2.0, NAN], 3),
        ((2, 3, 2), ["batch0", "dim1", "batch2"], [1.0, NAN, 1.0], 4),
        ((2, 3, 2), ["batch0", "dim1", "batch2"], [1.0, NAN, 1.0], 1),
        ((0, 2), ["batch0", 2], [1.0, NAN], 3),
        ((5,), ["batch0"], [1.0], 1),  # 0 is refused (test_parity_batch_edges.py)
        ((2, 6), [2, "batch1"], [NAN, 3.0], 1),
    ],
)
def test_batch_tensor_matches_the_reference_values_identity_and_views(
    ref, fast, shape, spec_shape, multipliers, batch_size
):
    results = []
    for impl in (ref, fast):
        tensor = t(shape)
        result = impl.sample_metadata.batch_tensor(tensor, _spec(impl, spec_shape, multipliers), batch_size)
        shares_storage = (
            result.numel() > 0 and result.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        )
        results.append((result, result is tensor, shares_storage))
    assert_same_tree(results[1][0], results[0][0])
    assert results[1][1:] == results[0][1:]


def test_batch_tensor_returns_the_same_tensor_when_there_are_no_batch_axes(ref, fast):
    for impl in (ref, fast):
        tensor = t((3, 2))
        assert impl.sample_metadata.batch_tensor(tensor, _spec(impl, [3, "dim1"], [NAN, NAN]), 9) is tensor


# ------------------------------------------------------------------------------------------- update_max_batch_size


def test_update_max_batch_size_extends_max_shape_along_batch_axes(ref, fast):
    def run(impl):
        md = learned(impl, batch_inputs)
        inputs = batch_inputs(2)
        pristine = copy.deepcopy(inputs)
        md.update_max_batch_size(inputs, 16)
        assert_same_tree(inputs, pristine)
        return md_snap(impl, md), [spec.get_max_batch_size() for spec in md.tensor_specs]

    assert run(fast) == run(ref)
    assert run(ref)[1] == [16, 32, 1, 1, 16, 16, 16, 16]


def test_update_max_batch_size_without_batch_axes_changes_nothing(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"x": t((2, 3))})
        before = md_snap(impl, md)
        md.update_max_batch_size({"x": t((2, 3))}, 64)
        return before == md_snap(impl, md), md_snap(impl, md)

    assert run(fast) == run(ref)
    assert run(ref)[0]


def test_update_max_batch_size_with_extra_tensors_raises_value_error(ref, fast):
    def run(impl):
        md = learned(impl, lambda bs: {"x": t((bs, 3))})
        md.update_max_batch_size({"x": t((2, 3)), "y": t((1,))}, 8)

    assert_raises_alike(lambda: run(ref), lambda: run(fast))


# ------------------------------------------------------------------------------------------- to_dict / from_dict

ROUND_TRIP_CASES = {
    "plain": lambda impl: from_inputs(impl, {"x": t((2, 3)), "n": 1, "s": "a"}),
    "strict": lambda impl: from_inputs(impl, {"x": t((2, 3)), "n": 1, "s": {"a"}, "b": b"x", "z": None}, strict=True),
    "outputs": lambda impl: from_outputs(impl, (t((2,)), {"k": 1}), strict=True),
    "tensor_output": lambda impl: from_outputs(impl, t((2,))),
    "llm": lambda impl: from_inputs(impl, llm_inputs(torch.tensor([3])), strict=True),
    "learned": lambda impl: learned(impl, batch_inputs),
    "empty": lambda impl: from_inputs(impl, {}, strict=True),
    "keys": lambda impl: from_inputs(impl, {7: t((1,)), (1, "a"): 2, True: 3, None: 4}, strict=True),
    "dtypes": lambda impl: from_inputs(impl, {str(d): t((1,), d) for d in (torch.bfloat16, torch.int8, torch.bool)}),
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIP_CASES))
def test_from_dict_of_to_dict_round_trips(ref, fast, case):
    def run(impl):
        md = ROUND_TRIP_CASES[case](impl)
        again = SM(impl).from_dict(md.to_dict())
        return md_snap(impl, md), md_snap(impl, again), again == md, hash(again) == hash(md)

    ref_run = run(ref)
    assert run(fast) == ref_run
    assert ref_run[0] == ref_run[1]


def picklable_leaves(impl):
    return from_inputs(
        impl,
        {
            "path": pathlib.PurePosixPath("/x"),
            "color": Color.RED,
            "when": datetime.datetime(2021, 5, 6),
            "c": 1 + 2j,
            "fs": frozenset({1, (2, 3)}),
            "big": 2**70,
            "u": Unhashable([1]),
        },
        strict=True,
    )


def test_to_dict_refuses_values_it_cannot_encode_without_pickle(ref, fast):
    """A deliberate difference: the reference pickles any leaf value (and unpickles any bytes, running
    whatever code they carry); aitune_fast's encoding holds plain data only, so a Path, an Enum, a datetime
    or an arbitrary object in the other data makes to_dict() raise TypeError naming the locator."""
    again = SM(ref).from_dict(picklable_leaves(ref).to_dict())
    assert md_snap(ref, again) == md_snap(ref, picklable_leaves(ref))
    fast_md = picklable_leaves(fast)
    with pytest.raises(TypeError, match="cannot be encoded") as info:
        fast_md.to_dict()
    assert "path" in str(info.value) or "color" in str(info.value)
    # what it can encode still round-trips: the same leaves without the unsupported ones
    plain = from_inputs(fast, {"c": 1 + 2j, "fs": frozenset({1, (2, 3)}), "big": 2**70}, strict=True)
    again = SM(fast).from_dict(plain.to_dict())
    assert md_snap(fast, again) == md_snap(fast, plain) and again == plain


def test_to_dict_is_a_snapshot_independent_of_later_changes(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"x": t((2, 3)), "n": [1]}, strict=True)
        data = md.to_dict()
        md.tensor_specs[0].shape[0] = "batch0"
        again = SM(impl).from_dict(data)
        again.tensor_specs[0].shape[1] = "dim1"
        return md_snap(impl, md), md_snap(impl, again)

    assert run(fast) == run(ref)
    assert run(ref)[1]["str"] == "Tensors: x Others: n[0]=1"


def test_to_dict_exposes_the_same_keys_and_plain_fields(ref, fast):
    def run(impl):
        data = from_inputs(impl, llm_inputs(torch.tensor([0])), strict=True).to_dict()
        return sorted(data), data["strict"], data["llm_phase"]

    assert run(fast) == run(ref) == (["llm_phase", "other_data", "strict", "tensor_data"], True, "prefill")


# ------------------------------------------------------------------------------------------- live tensor specs


def test_mutating_a_held_spec_changes_what_the_metadata_reports(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"x": t((2, 3)), "y": t((4,))}, strict=True)
        spec = md.tensor_specs[0]
        spec.shape[1] = "dim1"
        spec.shape[0] = "batch0"
        spec._bs_multipliers[0] = 1.0
        spec.max_shape[0] = 64
        md.tensor_data[1][1].shape[0] = "dim0"
        return md_snap(impl, md), md.tensor_data[0][1] is spec

    assert run(fast) == run(ref)
    assert run(ref)[0]["describe"][1].splitlines()[3].split() == ["x", "x", "['batch0',", "'dim1']"]


def test_replacing_a_held_spec_shape_changes_equality_and_update_shapes_seen(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"x": t((2, 3))})
        other = from_inputs(impl, {"x": t((5, 5))})
        before = (md == other, hash(md) == hash(other))
        md.tensor_specs[0].shape = []
        after = (md == other, md == from_inputs(impl, {"x": t(())}))
        error = None
        try:
            md.update_shapes_seen(other)
        except ValueError:
            error = "ValueError"
        return before, after, error, md_snap(impl, md)

    assert run(fast) == run(ref)
    assert run(ref)[:3] == ((True, True), (False, True), "ValueError")


# ------------------------------------------------------------------------------------------- make_batch and sharing


def _shared_spec_md(impl, keys_batched):
    """Metadata over {"a", "b"} where the keys in ``keys_batched`` learned a batch axis and the others did not."""
    md = from_inputs(impl, {"a": t((2, 2)), "b": t((2, 2))}, batch_size=2)
    second = {key: t((4, 2)) if key in keys_batched else t((2, 2)) for key in ("a", "b")}
    md.update_shapes_seen(from_inputs(impl, second, batch_size=4))
    return md


@pytest.mark.parametrize("keys_batched", [("a",), ("b",), ("a", "b")], ids=["first", "second", "both"])
def test_make_batch_treats_a_tensor_shared_by_two_locators_independently(ref, fast, keys_batched):
    results = []
    for impl in (ref, fast):
        shared = t((2, 2))
        inputs = {"a": shared, "b": shared}
        result = _shared_spec_md(impl, keys_batched).make_batch(inputs, 1)
        assert_no_aliasing(result, inputs)
        results.append((result, result["a"] is result["b"]))
    assert_same_tree(results[1][0], results[0][0])
    assert results[1][1] == results[0][1]


def test_make_batch_leaves_other_references_to_a_batched_tensor_at_full_size(ref, fast):
    results = []
    for impl in (ref, fast):
        shared = t((2, 2))
        inputs = {"a": shared, "b": t((2, 2)), "holder": TensorHolder(shared), "view": [shared]}
        md = _shared_spec_md(impl, ("a",))
        result = md.make_batch(inputs, 1)
        results.append((result["a"].shape, result["holder"].tensor.shape, result["view"][0].shape))
        assert_no_aliasing(result, inputs)
    assert results[1] == results[0] == (torch.Size([1, 2]), torch.Size([2, 2]), torch.Size([2, 2]))


def test_make_batch_of_a_non_leaf_tensor_raises_like_deep_copy(ref, fast):
    def run(impl):
        md = _shared_spec_md(impl, ("a",))
        weight = torch.ones(2, 2, requires_grad=True)
        return md.make_batch({"a": weight * 2, "b": t((2, 2))}, 1)

    assert_raises_alike(lambda: run(ref), lambda: run(fast))


# ------------------------------------------------------------------------------------------- pickle / deepcopy
# AITune stores SampleMetadata objects themselves (GraphSpec.to_dict keeps them as values, then checkpoints them),
# so the objects must survive pickle and deepcopy, not only to_dict/from_dict.


PICKLE_CASES = {**ROUND_TRIP_CASES, "picklable_leaves": picklable_leaves}


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
@pytest.mark.parametrize("case", sorted(PICKLE_CASES))
def test_metadata_survives_pickle_deepcopy_and_copy(ref, fast, case, how):
    def run(impl):
        md = PICKLE_CASES[case](impl)
        again = {"pickle": lambda m: pickle.loads(pickle.dumps(m)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how](
            md
        )
        return md_snap(impl, md), md_snap(impl, again), again == md, hash(again) == hash(md), type(again).__name__

    ref_run = run(ref)
    assert run(fast) == ref_run
    assert ref_run[0] == ref_run[1]


def test_deepcopied_metadata_has_independent_specs(ref, fast):
    def run(impl):
        md = from_inputs(impl, {"x": t((2, 3))})
        twin = copy.deepcopy(md)
        twin.tensor_specs[0].shape[0] = "batch0"
        shallow = copy.copy(md)
        return str(md.tensor_specs[0]), str(twin.tensor_specs[0]), shallow.tensor_specs[0] is md.tensor_specs[0]

    assert run(fast) == run(ref)


def test_describe_of_a_lone_row_named_like_tabulates_separator_raises_as_in_the_reference(ref, fast):
    # tabulate reads a row whose first cell is "\x01" as a separating line; alone in a table it then
    # fails with IndexError, in the reference as in aitune_fast (found by the round-trip property test)
    def run(impl):
        md = from_inputs(impl, {"\x01": 3}, strict=True)
        return md_snap(impl, md)

    got = run(fast)
    assert got == run(ref)
    assert got["describe_default"] == ("raise", "IndexError") and got["repr"] == ("raise", "IndexError")
