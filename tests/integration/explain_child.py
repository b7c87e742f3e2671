"""Child program of ``test_explain.py``: ``aitune_fast.explain`` on modules tuned by a real AITune on the CPU.

Run as ``python explain_child.py MODE WORKDIR``; prints one JSON document on its last stdout line. MODE: ``stock``
(AITune's own classes and call path; aitune_fast imported only after tuning, unpatched) or ``patched``
(``patch_aitune()`` first). Two modules are tuned:

* ``Pair``: ``forward(x, y=None, mode="a")``, recorded in strict mode (AITune's default) as two graphs: ``x``,
  ``y``, ``mode="a"``, and ``x``, ``mode="b"`` (no ``y``);
* ``TinyLLM`` (``child_kit.tiny_llm``): its prefill only (``cache_position[0] == 0``), one graph keyed by the phase.

Each scenario reports ``explain(...).to_dict()``; the miss scenarios also what calling the module raised: its
message and the exception notes it carries, with ``configure(explain_misses=...)`` off and on.
Needs tests/fixtures/tensorrt_stub on PYTHONPATH.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from child_kit import block_aitune_fast, quick_strategy, report, tiny_llm


def pair_module(torch) -> Any:
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))  # JIT tuning passes over modules without parameters

        def forward(self, x, y=None, mode="a"):
            out = x * self.scale
            return out + y.sum() if y is not None else out

    return Pair().eval()


def tune_pair(ait, torch) -> Any:
    m = ait.Module(pair_module(torch), "pair", strategy=quick_strategy(ait))

    def record(x):
        m(x, y=x + 1, mode="a")
        m(x, mode="b")

    ait.tune(record, [{"x": torch.randn(3)}, {"x": torch.randn(3)}], batch_sizes=[1, 2], device="cpu")
    return m


def tune_jit(ait, torch) -> Any:
    """``Pair`` JIT-tuned (``patch_for_jit_tuning``): tuned once two calls of two batch sizes were seen."""
    from hf_models_child import jit_setup

    jit_setup(ait)
    model = ait.patch_for_jit_tuning(lambda: pair_module(torch))()
    for batch in (1, 2, 1):
        x = torch.randn(batch, 3)
        model(x, y=x, mode="a")
    return model


def llm_sample(torch, layers: int = 1) -> dict:
    g = torch.Generator().manual_seed(3)
    cache = {
        f"layer{i}": {"key": torch.randn(2, 4, generator=g), "value": torch.randn(2, 4, generator=g)}
        for i in range(layers)
    }
    return {
        "input_ids": torch.randint(0, 32, (1,), generator=g),
        "attention_mask": torch.ones(1),
        "past_key_values": cache,
    }


def tune_llm(ait, torch) -> Any:
    torch.manual_seed(0)
    m = ait.Module(tiny_llm(torch)().eval(), "tiny-llm", strategy=quick_strategy(ait))
    data = ait.DataLoaderFactory([llm_sample(torch)], collate_fn=torch.utils.data.default_collate)
    ait.tune(lambda **kw: m(**kw, cache_position=torch.tensor([0])), data, batch_sizes=[1, 2], device="cpu")
    return m


def scenarios(torch, pair, llm) -> dict[str, tuple]:
    """name: (module, args, kwargs) explained."""
    x = torch.randn(2, 3)
    batch = torch.utils.data.default_collate([llm_sample(torch)] * 2)
    longer = torch.utils.data.default_collate([llm_sample(torch, layers=2)] * 2)  # a cache of another length
    return {
        "hit": (pair, (x,), {"y": x, "mode": "a"}),
        "rank": (pair, (torch.randn(2, 3, 1),), {"y": x, "mode": "a"}),
        "rank_b": (pair, (torch.randn(2, 3, 1),), {"mode": "b"}),
        "missing_tensor": (pair, (x,), {"mode": "a"}),
        "extra_tensor": (pair, (x,), {"y": x, "mode": "b"}),
        "value": (pair, (x,), {"y": x, "mode": "c"}),
        "dtype": (pair, (x.double(),), {"y": x, "mode": "a"}),
        "shape": (pair, (torch.randn(9, 3),), {"y": x, "mode": "a"}),
        "phase": (llm, (), {**batch, "cache_position": torch.tensor([5])}),
        "no_phase": (llm, (), batch),
        "phase_hit_other_cache": (llm, (), {**longer, "cache_position": torch.tensor([0])}),
    }


def raised(module, args, kwargs) -> dict:
    try:
        module(*args, **kwargs)
    except RuntimeError as exc:
        return {"message": str(exc), "notes": list(getattr(exc, "__notes__", []))}
    return {"message": None, "notes": []}


def main(mode: str, workdir: str) -> dict:
    if mode == "stock":
        block_aitune_fast()
    import aitune.torch as ait
    import torch

    torch.set_num_threads(1)
    if mode == "stock":
        sys.meta_path.pop(0)  # aitune_fast for explain(), after tuning; AITune stays unpatched
    else:
        import aitune_fast

        aitune_fast.patch_aitune()
    import aitune_fast
    from aitune.torch.module_registry import MODULE_REGISTRY
    from aitune_fast import InfoLevel, explain

    pair = tune_pair(ait, torch)
    MODULE_REGISTRY.clear()  # ait.tune() tunes every registered module: the next tune leaves this one be
    llm = tune_llm(ait, torch)
    out: dict[str, Any] = {"patched": aitune_fast.is_aitune_patched(), "reports": {}, "texts": {}, "calls": {}}
    for name, (module, args, kwargs) in scenarios(torch, pair, llm).items():
        report_ = explain(module, *args, **kwargs)
        out["reports"][name] = report_.to_dict()
        out["texts"][name] = [str(report_), report_.describe(InfoLevel.MEDIUM), report_.describe(InfoLevel.FULL)]
        if not report_.found:
            calls = out["calls"][name] = {}
            for switch in (False, True):
                aitune_fast.configure(explain_misses=switch)
                calls[str(switch)] = raised(module, args, kwargs)
            aitune_fast.configure(explain_misses=False)
    out["inner"] = explain(pair.module, torch.randn(2, 3), mode="b").to_dict()  # AITune's TunedModule itself
    MODULE_REGISTRY.clear()
    jit = tune_jit(ait, torch)
    out["jit"] = {
        "hit": explain(jit, torch.randn(2, 3), y=torch.randn(2, 3), mode="a").to_dict(),
        "miss": explain(jit, torch.randn(2, 3, 1), y=torch.randn(2, 3), mode="a").to_dict(),
    }
    # objects holding tuned modules: a pipeline-like object, a model with them as submodules; the call is for `pair`
    # (the only one whose forward binds it)
    x = torch.randn(2, 3)
    holders = {"pipeline": types.SimpleNamespace(first=llm, second=pair), "model": torch.nn.ModuleList([llm, pair])}
    out["held"] = {name: explain(holder, x, y=x, mode="a").to_dict() for name, holder in holders.items()}
    try:
        explain(holders["model"], **scenarios(torch, pair, llm)["phase"][2], mode="a")
    except ValueError as exc:  # binds neither, so both are named
        out["held_ambiguous"] = str(exc)
    return out


if __name__ == "__main__":
    report(main, *sys.argv[1:3])
