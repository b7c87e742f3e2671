"""A pytest plugin for running AITune's own unit tests, stock or under ``aitune_fast.patch_aitune()``.

Used by ``test_aitune_own_suite.py`` with ``-p aitune_suite_plugin`` (this folder on PYTHONPATH, with the stand-in
``tensorrt``). With ``AITUNE_SUITE_PATCH=1`` it patches AITune before any test module is imported; it writes every
test id's outcome (``passed``, ``failed``, ``skipped``, ``error``, and collection errors per file) to the JSON file
named by ``AITUNE_SUITE_OUT``.

AITune publishes its tests only in its repository, whose public history stops before 0.6.0; a few names those tests
import moved before the release. The aliases below put them back where the tests look (stock and patched alike), so
that drift shows as test outcomes rather than as whole files failing to import.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import pytest

_OUTCOMES: dict[str, str] = {}
_ALIASES = (
    # (module the tests import from, name, module 0.6.0 defines it in)
    ("aitune.torch.module.recording_module", "Sample", "aitune.torch.module.sample_store"),
)


def _alias_moved_names() -> None:
    import importlib

    for where, name, source in _ALIASES:
        module = importlib.import_module(where)
        if not hasattr(module, name):
            setattr(module, name, getattr(importlib.import_module(source), name))


def pytest_configure(config):
    import aitune.torch  # noqa: F401  (the package the tests import; the stand-in tensorrt must be found)

    if os.environ.get("AITUNE_SUITE_PATCH") == "1":
        import aitune_fast

        aitune_fast.patch_aitune()
        assert aitune_fast.is_aitune_patched()
    _alias_moved_names()


def pytest_collection_finish(session):
    """AITune's conftest clears the module registry after every test, and the registry runs ``gc.collect()``: a full
    collection of torch's and AITune's heap, about a second a test. What is alive once the tests are imported is
    moved out of the collector's sight (``gc.freeze()``), stock and patched alike, so a collection sees what the
    tests made."""
    gc.collect()
    gc.freeze()


def pytest_collectreport(report):
    if report.failed:
        _OUTCOMES[f"{report.nodeid}::<collect>"] = "error"


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        previous = _OUTCOMES.get(report.nodeid)
        outcome = "error" if report.when != "call" and report.failed else report.outcome
        if previous in (None, "passed"):
            _OUTCOMES[report.nodeid] = outcome


def _no_poll() -> None:
    return None


def stop_stray_metric_timers() -> int:
    """Stops every hardware-metrics collector left polling with no scope open; returns how many there were.

    AITune's ``HardwareMetricsCollector`` re-arms its poll timer on every poll, scopes or not, and its last
    ``end_scope`` cancels only the timer it knows: a poll already under way when it runs arms a new one, and that
    chain never ends. The timers are not daemon threads, so the interpreter then waits for them at exit forever.
    AITune's own ``test_collect_metrics`` (a 1 ms interval) leaves such a chain in about one run in five under CPU
    load, stock as patched (a plain loop of that test with stock AITune alone shows it). Outcomes are written by then;
    this only lets the child exit. A poll in flight still arms one timer, which now polls nothing and ends.
    """
    from aitune.utils.monitoring.hardware_metrics.collector import HardwareMetricsCollector

    polling = 0
    for collector in gc.get_objects():
        if issubclass(type(collector), HardwareMetricsCollector) and not collector.scopes:  # no __class__ lookups
            polling += collector.timer is not None
            collector._poll_stats = _no_poll  # what the next timer the chain arms calls
            collector._cancel_polling()
    return polling


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("AITUNE_SUITE_OUT")
    if path:
        with open(path, "w") as f:
            json.dump(_OUTCOMES, f, indent=0, sort_keys=True)
    if stopped := stop_stray_metric_timers():
        print(f"aitune_suite_plugin: stopped {stopped} collector(s) left polling by AITune's race", file=sys.stderr)
