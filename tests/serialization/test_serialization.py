"""Pickle-free serialisation of ``SampleMetadata``.

- ``to_json()`` / ``SampleMetadata.from_json()``: exact round trips (hypothesis properties over generated
  metadata, symbolic axes learned by ``update_shapes_seen`` included), the shipped JSON Schema checked
  against real output, and every malformed input refused with a ``ValueError`` that says what is wrong.
- ``to_dict()`` / ``SampleMetadata.from_dict()``: the reference's keys, aitune_fast's versioned encoding in the
  values, and dicts written by the real reference read by a restricted unpickler that runs nothing.
- fuzzing of ``from_json`` and ``from_dict``: set ``AITUNE_FAST_FUZZ_EXAMPLES`` (per fuzz test; the default
  is small so that the suite stays quick) and run with ``-s`` to see how many inputs ran.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import math
import os
import pathlib
import pickle
import re
import subprocess
import sys
from collections import UserDict, namedtuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parity import canon, md_snap

if os.environ.get("AITUNE_FAST_TESTS_AGAINST_REFERENCE", "") == "1":  # pragma: no cover - the reference has none
    pytest.skip("aitune_fast's own encodings: nothing to compare the reference with", allow_module_level=True)

import aitune_fast  # noqa: E402
from aitune_fast import Locator, ObjectType, SampleMetadata, TensorSpec  # noqa: E402
from aitune_fast.schema import sample_metadata_schema  # noqa: E402

SM = SampleMetadata
NAN = float("nan")
FUZZ_EXAMPLES = int(os.environ.get("AITUNE_FAST_FUZZ_EXAMPLES", "300"))
PROPERTY_EXAMPLES = int(os.environ.get("AITUNE_FAST_PROPERTY_EXAMPLES", "150"))

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def t(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype)


@dataclasses.dataclass
class Point:
    x: object
    y: object = None


Pair = namedtuple("Pair", ["left", "right"])


class Color(enum.Enum):
    RED = 1


class Layer:
    def __init__(self, keys, values):
        self.keys = keys
        self.values = values


# ------------------------------------------------------------------------------------------------ helpers


def has_nan(x) -> bool:
    """Whether `x` holds a NaN anywhere: such values never compare equal to a decoded copy (nor hash alike)."""
    if isinstance(x, float):
        return math.isnan(x)
    if isinstance(x, complex):
        return math.isnan(x.real) or math.isnan(x.imag)
    if isinstance(x, dict):
        return any(has_nan(k) or has_nan(v) for k, v in x.items())
    if isinstance(x, (list, tuple, set, frozenset)):
        return any(has_nan(v) for v in x)
    return False


def md_has_nan(md) -> bool:
    for loc, value in md.other_data:
        if has_nan(value) or has_nan(loc.path):
            return True
    return any(has_nan(loc.path) for loc, _ in md.tensor_data)


def canon_doc(x):
    """A JSON document with set members sorted (a rebuilt set may iterate in another order)."""
    if isinstance(x, dict):
        out = {k: canon_doc(v) for k, v in x.items()}
        for tag in ("$set", "$frozenset"):
            if tag in out and isinstance(out[tag], list):
                out[tag] = sorted(out[tag], key=lambda v: json.dumps(v, sort_keys=True))
        if "value" in out and "exact_value" in out:
            exact = json.dumps(x["exact_value"])
            if '"$set"' in exact or '"$frozenset"' in exact:
                out["value"] = None  # the lossy form keeps a rebuilt set's iteration order
        return out
    if isinstance(x, list):
        return [canon_doc(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    return x


def has_big_sets(x) -> bool:
    if isinstance(x, (set, frozenset)):
        return len(x) > 1 or any(has_big_sets(v) for v in x)
    if isinstance(x, dict):
        return any(has_big_sets(k) or has_big_sets(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return any(has_big_sets(v) for v in x)
    return False


TEXT_FIELDS = ("describe", "describe_default", "str", "repr", "to_json_dict", "json.dumps")


def snapshot(impl, md) -> dict:
    """``md_snap``, whose text fields are left out where a set of several items may iterate in another
    order once rebuilt (``other_data`` still compares them, sorted)."""
    snap = md_snap(impl, md)
    snap["hash_stable"] = hash(md) == hash(md)
    if any(has_big_sets(v) or has_big_sets(loc.path) for loc, v in md.other_data) or any(
        has_big_sets(loc.path) for loc, _ in md.tensor_data
    ):
        for field in TEXT_FIELDS:
            snap.pop(field)
    return snap


def _mini_errors(schema, value, root, path="") -> list[str]:
    """A small JSON Schema (2020-12) checker for the keywords the shipped schema uses, so that the schema is
    checked against real output even where the ``jsonschema`` package is not installed."""
    if schema is True:
        return []
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return _mini_errors(target, value, root, path)
    errors: list[str] = []
    kinds = {
        "null": lambda v: v is None,
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: (
            (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
        ),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(kinds[k](value) for k in types):
            return [f"{path}: {value!r} is not of type {types}"]
    if "const" in schema and not (value == schema["const"] and type(value) is type(schema["const"])):
        errors.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and not any(value == e and type(value) is type(e) for e in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if "maxLength" in schema and isinstance(value, str) and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "not" in schema and not _mini_errors(schema["not"], value, root, path):
        errors.append(f"{path}: {value!r} should not match {schema['not']}")
    if "anyOf" in schema and all(_mini_errors(s, value, root, path) for s in schema["anyOf"]):
        errors.append(f"{path}: {value!r} matches none of anyOf")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing {key!r}")
        props = schema.get("properties", {})
        for key, item in value.items():
            if "propertyNames" in schema:
                errors += _mini_errors(schema["propertyNames"], key, root, f"{path}/{key}(name)")
            if key in props:
                errors += _mini_errors(props[key], item, root, f"{path}/{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += _mini_errors(schema["additionalProperties"], item, root, f"{path}/{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
            errors.append(f"{path}: {len(value)} items")
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items")
            if sub is not None:
                errors += _mini_errors(sub, item, root, f"{path}/{i}")
    return errors


def schema_errors(doc) -> list[str]:
    """Errors of `doc` against the shipped schema: by ``jsonschema`` where installed, and always by the small
    checker above."""
    schema = sample_metadata_schema()
    errors = _mini_errors(schema, doc, schema)
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - depends on the environment
        return errors
    return errors + [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]


def validate_schema(doc) -> None:
    errors = schema_errors(doc)
    assert not errors, errors[:5]


def refuse_token(token: str):
    raise AssertionError(f"to_json wrote the token {token}, which is not RFC 8259 JSON")


def assert_round_trips(fast, md, *, schema: bool = True) -> None:
    """to_json/from_json and to_dict/from_dict give back an equal metadata (same views, ==, hash)."""
    text = md.to_json()
    data = md.to_dict()
    doc = json.loads(text, parse_constant=refuse_token)  # RFC 8259 JSON: no NaN/Infinity tokens
    if schema:
        validate_schema(doc)
    assert sorted(data) == ["llm_phase", "other_data", "strict", "tensor_data"]
    assert type(data["tensor_data"]) is bytes and type(data["other_data"]) is bytes
    assert not data["tensor_data"].startswith(b"\x80") and not data["other_data"].startswith(b"\x80")
    # the shared keys hold what json.dumps(to_json_dict()) holds
    # (to_json writes the NaN/Infinity/-Infinity tokens json.dumps writes there as strings)
    lossy = json.loads(json.dumps(md.to_json_dict()), parse_constant=str)
    for key in ("strict", "llm_phase"):
        assert doc[key] == lossy[key]
    shared_t = ("access_path", "semantic_path", "shape", "min_shape", "max_shape", "dtype")
    assert canon_doc([{k: e[k] for k in shared_t} for e in doc["tensor_data"]]) == canon_doc(lossy["tensor_data"])
    assert canon_doc([(e["access_path"], e["semantic_path"], e["value"]) for e in doc["other_data"]]) == canon_doc(
        [(e["access_path"], e["semantic_path"], e["value"]) for e in lossy["other_data"]]
    )
    from_json = SM.from_json(text)
    from_dict = SM.from_dict(data)
    for back in (from_json, from_dict):
        assert type(back) is SM
        assert canon_doc(json.loads(back.to_json())) == canon_doc(doc)
        if not md_has_nan(md):
            assert back == md and md == back
            assert hash(back) == hash(md)
    # the Python-object form (after tensor_data is handed out) encodes the same
    want = snapshot(fast, md)
    assert canon_doc(json.loads(md.to_json())) == canon_doc(doc)
    assert snapshot(fast, from_json) == want
    assert snapshot(fast, from_dict) == want


# ------------------------------------------------------------------------------------------------ cases

CASES = {
    "empty": lambda: SM.from_inputs({}, strict=True),
    "plain": lambda: SM.from_inputs({"x": t((2, 3)), "n": 1, "s": "a"}),
    "strict_scalars": lambda: SM.from_inputs(
        {
            "x": t((2, 3)),
            "none": None,
            "yes": True,
            "no": False,
            "int": -7,
            "big": 2**70,
            "neg_big": -(10**40),
            "float": 0.1,
            "neg0": -0.0,
            "inf": float("inf"),
            "ninf": float("-inf"),
            "tiny": 5e-324,
            "large": 1.7976931348623157e308,
            "exp": 1e16,
            "str": 'zażółć 日本 \n\t"\\ \x00\x1f',
            "empty": "",
            "bytes": b"\x00\xffab",
            "complex": 1.5 - 2j,
            "set": {3, 1, 2},
            "fs": frozenset({(1, "a"), frozenset({2}), None}),
            "dtype": torch.bfloat16,
        },
        strict=True,
    ),
    "keys": lambda: SM.from_inputs(
        {
            7: t((1,)),
            (1, "a"): 2,
            True: 3,
            None: 4,
            2.5: [t((3,))],
            b"k": 5,
            frozenset({1}): 6,
            "my key": 7,
            "": 8,
            "$dollar": 9,
            -(2**70): 10,
            (1, (2.5, None)): t((1, 1)),
        },
        strict=True,
    ),
    "nested": lambda: SM.from_inputs(
        {
            "p": Point(x=t((2,)), y=[t((1, 2)), {"k": "v", 3: (t(()), 4)}]),
            "nt": Pair(t((2,), torch.bool), 1),
            "ud": UserDict({"u": t((3, 2))}),
            "deep": [[[[[t((1,))]]]]],
        },
        strict=True,
    ),
    "outputs": lambda: SM.from_outputs((t((2,)), {"k": 1, "t": t((4, 4))}), strict=True),
    "tensor_output": lambda: SM.from_outputs(t((2,))),
    "scalar_root": lambda: SM.from_inputs(3.5, strict=True),
    "dtypes": lambda: SM.from_inputs({str(d): t((1, 2), d) for d in DTYPES}),
    "batch_size": lambda: SM.from_inputs({"x": t((6, 3)), "y": t((2,)), "z": t(())}, batch_size=3),
    "llm": lambda: llm_metadata(torch.tensor([5])),
    "learned": lambda: learned_metadata(),
}


def llm_metadata(cache_position):
    saved = aitune_fast.config.enable_transformers_integration
    aitune_fast.config.enable_transformers_integration = True
    try:
        return SM.from_inputs(
            {"input_ids": t((1, 4), torch.int64), "cache_position": cache_position, "use_cache": True}, strict=True
        )
    finally:
        aitune_fast.config.enable_transformers_integration = saved


def batch_inputs(bs):
    return {
        "ids": t((bs, 4 + bs), torch.int64),
        "pix": t((2 * bs, 3)),
        "static": t((5,)),
        "scalar": t(()),
        "nested": (t((bs,)), [Point(x=t((bs, 2)), y="s")]),
        "n": 3,
    }


def learned_metadata(batch_sizes=(2, 4, 3)):
    md = SM.from_inputs(batch_inputs(batch_sizes[0]), strict=True, batch_size=batch_sizes[0])
    for bs in batch_sizes[1:]:
        md.update_shapes_seen(SM.from_inputs(batch_inputs(bs), strict=True, batch_size=bs))
    return md


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trips(fast, case):
    assert_round_trips(fast, CASES[case]())


def test_learned_specs_keep_learning_alike_after_a_round_trip(fast):
    md = learned_metadata((2, 4))
    for back in (SM.from_json(md.to_json()), SM.from_dict(md.to_dict())):
        third = SM.from_inputs(batch_inputs(5), strict=True, batch_size=5)
        md_copy = SM.from_json(md.to_json())
        md_copy.update_shapes_seen(third)
        back.update_shapes_seen(third)
        assert snapshot(fast, back) == snapshot(fast, md_copy)
        assert back.has_batch_axis() == md.has_batch_axis()
        assert [s.get_batch_axis_multipliers() for s in back.tensor_specs] == [
            s.get_batch_axis_multipliers() for s in md.tensor_specs
        ]


def test_the_example_document(fast):
    md = SM.from_inputs({"x": t((2, 3)), "opts": {"k": (1, 2.5)}, "s": {1}}, strict=True, batch_size=2)
    assert json.loads(md.to_json()) == {
        "format": "aitune_fast.sample_metadata",
        "version": 2,
        "strict": True,
        "llm_phase": None,
        "is_output": False,
        "tensor_data": [
            {
                "locator": [["x", 1]],
                "access_path": "x",
                "semantic_path": "x",
                "shape": [2, 3],
                "min_shape": [2, 3],
                "max_shape": [2, 3],
                "dtype": "torch.float32",
                "bs_multipliers": [1.0, 1.5],
            }
        ],
        "other_data": [
            {
                "locator": [["opts", 1], ["k", 1], [0, 0]],
                "access_path": 'opts["k"][0]',
                "semantic_path": ["opts", "k", 0],
                "exact_value": 1,
                "value": 1,
            },
            {
                "locator": [["opts", 1], ["k", 1], [1, 0]],
                "access_path": 'opts["k"][1]',
                "semantic_path": ["opts", "k", 1],
                "exact_value": 2.5,
                "value": 2.5,
            },
            {
                "locator": [["s", 1]],
                "access_path": "s",
                "semantic_path": "s",
                "exact_value": {"$set": [1]},
                "value": [1],
            },
        ],
    }


def test_floats_are_written_like_python_repr():
    values = [0.1, 1e16, 1e15, 1e-5, 1e-4, 123456789.125, 5e-324, -2.5e-300, 1 / 3, 2.0**60, -0.0]
    md = SM(tuple(), tuple((Locator(((i, ObjectType.SEQUENCE),)), v) for i, v in enumerate(values)), True)
    exact = [e["exact_value"] for e in json.loads(md.to_json())["other_data"]]
    assert [repr(v) for v in exact] == [repr(v) for v in values]
    text = md.to_json()
    for v in values:
        assert repr(v) in text


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=2000, deadline=None)
def test_any_float_is_written_as_its_repr(value):
    md = SM(tuple(), ((Locator((("v", ObjectType.DICT),)), value),), True)
    assert f'"exact_value":{value!r}' in md.to_json()
    ((_, back),) = SM.from_json(md.to_json()).other_data
    assert type(back) is float and math.copysign(1, back) == math.copysign(1, value) and back == value


def test_nan_and_infinities_in_other_data_come_back_as_floats(fast):
    md = SM.from_inputs(
        {"a": NAN, "b": float("inf"), "c": float("-inf"), "d": {NAN}, "e": complex(NAN, 1)}, strict=True
    )
    text = md.to_json()
    assert "NaN" in text and "-Infinity" in text
    for back in (SM.from_json(text), SM.from_dict(md.to_dict())):
        values = [v for _, v in back.other_data]
        assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf
        assert type(values[3]) is set and math.isnan(next(iter(values[3])))
        assert math.isnan(values[4].real) and values[4].imag == 1
        assert snapshot(fast, back) == snapshot(fast, md)


def test_lone_surrogates_in_other_values_round_trip():
    value = "a\udc80b\ud800"
    md = SM(
        tuple(),
        ((Locator((("s", ObjectType.DICT),)), value), (Locator((("k", ObjectType.DICT),)), {"\udfff": 1})),
        True,
    )
    text = md.to_json()
    assert "\\udc80" in text
    for back in (SM.from_json(text), SM.from_dict(md.to_dict())):
        assert back == md and [v for _, v in back.other_data] == [value, {"\udfff": 1}]


def test_user_built_metadata_with_any_exact_values_round_trips(fast):
    values = [
        [1, [2, [3]], (), (1,), {"a": [None]}],
        {"$x": 1, "y": 2},
        {1: "a", "1": "b", (2, 3): {4}, None: frozenset(), 2.5: b""},
        {},
        [],
        set(),
        {"nested": {"deeper": ({"x": (1, {2})},)}},
        [torch.float16, complex(1, -0.0), -(2**100)],
    ]
    others = tuple((Locator(((i, ObjectType.SEQUENCE),)), v) for i, v in enumerate(values))
    spec = TensorSpec(["batch0", "dim1", 7, "odd"], [1, 2, 7, 3], [8, 9, 7, 4], None, [1.0, NAN, 3.5, math.inf])
    tensors = ((Locator((("t", ObjectType.DATACLASS), (0, ObjectType.USER_TYPE))), spec),)
    md = SM(tensors, others, True, "decode")
    assert_round_trips(fast, md)
    back = SM.from_json(md.to_json())
    assert [canon(v) for _, v in back.other_data] == [canon(v) for v in values]
    assert back.llm_phase == "decode" and back.tensor_specs[0].dtype is None


def test_mixed_is_output_locators_round_trip(fast):
    tensors = (
        (Locator((("x", ObjectType.DICT),), is_output=True), TensorSpec([2], [2], [2], torch.int8, [NAN])),
        (Locator(((1, ObjectType.SEQUENCE),), is_output=False), TensorSpec([3], [3], [3], torch.int8, [NAN])),
    )
    others = ((Locator(((2, ObjectType.SEQUENCE),), is_output=True), "v"),)
    md = SM(tensors, others, False)
    assert_round_trips(fast, md)
    back = SM.from_json(md.to_json())
    assert [loc.display_path for loc, _ in back.tensor_data] == ['output["x"]', "[1]"]
    assert [loc.display_path for loc, _ in back.other_data] == ["output[2]"]


def test_exact_sample_metadata_round_trips_as_its_class(fast):
    exact = aitune_fast.ExactSampleMetadata
    md = exact.from_inputs({"x": t((2, 3)), "n": 1})
    doc = json.loads(md.to_json())
    assert doc["class"] == "ExactSampleMetadata"
    validate_schema(doc)
    assert json.loads(md.to_dict()["tensor_data"])["class"] == "ExactSampleMetadata"
    for cls in (SM, exact):  # the document's class, whichever class reads it
        for back in (cls.from_json(md.to_json()), cls.from_dict(md.to_dict())):
            assert type(back) is exact
            assert back == md and hash(back) == hash(md)
            assert snapshot(fast, back)["describe"] == snapshot(fast, md)["describe"]


def test_plain_documents_stay_plain(fast):
    md = SM.from_inputs({"x": t((2, 3)), "n": 1}, strict=True)
    text, data = md.to_json(), md.to_dict()
    assert "class" not in json.loads(text)  # documents of plain metadata are as they were
    assert "class" not in json.loads(data["tensor_data"])
    named = json.loads(text)
    named["class"] = "SampleMetadata"
    validate_schema(named)
    for cls in (SM, aitune_fast.ExactSampleMetadata):
        for back in (cls.from_json(text), cls.from_dict(data), cls.from_json(json.dumps(named))):
            assert type(back) is SM
            assert back == md


@pytest.mark.parametrize("value", ['"os.system"', '"Mine"', "1", "null", '"exactsamplemetadata"'])
def test_documents_name_only_our_classes(fast, value):
    md = aitune_fast.ExactSampleMetadata.from_inputs({"x": t((2, 3))})
    text = md.to_json().replace('"class":"ExactSampleMetadata"', f'"class":{value}')
    with pytest.raises(ValueError, match="class"):
        SM.from_json(text)
    data = md.to_dict()
    data["tensor_data"] = data["tensor_data"].replace(b'"class":"ExactSampleMetadata"', f'"class":{value}'.encode())
    with pytest.raises(ValueError, match="class"):
        SM.from_dict(data)
    # the other part names no class
    data = md.to_dict()
    data["other_data"] = data["other_data"].replace(b'"version":1,', b'"version":1,"class":"ExactSampleMetadata",')
    with pytest.raises(ValueError, match="unexpected key"):
        SM.from_dict(data)


def test_user_subclasses_are_written_as_their_aitune_fast_base(fast):
    """A document names aitune_fast's classes only (making a user's class from a document would need pickle's
    trust): a subclass of ExactSampleMetadata comes back as an ExactSampleMetadata, of SampleMetadata as a
    SampleMetadata, whichever class reads it."""

    class Mine(SM):
        pass

    class MyExact(aitune_fast.ExactSampleMetadata):
        pass

    base = aitune_fast.ExactSampleMetadata.from_inputs({"x": t((2, 3)), "n": 1})
    for cls, expected in ((Mine, SM), (MyExact, aitune_fast.ExactSampleMetadata)):
        md = cls(base.tensor_data, base.other_data, True)
        for reader in (SM, cls):
            for back in (reader.from_json(md.to_json()), reader.from_dict(md.to_dict())):
                assert type(back) is expected
                assert back.tensor_data == md.tensor_data and back.other_data == md.other_data


def test_reference_dicts_of_exact_metadata_load_as_the_reference_loads_them(ref, fast):
    """The reference's pickled dicts do not say which class wrote them; its `from_dict` returns a SampleMetadata."""
    md = ref.exact_sample_metadata.ExactSampleMetadata.from_inputs({"x": t((2, 3)), "n": 1})
    theirs = ref.exact_sample_metadata.ExactSampleMetadata.from_dict(md.to_dict())
    ours = aitune_fast.ExactSampleMetadata.from_dict(md.to_dict())
    assert type(theirs).__name__ == type(ours).__name__ == "SampleMetadata"


