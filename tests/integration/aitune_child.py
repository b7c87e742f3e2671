"""Child program of ``test_aitune_integration.py``: real AITune tuning on the CPU, stock and patched.

Run as ``python aitune_child.py MODE WORKDIR``; prints one JSON document on its last stdout line.
Modes:
  main      stock tuning, then ``patch_aitune()``: the same tuning patched, converted keys, checkpoints both ways,
            registrations, ``unpatch_aitune()``;
  stock     a stock AITune with aitune_fast made unimportable: loads the checkpoints ``main`` saved under the patch;
  autowrapt started with ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: is AITune patched after ``import aitune.torch``?
  early     ``patch_aitune()`` before ``import aitune.torch``;
  onnx      ONNX Runtime backends (they keep a graph spec in their checkpoint state) tuned stock and patched, each
            checkpoint loaded stock and patched; the TensorRT backend's state and metadata in assorted containers
            through AITune's checkpoint file tasks; ``onnx_stock``: a stock AITune loads what ``onnx`` saved patched;
  weights_only  run with ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``: the ``onnx`` checkpoints loaded stock and patched;
  edges     ``patch_aitune()`` before ``import aitune.torch`` and then unpatched (nothing of aitune_fast captured),
            names bound before the patch, strategy keys across a toggle, odd other values in checkpoints, stock
            pickles under the patch, toggles while threads call tuned modules.
Needs tests/fixtures/tensorrt_stub on PYTHONPATH (AITune imports ``tensorrt``; the stand-in is not TensorRT).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
import types
import warnings
from collections import OrderedDict
from pathlib import Path

from child_kit import block_aitune_fast, quick_strategy, report, seeded, tiny_llm
from child_kit import mlp as build_mlp

warnings.filterwarnings("ignore")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

N_LAYERS = 24


def patch_state():
    """The patch's state now (what it learnt of AITune, ``reference``): ``aitune_fast.patch._state.state()``."""
    from aitune_fast.patch._state import state

    return state()


def models():
    import torch

    class CacheUser(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, cache, skipped=None):
            return self.lin(x) + cache.keys.sum(-1, keepdim=True)

    return functools.partial(build_mlp, torch), seeded(torch, 1, tiny_llm(torch)), seeded(torch, 2, CacheUser)


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
    from aitune.torch.module.tensor_spec import InfoLevel
    from aitune.torch.module_registry import MODULE_REGISTRY

    mlp, llm, cache_user = models()

    def strategy():
        return quick_strategy(ait)

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

    ait.jit_config.strategy = quick_strategy(ait, TorchInductorJitBackend())
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


ONNX_MODELS = ("mlp", "llm")


def onnx_on_cpu(torch):
    """TEST SHIM, NOT AITune: let AITune's ONNX Runtime backend run on the CPU.

    ``ONNXRuntimeBackend`` is CUDA-only in AITune 0.6.0 (``_devices = ["cuda"]``, CUDA execution providers, CUDA
    IO binding), and these machines have no GPU. The shim replaces only the device list, the execution provider
    and the inner call (``session.run`` on NumPy arrays); the export, the graph spec the backend keeps, its
    ``to_dict``/``from_dict`` and its use of the graph spec's locators to map inputs and outputs stay AITune's.
    Each backend counts its calls in ``_shim_calls``, so a test sees dispatch reach it.
    """
    from aitune.torch.backend import ONNXRuntimeBackend

    def _get_execution_providers(self):
        return ["CPUExecutionProvider"]

    def _infer(self, *args, **kwargs):
        self._shim_calls = getattr(self, "_shim_calls", 0) + 1
        inputs = self._prepare_inputs(args, kwargs)
        feeds = {name: value.detach().cpu().contiguous().numpy() for name, value in inputs.items()}
        names = [output.name for output in self._session.get_outputs()]
        outputs = self._session.run(names, feeds)
        return self._prepare_outputs({n: torch.from_numpy(o) for n, o in zip(names, outputs, strict=True)})

    ONNXRuntimeBackend._devices = ["cpu", "cuda"]
    ONNXRuntimeBackend._get_execution_providers = _get_execution_providers
    ONNXRuntimeBackend._infer = _infer


