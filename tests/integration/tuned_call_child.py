"""Child program of ``test_tuned_call.py``: the per-call behaviour of tuned modules, as a transcript.

Run as ``python tuned_call_child.py MODE WORKDIR``; prints one JSON document on its last stdout line. MODE:
  stock   stock AITune;
  late    modules tuned (and one loaded from a checkpoint) stock, then ``patch_aitune()``: live modules;
  early   ``patch_aitune()`` before ``import aitune.torch``: modules built under the patch;
  meta    ``patch_aitune(call_path=False)``: the metadata-only patch;
  wrapped functools.wraps wrappers put on AITune's per-call methods before ``patch_aitune()``: how often each runs
          over 3 calls, unpatched and patched;
  inlined counting wrappers on the stock code the call path does in place (AITune's context, the hook-swap
          helpers, torch's module call and no_grad), put there before and after ``patch_aitune()``.
The transcript records what a user can observe (outputs, hooks, errors, AITune's context seen inside forward and by
the nvtx and hardware-metrics layers, grad mode); ``late`` and ``early`` also record what the patch put in place,
toggles under concurrent calls, and what ``unpatch_aitune()`` restored. Needs tests/fixtures/tensorrt_stub on
PYTHONPATH (AITune imports ``tensorrt``; the stand-in is not TensorRT).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

from child_kit import quick_strategy, report

warnings.filterwarnings("ignore")

LOG: list = []  # what the nvtx and hardware-metrics layers saw, in order


def fake_nvtx() -> None:
    """Give nvtx a domain that records each range pushed and popped (no profiler is attached here)."""
    import nvtx.nvtx as n

    class Attributes:
        def __init__(self, message, color):
            self.message, self.color = message, color

    class Domain:
        handle = None

        def get_event_attributes(self, message, color, category=None, payload=None):
            return Attributes(message, color)

    domain = Domain()
    n._get_domain_cached = lambda name=None: domain
    n.libnvtx_push_range = lambda attributes, handle: LOG.append(["push", attributes.message, attributes.color])
    n.libnvtx_pop_range = lambda handle: LOG.append(["pop"])


def fake_metrics() -> None:
    import aitune.utils.monitoring.hardware_metrics_annotation as hm
    from aitune.global_context import BACKEND_CONTEXT_KEY, MODULE_CONTEXT_KEY, global_context

    class Collector:
        def start_scope(self, name):
            LOG.append(["scope", name, global_context.get(MODULE_CONTEXT_KEY), global_context.get(BACKEND_CONTEXT_KEY)])

        def end_scope(self):
            LOG.append(["end_scope"])

    collector = Collector()
    hm.get_default_collector = lambda: collector


def models(torch):
    from aitune.global_context import global_context

    class Probe(torch.nn.Module):
        """Records what its forward sees; can raise, re-enter its tuned module, register a hook."""

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.seen: list = []
            self.action = None
            self.tuned = None

        def forward(self, x, scale=None, *, shift=None):
            stack = [sorted((k, str(v)) for k, v in d.items()) for d in global_context._data_stack]
            self.seen.append({"grad": torch.is_grad_enabled(), "stack": stack, "hooks": len(self._forward_hooks)})
            action, self.action = self.action, None
            if action == "raise":
                raise ValueError("forward failed")
            if action == "reenter":
                inner = self.tuned(x)
                return self.lin(x) + inner
            if action == "hook":
                self.register_forward_hook(lambda m, a, out: out * 100)
            y = self.lin(x)
            return y if scale is None else y * scale

    return Probe


def record(fn):
    try:
        out = fn()
        return {"ok": out.tolist() if hasattr(out, "tolist") else repr(out)}
    except Exception as exc:  # noqa: BLE001 - the transcript records any error
        return {"error": type(exc).__name__, "message": str(exc)}


def transcript(ait, torch, m, probe, x):
    """The observable per-call behaviour of tuned module `m` whose wrapped module is `probe`."""
    from aitune.global_context import global_context

    t: dict = {}
    probe.tuned = m
    LOG.clear()
    t["plain"] = record(lambda: m(x))
    t["scaled_kw"] = record(lambda: m(x, scale=torch.tensor(2.0)))
    t["log"] = list(LOG)
    t["seen"] = probe.seen[-2:]
    t["after_stack"] = len(global_context._data_stack)
    order: list = []
    handles = [
        probe.register_forward_pre_hook(lambda mod, args: order.append("pre")),
        probe.register_forward_pre_hook(lambda mod, args, kwargs: order.append("pre_kw") or None, with_kwargs=True),
        probe.register_forward_hook(lambda mod, args, out: order.append("post") or out + 1),
        probe.register_forward_hook(lambda mod, args, kwargs, out: order.append("post_kw") or None, with_kwargs=True),
    ]
    t["hooked"] = record(lambda: m(x))
    t["hook_order"] = list(order)
    for handle in handles:
        handle.remove()  # after a call: stock replaced the hook dicts by copies, so this removes nothing
    order.clear()
    t["after_remove"] = record(lambda: m(x))
    t["hook_order_after_remove"] = list(order)
    t["hook_dicts"] = [len(probe._forward_pre_hooks), len(probe._forward_hooks)]
    probe._forward_pre_hooks.clear()  # what is left of them (stock's copies) would break every later call
    probe._forward_hooks.clear()
    t["global_hooks"] = global_hooks(m, x)
    probe.action = "hook"
    t["hook_during_call"] = record(lambda: m(x))
    t["after_hook_during_call"] = record(lambda: m(x))
    probe.action = "raise"
    t["raises"] = record(lambda: m(x))
    t["after_raise_state"] = [type(probe.__dict__.get("forward")).__name__, len(global_context._data_stack)]
    t["after_raise"] = record(lambda: m(x))
    probe.action = "reenter"
    LOG.clear()
    t["reenter"] = record(lambda: m(x))
    t["reenter_log"] = list(LOG)
    t["reenter_seen"] = probe.seen[-2:]
    for name, call in {
        "missing": lambda: m(),
        "extra": lambda: m(x, 2.0, 3.0),
        "unexpected": lambda: m(x, bogus=1),
        "twice": lambda: m(x, x=x),
        "misplaced_kwonly": lambda: m(x, None, torch.tensor(1.0)),
        "no_backend": lambda: m(x.double()),
        "no_backend_rank": lambda: m(x[None]),
    }.items():
        t[name] = record(call)
    with torch.enable_grad():
        backend = next(iter(m.module.backends.values()))
    backend._config.autocast_dtype = torch.bfloat16  # describe() changes; the backend's _infer does not
    LOG.clear()
    t["config_changed"] = [record(lambda: m(x)), list(LOG)]
    backend._config.autocast_dtype = None
    t["config_values"] = config_values(m, x, backend)
    t["describe_replaced"] = describe_replaced(m, x, backend)
    t["describe_overrides"] = describe_overrides(torch, m, x, backend)
    t["small_stacks"] = small_stacks(m, x)
    t["grad_on"] = [record(lambda: m(x).detach()), probe.seen[-1]["grad"], torch.is_grad_enabled()]
    with torch.no_grad():
        t["grad_off"] = [record(lambda: m(x)), probe.seen[-1]["grad"], torch.is_grad_enabled()]
    return t


def global_hooks(m, x):
    """torch's global module hooks fire around each ``nn.Module.__call__`` of the wrapped module: the tuned call's
    own and the backend's (the call path calls ``forward`` directly only where no hook could see the difference)."""
    from torch.nn.modules import module as module_module

    seen: list = []
    handles = [
        module_module.register_module_forward_pre_hook(lambda mod, args: seen.append(("pre", type(mod).__name__))),
        module_module.register_module_forward_hook(lambda mod, args, out: seen.append(("post", type(mod).__name__))),
    ]
    try:
        out = record(lambda: m(x))
    finally:
        for handle in handles:
            handle.remove()
    return [out, seen]