# ------------------------------------------------------------------------------------------------ hypothesis

scalar_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.complex_numbers(),
    st.sampled_from(DTYPES),
)
hashable_values = st.recursive(
    scalar_values, lambda inner: st.one_of(st.tuples(inner, inner), st.frozensets(inner, max_size=3)), max_leaves=5
)
leaf_values = st.one_of(scalar_values, st.sets(hashable_values, max_size=3), st.frozensets(hashable_values, max_size=3))
any_values = st.recursive(
    leaf_values,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-3, 3)), inner, max_size=3),
        st.dictionaries(hashable_values, inner, max_size=3),
    ),
    max_leaves=10,
)
# keys that make locators: no NaN (a NaN key never equals a decoded copy)
key_values = st.one_of(
    st.text(max_size=5),
    st.sampled_from(["x", "input_ids", "class", "a b", "1x", "$k", "_"]),
    st.integers(-5, 2**70),
    st.tuples(st.integers(0, 3), st.text(max_size=2)),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=2),
)


@dataclasses.dataclass
class Slot:
    """A tensor leaf of a generated structure: its sizes in the samples `a`, `b` and `c`."""

    shapes: tuple
    dtype: torch.dtype


@st.composite
def slots(draw):
    rank = draw(st.integers(0, 3))
    dtype = draw(st.sampled_from(DTYPES))
    axes = []
    for _ in range(rank):
        mode = draw(st.sampled_from(["static", "batch", "dim"]))
        if mode == "static":
            size = draw(st.integers(0, 5))
            axes.append(("static", size))
        elif mode == "batch":
            axes.append(("batch", draw(st.integers(1, 3))))
        else:
            axes.append(("dim", draw(st.lists(st.integers(0, 9), min_size=3, max_size=3))))
    return axes, dtype


