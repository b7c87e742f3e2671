"""The call path's guards and caches (``patch/_call_path.py``, ``rust/patch/guard.rs`` and ``caches.rs``), in process
and without AITune: each says "changed" for every kind of change, and "unchanged" again once the original is back."""

from __future__ import annotations

import dataclasses
import sys
import threading
import types

import pytest
from aitune_fast import _core
from aitune_fast.patch import _call_path, _names, _state


def _module(**names: object) -> types.ModuleType:
    module = types.ModuleType("guarded")
    vars(module).update(names)
    return module


def _f() -> None: ...


def _g() -> None: ...


def test_a_name_guard_sees_every_change_of_its_names():
    module = _module(f=_f, g=_g, other=1)
    guard = _core._NameGuard(vars(module), ("f", "g"))
    assert guard.holds() and guard.holds()  # the second call takes the version's fast path
    module.other = 2  # another name: the dict's version moves, the names are compared again
    assert guard.holds()
    module.f = _g
    assert not guard.holds() and not guard.holds()
    module.f = _f
    assert guard.holds()
    del module.g
    assert not guard.holds()
    vars(module).update(g=_g)
    assert guard.holds()
    vars(module).pop("f")
    assert not guard.holds()
    vars(module).setdefault("f", _f)
    assert guard.holds()
    vars(module).clear()
    assert not guard.holds()


def test_a_name_guard_sees_a_change_made_on_another_thread():
    module = _module(f=_f)
    guard = _core._NameGuard(vars(module), ("f",))
    assert guard.holds()
    worker = threading.Thread(target=lambda: setattr(module, "f", _g))
    worker.start()
    worker.join()
    assert not guard.holds()


def test_a_class_guard_sees_changes_on_the_class_and_its_bases():
    class Base:
        def run(self) -> None: ...

    class Child(Base):
        pass

    guard = _core._ClassGuard(Child, ("run",))
    original = Base.run
    assert guard.holds() and guard.holds()
    Base.run = lambda self: None  # type: ignore[method-assign]
    assert not guard.holds()
    Base.run = original  # type: ignore[method-assign]
    assert guard.holds()
    Child.run = original  # type: ignore[method-assign]  # the same function, now the class's own: still it
    assert guard.holds()
    Child.run = staticmethod(original)  # type: ignore[method-assign,assignment]
    assert not guard.holds()
    del Child.run
    assert guard.holds()


def _signature_class():
    class Signature:
        def normalize(self, args, kwargs):
            if len(args) != 1 or set(kwargs) - {"mask"}:
                raise TypeError("does not bind")
            return types.SimpleNamespace(args=args, kwargs=kwargs, arguments={"x": args[0], **kwargs})

    return Signature


def _bind_cache(signature_cls, compile=_call_path.compile_binder):
    guard = _core._ClassGuard(signature_cls, ("normalize",))
    return _core._BindCache(signature_cls=signature_cls, guard=guard, compile=compile)


def test_the_bind_cache_plans_only_shapes_that_repeat_and_bind():
    cls = _signature_class()
    cache, signature = _bind_cache(cls), cls()
    assert cache.plan(signature, (1,), {}) is None  # first call: stock binds
    plan = cache.plan(signature, (1,), {})
    assert plan is not None and cache.plan(signature, (5,), {}) is plan
    assert plan((5,), {}) == ((5,), {}, {"x": 5})
    assert cache.plan(signature, (1, 2), {}) is None and cache.plan(signature, (1, 2), {}) is None  # does not bind


def test_the_bind_cache_follows_normalize_as_the_class_and_the_object_hold_it():
    cls = _signature_class()
    cache, signature = _bind_cache(cls), cls()
    cache.plan(signature, (1,), {})
    assert cache.plan(signature, (1,), {}) is not None
    original = cls.normalize
    cls.normalize = lambda self, args, kwargs: original(self, args, kwargs)
    assert cache.plan(signature, (1,), {}) is None  # a wrapper on the class: its normalize binds
    cls.normalize = original
    assert cache.plan(signature, (1,), {}) is not None
    signature.normalize = original.__get__(signature)
    assert cache.plan(signature, (1,), {}) is None  # its own normalize
    del signature.normalize
    assert cache.plan(signature, (1,), {}) is not None

    class Sub(cls):  # type: ignore[misc,valid-type]
        pass

    assert cache.plan(Sub(), (1,), {}) is None and cache.plan(Sub(), (1,), {}) is None  # not the class learnt


