"""Child program of ``test_tuned_call_transcript.py``: the behaviour transcript of tuned modules' calls.

Run as ``python call_transcript_child.py MODE WORKDIR``; prints one JSON document on its last stdout line: a dict of
sections, each JSON-able, to be compared between a stock AITune and a patched one. Modes:
  stock         AITune as shipped (aitune_fast made unimportable);
  patched       ``aitune_fast.patch_aitune()`` (its default: the whole call path where it has one);
  patched_meta  ``aitune_fast.patch_aitune(call_path=False)``, the metadata-only patch (where the option exists).
In the patched modes one module is tuned before the patch, the rest after it, and the last sections run again after
``unpatch_aitune()``; the stock mode takes the same steps without patching.
  nvtx_disabled  (run with ``NVTX_DISABLE`` set) the NVTX and metrics section, stock and then patched.
With ``NVTX_INJECTION64_PATH`` naming the recorder of ``tests/fixtures/nvtx_recorder`` and ``NVTX_RECORDER_LOG`` a
file, the NVTX ranges a profiler would see are part of the transcript. Needs tests/fixtures/tensorrt_stub on
PYTHONPATH.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import traceback
import warnings

from child_kit import block_aitune_fast, quick_strategy, report, seeded, tiny_llm
from child_kit import mlp as build_mlp

warnings.filterwarnings("ignore")

N_LAYERS = 4
NVTX_LOG = os.environ.get("NVTX_RECORDER_LOG")


class Recorder:
    """What the hooks, the forwards, the metrics collector and NVTX saw, taken section by section."""

    def __init__(self):
        self.events: list = []
        self.nvtx_offset = 0

    def add(self, *event) -> None:
        self.events.append(list(event))

    def take(self) -> list:
        events, self.events = self.events, []
        return events

    def nvtx(self) -> list:
        """The NVTX events recorded since the last call (push: domain, color, message; pop: domain)."""
        if not NVTX_LOG or not os.path.exists(NVTX_LOG):
            return []
        with open(NVTX_LOG) as f:
            f.seek(self.nvtx_offset)
            text = f.read()
            self.nvtx_offset = f.tell()
        return [line.split("\t") for line in text.splitlines()]


REC = Recorder()


def install_metrics_recorder():
    """AITune's own hardware-metrics collector, enabled, with a metric provider that reads nothing and a queue that
    keeps what it is given: the scopes and the context (module, backend) AITune tags each sample with."""
    import queue

    from aitune.utils.monitoring import setup_hardware_metrics as setup
    from aitune.utils.monitoring.hardware_metrics.collector import HardwareMetricsCollector

    class NoProvider:
        def get_metrics(self):
            return {}

    class Collector(HardwareMetricsCollector):
        def start_scope(self, name):
            REC.add("metrics.start_scope", name)
            super().start_scope(name)

        def end_scope(self):
            REC.add("metrics.end_scope")
            super().end_scope()

    collector = Collector([NoProvider()], queue.Queue(), interval=3600.0)
    session = setup._DEFAULT_SESSION
    session._runtime_enabled = True
    session._collector = collector  # an initialized session: no receiver process is started
    return collector


def metrics_samples(collector) -> list:
    out = []
    while not collector.queue.empty():
        sample = collector.queue.get_nowait()
        out.append([sample.get("scope"), sample.get("module_name"), sample.get("backend")])
    return out


def tensor(t):
    import torch

    if isinstance(t, torch.Tensor):
        return {"values": t.tolist(), "dtype": str(t.dtype), "shape": list(t.shape), "grad": t.requires_grad}
    if isinstance(t, (tuple, list)):
        return [tensor(v) for v in t]
    if isinstance(t, dict):
        return {k: tensor(v) for k, v in t.items()}
    return repr(t)


def outcome(fn, *args, **kwargs):
    """The result of a call, or the type and message of what it raised."""
    try:
        return {"ok": tensor(fn(*args, **kwargs))}
    except Exception as exc:  # noqa: BLE001
        return {"raised": [type(exc).__name__, str(exc)]}


def context_stack():
    from aitune.global_context import global_context

    return [dict(sorted((k, repr(v)) for k, v in frame.items())) for frame in global_context._data_stack]


def reset_probe(inner) -> None:
    """Undo what a section did to the probe module: its mode and every forward hook and pre-hook it registered."""
    inner.mode.clear()
    inner._forward_pre_hooks.clear()
    inner._forward_hooks.clear()


def module_state(tuned) -> dict:
    """The state of the wrapped module between calls, as a user (or a library such as HF accelerate) sees it."""
    inner = tuned.__wrapped__
    return {
        "forward_type": type(inner.__dict__.get("forward")).__name__,
        "forward_is_proxy": inner.__dict__.get("forward") is tuned._self_proxy_forward,
        "pre_hooks": len(inner._forward_pre_hooks),
        "hooks": len(inner._forward_hooks),
        "hooks_with_kwargs": len(inner._forward_hooks_with_kwargs),
        "hooks_always_called": len(inner._forward_hooks_always_called),
        "pre_hooks_with_kwargs": len(inner._forward_pre_hooks_with_kwargs),
        "state": tuned.state.value,
        "context": context_stack(),
    }


# ----------------------------------------------------------------------------------------------- the modules


def build_models(torch):
    class Probe(torch.nn.Module):
        """A module whose forward reports what it sees and, when told, raises, re-enters, registers hooks or waits."""

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)
            self.mode: dict = {}

        def forward(self, x):
            from aitune.global_context import global_context

            mode = self.mode
            REC.add(
                "forward",
                {
                    "thread": threading.current_thread().name,
                    "grad": torch.is_grad_enabled(),
                    "inference_mode": torch.is_inference_mode_enabled(),
                    "context": context_stack(),
                    "module": global_context.get("current_module"),
                    "backend": global_context.get("current_backend"),
                    "hooks_visible": [len(self._forward_pre_hooks), len(self._forward_hooks)],
                    "forward_is_bound_method": inspect.ismethod(self.__dict__.get("forward", self.forward)),
                },
            )
            if mode.get("raise"):
                raise ValueError("forward failed on purpose")
            if mode.get("register_hook"):
                mode["register_hook"] = False
                self.register_forward_hook(lambda m, a, o: REC.add("hook registered inside forward") or None)
            if mode.get("nested"):
                return self.lin(x) + mode["nested"](x).sum()
            if mode.get("reenter") and mode["reenter"] > 0:
                mode["reenter"] -= 1
                inner = mode["target"](x)
                return self.lin(x) + inner
            if mode.get("block") and threading.current_thread().name == mode["block"]["thread"]:
                mode["block"]["inside"].set()
                assert mode["block"]["go"].wait(60), "the test never released the blocked forward"
            return self.lin(x)

    class Signature(torch.nn.Module):
        """A forward whose signature has every kind of parameter; it reports how the backend passed its arguments."""

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)

        def _impl(self, x, /, mask=None, *rest, scale=None, **extra):
            h = self.lin(x)
            for t in (mask, *rest, scale, *extra.values()):
                if t is not None:
                    h = h + t.sum()
            return h

        def forward(self, *args, **kwargs):
            REC.add("signature forward", [list(a.shape) for a in args], sorted(kwargs))
            return self._impl(*args, **kwargs)

        forward.__signature__ = inspect.signature(_impl)

    llm = seeded(torch, 2, tiny_llm(torch))
    return {
        "mlp": functools.partial(build_mlp, torch),
        "probe": seeded(torch, 1, Probe),
        "llm_dict": llm,
        "llm_tuple": llm,
        "signature": seeded(torch, 5, Signature),
    }


def signature_calls(torch, batch=1):
    """The call shapes the Signature module is tuned with and called with: name -> (args, kwargs)."""
    g = torch.Generator().manual_seed(9)
    x, mask, r1, r2, scale, flag = (torch.randn(batch, 16, generator=g) for _ in range(6))
    return {
        "x": ((x,), {}),
        "x_mask": ((x, mask), {}),
        "x_scale": ((x,), {"scale": scale}),
        "x_mask_kw": ((x,), {"mask": mask}),
        "all_kinds": ((x, mask, r1, r2), {"scale": scale, "flag": flag}),
        "kw_order": ((x,), {"flag": flag, "scale": scale, "mask": mask}),
    }


def llm_sample(torch, kind, batch=1):
    g = torch.Generator().manual_seed(3)
    cache = {
        f"layer{i}": {"key": torch.randn(batch, 2, 4, generator=g), "value": torch.randn(batch, 2, 4, generator=g)}
        for i in range(N_LAYERS)
    }
    if kind == "llm_tuple":
        cache = tuple((layer["key"], layer["value"]) for layer in cache.values())
    sample = {"input_ids": torch.randint(0, 32, (batch,), generator=g), "attention_mask": torch.ones(batch)}
    sample["past_key_values"] = cache
    if kind == "llm_dict":
        sample["cache_position"] = torch.tensor([16] * batch)
    return sample


def tune(ait, torch, name, build, tag):
    from aitune.torch.module_registry import MODULE_REGISTRY

    MODULE_REGISTRY.clear()
    module = ait.Module(build(), f"{name}-{tag}", strategy=quick_strategy(ait))
    if name in ("mlp", "probe"):
        ait.tune(module, torch.randn(16), batch_sizes=[1, 2], device="cpu")
    elif name == "signature":

        def every_shape(x, m=module):
            return [m(*args, **kwargs) for args, kwargs in signature_calls(torch, x.shape[0]).values()]

        ait.tune(every_shape, torch.randn(16), batch_sizes=[1, 2], device="cpu")
    else:
        # one sample that is already a batch of one: AITune's default collator would flatten the nested cache
        data = ait.DataLoaderFactory([llm_sample(torch, name)], collate_fn=lambda batch: batch[0])
        ait.tune(lambda m=module, **kw: m(**kw), data, batch_sizes=[1], device="cpu")
    REC.take()
    REC.nvtx()
    return module


# ---------------------------------------------------------------------------------------------- the sections


def mlp_input(torch, batch=2, seed=5):
    return torch.randn(batch, 16, generator=torch.Generator().manual_seed(seed))


def section_outputs(torch, modules) -> dict:
    out = {}
    with torch.no_grad():
        out["mlp"] = [outcome(modules["mlp"], mlp_input(torch, b)) for b in (1, 2)]
        out["probe"] = outcome(modules["probe"], mlp_input(torch))
        for kind in ("llm_dict", "llm_tuple"):
            out[kind] = outcome(lambda s, m=modules[kind]: m(**s), llm_sample(torch, kind))
            sample = llm_sample(torch, kind)
            ids, mask = sample.pop("input_ids"), sample.pop("attention_mask")
            out[kind + "_positional"] = outcome(modules[kind], ids, mask, **sample)
    out["events"] = REC.take()
    return out


def section_signature(torch, tuned) -> dict:
    """Calls of each shape the binder must handle (positional-only, a default skipped, *args, keyword-only,
    **kwargs, keywords out of order): what forward received, what a kwargs hook saw, and the errors of shapes that
    do not bind."""
    inner = tuned.__wrapped__
    inner.register_forward_pre_hook(
        lambda m, a, k: REC.add("pre_kw", [list(t.shape) for t in a], sorted(k)) or None, with_kwargs=True
    )
    out = {}
    with torch.no_grad():
        for batch in (1, 2):
            for name, (args, kwargs) in signature_calls(torch, batch).items():
                out[f"{name}-{batch}"] = {"out": outcome(tuned, *args, **kwargs), "events": REC.take()}
        x = signature_calls(torch)["x"][0][0]
        out["positional_only_by_keyword"] = outcome(lambda: tuned(x=x))
        out["mask_twice"] = outcome(lambda: tuned(x, x, mask=x))
        out["nothing"] = outcome(tuned)
        out["untuned_shape"] = outcome(lambda: tuned(x, x, x))
        out["error_events"] = REC.take()
    inner._forward_pre_hooks.clear()
    return out


def section_instrumented(torch, tuned) -> dict:
    """Backends instrumented the way users and profilers do it: an instance's own ``infer`` and ``describe``, a
    class-level ``_infer`` wrapper, a backend object whose class has no ``infer`` (a mock)."""
    import types

    from aitune.torch.backend import TorchEagerBackend

    backends = tuned.module.backends
    key, backend = next(iter(backends.items()))
    out = {}
    x = mlp_input(torch)
    stock_infer = backend.infer

    def instance_infer(*args, **kwargs):
        REC.add("instance infer", len(args), sorted(kwargs))
        return stock_infer(*args, **kwargs)

    class_infer = TorchEagerBackend._infer

    def wrapped_class_infer(self, *args, **kwargs):
        REC.add("class _infer", torch.is_grad_enabled())
        return class_infer(self, *args, **kwargs)

    with torch.no_grad():
        backend.infer = instance_infer
        out["instance_infer"] = [outcome(tuned, x), REC.take(), REC.nvtx()]
        del backend.infer
        backend.describe = lambda: "described by the instance"
        out["instance_describe"] = [outcome(tuned, x), REC.take(), REC.nvtx()]
        del backend.describe
        TorchEagerBackend._infer = wrapped_class_infer
        try:
            out["class_infer"] = [outcome(tuned, x), REC.take(), REC.nvtx()]
        finally:
            TorchEagerBackend._infer = class_infer
        backends[key] = types.SimpleNamespace(infer=lambda *a, **k: REC.add("namespace infer", len(a)) or a[0] * 0)
        try:
            out["namespace_backend"] = [outcome(tuned, x), REC.take(), REC.nvtx()]
        finally:
            backends[key] = backend
        out["restored"] = [outcome(tuned, x), REC.take(), REC.nvtx()]
    return out


def section_hooks(torch, tuned) -> dict:
    """Pre-hooks and hooks, with and without kwargs, prepended, always_call, changing args and outputs, in order."""
    inner = tuned.__wrapped__
    handles = []

    def pre(m, args):
        REC.add("pre", [list(a.shape) for a in args])
        return (args[0] * 2,)

    def pre_kw(m, args, kwargs):
        REC.add("pre_kw", len(args), sorted(kwargs))
        return args, kwargs

    def pre_first(m, args):
        REC.add("pre_first")

    def hook(m, args, output):
        REC.add("hook", [list(a.shape) for a in args], list(output.shape))
        return output + 1

    def hook_kw(m, args, kwargs, output):
        REC.add("hook_kw", sorted(kwargs), output.sum().item())

    def hook_always(m, args, output):
        REC.add("hook_always")

    handles.append(inner.register_forward_pre_hook(pre))
    handles.append(inner.register_forward_pre_hook(pre_kw, with_kwargs=True))
    handles.append(inner.register_forward_pre_hook(pre_first, prepend=True))
    handles.append(inner.register_forward_hook(hook))
    handles.append(inner.register_forward_hook(hook_kw, with_kwargs=True))
    handles.append(inner.register_forward_hook(hook_always, always_call=True, prepend=True))
    out = {}
    with torch.no_grad():
        out["call"] = outcome(tuned, mlp_input(torch))
        out["events"] = REC.take()
        out["state_after"] = module_state(tuned)
        out["call_again"] = outcome(tuned, mlp_input(torch))
        out["events_again"] = REC.take()
        # stock replaces the hook dicts by copies on each call: handles taken before a call remove from the old ones
        for handle in handles:
            handle.remove()
        out["after_remove"] = outcome(tuned, mlp_input(torch))
        out["events_after_remove"] = REC.take()
        out["state_after_remove"] = module_state(tuned)
        inner._forward_pre_hooks.clear()
        inner._forward_hooks.clear()
        out["after_clear"] = outcome(tuned, mlp_input(torch))
        out["events_after_clear"] = REC.take()
    return out


def section_hook_identity(torch, tuned) -> dict:
    """Whether the hook dicts and forward are the same objects across a call; a handle made before a call."""
    inner = tuned.__wrapped__
    before = (inner._forward_pre_hooks, inner._forward_hooks, inner.__dict__.get("forward"))
    handle = inner.register_forward_hook(lambda m, a, o: REC.add("handle hook") or None)
    with torch.no_grad():
        tuned(mlp_input(torch))
        after = (inner._forward_pre_hooks, inner._forward_hooks, inner.__dict__.get("forward"))
        handle.remove()
        tuned(mlp_input(torch))
    result = {
        "pre_hooks_same_dict": before[0] is after[0],
        "hooks_same_dict": before[1] is after[1],
        "forward_same": before[2] is after[2],
        "events": REC.take(),
    }
    inner._forward_hooks.clear()
    return result


def section_registered_during_call(torch, tuned) -> dict:
    """A hook registered by a pre-hook (during the call, before forward) and one registered inside forward."""
    inner = tuned.__wrapped__
    out = {}

    def registering_pre(m, args):
        m.register_forward_hook(lambda m, a, o: REC.add("hook registered by pre-hook") or None)
        REC.add("registering pre-hook")

    handle = inner.register_forward_pre_hook(registering_pre)
    with torch.no_grad():
        tuned(mlp_input(torch))
        out["first_call"] = REC.take()
        handle.remove()
        inner._forward_pre_hooks.clear()
        tuned(mlp_input(torch))
        out["second_call"] = REC.take()
        inner._forward_hooks.clear()
        inner.mode["register_hook"] = True
        tuned(mlp_input(torch))
        out["inside_forward_call"] = [e for e in REC.take() if e[0] != "forward"]
        tuned(mlp_input(torch))
        out["after_inside_forward"] = [e for e in REC.take() if e[0] != "forward"]
        out["state"] = module_state(tuned)
    inner._forward_hooks.clear()
    inner.mode.clear()
    return out


def section_exception(torch, tuned) -> dict:
    """An exception raised in forward: what the caller gets, and the state left behind."""
    inner = tuned.__wrapped__
    inner.register_forward_pre_hook(lambda m, a: REC.add("pre") or None)
    inner.register_forward_hook(lambda m, a, o: REC.add("hook") or None)
    inner.register_forward_hook(lambda m, a, o: REC.add("hook_always") or None, always_call=True)
    out = {}
    inner.mode["raise"] = True
    with torch.enable_grad():
        out["call"] = outcome(tuned, mlp_input(torch))
        out["grad_after"] = torch.is_grad_enabled()
    out["events"] = [e if e[0] != "forward" else e[:1] for e in REC.take()]
    out["state"] = module_state(tuned)
    inner.mode.clear()
    with torch.no_grad():
        out["next_call"] = outcome(tuned, mlp_input(torch))
    out["events_next"] = [e if e[0] != "forward" else e[:1] for e in REC.take()]
    inner._forward_pre_hooks.clear()
    inner._forward_hooks.clear()
    inner._forward_hooks_always_called.clear()
    return out


def section_reentrant(torch, tuned, mlp) -> dict:
    """The tuned module called again from inside its own forward (once, then twice deep), and another tuned module
    called from inside it."""
    inner = tuned.__wrapped__
    inner.register_forward_pre_hook(lambda m, a: REC.add("pre") or None)
    inner.register_forward_hook(lambda m, a, o: REC.add("hook") or None)
    out = {}
    for depth in (1, 2):
        inner.mode.update(reenter=depth, target=tuned)
        with torch.no_grad():
            out[f"depth{depth}"] = outcome(tuned, mlp_input(torch))
        out[f"events{depth}"] = REC.take()
        out[f"state{depth}"] = module_state(tuned)
    # another tuned module called from inside this one's forward: AITune's path nested in AITune's path
    inner.mode["nested"] = mlp
    with torch.no_grad():
        out["nested"] = outcome(tuned, mlp_input(torch))
    out["events_nested"] = REC.take()
    out["state_nested"] = module_state(tuned)
    reset_probe(inner)
    return out


def section_context(torch, tuned) -> dict:
    """AITune's global_context: what forward sees (with a user's entry pushed around the call) and what is left."""
    from aitune.global_context import global_context

    out = {"before": context_stack()}
    with global_context:
        global_context.set("user_key", "user value")
        global_context.set("current_module", "user's module")
        with torch.no_grad():
            tuned(mlp_input(torch))
        out["inside_user_frame_after"] = context_stack()
    out["events"] = REC.take()
    out["after"] = context_stack()
    return out


def section_grad(torch, tuned) -> dict:
    """Grad mode seen inside forward and after the call: default, no_grad, enable_grad, inference_mode."""
    out = {}
    x = mlp_input(torch)
    out["default"] = [outcome(tuned, x), torch.is_grad_enabled()]
    with torch.no_grad():
        out["no_grad"] = [outcome(tuned, x), torch.is_grad_enabled()]
    with torch.enable_grad():
        out["enable_grad"] = [outcome(tuned, x), torch.is_grad_enabled()]
    with torch.inference_mode():
        out["inference_mode"] = [outcome(tuned, x), torch.is_grad_enabled()]
    out["events"] = [[e[1]["grad"], e[1]["inference_mode"]] for e in REC.take() if e[0] == "forward"]
    return out


def section_errors(torch, ait, modules) -> dict:
    """Missing, extra and misplaced arguments, no backend for the inputs, a deactivated backend, untuned modules."""
    out = {}
    mlp, llm = modules["mlp"], modules["llm_dict"]
    x = mlp_input(torch)
    sample = llm_sample(torch, "llm_dict")
    with torch.no_grad():
        out["missing"] = outcome(mlp)
        out["extra_positional"] = outcome(mlp, x, x)
        out["extra_keyword"] = outcome(mlp, x, bogus=1)
        out["misplaced"] = outcome(mlp, x, input=x)
        out["llm_missing"] = outcome(lambda: llm(input_ids=sample["input_ids"]))
        out["llm_extra"] = outcome(lambda: llm(**sample, bogus=torch.ones(1)))
        out["llm_twice"] = outcome(lambda: llm(sample["input_ids"], **sample))
        out["no_backend_shape"] = outcome(mlp, torch.randn(2, 8))
        out["no_backend_dtype"] = outcome(mlp, x.double())
        out["no_backend_rank"] = outcome(mlp, torch.randn(2, 3, 16))
        short = dict(sample, past_key_values={"layer0": sample["past_key_values"]["layer0"]})
        out["llm_no_backend"] = outcome(lambda: llm(**short))
        out["llm_none_cache_position"] = outcome(lambda: llm(**dict(sample, cache_position=None)))
        out["context_after_errors"] = context_stack()

        mlp.deactivate()
        out["deactivated"] = outcome(mlp, x)
        out["deactivated_context"] = context_stack()
        mlp.activate()
        out["reactivated"] = outcome(mlp, x)

        build = build_models(torch)["mlp"]
        untuned = ait.Module(build(), "untuned-mlp")
        out["untuned_call"] = outcome(untuned, x)
        out["untuned_state"] = untuned.state.value
        out["untuned_samples"] = len(untuned.graph_specs)
        passthrough = ait.Module(build(), "passthrough-mlp")
        passthrough.enable_passthrough()
        out["passthrough_call"] = outcome(passthrough, x)
        out["passthrough_state"] = passthrough.state.value
    out["events"] = REC.take()
    from aitune.torch.module_registry import MODULE_REGISTRY

    MODULE_REGISTRY.clear()
    return out


def section_global_hooks(torch, tuned) -> dict:
    """torch's global module hooks: which module calls they see (the outer call, the backend's call, children)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    inner = tuned.__wrapped__

    def who(m):
        return "wrapped" if m is inner else type(m).__name__

    h1 = register_module_forward_pre_hook(lambda m, a: REC.add("global_pre", who(m)) or None)
    h2 = register_module_forward_hook(lambda m, a, o: REC.add("global_hook", who(m)) or None)
    try:
        with torch.no_grad():
            out = {"call": outcome(tuned, mlp_input(torch))}
    finally:
        h1.remove()
        h2.remove()
    out["events"] = REC.take()
    return out