structures = st.recursive(
    st.one_of(slots().map(lambda s: ("slot", s)), leaf_values.map(lambda v: ("leaf", v))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda v: ("list", v)),
        st.lists(inner, max_size=3).map(lambda v: ("tuple", v)),
        st.dictionaries(key_values, inner, max_size=4).map(lambda v: ("dict", v)),
        st.tuples(inner, inner).map(lambda v: ("point", v)),
    ),
    max_leaves=12,
)


def instantiate(node, sample: int, bs: int):
    kind, value = node
    if kind == "slot":
        axes, dtype = value
        shape = []
        for mode, x in axes:
            shape.append(x if mode == "static" else x * bs if mode == "batch" else x[sample])
        return t(tuple(shape), dtype)
    if kind == "leaf":
        return value
    if kind == "list":
        return [instantiate(v, sample, bs) for v in value]
    if kind == "tuple":
        return tuple(instantiate(v, sample, bs) for v in value)
    if kind == "dict":
        return {k: instantiate(v, sample, bs) for k, v in value.items()}
    return Point(instantiate(value[0], sample, bs), instantiate(value[1], sample, bs))


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    tree=st.dictionaries(key_values, structures, max_size=4),
    strict=st.booleans(),
    outputs=st.booleans(),
    batch_sizes=st.lists(st.one_of(st.none(), st.integers(1, 4)), min_size=3, max_size=3),
    samples=st.integers(1, 3),
)
def test_property_round_trip_of_generated_metadata(fast, tree, strict, outputs, batch_sizes, samples):
    factory = SM.from_outputs if outputs else SM.from_inputs

    def sample(i):
        bs = batch_sizes[i]
        return factory(instantiate(("dict", tree), i, bs or 2), strict=strict, batch_size=bs)

    md = sample(0)
    for i in range(1, samples):
        md.update_shapes_seen(sample(i))  # introduces batchN / dimN axes
    assert_round_trips(fast, md)
    # learning goes on alike from a decoded copy
    if samples < 3:
        copy_a, copy_b = SM.from_json(md.to_json()), SM.from_dict(md.to_dict())
        nxt = sample(2)
        for copy in (copy_a, copy_b):
            copy.update_shapes_seen(nxt)
        md.update_shapes_seen(nxt)
        want = snapshot(fast, md)
        assert snapshot(fast, copy_a) == want and snapshot(fast, copy_b) == want


@st.composite
def user_built(draw):
    n_t = draw(st.integers(0, 4))
    n_o = draw(st.integers(0, 4))
    seen = set()
    tensors, others = [], []
    for i in range(n_t + n_o):
        steps = tuple(
            (k, draw(st.sampled_from(list(ObjectType)))) for k in draw(st.lists(key_values, min_size=1, max_size=3))
        )
        loc = Locator(steps, is_output=draw(st.booleans()))
        if loc in seen:
            continue
        seen.add(loc)
        if i < n_t:
            rank = draw(st.integers(0, 3))
            dims = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=rank, max_size=rank)
            shape = draw(
                st.lists(
                    st.one_of(st.integers(0, 9), st.sampled_from(["batch0", "dim1", "x", "batch"])),
                    min_size=rank,
                    max_size=rank,
                )
            )
            spec = TensorSpec(
                shape,
                draw(dims),
                draw(dims),
                draw(st.one_of(st.none(), st.sampled_from(DTYPES))),
                draw(st.lists(st.floats(), min_size=rank, max_size=rank)),
            )
            tensors.append((loc, spec))
        else:
            others.append((loc, draw(any_values)))
    return SM(tuple(tensors), tuple(others), draw(st.booleans()), draw(st.sampled_from([None, "prefill", "decode"])))


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(md=user_built())
def test_property_round_trip_of_user_built_metadata(fast, md):
    assert_round_trips(fast, md)


# ------------------------------------------------------------------------------------------------ schema