def test_the_bind_cache_keeps_signatures_apart_by_identity():
    cls = _signature_class()
    cls.__eq__ = lambda self, other: True  # type: ignore[method-assign,assignment]
    cls.__hash__ = lambda self: 0  # type: ignore[method-assign,assignment]
    cache, first, second = _bind_cache(cls), cls(), cls()
    cache.plan(first, (1,), {})
    assert cache.plan(first, (1,), {}) is not None
    assert cache.plan(second, (1,), {}) is None  # equal, but another signature: its own first call


def test_the_bind_cache_binds_as_stock_where_compiling_hits_the_recursion_limit():
    cls = _signature_class()
    calls = []

    def compile(signature, n_args, names):
        calls.append(n_args)
        if len(calls) == 1:
            raise RecursionError
        return _call_path.compile_binder(signature, n_args, names)

    cache, signature = _bind_cache(cls, compile), cls()
    cache.plan(signature, (1,), {})
    assert cache.plan(signature, (1,), {}) is None  # compile failed: stock binds, nothing kept
    assert cache.plan(signature, (1,), {}) is not None and calls == [1, 1]


def test_the_bind_cache_caps_its_shapes():
    cls = _signature_class()
    cache, signature = _bind_cache(cls), cls()
    cache.plan(signature, (1,), {})
    assert cache.plan(signature, (1,), {}) is not None
    for n in range(2, 2 + 64):  # shapes that never bind fill the cap; the kept plan goes with the rest
        cache.plan(signature, tuple(range(n)), {})
    assert cache.plan(signature, (1,), {}) is None


@dataclasses.dataclass
class _Config:
    level: int = 1

    def describe(self) -> str:
        return f"level={self.level}"

    def _get_changed_fields(self) -> dict:
        return {}

    def _default_describe_fields(self) -> tuple:
        return ()


class _Backend:
    def __init__(self, config: _Config) -> None:
        self._config = config
        self.calls = 0

    def describe(self) -> str:
        self.calls += 1
        return f"{type(self).__name__}({self._config.describe()})"


def _describe_cache(decided: list):
    def decide(backend_cls, config_cls):
        decided.append((backend_cls, config_cls))
        guards = (
            _core._ClassGuard(backend_cls, ("describe",)),
            _core._ClassGuard(config_cls, _call_path._CONFIG_DESCRIBE),
        )
        return guards, lambda config: (config.level,)

    return _core._DescribeCache(
        decide=decide,
        config_functions=_call_path._CONFIG_DESCRIBE,
        immutable=frozenset((int, str, float, bool, type(None))),
    )


def test_the_describe_cache_keeps_a_description_by_classes_and_values():
    decided: list = []
    cache = _describe_cache(decided)
    backend = _Backend(_Config(1))
    assert [cache.describe(backend) for _ in range(3)] == ["_Backend(level=1)"] * 3
    assert backend.calls == 1 and len(decided) == 1
    other = _Backend(_Config(2))
    assert cache.describe(other) == "_Backend(level=2)" and other.calls == 1
    assert cache.describe(_Backend(_Config(True))) == "_Backend(level=True)"  # equal to 1, printed apart


def test_the_describe_cache_calls_describe_where_an_object_or_value_decides():
    cache = _describe_cache([])
    backend = _Backend(_Config(1))
    cache.describe(backend)
    backend.describe = lambda: "own"  # type: ignore[method-assign]
    assert cache.describe(backend) == "own"
    labelled = _Backend(_Config(1))
    labelled._config.describe = lambda: "labelled"  # type: ignore[method-assign]
    assert cache.describe(labelled) == "_Backend(labelled)"
    mutable = _Backend(_Config([1]))  # type: ignore[arg-type]
    assert cache.describe(mutable) == cache.describe(mutable) and mutable.calls == 2


