"""The per-call path of an AITune-tuned module, in place under ``patch_aitune(call_path=True)``.

A stock AITune 0.6.0 call of a tuned ``aitune.torch.Module`` runs, in Python: the wrapt ``FunctionWrapper`` that
``Module.__init__`` put at ``module.forward``, ``Module._forward`` (which swaps the wrapped module's hook dicts and
``forward`` out and back through eight ``nn.Module.__setattr__`` calls), ``TunedModule.__call__`` and
``safe_call_backend`` (two ``inspect.Signature.bind`` calls), the backend key lookup, and ``Backend.infer`` under three
decorators (``with_backend_context``, the nvtx range, the hardware-metrics scope). This module replaces, while
enabled:

* ``Module._forward`` on the class, and in every live ``Module`` the ``FunctionWrapper`` it built around the bound
  ``_forward`` (wrapt captured the bound method, so the class attribute alone reaches only modules built later):
  the same swap, written straight into the wrapped module's ``__dict__`` when its class keeps
  ``nn.Module.__setattr__`` (the hook dicts are still replaced by copies each call, as stock does);
* ``TunedModule.__call__``: each call shape (number of positional arguments, keyword names) of a forward signature
  that repeats is bound once with ``ForwardSignature.normalize`` on placeholders (a shape's first call binds as stock
  does), and the result kept as a plan (``_core._BindPlan``) that builds, in the core, the normalized arguments,
  keyword arguments and the ``arguments`` dict the metadata is built from (binding looks at the shape only); a shape
  that does not bind goes through ``normalize`` itself, so errors are its own;
* ``Backend.infer``: one function doing what the three decorators and the body do, in the same order, with the
  nvtx ``annotate`` objects kept per message (when ``nvtx.annotate`` is nvtx's own class).

The steps run as one native call per tuned call (``_core._CallPath``, ``rust/patch/call_path.rs``). Its caches, the
call shapes' plans (``_core._BindCache``) and backends' descriptions (``_core._DescribeCache``), are looked up in the
core and call back here only on a miss (:func:`compile_binder`, :func:`_decide`).

Each part of the native path is learnt whole (``learn_*``, ``_core`` parts) and kept on the patched period's state. A
step done in place of stock's code runs only while its guard says that code is still the library's own and unchanged
(``_core._ClassGuard``: the class's version tag; ``_core._NameGuard``: a module's names). Anything unexpected (a
wrapper put on such a method before or after the patch, a subclass overriding a method the fast path inlines, a
replaced bound method, a wrapped module with its own ``__setattr__``) takes stock's code for that step. Installing
and removing are one attribute store per object, so calls running in other threads finish on whichever path they
started.
"""

from __future__ import annotations

import math
import sys
import types
from collections import OrderedDict
from typing import Any, cast

from aitune_fast._core import (
    _STOCK_STEP,
    _BindCache,
    _BindPlan,
    _CallPath,
    _ClassGuard,
    _ContextPart,
    _DescribeCache,
    _EagerPart,
    _ForwardPart,
    _InferPart,
    _MetricsPart,
    _ModuleCallPart,
    _NameGuard,
    _TunedCallPart,
)
from aitune_fast._explain import note_miss
from aitune_fast.patch import _names
from aitune_fast.patch._objects import live_instances
from aitune_fast.patch._quiescence import attr
from aitune_fast.patch._registry import REGISTRY, Layer
from aitune_fast.patch._state import CURRENT, state

__all__ = [
    "CALL_CODE",
    "call_steps",
    "compile_binder",
    "install_forward",
    "install_infer",
    "install_jit_swap",
    "install_tuned_call",
    "learn_eager_infer",
]

_MAX_NVTX = 1024  # nvtx annotate objects kept, one per range message


def _into_native(**parts: Any) -> None:
    """Give the native path these parts (with AITune's global context as the patch learnt it): a new object, on the
    state of the patched period (``State.native``)."""
    now = state()
    now.call_path_parts.update(parts, context=learn_context())
    now.native = _CallPath(**now.call_path_parts)


def learn_context() -> _ContextPart | None:
    """AITune's global context as the patch learnt it, where its class's ``with`` and ``set`` are AITune's own and
    the loaded modules whose code the path does in place name it (a module given a context of its own, a
    thread-local one say, keeps stock's steps, which use that one)."""
    context = state().context
    guard = None if context is None else _context_guard(context.cls)
    if context is None or guard is None:
        return None
    names = []
    for module_name, key_name, key in (
        (_names.TUNED_MODULE, "MODULE_CONTEXT_KEY", context.module_key),
        (_names.BACKEND_CONTEXT, "BACKEND_CONTEXT_KEY", context.backend_key),
    ):
        module = sys.modules.get(module_name)
        if module is None:
            continue  # learnt again when it loads (its part installs)
        namespace = vars(module)
        if namespace.get("global_context") is not context.obj or namespace.get(key_name) != key:
            return None
        names.append(_NameGuard(namespace, ("global_context", key_name)))
    return _ContextPart(
        obj=context.obj,
        context_cls=context.cls,
        module_key=context.module_key,
        backend_key=context.backend_key,
        guard=guard,
        names=tuple(names),
    )