def onnx_inputs(torch):
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(5))
    batch = torch.utils.data.default_collate([llm_sample(torch)] * 3)
    return {"mlp": ((x,), {}), "llm": ((), batch)}


def onnx_tune(ait, torch, tag, workdir):
    """Tune the MLP and the LLM-like module with ONNX Runtime; save them; outputs and backend facts."""
    from aitune.torch.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig
    from aitune.torch.module_registry import MODULE_REGISTRY

    mlp, llm, _ = models()
    out = {}
    specs, modules = {}, {}
    inputs = onnx_inputs(torch)
    for name, build in (("mlp", mlp), ("llm", llm)):
        MODULE_REGISTRY.clear()
        s = quick_strategy(ait, ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False)))
        m = ait.Module(build(), f"onnx-{name}-{tag}", strategy=s)
        if name == "mlp":
            ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
        else:
            data = ait.DataLoaderFactory([llm_sample(torch)], collate_fn=torch.utils.data.default_collate)
            ait.tune(lambda m=m, **kw: m(**kw), data, batch_sizes=[1, 2], device="cpu")
        out[name] = onnx_call(torch, m, *inputs[name])
        specs[name] = next(iter(m.module.backends.values()))._graph_spec
        modules[name] = m
        ait.save(m, os.path.join(workdir, f"onnx-{tag}-{name}.pt"))
    return out, specs, modules


def onnx_call(torch, m, args, kwargs) -> dict:
    """The output of one call, whether the module's one backend served it, the types in its graph spec."""
    (key, backend), *others = m.module.backends.items()
    before = getattr(backend, "_shim_calls", 0)
    with torch.no_grad():
        out = m(*args, **kwargs).tolist()
    spec = backend._graph_spec
    return {
        "out": out,
        "backends": [type(backend).__name__] + [type(b).__name__ for _, b in others],
        "served": getattr(backend, "_shim_calls", 0) - before,
        "key_type": type(key).__module__,
        "spec_types": sorted({type(md).__module__ for md in (spec.input_spec, spec.output_spec)}),
        "locator_types": sorted({type(loc).__module__ for loc, _ in spec.input_spec.tensor_data}),
        "input_paths": [loc.path for loc, _ in spec.input_spec.tensor_data][:3],
        "n_inputs": len(spec.input_spec.tensor_data),
    }


def onnx_load(ait, torch, tag, workdir) -> dict:
    """Load the ONNX checkpoints `tag` saved into fresh modules, run them once each."""
    import zipfile

    mlp, llm, _ = models()
    out = {}
    inputs = onnx_inputs(torch)
    for name, build in (("mlp", mlp), ("llm", llm)):
        path = os.path.join(workdir, f"onnx-{tag}-{name}.pt")
        try:  # one failed load fails its own test only
            loaded = ait.load(build(), path)
            out[name] = onnx_call(torch, loaded, *inputs[name])
        except Exception:  # noqa: BLE001
            out[name] = {"error": traceback.format_exc()}
        with zipfile.ZipFile(os.path.join(path, "state_dict.pt")) as archive:
            pickled = b"".join(archive.read(n) for n in archive.namelist() if n.endswith("data.pkl"))
        out[name]["names_aitune_fast"] = b"aitune_fast" in pickled
    return out


def trt_state_save(torch, tag, workdir, graph_spec) -> dict:
    """TensorRT cannot run here: build the backend its ``to_dict`` sees (AITune's class, holding the graph spec a
    tuned ONNX Runtime backend recorded) and write its state with AITune's checkpoint file task."""
    from aitune.torch.backend.tensorrt.tensorrt_backend import TensorRTBackend
    from aitune.torch.checkpoint.artifact import ArtifactPath
    from aitune.torch.checkpoint.storage_tasks import TorchSaveTask

    folder = Path(workdir) / f"trt-{tag}"
    folder.mkdir(exist_ok=True)
    backend = TensorRTBackend()
    backend._graph_spec = graph_spec
    backend._engine_artifact = ArtifactPath(folder, "engine.plan")
    backend._device = torch.device("cpu")
    TorchSaveTask().save(folder, {"backend": backend.to_dict()})
    return graph_spec_facts(graph_spec)


