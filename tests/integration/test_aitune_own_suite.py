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
import shutil
import subprocess
import sys
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
