"""Child program of ``test_aitune_integration.py``: real AITune tuning on the CPU, stock and patched.

Run as ``python aitune_child.py MODE WORKDIR``; prints one JSON document on its last stdout line.
Modes:
  main      stock tuning, then ``patch_aitune()``: the same tuning patched, converted keys, checkpoints both ways,
            registrations, ``unpatch_aitune()``;
  stock     a stock AITune with aitune_fast made unimportable: loads the checkpoints ``main`` saved under the patch;
  autowrapt started with ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: is AITune patched after ``import aitune.torch``?
Needs tests/fixtures/tensorrt_stub on PYTHONPATH (AITune imports ``tensorrt``; the stand-in is not TensorRT).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

N_LAYERS = 24


def block_aitune_fast() -> None:
    """Make ``import aitune_fast`` fail, as in an environment without it."""

    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "aitune_fast" or name.startswith("aitune_fast."):
                raise ImportError(f"{name} is blocked in this child (a stock AITune)")
            return None

    sys.meta_path.insert(0, _Block())


def models():
    import torch

    class TinyLLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(32, 8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, input_ids, attention_mask, past_key_values, cache_position=None):
            h = self.proj(self.emb(input_ids) * attention_mask[..., None])
            for i in range(N_LAYERS):
                h = h + past_key_values[f"layer{i}"]["key"].mean((1, 2))[:, None] * 0.01
            return h

    class CacheUser(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, cache, skipped=None):
            return self.lin(x) + cache.keys.sum(-1, keepdim=True)

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()

    def llm():
        torch.manual_seed(1)
        return TinyLLM().eval()

    def cache_user():
        torch.manual_seed(2)
        return CacheUser().eval()

    return mlp, llm, cache_user


class Cache:
    """A KV-cache-like user type, registered on AITune's Locator with only_tensors=True."""

    def __init__(self, keys, seen_tokens):
        self.keys = keys
        self.seen_tokens = seen_tokens


class Skipped:
    """A type AITune's Locator is told to ignore."""


def llm_sample(torch, seq=1):
    g = torch.Generator().manual_seed(3)
    return {
        "input_ids": torch.randint(0, 32, (seq,), generator=g),
        "attention_mask": torch.ones(seq),
        "past_key_values": {
            f"layer{i}": {"key": torch.randn(2, 4, generator=g), "value": torch.randn(2, 4, generator=g)}
            for i in range(N_LAYERS)
        },
    }


def run_all(ait, torch, tag, workdir, results):
    """Tune every model with OneBackendStrategy(TorchEagerBackend()); record keys and outputs."""
    from aitune.torch.backend import TorchEagerBackend
    from aitune.torch.module.tensor_spec import InfoLevel
    from aitune.torch.module_registry import MODULE_REGISTRY

    mlp, llm, cache_user = models()

    def strategy():
        s = ait.OneBackendStrategy(TorchEagerBackend())
        s.enable_performance_validation(False)
        s.enable_find_max_batch_size(False)
        return s

    def keys(tuned):
        out = []
        for key in tuned.module.backends:
            out.append(
                {
                    "type": type(key).__module__,
                    "medium": key.describe(InfoLevel.MEDIUM),
                    "short": key.describe(InfoLevel.SHORT),
                    "batch_axis": key.has_batch_axis(),
                    "phase": key.llm_phase,
                }
            )
        return out

    tuned_modules = {}
    res = results[tag] = {}

    MODULE_REGISTRY.clear()
    m = ait.Module(mlp(), f"mlp-{tag}", strategy=strategy())
    ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        res["mlp"] = {"keys": keys(m), "out": m(x).tolist(), "out1": m(x[:1]).tolist()}
    tuned_modules["mlp"] = m

    for with_cp in (True, False):
        MODULE_REGISTRY.clear()
        name = "llm_cp" if with_cp else "llm"
        m = ait.Module(llm(), f"{name}-{tag}", strategy=strategy())
        data = ait.DataLoaderFactory([llm_sample(torch)], collate_fn=torch.utils.data.default_collate)
        extra = {"cache_position": torch.tensor([16])} if with_cp else {}
        ait.tune(lambda m=m, e=extra, **kw: m(**kw, **e), data, batch_sizes=[1, 2], device="cpu")
        batch = torch.utils.data.default_collate([llm_sample(torch)] * 3)
        extra = {"cache_position": torch.tensor([17])} if with_cp else {}
        with torch.no_grad():
            res[name] = {"keys": keys(m), "out": m(**batch, **extra).tolist()}
        tuned_modules[name] = m

    MODULE_REGISTRY.clear()
    m = ait.Module(cache_user(), f"cache-{tag}", strategy=strategy())

    def call_cache(x, m=m):
        return m(x, Cache(x[:, :1] * 0 + 1.0, seen_tokens=int(x.shape[0])), skipped=Skipped())

    ait.tune(call_cache, torch.randn(8), batch_sizes=[1, 2], device="cpu")
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        # a different non-tensor attribute: ignored (only_tensors), so the same backend must serve it
        out = m(x, Cache(x[:, :1] * 0 + 1.0, seen_tokens=99), skipped=Skipped())
        res["cache"] = {"keys": keys(m), "out": out.tolist()}
    tuned_modules["cache"] = m

    for name, module in tuned_modules.items():
        ait.save(module, os.path.join(workdir, f"{tag}-{name}.pt"))
    return tuned_modules