def trt_state_load(tag, workdir) -> dict:
    """The TensorRT backend state `tag` wrote, read back with AITune's checkpoint file task and ``from_dict``."""
    from aitune.torch.backend.tensorrt.tensorrt_backend import TensorRTBackend
    from aitune.torch.checkpoint.storage_tasks import TorchLoadTask

    try:
        state = TorchLoadTask().load(Path(workdir) / f"trt-{tag}")
        return graph_spec_facts(TensorRTBackend.from_dict(None, state["backend"])._graph_spec)
    except Exception:  # noqa: BLE001
        return {"error": traceback.format_exc()}


def details_save(torch, tag, workdir) -> dict:
    """Metadata in the shapes a backend state may hold it: shared, in tuples, an ``OrderedDict``, a list that holds
    itself, an ``ExactSampleMetadata``, a lone locator and spec; written with AITune's checkpoint file task."""
    from aitune.torch.checkpoint.storage_tasks import TorchSaveTask
    from aitune.torch.module.exact_sample_metadata import ExactSampleMetadata
    from aitune.torch.module.sample_metadata import SampleMetadata

    x = {"a": torch.ones(2, 3), "b": [torch.zeros(4, dtype=torch.int64), 7, "s"], "c": None}
    md = SampleMetadata.from_inputs({"x": x, "k": 3.5}, strict=True, batch_size=2)
    exact = ExactSampleMetadata.from_inputs({"x": x})
    loop = [md]
    loop.append(loop)
    state = {"shared": [md, md], "exact": exact, "pair": md.tensor_data[0], "loop": loop, "od": OrderedDict(m=md)}
    folder = Path(workdir) / f"details-{tag}"
    folder.mkdir(exist_ok=True)
    TorchSaveTask().save(folder, state)
    facts = details_facts(state)
    # metadata only inside an object that is no plain container (the save finds it while pickling)
    hidden = {"hidden": types.SimpleNamespace(md=SampleMetadata.from_outputs([torch.ones(2)], strict=True))}
    folder = Path(workdir) / f"hidden-{tag}"
    folder.mkdir(exist_ok=True)
    TorchSaveTask().save(folder, hidden)
    facts["hidden"] = hidden_facts(hidden)
    return facts


def details_load(tag, workdir) -> dict:
    from aitune.torch.checkpoint.storage_tasks import TorchLoadTask

    try:
        facts = details_facts(TorchLoadTask().load(Path(workdir) / f"details-{tag}"))
        facts["hidden"] = hidden_facts(TorchLoadTask().load(Path(workdir) / f"hidden-{tag}"))
        return facts
    except Exception:  # noqa: BLE001
        return {"error": traceback.format_exc()}


def hidden_facts(state) -> dict:
    from aitune.torch.module.tensor_spec import InfoLevel

    md = state["hidden"].md
    return {"type": type(md).__module__, "described": md.describe(InfoLevel.FULL)}


def details_facts(state) -> dict:
    from aitune.torch.module.tensor_spec import InfoLevel  # aitune_fast's under the patch

    md, exact = state["shared"][0], state["exact"]
    loc, spec = state["pair"]
    return {
        "types": [type(o).__module__ for o in (md, exact, loc, spec, state["loop"][0])],
        "exact_is_exact": type(exact).__name__ == "ExactSampleMetadata",
        "shared": state["shared"][1] is md and state["od"]["m"] is md and state["loop"][0] is md,
        "loop": state["loop"][1] is state["loop"],
        "od": type(state["od"]).__name__,
        "described": [m.describe(InfoLevel.FULL) for m in (md, exact)],
        "other_data": [(o.path, v) for o, v in md.other_data],
        "pair": [loc.path, spec.shape, str(spec.dtype)],
    }


def graph_spec_facts(spec) -> dict:
    from aitune.torch.module.tensor_spec import InfoLevel  # aitune_fast's under the patch

    mds = (spec.input_spec, spec.output_spec)
    return {
        "types": sorted({type(md).__module__ for md in mds}),
        "locator_types": sorted({type(loc).__module__ for md in mds for loc, _ in md.tensor_data}),
        "described": [md.describe(InfoLevel.FULL) for md in mds],
        "name": spec.name,
    }