def section_nvtx_and_metrics(torch, modules, collector) -> dict:
    """The NVTX ranges a profiler sees and the hardware-metrics scopes AITune records, for calls of each module."""
    out = {}
    REC.nvtx()
    metrics_samples(collector)
    with torch.no_grad():
        for name in ("mlp", "llm_dict"):
            m = modules[name]
            if name == "mlp":
                m(mlp_input(torch))
            else:
                m(**llm_sample(torch, name))
            out[name] = {"nvtx": REC.nvtx(), "metrics": REC.take(), "samples": metrics_samples(collector)}
        outcome(modules["mlp"], torch.randn(2, 3, 16))  # no backend for these inputs
        out["failed"] = {"nvtx": REC.nvtx(), "metrics": REC.take(), "samples": metrics_samples(collector)}
        probe = modules["probe"]
        for case, mode in (("reentrant", {"reenter": 1, "target": probe}), ("nested", {"nested": modules["mlp"]})):
            probe.__wrapped__.mode.update(mode)
            probe(mlp_input(torch))
            probe.__wrapped__.mode.clear()
            out[case] = {
                "nvtx": REC.nvtx(),
                "metrics": [e for e in REC.take() if e[0] != "forward"],
                "samples": metrics_samples(collector),
            }
    out["scopes_open"] = list(collector.scopes)
    return out


