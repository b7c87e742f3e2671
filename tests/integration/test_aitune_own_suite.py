"""AITune's own unit tests give the same outcomes under ``aitune_fast.patch_aitune()`` as stock.

AITune's wheel carries no tests and PyPI has no sdist of it (``pip download --no-binary :all: aitune==0.6.0`` finds
nothing); its tests live in its repository (github.com/ai-dynamo/aitune), whose public history ends before the 0.6.0
release. So this test runs only when ``AITUNE_TESTS_DIR`` names a checkout of that repository (or any folder with
its ``tests/`` and root ``conftest.py``), and needs pytest-mock (AITune's conftest uses it). It copies both away from
the checkout's own ``aitune/`` package (the installed 0.6.0 is the one tested), runs the subset that runs on a CPU
with the stand-in ``tensorrt`` (module, backend, checkpoint, JIT wrapper, global context and monitoring tests) once
stock and once patched (``aitune_suite_plugin.py``), and compares the outcome of every test id. Tests written for
another AITune version may fail: they must fail the same way patched.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import aitune_env

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 600
SUBSET = (
    "tests/unit/torch/module",
    "tests/unit/torch/backend/test_backend.py",
    "tests/unit/torch/backend/test_torch_eager_backend.py",
    "tests/unit/torch/checkpoint",
    "tests/unit/torch/jit/test_patched_module_eager.py",
    "tests/unit/torch/jit/test_patcher.py",
    "tests/unit/torch/test_global_context.py",
    "tests/unit/utils/monitoring",
)


def _suite_source() -> Path:
    folder = os.environ.get("AITUNE_TESTS_DIR")
    if not folder:
        pytest.skip("AITUNE_TESTS_DIR is not set: AITune's tests are not published with the package (see docstring)")
    root = Path(folder)
    if not (root / "tests" / "unit").is_dir():
        pytest.fail(f"AITUNE_TESTS_DIR={folder} has no tests/unit folder")
    pytest.importorskip("pytest_mock", reason="AITune's conftest needs pytest-mock")
    return root


def _run_suite(copy: Path, patched: bool) -> dict[str, str]:
    out = copy / f"outcomes-{'patched' if patched else 'stock'}.json"
    environ = aitune_env(
        copy / f"cache-{patched}",
        path=[HERE],  # for -p aitune_suite_plugin
        AITUNE_SUITE_OUT=str(out),
        AITUNE_SUITE_PATCH="1" if patched else "0",
    )
    paths = [p for p in SUBSET if (copy / p).exists()]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "aitune_suite_plugin"]
    command += ["--continue-on-collection-errors", "-o", "addopts=", *paths]
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=environ,
        cwd=str(copy),
    )
    assert out.exists(), f"the suite did not run ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict[str, str]]:
    source = _suite_source()
    copy = tmp_path_factory.mktemp("aitune_suite")
    shutil.copytree(source / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__", "functional"))
    if (source / "conftest.py").exists():  # AITune's fixtures (cache folder, JIT reset, devices) live at its root
        shutil.copy(source / "conftest.py", copy / "conftest.py")
    with ThreadPoolExecutor(max_workers=2) as pool:
        stock, patched = pool.map(lambda p: _run_suite(copy, p), (False, True))
    return {"stock": stock, "patched": patched}


def test_same_outcome_for_every_test(outcomes):
    stock, patched = outcomes["stock"], outcomes["patched"]
    assert sum(o == "passed" for o in stock.values()) > 50, "too few of AITune's tests ran to compare anything"
    differ = {
        k: (stock.get(k), patched.get(k)) for k in sorted(set(stock) | set(patched)) if stock.get(k) != patched.get(k)
    }
    lines = [f"{test}: stock {s}, patched {p}" for test, (s, p) in differ.items()]
    assert not differ, f"{len(differ)} of {len(stock)} tests differ:\n" + "\n".join(lines[:60])


def _timers_of(collector) -> list:
    return [t for t in threading.enumerate() if getattr(getattr(t, "function", None), "__self__", None) is collector]


def test_a_collector_left_polling_with_no_scope_is_stopped_so_the_suite_can_exit():
    """What AITune's collector race leaves (a poll timer re-arming with no scope open, which keeps the interpreter
    from exiting) is stopped by the plugin once the outcomes are written."""
    from aitune.utils.monitoring.hardware_metrics.collector import HardwareMetricsCollector
    from aitune_suite_plugin import stop_stray_metric_timers

    collector = HardwareMetricsCollector([], queue.Queue(), interval=0.001)
    try:
        collector._poll_stats()  # the chain the race leaves: every poll arms the next, scopes or not
        time.sleep(0.05)
        assert collector.timer is not None and _timers_of(collector), "the stray chain did not start"
        with collector.lock:  # the race: a poll has started and waits for the lock while the timer is cancelled
            time.sleep(0.2)
            assert stop_stray_metric_timers() >= 1
        time.sleep(0.05)
        assert not _timers_of(collector), "the collector still polls"
        assert collector.timer is None or not collector.timer.is_alive()  # the poll under way armed one last timer
    finally:  # whatever the asserts found, this process must be able to exit
        collector._poll_stats = lambda: None
        collector._cancel_polling()
