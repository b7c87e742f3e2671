"""Thread safety: concurrent use from many threads gives the single-threaded results and never crashes.

The scenarios run in child processes with a time limit (a deadlock or a crash fails the test instead of hanging
or killing pytest); they are in ``robust_cases.py``.
"""

from __future__ import annotations

import robust_cases as rc
from child import run_scenario


def test_eight_threads_with_concurrent_registry_changes_get_single_threaded_results():
    """Eight threads run from_inputs, hash, ==, update_shapes_seen and to_json_dict on their own metadata
    (tensors, a registered user type, a dataclass, dicts, other data), 3,000 rounds each with a 10 µs switch
    interval, while another thread registers, ignores, unregisters and unignores types without pause, one of
    them a type the workers describe. Every result equals the one computed single-threaded beforehand; the
    toggled type is always described as registered, ignored or unknown, never anything in between."""
    r = run_scenario(rc.threads, 8, 3000, timeout=180)
    assert r.errors == [], "\n".join(r.errors)
    assert r.churns > 100, "the registry thread barely ran"


def test_one_metadata_used_by_two_threads_at_once_never_panics():
    """One thread hashes or compares a metadata whose user values release the GIL midway; another thread
    meanwhile mutates it (update_shapes_seen, the first tensor_data/other_data) or reads it. Each call either
    works or raises an ordinary exception (RuntimeError "Already borrowed"), never pyo3's PanicException, and
    the metadata works afterwards. (The reference, pure Python, never raises here.)"""
    results = run_scenario(rc.shared_metadata, timeout=120)
    for combo, use in results.items():
        for who, out in (("reader", use.reader), ("writer", use.writer)):
            assert out[0] == "ok" or out[1] == "RuntimeError", f"{combo}: the {who} got {out}"
        assert use.after == ["ok", True], f"{combo}: unusable afterwards: {use.after}"


def _tuples_built_meanwhile(scan, seconds: float) -> list[BaseException]:
    """Run `scan` again and again while another thread builds tuples from generators (each a tuple CPython grows
    in place, which fails with SystemError if anything else holds a reference to it); the errors that thread got."""
    import sys
    import threading
    import time

    stop = threading.Event()
    errors: list[BaseException] = []

    def builder() -> None:
        while not stop.is_set():
            try:
                tuple(x for x in range(50))
            except SystemError as exc:
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=builder)
    thread.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            scan()
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    return errors


def test_the_patch_scans_of_live_objects_never_fail_a_tuple_another_thread_builds():
    """``patch_aitune()``/``unpatch_aitune()`` look through every live object for AITune's (to convert their
    metadata keys, and to give live modules the call path). Scanning ``gc.get_objects()`` in Python held a
    reference to a tuple another thread was still filling and failed that thread with ``SystemError: bad argument
    to internal function`` (16 times in 3 s here, and a flaky tuned-call toggle test); the scans now take the list
    without tuples in one step that runs no Python code."""
    from aitune_fast.patch._convert import convert_live_objects
    from aitune_fast.patch._objects import live_instances

    class NotAModule:
        pass

    def scan() -> None:
        live_instances(lambda cls: issubclass(cls, NotAModule))
        convert_live_objects(to_ours=True)

    assert _tuples_built_meanwhile(scan, seconds=3.0) == []


def test_frames_running_finds_another_threads_call_until_it_returns():
    """The patch's wait for calls in flight: ``_frames_running`` names the other threads inside given functions
    (their innermost such frame, found below deeper calls), never the calling thread; ``_still_running`` keeps
    those whose frame is still on its thread's stack. Both walk other threads' frames in one step (walking them
    from Python let the other thread unwind them in the middle: segfaults in the toggle test)."""
    import threading

    from aitune_fast import _core

    inside, release, returned, finish = (threading.Event() for _ in range(4))

    def deeper() -> None:
        inside.set()
        release.wait(10)

    def dispatch() -> None:
        deeper()

    def run() -> None:
        dispatch()
        returned.set()
        finish.wait(10)  # the thread lives on after the call returned

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert inside.wait(10)
        me = threading.get_ident()
        found = _core._frames_running({dispatch.__code__}, me)
        assert [(ident, frame.f_code) for ident, frame in found] == [(thread.ident, dispatch.__code__)]
        assert (
            _core._frames_running({test_frames_running_finds_another_threads_call_until_it_returns.__code__}, me) == []
        )
        assert _core._still_running(found) == found
        release.set()
        assert returned.wait(10)
        assert _core._still_running(found) == []
    finally:
        release.set()
        finish.set()
        thread.join()