def section_thread(torch, tuned) -> dict:
    """What another thread sees while one thread is inside the backend (made deterministic with events)."""
    inner = tuned.__wrapped__
    inner.register_forward_pre_hook(lambda m, a: REC.add("pre", threading.current_thread().name) or None)
    inner.register_forward_hook(lambda m, a, o: REC.add("hook", threading.current_thread().name) or None)
    inside, go = threading.Event(), threading.Event()
    inner.mode["block"] = {"thread": "first", "inside": inside, "go": go}
    results: dict = {}

    def first():
        with torch.no_grad():
            results["first"] = outcome(tuned, mlp_input(torch))

    thread = threading.Thread(target=first, name="first")
    thread.start()
    out = {}
    try:
        assert inside.wait(60), "the first thread never reached forward"
        out["seen_by_second"] = module_state(tuned)

        def second():
            with torch.no_grad():
                results["second"] = outcome(tuned, mlp_input(torch, seed=7))

        other = threading.Thread(target=second, name="second")
        other.start()
        other.join(60)
        out["second_call"] = results.get("second")
        out["second_events"] = REC.take()
    finally:
        go.set()
        thread.join(60)
    out["first_call"] = results.get("first")
    out["first_events"] = REC.take()
    out["state_after"] = module_state(tuned)
    reset_probe(inner)
    return out


