"""Child program of ``test_dispatch_stats.py``: ``aitune_fast.dispatch_stats`` on a module tuned by a real AITune on
the CPU.

Run as ``python stats_child.py MODE``; prints one JSON document on its last stdout line. MODE: ``patched``
(``patch_aitune()`` before tuning), ``metadata`` (``patch_aitune(call_path=False)``) or ``stock`` (AITune unpatched,
aitune_fast imported after tuning). The module is ``explain_child``'s ``Pair``, tuned as two graphs: ``x, y,
mode="a"`` and ``x, mode="b"``. Needs tests/fixtures/tensorrt_stub on PYTHONPATH.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import weakref
from typing import Any

from child_kit import block_aitune_fast, report
from explain_child import tune_pair

CALLS_A, CALLS_B = 7, 5  # calls on graph "a" and graph "b", one thread
THREADS, THREAD_A, THREAD_B = 4, 40, 25  # per thread


def calls(torch, pair) -> dict[str, Any]:
    """One call of each kind: a hit on each graph, a miss (x of rank 3)."""
    x = torch.randn(2, 3)
    return {
        "a": lambda: pair(x, y=x, mode="a"),
        "b": lambda: pair(x, mode="b"),
        "a_kw": lambda: pair(x=x, y=x, mode="a"),  # another call shape, the same graph
        "miss": lambda: pair(torch.randn(2, 3, 1), y=x, mode="a"),
    }


def count_backend_runs(pair) -> list[int]:
    """Give each backend of `pair` an ``_infer`` of its own that counts its runs (under a lock) in the list returned,
    one item per graph: what the tuned calls' hits must be. Across threads that is not the calls made: AITune's
    ``Module`` swaps the wrapped module's ``forward`` for the length of a call, so another thread calling the same
    ``Module`` meanwhile runs the plain module (no tuned call), or, where its backend calls the module after the swap
    was undone, makes a tuned call inside its tuned call."""
    runs = [0] * len(pair.module.backends)
    lock = threading.Lock()
    for index, backend in enumerate(pair.module.backends.values()):

        def counted(*args, _infer=backend._infer, _index=index, **kwargs):
            with lock:
                runs[_index] += 1
            return _infer(*args, **kwargs)

        backend._infer = counted
    return runs


def hits(stats: Any) -> list[int]:
    return [graph.hits for graph in stats.modules[0].graphs]


def run(call: Any, n: int) -> None:
    for _ in range(n):
        call()


def missed(call: Any) -> str:
    try:
        call()
    except RuntimeError as exc:
        return str(exc)
    return ""


def threaded(one: dict[str, Any]) -> None:
    """THREADS threads, each THREAD_A calls on graph "a" and THREAD_B on graph "b", interleaved, started together."""
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            for i in range(max(THREAD_A, THREAD_B)):
                if i < THREAD_A:
                    one["a"]()
                if i < THREAD_B:
                    one["b"]()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def dead_module(ait, torch) -> dict:
    """A module's record, with its last miss's metadata, is dropped once the module is dead and a new module is
    recorded."""
    from aitune.torch.module_registry import MODULE_REGISTRY
    from aitune_fast import _core

    MODULE_REGISTRY.clear()
    pair = tune_pair(ait, torch)
    missed(calls(torch, pair)["miss"])
    kept = weakref.ref(_core._dispatch_stats(pair.module)["last_miss"])
    gone = weakref.ref(pair.module)
    MODULE_REGISTRY.clear()
    del pair
    gc.collect()
    out = {"module_gone": gone() is None, "kept_meanwhile": kept() is not None}
    MODULE_REGISTRY.clear()
    other = tune_pair(ait, torch)
    calls(torch, other)["a"]()
    gc.collect()
    out["released"] = kept() is None
    return out


def main(mode: str) -> dict:
    if mode == "stock":
        block_aitune_fast()
    import aitune.torch as ait
    import torch

    torch.set_num_threads(1)
    if mode == "stock":
        sys.meta_path.pop(0)
    import aitune_fast

    if mode == "patched":
        aitune_fast.patch_aitune()
    elif mode == "metadata":
        aitune_fast.patch_aitune(call_path=False)
    from aitune_fast import dispatch_stats

    pair = tune_pair(ait, torch)
    one = calls(torch, pair)
    out: dict[str, Any] = {"patched": aitune_fast.is_aitune_patched()}
    with torch.no_grad():
        run(one["a"], 3)  # off (the default): nothing counted
        off = dispatch_stats(pair)
        out["off"] = {"collecting": off.collecting, "calls": off.modules[0].calls, "text": str(off)}
        aitune_fast.configure(dispatch_stats=True)
        run(one["a"], CALLS_A - 2)
        run(one["a_kw"], 2)
        run(one["b"], CALLS_B)
        message = missed(one["miss"])
        out["miss_message"] = message
        missed(one["miss"])
        stats = dispatch_stats(pair)
        out["on"] = stats.to_dict()
        out["on_text"] = str(stats)
        out["json"] = json.loads(json.dumps(stats.to_dict())) == stats.to_dict()
        out["explained_miss"] = aitune_fast.explain(pair, torch.randn(2, 3, 1), y=torch.randn(2, 3), mode="a").to_dict()
        out["inner"] = dispatch_stats(pair.module).to_dict()  # AITune's TunedModule itself
        out["held"] = dispatch_stats(torch.nn.ModuleList([pair])).to_dict()
        stats.reset()
        out["reset"] = dispatch_stats(pair).to_dict()
        runs = count_backend_runs(pair)
        threaded(one)
        after = dispatch_stats(pair).modules[0]
        out["threads"] = {
            "hits": hits(dispatch_stats(pair)),
            "backend_runs": list(runs),
            "other": after.other,
            "misses": after.misses,
        }
        aitune_fast.configure(dispatch_stats=False)
        run(one["a"], 3)
        out["after_off"] = hits(dispatch_stats(pair))
        if mode == "patched":
            aitune_fast.configure(dispatch_stats=True)
            out["dead_module"] = dead_module(ait, torch)
    return out


if __name__ == "__main__":
    report(main, *sys.argv[1:2])
