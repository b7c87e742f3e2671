"""Run a test scenario in a child Python process, for tests whose failure mode is a hang or a crash.

A scenario is a function ``name(*args)`` in one of the test helper modules that returns JSON-ready data. The
parent runs ``python -c ...`` with a time limit, fails with the child's stderr if it did not exit cleanly (a
segfault, an abort, a hang), and returns the scenario's result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent
PYTHON_DIR = TESTS_DIR.parent / "python"
MARK = "@@CHILD-RESULT@@"

_BOOT = """
import importlib, json, sys
sys.path[:0] = [{tests!r}, {python!r}]
module = importlib.import_module({module!r})
result = getattr(module, {name!r})(*json.loads({args!r}))
sys.stdout.write({mark!r} + json.dumps(result) + "\\n")
sys.stdout.flush()
"""


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def run_child(module: str, name: str, *args: Any, timeout: float = 60, env: dict | None = None) -> Any:
    """Run ``module.name(*args)`` in a fresh interpreter within ``timeout`` seconds and return its result."""
    code = _BOOT.format(
        tests=str(TESTS_DIR), python=str(PYTHON_DIR), module=module, name=name, args=json.dumps(args), mark=MARK
    )
    full_env = dict(os.environ, RUST_BACKTRACE="0", PYTHONFAULTHANDLER="1")
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full_env
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-3000:] if isinstance(exc.stderr, bytes) else (exc.stderr or "")[-3000:]
        raise AssertionError(f"{module}.{name}{args!r} did not finish within {timeout} s (a hang?)\n{tail}") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"{module}.{name}{args!r} crashed: {describe_exit(proc.returncode)}\n"
            f"--- stdout (tail) ---\n{proc.stdout[-2000:]}\n--- stderr (tail) ---\n{proc.stderr[-4000:]}"
        )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise AssertionError(f"{module}.{name} printed no result\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