def jit_module(ait, torch):
    """A module tuned just in time (``patch_for_jit_tuning``, TorchEager): it tunes itself on its first calls."""

    class JitMLP(torch.nn.Module):  # not a container: AITune's JIT patcher skips those
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(16, 8)
            self.b = torch.nn.Linear(8, 4)

        def forward(self, x):
            REC.add("jit forward", torch.is_grad_enabled())
            return self.b(torch.relu(self.a(x)))

    ait.jit_config.strategy = quick_strategy(ait)
    ait.jit_config.min_samples = 2
    ait.jit_config.device = "cpu"

    @ait.patch_for_jit_tuning
    def build():
        torch.manual_seed(4)
        return JitMLP().eval()

    return build()


def section_jit(torch, model) -> dict:
    """Calls of a JIT-tuned module, before and after it tuned itself: outputs, hooks, NVTX, context."""
    model.register_forward_pre_hook(lambda m, a: REC.add("jit pre", list(a[0].shape)) or None)
    model.register_forward_hook(lambda m, a, o: REC.add("jit hook", list(o.shape)) or None)
    out = {"calls": []}
    REC.nvtx()
    with torch.no_grad():
        for batch in (1, 2, 3, 2):
            result = outcome(model, mlp_input(torch, batch, seed=batch))
            out["calls"].append({"out": result, "events": REC.take(), "nvtx": REC.nvtx()})
    out["context"] = context_stack()
    out["hooks"] = [len(model._forward_pre_hooks), len(model._forward_hooks)]
    from aitune.torch.jit.patcher import Patcher

    mine = [pm for pm in Patcher._patched_modules if getattr(pm, "__wrapped__", None) is model]
    out["patched"] = [type(pm).__name__ for pm in mine]
    out["state"] = [pm._state.value for pm in mine]
    return out