def config_values(m, x, backend):
    """describe() for config values that are equal but print apart (True, 1, 1.0; 0.0, -0.0): each call's nvtx
    range names the value it was given."""
    import dataclasses

    stock_config = backend._config
    base = type(stock_config)
    scaled = dataclasses.make_dataclass(
        "ScaledConfig", [("scale", float, dataclasses.field(default=1.0))], bases=(base,)
    )
    logs = []
    for config in [
        *(base(autocast_enabled=value) for value in (True, 1, 1.0, True)),
        *(scaled(scale=value) for value in (0.0, -0.0, 0.0, False)),
    ]:
        backend._config = config
        LOG.clear()
        record(lambda: m(x))
        logs.append(LOG[0][1] if LOG else None)
    backend._config = stock_config
    return logs


def describe_replaced(m, x, backend):
    """After calls, the backend's or its config's ``describe`` replaced on the class (as ``mock.patch.object`` does)
    and put back: each call's nvtx range names what the describe in place says."""
    backend_cls, config_cls = type(backend), type(backend._config)
    owner = next(c for c in config_cls.__mro__ if "describe" in vars(c))
    logs = []
    for cls, name, replacement in [
        (backend_cls, "describe", lambda self: "ReplacedBackend()"),
        (owner, "describe", lambda self: "replaced config"),
        (owner, "_get_changed_fields", lambda self, *args, **kwargs: ["replaced=1"]),
    ]:
        stock = vars(cls)[name]
        for replaced in (True, False):
            setattr(cls, name, replacement if replaced else stock)
            LOG.clear()
            record(lambda: m(x))
            logs.append(LOG[0][1] if LOG else None)
    return logs


