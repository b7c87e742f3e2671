"""from_json's input types and errors (issue 33, item 2): str, bytes, bytearray and memoryview are read; what
cannot be read raises ``aitune_fast.MetadataDecodeError``, a ``json.JSONDecodeError`` with its position, whose
message says what happened and what to call instead."""

import json
import pickle

import aitune_fast
import hypothesis
import pytest
import torch
from aitune_fast import ExactSampleMetadata, SampleMetadata
from hypothesis import assume, settings
from hypothesis import strategies as st

MD = SampleMetadata.from_inputs({"t": torch.zeros(2, 3), "scale": 1.5, "name": "é€"})


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_from_json_reads_utf8_bytes_like_objects(kind):
    data = kind(MD.to_json().encode())
    assert SampleMetadata.from_json(data) == MD
    exact = ExactSampleMetadata.from_json(kind(ExactSampleMetadata.from_inputs({"x": 1}).to_json().encode()))
    assert type(exact) is ExactSampleMetadata


def test_other_types_are_a_type_error_naming_what_is_read():
    with pytest.raises(TypeError, match="takes str, bytes, bytearray or memoryview"):
        SampleMetadata.from_json(3)  # type: ignore[arg-type]


def test_the_error_class_is_a_public_json_decode_error():
    assert "MetadataDecodeError" in aitune_fast.__all__
    assert issubclass(aitune_fast.MetadataDecodeError, json.JSONDecodeError)
    assert issubclass(aitune_fast.MetadataDecodeError, ValueError)


def decode_error(text):
    with pytest.raises(aitune_fast.MetadataDecodeError) as info:
        SampleMetadata.from_json(text)
    return info.value


def test_text_that_is_not_json_says_so_with_its_line_and_column():
    e = decode_error("not json {")
    assert "the text is not JSON" in e.msg
    assert "expected an object, found null" not in str(e)
    assert (e.doc, e.pos, e.lineno, e.colno) == ("not json {", 0, 1, 1)


def test_to_json_dict_output_names_to_json_as_the_writer_from_json_reads():
    e = decode_error(json.dumps(MD.to_json_dict()))
    assert 'missing key "format"' in e.msg
    assert "to_json()" in e.msg and "to_json_dict()" in e.msg


def test_positions_are_characters_of_the_text_with_line_and_column():
    text = json.dumps(json.loads(MD.to_json()), indent=2, ensure_ascii=False)
    bad = text.replace('"version": 2', '"version": 7')
    e = decode_error(bad)
    assert "unsupported version 7" in e.msg
    at = bad.index("7,")
    assert e.pos == at and e.doc == bad
    assert (e.lineno, e.colno) == (bad.count("\n", 0, at) + 1, at - bad.rindex("\n", 0, at))
    # after non-ASCII text: a character offset, not a byte offset; bytes are reported on their decoded text
    tail = text.replace('"llm_phase": null', '"llm_phase": nope')
    assert tail != text
    for given in (tail, tail.encode()):
        e = decode_error(given)
        assert e.doc == tail and tail[e.pos :].startswith("nope")


def test_bytes_that_are_not_utf8_are_refused_at_the_first_bad_byte():
    e = decode_error(b'{"format": "\xff"}')
    assert "not UTF-8" in e.msg and e.pos == 12


def test_the_error_pickles_as_json_decode_errors_do():
    e = pickle.loads(pickle.dumps(decode_error("[]")))
    assert type(e) is aitune_fast.MetadataDecodeError and e.pos == 0


# ---------------------------------------------------------------------------------- a str holding lone surrogates
# (issue 42, item 8) a Python str may hold lone surrogates (surrogateescape, os.fsdecode), which UTF-8 cannot: inside a
# string value they are the string's own characters, as json.loads reads them; anywhere else a MetadataDecodeError
# at their position, as json.loads refuses them there

SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=4)
WITH_SURROGATE = st.builds(lambda a, s, b: a + s + b, ANY_TEXT, SURROGATE, ANY_TEXT)


