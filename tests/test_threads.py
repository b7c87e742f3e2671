"""Thread safety (issue 5): concurrent use from many threads gives the single-threaded results and never crashes.

The scenarios run in child processes with a time limit (a deadlock or a crash fails the test instead of hanging
or killing pytest); they are in ``robust_cases.py``.
"""

from __future__ import annotations

from child import run_child


def test_eight_threads_with_concurrent_registry_changes_get_single_threaded_results():
    """Eight threads run from_inputs, hash, ==, update_shapes_seen and to_json_dict on their own metadata
    (tensors, a registered user type, a dataclass, dicts, other data), 3,000 rounds each with a 10 µs switch
    interval, while another thread registers, ignores, unregisters and unignores types without pause, one of
    them a type the workers describe. Every result equals the one computed single-threaded beforehand; the
    toggled type is always described as registered, ignored or unknown, never anything in between."""
    r = run_child("robust_cases", "threads", 8, 3000, timeout=180)
    assert r["errors"] == [], "\n".join(r["errors"])
    assert r["churns"] > 100, "the registry thread barely ran"


def test_one_metadata_used_by_two_threads_at_once_never_panics():
    """One thread hashes or compares a metadata whose user values release the GIL midway; another thread
    meanwhile mutates it (update_shapes_seen, the first tensor_data/other_data) or reads it. Each call either
    works or raises an ordinary exception (RuntimeError "Already borrowed"), never pyo3's PanicException, and
    the metadata works afterwards. (The reference, pure Python, never raises here.)"""
    results = run_child("robust_cases", "shared_metadata", timeout=120)
    for combo, (reader, writer, after) in results.items():
        for who, out in (("reader", reader), ("writer", writer)):
            assert out[0] == "ok" or out[1] == "RuntimeError", f"{combo}: the {who} got {out}"
        assert after == ["ok", True], f"{combo}: unusable afterwards: {after}"