def section_loaded(torch, ait, workdir, modules) -> dict:
    """Checkpoints saved and loaded: outputs, hooks and the context seen by the loaded modules."""
    builds = build_models(torch)
    out = {}
    for name in ("mlp", "llm_dict"):
        path = os.path.join(workdir, f"{name}.pt")
        ait.save(modules[name], path)
        loaded = ait.load(builds[name](), path)
        REC.take()
        REC.nvtx()
        loaded.__wrapped__.register_forward_hook(lambda m, a, o: REC.add("loaded hook", list(o.shape)) or None)
        with torch.no_grad():
            if name == "mlp":
                out[name] = outcome(loaded, mlp_input(torch))
            else:
                out[name] = outcome(lambda s, m=loaded: m(**s), llm_sample(torch, name))
        out[name + "_events"] = REC.take()
        out[name + "_nvtx"] = REC.nvtx()
        out[name + "_state"] = module_state(loaded)
    return out


def sections(torch, ait, modules, workdir, collector) -> dict:
    """Every section, each recorded on its own: one that fails records its traceback instead."""
    steps = {
        "outputs": lambda: section_outputs(torch, modules),
        "hooks": lambda: section_hooks(torch, modules["mlp"]),
        "signature": lambda: section_signature(torch, modules["signature"]),
        "instrumented": lambda: section_instrumented(torch, modules["mlp"]),
        "hook_identity": lambda: section_hook_identity(torch, modules["probe"]),
        "registered_during_call": lambda: section_registered_during_call(torch, modules["probe"]),
        "exception": lambda: section_exception(torch, modules["probe"]),
        "reentrant": lambda: section_reentrant(torch, modules["probe"], modules["mlp"]),
        "context": lambda: section_context(torch, modules["probe"]),
        "grad": lambda: section_grad(torch, modules["probe"]),
        "errors": lambda: section_errors(torch, ait, modules),
        "global_hooks": lambda: section_global_hooks(torch, modules["mlp"]),
        "nvtx_and_metrics": lambda: section_nvtx_and_metrics(torch, modules, collector),
        "thread": lambda: section_thread(torch, modules["probe"]),
        "loaded": lambda: section_loaded(torch, ait, workdir, modules),
        "jit": lambda: section_jit(torch, jit_module(ait, torch)),
    }
    out = {}
    for name, step in steps.items():
        REC.take()
        REC.nvtx()
        try:
            out[name] = step()
        except Exception:  # noqa: BLE001
            out[name] = {"section_failed": traceback.format_exc()}
    return out