def onnx_mode(workdir):
    try:
        import aitune.torch as ait
        import onnxruntime  # noqa: F401
        import torch
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"import aitune.torch or onnxruntime failed: {exc!r}"}
    import aitune.torch.checkpoint.storage_tasks as storage_tasks
    import aitune_fast
    from aitune.torch.module.tuned_module import TunedModule

    onnx_on_cpu(torch)
    originals = (storage_tasks.TorchSaveTask.save, storage_tasks.torch_load_with_custom_types, TunedModule.to_dict)
    results, specs = {}, {}
    results["stock"], specs["stock"], stock_modules = onnx_tune(ait, torch, "stock", workdir)
    results["stock_ckpt_stock"] = onnx_load(ait, torch, "stock", workdir)
    results["trt_stock"] = trt_state_save(torch, "stock", workdir, specs["stock"]["llm"])
    results["trt_stock_stock"] = trt_state_load("stock", workdir)
    results["details_stock"] = details_save(torch, "stock", workdir)
    results["details_stock_stock"] = details_load("stock", workdir)
    aitune_fast.patch_aitune()
    # modules tuned before the patch: their graph specs were converted; saved now, a stock AITune loads them
    for name, module in stock_modules.items():
        ait.save(module, os.path.join(workdir, f"onnx-restock-{name}.pt"))
    results["restock_ckpt_patched"] = onnx_load(ait, torch, "restock", workdir)
    results["patched"], specs["patched"], _ = onnx_tune(ait, torch, "patched", workdir)
    results["stock_ckpt_patched"] = onnx_load(ait, torch, "stock", workdir)
    results["patched_ckpt_patched"] = onnx_load(ait, torch, "patched", workdir)
    results["trt_patched"] = trt_state_save(torch, "patched", workdir, specs["patched"]["llm"])
    results["trt_stock_patched"] = trt_state_load("stock", workdir)
    results["trt_patched_patched"] = trt_state_load("patched", workdir)
    results["details_patched"] = details_save(torch, "patched", workdir)
    results["details_stock_patched"] = details_load("stock", workdir)
    results["details_patched_patched"] = details_load("patched", workdir)
    aitune_fast.unpatch_aitune()
    restored = (storage_tasks.TorchSaveTask.save, storage_tasks.torch_load_with_custom_types, TunedModule.to_dict)
    results["functions_restored"] = all(a is b for a, b in zip(originals, restored, strict=True))
    return results


def onnx_stock_mode(workdir):
    block_aitune_fast()
    import aitune.torch as ait
    import torch

    onnx_on_cpu(torch)
    return {
        "aitune_fast_importable": "aitune_fast" in sys.modules,
        "patched_ckpt_stock": onnx_load(ait, torch, "patched", workdir),
        "restock_ckpt_stock": onnx_load(ait, torch, "restock", workdir),
        "trt_patched_stock": trt_state_load("patched", workdir),
        "details_patched_stock": details_load("patched", workdir),
    }


def weights_only_mode(workdir):
    """Run with ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``: torch loads AITune's checkpoints weights-only (AITune's
    allowlist), stock and patched."""
    import aitune.torch as ait
    import aitune_fast
    import torch

    onnx_on_cpu(torch)
    results = {
        "stock_ckpt_stock": onnx_load(ait, torch, "stock", workdir),
        "trt_stock_stock": trt_state_load("stock", workdir),
    }
    aitune_fast.patch_aitune()
    for tag in ("stock", "patched"):
        results[f"{tag}_ckpt_patched"] = onnx_load(ait, torch, tag, workdir)
        results[f"trt_{tag}_patched"] = trt_state_load(tag, workdir)
    if os.path.exists(os.path.join(workdir, "odd-stock.pt")):  # saved by the edges child: a key naming Mode
        try:
            ait.load(odd_values_module(torch), os.path.join(workdir, "odd-stock.pt"))
            results["odd_key_patched"] = "loaded"
        except Exception as exc:  # noqa: BLE001
            results["odd_key_patched"] = f"{type(exc).__name__}: {exc}"
    return results


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
        "reference_left": leftovers(patch_state().reference.values()),
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
    m = ait.Module(mlp(), "mlp-early", strategy=quick_strategy(ait))
    ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
    key = next(iter(m.module.backends))
    return {
        "reference_left": leftovers(patch_state().reference.values()),
        "reference_classes_defined": sorted(defined),
        "late_module_is_new": ku is not before,
        "late_module_swapped": ku.SampleMetadata is aitune_fast.SampleMetadata
        and ku.InfoLevel is aitune_fast.InfoLevel,
        "mlp": {"key_type": type(key).__module__, "batch_axis": key.has_batch_axis()},
    }


