"""to_json writes RFC 8259 JSON, format version 2 (issue 33, item 1): no NaN/Infinity tokens anywhere; an unknown
batch multiplier is ``null``, a float that is not finite is ``{"$float": ...}`` in exact values and the string
json.dumps would write as a token in the lossy fields. from_json still reads version 1 documents (tokens)."""

import json
import math

import torch
from aitune_fast import ExactSampleMetadata, SampleMetadata
from aitune_fast.schema import sample_metadata_schema

NAN, INF = float("nan"), float("inf")


def refuse(token):
    raise ValueError(f"not RFC 8259 JSON: {token}")


def nonfinite_metadata():
    inputs = {
        "x": torch.zeros(3, 2),  # batch size unknown: multipliers unknown
        "f": [NAN, INF, -INF, complex(INF, -INF), (NAN, {"k": -INF})],
        INF: "a key that is not finite",
    }
    return SampleMetadata.from_inputs(inputs, strict=True)


def test_to_json_has_no_nan_or_infinity_tokens():
    md = nonfinite_metadata()
    text = md.to_json()
    doc = json.loads(text, parse_constant=refuse)
    assert doc["version"] == 2
    assert doc["tensor_data"][0]["bs_multipliers"] == [None, None]
    exact = [e["exact_value"] for e in doc["other_data"]]
    assert exact[:4] == [
        {"$float": "nan"},
        {"$float": "inf"},
        {"$float": "-inf"},
        {"$complex": [{"$float": "inf"}, {"$float": "-inf"}]},
    ]
    assert [e["value"] for e in doc["other_data"][:3]] == ["NaN", "Infinity", "-Infinity"]
    assert any(step[0] == {"$float": "inf"} for e in doc["other_data"] for step in e["locator"])
    assert "NaN" not in text.replace('"NaN"', "") and "Infinity" not in text.replace('"Infinity"', "").replace(
        '"-Infinity"', ""
    )


def test_round_trips_stay_exact():
    for cls in (SampleMetadata, ExactSampleMetadata):
        kwargs = {"strict": True} if cls is SampleMetadata else {}  # ExactSampleMetadata is strict
        md = cls.from_inputs({"f": [NAN, -INF, complex(NAN, 1.0)], "x": torch.zeros(2)}, **kwargs)
        text = md.to_json()
        back = SampleMetadata.from_json(text)
        assert type(back) is cls and back.to_json() == text
        f = [v for _, v in back.other_data]
        assert math.isnan(f[0]) and f[1] == -INF and math.isnan(f[2].real) and f[2].imag == 1.0
        assert [s.get_batch_axis_multipliers() for s in back.tensor_specs] == [
            s.get_batch_axis_multipliers() for s in md.tensor_specs
        ]


def test_version_1_documents_with_tokens_are_still_read():
    v1 = (
        '{"format":"aitune_fast.sample_metadata","version":1,"strict":true,"llm_phase":null,"is_output":false,'
        '"tensor_data":[{"locator":[["x",1]],"access_path":"x","semantic_path":"x","shape":[3,2],'
        '"min_shape":[3,2],"max_shape":[3,2],"dtype":"torch.float32","bs_multipliers":[NaN,NaN]}],'
        '"other_data":[{"locator":[["f",1],[0,0]],"access_path":"f[0]","semantic_path":["f",0],'
        '"exact_value":NaN,"value":NaN},{"locator":[["f",1],[1,0]],"access_path":"f[1]","semantic_path":["f",1],'
        '"exact_value":{"$complex":[Infinity,-Infinity]},"value":"(inf-infj)"}]}'
    )
    md = SampleMetadata.from_json(v1)
    want = SampleMetadata.from_inputs({"x": torch.zeros(3, 2), "f": [NAN, complex(INF, -INF)]}, strict=True)
    assert md.to_json() == want.to_json()
    json.loads(md.to_json(), parse_constant=refuse)


def test_the_schema_describes_version_2():
    schema = sample_metadata_schema()
    assert 2 in schema["properties"]["version"]["enum"]
    assert "nonfinite" in schema["$defs"]
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - depends on the environment
        return
    doc = json.loads(nonfinite_metadata().to_json(), parse_constant=refuse)
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(doc))


def test_to_dict_is_unchanged():
    data = nonfinite_metadata().to_dict()
    assert b'"version":1' in data["tensor_data"] and b"NaN" in data["tensor_data"]
