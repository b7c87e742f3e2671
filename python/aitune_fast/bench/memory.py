"""Peak memory of one call, measured in a forked child process.

Two figures, each from its own fork of the benchmark process (so the parent's heap is never disturbed,
and every implementation starts from the same state):

- ``peak_rss_bytes``: the rise of the resident-set high-water mark during one call.  The child makes one
  warm-up call first (a forked child faults in afresh the library code pages it executes, which would
  add tens of MiB that belong to no implementation), returns free heap memory to the OS
  (``malloc_trim``), resets the kernel's high-water mark
  (``echo 5 > /proc/self/clear_refs``), reads ``VmRSS``, makes the call, and reads ``VmHWM``.  This
  sees everything the call touches: Python objects *and* tensor storage (torch's CPU allocator is
  plain ``malloc``, invisible to ``tracemalloc``).  Linux only; ``None`` elsewhere.
- ``python_peak_bytes``: ``tracemalloc``'s peak during one call: the Python heap alone (objects,
  containers, pickles, strings), without tensor storage.

Also ``output_tensor_bytes``: the bytes of the distinct tensor storages in the result, for scale.
The child runs with the collector paused, as the timed loops do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import torch


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return sum(_tensor_bytes(v, seen) for v in vars(obj).values())
    return 0


def _measure_in_child(call: Callable[[], Any], warm_up: bool) -> dict[str, Any]:
    gc.disable()
    if warm_up:  # a forked child faults in afresh the shared-library code pages it runs (tens of MiB of RSS)
        del_me = call()
        del del_me
    gc.collect()
    _malloc_trim()
    result: dict[str, Any] = {"peak_rss_bytes": None, "python_peak_bytes": None, "output_tensor_bytes": None}
    if _reset_peak_rss():
        before = _status_kib("VmRSS")
        out = call()
        peak = _status_kib("VmHWM")
        if before is not None and peak is not None:
            result["peak_rss_bytes"] = max(0, peak - before) * 1024
        result["output_tensor_bytes"] = _tensor_bytes(out)
    else:
        out = call()
        result["output_tensor_bytes"] = _tensor_bytes(out)
    return result


def _python_peak_in_child(call: Callable[[], Any]) -> dict[str, Any]:
    gc.collect()
    gc.disable()
    tracemalloc.start()
    out = call()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return {"python_peak_bytes": peak}


def _in_fork(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` in a forked child and return its JSON-able result (``{"error": ...}`` on failure)."""
    if not hasattr(os, "fork"):
        return {"error": "os.fork is not available on this platform"}
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's stack
        code = 0
        try:
            os.close(read_fd)
            try:
                payload = fn()
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                payload, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
            with os.fdopen(write_fd, "w") as f:
                json.dump(payload, f)
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        data = f.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return {"error": "the measuring child process died without a result"}


def peak_memory(call: Callable[[], Any], large: bool = False) -> dict[str, Any]:
    """Peak memory of one ``call()``: see the module docstring for what each figure means.

    ``large``: the call takes tens of seconds and GiBs; skip the warm-up call (the code pages it would
    keep out of the figure are negligible then) and the ``tracemalloc`` pass (which would take minutes).
    """
    result = _in_fork(lambda: _measure_in_child(call, warm_up=not large))
    if "error" in result or large:
        return result
    result.update(_in_fork(lambda: _python_peak_in_child(call)))
    return result