def describe_overrides(torch, m, x, backend):
    """describe() where it is not a function of the config's class and values (round six, items 5 and 6): a config
    object with its own ``describe`` (or ``_get_changed_fields``) beside one with equal values and none, and a field
    whose default comes from ``default_factory=torch.get_default_dtype`` as the default dtype changes. Each call's
    nvtx range names the backend's description."""
    import dataclasses

    stock_config = backend._config
    base = type(stock_config)
    typed = dataclasses.make_dataclass(
        "TypedConfig",
        [("dtype", torch.dtype, dataclasses.field(default_factory=torch.get_default_dtype))],
        bases=(base,),
    )
    labelled = base()
    labelled.describe = lambda: "labelled"
    changed = base()
    changed._get_changed_fields = lambda *args, **kwargs: ["own=1"]
    logs = []
    configs = [base(), labelled, base(), changed, base(), typed(dtype=torch.float32)]
    for config in configs:
        backend._config = config
        LOG.clear()
        record(lambda: m(x))
        logs.append(LOG[0][1] if LOG else None)
    default = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)  # the fresh default config's dtype changes; the config's does not
        LOG.clear()
        record(lambda: m(x))
        logs.append(LOG[0][1] if LOG else None)
    finally:
        torch.set_default_dtype(default)
        backend._config = stock_config
    return logs


def on_stack(kib, call):
    """Three calls of `call` on a thread with a `kib` KiB C stack: each call's output or error."""
    results: list = []
    previous = threading.stack_size(kib * 1024)
    try:
        worker = threading.Thread(target=lambda: results.extend(record(call) for _ in range(3)))
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    return results


def small_stacks(m, x):
    """Three calls on threads with small C stacks (36 and 40 KiB: stock's whole call fits; round six, item 9), each
    call's output or error."""
    return {kib: on_stack(kib, lambda: m(x)) for kib in (36, 40)}


def describe_kept():
    """Which backends' ``describe()`` the call path keeps (backend class -> kept, and equal to ``describe()``):
    TorchEager's and Inductor JIT's (whose config's ``__post_init__`` is AITune's own, only checking), not a
    config whose user ``__post_init__`` counts its calls (``describe()`` builds a default config every call)."""
    import dataclasses

    from aitune.torch.backend import TorchEagerBackend
    from aitune.torch.backend.torch_inductor_jit_backend import TorchInductorJitBackend, TorchInductorJitBackendConfig
    from aitune_fast.patch import _call_path

    made: list = []

    @dataclasses.dataclass
    class CountingConfig(TorchInductorJitBackendConfig):
        def __post_init__(self):
            made.append(1)

    kept = {}
    for name, backend in {
        "eager": TorchEagerBackend(),
        "inductor_jit": TorchInductorJitBackend(),
        "counting": TorchInductorJitBackend(CountingConfig()),
    }.items():
        cache = _call_path.learn_describe_cache()
        descriptions = [cache.describe(backend) for _ in range(3)]
        getter = _call_path._decide(type(backend), type(backend._config))[1]
        kept[name] = [getter is not None, set(descriptions) == {backend.describe()}]
    kept["counting_made"] = len(made)  # 1 (the config) + 1 per describe() run: 3 runs + the check above = 5
    return kept


def threads(m, x, expected):
    """Two threads calling at once: every call returns the module's output."""
    import torch

    failures: list = []

    def worker():
        for _ in range(200):
            try:
                if not torch.equal(m(x), expected):
                    failures.append("wrong output")
            except Exception as exc:  # noqa: BLE001
                failures.append(repr(exc))

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return failures