# ---------------------------------------------------------------------------------------------- guards
# The native path does some stock code in its place: AITune's `with global_context` and `set`, the hook swap of
# `Module._restore_original_forward` and `_proxy_forward`, torch's `no_grad`. Each such step runs only while a guard
# (`_core._ClassGuard`, `_core._NameGuard`) says the classes and modules still hold the very functions it was learned
# from, and these were the libraries' own when learned; otherwise (a wrapper put on one before or after the patch, a
# replacement) the step runs stock's code, which calls whatever is there.

_CONTEXT_CODE = ("__enter__", "__exit__", "set", "_current_data")  # what pushing the context in place does
_SWAP_CODE = ("_restore_original_forward", "_proxy_forward")  # what Module._forward's hook swap in place does
_GRAD_CODE = ("__init__", "__enter__", "__exit__")  # of torch's no_grad and set_grad_enabled


def _context_guard(context_cls: Any) -> Any:
    """A guard on the AITune context class's `with` and `set`, where they are AITune's own; None otherwise."""
    module = sys.modules.get(_names.GLOBAL_CONTEXT)
    if not isinstance(context_cls, type) or module is None:
        return None
    for name in _CONTEXT_CODE:
        function = attr(context_cls, name)
        function = function.fget if isinstance(function, property) else function
        if not _aitunes_own(function, module, f"GlobalContext.{name}"):
            return None
    return _ClassGuard(context_cls, _CONTEXT_CODE)


def _swap_guard(module_cls: type, wrapper_module: Any) -> Any:
    """A guard on ``Module``'s hook-swap helpers, where they are AITune's own, and on its ``__getattribute__``, where
    that looks an attribute up generically first (the swap reads the proxy's ``_self_*`` attributes that way); None
    otherwise."""
    if not all(_aitunes_own(attr(module_cls, name), wrapper_module, f"Module.{name}") for name in _SWAP_CODE):
        return None
    if not _generic_first(_resolved(module_cls, "__getattribute__")):
        return None
    return _ClassGuard(module_cls, (*_SWAP_CODE, "__getattribute__"))


def _resolved(cls: type, name: str) -> Any:
    """What `cls` holds under `name` through its MRO, no descriptor run (None where nothing)."""
    return next((vars(base)[name] for base in cls.__mro__ if name in vars(base)), None)


def _generic_first(getattribute: Any) -> bool:
    """Whether a class's ``__getattribute__`` finds what ``object.__getattribute__`` finds, where that finds a name
    other than ``__module__`` and ``__doc__``: object's own, or the C ``__getattribute__`` of wrapt's ``ObjectProxy``
    (which tries ``object``'s first, then the wrapped object)."""
    import wrapt

    proxies = _resolved(wrapt.ObjectProxy, "__getattribute__")
    return getattribute is object.__getattribute__ or (
        getattribute is proxies and type(proxies) is types.WrapperDescriptorType
    )


def _grad_guards(torch: Any) -> tuple | None:
    """Guards on what TorchEager's ``with torch.no_grad()`` runs (torch's ``no_grad`` and ``set_grad_enabled`` classes,
    the names ``torch`` and ``torch._C`` give them and the grad-mode switches), where all are torch's own; None
    otherwise."""
    grad_mode = sys.modules.get("torch.autograd.grad_mode")
    if grad_mode is None:
        return None
    classes = (torch.no_grad, torch.set_grad_enabled)
    if classes != (getattr(grad_mode, "no_grad", None), getattr(grad_mode, "set_grad_enabled", None)):
        return None
    for cls in classes:
        if not all(_aitunes_own(attr(cls, name), grad_mode, f"{cls.__name__}.{name}") for name in _GRAD_CODE):
            return None
    if torch.is_grad_enabled is not getattr(torch._C, "is_grad_enabled", None):
        return None
    return (
        _NameGuard(vars(torch), ("no_grad", "set_grad_enabled", "is_grad_enabled")),
        _NameGuard(vars(torch._C), ("_set_grad_enabled", "is_grad_enabled")),
        *(_ClassGuard(cls, _GRAD_CODE) for cls in classes),
    )


