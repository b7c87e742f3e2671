"""The call path's binding plans (``_call_path.compile_binder``, ``_core._BindPlan``) against AITune's
``ForwardSignature.normalize``.

A tuned call binds twice (``TunedModule.__call__`` then ``safe_call_backend``): the plan of a call shape must give
the first bind's ``args`` and ``kwargs`` and the second bind's ``arguments``, the same objects in the same order,
for every kind of parameter; a shape that does not bind gets no plan (the call path then runs ``normalize``
itself, so the error is AITune's). Hand-written shapes and generated signatures; runs in this process on AITune's
forward_signature module alone (the stack checks in a child, where a crash is a failure and not the end of the run).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
from aitune_fast import _core
from aitune_fast._reference import load_reference
from aitune_fast.patch import _call_path
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def forward_signature():
    load_reference()  # the parent packages as stubs: forward_signature imports nothing heavy
    return importlib.import_module("aitune.torch.module.forward_signature")


@pytest.fixture(scope="module")
def signature_of(forward_signature):
    return forward_signature.ForwardSignature.from_callable


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
    _assert_binds_as_normalize_twice(signature, n, names)


def _assert_binds_as_normalize_twice(signature, n, names):
    binder = _call_path.compile_binder(signature, n, names)
    assert type(binder) is _core._BindPlan
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
    assert type(binder) is _core._BindPlan  # names are only ever dict keys: nothing is compiled from text


def test_a_shape_is_compiled_when_it_repeats_not_on_its_first_call(signature_of):
    """A call shape's first call binds as stock does (no binder): compiling costs more than one stock bind, so calls
    whose keyword names are new every time would be slower than stock's. Its second call compiles it."""
    signature = signature_of(f_varkw)
    cls = type(signature)
    cache = _core._BindCache(
        signature_cls=cls, guard=_core._ClassGuard(cls, ("normalize",)), compile=_call_path.compile_binder
    )
    args, kwargs = (1,), {"mask": 2}
    assert cache.plan(signature, args, kwargs) is None  # first call: stock's bind
    binder = cache.plan(signature, args, kwargs)
    assert binder is not None and cache.plan(signature, args, kwargs) is binder
    assert cache.plan(signature, args, {"other": 3}) is None  # a new shape: stock's bind again


_KINDS = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD")
_NAMES = ("a", "b", "c", "d", "e", "f")


@st.composite
def _signatures_and_shapes(draw, forward_signature):
    """A ForwardSignature of up to 6 parameters of any kinds (in an order inspect accepts) and a call shape: up to 5
    positional arguments and up to 5 keyword names, parameter names or others, in any order."""
    kinds = sorted(draw(st.lists(st.integers(0, len(_KINDS) - 1), max_size=len(_NAMES))))
    assume(kinds.count(2) <= 1 and kinds.count(4) <= 1)
    names = draw(st.permutations(_NAMES))[: len(kinds)]
    parameters = tuple(
        forward_signature.ForwardParameter(name, _KINDS[kind], draw(st.booleans()) and kind not in (2, 4))
        for name, kind in zip(names, kinds, strict=True)
    )
    try:
        signature = forward_signature.ForwardSignature(parameters)
    except ValueError:  # a parameter without a default after one with: inspect refuses the signature
        assume(False)
    n = draw(st.integers(0, 5))
    keywords = draw(st.lists(st.sampled_from(_NAMES + ("g", "h'i")), unique=True, max_size=5))
    return signature, n, tuple(keywords)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_generated_signatures_bind_as_normalize_twice_or_not_at_all(forward_signature, data):
    """For generated signatures and call shapes: where binding twice succeeds, the plan gives its values; where it
    raises TypeError, there is no plan (the call path then runs normalize, whose error the user sees)."""
    signature, n, names = data.draw(_signatures_and_shapes(forward_signature))
    args, kwargs = _values(n, names)
    try:
        first = signature.normalize(args, kwargs)
        signature.normalize(first.args, first.kwargs)
    except TypeError:
        assert _call_path.compile_binder(signature, n, names) is None
        return
    _assert_binds_as_normalize_twice(signature, n, names)


@pytest.mark.parametrize(
    ("specs", "error"),
    [
        (((True,), {}, {}), TypeError),  # a bool is not an index
        (((1.0,), {}, {}), TypeError),
        ((([0],), {}, {}), TypeError),
        (((), {"x": b"x"}, {}), TypeError),
        (((), {}, {"x": ("x", None)}), TypeError),
        (((), {}, {type("Name", (str,), {})("x"): "x"}), TypeError),  # keys are exact str
        ((((0,),), [], {}), TypeError),  # the normalized kwargs are a dict
        (((-1,), {}, {}), OverflowError),  # no negative indexes
    ],
)
def test_a_plan_refuses_specs_it_cannot_read(specs, error):
    with pytest.raises(error):
        _core._BindPlan(*specs)


def test_a_plan_called_with_another_shape_raises_instead_of_reading_past_the_arguments():
    plan = _core._BindPlan((0, 3), {"k": "k"}, {"x": 0})
    with pytest.raises(IndexError):
        plan((1, 2), {"k": 3})
    with pytest.raises(KeyError):
        plan((1, 2, 3, 4), {"j": 3})
    assert plan((1, 2, 3, 4), {"k": 5}) == ((1, 4), {"k": 5}, {"x": 1})


def test_deep_plans_raise_recursion_error_on_any_thread_stack():
    """A plan's specs nested deeper than the stack allows are refused when read (RecursionError); a plan read on the
    main thread and used on a 128 KiB thread refuses there too, instead of overflowing its C stack."""
    code = textwrap.dedent(
        """
        import threading
        from aitune_fast import _core

        def nested(depth):
            spec = 0
            for _ in range(depth):
                spec = (spec,)
            return spec

        try:
            _core._BindPlan((nested(1_000_000),), {}, {})
        except RecursionError as exc:
            print("read:", type(exc).__name__)
        plan = _core._BindPlan((nested(5_000),), {}, {})
        value, depth = plan((7,), {})[0], 0
        while type(value) is tuple:
            value, depth = value[0], depth + 1
        assert (value, depth) == (7, 5_001), (value, depth)
        out = []

        def use():
            try:
                plan((7,), {})
                out.append("ok")
            except RecursionError as exc:
                out.append(type(exc).__name__)

        threading.stack_size(128 * 1024)
        thread = threading.Thread(target=use)
        thread.start()
        thread.join()
        print("used:", out[0])
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["read: RecursionError", "used: RecursionError"], result.stdout
