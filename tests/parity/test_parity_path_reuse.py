"""A walk repeats the paths of the previous walk on its thread while it can, and shares them when it repeats them all.

These tests run sequences of walks whose paths agree, then part ways (early, late, in a key, in a kind, in length),
on one thread, and compare every result with the reference's. They also pin what the shared paths must not change:
error messages that name a path, and the lifetime of dict keys that are neither str nor int.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref
from collections import UserDict

import pytest
import torch
from parity import Point, arange_tensor, assert_same_eq_hash_classes, md_snap

t = arange_tensor


@dataclasses.dataclass
class Layer:
    keys: object
    values: object


@dataclasses.dataclass
class Box:
    a: object
    b: object = None


def step(n_layers: int, extra: dict | None = None) -> dict:
    out = {
        "input_ids": t((1, 3), torch.int64),
        "layers": [Layer(t((1, 2)), t((1, 2))) for _ in range(n_layers)],
        "use_cache": True,
    }
    out.update(extra or {})
    return out


# each sequence is walked in order on one thread; consecutive entries share a prefix of paths, or not
SEQUENCES = {
    "same structure three times": [lambda: step(3), lambda: step(3), lambda: step(3)],
    "longer, then shorter, then longer": [lambda: step(2), lambda: step(4), lambda: step(1), lambda: step(3)],
    "a key added at the end": [lambda: step(2), lambda: step(2, {"z": t((2,))}), lambda: step(2)],
    "a key added at the front": [lambda: step(2), lambda: {"a": 1, **step(2)}, lambda: step(2)],
    "a key renamed": [lambda: {"x": t((1,)), "y": t((2,))}, lambda: {"x": t((1,)), "w": t((2,))}],
    "equal keys, other str objects": [
        lambda: {"".join(["ke", "y"]): t((1,))},
        lambda: {"".join(["k", "ey"]): t((1,))},
    ],
    "a list becomes a tuple": [lambda: {"x": [t((1,)), t((2,))]}, lambda: {"x": (t((1,)), t((2,)))}],
    "a dict becomes a dataclass": [lambda: {"x": {"a": t((1,))}}, lambda: {"x": Box(t((1,)))}],
    "a dataclass becomes a UserDict": [lambda: {"x": Box(t((1,)))}, lambda: {"x": UserDict({"a": t((1,))})}],
    "a tensor becomes a container": [lambda: {"x": t((1,))}, lambda: {"x": [t((1,))]}, lambda: {"x": t((1,))}],
    "int keys": [lambda: {1: t((1,)), 2: t((2,))}, lambda: {1: t((1,)), 3: t((2,))}, lambda: {1: t((1,))}],
    "bool and int keys": [lambda: {1: t((1,))}, lambda: {True: t((1,))}, lambda: {1: t((1,))}],
    "tuple keys": [lambda: {(1, 2): t((1,))}, lambda: {(1, 2): t((1,))}],
    "root tensor, then root list": [lambda: t((2,)), lambda: [t((2,))], lambda: t((2,))],
    "empty containers": [lambda: {}, lambda: [], lambda: {"a": []}, lambda: {"a": [t((1,))]}],
    "dataclass fields": [lambda: Point(t((1,)), 2), lambda: Point(t((1,)), t((3,))), lambda: Point(1)],
}


@pytest.mark.parametrize("factory", ["from_inputs", "from_outputs"])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_sequence_matches_reference(ref, fast, name, factory):
    ref_mds, fast_mds = [], []
    for build in SEQUENCES[name]:
        ref_md = getattr(ref.sample_metadata.SampleMetadata, factory)(build(), strict=True)
        fast_md = getattr(fast.sample_metadata.SampleMetadata, factory)(build(), strict=True)
        assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
        ref_mds.append(ref_md)
        fast_mds.append(fast_md)
    # metadata that share their paths and metadata that do not compare and hash alike
    assert_same_eq_hash_classes(ref_mds, fast_mds)


def test_inputs_and_outputs_interleaved(ref, fast):
    builds = [lambda: step(2), lambda: (t((1, 5)),), lambda: step(2), lambda: (t((1, 5)), t((2,)))]
    for factory in ["from_inputs", "from_outputs"] * 2:
        for build in builds:
            ref_md = getattr(ref.sample_metadata.SampleMetadata, factory)(build())
            fast_md = getattr(fast.sample_metadata.SampleMetadata, factory)(build())
            assert md_snap(fast, fast_md) == md_snap(ref, ref_md)


def test_locators_of_shared_paths_stay_valid(fast):
    sm = fast.sample_metadata.SampleMetadata
    first = sm.from_inputs(step(2), strict=True)
    paths = [loc.display_path for loc, _ in first.tensor_data]
    # later walks repeat, shorten and extend those paths; the first metadata's locators are unchanged
    for build in [lambda: step(2), lambda: step(1), lambda: step(3, {"z": 1})]:
        sm.from_inputs(build(), strict=True)
    assert [loc.display_path for loc, _ in first.tensor_data] == paths
    assert paths == [
        "input_ids",
        "layers[0].keys",
        "layers[0].values",
        "layers[1].keys",
        "layers[1].values",
    ]


def cycle_message(fast, prime) -> str:
    """The error for a dict that contains itself at layers[1], after walking ``prime`` on a fresh thread."""
    out: list[str] = []

    def run():
        sm = fast.sample_metadata.SampleMetadata
        if prime is not None:
            sm.from_inputs(prime(), strict=True)
        d = {"input_ids": t((1,)), "layers": [t((1,))]}
        d["layers"].append(d)
        with pytest.raises(ValueError, match="cyclic") as info:
            sm.from_inputs(d, strict=True)
        out.append(str(info.value))

    th = threading.Thread(target=run)
    th.start()
    th.join()
    return out[0]


def test_error_paths_do_not_depend_on_the_previous_walk(fast):
    fresh = cycle_message(fast, None)
    assert "layers[1]" in fresh
    # the same prefix, a longer one, and an unrelated structure walked before
    assert cycle_message(fast, lambda: {"input_ids": t((1,)), "layers": [t((1,))]}) == fresh
    assert cycle_message(fast, lambda: {"input_ids": t((1,)), "layers": [t((1,)), {"a": t((1,))}]}) == fresh
    assert cycle_message(fast, lambda: {"q": t((1,))}) == fresh


class Key:
    """A hashable dict key that is neither a str nor an int."""

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, Key) and other.name == self.name


def test_other_dict_keys_are_not_kept_alive(fast):
    sm = fast.sample_metadata.SampleMetadata
    key = Key("k")
    ref = weakref.ref(key)
    md = sm.from_inputs({key: t((1,))}, strict=True)
    del md, key
    gc.collect()
    assert ref() is None


def test_str_keys_equal_but_not_identical_are_looked_up_again(fast):
    # a key of a later walk equal to the earlier one but another object gives the same locator
    sm = fast.sample_metadata.SampleMetadata
    a = sm.from_inputs({"".join(["x", "y"]): t((1,))})
    b = sm.from_inputs({"".join(["x", "y"]): t((1,))})
    assert a == b and hash(a) == hash(b)
    assert [loc.display_path for loc, _ in b.tensor_data] == ["xy"]
