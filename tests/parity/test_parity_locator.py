"""Parity of ``Locator`` / ``ObjectType``: paths, display, equality, get/set, ``find_leaves`` and the type registry."""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle
from collections import OrderedDict, UserDict, defaultdict
from typing import ClassVar

import pytest
import torch
from parity import (
    FrozenPoint,
    Pair,
    Point,
    assert_raises_alike,
    assert_same_eq_hash_classes,
    canon,
    leaves_snap,
    loc_snap,
    outcome,
)


def make_locator(impl, path, is_output=False):
    """``path`` is a sequence of (accessor, ObjectType member name)."""
    object_type = impl.locator.ObjectType
    return impl.locator.Locator(tuple((acc, object_type[kind]) for acc, kind in path), is_output)


def leaves(impl, obj, **kwargs):
    return list(impl.locator.Locator.find_leaves(obj, **kwargs))


def assert_same_leaves(ref, fast, obj, **kwargs):
    """Run find_leaves of both on the same object; return the reference snapshot for extra assertions."""
    ref_snap = leaves_snap(leaves(ref, obj, **kwargs))
    fast_snap = leaves_snap(leaves(fast, obj, **kwargs))
    assert fast_snap == ref_snap
    return ref_snap


def display_paths(snap):
    return [loc["display_path"] for loc, _ in snap]