def call_path_in_place() -> dict:
    """Where the functions of a tuned module's call come from (stock AITune's modules, or a patch's)."""
    from aitune.torch.backend.backend import Backend
    from aitune.torch.module.tuned_module import TunedModule
    from aitune.torch.module.wrapper_module import Module

    functions = {"Module._forward": Module._forward, "TunedModule.__call__": TunedModule.__call__}
    functions["Backend.infer"] = Backend.infer
    return {name: getattr(f, "__module__", None) for name, f in functions.items()}


def nvtx_disabled(workdir: str) -> dict:
    """Run with NVTX_DISABLE set: the NVTX and metrics section stock, then on the same modules patched."""
    import aitune.torch as ait
    import aitune_fast
    import torch

    torch.set_num_threads(1)
    collector = install_metrics_recorder()
    builds = build_models(torch)
    modules = {name: tune(ait, torch, name, builds[name], "nvtx") for name in ("mlp", "probe", "llm_dict")}
    result = {"stock": section_nvtx_and_metrics(torch, modules, collector)}
    aitune_fast.patch_aitune()
    result["patched"] = section_nvtx_and_metrics(torch, modules, collector)
    aitune_fast.unpatch_aitune()
    return result


def main(mode: str, workdir: str) -> dict:
    if mode == "nvtx_disabled":
        return nvtx_disabled(workdir)
    if mode == "stock":
        block_aitune_fast()
    import aitune.torch as ait
    import torch

    torch.set_num_threads(1)
    collector = install_metrics_recorder()
    builds = build_models(torch)
    result: dict = {"mode": mode}
    # tuned before any patch: the patch must take over modules that already exist
    modules = {"mlp": tune(ait, torch, "mlp", builds["mlp"], "early")}
    if mode != "stock":
        import aitune_fast

        accepts = "call_path" in inspect.signature(aitune_fast.patch_aitune).parameters
        if mode == "patched_meta":
            if not accepts:
                return {"skip": "patch_aitune() has no call_path option: it patches the metadata only"}
            aitune_fast.patch_aitune(call_path=False)
        else:
            aitune_fast.patch_aitune()
        result["patched"] = aitune_fast.is_aitune_patched()
    for name in ("probe", "llm_dict", "llm_tuple", "signature"):
        modules[name] = tune(ait, torch, name, builds[name], "late")
    result["call_path"] = call_path_in_place()
    result["sections"] = sections(torch, ait, modules, workdir, collector)
    if mode != "stock":
        aitune_fast.unpatch_aitune()
    # after unpatch_aitune(): the live modules behave as stock again
    result["after_unpatch"] = {
        "outputs": section_outputs(torch, modules),
        "hooks": section_hooks(torch, modules["mlp"]),
        "context": section_context(torch, modules["probe"]),
        "nvtx_and_metrics": section_nvtx_and_metrics(torch, modules, collector),
    }
    return result


if __name__ == "__main__":
    report(main, *sys.argv[1:3])
