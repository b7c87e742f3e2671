"""``aitune_fast.explain``'s parts that need no AITune: the switch, the refusals, the note on Python 3.10."""

from __future__ import annotations

import os
import subprocess
import sys

import aitune_fast
import pytest
from aitune_fast import _explain


@pytest.fixture
def switch():
    before = aitune_fast.config.explain_misses
    yield
    aitune_fast.config.explain_misses = before


def test_configure_sets_the_switch_and_refuses_what_is_not_a_bool(switch):
    aitune_fast.configure(explain_misses=True)
    assert aitune_fast.config.explain_misses is True
    aitune_fast.configure()  # nothing given: nothing changes
    assert aitune_fast.config.explain_misses is True
    with pytest.raises(TypeError, match="takes a bool, not int"):
        aitune_fast.configure(explain_misses=1)  # type: ignore[arg-type]
    aitune_fast.configure(explain_misses=False)
    assert aitune_fast.config.explain_misses is False
    assert "explain_misses=False" in repr(aitune_fast.config)


def test_explain_refuses_what_is_not_a_tuned_module(monkeypatch):
    monkeypatch.delitem(sys.modules, _explain._TUNED_MODULE, raising=False)
    with pytest.raises(TypeError, match="aitune.torch is not imported"):
        aitune_fast.explain(object())
    tuned_module = type(sys)(_explain._TUNED_MODULE)
    tuned_module.TunedModule = type("TunedModule", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _explain._TUNED_MODULE, tuned_module)
    with pytest.raises(TypeError, match="not a builtins.object"):
        aitune_fast.explain(object())


class _NoAddNote(RuntimeError):
    add_note = None  # as on Python 3.10, where BaseException has no add_note


def test_the_note_is_a_notes_list_where_add_note_is_missing():
    error = _NoAddNote("No backend found for a graph with metadata: Tensors: x")
    _explain._add_note(error, "first")
    _explain._add_note(error, "second")
    assert error.__notes__ == ["first", "second"]


def test_no_note_while_off_or_for_other_errors(switch, monkeypatch):
    calls = []
    monkeypatch.setattr(_explain, "_tuned_modules", lambda module: calls.append(module) or [])
    miss = RuntimeError("No backend found for a graph with metadata: Tensors: x")
    aitune_fast.configure(explain_misses=False)
    _explain.note_miss(object(), (), {}, miss)
    aitune_fast.configure(explain_misses=True)
    _explain.note_miss(object(), (), {}, RuntimeError("forward failed"))
    assert calls == [] and not hasattr(miss, "__notes__")


def test_a_report_that_cannot_be_made_becomes_a_note(switch, monkeypatch):
    def failing(tuned, args, kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(_explain, "_tuned_modules", lambda module: [("m", module)])
    monkeypatch.setattr(_explain, "_report", failing)
    aitune_fast.configure(explain_misses=True)
    miss = RuntimeError("No backend found for a graph with metadata: Tensors: x")
    _explain.note_miss(object(), (), {}, miss)
    _explain.note_miss(object(), (), {}, miss)  # an outer call: no second note
    assert miss.__notes__ == ["aitune_fast.explain could not explain this miss: ValueError: boom"]


@pytest.mark.parametrize(("value", "on"), [("1", True), ("0", False), (None, False)])
def test_the_environment_sets_the_switch_at_import(value, on):
    env = {key: item for key, item in os.environ.items() if key != "AITUNE_FAST_EXPLAIN"}
    if value is not None:
        env["AITUNE_FAST_EXPLAIN"] = value
    code = "import aitune_fast; print(aitune_fast.config.explain_misses)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == str(on), done.stderr[-2000:]