# ---------------------------------------------------------------------------------------------- Module._forward


def install_forward(wrapper_module: Any) -> None:
    """``Module._forward`` on the class, and in the ``FunctionWrapper`` of every live ``Module``."""
    module_cls = getattr(wrapper_module, "Module", None)
    state: Any = getattr(wrapper_module, "ModuleState", None)
    if not isinstance(module_cls, type) or "_forward" not in module_cls.__dict__:
        return
    if REGISTRY.original(module_cls, "_forward") is not None:
        return
    if not _aitunes_own(attr(module_cls, "_forward"), wrapper_module, "Module._forward"):
        return  # a wrapper put on it before the patch (a profiler, a decorator): stock's step runs it
    guard = _swap_guard(module_cls, wrapper_module)
    if guard is None:
        return  # a helper of the swap wrapped before the patch: stock's _forward calls it
    _into_native(
        forward=_ForwardPart(
            init_state=state.INIT,
            nn_setattr=sys.modules["torch"].nn.Module.__setattr__,
            stock_swap=_forward_stock_swap,
            guard=guard,
        )
    )
    REGISTRY.replace_function(Layer.CALL_PATH, module_cls, "_forward", _forward)
    REGISTRY.step(
        Layer.CALL_PATH_LIVE,
        "live modules' forward wrappers",
        lambda: _swap_live_forwards(module_cls, to_fast=True),
        lambda: _swap_live_forwards(module_cls, to_fast=False),
    )


def _swap_live_forwards(module_cls: type, to_fast: bool) -> None:
    """Give every live ``Module`` a ``FunctionWrapper`` around the fast ``_forward`` (or its stock one back)."""
    import wrapt

    for proxy in live_instances(lambda cls: issubclass(cls, module_cls)):
        try:
            current = proxy._self_proxy_forward
            bound = current._self_wrapper
        except AttributeError:
            continue
        if type(bound) is not types.MethodType or cast(Any, bound).__self__ is not proxy:
            continue
        if to_fast and bound.__func__ is cast(Any, _forward).__wrapped__:
            replacement: Any = wrapt.decorator(types.MethodType(_forward, proxy))(current.__wrapped__)
            replacement._self_stock = current
        elif not to_fast and bound.__func__ is _forward:
            replacement = getattr(current, "_self_stock", None)
            if replacement is None:  # built while enabled: the stock wrapper it would have had
                replacement = wrapt.decorator(proxy._forward)(current.__wrapped__)
        else:
            continue
        proxy._self_proxy_forward = replacement
        inner = proxy.__wrapped__
        if inner.__dict__.get("forward") is current:
            inner.forward = replacement