def replay(ait, torch, tuned_modules):
    """Outputs of already tuned modules (stock-tuned ones after the patch, patched ones after unpatch)."""
    out = {}
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out["mlp"] = tuned_modules["mlp"](x).tolist()
        batch = torch.utils.data.default_collate([llm_sample(torch)] * 3)
        out["llm_cp"] = tuned_modules["llm_cp"](**batch, cache_position=torch.tensor([17])).tolist()
        out["llm"] = tuned_modules["llm"](**batch).tolist()
    return out


def load_all(ait, torch, tag, workdir):
    """Load the checkpoints saved by `tag` into fresh modules and run them."""
    mlp, llm, cache_user = models()
    out = {}
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(5))
    batch = torch.utils.data.default_collate([llm_sample(torch)] * 3)
    with torch.no_grad():
        out["mlp"] = ait.load(mlp(), os.path.join(workdir, f"{tag}-mlp.pt"))(x).tolist()
        loaded = ait.load(llm(), os.path.join(workdir, f"{tag}-llm_cp.pt"))
        out["llm_cp"] = loaded(**batch, cache_position=torch.tensor([17])).tolist()
        out["llm_cp_type"] = type(next(iter(loaded.module.backends))).__module__
        out["llm"] = ait.load(llm(), os.path.join(workdir, f"{tag}-llm.pt"))(**batch).tolist()
    return out


def jit_run(ait, torch):
    """TorchInductor JIT through patch_for_jit_tuning: the module tunes itself on its first calls."""
    from aitune.torch.backend import TorchInductorJitBackend

    class MLP(torch.nn.Module):  # not an nn.Sequential: AITune's JIT patcher skips containers
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(16, 32)
            self.b = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    def mlp():
        torch.manual_seed(0)
        return MLP().eval()

    strategy = ait.OneBackendStrategy(TorchInductorJitBackend())
    strategy.enable_performance_validation(False)
    strategy.enable_find_max_batch_size(False)
    ait.jit_config.strategy = strategy
    ait.jit_config.min_samples = 2
    ait.jit_config.device = "cpu"

    @ait.patch_for_jit_tuning
    def build():
        return mlp()

    model = build()
    outs = []
    with torch.no_grad():
        for bs in (1, 2, 3):
            x = torch.randn(bs, 16, generator=torch.Generator().manual_seed(bs))
            outs.append(model(x).tolist())
    from aitune.torch.jit.patcher import Patcher

    mine = [pm for pm in Patcher._patched_modules if getattr(pm, "__wrapped__", None) is model]
    wrapper = getattr(mine[0], "_wrapper", None) if mine else None
    backends = getattr(wrapper, "backends", None) or {}
    return {
        "out": outs,
        "wrapper": type(wrapper).__name__,
        "key_types": [type(k).__module__ for k in backends],
        "backends": [type(b).__name__ for b in backends.values()],
    }


def leftovers(objects) -> list[str]:
    """`module.attribute` of every loaded aitune module attribute that is one of `objects`."""
    ids = {id(o) for o in objects}
    found = []
    for name, module in list(sys.modules.items()):
        if name == "aitune" or name.startswith("aitune."):
            for attribute, value in list(vars(module).items()):
                if id(value) in ids:
                    found.append(f"{name}.{attribute}")
    return sorted(found)


def names(aitune_fast):
    return [
        getattr(aitune_fast, n)
        for n in (
            "SampleMetadata",
            "ExactSampleMetadata",
            "TensorSpec",
            "Locator",
            "InfoLevel",
            "ObjectType",
            "batch_tensor",
        )
    ]


def reference_names():
    import aitune.torch.module.exact_sample_metadata as e
    import aitune.torch.module.locator as lo
    import aitune.torch.module.sample_metadata as s
    import aitune.torch.module.tensor_spec as t

    return [
        s.SampleMetadata,
        e.ExactSampleMetadata,
        t.TensorSpec,
        lo.Locator,
        t.InfoLevel,
        lo.ObjectType,
        s.batch_tensor,
    ]


