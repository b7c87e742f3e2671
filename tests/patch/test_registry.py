"""The registry of replacements (``aitune_fast.patch._registry``), in this process, no AITune: what it replaces it
puts back, layer by layer in the order asked, newest first, behind a gate where one stands, through the journal."""

from __future__ import annotations

import types

import pytest
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._quiescence import GATES, Codes, Entry
from aitune_fast.patch._registry import UNDO_ORDER, Layer, Registry


class Owner:
    def first(self) -> str:
        return "stock first"

    def second(self) -> str:
        return "stock second"


def fast_first(self) -> str:
    return "fast first"


def fast_second(self) -> str:
    return "fast second"


@pytest.fixture(autouse=True)
def clean_switch():
    yield
    JOURNAL.recording = False
    JOURNAL.commit()
    GATES.open()


def test_restore_puts_back_what_was_replaced_and_forgets_it():
    registry = Registry()
    stock = vars(Owner)["first"]
    assert registry.replace_function(Layer.CALL_PATH, Owner, "first", fast_first)
    assert Owner().first() == "fast first" and fast_first.__wrapped__ is stock  # type: ignore[attr-defined]
    assert fast_first.__doc__ == stock.__doc__
    assert registry.original(Owner, "first") is stock
    registry.restore(Layer.CALL_PATH)
    assert vars(Owner)["first"] is stock and registry.entries() == []


def test_a_second_replacement_of_one_attribute_is_refused_and_the_first_original_kept():
    registry = Registry()
    stock = vars(Owner)["second"]
    assert registry.replace(Layer.CALLERS, Owner, "second", fast_second)
    assert not registry.replace(Layer.CALLERS, Owner, "second", fast_first)
    registry.restore(Layer.CALLERS)
    assert vars(Owner)["second"] is stock


def test_layers_are_restored_alone_and_each_newest_first():
    registry = Registry()
    log: list[str] = []
    for name in ("a", "b", "c"):
        registry.step(
            Layer.CALL_PATH, name, lambda n=name: log.append(f"do {n}"), lambda n=name: log.append(f"undo {n}")
        )
    registry.step(Layer.CONTEXT, "other", lambda: log.append("do other"), lambda: log.append("undo other"))
    registry.restore(Layer.CALL_PATH)
    assert log[-3:] == ["undo c", "undo b", "undo a"]
    assert [e.attribute for e in registry.entries()] == ["other"]
    registry.restore(Layer.CONTEXT)
    assert log[-1] == "undo other" and registry.entries() == []


def test_the_undo_order_names_every_layer_once_the_call_path_first():
    assert sorted(UNDO_ORDER, key=lambda layer: layer.name) == sorted(Layer, key=lambda layer: layer.name)
    assert UNDO_ORDER[:2] == (Layer.CALL_PATH, Layer.CALL_PATH_LIVE)


def test_items_and_module_names():
    """A slot (``_source[0]``) and a name in a module: the module's original is found by the module's name (what
    the checkpoint unpickler and the import view ask)."""
    registry = Registry()
    slot = ["stock context"]
    registry.replace_item(Layer.CONTEXT, slot, 0, "aitune's context")
    registry.replace_item(Layer.CONTEXT, slot, 0, "aitune's context, loaded again")
    module = types.ModuleType("aitune.fake_module")
    module.SampleMetadata = "stock class"  # type: ignore[attr-defined]
    registry.replace(Layer.CALLERS, module, "SampleMetadata", "our class")
    assert slot == ["aitune's context, loaded again"] and module.SampleMetadata == "our class"  # type: ignore[attr-defined]
    assert registry.stock_name("aitune.fake_module", "SampleMetadata") == "stock class"
    for layer in UNDO_ORDER:
        registry.restore(layer)
    assert slot == ["stock context"] and module.SampleMetadata == "stock class"  # type: ignore[attr-defined]
    assert registry.stock_name("aitune.fake_module", "SampleMetadata") is None


def test_a_switch_that_fails_rolls_the_registry_back_with_the_attributes():
    registry = Registry()
    stock = vars(Owner)["first"]
    JOURNAL.recording = True
    registry.replace(Layer.CALL_PATH, Owner, "first", fast_first)
    registry.step(Layer.IMPORT_HOOK, "hook", lambda: None, lambda: None)
    JOURNAL.roll_back()
    assert vars(Owner)["first"] is stock and registry.entries() == []


@pytest.mark.parametrize("stop_after", range(6))
def test_a_restore_interrupted_at_any_step_is_finished_by_the_next(stop_after):
    """Outside a switch (the call-path toggle) nothing is journaled: a restore interrupted between any two steps
    leaves each replacement either in place and recorded, or put back; the next restore puts the rest back."""
    registry = Registry()
    stock = (vars(Owner)["first"], vars(Owner)["second"])
    registry.replace(Layer.CALL_PATH, Owner, "first", fast_first)
    registry.replace(Layer.CALL_PATH, Owner, "second", fast_second)
    registry.step(Layer.CALL_PATH, "live", lambda: None, lambda: None)
    steps = 0
    real_apply = JOURNAL.apply

    def apply(edit):
        nonlocal steps
        if steps == stop_after:
            raise KeyboardInterrupt
        steps += 1
        real_apply(edit)

    JOURNAL.apply = apply  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            registry.restore(Layer.CALL_PATH)
    finally:
        del JOURNAL.apply
    registry.restore(Layer.CALL_PATH)
    assert (vars(Owner)["first"], vars(Owner)["second"]) == stock and registry.entries() == []


def test_a_replacement_made_while_a_gate_stands_goes_behind_it():
    """During a switch AITune's entry points are gates: the registry replaces what stands behind one (the gate
    stays until the switch opens it), and reads the original from behind it."""
    registry = Registry()
    stock = vars(Owner)["first"]
    GATES.close([Entry(Owner, "first")], Codes(calls=frozenset(), long=frozenset()))
    gate = vars(Owner)["first"]
    assert gate is not stock
    registry.replace(Layer.CALL_PATH, Owner, "first", fast_first)
    assert vars(Owner)["first"] is gate and registry.original(Owner, "first") is stock
    GATES.open()
    assert vars(Owner)["first"] is fast_first
    registry.restore(Layer.CALL_PATH)
    assert vars(Owner)["first"] is stock