def test_the_schema_ships_with_the_package_and_is_valid():
    path = pathlib.Path(aitune_fast.__file__).parent / "schema" / "sample_metadata.schema.json"
    assert path.is_file()
    schema = sample_metadata_schema()
    assert schema == json.loads(path.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(version=3),
        lambda d: d.update(format="other"),
        lambda d: d.pop("strict"),
        lambda d: d.update(extra=1),
        lambda d: d["tensor_data"][0].update(shape=[1.5]),
        lambda d: d["tensor_data"][0].update(dtype="float32"),
        lambda d: d["tensor_data"][0].pop("bs_multipliers"),
        lambda d: d["tensor_data"][0]["locator"][0].__setitem__(1, 4),
        lambda d: d["other_data"][0].update(exact_value={"$tuple": 1}),
        lambda d: d["other_data"][0].update(exact_value={"$unknown": []}),
        lambda d: d["other_data"][0].update(exact_value={"$bytes": "xyz"}),
        lambda d: d["other_data"][0].update(exact_value={"$device": "CPU"}),
        lambda d: d["other_data"][0].update(exact_value={"$device": "cuda:01"}),
        lambda d: d["other_data"][0].update(exact_value={"$device": "cuda:1 "}),
        lambda d: d["other_data"][0].update(exact_value={"$device": "x" * 65}),
        lambda d: d["other_data"][0].update(exact_value={"$device": 1}),
        lambda d: d["other_data"][0].update(exact_value={"$enum": ["m.Color"]}),
        lambda d: d["other_data"][0].update(exact_value={"$enum": ["m.Color", 1]}),
        lambda d: d["other_data"][0].update(exact_value={"$enum": "m.Color.RED"}),
    ],
)
def test_the_schema_refuses_what_from_json_refuses(mutate):
    md = SM.from_inputs({"x": t((2,)), "n": 1}, strict=True)
    doc = json.loads(md.to_json())
    validate_schema(doc)
    mutate(doc)
    assert schema_errors(doc)
    assert _mini_errors(sample_metadata_schema(), doc, sample_metadata_schema())
    with pytest.raises(ValueError):
        SM.from_json(json.dumps(doc))


def test_the_schema_admits_devices_and_allowed_enum_members():
    md = SM.from_inputs({"x": t((2,)), "d": [torch.device("cuda:1"), torch.device("cpu")], "c": Color.RED}, strict=True)
    aitune_fast.add_safe_enums([Color])
    try:
        doc = json.loads(md.to_json())
    finally:
        aitune_fast.remove_safe_enums([Color])
    assert doc["other_data"][-1]["exact_value"] == {"$enum": [f"{Color.__module__}.Color", "RED"]}
    validate_schema(doc)


# ------------------------------------------------------------------------------------------------ malformed text

BASE = SM.from_inputs({"x": t((2, 3)), "n": [1, {2}]}, strict=True, batch_size=2)


def doc_with(mutate):
    doc = json.loads(BASE.to_json())
    mutate(doc)
    return json.dumps(doc)