def raw(text: str) -> str:
    """`text` with its escaped lone surrogates written as themselves (json.dumps copies a str's characters)."""
    out = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    assert json.loads(out) == json.loads(text)
    return out


def test_lone_surrogates_inside_string_values_are_read_as_json_loads_reads_them():
    md = SampleMetadata.from_inputs({"k\udce9": ["a\udce9", "é€\ud800", "plain"], "t": torch.zeros(2)}, strict=True)
    text = raw(md.to_json())
    assert "\udce9" in text and "\\udce9" not in text
    back = SampleMetadata.from_json(text)
    assert back == md and str(back) == str(md) and back.to_json() == md.to_json()
    assert [v for _, v in back.other_data] == ["a\udce9", "é€\ud800", "plain"]


@pytest.mark.parametrize(
    "string",
    [
        "\ud83d\ude00",  # a high and a low surrogate, as two code points
        "\ud83d\\ude00",  # as themselves, then escaped: json.loads joins only two escapes
        "\\ud83d\ude00",
        "\udce9\\n\\u00e9\\ud800",  # beside other escapes
    ],
)
def test_surrogates_as_themselves_are_never_joined_to_escapes(string):
    text = SampleMetadata.from_inputs({"x": "SLOT"}, strict=True).to_json().replace('"SLOT"', f'"{string}"')
    expected = json.loads(text)["other_data"][0]["exact_value"]
    assert "\ud83d" not in string or len(expected) == 2
    assert SampleMetadata.from_json(text).other_data[0][1] == expected


@settings(max_examples=100, deadline=None)
@hypothesis.given(
    key=st.one_of(WITH_SURROGATE, st.text(max_size=3)), values=st.lists(WITH_SURROGATE, min_size=1, max_size=3)
)
def test_any_str_values_and_keys_read_back_from_the_text_with_surrogates_unescaped(key, values):
    md = SampleMetadata.from_inputs({key: values}, strict=True)
    try:
        text = md.to_json()
    except ValueError as e:  # a high surrogate then a low one, as two code points: to_json refuses them
        assume("two code points" not in str(e))
        raise
    back = SampleMetadata.from_json(raw(text))
    assert back == md and str(back) == str(md)
    read = [entry["exact_value"] for entry in json.loads(raw(text))["other_data"]]
    assert [v for _, v in back.other_data] == values == read


@pytest.mark.parametrize(
    "where, names_it",
    [
        ("at the start", True),
        ("at the end", False),  # past the document: extra data, as json.loads says
        ("before a key", True),
        ("before a value", True),
        ("after a number", True),
        ("inside an array", True),
    ],
)
def test_a_lone_surrogate_outside_a_string_is_refused_where_json_loads_refuses_it(where, names_it):
    text = MD.to_json()
    bad = {
        "at the start": "\udce9" + text,
        "at the end": text + "\udce9",
        "before a key": text.replace(',"strict"', ',\udce9"strict"'),
        "before a value": text.replace('"strict":', '"strict":\udce9'),
        "after a number": text.replace('"version":2', '"version":2\udce9'),
        "inside an array": text.replace("[[", "[\udce9[", 1),
    }[where]
    assert bad != text
    with pytest.raises(json.JSONDecodeError) as stock:
        json.loads(bad)
    e = decode_error(bad)
    assert (e.doc, e.pos, e.lineno, e.colno) == (bad, stock.value.pos, stock.value.lineno, stock.value.colno)
    assert bad[e.pos] == "\udce9"
    assert ("lone surrogate '\\udce9'" in e.msg) == names_it, e.msg


def test_bytes_holding_a_surrogates_3_byte_form_are_still_not_utf8():
    text = raw(SampleMetadata.from_inputs({"x": "\udce9"}, strict=True).to_json())
    data = text.encode("utf-8", "surrogatepass")
    e = decode_error(data)
    assert "not UTF-8" in e.msg and e.pos == text.index("\udce9")
