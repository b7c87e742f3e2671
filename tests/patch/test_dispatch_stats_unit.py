"""``aitune_fast.dispatch_stats``'s parts that need no AITune: the switch (in the core), the environment, the
refusals, the text and plain data of an entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import aitune_fast
import pytest
from aitune_fast import _core, _explain, _stats


@pytest.fixture
def switch():
    before = aitune_fast.config.dispatch_stats
    yield
    aitune_fast.configure(dispatch_stats=before)


def test_configure_sets_the_cores_switch_and_refuses_what_is_not_a_bool(switch):
    aitune_fast.configure(dispatch_stats=True)
    assert _core._dispatch_stats_on() is True and aitune_fast.config.dispatch_stats is True
    aitune_fast.configure()  # nothing given: nothing changes
    assert _core._dispatch_stats_on() is True
    with pytest.raises(TypeError, match=r"configure\(dispatch_stats=...\) takes a bool, not int"):
        aitune_fast.configure(dispatch_stats=1)  # type: ignore[arg-type]
    aitune_fast.config.dispatch_stats = False
    assert _core._dispatch_stats_on() is False
    assert "dispatch_stats=False" in repr(aitune_fast.config)


@pytest.mark.parametrize(("value", "on"), [("1", True), ("0", False), (None, False)])
def test_the_environment_sets_the_switch_at_import(value, on):
    env = {key: item for key, item in os.environ.items() if key != "AITUNE_FAST_STATS"}
    if value is not None:
        env["AITUNE_FAST_STATS"] = value
    code = "import aitune_fast; print(aitune_fast.config.dispatch_stats, aitune_fast._core._dispatch_stats_on())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == f"{on} {on}", done.stderr[-2000:]


def test_dispatch_stats_refuses_what_is_not_a_tuned_module(monkeypatch):
    monkeypatch.delitem(sys.modules, _explain._TUNED_MODULE, raising=False)
    with pytest.raises(TypeError, match=r"dispatch_stats\(\) takes a tuned aitune.torch.Module"):
        aitune_fast.dispatch_stats(object())


def test_an_object_never_called_has_no_record():
    thing = object()
    assert _core._dispatch_stats(thing) is None
    _core._reset_dispatch_stats(thing)  # nothing to drop: no error


def entry(**changes) -> _stats.ModuleStats:
    values = {
        "module": "pair",
        "calls": 4,
        "graphs": (_stats.GraphHits(0, "Tensors: x", "TorchEagerBackend()", 3),),
        "misses": 1,
        "other": 0,
        "last_miss": None,
        "p50_us": 10.0,
        "p99_us": 20.0,
        "max_us": 25.5,
    }
    values.update(changes)
    return _stats.ModuleStats(**values)  # type: ignore[arg-type]


def test_the_text_and_plain_data_of_an_entry():
    stats = _stats.DispatchStats((entry(),), "")
    text = str(stats)
    assert text.splitlines() == [
        "aitune_fast.dispatch_stats:",
        "module 'pair': 4 calls, 1 missed; the path's own time per call: p50 10.0 µs, p99 20.0 µs, max 25.5 µs",
        "  graph #0 (Tensors: x, TorchEagerBackend()): 3 hits",
    ]
    plain = stats.to_dict()
    assert json.loads(json.dumps(plain)) == plain
    assert plain["modules"][0]["graphs"] == [
        {"index": 0, "graph": "Tensors: x", "backend": "TorchEagerBackend()", "hits": 3}
    ]
    quiet = _stats.DispatchStats((entry(calls=0, p50_us=None, p99_us=None, max_us=None, other=2),), "off")
    assert str(quiet).splitlines()[:2] == [
        "aitune_fast.dispatch_stats: nothing is collected: off",
        "module 'pair': 0 calls, 1 missed, 2 other",
    ]


def test_why_nothing_is_collected(switch, monkeypatch):
    aitune_fast.configure(dispatch_stats=False)
    assert _stats._why_not().startswith("dispatch statistics are off")
    aitune_fast.configure(dispatch_stats=True)
    monkeypatch.delitem(sys.modules, _stats._STATE, raising=False)
    assert _stats._why_not().startswith("AITune is not patched")
