"""``patch/_quiescence.py``'s helpers in process, no AITune: which code objects count as a function's own (what a
switch waits for threads to leave), and lookups that never trust a foreign object. The gates and the wait for calls
in flight are tested in ``test_gates.py``."""

from __future__ import annotations

import functools
import types

from aitune_fast.patch import _call_path
from aitune_fast.patch._quiescence import code_chain, foreign_attr


def _inner(x: int) -> int:
    return x


def test_a_plain_function_is_its_own_code():
    assert code_chain(_inner) == [_inner.__code__]


def test_another_decorators_wrapper_is_not_the_functions_code():
    """A decorator's wrapper code is shared by every function it decorates: waiting on it would wait on all of them."""

    @functools.wraps(_inner)
    def wrapper(*args):
        return _inner(*args)

    assert code_chain(wrapper) == [_inner.__code__]


def test_aitune_fasts_own_wrappers_count_with_the_function_they_wrap():
    ours = types.FunctionType(_call_path._tuned_call.__code__, {})  # a function whose code is the patch's
    ours.__wrapped__ = _inner  # type: ignore[attr-defined]
    assert code_chain(ours) == [_call_path._tuned_call.__code__, _inner.__code__]


def test_methods_and_staticmethods_reach_their_function():
    class Owner:
        def method(self) -> None: ...

    assert code_chain(Owner().method) == [Owner.method.__code__]
    assert code_chain(staticmethod(_inner)) == [_inner.__code__]


def test_a_cycle_of_wrappers_ends():
    def looping() -> None: ...

    looping.__wrapped__ = looping  # type: ignore[attr-defined]
    assert code_chain(looping) == [looping.__code__]


class _Hostile:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} here")


def test_a_foreign_objects_failing_lookup_means_nothing_found():
    assert foreign_attr(_Hostile(), "__wrapped__") is None
    assert code_chain(_Hostile()) == []
    assert foreign_attr(_inner, "__code__") is _inner.__code__