class Fields:
    """An object whose instance attributes are the keywords it is made with; a test subclasses it for a type of its
    own to register."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


# ------------------------------------------------------------------------------------------- ObjectType


def test_object_type_has_the_same_members_and_int_values(ref, fast):
    def members(impl):
        return [(m.name, m.value, int(m), isinstance(m, int)) for m in impl.locator.ObjectType]

    assert (
        members(fast)
        == members(ref)
        == [
            ("SEQUENCE", 0, 0, True),
            ("DICT", 1, 1, True),
            ("DATACLASS", 2, 2, True),
            ("USER_TYPE", 3, 3, True),
        ]
    )


# ------------------------------------------------------------------------------------------- properties

PATHS = {
    "empty": [],
    "root_key": [("x", "DICT")],
    "root_index": [(0, "SEQUENCE")],
    "root_field": [("f", "DATACLASS")],
    "root_attr": [("a", "USER_TYPE")],
    "deep_mixed": [("inputs", "DICT"), (2, "SEQUENCE"), ("field", "DATACLASS"), ("k", "DICT"), ("attr", "USER_TYPE")],
    "int_dict_key": [(7, "DICT")],
    "tuple_dict_key": [((1, "a"), "DICT"), (0, "SEQUENCE")],
    "bool_dict_key": [(True, "DICT")],
    "none_dict_key": [(None, "DICT")],
    "non_identifier_key": [("my key", "DICT"), ("x-y", "DICT")],
    "empty_string_key": [("", "DICT")],
    "keyword_key": [("class", "DICT")],
    "unicode_identifier_key": [("zażółć", "DICT")],
    "digit_leading_key": [("1abc", "DICT")],
    "quote_in_key": [('a"b', "DICT")],
    "second_level_identifier_key": [("x", "DICT"), ("y", "DICT")],
    "sequence_then_key": [(0, "SEQUENCE"), ("y", "DICT")],
    "float_key": [(1.5, "DICT")],
}


@pytest.mark.parametrize("is_output", [False, True], ids=["input", "output"])
@pytest.mark.parametrize("name", sorted(PATHS))
def test_locator_exposes_depth_root_leaf_path_accessors_and_display(ref, fast, name, is_output):
    ref_loc = make_locator(ref, PATHS[name], is_output)
    fast_loc = make_locator(fast, PATHS[name], is_output)
    assert loc_snap(fast_loc) == loc_snap(ref_loc)


@pytest.mark.parametrize(
    ("path", "is_output", "expected"),
    [
        ([], False, ""),
        ([], True, "output"),
        ([("x", "DICT")], False, "x"),
        ([("x", "DICT")], True, 'output["x"]'),
        ([("x", "DICT"), ("y", "DICT")], False, 'x["y"]'),
        ([("my key", "DICT")], False, '["my key"]'),
        ([("", "DICT")], False, '[""]'),
        ([("class", "DICT")], False, "class"),
        ([(3, "DICT")], False, "[3]"),
        ([((1, 2), "DICT")], False, "[(1, 2)]"),
        ([(True, "DICT")], False, "[True]"),
        ([(0, "SEQUENCE"), (1, "SEQUENCE")], False, "[0][1]"),
        ([(0, "SEQUENCE")], True, "output[0]"),
        ([("f", "DATACLASS")], False, ".f"),
        ([("f", "DATACLASS")], True, "output.f"),
        ([("x", "DICT"), ("a", "USER_TYPE"), (0, "SEQUENCE")], False, "x.a[0]"),
        ([('a"b', "DICT")], False, '["a"b"]'),
    ],
)
def test_display_path_is_a_python_like_access_expression(ref, fast, path, is_output, expected):
    for impl in (ref, fast):
        loc = make_locator(impl, path, is_output)
        assert (loc.display_path, str(loc), repr(loc)) == (expected, expected, expected)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ([], ()),
        ([("x", "DICT")], "x"),
        ([(0, "SEQUENCE")], 0),
        ([("x", "DICT"), (0, "SEQUENCE"), ("f", "DATACLASS")], ("x", 0, "f")),
    ],
)
def test_semantic_path_is_a_bare_accessor_for_depth_one_and_a_tuple_otherwise(ref, fast, path, expected):
    for impl in (ref, fast):
        assert canon(make_locator(impl, path).path) == canon(expected)


def test_root_name_of_empty_locator_is_empty_string_and_leaf_name_raises_index_error(ref, fast):
    for impl in (ref, fast):
        assert make_locator(impl, []).root_name == ""
    assert_raises_alike(lambda: make_locator(ref, []).leaf_name, lambda: make_locator(fast, []).leaf_name)


@pytest.mark.parametrize("index", [-1, -3, 2, 3, -4])
def test_accessor_at_supports_negative_indices_and_raises_index_error_out_of_range(ref, fast, index):
    path = [("a", "DICT"), (1, "SEQUENCE"), ("c", "USER_TYPE")]
    ref_result = outcome(lambda: make_locator(ref, path).accessor_at(index))
    assert outcome(lambda: make_locator(fast, path).accessor_at(index)) == ref_result
    if index in (3, -4):
        assert ref_result == ("raise", "IndexError")


def test_path_iter_yields_accessor_and_object_type_pairs(ref, fast):
    path = [("a", "DICT"), (1, "SEQUENCE"), ("c", "DATACLASS"), ("d", "USER_TYPE")]
    expected = [("a", "DICT"), (1, "SEQUENCE"), ("c", "DATACLASS"), ("d", "USER_TYPE")]
    for impl in (ref, fast):
        items = list(make_locator(impl, path).path_iter())
        assert [(acc, kind.name) for acc, kind in items] == expected
        assert all(isinstance(kind, impl.locator.ObjectType) for _, kind in items)


def test_locator_accepts_plain_ints_as_object_types(ref, fast):
    for_ref = ref.locator.Locator((("a", 1), (0, 0), ("f", 2)))
    for_fast = fast.locator.Locator((("a", 1), (0, 0), ("f", 2)))
    expected = ("a[0].f", canon(("a", 0, "f")))
    assert (str(for_fast), canon(for_fast.path)) == (str(for_ref), canon(for_ref.path)) == expected
    assert (for_fast == make_locator(fast, [("a", "DICT"), (0, "SEQUENCE"), ("f", "DATACLASS")])) is True


def test_equality_and_hash_depend_on_access_path_only_not_on_is_output(ref, fast):
    specs = [
        ([("a", "DICT")], False),
        ([("a", "DICT")], True),
        ([("a", "DATACLASS")], False),
        ([("a", "USER_TYPE")], False),
        ([(1, "DICT")], False),
        ([(True, "DICT")], False),
        ([(1.0, "DICT")], False),
        ([("1", "DICT")], False),
        ([(1, "SEQUENCE")], False),
        ([], False),
        ([], True),
        ([("a", "DICT"), (0, "SEQUENCE")], False),
        ([("a", "DICT"), (0, "SEQUENCE")], True),
        ([("a", "DICT"), (1, "SEQUENCE")], False),
    ]
    ref_locs = [make_locator(ref, p, o) for p, o in specs] + [None, "a", ("a",), (("a", 1),)]
    fast_locs = [make_locator(fast, p, o) for p, o in specs] + [None, "a", ("a",), (("a", 1),)]
    assert_same_eq_hash_classes(ref_locs, fast_locs)
    assert ref_locs[0] == ref_locs[1] and ref_locs[4] == ref_locs[5] and ref_locs[0] != ref_locs[2]


def test_locators_work_as_dict_keys_interchangeably_with_equal_locators(ref, fast):
    for impl in (ref, fast):
        table = {make_locator(impl, [("a", "DICT"), (0, "SEQUENCE")]): "first"}
        assert table[make_locator(impl, [("a", "DICT"), (0, "SEQUENCE")], is_output=True)] == "first"
        assert make_locator(impl, [("a", "DICT"), (1, "SEQUENCE")]) not in table


# ------------------------------------------------------------------------------------------- get_value


def _nested():
    return {
        "a": [10, (20, {"deep": 30})],
        "p": Point(x=[1, 2], y={"k": "v"}),
        5: "int key",
        (1, 2): "tuple key",
        "ud": UserDict({"u": 40}),
    }


@pytest.mark.parametrize(
    "path",
    [
        [],
        [("a", "DICT")],
        [("a", "DICT"), (1, "SEQUENCE"), (1, "SEQUENCE"), ("deep", "DICT")],
        [("p", "DICT"), ("x", "DATACLASS"), (1, "SEQUENCE")],
        [("p", "DICT"), ("y", "USER_TYPE"), ("k", "DICT")],
        [(5, "DICT")],
        [((1, 2), "DICT")],
        [("ud", "DICT"), ("u", "DICT")],
        [("a", "DICT"), (-1, "SEQUENCE"), (0, "SEQUENCE")],
    ],
)
def test_get_value_follows_keys_indices_and_attributes(ref, fast, path):
    obj = _nested()
    ref_value = make_locator(ref, path).get_value(obj)
    fast_value = make_locator(fast, path).get_value(obj)
    assert fast_value is ref_value


@pytest.mark.parametrize(
    "path",
    [
        [("missing", "DICT")],
        [("a", "DICT"), (5, "SEQUENCE")],
        [("p", "DICT"), ("z", "DATACLASS")],
        [("a", "DICT"), ("x", "USER_TYPE")],
        [("a", "DICT"), ("x", "DICT")],
        [(5, "DICT"), (100, "SEQUENCE")],
    ],
)
def test_get_value_raises_the_same_exception_for_invalid_paths(ref, fast, path):
    assert_raises_alike(
        lambda: make_locator(ref, path).get_value(_nested()), lambda: make_locator(fast, path).get_value(_nested())
    )


# ------------------------------------------------------------------------------------------- set_value


def _set(impl, build, path, value="NEW"):
    obj = build()
    result = make_locator(impl, path).set_value(obj, value)
    return obj, result


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: {"a": 1, "b": [1, 2]}, [("a", "DICT")]),
        (lambda: {"a": 1, "b": [1, 2]}, [("b", "DICT"), (1, "SEQUENCE")]),
        (lambda: [1, [2, 3]], [(1, "SEQUENCE"), (0, "SEQUENCE")]),
        (lambda: {"p": Point(x=1)}, [("p", "DICT"), ("x", "DATACLASS")]),
        (lambda: {"ud": UserDict({"u": 1})}, [("ud", "DICT"), ("u", "DICT")]),
        (lambda: {"ud": UserDict({"u": 1})}, [("ud", "DICT"), ("new", "DICT")]),
        (lambda: {"a": 1}, [("new", "DICT")]),
    ],
    ids=["dict", "list_in_dict", "nested_list", "dataclass", "userdict", "userdict_new_key", "new_key"],
)
def test_set_value_mutates_mutable_containers_in_place_and_returns_the_root(ref, fast, build, path):
    ref_obj, ref_result = _set(ref, build, path)
    fast_obj, fast_result = _set(fast, build, path)
    assert ref_result is ref_obj
    assert fast_result is fast_obj
    assert canon(fast_obj) == canon(ref_obj)


def test_set_value_with_empty_path_returns_the_value_and_leaves_the_object_alone(ref, fast):
    for impl in (ref, fast):
        obj = {"a": 1}
        assert make_locator(impl, []).set_value(obj, "NEW") == "NEW"
        assert obj == {"a": 1}


def test_set_value_on_a_root_tuple_returns_a_new_tuple(ref, fast):
    for impl in (ref, fast):
        obj = (1, 2, 3)
        result = make_locator(impl, [(1, "SEQUENCE")]).set_value(obj, "NEW")
        assert result == (1, "NEW", 3) and type(result) is tuple
        assert obj == (1, 2, 3)


def test_set_value_rebuilds_every_tuple_up_to_the_first_mutable_parent(ref, fast):
    def build():
        inner = (2, (3, 4))
        return {"a": ((1, inner), 5), "keep": [0]}

    path = [("a", "DICT"), (0, "SEQUENCE"), (1, "SEQUENCE"), (1, "SEQUENCE"), (0, "SEQUENCE")]
    for impl in (ref, fast):
        obj = build()
        keep = obj["keep"]
        result = make_locator(impl, path).set_value(obj, "NEW")
        assert result is obj
        assert obj == {"a": ((1, (2, ("NEW", 4))), 5), "keep": [0]}
        assert obj["keep"] is keep


def test_set_value_through_tuple_list_tuple_returns_new_root(ref, fast):
    def build():
        return ([(1, 2)], 3)

    path = [(0, "SEQUENCE"), (0, "SEQUENCE"), (1, "SEQUENCE")]
    results = []
    for impl in (ref, fast):
        obj = build()
        result = make_locator(impl, path).set_value(obj, "NEW")
        results.append((canon(obj), canon(result), result is obj))
    assert results[1] == results[0]


def test_set_value_on_a_tuple_inside_a_dataclass_replaces_the_field(ref, fast):
    for impl in (ref, fast):
        obj = {"p": Point(x=(1, 2))}
        point = obj["p"]
        make_locator(impl, [("p", "DICT"), ("x", "DATACLASS"), (0, "SEQUENCE")]).set_value(obj, "NEW")
        assert obj["p"] is point and point.x == ("NEW", 2)


def test_set_value_on_a_namedtuple_produces_a_plain_tuple(ref, fast):
    results = []
    for impl in (ref, fast):
        obj = {"pair": Pair(1, 2)}
        make_locator(impl, [("pair", "DICT"), (1, "SEQUENCE")]).set_value(obj, "NEW")
        results.append((type(obj["pair"]).__name__, tuple(obj["pair"])))
    assert results[1] == results[0]


def test_set_value_on_a_user_type_sets_the_attribute(ref, fast):
    class Holder:
        def __init__(self):
            self.value = 1

    for impl in (ref, fast):
        obj = [Holder()]
        make_locator(impl, [(0, "SEQUENCE"), ("value", "USER_TYPE")]).set_value(obj, "NEW")
        assert obj[0].value == "NEW"


def test_set_value_on_a_frozen_dataclass_raises_frozen_instance_error(ref, fast):
    path = [("p", "DICT"), ("x", "DATACLASS")]
    exc = assert_raises_alike(
        lambda: make_locator(ref, path).set_value({"p": FrozenPoint(1)}, 2),
        lambda: make_locator(fast, path).set_value({"p": FrozenPoint(1)}, 2),
    )
    assert isinstance(exc, dataclasses.FrozenInstanceError)


def test_set_value_index_out_of_range_raises_index_error(ref, fast):
    for path in ([(5, "SEQUENCE")], [(0, "SEQUENCE"), (5, "SEQUENCE")]):
        assert_raises_alike(
            lambda path=path: make_locator(ref, path).set_value([(1, 2)], 0),
            lambda path=path: make_locator(fast, path).set_value([(1, 2)], 0),
        )


# ------------------------------------------------------------------------------------------- find_leaves: builtins


@pytest.mark.parametrize(
    "obj",
    [{}, [], (), {"a": {}}, {"a": [], "b": ((), {})}, [[[]]], UserDict()],
    ids=["dict", "list", "tuple", "nested_dict", "mixed", "deep_list", "userdict"],
)
def test_find_leaves_of_empty_containers_yields_nothing(ref, fast, obj):
    assert assert_same_leaves(ref, fast, obj) == []


@pytest.mark.parametrize("is_output", [False, True])
@pytest.mark.parametrize(
    "obj", [torch.zeros(2), 3, None, "text", 1.5, True, {1, 2}, b"raw"], ids=lambda o: type(o).__name__
)
def test_find_leaves_of_a_non_container_root_yields_one_empty_path_locator(ref, fast, obj, is_output):
    snap = assert_same_leaves(ref, fast, obj, is_output=is_output)
    assert display_paths(snap) == ["output" if is_output else ""]


@pytest.mark.parametrize("obj", [3, None, "text", torch.zeros(())], ids=lambda o: type(o).__name__)
def test_find_leaves_only_tensors_filters_a_non_container_root(ref, fast, obj):
    snap = assert_same_leaves(ref, fast, obj, only_tensors=True)
    assert len(snap) == (1 if isinstance(obj, torch.Tensor) else 0)


def test_find_leaves_walks_nested_builtin_containers_depth_first_in_order(ref, fast):
    obj = {
        "x": torch.zeros(1),
        "values": (1, 2, [3, {"k": torch.zeros(2), "n": None}], ()),
        "other": "abc",
        "e": {},
    }
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == [
        "x",
        "values[0]",
        "values[1]",
        "values[2][0]",
        'values[2][1]["k"]',
        'values[2][1]["n"]',
        "other",
    ]


def test_find_leaves_accepts_dict_keys_of_any_hashable_type(ref, fast):
    obj = {
        "ident": 1,
        "not ident": 2,
        7: 3,
        (1, "a"): 4,
        True: 5,
        None: 6,
        2.5: 7,
        frozenset({1}): 8,
        "": 9,
        "nested": {0: 10, "k": 11, (2,): 12, None: 13, -1: 14},
    }
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap)[:5] == ["ident", '["not ident"]', "[7]", "[(1, 'a')]", "[True]"]


def test_find_leaves_merges_equal_bool_and_int_dict_keys_like_a_dict(ref, fast):
    obj = dict([(1, "one"), (True, "true"), (1.0, "float")])
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["[1]"]


def test_find_leaves_walks_namedtuples_and_torch_size_as_sequences(ref, fast):
    obj = {"pair": Pair(torch.zeros(1), 2), "size": torch.Size([3, 4])}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["pair[0]", "pair[1]", "size[0]", "size[1]"]


def test_find_leaves_walks_dict_and_list_subclasses_and_userdict(ref, fast):
    class MyList(list):
        pass

    class MyDict(dict):
        pass

    obj = {
        "od": OrderedDict([("b", 1), ("a", 2)]),
        "dd": defaultdict(int, {"z": 3}),
        "ud": UserDict({"u": torch.zeros(1)}),
        "ml": MyList([4, 5]),
        "md": MyDict(m=6),
    }
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ['od["b"]', 'od["a"]', 'dd["z"]', 'ud["u"]', "ml[0]", "ml[1]", 'md["m"]']


def test_find_leaves_treats_sets_strings_bytes_ranges_and_plain_objects_as_leaves(ref, fast):
    class Plain:
        def __init__(self):
            self.t = torch.zeros(1)

    obj = [{1, 2}, frozenset({3}), "str", b"bytes", range(3), Plain(), bytearray(b"x"), 1 + 2j]
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == [f"[{i}]" for i in range(8)]


def test_find_leaves_is_output_prefixes_every_display_path_with_output(ref, fast):
    obj = ({"a": torch.zeros(1)}, [2, Point(x=3)])
    snap = assert_same_leaves(ref, fast, obj, is_output=True)
    assert display_paths(snap) == ['output[0]["a"]', "output[1][0]", "output[1][1].x", "output[1][1].y"]


def test_find_leaves_only_tensors_returns_tensor_leaves_only(ref, fast):
    obj = {"a": torch.zeros(1), "b": [1, torch.zeros(2, 2), "s"], "c": None}
    snap = assert_same_leaves(ref, fast, obj, only_tensors=True)
    assert display_paths(snap) == ["a", "b[1]"]


def test_find_leaves_locators_get_back_the_same_leaf_objects(ref, fast):
    obj = {"a": [torch.zeros(1), (2, {"k": "v"})], "p": Point(x=torch.zeros(3), y=[None])}
    for impl in (ref, fast):
        for loc, value in impl.locator.Locator.find_leaves(obj):
            assert loc.get_value(obj) is value


# ------------------------------------------------------------------------------------------- find_leaves: dataclasses


@dataclasses.dataclass
class WithClassVar:
    counter: ClassVar[int] = 0
    b: object = None
    a: object = None
    _private: object = "private"
    late: object = dataclasses.field(default="late", init=False)


def test_find_leaves_walks_dataclass_fields_in_declaration_order_without_classvars(ref, fast):
    obj = {"dc": WithClassVar(b=torch.zeros(1), a=[1, 2])}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["dc.b", "dc.a[0]", "dc.a[1]", "dc._private", "dc.late"]


def test_find_leaves_on_a_dataclass_root_uses_attribute_paths(ref, fast):
    snap = assert_same_leaves(ref, fast, Point(x=torch.zeros(1), y=(1,)))
    assert display_paths(snap) == [".x", ".y[0]"]


def test_find_leaves_walks_nested_dataclasses(ref, fast):
    obj = Point(x=Point(x=1, y=Point(x=2)), y=FrozenPoint(x=torch.zeros(1)))
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == [".x.x", ".x.y.x", ".x.y.y", ".y.x"]


# ------------------------------------------------------------------------------------------- find_leaves: user types


def module_level_function():
    return None


class Rich:
    """Class attributes, instance attributes, properties, methods, static/class methods, nested classes."""

    kind = "rich"
    nothing = None
    Zeta = 26
    _hidden_class_attr = "h"

    class Nested:
        pass

    def __init__(self, tensor):
        self.tensor = tensor
        self.beta = 2
        self.alpha = [1, torch.zeros(2)]
        self._private = "p"
        self.callback = module_level_function
        self.kind = "instance kind"

    @property
    def prop(self):
        raise AssertionError("properties must not be read")

    def method(self):
        raise AssertionError("methods are not data")

    @staticmethod
    def static():
        return None

    @classmethod
    def klass(cls):
        return None


def test_registered_user_type_walks_public_data_fields_sorted(ref, fast, registry):
    registry.register(Rich)
    obj = {"r": Rich(torch.zeros(1))}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == [
        "r.Zeta",
        "r.alpha[0]",
        "r.alpha[1]",
        "r.beta",
        "r.callback",
        "r.kind",
        "r.nothing",
        "r.tensor",
    ]


class Shadowed:
    """An instance attribute hidden behind a class-level data descriptor of the same name."""

    @property
    def value(self):
        return "from the property"

    def __init__(self):
        self.__dict__["value"] = torch.zeros(1)
        self.plain = torch.zeros(2)


class Intercepting:
    """Attribute access customised by the class: every lookup goes through __getattribute__."""

    def __init__(self):
        self.plain = torch.zeros(1)

    def __getattribute__(self, name):
        if name == "plain":
            return "intercepted"
        return object.__getattribute__(self, name)


def test_registered_user_type_fields_read_through_descriptors_and_getattribute(ref, fast, registry):
    registry.register(Shadowed)
    registry.register(Intercepting)
    for _ in range(2):  # the second walk meets instances whose layout was seen before
        obj = {"s": [Shadowed(), Shadowed()], "i": [Intercepting(), Intercepting()]}
        assert_same_leaves(ref, fast, obj)
        found = {str(loc): value for loc, value in fast.locator.Locator.find_leaves(obj)}
        assert found["s[0].value"] == "from the property"
        assert found["i[1].plain"] == "intercepted"


def test_registered_user_type_changed_between_walks_is_read_as_changed(ref, fast, registry):
    # each thread keeps what it learned of a type's instance layout from walk to walk: a change to
    # the class (here a property now shadowing an instance attribute) must be seen by the next walk
    class Changing:
        def __init__(self):
            self.value = torch.zeros(1)
            self.other = 1

    registry.register(Changing)
    obj = {"c": Changing()}
    for _ in range(2):
        assert_same_leaves(ref, fast, obj)
    Changing.value = property(lambda self: "from the property")
    assert_same_leaves(ref, fast, obj)
    found = {str(loc): value for loc, value in fast.locator.Locator.find_leaves(obj)}
    assert found["c.value"] == "from the property"


def test_registered_user_type_instances_with_the_same_keys_at_other_dict_positions(ref, fast, registry):
    # the walk remembers where the first instance's dict held each field and checks the key found
    # there for later instances: a dict with a deleted entry holds the same keys at other positions
    class Two:
        def __init__(self, a, b):
            self.a = a
            self.b = b

    registry.register(Two)
    first = Two("a0", "b0")
    moved = Two(None, None)
    holes = {"gone": 0, "a": "a1", "b": "b1"}
    del holes["gone"]
    moved.__dict__ = holes
    for _ in range(2):
        obj = [first, moved, Two("a2", "b2")]
        assert_same_leaves(ref, fast, obj)
        found = {str(loc): value for loc, value in fast.locator.Locator.find_leaves(obj)}
        assert found == {"[0].a": "a0", "[0].b": "b0", "[1].a": "a1", "[1].b": "b1", "[2].a": "a2", "[2].b": "b2"}


def test_unregistered_user_type_is_a_single_leaf(ref, fast):
    obj = {"r": Rich(torch.zeros(1))}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["r"]


def test_registered_user_type_without_instance_attributes_walks_class_data_fields(ref, fast, registry):
    class OnlyClassAttrs:
        b = 2
        a = torch.zeros(1)

        def method(self):
            return None

    registry.register(OnlyClassAttrs)
    snap = assert_same_leaves(ref, fast, [OnlyClassAttrs()])
    assert display_paths(snap) == ["[0].a", "[0].b"]


def test_registered_user_type_with_only_private_instance_attributes_walks_class_fields(ref, fast, registry):
    class Private:
        public = 1

        def __init__(self):
            self._x = torch.zeros(1)

    registry.register(Private)
    snap = assert_same_leaves(ref, fast, {"p": Private()})
    assert display_paths(snap) == ["p.public"]


def test_registered_user_type_with_slots_walks_slot_fields(ref, fast, registry):
    class Slotted:
        __slots__ = ("b", "a", "_c")

        def __init__(self):
            self.b = 1
            self.a = torch.zeros(1)
            self._c = 3

    registry.register(Slotted)
    snap = assert_same_leaves(ref, fast, {"s": Slotted()})
    assert display_paths(snap) == ["s.a", "s.b"]


def test_registered_user_type_walks_cached_property_as_a_data_field(ref, fast, registry):
    class Cached:
        def __init__(self):
            self.a = 1

        @functools.cached_property
        def cached(self):
            return torch.zeros(2)

    registry.register(Cached)
    snap = assert_same_leaves(ref, fast, {"c": Cached()})
    assert display_paths(snap) == ["c.a", "c.cached"]


def test_registered_user_type_as_root_uses_attribute_paths(ref, fast, registry):
    registry.register(Rich)
    snap = assert_same_leaves(ref, fast, Rich(torch.zeros(1)), is_output=True)
    assert display_paths(snap)[0] == "output.Zeta"


def test_registered_user_type_nested_in_user_type(ref, fast, registry):
    class Outer(Fields):
        pass

    class Inner(Fields):
        pass

    registry.register(Outer)
    registry.register(Inner)
    snap = assert_same_leaves(ref, fast, [Outer(inner=Inner(t=torch.zeros(1)), z=0)])
    assert display_paths(snap) == ["[0].inner.t", "[0].z"]


def test_subclass_of_a_registered_user_type_is_not_walked(ref, fast, registry):
    class Base(Fields):
        pass

    class Derived(Base):
        pass

    registry.register(Base)
    snap = assert_same_leaves(ref, fast, {"b": Base(t=torch.zeros(1)), "d": Derived(t=torch.zeros(1))})
    assert display_paths(snap) == ["b.t", "d"]


def test_user_type_registered_only_tensors_yields_only_tensors_beneath_it(ref, fast, registry):
    class Cache(Fields):
        pass

    registry.register(Cache, only_tensors=True)
    obj = {"cache": Cache(keys=[torch.zeros(1), 5], length=3, value=torch.zeros(2)), "n": 1, "s": "x"}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["cache.keys[0]", "cache.value", "n", "s"]


def test_nested_registered_type_with_only_tensors_false_overrides_an_only_tensors_parent(ref, fast, registry):
    class TensorsOnly(Fields):
        pass

    class Everything(Fields):
        pass

    def everything():
        return Everything(m=2, t=torch.zeros(1), rest=[3, {"k": "v"}])

    registry.register(TensorsOnly, only_tensors=True)
    registry.register(Everything, only_tensors=False)
    obj = {"a": TensorsOnly(child=everything(), n=1), "b": TensorsOnly(child=[everything(), 4], n=1)}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == [
        "a.child.m",
        "a.child.rest[0]",
        'a.child.rest[1]["k"]',
        "a.child.t",
        "b.child[0].m",
        "b.child[0].rest[0]",
        'b.child[0].rest[1]["k"]',
        "b.child[0].t",
    ]


def test_find_leaves_only_tensors_argument_is_overridden_by_a_registered_type_with_only_tensors_false(
    ref, fast, registry
):
    class Everything(Fields):
        pass

    registry.register(Everything, only_tensors=False)
    obj = {"n": 1, "e": Everything(m=2, t=torch.zeros(1)), "l": [Everything(m=2, t=torch.zeros(1)), "s"]}
    snap = assert_same_leaves(ref, fast, obj, only_tensors=True)
    assert display_paths(snap) == ["e.m", "e.t", "l[0].m", "l[0].t"]


def test_registered_only_tensors_root(ref, fast, registry):
    class Cache(Fields):
        pass

    registry.register(Cache, only_tensors=True)
    snap = assert_same_leaves(ref, fast, Cache(a=1, b=torch.zeros(1)))
    assert display_paths(snap) == [".b"]


def test_dataclass_registered_as_user_type_keeps_field_order_and_uses_only_tensors_flag(ref, fast, registry):
    @dataclasses.dataclass
    class Config:
        z: object
        a: object

    registry.register(Config, only_tensors=True)
    snap = assert_same_leaves(ref, fast, {"c": Config(z=torch.zeros(1), a=2), "d": 3})
    assert display_paths(snap) == ["c.z", "d"]
    assert snap[0][0]["path_iter"][-1][1] == "DATACLASS"


def test_dict_subclass_registered_only_tensors_is_walked_as_a_dict_of_tensors(ref, fast, registry):
    class TensorDict(dict):
        pass

    registry.register(TensorDict, only_tensors=True)
    snap = assert_same_leaves(ref, fast, {"td": TensorDict(a=torch.zeros(1), b=2, c=[torch.zeros(2), "x"])})
    assert display_paths(snap) == ['td["a"]', 'td["c"][0]']


# ------------------------------------------------------------------------------------------- ignored types


class Ignored:
    def __init__(self):
        self.t = torch.zeros(1)


def test_ignored_type_is_neither_walked_nor_returned(ref, fast, registry):
    registry.ignore(Ignored)
    obj = {"i": Ignored(), "l": [Ignored(), 1, (Ignored(),)], "p": Point(x=Ignored(), y=2)}
    snap = assert_same_leaves(ref, fast, obj)
    assert display_paths(snap) == ["l[1]", "p.y"]


def test_ignored_root_yields_nothing(ref, fast, registry):
    registry.ignore(Ignored)
    assert assert_same_leaves(ref, fast, Ignored()) == []


def test_subclass_of_an_ignored_type_is_not_ignored(ref, fast, registry):
    class Sub(Ignored):
        pass

    registry.ignore(Ignored)
    snap = assert_same_leaves(ref, fast, [Ignored(), Sub()])
    assert display_paths(snap) == ["[1]"]


@pytest.mark.parametrize("builtin", [str, type(None), int, dict, tuple, torch.Tensor], ids=lambda t: t.__name__)
def test_ignoring_a_builtin_type_skips_exactly_that_type(ref, fast, registry, builtin):
    registry.ignore(builtin)
    obj = {
        "s": "x",
        "n": None,
        "i": 1,
        "b": True,
        "d": {"k": 2},
        "t": (3,),
        "tensor": torch.zeros(1),
        "param": torch.nn.Parameter(torch.zeros(1)),
        "l": [4],
    }
    assert_same_leaves(ref, fast, obj)
    assert_same_leaves(ref, fast, obj, only_tensors=True)


def test_ignore_type_unregisters_a_registered_user_type(ref, fast, registry):
    registry.register(Rich)
    registry.ignore(Rich)
    assert assert_same_leaves(ref, fast, {"r": Rich(1), "x": 1})[0][0]["display_path"] == "x"


def test_register_user_type_unignores_an_ignored_type(ref, fast, registry):
    registry.ignore(Ignored)
    registry.register(Ignored)
    assert display_paths(assert_same_leaves(ref, fast, {"i": Ignored()})) == ["i.t"]


def test_unregister_makes_a_user_type_a_leaf_again(ref, fast, registry):
    registry.register(Rich)
    assert len(assert_same_leaves(ref, fast, {"r": Rich(1)})) > 1
    registry.unregister(Rich)
    assert display_paths(assert_same_leaves(ref, fast, {"r": Rich(1)})) == ["r"]


def test_unignore_makes_an_ignored_type_a_leaf_again(ref, fast, registry):
    registry.ignore(Ignored)
    assert assert_same_leaves(ref, fast, {"i": Ignored()}) == []
    registry.unignore(Ignored)
    assert display_paths(assert_same_leaves(ref, fast, {"i": Ignored()})) == ["i"]


def test_registering_again_changes_the_only_tensors_flag(ref, fast, registry):
    class Box(Fields):
        pass

    registry.register(Box, only_tensors=True)
    assert display_paths(assert_same_leaves(ref, fast, [Box(a=1, t=torch.zeros(1))])) == ["[0].t"]
    registry.register(Box, only_tensors=False)
    assert display_paths(assert_same_leaves(ref, fast, [Box(a=1, t=torch.zeros(1))])) == ["[0].a", "[0].t"]


def test_unregistering_and_unignoring_unknown_types_is_a_no_op(ref, fast):
    class Unknown:
        pass

    for impl in (ref, fast):
        impl.locator.Locator.unregister_user_type(Unknown)
        impl.locator.Locator.unignore_type(Unknown)
    assert display_paths(assert_same_leaves(ref, fast, [Unknown()])) == ["[0]"]


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
@pytest.mark.parametrize("is_output", [False, True])
def test_locator_survives_pickle_deepcopy_and_copy(ref, fast, how, is_output):
    path = [("x", "DICT"), (0, "SEQUENCE"), ("f", "DATACLASS"), ((1, 2), "DICT"), ("a", "USER_TYPE")]

    def run(impl):
        loc = make_locator(impl, path, is_output)
        again = {"pickle": lambda x: pickle.loads(pickle.dumps(x)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how](
            loc
        )
        return loc_snap(again), again == loc, hash(again) == hash(loc), type(again).__name__

    assert run(fast) == run(ref)
