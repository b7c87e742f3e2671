"""Switching the patch (``patch_aitune()`` / ``unpatch_aitune()``) while AITune works in other threads, and when
the switch itself is interrupted: it happens whole or not at all, and no AITune call fails or loses a graph.

Each scenario runs in a child process (``switch_child.py``) with a real AITune 0.6.0 on the CPU and the stand-in
``tensorrt`` of ``tests/fixtures``; the children run side by side.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import run_script

CHILD = Path(__file__).resolve().parent / "switch_child.py"
TIMEOUT_S = 600
RUNS = {
    "patch_in_flight": ("in_flight", "stock", "0.3", "5"),
    "unpatch_in_flight": ("in_flight", "patched", "0.3", "5"),
    "past_the_limit": ("in_flight", "stock", "1.0", "0.2"),
    "tune": ("tune",),
    "load": ("load",),
    "equality": ("equality",),
    "interrupts": ("interrupts", "27", "12"),
    "random": ("random", "27", "6"),
    "jit": ("jit",),
    "reentry": ("reentry", "27", "8"),
    "fork_waiting": ("fork", "waiting"),
    "fork_converting": ("fork", "converting"),
    "hooks": ("hooks", "27", "40"),
    "hook_race_stock": ("hook_race", "stock"),
    "hook_race_off": ("hook_race", "off"),
    "hook_race_on": ("hook_race", "on"),
    "handoff_patch": ("handoff", "stock", "5"),
    "handoff_unpatch": ("handoff", "patched", "5"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("switch")

    def run(name: str) -> dict:
        mode, *args = RUNS[name]
        workdir = root / name
        return run_script(CHILD, mode, str(workdir), *args, workdir=workdir, timeout=TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(RUNS, pool.map(run, RUNS), strict=True))


@pytest.mark.parametrize(("run", "world"), [("patch_in_flight", "ours"), ("unpatch_in_flight", "stock")])
def test_a_switch_waits_for_a_recording_call_in_flight(runs, run, world):
    """A module's first call is inside its forward when the switch starts: the switch waits for it, then converts
    what it recorded. Before: the call inserted a key of the old class after the conversion (2 graphs for one
    shape, 2 backends, ``ait.save`` failing to pickle a Locator, or the next call failing in update_shapes_seen)."""
    out = runs[run]
    assert out["call_error"] is None and out["switch_error"] is None and out["refused"] is None
    assert out["patched"] is (world == "ours")
    assert (out["graphs_after_first"], out["graphs"], out["backends"]) == (1, 1, 1)
    assert out["keys"] == [world] and out["names"] == [world]
    assert out["out_ok"] and out["loaded_ok"] and out["unpatched_ok"]


def test_a_call_running_past_the_limit_makes_the_switch_refuse_and_change_nothing(runs):
    out = runs["past_the_limit"]
    assert "still running after 0.2 s" in out["refused"] and "RecordingModule.__call__" in out["refused"]
    assert out["call_error"] is None and out["patched"] is False
    assert (out["graphs_after_first"], out["graphs"], out["backends"]) == (1, 1, 1)
    assert out["keys"] == ["stock"] and out["names"] == ["stock"]
    assert out["out_ok"] and out["loaded_ok"]


def test_a_switch_during_tune_is_refused_and_tuning_finishes_whole(runs):
    """Before: the graphs tuned before the switch kept old-class keys in tune()'s own dict, and every later call of
    them failed with "No backend found"."""
    out = runs["tune"]
    assert "Module.tune" in out["refused"] and out["patched_during"] is False
    assert out["tune_error"] is None and out["backends"] == 2
    assert out["keys_after_tune"] == ["stock"] and out["errors_after_tune"] == []
    assert out["refused_after"] is None and out["keys_patched"] == ["ours"] and out["errors_patched"] == []
    assert out["refused_unpatch"] is None and out["keys_unpatched"] == ["stock"] and out["errors_unpatched"] == []


def test_checkpoint_loads_in_flight(runs):
    """``ait.load`` in another thread: the switch is refused. ``TunedModule.from_dict`` (its key dict in a local
    variable): the switch waits for it and converts the tuned module it built."""
    out = runs["load"]
    assert "Module.from_dict" in out["ait_load_refused"]
    assert out["ait_load_error"] is None and out["ait_load_errors"] == []
    assert out["from_dict_error"] is None and out["from_dict_refused"] is None
    assert out["patched"] is True and out["from_dict_keys"] == ["ours"]


@pytest.mark.parametrize("what", ["locator", "spec", "md", "exact"])
def test_stock_objects_made_before_the_patch_keep_stock_equality(runs, what):
    """Before: under the patch two equal AITune locators (specs, metadata) compared unequal: stock ``__eq__``
    checked ``isinstance`` against the names the patch had swapped."""
    out = runs["equality"]
    expected = {"eq": True, "ne": False, "hash": True, "found": True}
    assert out["stock"][what] == out["patched"][what] == out["unpatched"][what] == expected


def test_an_interrupted_switch_is_undone_and_the_next_call_finishes(runs):
    """A KeyboardInterrupt at seeded points of ``patch_aitune()`` and ``unpatch_aitune()`` (some a second time,
    inside the roll back): ``is_aitune_patched()`` tells the truth, a single interrupt leaves AITune as it was, and
    calling the switch again leaves it whole in the new state, with no gate or journal left and every call right."""
    out = runs["interrupts"]
    # while unpatch_aitune() converts: before, is_aitune_patched() said False with AITune still on aitune_fast
    assert out["conversion"] == {"claims": True, "world": "ours", "second": {"claims": False, "world": "stock"}}
    assert out["n_problems"] == 0, out["problems"]
    assert out["runs"] == 24 and out["interrupted"] == 24 and out["twice"] > 0


def test_switching_at_random_moments_never_fails_a_call_or_loses_a_graph(runs):
    out = runs["random"]
    assert out["n_errors"] == 0, out["errors"]
    assert out["hung"] == []
    assert out["switched"] >= 6 and out["refused"] >= 6
    assert out["records"] > 0 and out["tunes"] > 0 and out["loads"] > 0
    for graphs, ranks in out["graphs_vs_ranks"].values():
        assert graphs == ranks
    assert out["keys"] == (["ours"] if out["patched"] else ["stock"])


@pytest.mark.parametrize("run", ["fork_waiting", "fork_converting"])
def test_a_process_forked_during_a_switch_runs_in_the_world_before_it(runs, run):
    """A fork while another thread is inside ``patch_aitune()`` (waiting for a call in flight, or converting live
    objects): the child does not inherit the switch (a thread that does not exist there would hold its lock and
    gates for good). Before: the child hung at its first AITune call and at ``unpatch_aitune()``; stock's child
    returns at once. The parent's switch finishes as if nothing happened."""
    out = runs[run]
    assert out["parent_switching"] is True
    child = out["child"]
    assert "hung" not in child and "error" not in child, child
    facts = child["value"]
    assert facts["patched_at_fork"] is False and facts["call_ok"] is True
    assert facts["keys_unpatched"] == ["stock"]
    assert facts["patched"] is True and facts["keys_patched"] == ["ours"] and facts["patched_call_ok"] is True
    assert facts["unpatched"] is True and facts["keys_back"] == ["stock"] and facts["names"] == ["stock"]
    assert out["parent_switch_error"] is None and out["parent_patched"] is True


