"""torch.device and allowed Enum members in the codecs (issue 33, item 3).

``to_json``/``from_json`` and ``to_dict``/``from_dict`` carry ``torch.device`` exactly (``{"$device": str}``), and
members of Enum classes the user allowed with ``aitune_fast.add_safe_enums`` (``{"$enum": [class, member]}``).
Decoding runs nothing a document names: a device is made by ``torch.device`` alone, an Enum class is looked up in
the allow-list and never imported. Other types are refused with an error naming the ways out.
"""

import enum
import json
import os
import pathlib
import sys
import threading

import aitune_fast
import pytest
import torch
from aitune_fast import ExactSampleMetadata, Locator, MetadataDecodeError, ObjectType, SampleMetadata
from hypothesis import assume, given, settings
from hypothesis import strategies as st

SM = SampleMetadata


class Color(enum.Enum):
    RED = 1
    CRIMSON = 1  # an alias of RED
    BLUE = (2, 3)


class Level(enum.IntEnum):
    LOW = 5


class Mode(str, enum.Enum):
    FAST = "fast"


class Perm(enum.Flag):
    R = 4
    W = 2


ENUMS = [Color, Level, Mode, Perm]

DEVICES = [
    torch.device("cpu"),
    torch.device("cuda"),
    torch.device("cuda:0"),
    torch.device("cuda:1"),
    torch.device("meta"),
    torch.device("mps", 0),
    torch.device("xla:3"),
    torch.device("privateuseone"),
]


@pytest.fixture
def allowed():
    """The four Enum classes allowed for one test (and the list as it was afterwards)."""
    before = aitune_fast.get_safe_enums()
    aitune_fast.add_safe_enums(ENUMS)
    yield
    aitune_fast.remove_safe_enums(ENUMS)
    assert aitune_fast.get_safe_enums() == before


def other_md(value, key="v"):
    return SM(tuple(), ((Locator((("cfg", ObjectType.DICT), (key, ObjectType.DICT))), value),), True)


def round_trips(md):
    """Both codecs give back an equal metadata whose values are equal and of the same types."""
    for back in (SM.from_json(md.to_json()), SM.from_dict(md.to_dict())):
        assert back == md and hash(back) == hash(md)
        for (loc, value), (loc2, value2) in zip(back.other_data, md.other_data, strict=True):
            assert loc == loc2 and value == value2 and type(value) is type(value2)
    json.loads(md.to_json(), parse_constant=lambda token: pytest.fail(f"non-standard token {token}"))


# ------------------------------------------------------------------------------------------------ torch.device


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_devices_round_trip_exactly(device):
    md = SM.from_inputs({"device": device, "nested": [(device, {"d": device})], "x": torch.zeros(2)}, strict=True)
    round_trips(md)
    back = SM.from_json(md.to_json()).other_data[0][1]
    assert type(back) is torch.device and back == device and str(back) == str(device)
    assert back.index == device.index and back.type == device.type


def test_devices_as_keys_and_in_sets_round_trip():
    md = SM.from_inputs({torch.device("cuda:1"): torch.zeros(3), "s": {torch.device("cpu")}}, strict=True)
    round_trips(md)


def test_the_device_encoding_and_its_display_value():
    md = other_md(torch.device("cuda:1"))
    entry = json.loads(md.to_json())["other_data"][0]
    assert entry["exact_value"] == {"$device": "cuda:1"}
    # the display fields are what json.dumps(md.to_json_dict()) holds (the reference's str())
    assert entry["value"] == md.to_json_dict()["other_data"][0]["value"] == "cuda:1"
    assert b'{"$device":"cuda:1"}' in md.to_dict()["other_data"]


def document_with(exact_value) -> str:
    doc = json.loads(other_md(1).to_json())
    doc["other_data"][0]["exact_value"] = exact_value
    return json.dumps(doc)


def dict_with(exact_value) -> dict:
    data = other_md(1).to_dict()
    part = json.loads(data["other_data"])
    part["others"][0][1] = exact_value
    return {**data, "other_data": json.dumps(part).encode()}