def _forward(self: Any, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``Module._forward``: the tuned (or recording, passthrough) wrapper called with the wrapped module's own
    ``forward`` and no hooks in place, both put back afterwards (:meth:`_core._CallPath.forward`)."""
    try:
        result = CURRENT.state.native.forward(self, args, kwargs)
    except RuntimeError as error:  # a miss gets explain()'s note where configure(explain_misses=True)
        note_miss(self, args, kwargs, error)
        raise
    if result is _STOCK_STEP:  # its part not learnt (a shim kept past an unpatch), or too little C stack left
        return _stock_method(_names.WRAPPER_MODULE, "Module", "_forward")(self, wrapped, instance, args, kwargs)
    return result


def install_jit_swap(jit_module: Any) -> None:
    """The hook swap of JIT-patched modules (``PatchedModule``): its two methods, on the class, so every live
    instance (which calls them through ``self``) takes them."""
    patched_cls = getattr(jit_module, "PatchedModule", None)
    if not isinstance(patched_cls, type) or REGISTRY.original(patched_cls, "_proxy_forward") is not None:
        return
    if not all(
        _aitunes_own(attr(patched_cls, name), jit_module, f"PatchedModule.{name}")
        for name in ("_proxy_forward", "_restore_original_forward")
    ):
        return  # absent, or a wrapper put on it before the patch: stock's swap runs it
    refs = state().path_refs
    refs.nn_setattr = sys.modules["torch"].nn.Module.__setattr__
    refs.jit_decorator = jit_module.wrapt.decorator
    REGISTRY.replace_function(Layer.CALL_PATH, patched_cls, "_restore_original_forward", _jit_restore)
    REGISTRY.replace_function(Layer.CALL_PATH, patched_cls, "_proxy_forward", _jit_proxy)


def _jit_restore(self: Any) -> None:
    """``PatchedModule._restore_original_forward``: the module's own ``forward`` and no hooks, the hook dicts kept
    (as copies, as stock keeps them) to put back; written into the wrapped module's ``__dict__`` where its class
    keeps ``nn.Module.__setattr__`` (which stores these plain values there)."""
    inner = self.__wrapped__
    if type(inner).__setattr__ is not CURRENT.state.path_refs.nn_setattr:  # or a shim kept past an unpatch
        return _stock_method(_names.JIT_MODULE, "PatchedModule", "_restore_original_forward")(self)
    state = inner.__dict__
    self._current_forward_pre_hooks = OrderedDict(state["_forward_pre_hooks"])
    self._current_forward_hooks = OrderedDict(state["_forward_hooks"])
    state["_forward_pre_hooks"] = OrderedDict()
    state["forward"] = self._original_forward
    state["_forward_hooks"] = OrderedDict()
    return None


def _jit_proxy(self: Any) -> None:
    """``PatchedModule._proxy_forward``: the hooks back and a new routing wrapper at ``forward`` (as stock makes)."""
    inner = self.__wrapped__
    refs = CURRENT.state.path_refs
    if type(inner).__setattr__ is not refs.nn_setattr:  # or a shim kept past an unpatch
        return _stock_method(_names.JIT_MODULE, "PatchedModule", "_proxy_forward")(self)
    state = inner.__dict__
    state["_forward_pre_hooks"] = self._current_forward_pre_hooks
    state["forward"] = refs.jit_decorator(self._forward_router)(self._original_forward)
    state["_forward_hooks"] = self._current_forward_hooks
    return None


def _forward_stock_swap(self: Any, args: tuple, kwargs: dict) -> Any:
    try:
        self._restore_original_forward()
        result = self._self_wrapper(*args, **kwargs)
    finally:
        self._proxy_forward()
    return result


# ---------------------------------------------------------------------------------------------- TunedModule


def install_tuned_call(tuned_module: Any) -> None:
    """``TunedModule.__call__``."""
    tuned_cls = getattr(tuned_module, "TunedModule", None)
    if not isinstance(tuned_cls, type) or "__call__" not in tuned_cls.__dict__:
        return
    signature_module = sys.modules.get(_names.FORWARD_SIGNATURE)
    if REGISTRY.original(tuned_cls, "__call__") is not None or state().context is None or signature_module is None:
        return
    if not _aitunes_own(attr(tuned_cls, "__call__"), tuned_module, "TunedModule.__call__"):
        return  # a wrapper put on it before the patch: stock's call runs it
    binder = learn_bind_cache(signature_module)
    if binder is None:
        return  # ForwardSignature.normalize wrapped or replaced before the patch: stock's call binds with it
    # each step the fast call takes in place of safe_call/unique_call runs only while the function is AITune's own: a
    # wrapper put on it before the patch keeps running (_NOT_AITUNES never matches what a call finds)
    _into_native(
        tuned=_TunedCallPart(
            tuned_cls=tuned_cls,
            shim=_tuned_call,
            owner=tuned_module,
            binder=binder,
            stock_steps=_call_stock_steps,
            safe_call=_own(tuned_cls, "safe_call_backend", tuned_module, "TunedModule"),
            unique_call=_own(tuned_cls, "call_unique_backend", tuned_module, "TunedModule"),
        )
    )
    REGISTRY.replace_function(Layer.CALL_PATH, tuned_cls, "__call__", _tuned_call)


def _tuned_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``TunedModule.__call__``: bind, then in a new AITune context naming the module, the backend function
    (``safe_call_backend``: the backend whose key equals the call's metadata; ``call_unique_backend``; any other
    function as it is): :meth:`_core._CallPath.call`."""
    try:
        result = CURRENT.state.native.call(self, args, kwargs)
    except RuntimeError as error:  # a miss gets explain()'s note where configure(explain_misses=True)
        note_miss(self, args, kwargs, error)
        raise
    if result is _STOCK_STEP:
        return _stock_method(_names.TUNED_MODULE, "TunedModule", "__call__")(self, *args, **kwargs)
    return result


def _stock_method(module_name: str, class_name: str, name: str) -> Any:
    """Stock's function at `class_name.name` of AITune's module `module_name`: what the patch replaced (or, after an
    unpatch, what is there again). For a shim whose native entry answered ``_core._STOCK_STEP`` (its part not learnt,
    or too little C stack left: stock's code, called from Python, needs less of it)."""
    cls = getattr(sys.modules[module_name], class_name)
    original = REGISTRY.original(cls, name)
    return vars(cls)[name] if original is None else original


def _call_stock_steps(tuned: Any, args: tuple, kwargs: dict) -> Any:
    """``TunedModule.__call__`` step by step as stock runs it (a call shape that does not bind fails as there)."""
    bound = tuned._forward_signature.normalize(args, kwargs)
    sample = (bound.args, bound.kwargs)
    owner = sys.modules[_names.TUNED_MODULE]  # the context and key stock's code names, whatever they are now
    context = owner.global_context
    with context:
        context.set(owner.MODULE_CONTEXT_KEY, tuned._module_name)
        return tuned._backend_func(sample)


# ---------------------------------------------------------------------------------------------- binding


class _Slot:
    """A placeholder bound in place of a call's argument: where the argument came from (its positional index or
    keyword name)."""

    __slots__ = ("source",)

    def __init__(self, source: int | str) -> None:
        self.source = source


def learn_bind_cache(signature_module: Any) -> _BindCache | None:
    """The plans of the call shapes that repeat (``_core._BindCache``): a shape's first call binds as stock does
    (compiling costs more than a stock bind, so calls whose keyword names are new every time are never slower than
    stock's), its second compiles it (:func:`compile_binder`). Used while ``ForwardSignature`` holds AITune's own
    ``normalize``; None where it does not now."""
    signature_cls = getattr(signature_module, "ForwardSignature", None)
    if not isinstance(signature_cls, type):
        return None
    if not _aitunes_own(attr(signature_cls, "normalize"), signature_module, "ForwardSignature.normalize"):
        return None
    guard = _ClassGuard(signature_cls, ("normalize",))
    return _BindCache(signature_cls=signature_cls, guard=guard, compile=compile_binder)


def compile_binder(signature: Any, n_args: int, names: tuple) -> _BindPlan | None:
    """Bind placeholders of this shape twice as ``TunedModule`` does, and keep where each value came from: a plan
    (``_core._BindPlan``) whose ``plan(args, kwargs)`` gives the normalized ``(args, kwargs, arguments)`` of a call of
    this shape, built in the core with no Python frame. None where the shape does not bind to placeholders only."""
    if any(type(name) is not str for name in names):
        return None
    slots_args = tuple(_Slot(i) for i in range(n_args))
    slots_kwargs = {name: _Slot(name) for name in names}
    try:
        first = signature.normalize(slots_args, slots_kwargs)
        call_args, call_kwargs = first.args, first.kwargs
        arguments = signature.normalize(call_args, call_kwargs).arguments
        return _BindPlan(_spec(call_args), _spec(call_kwargs), _spec(arguments))
    except (TypeError, ValueError):  # a shape that does not bind, or values that are not placeholders only
        return None


def _spec(value: Any) -> Any:
    """Where `value` (placeholders in tuples and str-keyed dicts) comes from, in the form ``_BindPlan`` reads: an
    int (a positional index), a str (a keyword name), a tuple or a str-keyed dict of those."""
    if type(value) is _Slot:
        return value.source
    if type(value) is tuple:
        return tuple(map(_spec, value))
    if type(value) is dict and all(type(key) is str for key in value):
        return {key: _spec(item) for key, item in value.items()}
    raise ValueError("not a placeholder")


# ---------------------------------------------------------------------------------------------- Backend.infer


def _cell(func: Any, name: str) -> Any:
    return func.__closure__[func.__code__.co_freevars.index(name)].cell_contents


def learn_infer(backend_module: Any) -> _InferPart | None:
    """``Backend.infer``'s part: what its stock decorator chain holds (the nvtx decorator, the hardware-metrics scope);
    None when it is not the chain AITune 0.6.0 builds."""
    infer = backend_module.Backend.__dict__.get("infer")
    try:
        nvtx_wrapper = infer.__kwdefaults__["_method"]
        nvtx_decorator = _cell(nvtx_wrapper, "self")
        metrics_wrapper = _cell(nvtx_wrapper, "func")
        scope = _cell(metrics_wrapper, "name")
        body = _cell(metrics_wrapper, "func")
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return None
    nvtx_module = sys.modules.get(_names.NVTX_ANNOTATION)
    metrics_module = sys.modules.get(_names.HARDWARE_METRICS)
    if nvtx_module is None or metrics_module is None or type(nvtx_decorator) is not nvtx_module.annotate_with_nvtx:
        return None
    if body.__qualname__ != "Backend.infer" or type(scope) is not str:
        return None
    state = backend_module.BackendState
    return _InferPart(
        shim=_infer,
        stock=infer,
        describe=learn_describe_cache(),
        annotation=_annotation,
        nvtx_decorator=nvtx_decorator,
        nvtx_module=nvtx_module,
        metrics_module=metrics_module,
        scope=scope,
        states=(state.ACTIVE, state.DEPLOYED),
        annotations={},
        annotate_cls=[None],
    )


def install_infer(backend_module: Any) -> None:
    """``Backend.infer``, where its decorator chain is the one AITune 0.6.0 builds."""
    if REGISTRY.original(backend_module.Backend, "infer") is not None or state().context is None:
        return
    part = learn_infer(backend_module)
    if part is None:
        return
    _into_native(infer=part, metrics=learn_metrics())
    REGISTRY.replace_function(Layer.CALL_PATH, backend_module.Backend, "infer", _infer)


def learn_metrics() -> _MetricsPart | None:
    """The hardware-metrics scope's part: while AITune's collector is its no-op one (metrics off), the scope's two
    calls do nothing and the path skips them (``_core._CallPath``'s ``metrics_off`` reads what ``get_collector``
    reads). None where the functions the scope calls are not AITune 0.6.0's own: the scope is then always called."""
    annotation = sys.modules.get(_names.HARDWARE_METRICS)
    setup = sys.modules.get(_names.METRICS_SESSION)
    collectors = sys.modules.get(_names.METRICS_COLLECTOR)
    if annotation is None or setup is None or collectors is None:
        return None
    get_default = vars(annotation).get("get_default_collector")
    session = vars(setup).get("_DEFAULT_SESSION")
    session_cls = getattr(setup, "HardwareMetricsSession", None)
    noop_cls = getattr(collectors, "NoOpHardwareMetricsCollector", None)
    if not (
        isinstance(session_cls, type)
        and isinstance(noop_cls, type)
        and type(session) is session_cls
        and "HARDWARE_METRICS_ENABLED" in vars(setup)
        and _aitunes_own(get_default, setup, "get_default_collector")
        and all(_aitunes_own(attr(session_cls, n), setup, f"HardwareMetricsSession.{n}") for n in _SESSION_CODE)
        and all(_aitunes_own(attr(noop_cls, n), collectors, f"NoOpHardwareMetricsCollector.{n}") for n in _NOOP_CODE)
        and _generic_first(_resolved(session_cls, "__getattribute__"))
    ):
        return None
    return _MetricsPart(
        session=session,
        session_guard=_ClassGuard(session_cls, (*_SESSION_CODE, "__getattribute__")),
        enabled=vars(setup)["HARDWARE_METRICS_ENABLED"],
        noop_guard=_ClassGuard(noop_cls, _NOOP_CODE),
        names=(
            _NameGuard(vars(annotation), ("get_default_collector",)),
            _NameGuard(vars(setup), ("_DEFAULT_SESSION", "HARDWARE_METRICS_ENABLED")),
        ),
    )


_SESSION_CODE = ("get_collector", "_should_collect")  # what HardwareMetricsSession's no-op collector is read by
_NOOP_CODE = ("start_scope", "end_scope")  # the no-op collector's methods, skipped


def _infer(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``Backend.infer``: its three decorators and its body in one step (:meth:`_core._CallPath.infer`)."""
    # stock's wrapper takes `_method` as its own keyword
    result = _STOCK_STEP if "_method" in kwargs else CURRENT.state.native.infer(self, args, kwargs)
    if result is _STOCK_STEP:
        return _stock_method(_names.BACKEND, "Backend", "infer")(self, *args, **kwargs)
    return result


# ---------------------------------------------------------------------------------------------- describe()

_CONFIG_FUNCTIONS = ("describe", "_get_changed_fields", "_default_describe_fields", "__post_init__")
_CONFIG_DESCRIBE = _CONFIG_FUNCTIONS[:3]  # what describe() calls on the config (not __post_init__)


def learn_describe_cache() -> _DescribeCache:
    """``backend.describe()``, kept (``_core._DescribeCache``) by (backend class, config class, config field values and
    their types) where that is all it reads: :func:`_decide` says where. Values of these types only: ``None``, bool,
    int, float, str and ``torch.dtype``."""
    immutable: set[type] = {type(None), bool, int, float, str}
    torch = sys.modules.get("torch")
    if torch is not None:
        immutable.add(torch.dtype)
    return _DescribeCache(decide=_decide, config_functions=_CONFIG_DESCRIBE, immutable=frozenset(immutable))


def _decide(backend_cls: Any, config_cls: Any) -> tuple[tuple | None, Any]:
    """Whether descriptions of this pair of classes may be kept: ``(guards, getter)``. ``getter`` gives a config's
    field values (None: ``describe()`` runs every call); it is one where the backend's ``describe`` is
    ``f"{cls.__name__}({self._config.describe()})"`` and its config a plain dataclass whose ``describe()`` is
    ``BackendConfig``'s (a fresh default instance compared field by field), with no ``__post_init__`` but a checking
    one of AITune's and no field made by a factory. ``guards`` (``_core._ClassGuard``s) watch the functions this read,
    the backend's ``describe`` and the config's three: the decision is made again, and what was kept dropped, when one
    is replaced. None where one is missing: the decision stands (``describe()`` runs every call).

    Not ``__post_init__``: a dataclass's ``__init__`` calls the one its class had when it was made, so one set later
    changes nothing (and one there then is not kept: :func:`_field_getter`)."""
    try:
        guards = (_ClassGuard(backend_cls, ("describe",)), _ClassGuard(config_cls, _CONFIG_DESCRIBE))
    except AttributeError:
        return None, None
    return guards, _field_getter(backend_cls, config_cls)


# AITune 0.6.0's config __post_init__s that only check field values, and pass on the default config (which
# BackendConfig.describe() builds every call): keeping a description skips nothing observable
_CHECKING_POST_INITS = {_names.INDUCTOR_JIT_BACKEND: "TorchInductorJitBackendConfig.__post_init__"}


def _checks_only(post_init: Any) -> bool:
    """Whether a config's ``__post_init__`` is none, BackendConfig's, or one of :data:`_CHECKING_POST_INITS` as
    AITune defines it (not a subclass's or a user's, which might count or log the configs made)."""
    if post_init is None or post_init is state().path_refs.config_functions[3]:
        return True
    module_name = getattr(post_init, "__module__", None)
    if type(module_name) is not str or module_name not in _CHECKING_POST_INITS:
        return False
    return _aitunes_own(post_init, sys.modules.get(module_name), _CHECKING_POST_INITS[module_name])


def _config_functions(config_cls: Any) -> tuple:
    """A config class's functions of :data:`_CONFIG_FUNCTIONS` (None where absent): what :func:`_field_getter`
    compares with BackendConfig's own."""
    return tuple(getattr(config_cls, name, None) for name in _CONFIG_FUNCTIONS)


def _signed_zeros(values: tuple) -> tuple:
    """`values` with each float zero paired with its sign: ``0.0`` and ``-0.0`` are equal keys but print apart."""
    return tuple(
        (value, math.copysign(1.0, value)) if type(value) is float and not value else value for value in values
    )


def _field_getter(backend_cls: type, config_cls: type) -> Any:
    """A function giving the tuple of a config's field values, if the cache may keep descriptions of this pair of
    classes; else None."""
    import dataclasses
    import operator

    describe: Any = getattr(backend_cls, "describe", None)
    refs = state().path_refs
    template = refs.eager_describe
    if refs.config_functions is None or template is None or not dataclasses.is_dataclass(config_cls):
        return None
    code = getattr(describe, "__code__", None)
    if (
        code is None
        or describe.__closure__
        or (code.co_code, code.co_names, code.co_consts)
        != (
            template.__code__.co_code,
            template.__code__.co_names,
            template.__code__.co_consts,
        )
    ):
        return None
    functions = _config_functions(config_cls)
    if functions[:3] != refs.config_functions[:3] or not _checks_only(functions[3]):
        return None
    fields = dataclasses.fields(config_cls)
    # a default made by a factory may differ from call to call (`default_factory=torch.get_default_dtype`), and
    # describe() compares with a fresh default config: its description is then not a function of the values
    if not fields or any(field.default_factory is not dataclasses.MISSING for field in fields):
        return None
    names = [field.name for field in fields]
    if len(names) == 1:
        single = operator.attrgetter(names[0])
        return lambda config: (single(config),)
    return operator.attrgetter(*names)


def learn_eager_infer(eager_module: Any) -> None:
    """Note stock's ``TorchEagerBackend._infer`` (``with torch.no_grad(): return self._orig_module(...)``)."""
    cls = getattr(eager_module, "TorchEagerBackend", None)
    infer = getattr(cls, "__dict__", {}).get("_infer")
    describe = getattr(cls, "__dict__", {}).get("describe")
    backend_module = sys.modules[_names.BACKEND]
    config_functions = _config_functions(getattr(backend_module, "BackendConfig", None))
    if (
        _aitunes_own(describe, eager_module, "TorchEagerBackend.describe")
        and config_functions[0] is not None
        and all(f is None or _aitunes_own(f, backend_module, f"BackendConfig.{f.__name__}") for f in config_functions)
    ):
        refs = state().path_refs
        refs.eager_describe = describe
        refs.config_functions = config_functions
    if _aitunes_own(infer, eager_module, "TorchEagerBackend._infer"):
        torch = sys.modules["torch"]
        guards = _grad_guards(torch)
        eager = None
        if guards is not None:  # else torch.no_grad or what it calls is not torch's own: stock's _infer runs it
            eager = _EagerPart(
                infer=infer,
                grad_enabled=torch.is_grad_enabled,
                set_grad_enabled=torch._C._set_grad_enabled,
                grad_guards=guards,
            )
        _into_native(eager=eager, module_call=learn_module_call(torch))


def learn_module_call(torch: Any) -> _ModuleCallPart | None:
    """What the native path checks before it calls TorchEager's module's ``forward`` without ``nn.Module.__call__``
    (only where that call would do nothing else: torch's ``__call__`` and ``_call_impl``, nothing compiled, not
    tracing, no hook on the module or global; ``_core._CallPath.call_module``); None leaves the call to torch, as where
    a wrapper was put on torch's call before the patch."""
    module_module = sys.modules.get("torch.nn.modules.module")
    is_tracing = getattr(torch._C, "_is_tracing", None) or getattr(torch._C, "_get_tracing_state", None)
    module_cls = torch.nn.Module
    if module_module is None or is_tracing is None:
        return None
    call, call_impl = attr(module_cls, "__call__"), attr(module_cls, "_call_impl")
    if not (
        _aitunes_own(call, module_module, "Module._wrapped_call_impl")
        and _aitunes_own(call_impl, module_module, "Module._call_impl")
    ):
        return None
    return _ModuleCallPart(call=call, call_impl=call_impl, globals=vars(module_module), is_tracing=is_tracing)


_NOT_AITUNES = object()  # stands for a function that is not AITune's own: no function found is it


def _own(cls: type, name: str, module: Any, class_name: str) -> Any:
    """``cls.name`` where it is AITune's own function, else :data:`_NOT_AITUNES`."""
    function = attr(cls, name)
    return function if _aitunes_own(function, module, f"{class_name}.{name}") else _NOT_AITUNES


def _aitunes_own(function: Any, module: Any, qualname: str) -> bool:
    """Whether `function` is AITune's (or torch's) own `qualname`, defined in `module`'s file: not a wrapper put on it
    before the patch (``functools.wraps`` copies a function's name, not its code), a mock or a replacement."""
    code = getattr(function, "__code__", None)
    return (
        getattr(function, "__qualname__", None) == qualname
        and code is not None
        and code.co_filename == getattr(module, "__file__", None)
    )


def _annotation(part: _InferPart, message: str) -> Any:
    """``nvtx.annotate(message, color, domain)``: one object per message while ``nvtx.annotate`` is nvtx's (kept in the
    part's ``annotations``, made by its ``annotate_cls[0]``)."""
    nvtx_module = part.nvtx_module
    annotate = nvtx_module.nvtx.annotate
    color = part.nvtx_decorator.color
    annotations = part.annotations
    if annotate is not part.annotate_cls[0]:
        if not _is_nvtx_annotate(annotate):
            return annotate(message=message, color=color, domain=nvtx_module.NVTX_ANNOTATION_DOMAIN)
        annotations.clear()
        part.annotate_cls[0] = annotate
    annotation = annotations.get(message)
    if annotation is None:
        if len(annotations) >= _MAX_NVTX:
            annotations.clear()
        domain = nvtx_module.NVTX_ANNOTATION_DOMAIN
        annotation = annotations[message] = annotate(message=message, color=color, domain=domain)
    return annotation


def _is_nvtx_annotate(annotate: Any) -> bool:
    """Whether `annotate` is nvtx's own class (its objects hold nothing per range, so one serves many)."""
    module = getattr(annotate, "__module__", "")
    return isinstance(annotate, type) and module in ("nvtx.nvtx", "nvtx")


# the call path's own functions that hold a metadata between building it and looking it up (in the native call they
# make): a switch waits for calls in them (`_switch.codes`)
CALL_CODE = (_forward, _tuned_call)


def call_steps() -> dict[str, Any]:
    """The call path's steps, for the benchmark's per-step timings (``bench/call_steps.py``): ``forward``
    (``Module._forward``: `self, wrapped, instance, args, kwargs`), ``call`` (``TunedModule.__call__``: `tuned, args,
    kwargs`), ``binder`` (`signature, args, kwargs` -> the plan (`_BindPlan`) of that call shape, or None) and
    ``infer_body`` (``Backend.infer``: `backend, args, kwargs`)."""
    tuned = state().call_path_parts["tuned"]
    native = state().native
    return {"forward": _forward, "call": native.call, "binder": tuned.binder.plan, "infer_body": native.infer}