MALFORMED = {
    "empty": ("", "unexpected end of text"),
    "not_an_object": ("[]", "expected an object, found an array"),
    "truncated": (BASE.to_json()[:-1], "unexpected end of text inside an object"),
    "truncated_string": (BASE.to_json()[:30], "unterminated string"),
    "trailing": (BASE.to_json() + " x", "extra data after the end"),
    "bad_token": ('{"format":"aitune_fast.sample_metadata","version":1,"strict":tru}', "invalid literal"),
    "leading_zero": (BASE.to_json().replace('"shape":[2,3]', '"shape":[02,3]'), "expected ',' or ']', found '2'"),
    "control_char": ('{"format": "a\nb"}', "control character"),
    "bad_escape": ('{"format": "\\q"}', "invalid escape"),
    "unknown_version": (doc_with(lambda d: d.update(version=3)), "unsupported version 3"),
    "version_float": (doc_with(lambda d: d.update(version=1.0)), "version is an integer"),
    "unknown_format": (doc_with(lambda d: d.update(format="x")), 'format is "x"'),
    "dict_part_format": (
        doc_with(lambda d: d.update(format="aitune_fast.sample_metadata.tensor_data")),
        "different part",
    ),
    "missing_key": (doc_with(lambda d: d.pop("llm_phase")), 'missing key "llm_phase"'),
    "unknown_key": (doc_with(lambda d: d.update(extra=1)), 'unexpected key "extra"'),
    "duplicate_key": (BASE.to_json().replace('"strict":true', '"strict":true,"strict":false'), "occurs twice"),
    "strict_type": (doc_with(lambda d: d.update(strict=1)), "expected a boolean"),
    "phase_type": (doc_with(lambda d: d.update(llm_phase=1)), "llm_phase is a string or null"),
    "tensor_list_type": (doc_with(lambda d: d.update(tensor_data={})), "expected an array"),
    "entry_missing": (doc_with(lambda d: d["tensor_data"][0].pop("dtype")), 'tensor_data[0]: missing key "dtype"'),
    "entry_unknown": (doc_with(lambda d: d["tensor_data"][0].update(x=1)), 'tensor_data[0]: unexpected key "x"'),
    "lengths": (doc_with(lambda d: d["tensor_data"][0].update(min_shape=[2])), "different lengths (2, 1, 2, 2)"),
    "shape_type": (
        doc_with(lambda d: d["tensor_data"][0].update(shape=[2, 3.0])),
        "expected an integer, found a float",
    ),
    "shape_null": (doc_with(lambda d: d["tensor_data"][0].update(shape=[None, 3])), "shape holds integers and strings"),
    "min_big": (doc_with(lambda d: d["tensor_data"][0].update(min_shape=[2**64, 3])), "integer out of range"),
    "mult_type": (doc_with(lambda d: d["tensor_data"][0].update(bs_multipliers=["1", 1])), "holds numbers"),
    "dtype_name": (doc_with(lambda d: d["tensor_data"][0].update(dtype="torch.nope")), "is not a torch dtype"),
    "dtype_not_dtype": (doc_with(lambda d: d["tensor_data"][0].update(dtype="torch.Tensor")), "is not a torch dtype"),
    "dtype_form": (doc_with(lambda d: d["tensor_data"][0].update(dtype="os.system")), "not of the form"),
    "dtype_type": (doc_with(lambda d: d["tensor_data"][0].update(dtype=3)), "dtype is a string or null"),
    "object_type": (doc_with(lambda d: d["tensor_data"][0]["locator"][0].__setitem__(1, 9)), "object type 9"),
    "step_shape": (doc_with(lambda d: d["tensor_data"][0]["locator"][0].append(1)), "a locator step is"),
    "unhashable_accessor": (
        doc_with(lambda d: d["tensor_data"][0]["locator"][0].__setitem__(0, [1])),
        "accessor must be hashable",
    ),
    "duplicate_tensor": (
        doc_with(lambda d: d["tensor_data"].append(d["tensor_data"][0])),
        'tensor_data[0] and tensor_data[1] have the same locator "x"',
    ),
    "duplicate_other": (
        doc_with(lambda d: d["other_data"].append(d["other_data"][1])),
        "other_data[1] and other_data[2] have the same locator",
    ),
    "duplicate_by_value": (
        doc_with(lambda d: d["other_data"][1]["locator"][1].__setitem__(0, 0.0)),
        "have the same locator",
    ),
    "unknown_tag": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$nope": 1})), 'unknown tag "$nope"'),
    "tag_extra_key": (
        doc_with(lambda d: d["other_data"][0].update(exact_value={"$tuple": [], "a": 1})),
        "no other keys",
    ),
    "plain_dollar_key": (
        doc_with(lambda d: d["other_data"][0].update(exact_value={"a": 1, "$b": 2})),
        "starts with '$'",
    ),
    "set_twice": (
        doc_with(lambda d: d["other_data"][0].update(exact_value={"$set": [1, 1.0]})),
        "holds an element twice",
    ),
    "set_unhashable": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$set": [[1]]})), "must be hashable"),
    "dict_twice": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$dict": [[1, 2], [1, 3]]})), "key twice"),
    "dict_pair": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$dict": [[1]]})), "[key, value] pair"),
    "plain_twice": (
        '{"format":"aitune_fast.sample_metadata","version":1,"strict":true,"llm_phase":null,"is_output":false,'
        '"tensor_data":[],"other_data":[{"locator":[],"access_path":"","semantic_path":[],'
        '"exact_value":{"a":1,"a":2},"value":null}]}',
        'key "a" occurs twice',
    ),
    "bytes_hex": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$bytes": "ABC"})), "even number of hex"),
    "complex_form": (doc_with(lambda d: d["other_data"][0].update(exact_value={"$complex": [1]})), "[real, imag]"),
    "dtype_tag": (
        doc_with(lambda d: d["other_data"][0].update(exact_value={"$dtype": "torch.nn"})),
        "not a torch dtype",
    ),
    "huge_int": (BASE.to_json().replace('"exact_value":1', '"exact_value":' + "9" * 5000), "integer not readable"),
    "deep": ('{"tensor_data":' + "[" * 100_000, "nested deeper than 512"),
    "other_missing_value": (doc_with(lambda d: d["other_data"][0].pop("exact_value")), 'missing key "exact_value"'),
    "is_output_type": (doc_with(lambda d: d["other_data"][0].update(is_output="yes")), "expected a boolean"),
    "access_path_type": (doc_with(lambda d: d["other_data"][0].update(access_path=1)), "access_path is a string"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_text_is_refused_with_a_clear_value_error(case):
    text, message = MALFORMED[case]
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        SM.from_json(text)
    assert str(info.value).startswith("SampleMetadata.from_json: ")


def test_errors_say_where():
    text = BASE.to_json()
    bad = text.replace('"min_shape":[2,3]', '"min_shape":[2,"3"]')
    with pytest.raises(
        ValueError,
        match=r"tensor_data\[0\]: min_shape: expected an integer, found a string: line 1 column \d+ \(char \d+\)",
    ):
        SM.from_json(bad)
    pretty = json.dumps(json.loads(text), indent=2).replace('"version": 2', '"version": 7')
    with pytest.raises(
        ValueError, match=r"unsupported version 7: this aitune_fast reads versions 1 to 2: line 3 column 14 \(char"
    ):
        SM.from_json(pretty)


def test_key_order_does_not_matter_and_version_is_checked_first():
    doc = json.loads(BASE.to_json())
    reordered = {
        k: doc[k] for k in ["tensor_data", "other_data", "strict", "is_output", "llm_phase", "version", "format"]
    }
    assert SM.from_json(json.dumps(reordered, indent=1)) == BASE
    reordered["version"] = 3
    reordered["tensor_data"][0]["shape"] = "garbage"
    with pytest.raises(ValueError, match="unsupported version 3"):
        SM.from_json(json.dumps(reordered))


@pytest.mark.parametrize("tail", ["ascii", "non_ascii"])
def test_documents_over_32_mib_are_written_in_place_with_the_same_text(tail):
    # from 32 MiB to_json writes straight into the str a chunk at a time (growing it when the
    # entries are longer than its estimate); a non-ASCII character after many chunks moves the
    # text to a Rust buffer. Either way the text must be what the whole-buffer writer produces.
    n = 150_000
    key = "k" * 100  # entries of ~500 bytes: past the 240-byte estimate, so the str grows
    last = "ü" if tail == "non_ascii" else "z"
    md = SM.from_inputs({key: [t((2, 1))] * n, last: t((3,))}, strict=True)
    text = md.to_json()
    assert len(text) > 32 << 20
    assert text.isascii() == (tail == "ascii")
    doc = json.loads(text)
    small = json.loads(SM.from_inputs({key: [t((2, 1))] * 2, last: t((3,))}, strict=True).to_json())
    assert doc["tensor_data"][0] == small["tensor_data"][0]
    assert doc["tensor_data"][-1] == small["tensor_data"][-1]
    entry = dict(small["tensor_data"][1], access_path=f"{key}[{n - 1}]")
    entry["locator"][-1][0] = entry["semantic_path"][-1] = n - 1
    assert doc["tensor_data"][n - 1] == entry
    assert len(doc["tensor_data"]) == n + 1
    assert SM.from_json(text) == md


# ------------------------------------------------------------------------------------------------ what to_json refuses


def other_md(value, key="v"):
    return SM(tuple(), ((Locator((("cfg", ObjectType.DICT), (key, ObjectType.DICT))), value),), True)


@pytest.mark.parametrize(
    "value, kind",
    [
        (pathlib.PurePosixPath("/x"), "pathlib.PurePosixPath"),
        (Color.RED, "Color"),
        (object(), "of type object"),
        ([1, {2: [pathlib.PurePosixPath("/x")]}], "PurePosixPath"),
        (bytearray(b"x"), "of type bytearray"),
        (UserDict({"a": 1}), "UserDict"),
        ((1, Color.RED), "Color"),
    ],
)
def test_values_that_cannot_round_trip_make_to_json_raise_naming_the_locator(value, kind):
    md = other_md(value)
    for encode in (md.to_json, md.to_dict):
        with pytest.raises(TypeError) as info:
            encode()
        message = str(info.value)
        assert (
            'other_data[0] at locator "cfg[\\"v\\"]"' in message or "other_data[0] at locator 'cfg[\"v\"]'" in message
        )
        assert kind in message and "cannot be encoded exactly" in message
    # the lossy JSON dict keeps the reference's str() behaviour
    json.dumps(md.to_json_dict())


def test_circular_and_too_deep_values_raise_value_error():
    loop = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="circular reference"):
        other_md(loop).to_json()
    deep = []
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        other_md(deep).to_json()
    shared = [1]
    assert SM.from_json(other_md([shared, shared]).to_json()) == other_md([[1], [1]])


def test_unencodable_specs_and_fields_raise():
    bad_dtype = SM(((Locator((("x", ObjectType.DICT),)), TensorSpec([1], [1], [1], "float32", [1.0])),), ())
    with pytest.raises(TypeError, match=r"tensor_data\[0\] at locator .x.* dtype 'float32' is not a torch.dtype"):
        bad_dtype.to_json()
    lengths = SM(((Locator((("x", ObjectType.DICT),)), TensorSpec([1, 2], [1, 2], [1], torch.int8, [1.0, 1.0])),), ())
    with pytest.raises(ValueError, match="different lengths"):
        lengths.to_json()
    key = SM(((Locator(((Color.RED, ObjectType.DICT),)), TensorSpec([1], [1], [1], torch.int8, [1.0])),), ())
    with pytest.raises(TypeError, match="Color"):
        key.to_dict()
    phase = SM((), (), False, llm_phase=3)
    with pytest.raises(TypeError, match="llm_phase must be a str or None"):
        phase.to_json()
    loc = Locator((("x", ObjectType.DICT),))
    dup = SM(
        (
            (loc, TensorSpec([1], [1], [1], torch.int8, [1.0])),
            (Locator((("x", ObjectType.DICT),)), TensorSpec([2], [2], [2], torch.int8, [1.0])),
        ),
        (),
    )
    with pytest.raises(ValueError, match=r"tensor_data\[0\] and tensor_data\[1\] have the same locator"):
        dup.to_json()


# ------------------------------------------------------------------------------------------------ from_dict


def test_to_dict_keeps_the_reference_keys_and_is_versioned():
    md = llm_metadata(torch.tensor([0]))
    data = md.to_dict()
    assert sorted(data) == ["llm_phase", "other_data", "strict", "tensor_data"]
    assert data["strict"] is True and data["llm_phase"] == "prefill"
    tensor_part = json.loads(data["tensor_data"])
    other_part = json.loads(data["other_data"])
    assert (tensor_part["format"], tensor_part["version"]) == ("aitune_fast.sample_metadata.tensor_data", 1)
    assert (other_part["format"], other_part["version"]) == ("aitune_fast.sample_metadata.other_data", 1)
    assert SM.from_dict(data) == md
    # bytearrays are read too
    assert SM.from_dict({**data, "tensor_data": bytearray(data["tensor_data"])}) == md


@pytest.mark.parametrize(
    "data, message",
    [
        ([1], "expected a dict"),
        ({}, "missing key"),
        ({**BASE.to_dict(), "extra": 1}, "unexpected key 'extra'"),
        ({**BASE.to_dict(), "strict": 1}, "strict must be a bool"),
        ({**BASE.to_dict(), "llm_phase": 1}, "llm_phase must be a str or None"),
        ({**BASE.to_dict(), "tensor_data": "{}"}, "tensor_data must be bytes"),
        ({**BASE.to_dict(), "other_data": b"garbage"}, "it starts with 0x67"),
        ({**BASE.to_dict(), "other_data": b""}, "it is empty"),
        ({**BASE.to_dict(), "tensor_data": BASE.to_dict()["other_data"]}, "different part"),
        ({**BASE.to_dict(), "tensor_data": BASE.to_dict()["tensor_data"][:-3]}, "unexpected end of text"),
        (
            {**BASE.to_dict(), "tensor_data": BASE.to_dict()["tensor_data"].replace(b'"version":1', b'"version":9')},
            "unsupported version 9",
        ),
        ({**BASE.to_dict(), "tensor_data": b'{"format":"\xff"}'}, "invalid UTF-8"),
        (
            {**BASE.to_dict(), "tensor_data": BASE.to_json().encode()},
            'expected "aitune_fast.sample_metadata.tensor_data"',
        ),
    ],
)
def test_from_dict_refuses_malformed_dicts(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SM.from_dict(data)


def test_the_dict_parts_are_compact_tables():
    md = SM.from_inputs({"x": t((2, 3)), "n": [1, {"a": t((4,))}]}, strict=True, batch_size=2)
    md.update_shapes_seen(SM.from_inputs({"x": t((4, 3)), "n": [1, {"a": t((5,))}]}, strict=True, batch_size=4))
    md2 = SM.from_inputs({"y": t((2,), torch.int8)}, batch_size=2)
    part = json.loads(md.to_dict()["tensor_data"])
    assert {k: part[k] for k in ("format", "version", "is_output", "batch_size", "dtypes")} == {
        "format": "aitune_fast.sample_metadata.tensor_data",
        "version": 1,
        "is_output": False,
        "batch_size": 2.0,
        "dtypes": ["torch.float32"],
    }
    assert part["tensors"][1][:5] == [4, 0, ["dim0"], [4], [5]] and math.isnan(part["tensors"][1][5][0])
    assert part["paths"] == [[0, "x", 1], [0, "n", 1], [2, 1, 0], [3, "a", 1]]
    assert part["tensors"][0] == [1, 0, ["batch0", 3], [2, 3], [4, 3], [1.0, 1.5]]
    assert json.loads(md2.to_dict()["tensor_data"])["tensors"] == [[1, 0, [2]]]
    assert json.loads(md.to_dict()["other_data"]) == {
        "format": "aitune_fast.sample_metadata.other_data",
        "version": 1,
        "is_output": False,
        "paths": [[0, "n", 1], [1, 0, 0]],
        "others": [[2, 1]],
    }


LIST3 = SM.from_inputs({"l": [t((2, 3)), t((2, 4)), t((2, 5))]}, strict=True, batch_size=2)


def with_paths(paths, tensors):
    """LIST3's dict with its tensor_data `paths` and each tensor's path row replaced."""
    data = LIST3.to_dict()
    doc = json.loads(data["tensor_data"])
    doc["paths"] = paths
    for row, path in zip(doc["tensors"], tensors, strict=True):
        row[0] = path
    return {**data, "tensor_data": json.dumps(doc).encode()}


def test_list_items_in_any_order_and_repeated_path_rows_still_name_one_path():
    # from_dict skips the path lookup while a parent's int steps arrive as 0, 1, 2...; each way of
    # breaking that pattern must give what the lookup gives
    out_of_order = SM.from_dict(with_paths([[0, "l", 1], [1, 2, 0], [1, 0, 0], [1, 1, 0]], [3, 4, 2]))
    assert out_of_order == LIST3 and hash(out_of_order) == hash(LIST3)
    assert [str(loc) for loc, _ in out_of_order.tensor_data] == ["l[0]", "l[1]", "l[2]"]
    # a repeated row is the same path: used once it decodes, used twice it is a repeated locator
    repeated = [[0, "l", 1], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 2, 0]]
    assert SM.from_dict(with_paths(repeated, [4, 3, 5])) == LIST3
    with pytest.raises(ValueError, match=r"tensor_data\[0\] and tensor_data\[1\] have the same locator"):
        SM.from_dict(with_paths(repeated, [2, 4, 5]))
    # a repeat that comes after the pattern broke elsewhere, and one of a step made before it broke
    two_lists = [[0, "l", 1], [1, 0, 0], [0, "m", 1], [3, 1, 0], [1, 0, 0], [1, 1, 0], [1, 2, 0]]
    with pytest.raises(ValueError, match="have the same locator"):
        SM.from_dict(with_paths(two_lists, [2, 5, 7]))
    assert SM.from_dict(with_paths(two_lists, [5, 6, 7])) == LIST3
    # the same index under two object types is two paths, in either order
    for kinds in ([0, 1], [1, 0]):
        paths = [[0, "l", 1], [1, 0, kinds[0]], [1, 0, kinds[1]], [1, 1, 0], [1, 2, 0]]
        got = SM.from_dict(with_paths(paths, [2, 3, 4]))
        assert [str(loc) for loc, _ in got.tensor_data] == ["l[0]", "l[0]", "l[1]"]


def test_from_json_reads_entries_in_any_order():
    doc = json.loads(LIST3.to_json())
    doc["tensor_data"].reverse()
    back = SM.from_json(json.dumps(doc))
    assert [str(loc) for loc, _ in back.tensor_data] == ["l[2]", "l[1]", "l[0]"]
    doc["tensor_data"].append(doc["tensor_data"][1])
    with pytest.raises(ValueError, match="have the same locator"):
        SM.from_json(json.dumps(doc))


def part_with(md, key, mutate):
    data = md.to_dict()
    doc = json.loads(data[key])
    mutate(doc)
    return {**data, key: json.dumps(doc).encode()}


ROWS = SM.from_inputs({"x": t((2, 3)), "n": [1, 2]}, strict=True, batch_size=2)
MALFORMED_PARTS = {
    "forward_parent": (
        part_with(ROWS, "tensor_data", lambda d: d["paths"].insert(0, [2, "z", 1])),
        "parent 2 is neither 0",
    ),
    "path_range": (
        part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].__setitem__(0, 9)),
        "path 9 is out of range",
    ),
    "dtype_range": (
        part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].__setitem__(1, 3)),
        "dtype 3 is out of range",
    ),
    "row_short": (part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].pop()), "a tensors row is"),
    "row_four_lists": (
        part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].extend([[2, 3], [2, 3]])),
        "a tensors row",
    ),
    "row_lengths": (
        part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].extend([[2], [2, 3], [1.0, 1.5]])),
        "different lengths (2, 1, 2, 2)",
    ),
    "fresh_symbolic": (
        part_with(ROWS, "tensor_data", lambda d: d["tensors"][0].__setitem__(2, ["batch0", 3])),
        "are integers",
    ),
    "paths_row": (part_with(ROWS, "tensor_data", lambda d: d["paths"][0].pop()), "a paths row is"),
    "missing_paths": (part_with(ROWS, "tensor_data", lambda d: d.pop("paths")), 'missing key "paths"'),
    "batch_size_type": (part_with(ROWS, "tensor_data", lambda d: d.update(batch_size="2")), "batch_size holds numbers"),
    "other_row": (part_with(ROWS, "other_data", lambda d: d["others"][0].append(1)), "expected a boolean"),
    "other_row_long": (part_with(ROWS, "other_data", lambda d: d["others"][0].extend([True, 1])), "an others row is"),
    "duplicate_rows": (
        part_with(ROWS, "other_data", lambda d: d["others"].append(d["others"][0])),
        "other_data[0] and other_data[2] have the same locator",
    ),
    "other_key": (part_with(ROWS, "other_data", lambda d: d.update(dtypes=[])), 'unexpected key "dtypes"'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_PARTS))