# ------------------------------------------------------------------------- edges: patch_aitune() edge cases


class Mode(__import__("enum").Enum):
    A = 1
    B = 2


class Key(str, __import__("enum").Enum):
    A = "a"


class Tag(str):
    """A str subclass as an other value."""


def edge_fn():
    """A module-level function as an other value."""


class Point:
    """A user type registered through AITune's Locator bound before the patch."""

    def __init__(self, xy):
        self.xy = xy


def checked(fn, *args) -> dict:
    """`fn(*args)` as {"ok": result} or {"error": traceback}: one failing check fails its own test only."""
    try:
        return {"ok": fn(*args)}
    except Exception:  # noqa: BLE001
        return {"error": traceback.format_exc()}


def captured_ours(aitune_fast, module_names=True) -> list[str]:
    """Every place in a loaded aitune module that holds one of aitune_fast's swapped objects (or an enum member of
    them): module names (unless `module_names` is False: the names the patch swaps), class bases and attributes,
    function defaults, closures, annotations, generic aliases."""
    ours = names(aitune_fast)
    ids = {id(o) for o in ours}
    for enum_cls in (aitune_fast.InfoLevel, aitune_fast.ObjectType):
        ids |= {id(m) for m in enum_cls}
    found, seen = [], set()

    def visit(value, where, depth=0):
        if id(value) in ids:
            found.append(where)
            return
        if depth > 6 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, (staticmethod, classmethod)):
            visit(value.__func__, where, depth + 1)
        elif isinstance(value, property):
            for f in (value.fget, value.fset, value.fdel):
                visit(f, where, depth + 1)
        elif isinstance(value, types.FunctionType):
            for i, d in enumerate(value.__defaults__ or ()):
                visit(d, f"{where} default {i}", depth + 1)
            for k, d in (value.__kwdefaults__ or {}).items():
                visit(d, f"{where} default {k}", depth + 1)
            for i, cell in enumerate(value.__closure__ or ()):
                try:
                    visit(cell.cell_contents, f"{where} closure {i}", depth + 1)
                except ValueError:
                    pass
            for k, a in getattr(value, "__annotations__", {}).items():
                visit(a, f"{where} annotation {k}", depth + 1)
        elif isinstance(value, type):
            if not (value.__module__ or "").startswith("aitune."):
                return
            for base in value.__mro__[1:]:
                if id(base) in ids:
                    found.append(f"{where} base {base.__name__}")
            for k, v in list(vars(value).items()):
                visit(v, f"{where}.{k}", depth + 1)
        elif isinstance(value, types.GenericAlias) or type(value).__module__ == "typing":
            for i, a in enumerate(getattr(value, "__args__", ()) or ()):
                visit(a, f"{where} arg {i}", depth + 1)

    for name, module in list(sys.modules.items()):
        if name == "aitune" or name.startswith("aitune."):
            for attribute, value in list(vars(module).items()):
                if module_names or id(value) not in ids:
                    visit(value, f"{name}.{attribute}")
    return sorted(set(found))


def stock_exact_works() -> dict:
    """AITune's ExactSampleMetadata (its ==, hash, update_shapes_seen) once unpatched."""
    import aitune_fast
    import torch
    from aitune.torch.module.exact_sample_metadata import ExactSampleMetadata
    from aitune.torch.module.sample_metadata import SampleMetadata
    from aitune.torch.module.tensor_spec import InfoLevel, TensorSpec

    a = ExactSampleMetadata.from_inputs({"x": torch.ones(2, 3), "k": 1})
    b = ExactSampleMetadata.from_inputs({"x": torch.ones(2, 3), "k": 1})
    a.update_shapes_seen(b)
    return {
        "eq": a == b,
        "hash": hash(a) == hash(b),
        "subclass_of_ours": issubclass(ExactSampleMetadata, aitune_fast.SampleMetadata),
        "bases": [f"{c.__module__}.{c.__name__}" for c in ExactSampleMetadata.__mro__[1:-1]],
        "defaults_stock": SampleMetadata.describe.__defaults__[0] is InfoLevel.FULL
        and TensorSpec.describe.__defaults__[0] is InfoLevel.FULL,
        "described": a.describe().startswith("Tensors"),
    }