def toggles(aitune_fast, m, x, expected):
    """Calls in another thread while the call path is switched on and off: none fails, each gives the output.

    (Only the call path: switching the whole patch converts live backend keys, which calls in flight can miss.)"""
    import torch

    failures: list = []
    calls = [0]
    stop = threading.Event()

    def worker():
        while not stop.is_set():
            try:
                if not torch.equal(m(x), expected):
                    failures.append("wrong output")
            except Exception as exc:  # noqa: BLE001
                failures.append(repr(exc))
            calls[0] += 1

    w = threading.Thread(target=worker)
    w.start()
    try:
        for i in range(40):
            aitune_fast.patch_aitune(call_path=bool(i % 2))
    finally:
        stop.set()
        w.join()
    aitune_fast.patch_aitune()
    return {"failures": failures[:5], "calls": calls[0]}


def tune(ait, torch, probe_cls, name):
    torch.manual_seed(0)
    probe = probe_cls().eval()
    m = ait.Module(probe, name, strategy=quick_strategy(ait))
    ait.tune(m, torch.randn(4), batch_sizes=[1, 2], device="cpu")
    return m, probe


def installed(m):
    """Which ``_forward`` the live module's forward wrapper calls."""
    return m.__wrapped__.forward._self_wrapper.__func__.__module__


WRAPPED = [  # (module, class, method): AITune's per-call steps that a profiler or tracer may wrap
    ("aitune.torch.module.tuned_module", "TunedModule", "__call__"),
    ("aitune.torch.module.tuned_module", "TunedModule", "safe_call_backend"),
    ("aitune.torch.module.wrapper_module", "Module", "_forward"),
    ("aitune.torch.backend.torch_eager", "TorchEagerBackend", "_infer"),
    ("aitune.torch.backend.torch_eager", "TorchEagerBackend", "describe"),
    ("aitune.torch.module.forward_signature", "ForwardSignature", "normalize"),
]