def test_malformed_dict_parts_are_refused(case):
    data, message = MALFORMED_PARTS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        SM.from_dict(data)


def test_dict_parts_read_in_any_key_order_and_mixed_with_a_reference_part(ref):
    data = ROWS.to_dict()
    doc = json.loads(data["tensor_data"])
    reordered = {k: doc[k] for k in ["tensors", "dtypes", "paths", "is_output", "batch_size", "version", "format"]}
    assert SM.from_dict({**data, "tensor_data": json.dumps(reordered, indent=2).encode()}) == ROWS
    ref_md = ref_sm(ref).from_inputs({"x": t((2, 3)), "n": [1, 2]}, strict=True, batch_size=2)
    assert SM.from_dict({**data, "other_data": ref_md.to_dict()["other_data"]}) == ROWS
    assert SM.from_dict({**ref_md.to_dict(), "other_data": data["other_data"]}) == ROWS


@pytest.mark.parametrize("dtype", sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str))
def test_every_torch_dtype_round_trips(fast, dtype):
    md = SM(
        ((Locator((("x", ObjectType.DICT),)), TensorSpec([1], [1], [1], dtype, [1.0])),),
        ((Locator((("d", ObjectType.DICT),)), dtype),),
        True,
    )
    for back in (SM.from_json(md.to_json()), SM.from_dict(md.to_dict())):
        assert back.tensor_specs[0].dtype is dtype and back.other_data[0][1] is dtype


# ------------------------------------------------------------------------------------------------ the reference's dicts


def ref_sm(ref):
    return ref.sample_metadata.SampleMetadata


def build_both(ref, build, factory="from_inputs", **kwargs):
    return getattr(ref_sm(ref), factory)(build(), **kwargs), getattr(SM, factory)(build(), **kwargs)


REFERENCE_CASES = {
    "plain": (lambda: {"x": t((2, 3)), "y": [t((1,)), (t((4, 4)), {"z": t(())})]}, "from_inputs", {}),
    "strict_scalars": (
        lambda: {
            "x": t((2,)),
            "n": None,
            "b": True,
            "i": -3,
            "big": 2**70,
            "f": 0.25,
            "inf": float("-inf"),
            "neg0": -0.0,
            "s": "zażółć\n",
            "bytes": b"\x00x",
            "c": 1 - 2j,
            "set": {1, "a", (2, 3)},
            "fs": frozenset({frozenset({1}), None}),
            "dtype": torch.float16,
        },
        "from_inputs",
        {"strict": True},
    ),
    "nan": (lambda: {"f": NAN, "s": {NAN}}, "from_inputs", {"strict": True}),
    "keys": (
        lambda: {7: t((1,)), (1, "a"): 2, True: 3, None: 4, 2.5: [t((3,))], b"k": 5, frozenset({1}): 6, "a b": 7},
        "from_inputs",
        {"strict": True},
    ),
    "dataclasses": (
        lambda: {
            "p": Point(x=t((2,)), y=Point(x=[t((1, 2))], y="s")),
            "nt": Pair(t((2,)), 1),
            "ud": UserDict({"u": t((3,))}),
        },
        "from_inputs",
        {"strict": True},
    ),
    "outputs": (lambda: (t((2,)), {"k": 1, "t": t((4, 4))}), "from_outputs", {"strict": True}),
    "tensor_output": (lambda: t((2, 5), torch.int64), "from_outputs", {}),
    "empty": (lambda: {}, "from_inputs", {"strict": True}),
    "dtypes": (lambda: {str(d): t((1,), d) for d in DTYPES}, "from_inputs", {}),
    "batch_size": (lambda: {"x": t((6, 3)), "y": t((3,))}, "from_inputs", {"batch_size": 3}),
    "many": (
        lambda: {"blocks": {f"b{i}": [t((2, j % 3 + 1)) for j in range(20)] for i in range(50)}},
        "from_inputs",
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(REFERENCE_CASES))
def test_reads_dicts_written_by_the_reference(ref, fast, case):
    build, factory, kwargs = REFERENCE_CASES[case]
    ref_md, fast_md = build_both(ref, build, factory, **kwargs)
    loaded = SM.from_dict(ref_md.to_dict())
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)
    if not md_has_nan(fast_md):
        assert loaded == fast_md and hash(loaded) == hash(fast_md)
    # and from there on it is aitune_fast's own
    assert_round_trips(fast, loaded)