def registry_through_bound_locator(aitune_fast) -> dict:
    """`Locator` bound from AITune before the patch: its registry methods act on the one registry."""
    import torch
    from aitune.torch.module.locator import Locator  # AITune's own (unpatched now)

    aitune_fast.patch_aitune()
    out = {}
    out["register"] = checked(lambda: Locator.register_user_type(Point) is None)
    out["find_leaves"] = checked(lambda: [loc.path for loc, _ in Locator.find_leaves({"p": Point(torch.ones(2))})])
    out["ours_sees_it"] = [loc.path for loc, _ in aitune_fast.Locator.find_leaves({"p": Point(torch.ones(2))})]
    out["ignore"] = checked(lambda: (Locator.ignore_type(Tag), Locator.unignore_type(Tag)) and True)
    aitune_fast.unpatch_aitune()
    out["carried_back"] = Point in Locator._user_types
    out["stock_find_leaves"] = [loc.path for loc, _ in Locator.find_leaves({"p": Point(torch.ones(2))})]
    Locator.unregister_user_type(Point)
    return out


def strategies_across_toggle(ait, torch, aitune_fast, workdir) -> dict:
    """ait.Module(strategies={key: strategy}) with the key built in the other world than tune() runs in."""
    from aitune.torch.module_registry import MODULE_REGISTRY

    mlp, _, _ = models()
    out = {}

    class UserModule(ait.Module):  # a user's subclass, defined outside aitune
        pass

    def build(tag, cls=ait.Module):
        MODULE_REGISTRY.clear()
        sm = sys.modules["aitune.torch.module.sample_metadata"].SampleMetadata  # the class of the world now
        key = sm.from_inputs({"input": torch.randn(2, 16)}, strict=True)
        return cls(mlp(), f"strategies-{tag}", strategies={key: quick_strategy(ait)})

    def tune(m):  # AITune logs a failed tuning and leaves the module untuned: the keys tell
        ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
        return [type(k).__module__ for k in m.module.backends]

    m = build("stock")  # built unpatched, tuned unpatched: the control
    out["stock"] = checked(tune, m)
    for cls, prefix in ((ait.Module, ""), (UserModule, "user_")):  # ait.tune() tunes the registry's one module
        m = build(f"{prefix}before_patch", cls)
        aitune_fast.patch_aitune()
        out[f"{prefix}before_patch"] = checked(tune, m)
        m = build(f"{prefix}patched", cls)
        aitune_fast.unpatch_aitune()
        out[f"{prefix}after_unpatch"] = checked(tune, m)
    return out


def odd_values_module(torch):
    class Opts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, mode=Mode.A, device=None, table=None, extra=None):
            y = self.lin(x.to(device)) + table[Key.A]
            return y * (2.0 if mode is Mode.B else 1.0)

    return Opts().eval()


def odd_call(m, torch, x):
    import datetime
    import decimal

    import numpy as np

    extra = [
        np.float32(1.5),
        Path("some/where"),
        slice(1, 5, 2),
        range(3),
        edge_fn,
        datetime.datetime(2026, 1, 2, 3, 4, 5),
        decimal.Decimal("1.25"),
        Tag("tagged"),
        torch.strided,
    ]
    with torch.no_grad():
        return m(x, mode=Mode.B, device=torch.device("cpu"), table={Key.A: x[..., :1] * 0 + 1.0}, extra=extra)


