"""Child program of ``test_distributed.py``: AITune on two ranks of ``torch.distributed`` (gloo, 127.0.0.1).

Run as ``python distributed_child.py WORKDIR PORT``; ``torch.multiprocessing.spawn`` starts two ranks. Each rank tunes
an MLP and an LLM-like decode step (dict KV cache, ``cache_position``) with TorchEager, saves them to its own folder,
loads them back and runs them, first with a stock AITune (aitune_fast not yet imported), then after
``aitune_fast.patch_aitune()`` the same again with fresh modules, and loads the stock checkpoints under the patch.
Each rank also counts the collectives AITune issues. Each rank writes ``rank-N.json``; the parent prints one JSON
document on its last stdout line. Needs tests/fixtures/tensorrt_stub on PYTHONPATH.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import sys
import traceback
import warnings

from child_kit import mlp as build_mlp
from child_kit import quick_strategy, report, seeded, tiny_llm

warnings.filterwarnings("ignore")

WORLD_SIZE = 2
COLLECTIVE_TIMEOUT_S = 120
N_LAYERS = 4
COLLECTIVES = ("barrier", "all_gather_object", "broadcast_object_list", "all_reduce", "broadcast", "all_gather")


def count_collectives(dist, counts: dict) -> None:
    """Count the collectives called through ``torch.distributed`` (AITune calls them as ``dist.NAME``)."""
    for name in COLLECTIVES:
        original = getattr(dist, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)


def models(torch):
    return {"mlp": functools.partial(build_mlp, torch), "llm": seeded(torch, 1, tiny_llm(torch))}


def llm_sample(torch, seed, batch=1):
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 32, (batch,), generator=g),
        "attention_mask": torch.ones(batch),
        "past_key_values": {
            f"layer{i}": {"key": torch.randn(batch, 2, 4, generator=g), "value": torch.randn(batch, 2, 4, generator=g)}
            for i in range(N_LAYERS)
        },
        "cache_position": torch.tensor([16] * batch),
    }


def inputs(torch, rank):
    """Each rank's own inputs (so that a mix-up of ranks shows)."""
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(10 + rank))
    return {"mlp": ((x,), {}), "llm": ((), llm_sample(torch, 20 + rank))}


def flow(ait, torch, rank, folder, tag) -> dict:
    """Tune, call, save, load, call: outputs and backend facts of both modules."""
    from aitune.torch.module.tensor_spec import InfoLevel
    from aitune.torch.module_registry import MODULE_REGISTRY

    os.makedirs(folder, exist_ok=True)
    builds = models(torch)
    out = {}
    for name, build in builds.items():
        MODULE_REGISTRY.clear()
        module = ait.Module(build(), f"{name}-{tag}", strategy=quick_strategy(ait))
        if name == "mlp":
            ait.tune(
                module, torch.randn(16, generator=torch.Generator().manual_seed(rank)), batch_sizes=[1, 2], device="cpu"
            )
        else:
            data = ait.DataLoaderFactory([llm_sample(torch, 30 + rank)], collate_fn=lambda batch: batch[0])
            ait.tune(lambda m=module, **kw: m(**kw), data, batch_sizes=[1], device="cpu")
        assert module.state.value == "tuned", f"{name} did not tune: see {module.cache_dir}/error.log"
        args, kwargs = inputs(torch, rank)[name]
        with torch.no_grad():
            tuned_out = module(*args, **kwargs).tolist()
        path = os.path.join(folder, f"{name}.pt")
        ait.save(module, path)
        loaded = ait.load(build(), path)
        with torch.no_grad():
            loaded_out = loaded(*args, **kwargs).tolist()
        out[name] = {
            "tuned": tuned_out,
            "loaded": loaded_out,
            "keys": [k.describe(InfoLevel.MEDIUM) for k in module.module.backends],
            "backends": [b.describe() for b in module.module.backends.values()],
            "device": str(module.device),
            "cache_dir": os.path.relpath(str(module.cache_dir), os.environ["AITUNE_CACHE_DIR"]).replace(tag, "TAG"),
        }
    return out


def load_only(ait, torch, rank, folder) -> dict:
    builds = models(torch)
    out = {}
    for name, build in builds.items():
        args, kwargs = inputs(torch, rank)[name]
        with torch.no_grad():
            out[name] = ait.load(build(), os.path.join(folder, f"{name}.pt"))(*args, **kwargs).tolist()
    return out


def worker(rank: int, workdir: str, port: int) -> None:
    result: dict = {"rank": rank}
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ["AITUNE_CACHE_DIR"] = os.path.join(workdir, "cache")
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=WORLD_SIZE,
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
        )
        counts: dict = {}
        count_collectives(dist, counts)
        import aitune.torch as ait
        from aitune.torch.distributed import distributed_context

        context = distributed_context()
        result["context"] = [context.rank, context.world_size]
        assert "aitune_fast" not in sys.modules, "the stock part must run without aitune_fast"
        result["stock"] = flow(ait, torch, rank, os.path.join(workdir, f"stock-rank{rank}"), "stock")
        result["stock_collectives"] = dict(counts)
        counts.clear()

        import aitune_fast

        aitune_fast.patch_aitune()
        result["patched"] = flow(ait, torch, rank, os.path.join(workdir, f"patched-rank{rank}"), "patched")
        result["patched_collectives"] = dict(counts)
        result["stock_ckpt_patched"] = load_only(ait, torch, rank, os.path.join(workdir, f"stock-rank{rank}"))
        aitune_fast.unpatch_aitune()
        result["patched_ckpt_unpatched"] = load_only(ait, torch, rank, os.path.join(workdir, f"patched-rank{rank}"))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        result["error"] = traceback.format_exc()
    with open(os.path.join(workdir, f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)


def main(workdir: str, port: int) -> dict:
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(workdir, port), nprocs=WORLD_SIZE, join=True)
    ranks = []
    for rank in range(WORLD_SIZE):
        with open(os.path.join(workdir, f"rank-{rank}.json")) as f:
            ranks.append(json.load(f))
    return {"ranks": ranks}


if __name__ == "__main__":
    report(lambda workdir, port: main(workdir, int(port)), *sys.argv[1:3])