def test_reads_learned_shapes_written_by_the_reference(ref, fast):
    def learn(SM_):
        md = SM_.from_inputs(batch_inputs(2), strict=True, batch_size=2)
        md.update_shapes_seen(SM_.from_inputs(batch_inputs(4), strict=True, batch_size=4))
        md.update_shapes_seen(SM_.from_inputs(batch_inputs(3), strict=True, batch_size=3))
        return md

    ref_md, fast_md = learn(ref_sm(ref)), learn(SM)
    loaded = SM.from_dict(ref_md.to_dict())
    assert snapshot(fast, loaded) == snapshot(ref, ref_md) == snapshot(fast, fast_md)
    assert loaded == fast_md and hash(loaded) == hash(fast_md)
    nxt_ref = ref_sm(ref).from_inputs(batch_inputs(5), strict=True, batch_size=5)
    ref_md.update_shapes_seen(nxt_ref)
    loaded.update_shapes_seen(SM.from_inputs(batch_inputs(5), strict=True, batch_size=5))
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)


def test_reads_the_reference_llm_phase_and_user_types(ref, fast, registry):
    registry.register(Layer, only_tensors=True)
    for impl in (ref, fast):
        impl.config.config.enable_transformers_integration = True

    def build():
        return {
            "ids": t((1, 4), torch.int64),
            "cache": [Layer(t((1, 2)), t((1, 2)))],
            "cache_position": torch.tensor([3]),
        }

    ref_md, fast_md = build_both(ref, build, strict=True)
    loaded = SM.from_dict(ref_md.to_dict())
    assert loaded.llm_phase == "decode"
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)
    assert loaded == fast_md and hash(loaded) == hash(fast_md)


def test_reads_locators_with_a_cached_display_path(ref, fast):
    ref_md, fast_md = build_both(ref, lambda: {"x": t((2,)), "d": {"k": 1}}, strict=True)
    for loc, _ in ref_md.tensor_data + ref_md.other_data:
        assert loc.display_path  # cached into the instance's __dict__, and so pickled
    assert b"display_path" in ref_md.to_dict()["tensor_data"]
    loaded = SM.from_dict(ref_md.to_dict())
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_reads_every_pickle_protocol_from_2(ref, fast, protocol):
    ref_md, fast_md = build_both(ref, REFERENCE_CASES["strict_scalars"][0], strict=True)
    data = {
        "tensor_data": pickle.dumps(ref_md.tensor_data, protocol=protocol),
        "other_data": pickle.dumps(ref_md.other_data, protocol=protocol),
        "strict": True,
        "llm_phase": None,
    }
    loaded = SM.from_dict(data)
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)
    assert loaded == fast_md


@pytest.mark.parametrize("protocol", [0, 1])
def test_refuses_protocols_0_and_1(ref, protocol):
    ref_md, _ = build_both(ref, lambda: {"x": 1}, strict=True)
    data = {**ref_md.to_dict(), "other_data": pickle.dumps(ref_md.other_data, protocol=protocol)}
    with pytest.raises(ValueError, match="neither aitune_fast's encoding .* nor a pickle written by the reference"):
        SM.from_dict(data)
    # and with a protocol header added, the instance building they use is refused
    with pytest.raises(ValueError, match="refused"):
        SM.from_dict({**data, "other_data": b"\x80\x02" + data["other_data"]})


def test_reads_reference_metadata_with_mixed_outputs_and_repeated_locators(ref, fast):
    R = ref.locator
    RT = ref.tensor_spec.TensorSpec
    loc = R.Locator((("x", R.ObjectType.DICT),))
    tensors = (
        (loc, RT([2], [2], [2], torch.int8, [NAN])),
        (R.Locator(((1, R.ObjectType.SEQUENCE),), is_output=True), RT([3, "dim1"], [3, 1], [3, 5], None, [1.0, NAN])),
        (R.Locator((("x", R.ObjectType.DICT),)), RT([4], [4], [4], torch.int8, [NAN])),
    )
    others = ((R.Locator((("o", R.ObjectType.DATACLASS),), is_output=True), 5),)
    ref_md = ref_sm(ref)(tensors, others, True, "prefill")
    loaded = SM.from_dict(ref_md.to_dict())
    assert snapshot(fast, loaded) == snapshot(ref, ref_md)
    # repeated locators cannot be written by aitune_fast's encodings: it says so
    with pytest.raises(ValueError, match="have the same locator"):
        loaded.to_json()


def test_reference_values_outside_the_allowlist_are_refused_by_name(ref):
    for value, name in [
        (pathlib.PurePosixPath("/x"), "pathlib.PurePosixPath"),
        (Color.RED, "test_serialization.Color"),
        (torch.device("cpu"), "torch.device"),
    ]:
        ref_md, _ = build_both(ref, lambda value=value: {"v": value}, strict=True)
        with pytest.raises(ValueError, match=f"refused global {name}"):
            SM.from_dict(ref_md.to_dict())


# ------------------------------------------------------------------------------------------------ nothing runs


class Payload:
    """Pickles as a call that creates a file."""

    def __init__(self, path, how="system"):
        self.path = str(path)
        self.how = how

    def __reduce__(self):
        if self.how == "system":
            return (os.system, (f"touch {self.path}",))
        if self.how == "exec":
            return (exec, (f"open({self.path!r}, 'w').close()",))
        if self.how == "eval":
            return (eval, (f"open({self.path!r}, 'w').close()",))
        if self.how == "open":
            return (open, (self.path, "w"))
        return (subprocess.call, (["touch", self.path],))


def reference_payloads(ref, path):
    """Reference-shaped pickles with the payload in every place a value can hide."""
    R = ref.locator
    RT = ref.tensor_spec.TensorSpec
    loc = R.Locator((("x", R.ObjectType.DICT),))
    yield "other value", {"other_data": pickle.dumps(((loc, Payload(path)),))}
    yield "nested other value", {"other_data": pickle.dumps(((loc, [1, {"k": (Payload(path, "exec"),)}]),))}
    yield "accessor", {"other_data": pickle.dumps(((R.Locator(((Payload(path, "eval"), R.ObjectType.DICT),)), 1),))}
    yield (
        "spec shape",
        {"tensor_data": pickle.dumps(((loc, RT([Payload(path, "open")], [1], [1], torch.int8, [1.0])),))},
    )
    yield "spec dtype", {"tensor_data": pickle.dumps(((loc, RT([1], [1], [1], Payload(path, "call"), [1.0])),))}
    yield "top level", {"tensor_data": pickle.dumps(Payload(path))}
    bad_loc = R.Locator((("x", R.ObjectType.DICT),))
    bad_loc._is_output = Payload(path)
    yield "locator state", {"tensor_data": pickle.dumps(((bad_loc, RT([1], [1], [1], torch.int8, [1.0])),))}


def test_a_payload_that_would_create_a_file_is_refused_and_nothing_runs(ref, tmp_path):
    base = ref_sm(ref).from_inputs({"x": t((1,))}).to_dict()
    for where, parts in reference_payloads(ref, tmp_path / "pwned"):
        data = {**base, **parts}
        with pytest.raises(ValueError) as info:
            SM.from_dict(data)
        message = str(info.value)
        assert "refused global" in message, (where, message)
        assert any(
            name in message for name in ("posix.system", "builtins.exec", "builtins.eval", "io.open", "subprocess.call")
        ), message
        assert not (tmp_path / "pwned").exists(), where
    # the payload is real: the reference's from_dict (plain pickle.loads) runs it
    script = "import pickle, sys\ndata = open(sys.argv[1], 'rb').read()\npickle.loads(data)\n"
    payload_file = tmp_path / "payload.pickle"
    payload_file.write_bytes(pickle.dumps(((None, Payload(tmp_path / "proof")),)))
    subprocess.run([sys.executable, "-c", script, str(payload_file)], check=True, capture_output=True)
    assert (tmp_path / "proof").exists()


def raw(*chunks: bytes) -> bytes:
    return b"".join(chunks)


PROTO = b"\x80\x04"


def sgl(module: str, name: str) -> bytes:
    """STACK_GLOBAL of module.name."""
    m, n = module.encode(), name.encode()
    return b"\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(n)]) + n + b"\x93"