def refused(exact_value, match):
    """Both readers refuse the value with a MetadataDecodeError matching `match`, placed inside the value."""
    ((tag, _),) = exact_value.items()
    text = document_with(exact_value)
    with pytest.raises(MetadataDecodeError, match=match) as info:
        SM.from_json(text)
    start = text.index(json.dumps(tag))
    assert start < info.value.pos <= start + len(json.dumps(exact_value))
    data = dict_with(exact_value)
    with pytest.raises(MetadataDecodeError, match=match) as info:
        SM.from_dict(data)
    doc = data["other_data"].decode()
    assert info.value.doc == doc
    start = doc.index(json.dumps(tag))
    assert start < info.value.pos <= start + len(json.dumps(exact_value))
    return info.value


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "not of the form"),
        ("CPU", "not of the form"),
        ("cuda:01", "not of the form"),
        ("cuda:-1", "not of the form"),
        ("cuda:1 ", "not of the form"),
        ("cpu; import os", "not of the form"),
        ("__import__('os').system('x')", "not of the form"),
        ("x" * 65, "not of the form"),
        ("foo", "not a device this torch knows"),
        ("os:1", "not a device this torch knows"),
        ("cuda:999", "not the str"),  # torch wraps the index around: cuda:-25
        ("cuda:128", "not the str"),
    ],
)
def test_device_text_that_is_not_a_devices_own_is_refused(text, match):
    e = refused({"$device": text}, match)
    assert "$device" in e.msg


@pytest.mark.parametrize("value", [1, None, ["cuda", 1], {"type": "cuda"}])
def test_device_values_that_are_not_strings_are_refused(value):
    refused({"$device": value}, r"\$device holds a string")


# ------------------------------------------------------------------------------------------------ Enum members


def test_enum_members_are_refused_until_their_class_is_allowed():
    md = other_md(Color.RED)
    for encode in (md.to_json, md.to_dict):
        with pytest.raises(TypeError, match=r"add_safe_enums\(\[Color\]\)") as info:
            encode()
        assert "strict=False" in str(info.value)


def test_allowed_enum_members_round_trip(allowed):
    values = [Color.RED, Color.BLUE, Level.LOW, Mode.FAST, Perm.R, Perm.W]
    md = SM.from_inputs({"members": values, "key": {Color.BLUE: 1, Level.LOW: 2}, Mode.FAST: 3}, strict=True)
    round_trips(md)
    members = [v for _, v in SM.from_json(md.to_json()).other_data][: len(values)]
    assert all(a is b for a, b in zip(members, values, strict=True))


def test_the_enum_encoding_names_the_class_and_member(allowed):
    md = other_md(Color.CRIMSON)  # an alias: written as the member it is
    entry = json.loads(md.to_json())["other_data"][0]
    assert entry["exact_value"] == {"$enum": [f"{__name__}.Color", "RED"]}
    assert SM.from_json(md.to_json()).other_data[0][1] is Color.RED


@pytest.mark.parametrize("member", [Color.BLUE, Level.LOW, Mode.FAST, Perm.R])
def test_enum_display_values_are_the_reference_json_dicts(allowed, member):
    # json_serialize writes an Enum member's value (an int or str mixin's own value)
    md = SM.from_inputs({"v": member, member: 1}, strict=True)
    doc = json.loads(md.to_json())
    display = json.loads(json.dumps(md.to_json_dict()))
    for ours, theirs in zip(doc["other_data"], display["other_data"], strict=True):
        assert ours["value"] == theirs["value"] and ours["semantic_path"] == theirs["semantic_path"]


def test_composite_flags_are_refused_by_name(allowed):
    with pytest.raises(TypeError, match="composite flags cannot be encoded"):
        other_md(Perm.R | Perm.W).to_json()


# names with lone surrogates (issue 42, item 7): the functional API takes any str, e.g. a label read with
# surrogateescape; a class's __module__ and __qualname__ can be any str too
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=3)
SURROGATE_NAMES = st.builds(lambda a, s, b: a + s + b, ANY_TEXT, st.integers(0xD800, 0xDFFF).map(chr), ANY_TEXT)


def surrogate_enum(names, qualname="E", module=__name__):
    """An Enum class of members `names` (None where Enum refuses them), with the given qualified name."""
    try:
        cls = enum.Enum("E", list(names), module=module)
    except (ValueError, TypeError):  # a reserved or repeated name: not a class Enum makes
        return None
    cls.__qualname__ = qualname
    return cls