def wrapped(workdir: str) -> dict:
    """Wrappers (``functools.wraps``, counting their calls) on AITune's per-call methods before the patch: the runs
    of each over 3 calls of a tuned module, stock and patched."""
    import functools
    import importlib

    import aitune.torch as ait
    import aitune_fast
    import torch

    counts: dict[str, int] = {}

    def counting(name, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return function(*args, **kwargs)

        return wrapper

    for module_name, class_name, method in WRAPPED:
        cls = getattr(importlib.import_module(module_name), class_name)
        setattr(cls, method, counting(f"{class_name}.{method}", vars(cls)[method]))
    m, _probe = tune(ait, torch, models(torch), "wrapped")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    out = {}
    for world in ("stock", "patched"):
        if world == "patched":
            aitune_fast.patch_aitune()
        counts.clear()
        with torch.no_grad():
            results = [m(x).tolist() for _ in range(3)]
        out[world] = {"counts": dict(sorted(counts.items())), "results": results}
    aitune_fast.unpatch_aitune()
    return out


def inlined_sites(torch, module):
    """The stock code the call path does in place (round six, items 1-4), each as (name, how to wrap it): a function
    that puts a counting wrapper there and returns how to take it away. `module` is the tuned module's own module
    (TorchEager's, which the path calls without ``nn.Module.__call__`` where that would only call its forward)."""
    import functools

    from aitune.global_context import GlobalContext
    from aitune.torch.module.wrapper_module import Module

    def method(cls, name):
        def wrap(count):
            stock = vars(cls)[name]

            @functools.wraps(stock)
            def wrapper(*args, **kwargs):
                count()
                return stock(*args, **kwargs)

            setattr(cls, name, wrapper)
            return lambda: setattr(cls, name, stock)

        return wrap

    def no_grad(count):
        stock = torch.no_grad

        class CountingNoGrad(stock):
            def __enter__(self):
                count()
                return super().__enter__()

        torch.no_grad = CountingNoGrad
        return lambda: setattr(torch, "no_grad", stock)

    def own_context(module_name):
        def wrap(count):
            import importlib

            module = importlib.import_module(module_name)
            stock = module.global_context

            class CountingContext(GlobalContext):  # a context of the module's own (a thread-local one, say)
                def __enter__(self):
                    count()
                    return super().__enter__()

            module.global_context = CountingContext()
            return lambda: setattr(module, "global_context", stock)

        return wrap

    def own_call_impl(count):  # on the module object itself: `nn.Module.__call__` reads `self._call_impl`
        stock = module._call_impl

        def wrapper(*args, **kwargs):
            count()
            return stock(*args, **kwargs)

        module._call_impl = wrapper
        return lambda: delattr(module, "_call_impl")

    def getattribute(count):  # reads of `_self_wrapper` counted: stock's swap reads it once a call
        stock = Module.__getattribute__

        def counting(self, name):
            if name == "_self_wrapper":
                count()
            return stock(self, name)

        Module.__getattribute__ = counting
        return lambda: delattr(Module, "__getattribute__")

    def metrics_function(count):
        from aitune.utils.monitoring import hardware_metrics_annotation as annotation

        stock = annotation.get_default_collector

        @functools.wraps(stock)
        def wrapper():
            count()
            return stock()

        annotation.get_default_collector = wrapper
        return lambda: setattr(annotation, "get_default_collector", stock)

    def own_collector(count):  # the session's no-op collector replaced by one that counts its scopes
        from aitune.utils.monitoring.hardware_metrics.collector import NoOpHardwareMetricsCollector
        from aitune.utils.monitoring.setup_hardware_metrics import _DEFAULT_SESSION as session

        class Counting(NoOpHardwareMetricsCollector):
            def start_scope(self, name):
                count()

        stock = session._noop_collector
        session._noop_collector = Counting()
        return lambda: setattr(session, "_noop_collector", stock)

    from aitune.utils.monitoring.hardware_metrics.collector import NoOpHardwareMetricsCollector
    from aitune.utils.monitoring.setup_hardware_metrics import HardwareMetricsSession

    return {
        "hardware_metrics_annotation.get_default_collector": metrics_function,
        "HardwareMetricsSession.get_collector": method(HardwareMetricsSession, "get_collector"),
        "HardwareMetricsSession._should_collect": method(HardwareMetricsSession, "_should_collect"),
        "NoOpHardwareMetricsCollector.start_scope": method(NoOpHardwareMetricsCollector, "start_scope"),
        "NoOpHardwareMetricsCollector.end_scope": method(NoOpHardwareMetricsCollector, "end_scope"),
        "session._noop_collector": own_collector,
        "Module.__getattribute__": getattribute,
        "tuned_module.global_context": own_context("aitune.torch.module.tuned_module"),
        "backend_context.global_context": own_context("aitune.utils.monitoring.context.backend_context"),
        "nn.Module.__call__": method(torch.nn.Module, "__call__"),
        "nn.Module._call_impl": method(torch.nn.Module, "_call_impl"),
        "module._call_impl": own_call_impl,
        "Module._restore_original_forward": method(Module, "_restore_original_forward"),
        "Module._proxy_forward": method(Module, "_proxy_forward"),
        "GlobalContext.__enter__": method(GlobalContext, "__enter__"),
        "GlobalContext.__exit__": method(GlobalContext, "__exit__"),
        "GlobalContext.set": method(GlobalContext, "set"),
        "torch.no_grad": no_grad,
    }


def inlined(workdir: str) -> dict:
    """A counting wrapper on each piece of stock code the call path does in place: how often it runs over 3 calls of
    a tuned module, and their outputs, stock, then with the wrapper put there before ``patch_aitune()``, after it
    (once the path has run), and after an unpatch and patch again."""
    import aitune.torch as ait
    import aitune_fast
    import torch

    m, probe = tune(ait, torch, models(torch), "inlined")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    counted: list = []

    def calls():
        counted.clear()
        with torch.no_grad():
            results = [m(x).tolist() for _ in range(3)]
        return [len(counted), results]

    out = {}
    for name, wrap in inlined_sites(torch, probe).items():
        unwrap = wrap(lambda: counted.append(1))
        runs = {"stock": calls()}
        aitune_fast.patch_aitune()
        runs["before_patch"] = calls()
        aitune_fast.unpatch_aitune()
        unwrap()
        aitune_fast.patch_aitune()
        calls()  # the path runs (and its guards learn the classes as they are) before the wrapper comes
        unwrap = wrap(lambda: counted.append(1))
        runs["after_patch"] = calls()
        aitune_fast.unpatch_aitune()
        aitune_fast.patch_aitune()
        runs["repatched"] = calls()
        aitune_fast.unpatch_aitune()
        unwrap()
        out[name] = runs
    return out


def nested(workdir: str) -> dict:
    """Ten tuned modules, each one's forward calling the next, called on threads with 76 KiB C stacks (round six,
    item 9; on CPython 3.11 stock's call needs 68 KiB, the native path's 80): each call's output or error, stock,
    patched, and stock again (a call that overflowed the C stack would end this process instead)."""
    import aitune.torch as ait
    import aitune_fast
    import torch

    class Layer(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.inner = [inner]  # a list: not a submodule, so each tuned module stays its own

        def forward(self, x):
            y = self.lin(x)
            inner = self.inner[0]
            return y if inner is None else inner(y)

    torch.manual_seed(0)
    tuned = None
    for depth in range(10):  # the innermost first
        tuned = ait.Module(Layer(tuned).eval(), f"nested{depth}", strategy=quick_strategy(ait))
    ait.tune(tuned, torch.randn(4), batch_sizes=[1, 2], device="cpu")  # tunes the modules it calls too
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))

    def call():
        with torch.no_grad():
            return tuned(x)

    def on_small_stack():
        return on_stack(76, call)

    out = {"stock": on_small_stack()}
    aitune_fast.patch_aitune()
    out["patched"] = on_small_stack()
    aitune_fast.unpatch_aitune()
    out["unpatched"] = on_small_stack()
    return out


