"""from_json's input types and errors (issue 33, item 2): str, bytes, bytearray and memoryview are read; what
cannot be read raises ``aitune_fast.MetadataDecodeError``, a ``json.JSONDecodeError`` with its position, whose
message says what happened and what to call instead."""

import json
import pickle

import aitune_fast
import pytest
import torch
from aitune_fast import ExactSampleMetadata, SampleMetadata

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