def allowed_round_trip(cls):
    """Every member of `cls`, allowed, comes back from both codecs as itself."""
    aitune_fast.add_safe_enums([cls])
    try:
        md = other_md(list(cls))
        round_trips(md)
        for back in (SM.from_json(md.to_json()), SM.from_dict(md.to_dict())):
            assert all(a is b for a, b in zip(back.other_data[0][1], cls, strict=True))
    finally:
        aitune_fast.remove_safe_enums([cls])


def test_enum_names_with_lone_surrogates_round_trip_exactly():
    # "?" beside "a\udce9": a name read as "?" would be a silent wrong member
    allowed_round_trip(surrogate_enum(["a\udce9", "?", "b\ud800c"]))
    allowed_round_trip(surrogate_enum(["A", "?"], qualname="Q\udce9"))
    allowed_round_trip(surrogate_enum(["A"], qualname="Outer.\udfff", module="m\udc80"))


@settings(max_examples=100, deadline=None)
@given(
    names=st.lists(SURROGATE_NAMES, min_size=1, max_size=3, unique=True),
    qualname=st.one_of(st.just("E"), SURROGATE_NAMES),
    module=st.one_of(st.just(__name__), SURROGATE_NAMES),
)
def test_any_str_names_round_trip_exactly(names, qualname, module):
    cls = surrogate_enum(["?", *names], qualname, module)
    assume(cls is not None)
    try:
        other_md(list(cls)).to_json()
    except TypeError:  # the class is not allowed yet: every writer refuses it
        pass
    aitune_fast.add_safe_enums([cls])
    try:
        other_md(list(cls)).to_json()
    except ValueError as e:  # a high surrogate then a low one, as two code points: refused by every str writer
        assume("two code points" not in str(e))
        raise
    finally:
        aitune_fast.remove_safe_enums([cls])
    allowed_round_trip(cls)


def test_a_name_json_cannot_carry_is_refused_when_writing_naming_its_characters():
    # a high and a low surrogate as two code points: JSON readers join their escapes into one character
    cls = surrogate_enum(["a\ud83d\ude00"])
    aitune_fast.add_safe_enums([cls])
    try:
        md = other_md(cls["a\ud83d\ude00"])
        for encode in (md.to_json, md.to_dict):
            with pytest.raises(ValueError) as info:
                encode()
            assert str(info.value).endswith(
                ' at locator "cfg[\\"v\\"]" cannot be encoded: a string holds a high surrogate followed by a low one '
                "as two code points ('\\ud83d\\ude00'), which JSON cannot tell from the pair's character"
            )
    finally:
        aitune_fast.remove_safe_enums([cls])


def test_refusals_name_lone_surrogates_as_python_writes_them(allowed):
    e = refused({"$enum": [f"{__name__}.Color", "RED\udce9"]}, "has no member")
    assert f'$enum class "{__name__}.Color" has no member "RED\\udce9"' in e.msg
    e = refused({"$enum": [f"{__name__}.Co\udce9lor", "RED"]}, "is not allowed")
    assert f'$enum class "{__name__}.Co\\udce9lor" is not allowed' in e.msg
    assert "add_safe_enums([Co\\udce9lor])" in e.msg


def test_a_document_naming_a_class_not_allowed_is_refused_naming_the_way_out():
    e = refused({"$enum": [f"{__name__}.Color", "RED"]}, "is not allowed")
    assert "add_safe_enums([Color])" in e.msg and "never import" in e.msg


def test_documents_written_while_allowed_are_refused_once_removed(allowed):
    text, data = other_md(Color.RED).to_json(), other_md(Color.RED).to_dict()
    aitune_fast.remove_safe_enums([Color])
    try:
        with pytest.raises(MetadataDecodeError, match="not allowed"):
            SM.from_json(text)
        with pytest.raises(MetadataDecodeError, match="not allowed"):
            SM.from_dict(data)
    finally:
        aitune_fast.add_safe_enums([Color])
    assert SM.from_json(text) == SM.from_dict(data) == other_md(Color.RED)