def odd_values_checkpoints(ait, torch, aitune_fast, workdir) -> dict:
    """Enum, torch.device, str-Enum dict keys and other values JSON cannot hold, in strict mode: checkpoints saved
    and loaded stock and patched in every direction."""
    from aitune.torch.module_registry import MODULE_REGISTRY

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(7))
    out = {}

    def tune(tag):
        MODULE_REGISTRY.clear()
        m = ait.Module(odd_values_module(torch), f"odd-{tag}", strategy=quick_strategy(ait))
        ait.tune(lambda x, m=m: odd_call(m, torch, x), torch.randn(8), batch_sizes=[1, 2], device="cpu")
        return m

    def save(m, tag):
        ait.save(m, os.path.join(workdir, f"odd-{tag}.pt"))
        return True

    def load(tag):
        loaded = ait.load(odd_values_module(torch), os.path.join(workdir, f"odd-{tag}.pt"))
        key = next(iter(loaded.module.backends))
        return {"out": odd_call(loaded, torch, x).tolist(), "key_type": type(key).__module__}

    stock = tune("stock")
    out["stock_out"] = odd_call(stock, torch, x).tolist()
    out["stock_save"] = checked(save, stock, "stock")
    out["stock_stock"] = checked(load, "stock")
    aitune_fast.patch_aitune()
    out["restock_save"] = checked(save, stock, "restock")  # tuned stock, saved patched
    patched = checked(tune, "patched")
    out["patched_tune"] = "error" not in patched
    out["patched_out"] = checked(lambda: odd_call(patched["ok"], torch, x).tolist())
    out["patched_save"] = checked(save, patched.get("ok"), "patched")
    out["stock_patched"] = checked(load, "stock")
    out["patched_patched"] = checked(load, "patched")
    aitune_fast.unpatch_aitune()
    out["patched_stock"] = checked(load, "patched")
    out["restock_stock"] = checked(load, "restock")
    return out


def toggles_under_calls(ait, torch, aitune_fast, n_threads=4, n_toggles=20) -> dict:
    """patch_aitune()/unpatch_aitune() while threads call tuned modules (one per world it was tuned in)."""
    import threading

    from aitune.torch.module_registry import MODULE_REGISTRY

    mlp, _, _ = models()
    modules = []
    for tag in ("stock", "patched"):
        if tag == "patched":
            aitune_fast.patch_aitune()
        MODULE_REGISTRY.clear()
        m = ait.Module(mlp(), f"toggle-{tag}", strategy=quick_strategy(ait))
        ait.tune(m, torch.randn(16), batch_sizes=[1, 2], device="cpu")
        modules.append(m)
    aitune_fast.unpatch_aitune()
    x = torch.randn(2, 16)
    stop = threading.Event()
    calls, errors = [0] * n_threads, []

    def caller(i):
        with torch.no_grad():
            while not stop.is_set():
                for m in modules:
                    try:
                        m(x)
                        calls[i] += 1
                    except Exception as exc:  # noqa: BLE001
                        errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    try:
        for _ in range(n_toggles):
            aitune_fast.patch_aitune()
            aitune_fast.unpatch_aitune()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    return {"calls": sum(calls), "errors": len(errors), "first_errors": sorted(set(errors))[:3]}


def stock_pickles_under_patch(torch, aitune_fast) -> dict:
    """pickle.dumps (default protocol) and torch.save of AITune's metadata, exact metadata, a spec that learned
    a batch and a dynamic axis, a locator and a structure holding them (stock), loaded under the patch."""
    import io
    import pickle

    from aitune.torch.module.exact_sample_metadata import ExactSampleMetadata
    from aitune.torch.module.sample_metadata import SampleMetadata

    def inputs(n=2):
        return {"x": torch.ones(n, 3), "kw": {"a": [torch.zeros(2 * n), 3], "b": (torch.ones(n), None)}, "k": Mode.B}

    def build(md_cls, exact_cls):
        md = md_cls.from_inputs(inputs(), strict=True)
        learned = md_cls.from_inputs(inputs(), strict=True, batch_size=2)
        learned.update_shapes_seen(md_cls.from_inputs(inputs(4), strict=True, batch_size=4))
        loc, spec = learned.tensor_data[0]
        exact = exact_cls.from_inputs(inputs())
        return {
            "md": md,
            "exact": exact,
            "learned": learned,
            "locator": loc,
            "spec": spec,
            "nested": [{"key": md, "pairs": list(md.tensor_data)}, (exact, loc)],
        }

    def torch_saved(obj):
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    stock = build(SampleMetadata, ExactSampleMetadata)
    blobs = {name: pickle.dumps(obj) for name, obj in stock.items()}
    blobs["torch_save"] = torch_saved(stock)
    stock_dicts = {name: stock[name].to_dict() for name in ("md", "exact", "learned")}
    aitune_fast.patch_aitune()
    try:
        fresh = build(aitune_fast.SampleMetadata, aitune_fast.ExactSampleMetadata)
        # what a checkpoint saved under the patch holds for each key: byte for byte what stock writes
        out = {"to_dict": {}}
        for name, expected in stock_dicts.items():
            written = aitune_fast.patch.reference_dict(fresh[name])
            out["to_dict"][name] = [key for key in expected if written.get(key) != expected[key]] + sorted(
                written.keys() - expected.keys()
            )
        for name, blob in blobs.items():
            if name == "torch_save":
                got = checked(lambda b: torch.load(io.BytesIO(b), weights_only=False), blob)
            else:
                got = checked(pickle.loads, blob)
            if "ok" in got:
                got = {"ok": same_objects(got["ok"], fresh if name == "torch_save" else fresh[name])}
            out[name] = got
        return out
    finally:
        aitune_fast.unpatch_aitune()


