"""A metadata decoded from JSON is a backend key like the one it was encoded from.

A model tuned, saved and loaded again holds backend keys decoded from its checkpoint: their paths are their own,
while each call's metadata shares the paths of the previous call. Comparing the two remembers that their paths
agree node for node (see `Arena::twins`); these tests pin that the answers stay the reference's while the calls'
structures change, agree again, or differ only in a key, in either order of comparison.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from parity import arange_tensor

t = arange_tensor


@dataclasses.dataclass
class Layer:
    keys: object
    values: object


def llm(n_layers: int, **extra) -> dict:
    return {
        "input_ids": t((1, 3), torch.int64),
        "past_key_values": {f"layer{i}": {"key": t((2, 4)), "value": t((2, 4))} for i in range(n_layers)},
        "use_cache": True,
        **extra,
    }


# keys are built from the first entries; every entry is then walked as a call, in order, and compared with each key
CALLS = {
    "the same structure again and again": [lambda: llm(3), lambda: llm(3), lambda: llm(3)],
    "more layers, fewer, the same again": [lambda: llm(2), lambda: llm(3), lambda: llm(1), lambda: llm(2)],
    "a key renamed, same number of paths": [
        lambda: {"x": t((1,)), "y": t((2,))},
        lambda: {"x": t((1,)), "w": t((2,))},
        lambda: {"x": t((1,)), "y": t((2,))},
    ],
    "an other value's key renamed": [
        lambda: {"a": t((1,)), "b": 1},
        lambda: {"a": t((1,)), "c": 1},
        lambda: {"a": t((1,)), "b": 1},
    ],
    "an other value changed": [lambda: llm(2), lambda: llm(2, use_cache=False), lambda: llm(2)],
    "a rank changed": [lambda: {"x": t((1, 2))}, lambda: {"x": t((1,))}, lambda: {"x": t((3, 4))}],
    "keys of one path swapped in order": [
        lambda: {"a": t((1,)), "b": t((2,))},
        lambda: {"b": t((2,)), "a": t((1,))},
    ],
    "a list becomes a tuple": [lambda: {"x": [t((1,)), t((2,))]}, lambda: {"x": (t((1,)), t((2,)))}],
    "int keys": [lambda: {1: t((1,)), 2: t((2,))}, lambda: {1: t((1,)), 3: t((2,))}, lambda: {1: t((1,)), 2: t((2,))}],
    "int keys of one hash": [lambda: {-1: t((1,))}, lambda: {-2: t((1,))}, lambda: {-1: t((1,))}],
    "attribute fields": [lambda: {"c": Layer(t((1,)), t((2,)))}, lambda: {"c": Layer(t((1,)), t((2,)))}],
}


def _answers(keys: list, calls: list, key_first: bool) -> list[list[bool]]:
    return [[(k == c) if key_first else (c == k) for k in keys] for c in calls]


@pytest.mark.parametrize("key_first", [True, False], ids=["key == call", "call == key"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_decoded_keys_compare_like_the_reference(ref, fast, name, key_first):
    ref_sm, fast_sm = ref.sample_metadata.SampleMetadata, fast.sample_metadata.SampleMetadata
    builds = CALLS[name]
    ref_keys = [ref_sm.from_inputs(build(), strict=True) for build in builds]
    fast_keys = [fast_sm.from_json(fast_sm.from_inputs(build(), strict=True).to_json()) for build in builds]
    # twice over the whole sequence: the second pass meets remembered answers, and call arenas that changed
    for _ in range(2):
        ref_calls, fast_calls = [], []
        for build in builds:
            ref_calls.append(ref_sm.from_inputs(build(), strict=True))
            fast_calls.append(fast_sm.from_inputs(build(), strict=True))
            # each call compared at once (its arena is then the thread's latest) and again below
            assert _answers(fast_keys, fast_calls[-1:], key_first) == _answers(ref_keys, ref_calls[-1:], key_first)
        assert _answers(fast_keys, fast_calls, key_first) == _answers(ref_keys, ref_calls, key_first)
        assert [hash(k) == hash(c) for k, c in zip(fast_keys, fast_calls, strict=True)] == [True] * len(builds)


def test_a_loaded_key_selects_its_backend_as_the_calls_change(fast):
    sm = fast.sample_metadata.SampleMetadata
    backends = {
        sm.from_json(sm.from_inputs(llm(2), strict=True).to_json()): "two layers",
        sm.from_json(sm.from_inputs({"x": t((1,)), "y": t((2,))}, strict=True).to_json()): "x and y",
    }
    calls = [
        (llm(2), "two layers"),
        (llm(2), "two layers"),
        ({"x": t((1,)), "y": t((2,))}, "x and y"),
        ({"x": t((1,)), "w": t((2,))}, None),  # as many paths as "x and y", one key differs
        ({"x": t((1,)), "y": t((2,))}, "x and y"),
        (llm(2), "two layers"),
        (llm(2, use_cache=False), None),
        (llm(3), None),
        (llm(2), "two layers"),
    ]
    for args, expected in calls:
        assert backends.get(sm.from_inputs(args, strict=True)) == expected, args


def test_paths_of_one_hash_are_told_apart_by_their_keys(fast):
    # hash(-1) == hash(-2) in CPython: the two paths hash alike, as many nodes, only the keys differ
    assert hash(-1) == hash(-2)
    sm = fast.sample_metadata.SampleMetadata
    key = sm.from_json(sm.from_inputs({-1: t((1,))}, strict=True).to_json())
    for _ in range(2):
        assert key == sm.from_inputs({-1: t((1,))}, strict=True)
        assert key != sm.from_inputs({-2: t((1,))}, strict=True)
        assert sm.from_inputs({-2: t((1,))}, strict=True) != key
    assert key == sm.from_inputs({-1: t((2,))}, strict=True)