@pytest.mark.parametrize(
    "value, match",
    [
        ({"$enum": ["os.system", "x"]}, "not allowed"),
        ({"$enum": ["posix.system", "touch /tmp/x"]}, "not allowed"),
        ({"$enum": ["builtins.eval", "1"]}, "not allowed"),
        ({"$enum": ["subprocess.Popen", "x"]}, "not allowed"),
        ({"$enum": ["antigravity.Fly", "x"]}, "not allowed"),  # a module whose import opens a browser
        ({"$enum": ["this.Zen", "x"]}, "not allowed"),  # a module whose import prints
        ({"$enum": [f"{__name__}.Color", "GREEN"]}, "has no member"),
        ({"$enum": [f"{__name__}.Color", "__class__"]}, "has no member"),
        ({"$enum": [f"{__name__}.Color", "_value2member_map_"]}, "has no member"),
        ({"$enum": [f"{__name__}.Color"]}, r"holds \[class name, member name\]"),
        ({"$enum": [f"{__name__}.Color", "RED", "x"]}, r"holds \[class name, member name\]"),
        ({"$enum": [f"{__name__}.Color", 1]}, r"holds \[class name, member name\]"),
        ({"$enum": f"{__name__}.Color.RED"}, r"holds \[class name, member name\]"),
        ({"$enum": ["Color", "RED"]}, "not allowed"),  # the qualified name, never a short one
    ],
)
def test_hostile_or_malformed_enum_documents_are_refused_and_import_nothing(allowed, value, match, capsys):
    assert "antigravity" not in sys.modules and "this" not in sys.modules
    modules = set(sys.modules)
    calls = []
    real_system = os.system
    os.system = lambda *a: calls.append(a)  # type: ignore[assignment]
    try:
        refused(value, match)
    finally:
        os.system = real_system
    assert calls == [] and set(sys.modules) == modules
    assert capsys.readouterr() == ("", "")


def test_decoding_devices_and_enums_imports_nothing(allowed):
    md = SM.from_inputs({"d": torch.device("cuda:1"), "e": Color.RED}, strict=True)
    text, data = md.to_json(), md.to_dict()
    modules = set(sys.modules)
    assert SM.from_json(text) == SM.from_dict(data) == md
    assert set(sys.modules) == modules


# ------------------------------------------------------------------------------------------------ the allow-list


def test_the_allow_list_api(allowed):
    assert [c for c in aitune_fast.get_safe_enums() if c in ENUMS] == ENUMS
    aitune_fast.add_safe_enums([Color, Color])  # again: harmless
    assert aitune_fast.get_safe_enums().count(Color) == 1
    for bad in [int, object(), "Color", Color.RED, enum.Enum("X", "A").A]:
        with pytest.raises(TypeError, match="Enum class"):
            aitune_fast.add_safe_enums([bad])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="a list of Enum classes"):
        aitune_fast.add_safe_enums(Color)  # type: ignore[arg-type]
    aitune_fast.remove_safe_enums([enum.Enum("NotAllowed", "A")])  # not allowed: ignored


def test_a_second_class_of_the_same_qualified_name_is_refused(allowed):
    Twin = enum.Enum("Color", "RED BLUE", module=__name__)  # noqa: N806
    with pytest.raises(ValueError, match="another class named .*remove_safe_enums"):
        aitune_fast.add_safe_enums([Twin])
    assert Twin not in aitune_fast.get_safe_enums()
    with pytest.raises(TypeError, match="add_safe_enums"):
        other_md(Twin.RED).to_json()  # its members are not written under Color's name


def test_the_list_is_process_wide_and_changes_are_atomic_under_threads(allowed):
    classes = [enum.Enum(f"E{i}", "A B", module=__name__) for i in range(8)]
    md = SM.from_inputs({"e": [Color.RED, Level.LOW]}, strict=True)
    text = md.to_json()
    errors = []

    def churn():
        for _ in range(200):
            aitune_fast.add_safe_enums(classes)
            aitune_fast.remove_safe_enums(classes)

    def codec():
        try:
            for _ in range(200):
                assert SM.from_json(md.to_json()) == md and md.to_json() == text
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=churn), threading.Thread(target=codec), threading.Thread(target=codec)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert not set(classes) & set(aitune_fast.get_safe_enums())


# ------------------------------------------------------------------------------------------------ other types


