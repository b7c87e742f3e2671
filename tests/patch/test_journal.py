"""The switch's journal (``aitune_fast.patch._journal``), in this process, no AITune: a switch interrupted at any
step is rolled back whole, also when its roll back is interrupted too, and edits made by edits are undone with them."""

from __future__ import annotations

import pytest
from aitune_fast.patch._journal import Journal, Rekey, SetItem, Step


class Interrupted(BaseException):
    """Stands for a KeyboardInterrupt at one step."""


def changes(world: dict) -> list:
    """Five edits of the kinds a switch makes, on `world`."""
    items = [1, 2, 3]
    world["items"] = items
    keyed = {"a": 1, "b": 2}
    world["keyed"] = keyed
    return [
        SetItem(world, "x", world.get("x"), "new"),
        SetItem(items, 1, 2, 20),
        Rekey(keyed, list(keyed.items()), [("A", 1), ("B", 2)]),
        Step(lambda: world.__setitem__("flag", True), lambda: world.pop("flag", None)),
        SetItem(world, "y", world.get("y"), "new"),
    ]


def snapshot(world: dict) -> dict:
    return {
        key: (list(value.items()) if isinstance(value, dict) else list(value) if isinstance(value, list) else value)
        for key, value in world.items()
    }


def run_switch(journal: Journal, edits: list, fail_at: int | None) -> None:
    """A switch: records while it applies `edits`, raising at the `fail_at`-th; rolled back when it raises."""
    journal.recording = True
    try:
        for index, edit in enumerate(edits):
            if index == fail_at:
                raise Interrupted(index)
            journal.apply(edit)
    except BaseException:
        journal.roll_back()
        raise
    finally:
        journal.recording = False
    journal.commit()


@pytest.mark.parametrize("fail_at", range(5))
def test_a_switch_interrupted_at_any_step_leaves_everything_as_it_was(fail_at):
    world: dict = {"x": "old"}
    edits = changes(world)
    before = snapshot(world)
    journal = Journal()
    with pytest.raises(Interrupted):
        run_switch(journal, edits, fail_at)
    assert snapshot(world) == before
    assert journal.edits == []


def test_a_switch_that_completes_is_committed_and_not_undone_later():
    world: dict = {"x": "old"}
    journal = Journal()
    run_switch(journal, changes(world), None)
    assert world["x"] == "new" and world["items"] == [1, 20, 3] and list(world["keyed"]) == ["A", "B"]
    assert journal.edits == [] and journal.roll_back() is False
    assert world["x"] == "new"


@pytest.mark.parametrize("undo_fails_at", range(4))
def test_an_interrupted_roll_back_is_finished_by_the_next_one(undo_fails_at):
    """The roll back itself interrupted (the second KeyboardInterrupt): what it has not undone stays written down,
    and the next switch's roll back undoes exactly that, newest first."""
    world: dict = {"x": "old"}
    edits = changes(world)
    before = snapshot(world)
    journal = Journal()
    journal.recording = True
    for edit in edits[:4]:
        journal.apply(edit)
    journal.recording = False
    target = edits[3 - undo_fails_at]
    undo = target.undo
    calls = []

    def failing_once() -> None:
        if not calls:
            calls.append(1)
            raise Interrupted("in the roll back")
        undo()

    target.undo = failing_once
    with pytest.raises(Interrupted):
        journal.roll_back()
    assert len(journal.edits) == 4 - undo_fails_at  # the interrupted edit and those older stay written down
    assert journal.roll_back() is True
    assert snapshot(world) == before and journal.edits == []


def test_outside_a_switch_changes_are_made_without_a_record():
    world: dict = {"x": "old"}
    journal = Journal()
    journal.apply(SetItem(world, "x", "old", "new"))
    assert world["x"] == "new" and journal.edits == []


def test_edits_applied_by_an_edit_are_rolled_back_with_it():
    """Re-entrancy: a change whose ``do`` makes more journaled changes (a hooked import during a switch, an
    installer that replaces several attributes): the roll back undoes the inner ones before the outer."""
    world: dict = {"x": "old", "y": "old"}
    journal = Journal()
    order: list[str] = []

    def outer_do() -> None:
        journal.apply(SetItem(world, "y", "old", "inner"))
        world["x"] = "outer"

    def outer_undo() -> None:
        order.append(f"outer sees y={world['y']}")
        world["x"] = "old"

    journal.recording = True
    journal.apply(Step(outer_do, outer_undo))
    journal.apply(SetItem(world, "z", None, "last"))
    assert journal.roll_back() is True
    journal.recording = False
    assert world == {"x": "old", "y": "old", "z": None}
    assert order == ["outer sees y=old"]  # the inner edit (written down after the outer) went first
