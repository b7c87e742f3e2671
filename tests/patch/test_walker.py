"""The one walker over plain containers (``aitune_fast.patch._objects.plan_conversion``), in this process, no
AITune: every leaf in dicts (keys and values), lists and tuples converted once, nothing changed until the edits are
made, innermost first, tuples rebuilt, cycles and shared containers walked once, one depth limit."""

from __future__ import annotations

import pytest
from aitune_fast.patch._objects import CONTAINER_DEPTH, plan_conversion


class Old:
    def __init__(self, name: str) -> None:
        self.name = name


class New:
    def __init__(self, old: Old) -> None:
        self.name = old.name


def is_old(value) -> bool:
    return type(value) is Old


def apply(edits) -> None:
    for edit in edits:
        edit.do()


def test_leaves_in_nested_containers_are_converted_by_the_edits_only():
    a, b, c = Old("a"), Old("b"), Old("c")
    inner = [a, (b, 1)]
    state = {"inner": inner, a: "keyed", "t": (c,), "plain": 1}
    (root,), edits = plan_conversion([state], is_old, New)
    assert root is state and inner[0] is a and a in state  # planned, nothing changed yet
    apply(edits)
    assert type(inner[0]) is New and type(inner[1][0]) is New and type(state["t"][0]) is New
    assert [type(key) for key in state] == [str, New, str, str]  # the key, in its place
    assert inner[0] is next(k for k in state if type(k) is New)  # one conversion of a leaf held twice


def test_the_edits_undo_in_reverse():
    a = Old("a")
    state = {a: [a], "l": [1, a]}
    (_,), edits = plan_conversion([state], is_old, New)
    apply(edits)
    for edit in reversed(edits):
        edit.undo()
    assert list(state) == [a, "l"] and state[a] == [a] and state["l"] == [1, a]


def test_a_tuple_root_or_a_leaf_root_is_returned_converted():
    a = Old("a")
    (root_tuple, root_leaf, untouched), edits = plan_conversion([(1, a), a, (1, 2)], is_old, New)
    assert type(root_tuple[1]) is New and type(root_leaf) is New and untouched == (1, 2) and edits == []


def test_cycles_and_shared_containers_are_walked_once():
    a = Old("a")
    shared = [a]
    cycle: list = [shared]
    cycle.append(cycle)
    (_,), edits = plan_conversion([{"x": cycle, "y": shared}], is_old, New)
    assert len(edits) == 1
    apply(edits)
    assert type(shared[0]) is New


def test_containers_deeper_than_the_limit_are_left_alone():
    def nested(depth: int) -> tuple[list, list]:
        innermost = [Old("deep")]
        value = innermost
        for _ in range(depth):
            value = [value]
        return value, innermost

    at_limit, innermost = nested(CONTAINER_DEPTH)
    apply(plan_conversion([at_limit], is_old, New)[1])
    assert type(innermost[0]) is New
    past_limit, innermost = nested(CONTAINER_DEPTH + 1)
    assert plan_conversion([past_limit], is_old, New)[1] == []
    assert type(innermost[0]) is Old


def test_keys_that_would_become_equal_are_refused_before_anything_changes():
    class Same:
        def __init__(self, old: Old) -> None:
            pass

        def __hash__(self) -> int:
            return 0

        def __eq__(self, other) -> bool:
            return type(other) is Same

    state = {Old("a"): 1, Old("b"): 2}
    keys = list(state)
    with pytest.raises(RuntimeError, match="would make two of them equal"):
        plan_conversion([state], is_old, Same)
    assert list(state) == keys