@pytest.mark.parametrize("value", [pathlib.PurePosixPath("/x"), object(), bytearray(b"x")])
def test_other_types_name_the_ways_out(value):
    md = other_md(value)
    for encode in (md.to_json, md.to_dict):
        with pytest.raises(TypeError) as info:
            encode()
        message = str(info.value)
        assert "cannot be encoded exactly" in message
        assert "pickle" in message and "strict=False" in message and "add_safe_enums" in message


class Sneaky:
    """Claims to be an Enum member through ``__class__`` (which isinstance would ask) and counts the asks."""

    asked = 0

    @property  # type: ignore[misc]
    def __class__(self):
        type(self).asked += 1
        return Color


def test_refusing_an_object_asks_nothing_of_it():
    md = other_md(Sneaky())
    for encode in (md.to_json, md.to_dict):
        with pytest.raises(TypeError, match="Sneaky cannot be encoded exactly.*pickle"):
            encode()
    assert Sneaky.asked == 0


# ------------------------------------------------------------------------------------------------ from_dict errors


def test_from_dict_errors_in_a_part_are_metadata_decode_errors_placed_in_that_part():
    data = dict_with({"$tuple": 3})
    with pytest.raises(MetadataDecodeError) as info:
        SM.from_dict(data)
    e = info.value
    assert isinstance(e, json.JSONDecodeError) and isinstance(e, ValueError)
    assert e.doc == data["other_data"].decode() and e.doc[e.pos :].startswith("3")
    assert e.msg.startswith("SampleMetadata.from_dict: other_data: others[0]") or "other_data" in e.msg
    assert (e.lineno, e.colno) == (1, e.pos + 1)


def test_from_dict_errors_outside_the_parts_stay_value_errors():
    with pytest.raises(ValueError, match="expected a dict") as info:
        SM.from_dict([])  # type: ignore[arg-type]
    assert not isinstance(info.value, MetadataDecodeError)


def test_errors_found_once_the_entries_are_read_name_the_reader_once():
    md = SM.from_inputs({"a": 1, "b": 2}, strict=True)
    doc = json.loads(md.to_json())
    doc["other_data"][1]["locator"] = doc["other_data"][0]["locator"]
    with pytest.raises(MetadataDecodeError) as info:
        SM.from_json(json.dumps(doc))
    # nowhere in particular in the text: placed at its start
    assert info.value.msg == 'SampleMetadata.from_json: other_data[0] and other_data[1] have the same locator "a"'
    assert info.value.pos == 0
    data = md.to_dict()
    part = json.loads(data["other_data"])
    part["others"][1][0] = part["others"][0][0]
    with pytest.raises(ValueError) as plain:
        SM.from_dict({**data, "other_data": json.dumps(part).encode()})
    assert str(plain.value) == 'SampleMetadata.from_dict: other_data[0] and other_data[1] have the same locator "a"'


def test_exact_metadata_keep_their_class(allowed):
    md = ExactSampleMetadata.from_inputs({"d": torch.device("cuda:1"), "e": Color.BLUE})
    for back in (ExactSampleMetadata.from_json(md.to_json()), ExactSampleMetadata.from_dict(md.to_dict())):
        assert type(back) is ExactSampleMetadata and back == md


# ------------------------------------------------------------------------------------------------ the reference


def test_values_round_trip_equal_as_through_the_reference_pickles(ref, fast, allowed):
    # the reference's to_dict pickles devices and Enum members; ours writes them as tags: the values come back equal
    from parity import md_snap

    def build():
        return {
            "x": torch.zeros(2, 3),
            "device": torch.device("cuda:1"),
            "cpu": torch.device("cpu"),
            "modes": [Color.BLUE, Level.LOW, Mode.FAST, Perm.W],
            Color.RED: torch.zeros(1),
        }

    ref_md = ref.sample_metadata.SampleMetadata.from_inputs(build(), strict=True)
    ref_back = ref.sample_metadata.SampleMetadata.from_dict(ref_md.to_dict())
    md = SM.from_inputs(build(), strict=True)
    expected = md_snap(ref, ref_back)
    for back in (SM.from_json(md.to_json()), SM.from_dict(md.to_dict())):
        assert md_snap(fast, back) == expected
        assert [(str(loc), v) for loc, v in back.other_data] == [(str(loc), v) for loc, v in ref_back.other_data]
        assert [type(v) for _, v in back.other_data] == [type(v) for _, v in ref_back.other_data]
