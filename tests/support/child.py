"""Child Python processes: for tests whose failure mode is a hang or a crash, and for programs that need a fresh
interpreter (a real AITune, patched or not).

``run_child(module, name, *args)`` runs a *scenario*, a function ``name(*args)`` in one of the ``*_cases.py``
modules beside the tests, that returns JSON-ready data (frozen dataclasses included); ``run_scenario(fn, *args)``
does the same for the scenario function ``fn`` and reads its result back as the type ``fn``'s signature names.
``run_script(script, *args, workdir=...)`` runs a child program that prints one JSON document on its last stdout
line, with the environment of ``aitune_env``. All fail the test with the child's output when it did not exit cleanly
within its time limit (a segfault, an abort, a hang) and return its result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SUPPORT_DIR = Path(__file__).resolve().parent
TESTS_DIR = SUPPORT_DIR.parent
ROOT = TESTS_DIR.parent
PYTHON_DIR = ROOT / "python"
TENSORRT_STUB = TESTS_DIR / "fixtures" / "tensorrt_stub"
MARK = "@@CHILD-RESULT@@"

_BOOT = """
import importlib, json, sys
sys.path[:0] = {path!r}
from child import plain
module = importlib.import_module({module!r})
result = getattr(module, {name!r})(*json.loads({args!r}))
sys.stdout.write({mark!r} + json.dumps(result, default=plain) + "\\n")
sys.stdout.flush()
"""


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def run_python(argv: list[str], what: str, *, timeout: float, env: dict, cwd: Path | None = None) -> str:
    """Run ``python *argv`` within ``timeout`` seconds and return its stdout; fail unless it exited with status 0."""
    try:
        proc = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-3000:] if isinstance(exc.stderr, bytes) else (exc.stderr or "")[-3000:]
        raise AssertionError(f"{what} did not finish within {timeout} s (a hang?)\n{tail}") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"{what} failed: {describe_exit(proc.returncode)}\n"
            f"--- stdout (tail) ---\n{proc.stdout[-2000:]}\n--- stderr (tail) ---\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def _scenario_folder(module: str) -> Path:
    found = sorted(TESTS_DIR.glob(f"*/{module}.py"))
    assert len(found) == 1, f"scenario module {module}.py: expected one under {TESTS_DIR}, found {found}"
    return found[0].parent


def run_child(module: str, name: str, *args: Any, timeout: float = 60, env: dict | None = None) -> Any:
    """Run ``module.name(*args)`` in a fresh interpreter within ``timeout`` seconds and return its result."""
    path = [str(SUPPORT_DIR), str(_scenario_folder(module)), str(PYTHON_DIR)]
    code = _BOOT.format(path=path, module=module, name=name, args=json.dumps(args), mark=MARK)
    full_env = dict(os.environ, RUST_BACKTRACE="0", PYTHONFAULTHANDLER="1")
    full_env.update(env or {})
    stdout = run_python(["-c", code], f"{module}.{name}{args!r}", timeout=timeout, env=full_env)
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise AssertionError(f"{module}.{name} printed no result\n{stdout[-2000:]}")


def plain(value: Any) -> dict:
    """``json.dumps``'s fallback for a scenario's result: a dataclass as the dict of its fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    raise TypeError(f"a scenario returned a {type(value).__name__}, which is not JSON-ready")


def typed(tp: Any, data: Any) -> Any:
    """``data`` read from JSON as ``tp``: a dataclass rebuilt from the dict of its fields, through ``dict[str, T]``
    and ``list[T]``; anything else as it is."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        return tp(**{field.name: typed(hints[field.name], data[field.name]) for field in dataclasses.fields(tp)})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict and args:
        return {key: typed(args[1], value) for key, value in data.items()}
    if origin is list and args:
        return [typed(args[0], value) for value in data]
    return data


def run_scenario(scenario: Callable[..., Any], *args: Any, timeout: float = 60, env: dict | None = None) -> Any:
    """``run_child`` of the scenario function ``scenario``: its result read back as its declared return type."""
    raw = run_child(scenario.__module__, scenario.__name__, *args, timeout=timeout, env=env)
    return typed(typing.get_type_hints(scenario)["return"], raw)


def aitune_env(cache_dir: Path, *, path: Iterable[Path] = (), drop: Iterable[str] = (), **extra: str) -> dict:
    """This process's environment for a child that runs a real AITune.

    The stand-in ``tensorrt`` (AITune imports it unconditionally; it is not TensorRT) and ``path`` go first on
    PYTHONPATH. ``AUTOWRAPT_BOOTSTRAP`` (which would patch AITune on import), ``NVTX_DISABLE`` and ``drop`` are
    removed: the child decides them. ``AITUNE_CACHE_DIR`` is ``cache_dir``, which must be the child's own:
    ``ait.tune()`` empties its cache folder, pulling the files out from under a sibling still tuning.
    ``AITUNE_JIT_CACHE_DIR`` is ``cache_dir`` with ``.jit`` added (AITune's own naming, beside it, so that
    ``tune()`` does not empty it): JIT tuning keeps its samples under a folder named by the model's hierarchy, the
    same for the same model in every child, and children that share the default ``~/.cache/aitune.jit`` read each
    other's half-written samples (``UnpicklingError``). ``extra`` is set last.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TENSORRT_STUB), *map(str, path), env.get("PYTHONPATH")]))
    for name in ("AUTOWRAPT_BOOTSTRAP", "NVTX_DISABLE", *drop):
        env.pop(name, None)
    env["AITUNE_CACHE_DIR"] = str(cache_dir)
    env["AITUNE_JIT_CACHE_DIR"] = f"{cache_dir}.jit"
    env.update(extra)
    return env


def run_script(script: Path, *args: str, workdir: Path, timeout: float, drop: Iterable[str] = (), **env: str) -> dict:
    """Run ``python script *args`` in ``workdir`` with ``aitune_env`` (a new cache folder in ``workdir``, ``drop``,
    ``env``) and return the JSON document on the last line of its stdout; fail if it reports an ``"error"``."""
    workdir.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(tempfile.mkdtemp(prefix=f"cache-{script.stem}-", dir=workdir))
    what = f"{script.name} {' '.join(args)}"
    environ = aitune_env(cache_dir, drop=drop, **env)
    stdout = run_python([str(script), *args], what, timeout=timeout, env=environ, cwd=workdir)
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, f"{what} printed nothing"
    out = json.loads(lines[-1])
    assert "error" not in out, f"{what} raised:\n{out['error']}"
    return out