def json_or_refusal(md) -> str:
    """`md.to_json()`, or the message of its TypeError (an Enum other value is refused alike)."""
    try:
        return md.to_json()
    except TypeError as exc:
        return f"refused: {exc}"


def same_objects(got, fresh):
    """Where `got` (nested) differs from `fresh` in class, ==, hash, describe() or to_json(); [] when nowhere."""
    if isinstance(fresh, (list, tuple)):
        if type(got) is not type(fresh) or len(got) != len(fresh):
            return [f"{got!r:.80} != {fresh!r:.80}"]
        return [d for g, f in zip(got, fresh, strict=True) for d in same_objects(g, f)]
    if isinstance(fresh, dict):
        if type(got) is not dict or got.keys() != fresh.keys():
            return [f"keys {list(got)!r:.80}"]
        return [d for k in fresh for d in same_objects(got[k], fresh[k])]
    kind = type(fresh)
    if type(got) is not kind:
        return [f"{type(got).__module__}.{type(got).__name__} is not {kind.__module__}.{kind.__name__}"]
    checks = {"eq": got == fresh and fresh == got, "hash": hash(got) == hash(fresh)}
    if hasattr(fresh, "describe"):
        checks["describe"] = got.describe() == fresh.describe()
    if hasattr(fresh, "to_json"):
        checks["to_json"] = json_or_refusal(got) == json_or_refusal(fresh)
    if hasattr(fresh, "display_path"):
        checks["display_path"] = got.display_path == fresh.display_path
    if hasattr(fresh, "min_shape"):
        checks["fields"] = [got.shape, got.min_shape, got.max_shape, got.dtype] == [
            fresh.shape,
            fresh.min_shape,
            fresh.max_shape,
            fresh.dtype,
        ]
    return [f"{kind.__name__} {name}: {got!r:.80}" for name, ok in checks.items() if not ok]


def edges_mode(workdir):
    """patch_aitune() before AITune is imported, then unpatch; names bound before the patch; strategies keys,
    odd other values in checkpoints, stock pickles and toggles under concurrent calls."""
    import aitune_fast

    aitune_fast.patch_aitune()
    try:
        import aitune.torch as ait
        import torch
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"import aitune.torch failed: {exc!r}"}
    import aitune.torch.kernel_forge.kernel_utils  # noqa: F401  (imported while patched too)

    results = {"captured_while_patched": captured_ours(aitune_fast, module_names=False)}
    aitune_fast.unpatch_aitune()
    results["captured_after_unpatch"] = captured_ours(aitune_fast)
    results["stock_exact"] = checked(stock_exact_works)
    results["bound_locator"] = checked(registry_through_bound_locator, aitune_fast)
    results["strategies"] = checked(strategies_across_toggle, ait, torch, aitune_fast, workdir)
    results["odd_values"] = checked(odd_values_checkpoints, ait, torch, aitune_fast, workdir)
    results["stock_pickles"] = checked(stock_pickles_under_patch, torch, aitune_fast)
    results["toggles"] = checked(toggles_under_calls, ait, torch, aitune_fast)
    return results


if __name__ == "__main__":
    MODES = {
        "main": main_mode,
        "stock": stock_mode,
        "autowrapt": autowrapt_mode,
        "early": early_mode,
        "onnx": onnx_mode,
        "onnx_stock": onnx_stock_mode,
        "weights_only": weights_only_mode,
        "edges": edges_mode,
    }
    report(lambda mode, workdir: MODES[mode](workdir), *sys.argv[1:3])
