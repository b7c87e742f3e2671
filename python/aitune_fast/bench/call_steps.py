"""Where a tuned call's time goes on aitune_fast's call path: each step timed on a tuned module's real objects.

``python -m aitune_fast.bench.call_steps`` (needs ``import aitune.torch``; where TensorRT is missing, the
benchmark's stand-in for ``tensorrt`` is loaded). The modules are ``aitune_tuned``'s; each step's cost
is the difference between two nested calls timed alone (median µs of the thread's CPU time over interleaved
rounds, collector paused):

  wrapt + outer call   the Module proxy, the wrapped module's ``nn.Module.__call__``, the FunctionWrapper
  _forward swap        ``Module._forward``'s own work (hook dicts and ``forward`` out and back)
  binding              the plan (``_core._BindPlan``) of the call's shape, called from Python (the call path runs
                       it natively, without that call's cost, which ``module context`` then no longer holds)
  metadata + lookup    ``SampleMetadata.from_inputs`` + the backend dict lookup
  module context       ``TunedModule.__call__``'s context push/pop and the rest of its own code
  infer wrappers       ``Backend.infer``: context with ``describe()``, nvtx range, hardware-metrics scope, state check
  _infer               the backend's ``_infer`` around the module call (TorchEager: ``no_grad``; the call path runs
                       that inline, a little cheaper than measured here)
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import warnings
from typing import Any

from aitune_fast.bench import aitune_tuned


def _timer(fn: Any, n: int) -> float:
    t0 = time.thread_time_ns()  # the thread's CPU time: descheduling on a shared machine does not count
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / n / 1000.0


def steps(tuned: Any, args: tuple, kwargs: dict, rounds: int, n: int) -> dict[str, float]:
    """µs per step of one call of `tuned` on the call path (see the module docstring)."""
    import aitune_fast
    from aitune_fast.patch._call_path import call_steps

    tm = tuned.module
    inner = tuned.__wrapped__
    backend = next(iter(tm.backends.values()))
    step = call_steps()
    step["binder"](tm._forward_signature, args, kwargs)  # a shape is compiled on its second call
    binder = step["binder"](tm._forward_signature, args, kwargs)
    call_args, call_kwargs, arguments = binder(args, kwargs)
    strict = tm._config.strict_mode
    backends = tm.backends
    sample_metadata = aitune_fast.SampleMetadata
    nested = {
        "full": lambda: tuned(*args, **kwargs),
        "forward": lambda: step["forward"](tuned, None, None, args, kwargs),
        # below: the wrapped module's own forward in place, as _forward leaves it during the call
        "call": lambda: step["call"](tm, args, kwargs),
        "binder": lambda: step["binder"](tm._forward_signature, args, kwargs)(args, kwargs),
        "metadata": lambda: backends.get(sample_metadata.from_inputs(arguments, strict=strict)),
        "infer": lambda: step["infer_body"](backend, call_args, call_kwargs),
        "backend_infer": lambda: backend._infer(*call_args, **call_kwargs),
        "module": lambda: inner(*call_args, **call_kwargs),
    }
    times: dict[str, list[float]] = {name: [] for name in nested}
    proxy_forward = inner.__dict__["forward"]
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in nested.items():
                if name == "call":
                    inner.__dict__["forward"] = tuned._self_orig_forward
                try:
                    times[name].append(_timer(fn, n))
                finally:
                    if name == "module":
                        inner.__dict__["forward"] = proxy_forward
    finally:
        inner.__dict__["forward"] = proxy_forward
        gc.enable()
    t = {name: statistics.median(v) for name, v in times.items()}
    return {
        "wrapt + outer call": t["full"] - t["forward"],
        "_forward swap": t["forward"] - t["call"],
        "binding": t["binder"],
        "metadata + lookup": t["metadata"],
        "module context": t["call"] - t["infer"] - t["binder"] - t["metadata"],
        "infer wrappers": t["infer"] - t["backend_infer"],
        "_infer": t["backend_infer"] - t["module"],
        "total (tuned - module)": t["full"] - t["module"],
    }


def main() -> None:
    warnings.filterwarnings("ignore")
    ait, _ = aitune_tuned._import_aitune()
    import logging

    import torch

    import aitune_fast

    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    aitune_fast.patch_aitune()
    modules = aitune_tuned._tune_all(ait, torch, "steps")
    rows = {}
    with torch.no_grad():
        for name, (tuned, _, args, kwargs) in modules.items():
            rows[name] = steps(tuned, args, kwargs, rounds=9, n=300)
    names = list(rows)
    print(f"{'step (µs)':<24}" + "".join(f"{name:>20}" for name in names))
    for step in next(iter(rows.values())):
        print(f"{step:<24}" + "".join(f"{rows[name][step]:>20.2f}" for name in names))


if __name__ == "__main__":
    if "--help" in sys.argv:
        print(__doc__)
    else:
        main()