HOSTILE = {
    "memo_bomb": (PROTO + b"Nr\xff\xff\xff\x7f.", "memo index 2147483647"),
    "persistent_id": (PROTO + b"N" + b"Q" + b".", "refused opcode BINPERSID"),
    "ext_code": (PROTO + b"\x82\x01.", "refused opcode EXT1"),
    "trailing": (PROTO + b"N.junk", "bytes follow the pickle's STOP"),
    "truncated": (PROTO + b"\x8c\x10abc", "not a readable reference pickle"),
    "no_stop": (PROTO + b"N", "not a readable reference pickle"),
    "global_opcode": (b"\x80\x02cos\nsystem\n.", "refused global os.system"),
    "locator_helper": (PROTO + sgl("aitune.torch.module.locator", "get_object_fields") + b".", "refused global"),
    "dotted": (PROTO + sgl("aitune.torch.module.locator", "Locator.find_leaves") + b".", "refused global"),
    "torch_function": (PROTO + sgl("torch", "load") + b".", "refused global torch.load"),
    "torch_class": (PROTO + sgl("torch", "Tensor") + b".", "refused global torch.Tensor"),
    "reconstructor": (PROTO + sgl("copyreg", "_reconstructor") + b".", "refused global copyreg._reconstructor"),
    "builtin_getattr": (PROTO + sgl("builtins", "getattr") + b".", "refused global builtins.getattr"),
    "state_on_callable": (
        PROTO + sgl("aitune.torch.module.locator", "ObjectType") + b"}\x8c\x0c__defaults__K\x01s" + b"b.",
        "ObjectType was given state",
    ),
    "state_on_dtype": (PROTO + sgl("torch", "float32") + b"}b.", "torch.float32 was given state"),
    "call_dtype": (PROTO + sgl("torch", "float32") + b")R.", "not a readable reference pickle"),
    "object_type_value": (PROTO + sgl("aitune.torch.module.locator", "ObjectType") + b"K\x09\x85R.", "ObjectType(9)"),
    "locator_args": (PROTO + sgl("aitune.torch.module.locator", "Locator") + b"K\x01\x85R.", "not a readable"),
    "locator_state": (
        PROTO + sgl("aitune.torch.module.locator", "Locator") + b")\x81}\x8c\x04evilK\x01sb.",
        "unknown attributes ['evil']",
    ),
    "set_of_call": (PROTO + sgl("builtins", "set") + b"\x8c\x03abc\x85R.", "set() takes a list or tuple"),
    "wrong_top": (PROTO + b"K\x01.", "expected a tuple of (Locator, ...) pairs"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_pickles_are_refused(case):
    data, message = HOSTILE[case]
    base = BASE.to_dict()
    with pytest.raises(ValueError) as info:
        SM.from_dict({**base, "tensor_data": data})
    assert message in str(info.value), str(info.value)


def test_the_memo_bomb_costs_nothing():
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError):
        SM.from_dict({**BASE.to_dict(), "other_data": HOSTILE["memo_bomb"][0]})
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB


# ------------------------------------------------------------------------------------------------ fuzz


class FuzzedEnum(enum.Enum):
    """Allowed for the whole session (no other test uses it): fuzzed documents hold its members."""

    A = 1
    B = 2


aitune_fast.add_safe_enums([FuzzedEnum])
_SEED_MDS = [
    BASE,
    CASES["strict_scalars"](),
    CASES["keys"](),
    CASES["outputs"](),
    learned_metadata((2, 4)),
    SM((), ((Locator(((1, ObjectType.SEQUENCE),)), {"$a": [(), {1.5}, b"x", 1j, torch.int8]}),), True, "decode"),
    SM.from_inputs(
        {"d": [torch.device("cuda:1"), torch.device("cpu")], "e": {FuzzedEnum.A: FuzzedEnum.B}}, strict=True
    ),
]
SEED_TEXTS = [md.to_json() for md in _SEED_MDS]
SEED_PARTS = [md.to_dict() for md in _SEED_MDS]
VOCAB = [
    "format",
    "version",
    "strict",
    "llm_phase",
    "is_output",
    "tensor_data",
    "other_data",
    "locator",
    "access_path",
    "semantic_path",
    "shape",
    "min_shape",
    "max_shape",
    "dtype",
    "bs_multipliers",
    "exact_value",
    "value",
    "$tuple",
    "$set",
    "$frozenset",
    "$dict",
    "$bytes",
    "$complex",
    "$dtype",
    "$device",
    "$enum",
    "cuda:1",
    "aitune_fast.sample_metadata",
    "aitune_fast.sample_metadata.tensor_data",
    "aitune_fast.sample_metadata.other_data",
    "torch.float32",
    "batch0",
]
TOKENS = [
    '"',
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "NaN",
    "-Infinity",
    "1e400",
    "-0",
    "\\u",
    "\\ud800",
    "null",
    "true",
    "1.",
    "9" * 30,
]

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.sampled_from(VOCAB),
        st.text(max_size=4),
        st.integers(0, 3),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(VOCAB), st.text(max_size=3)), inner, max_size=5),
    ),
    max_leaves=20,
)


@st.composite
def mutated(draw, seeds):
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate", "token"]))
        n = len(text)
        i = draw(st.integers(0, max(n - 1, 0)))
        j = draw(st.integers(i, min(n, i + 40)))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.text(max_size=3)) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(VOCAB + TOKENS)) + text[j:]
        elif op == "truncate":
            text = text[:i]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
    return text


@st.composite
def edited_documents(draw):
    """Valid documents with one value swapped for a random JSON value."""
    doc = json.loads(draw(st.sampled_from(SEED_TEXTS)))
    paths = []

    def walk(x, path):
        paths.append(path)
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, (*path, k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, (*path, i))

    walk(doc, ())
    path = draw(st.sampled_from(paths[1:]))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = draw(json_values)
    return json.dumps(doc, allow_nan=True)


fuzz_texts = st.one_of(
    mutated(SEED_TEXTS),
    edited_documents(),
    json_values.map(json.dumps),
    st.text(max_size=40),
)


def check_decoded(md, reencode_may_fail: bool) -> None:
    """A metadata that decoded is whole: it describes, compares, hashes and encodes again. (Not through
    tabulate, which fails on some control characters in the reference too.)"""
    md.describe(aitune_fast.InfoLevel.SHORT)
    md._describe_rows(True)
    md.to_json_dict()
    hash(md)
    assert md == md
    try:
        text = md.to_json()
    except (TypeError, ValueError):
        # legacy data may hold what aitune_fast's encodings refuse (a bytearray, a cycle, repeated locators)
        assert reencode_may_fail
        return
    assert SM.from_json(text).to_json() == text or "$set" in text or "$frozenset" in text


def run_fuzz(capsys, name, strategy, target, reencode_may_fail=False):
    counter = {"inputs": 0, "accepted": 0}

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def fuzz(value):
        counter["inputs"] += 1
        try:
            md = target(value)
        except ValueError:
            return
        counter["accepted"] += 1
        check_decoded(md, reencode_may_fail)

    fuzz()
    with capsys.disabled():
        print(f"\n{name}: {counter['inputs']} inputs, {counter['accepted']} decoded, no other exception")
    assert counter["inputs"] >= min(FUZZ_EXAMPLES, 100)


def test_fuzz_from_json(capsys):
    run_fuzz(capsys, "from_json fuzz", fuzz_texts, SM.from_json)


def _legacy_seeds(ref):
    RSM = ref.sample_metadata.SampleMetadata
    mds = [
        RSM.from_inputs({"x": t((2, 3)), "n": [1, {2}], "k": {3: b"x"}}, strict=True, batch_size=2),
        RSM.from_outputs((t((2,)), 1.5j), strict=True),
        RSM.from_inputs({"a": frozenset({(1, torch.int8)}), "b": None}, strict=True),
    ]
    return [md.to_dict() for md in mds]


@st.composite
def fuzz_dicts(draw):
    base = dict(draw(st.sampled_from(SEED_PARTS + _LEGACY_SEEDS)))
    choice = draw(st.integers(0, 5))
    key = draw(st.sampled_from(["tensor_data", "other_data"]))
    if choice <= 2:
        part = base[key]
        if part.startswith(b"\x80"):
            data = bytearray(part)
            for _ in range(draw(st.integers(1, 4))):
                if not data:
                    break
                i = draw(st.integers(0, len(data) - 1))
                op = draw(st.integers(0, 2))
                if op == 0:
                    data[i] = draw(st.integers(0, 255))
                elif op == 1:
                    del data[i : i + draw(st.integers(1, 8))]
                else:
                    data[i:i] = draw(st.binary(min_size=1, max_size=4))
            base[key] = bytes(data)
        else:
            base[key] = draw(mutated([part.decode()])).encode("utf-8", "surrogatepass")
    elif choice == 3:
        base[key] = draw(st.binary(max_size=30).map(lambda b: b"\x80" + b))
    elif choice == 4:
        base[draw(st.sampled_from(["tensor_data", "other_data", "strict", "llm_phase", "x"]))] = draw(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.binary(max_size=5))
        )
    else:
        base.pop(draw(st.sampled_from(sorted(base))))
    return base


_LEGACY_SEEDS: list = []


def test_fuzz_from_dict(ref, capsys):
    _LEGACY_SEEDS[:] = _legacy_seeds(ref)
    run_fuzz(capsys, "from_dict fuzz", fuzz_dicts(), SM.from_dict, reencode_may_fail=True)


def test_deeply_nested_and_huge_inputs_are_refused_quickly():
    head = '{"format":"aitune_fast.sample_metadata","version":1,"other_data":[{"exact_value":'
    for text in [
        '{"tensor_data":' + "[" * 200_000,
        head + '{"$tuple":[' * 50_000,
        head + "[" * 100_000 + "]" * 100_000,
    ]:
        with pytest.raises(ValueError, match="nested deeper than 512"):
            SM.from_json(text)
    for text in ["[" * 200_000, "{" * 200_000]:
        with pytest.raises(ValueError):
            SM.from_json(text)
    deep = pickle.dumps([[[[[[[[]]]]]]]])[:-1]
    nested = b"\x80\x04" + b"]" * 100_000 + b"a" * 99_999 + b"."
    for data in (deep, nested):
        with pytest.raises(ValueError):
            SM.from_dict({**BASE.to_dict(), "other_data": data})


def test_the_legacy_reader_module_is_importable_without_running_anything():
    from aitune_fast import _legacy

    assert set(_legacy.__all__) == {"load_other_data", "load_tensor_data"}
    with pytest.raises(ValueError):
        _legacy.load_tensor_data(io.BytesIO(b"").getvalue())