def test_a_switch_during_jit_tuning_is_refused_and_every_call_after_succeeds(runs):
    """AITune's JIT tuning (``PatchedModule.tune``, run by the recording call that completed the samples) holds
    metadata in local variables as ``Module.tune`` does. Before: the switch went through, the tuned module held keys
    of both classes and its calls failed with "No backend found" for good."""
    out = runs["jit"]
    assert out["tuning_held"] is True
    assert out["refused"] is not None and "PatchedModule.tune" in out["refused"], out
    assert out["patched_during"] is False and out["call_error"] is None
    assert out["errors_after"] == [] and out["refused_after"] is None and out["errors_patched"] == []
    assert out["refused_unpatch"] is None and out["errors_unpatched"] == []


def test_aitune_called_on_the_switching_thread_runs_whole_or_is_refused(runs):
    """A signal handler, finalizer or callback calling AITune on the switching thread, at seeded points of each
    switch (mostly while its gates stand): each call runs in one world with the right output, or is refused with a
    RuntimeError while the gates stand (before: it passed them and ran in a half-switched world); the switch ends
    whole, with no key of the other world left."""
    out = runs["reentry"]
    assert out["n_problems"] == 0, out["problems"]
    assert out["outcomes"]["refused"] > 0 and out["outcomes"]["ran"] > 0
    assert set(out["outcomes"]) == {"ran", "refused"}


def test_switches_during_calls_keep_the_wrapped_modules_hooks(runs):
    """Three threads call one tuned module with a forward hook and a pre-hook, taking turns, while the main thread
    switches at seeded moments (call path on, off, unpatch, patch), landing inside calls: after every switch and at
    the end both hooks are in the wrapped module and fire once per call. (The loss seen with overlapping calls of
    one module is AITune's own race: the next test.)"""
    out = runs["hooks"]
    assert out["n_problems"] == 0, out["problems"]
    assert out["n_errors"] == 0, out["errors"]
    assert sum(out["made"].values()) + out["refused"] == 40 and out["refused"] == 0
    assert min(out["made"].values()) > 0 and out["calls"] > 0


@pytest.mark.parametrize("run", ["hook_race_off", "hook_race_on"])
def test_overlapping_calls_of_one_module_race_on_its_hooks_as_in_stock(runs, run):
    """AITune's ``Module._forward`` takes the wrapped module's hooks out for the call and keeps them on the module
    itself (``_current_forward_hooks``): a second call entering it while the first is inside takes the empty dicts
    for the hooks, and the later of the two puts those back. Stock AITune loses both hooks so (deterministically
    here: call B has looked ``forward`` up before call A took it out, and enters once A is inside); both call paths
    under the patch do exactly the same, no more."""
    stock, ours = runs["hook_race_stock"], runs[run]
    assert stock["overlapped"] and stock["calls"] == {"A": {"ok": True}, "B": {"ok": True}}
    assert stock["hooks_left"] == {"pre": 0, "post": 0}
    assert ours == stock


@pytest.mark.parametrize(("run", "world"), [("handoff_patch", "ours"), ("handoff_unpatch", "stock")])
def test_a_call_handed_to_another_thread_by_a_forward_in_flight_does_not_stall_the_switch(runs, run, world):
    """A tuned module's forward, in flight when the switch closes its gates, hands the call of another tuned module to
    a worker thread and waits for it; the worker's call is held at a gate. Before: the switch waited for the forward,
    which waited for the worker, which waited for the switch: 5 s, then SwitchRefused. Now the held call is let
    through (every call in flight waits in ``threading``), runs in the world from before the switch, and the switch
    goes through once both returned."""
    out = runs[run]
    assert out["held_calls"] == 1  # the worker's
    assert out["refused"] is None and out["switch_error"] is None, out
    assert out["call"] == {"value": True} and out["after"] is True
    assert out["patched"] is (world == "ours") and out["keys"] == [world]