def learnt(workdir: str) -> dict:
    """What the patch learnt of AITune (its global context, the call path's parts) is owned by the patched period:
    there while patched, gone after ``unpatch_aitune()``, learnt afresh by the next ``patch_aitune()``."""
    import aitune.torch  # noqa: F401
    import aitune_fast
    from aitune_fast.patch._state import state

    def seen():
        now = state()
        parts = {name for name, part in now.call_path_parts.items() if part is not None}
        return {"context": now.context is not None, "parts": sorted(parts)}

    out = {"before": seen()}
    aitune_fast.patch_aitune()
    out["patched"], first = seen(), state().context
    native = state().native
    aitune_fast.unpatch_aitune()
    out["unpatched"] = seen()
    aitune_fast.patch_aitune()
    out["repatched"] = seen()
    out["afresh"] = [state().context is not first, state().native is not native]
    aitune_fast.unpatch_aitune()
    return out


def main(mode: str, workdir: str) -> dict:
    if mode == "learnt":
        return learnt(workdir)
    if mode == "wrapped":
        return wrapped(workdir)
    if mode == "nested":
        fake_nvtx()
        return nested(workdir)
    if mode == "inlined":
        fake_nvtx()
        return inlined(workdir)
    if mode == "early":
        import aitune_fast

        aitune_fast.patch_aitune()
    try:
        import aitune.torch as ait
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"import aitune.torch failed: {type(exc).__name__}: {exc}"}
    import torch
    from aitune.torch.backend.backend import Backend
    from aitune.torch.module.tuned_module import TunedModule
    from aitune.torch.module.wrapper_module import Module

    fake_nvtx()
    fake_metrics()
    if mode == "meta":
        import aitune_fast

        aitune_fast.patch_aitune(call_path=False)
    stock_functions = [Module.__dict__["_forward"], TunedModule.__dict__["__call__"], Backend.__dict__["infer"]]
    probe_cls = models(torch)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    m, probe = tune(ait, torch, probe_cls, "probe")
    path = os.path.join(workdir, f"{mode}-probe.pt")
    ait.save(m, path)
    torch.manual_seed(5)
    loaded_probe = probe_cls().eval()
    loaded = ait.load(loaded_probe, path)
    stock_wrapper = m.__wrapped__.forward
    out: dict = {}
    if mode == "late":
        import aitune_fast

        aitune_fast.patch_aitune()
    out["installed"] = [installed(m), installed(loaded)]
    out["tuned"] = transcript(ait, torch, m, probe, x)
    out["loaded"] = transcript(ait, torch, loaded, loaded_probe, x)
    with torch.no_grad():
        expected = m(x)
    out["threads"] = threads(m, x, expected)
    untuned = ait.Module(probe_cls().eval(), "untuned")
    with torch.no_grad():
        out["untuned"] = [record(lambda: untuned(x)), untuned.state.value]
    if mode in ("late", "early"):
        import aitune_fast

        out["toggles"] = toggles(aitune_fast, m, x, expected)
        out["describe_kept"] = describe_kept()
        aitune_fast.unpatch_aitune()
        now = [Module.__dict__["_forward"], TunedModule.__dict__["__call__"], Backend.__dict__["infer"]]
        out["unpatched"] = {
            "functions": [f.__module__ for f in now],
            "same_functions": [a is b for a, b in zip(stock_functions, now, strict=True)],
            "wrapper": m.__wrapped__.forward is stock_wrapper,
            "installed": [installed(m), installed(loaded), installed(untuned)],
        }
    return out


if __name__ == "__main__":
    report(main, *sys.argv[1:3])