def main_mode(workdir):
    try:
        import aitune.torch as ait
        import torch
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"import aitune.torch failed: {exc!r}"}
    import aitune.torch.module.locator as ref_locator_module
    import aitune.torch.module.tuned_module as tuned_module_module
    import aitune_fast

    results: dict = {}
    reference_objects = reference_names()
    RefLocator = ref_locator_module.Locator
    RefSampleMetadata = tuned_module_module.SampleMetadata
    RefLocator.register_user_type(Cache, only_tensors=True)
    RefLocator.ignore_type(Skipped)

    stock = run_all(ait, torch, "stock", workdir, results)
    results["stock_jit"] = jit_run(ait, torch)

    aitune_fast.patch_aitune()
    aitune_fast.patch_aitune()  # idempotent
    results["swapped"] = {
        "tuned_module": tuned_module_module.SampleMetadata is aitune_fast.SampleMetadata,
        "locator": ref_locator_module.Locator is aitune_fast.Locator,
        "object_type": ref_locator_module.ObjectType is aitune_fast.ObjectType,
        "is_patched": aitune_fast.is_aitune_patched(),
        "reference_left": leftovers(reference_objects),
        "ours_in": len(leftovers(names(aitune_fast))),
    }
    registry_users, registry_ignored = aitune_fast._core._type_registry()
    results["carried_over"] = {
        "cache": registry_users.get(Cache),
        "skipped": Skipped in registry_ignored,
    }
    # modules tuned before the patch: keys converted, still dispatching
    results["stock_after_patch"] = replay(ait, torch, stock)
    results["stock_keys_after_patch"] = [type(k).__module__ for k in stock["mlp"].module.backends]

    patched = run_all(ait, torch, "patched", workdir, results)
    results["patched_jit"] = jit_run(ait, torch)
    results["stock_ckpt_under_patch"] = load_all(ait, torch, "stock", workdir)
    results["patched_ckpt_under_patch"] = load_all(ait, torch, "patched", workdir)

    class LateType:
        pass

    aitune_fast.Locator.register_user_type(LateType)
    aitune_fast.unpatch_aitune()
    aitune_fast.unpatch_aitune()  # idempotent
    results["restored"] = {
        "tuned_module": tuned_module_module.SampleMetadata is RefSampleMetadata,
        "locator": ref_locator_module.Locator is RefLocator,
        "is_patched": aitune_fast.is_aitune_patched(),
        "late_type_carried_back": LateType in RefLocator._user_types,
        "cache_still_registered": RefLocator._user_types.get(Cache),
        "ours_left": leftovers(names(aitune_fast)),
        "reference_in": len(leftovers(reference_objects)),
    }
    results["patched_after_unpatch"] = replay(ait, torch, patched)
    results["patched_keys_after_unpatch"] = [type(k).__module__ for k in patched["mlp"].module.backends]
    results["patched_ckpt_in_unpatched"] = load_all(ait, torch, "patched", workdir)
    return results


def stock_mode(workdir):
    block_aitune_fast()
    import aitune.torch as ait
    import torch

    return {"aitune_fast_importable": "aitune_fast" in sys.modules, "loaded": load_all(ait, torch, "patched", workdir)}


def autowrapt_mode(workdir):
    import aitune.torch  # noqa: F401  (the autowrapt hook fires here)
    import aitune.torch.module.sample_metadata as sm
    import aitune_fast

    return {
        "patched": aitune_fast.is_aitune_patched(),
        "swapped": sm.SampleMetadata is aitune_fast.SampleMetadata,
        "reference_left": leftovers(aitune_fast.patch._state.reference.values()),
    }


def early_mode(workdir):
    """patch_aitune() before AITune is imported: the import hook swaps the names as modules load."""
    import aitune_fast

    aitune_fast.patch_aitune()
    import aitune.torch as ait
    import torch

    # a module imported after the patch: drop one AITune has loaded (it imports SampleMetadata and InfoLevel by
    # name) and import it again; the import hook must swap its names as it loads
    late = "aitune.torch.kernel_forge.kernel_utils"
    before = sys.modules.pop(late, None)
    ku = importlib.import_module(late)

    metadata_names = ("SampleMetadata", "ExactSampleMetadata", "TensorSpec", "Locator", "InfoLevel", "ObjectType")
    defined = []
    for name, module in list(sys.modules.items()):
        if name.startswith("aitune."):
            for attribute, value in list(vars(module).items()):
                if attribute in metadata_names and isinstance(value, type):
                    if value.__module__.startswith("aitune.torch.module."):
                        defined.append(f"{name}.{attribute}")
    mlp, _, _ = models()
    from aitune.torch.backend import TorchEagerBackend

    s = ait.OneBackendStrategy(TorchEagerBackend())
    s.enable_performance_validation(False)
    s.enable_find_max_batch_size(False)
    m = ait.Module(mlp(), "mlp-early", strategy=s)
    ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
    key = next(iter(m.module.backends))
    return {
        "reference_left": leftovers(aitune_fast.patch._state.reference.values()),
        "reference_classes_defined": sorted(defined),
        "late_module_is_new": ku is not before,
        "late_module_swapped": ku.SampleMetadata is aitune_fast.SampleMetadata
        and ku.InfoLevel is aitune_fast.InfoLevel,
        "mlp": {"key_type": type(key).__module__, "batch_axis": key.has_batch_axis()},
    }


if __name__ == "__main__":
    mode, workdir = sys.argv[1], sys.argv[2]
    try:
        out = {"main": main_mode, "stock": stock_mode, "autowrapt": autowrapt_mode, "early": early_mode}[mode](workdir)
    except BaseException:  # noqa: BLE001
        out = {"error": traceback.format_exc()}
    sys.stdout.flush()
    print("\n" + json.dumps(out))
