"""The call path's compiled binders (``_call_path.compile_binder``) against AITune's ``ForwardSignature.normalize``.

A tuned call binds twice (``TunedModule.__call__`` then ``safe_call_backend``): the binder of a call shape must give
the first bind's ``args`` and ``kwargs`` and the second bind's ``arguments``, the same objects in the same order,
for every kind of parameter; a shape that does not bind gets no binder (the call path then runs ``normalize``
itself, so the error is AITune's). Runs in this process on AITune's forward_signature module alone.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
from aitune_fast._reference import load_reference
from aitune_fast.patch import _call_path


@pytest.fixture(scope="module")
def signature_of():
    load_reference()  # the parent packages as stubs: forward_signature imports nothing heavy
    module = importlib.import_module("aitune.torch.module.forward_signature")
    return module.ForwardSignature.from_callable


def f_plain(x, mask=None, cache=None): ...
def f_posonly(x, y, /, z=None): ...
def f_varargs(x, *rest, scale=None): ...
def f_varkw(x, mask=None, **extra): ...
def f_kwonly(x, *, cache_position=None, past=None): ...
def f_everything(a, /, b, c=None, *rest, d, e=None, **extra): ...


CASES = [
    (f_plain, 1, ()),
    (f_plain, 3, ()),
    (f_plain, 1, ("cache",)),
    (f_plain, 0, ("cache", "x", "mask")),
    (f_posonly, 2, ()),
    (f_posonly, 2, ("z",)),
    (f_varargs, 4, ()),
    (f_varargs, 2, ("scale",)),
    (f_varkw, 1, ("zeta", "alpha", "mask")),
    (f_kwonly, 1, ("past", "cache_position")),
    (f_everything, 5, ("d", "q", "e")),
    (f_everything, 1, ("d", "b")),
]
FAILING = [
    (f_plain, 0, ()),
    (f_plain, 4, ()),
    (f_plain, 1, ("x",)),
    (f_plain, 1, ("bogus",)),
    (f_posonly, 1, ("y",)),
    (f_kwonly, 2, ()),
    (f_everything, 2, ()),
]


def _values(n, names):
    return tuple(object() for _ in range(n)), {name: object() for name in names}


@pytest.mark.parametrize(("func", "n", "names"), CASES)
def test_binder_gives_what_binding_twice_gives(signature_of, func, n, names):
    signature = signature_of(func)
    binder = _call_path.compile_binder(signature, n, names)
    assert binder is not None
    args, kwargs = _values(n, names)
    first = signature.normalize(args, kwargs)
    second = signature.normalize(first.args, first.kwargs)
    call_args, call_kwargs, arguments = binder(args, kwargs)
    assert type(call_args) is tuple and type(call_kwargs) is dict and type(arguments) is dict
    assert [id(v) for v in call_args] == [id(v) for v in first.args]
    assert list(call_kwargs) == list(first.kwargs)
    assert all(call_kwargs[k] is first.kwargs[k] for k in call_kwargs)
    assert list(arguments) == list(second.arguments)
    for key, value in second.arguments.items():
        got = arguments[key]
        assert type(got) is type(value)
        if isinstance(value, tuple):
            assert [id(v) for v in got] == [id(v) for v in value]
        elif isinstance(value, dict):
            assert list(got) == list(value) and all(got[k] is value[k] for k in value)
        else:
            assert got is value


@pytest.mark.parametrize(("func", "n", "names"), FAILING)
def test_no_binder_where_binding_fails(signature_of, func, n, names):
    signature = signature_of(func)
    args, kwargs = _values(n, names)
    with pytest.raises(TypeError):
        signature.normalize(args, kwargs)
    assert _call_path.compile_binder(signature, n, names) is None


def test_keyword_names_are_quoted_not_evaluated(signature_of):
    signature = signature_of(f_varkw)
    names = ("a'b", 'c"d', "e\\nf", "__import__('os')")
    binder = _call_path.compile_binder(signature, 1, names)
    args, kwargs = _values(1, names)
    _, call_kwargs, arguments = binder(args, kwargs)
    assert list(call_kwargs) == list(names) and list(arguments["extra"]) == list(names)
    assert inspect.isfunction(binder)


def test_a_shape_is_compiled_when_it_repeats_not_on_its_first_call(signature_of, monkeypatch):
    """A call shape's first call binds as stock does (no binder): compiling costs more than one stock bind, so calls
    whose keyword names are new every time would be slower than stock's. Its second call compiles it."""
    signature = signature_of(f_varkw)
    monkeypatch.setattr(_call_path._refs, "normalize", type(signature).normalize)
    args, kwargs = (1,), {"mask": 2}
    assert _call_path._binder(signature, args, kwargs) is None  # first call: stock's bind
    binder = _call_path._binder(signature, args, kwargs)
    assert binder is not None and _call_path._binder(signature, args, kwargs) is binder
    assert _call_path._binder(signature, args, {"other": 3}) is None  # a new shape: stock's bind again