def test_the_describe_cache_decides_again_when_a_watched_function_is_replaced():
    decided: list = []
    cache = _describe_cache(decided)
    backend = _Backend(_Config(1))
    cache.describe(backend)
    original = _Config.describe
    try:
        _Config.describe = lambda self: "replaced"  # type: ignore[method-assign]
        assert cache.describe(backend) == "_Backend(replaced)" and len(decided) == 2
    finally:
        _Config.describe = original  # type: ignore[method-assign]
    assert cache.describe(backend) == "_Backend(level=1)" and len(decided) == 3


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_the_describe_cache_keeps_signed_zeros_apart(zero):
    cache = _describe_cache([])
    for value in (0.0, -0.0):
        cache.describe(_Backend(_Config(value)))  # type: ignore[arg-type]
    assert cache.describe(_Backend(_Config(zero))) == f"_Backend(level={zero})"  # type: ignore[arg-type]


def test_an_entry_without_its_part_or_stack_does_nothing_and_says_so():
    """Each entry of ``_CallPath`` returns ``_STOCK_STEP`` before doing anything (its shim then runs stock's step)
    where its part is not learnt (a shim kept past an unpatch meets a path without it), and where its thread has less
    C stack left than the native path may need; with its part and room, it does its step."""
    empty = _core._CallPath()
    assert [entry(object(), (), {}) for entry in (empty.forward, empty.call, empty.infer)] == [_core._STOCK_STEP] * 3

    class Proxy:
        def run(self) -> None: ...

    guard = _core._ClassGuard(Proxy, ("run",))
    path = _core._CallPath(forward=_core._ForwardPart(init_state=0, nn_setattr=0, stock_swap=0, guard=guard))
    results: list = []
    previous = threading.stack_size(128 * 1024)
    try:
        worker = threading.Thread(target=lambda: results.append(path.forward(object(), (), {})))
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    assert results == [_core._STOCK_STEP]
    with pytest.raises(AttributeError, match="_self_state"):  # it ran: it reads the proxy's state first
        path.forward(object(), (), {})


def test_a_jit_swap_shim_without_the_patchs_state_runs_stocks_method(monkeypatch):
    """``PatchedModule``'s swap shims read what they use from the patched period's state; a shim called without it
    (kept past an unpatch, or where the module's class has its own ``__setattr__``) calls the class's own method."""
    calls: list = []

    class PatchedModule:
        def _restore_original_forward(self) -> None:
            calls.append(("restore", self))

        def _proxy_forward(self) -> None:
            calls.append(("proxy", self))

    jit_module = types.ModuleType(_names.JIT_MODULE)
    jit_module.PatchedModule = PatchedModule  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _names.JIT_MODULE, jit_module)
    assert _state.state().path_refs.nn_setattr is None  # the pytest process is not patched
    proxy = types.SimpleNamespace(__wrapped__=types.SimpleNamespace())
    assert _call_path._jit_restore(proxy) is None and _call_path._jit_proxy(proxy) is None
    assert calls == [("restore", proxy), ("proxy", proxy)]


def test_the_describe_cache_follows_a_config_changed_in_place():
    """A description is given again without its key only for a config holding the very objects it was made from:
    a field set to another value (an equal one of another type too) is described anew; more configs than the memo
    keeps alternate with the right descriptions."""
    cache = _describe_cache([])
    backend = _Backend(_Config(1))
    assert cache.describe(backend) == "_Backend(level=1)"
    backend._config.level = 2
    assert cache.describe(backend) == "_Backend(level=2)"
    backend._config.level = True
    assert cache.describe(backend) == "_Backend(level=True)"
    backends = [_Backend(_Config(f"v{i}")) for i in range(6)]
    for _ in range(3):
        assert [cache.describe(b) for b in backends] == [f"_Backend(level=v{i})" for i in range(6)]
    assert sum(b.calls for b in backends) == 6  # each described once, then kept
