"""The switch's gates and its wait for calls in flight (``aitune_fast.patch._quiescence``), in this process, no
AITune: new calls wait at a gate until the switch is over and then run what is in place; a call already inside
the code passes; a switch waits for calls in flight, refuses beside long work or past its limit, and refuses to run
inside the code it switches."""

from __future__ import annotations

import threading
import time

import pytest
from aitune_fast.patch import _quiescence
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._quiescence import GATES, Codes, Entry, SwitchRefused, put, quiescent
from aitune_fast.patch._state import LOCK


class Metadata:
    def call(self, x: int) -> str:
        return f"stock {x}"


def ours(self, x: int) -> str:
    return f"ours {x}"


@pytest.fixture(autouse=True)
def clean_switch():
    stock = vars(Metadata)["call"]
    yield
    GATES.open()
    JOURNAL.recording = False
    JOURNAL.commit()
    Metadata.call = stock  # type: ignore[method-assign]


def in_thread(fn):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, box


def test_a_new_call_waits_at_the_gate_and_then_runs_what_the_switch_put_in_place():
    with LOCK:
        GATES.close([Entry(Metadata, "call")], Codes(calls=frozenset(), long=frozenset()))
        thread, box = in_thread(lambda: Metadata().call(1))
        thread.join(0.3)
        assert thread.is_alive() and "value" not in box  # held at the gate
        put(Metadata, "call", ours)  # the switch replaces the method behind the gate
        assert vars(Metadata)["call"].__qualname__.startswith("aitune_fast gate of")  # the gate stays up
        GATES.open()
    thread.join(5)
    assert box["value"] == "ours 1" and vars(Metadata)["call"] is ours


def test_a_call_from_inside_the_code_passes_the_gate():
    """A thread already inside AITune's metadata code (a pass code on its stack) is not held: nested calls
    finish in the world they started in."""

    def inside() -> str:
        return Metadata().call(2)

    with LOCK:
        GATES.close([Entry(Metadata, "call")], Codes(calls=frozenset({inside.__code__}), long=frozenset()))
        thread, box = in_thread(inside)
        thread.join(5)
        assert box["value"] == "stock 2"
        GATES.open()


def test_a_call_on_the_switching_thread_is_refused_not_run_half_switched():
    """A signal handler, finalizer or callback that calls AITune in the middle of a switch runs on the switching
    thread: it cannot wait for the switch (which waits for it), and passing it would run it half-switched."""
    with LOCK:
        GATES.close([Entry(Metadata, "call")], Codes(calls=frozenset(), long=frozenset()))
        with pytest.raises(RuntimeError, match="while this thread switches the patch"):
            Metadata().call(4)
        GATES.open()
    assert Metadata().call(5) == "stock 5"


def test_an_open_interrupted_before_its_end_leaves_gates_the_switching_thread_opens():
    GATES.close([Entry(Metadata, "call")], Codes(calls=frozenset(), long=frozenset()))
    GATES.owner = None  # what open() does first, interrupted just after
    assert Metadata().call(6) == "stock 6" and not GATES.standing


def test_gates_an_interrupted_switch_left_standing_are_opened_by_a_waiting_caller():
    GATES.close([Entry(Metadata, "call")], Codes(calls=frozenset(), long=frozenset()))
    GATES.owner = -1  # the switch that closed them is gone, the lock free
    thread, box = in_thread(lambda: Metadata().call(3))
    thread.join(5)
    assert box["value"] == "stock 3" and not GATES.standing and vars(Metadata)["call"] is not None


def slow(release: threading.Event) -> None:
    release.wait(10)


def long_work(release: threading.Event) -> None:
    release.wait(10)


def test_a_switch_waits_for_a_call_in_flight_and_refuses_past_the_limit(monkeypatch):
    release = threading.Event()
    thread = threading.Thread(target=slow, args=(release,), daemon=True)
    thread.start()
    time.sleep(0.05)
    codes = Codes(calls=frozenset({slow.__code__}), long=frozenset())
    monkeypatch.setattr(_quiescence, "CALLS_IN_FLIGHT_LIMIT_S", 0.2)
    with pytest.raises(SwitchRefused, match=r"still running after 0\.2 s \(slow"):
        _quiescence.wait_for_calls(codes, "patch_aitune")
    threading.Timer(0.1, release.set).start()
    monkeypatch.setattr(_quiescence, "CALLS_IN_FLIGHT_LIMIT_S", 5.0)
    started = time.monotonic()
    _quiescence.wait_for_calls(codes, "patch_aitune")  # returns once the call has
    assert 0.05 < time.monotonic() - started < 5.0
    thread.join(5)


def test_a_switch_beside_long_work_is_refused_at_once():
    release = threading.Event()
    thread = threading.Thread(target=long_work, args=(release,), daemon=True)
    thread.start()
    time.sleep(0.05)
    codes = Codes(calls=frozenset(), long=frozenset({long_work.__code__}))
    started = time.monotonic()
    try:
        with pytest.raises(SwitchRefused, match="tuning or saving/loading a checkpoint"):
            with quiescent([Entry(Metadata, "call")], codes, "unpatch_aitune"):
                pass
    finally:
        release.set()
        thread.join(5)
    assert time.monotonic() - started < 1.0
    assert not GATES.standing and vars(Metadata)["call"].__name__ == "call"  # gates opened again


def test_a_switch_inside_the_code_it_switches_is_refused():
    """Re-entry: a switch started from inside AITune's own calls (a forward, tune()) refuses, changing nothing."""

    def forward() -> None:
        with quiescent([Entry(Metadata, "call")], Codes(calls=frozenset({forward.__code__}), long=frozenset()), "x"):
            raise AssertionError("the switch ran")

    with pytest.raises(SwitchRefused, match="cannot run inside AITune's own calls"):
        forward()
    assert not GATES.standing and not JOURNAL.recording


def test_quiescent_rolls_the_journal_back_when_the_switch_raises_and_commits_when_it_returns():
    from aitune_fast.patch._journal import SetItem

    world = {"x": "old"}
    no_codes = Codes(calls=frozenset(), long=frozenset())
    with pytest.raises(KeyboardInterrupt):
        with quiescent([], no_codes, "patch_aitune"):
            JOURNAL.apply(SetItem(world, "x", "old", "new"))
            raise KeyboardInterrupt
    assert world == {"x": "old"} and JOURNAL.edits == [] and not JOURNAL.recording
    with quiescent([], no_codes, "patch_aitune"):
        JOURNAL.apply(SetItem(world, "x", "old", "new"))
    assert world == {"x": "new"} and JOURNAL.edits == []


def _when_gates_close(fn):
    """``fn()`` in a thread as soon as a switch has closed its gates; the thread and its result box."""

    def run():
        deadline = time.monotonic() + 10
        while not GATES.standing and time.monotonic() < deadline:
            time.sleep(0.001)
        return fn()

    return in_thread(run)


def test_a_caller_held_while_the_calls_in_flight_wait_in_threading_is_let_through_before_the_switch(monkeypatch):
    """A call in flight (a forward) hands a call to a worker thread and waits for it: the worker's call is held at a
    gate, and the switch waits for the forward. Before: 'still running after' the limit, refused. Now, as the forward
    waits in ``threading``, the held call is let through: it runs what was there before the switch, and the switch
    waits for it (here past the forward's own return) before its first change."""
    started = threading.Event()

    def stock_slow(self, x: int) -> str:
        started.set()
        time.sleep(0.2)  # still running after the forward has returned
        return f"stock {x}"

    Metadata.call = stock_slow  # type: ignore[method-assign]
    worker_box: dict = {}

    def forward() -> None:
        worker = threading.Thread(target=lambda: worker_box.setdefault("value", Metadata().call(7)), daemon=True)
        worker.start()
        started.wait(10)  # what a future's result(), a queue or a join does: wait in threading

    monkeypatch.setattr(_quiescence, "CALLS_IN_FLIGHT_LIMIT_S", 2.0)
    # the forward starts once the gates close, and must be in flight at the switch's first scan: 2 ms after the
    # gates by default, which a loaded machine (a collection in the starting thread, say) can miss
    monkeypatch.setattr(_quiescence, "_ENTRY_GRACE_S", 0.5)
    codes = Codes(calls=frozenset({forward.__code__}), long=frozenset())
    caller, _ = _when_gates_close(forward)
    began = time.monotonic()
    with LOCK, quiescent([Entry(Metadata, "call")], codes, "patch_aitune"):
        assert worker_box == {"value": "stock 7"}  # let through, and returned before the switch's first change
        put(Metadata, "call", ours)
    assert time.monotonic() - began < 1.5
    caller.join(5)
    assert Metadata().call(8) == "ours 8"


def test_a_caller_held_while_a_call_in_flight_computes_waits_for_the_switch():
    """Not let through while a call in flight runs code of its own (a forward computing): the held call runs what
    the switch put in place."""
    done: list[bool] = []

    def computing() -> None:
        while not done:
            pass

    thread, _ = in_thread(computing)
    codes = Codes(calls=frozenset({computing.__code__}), long=frozenset())
    caller, box = _when_gates_close(lambda: Metadata().call(9))
    threading.Timer(0.3, lambda: done.append(True)).start()
    with LOCK, quiescent([Entry(Metadata, "call")], codes, "patch_aitune"):
        assert "value" not in box and not thread.is_alive()
        put(Metadata, "call", ours)
    caller.join(5)
    assert box["value"] == "ours 9"


def test_a_call_entering_through_a_shim_is_held_and_not_waited_for(monkeypatch):
    """The call path's shims are call code that meets the gate itself on its way in (``Codes.entering``): as the
    gate's own caller the shim is not inside a call, so the caller is held, and the switch does not wait for it
    (before: let through into the world being switched, or, counted in flight, refused after the limit). A shim
    further out is inside a call: a nested call through a shim passes."""

    def shim(x: int, nested: bool = False) -> str:
        return forward(x) if nested else Metadata().call(x)

    def forward(x: int) -> str:
        return shim(x)

    monkeypatch.setattr(_quiescence, "CALLS_IN_FLIGHT_LIMIT_S", 2.0)
    codes = Codes(calls=frozenset({shim.__code__}), long=frozenset(), entering=frozenset({shim.__code__}))
    caller, box = _when_gates_close(lambda: shim(3))
    began = time.monotonic()
    with LOCK, quiescent([Entry(Metadata, "call")], codes, "patch_aitune"):
        caller.join(0.3)
        assert caller.is_alive() and "value" not in box  # held at the gate
        assert _quiescence.in_flight(codes.calls) == []  # and not in flight
        put(Metadata, "call", ours)
    assert time.monotonic() - began < 1.5
    caller.join(5)
    assert box["value"] == "ours 3"
    with LOCK:
        GATES.close([Entry(Metadata, "call")], codes)
        nested, nested_box = in_thread(lambda: shim(4, nested=True))
        nested.join(5)
        GATES.open()
    assert nested_box["value"] == "ours 4"  # inside a shim's call: passed the gate
