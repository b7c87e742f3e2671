"""Which ``UserDict`` subclasses answer ``.items()`` with ``self.data.items()`` and nothing else.

transformers' ``BatchEncoding`` (a ``UserDict``) defines ``def items(self): return self.data.items()``. The
reference walks a ``UserDict`` through ``.items()``; for such a class, where ``self.data`` is the instance's
own exact dict, the call runs no other Python code and returns a view of that dict, so the Rust walk may read
the dict instead of calling ``items`` (as it already does for a plain ``UserDict``: only tracers and
profilers could tell). The Rust core calls ``data_items_code`` once per class classification; this module is
not part of the public API.
"""

from __future__ import annotations

import inspect
from typing import Any


def _template(self):  # noqa: ANN001, ANN202 - the body the walk recognises
    return self.data.items()


_TEMPLATE = _template.__code__
# a code object whose call could do more than run its body once with ``self`` bound
_UNSAFE_FLAGS = (
    inspect.CO_VARARGS
    | inspect.CO_VARKEYWORDS
    | inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
)


class GetattrHook:
    """A class with ``__getattr__`` (and ``object``'s ``__getattribute__``): the Rust core reads its
    ``tp_getattro`` slot, CPython's ``slot_tp_getattr_hook``, which then runs the generic lookup first."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _lookup(cls: type, name: str) -> Any:
    """What CPython's type lookup finds for ``name`` in ``cls``'s MRO (the class dicts' own entry)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def is_data_items(code: Any) -> bool:
    """Whether ``code`` is the code of ``def items(self): return self.data.items()`` (any names for the
    function and its argument, any docstring): the same instructions on the same names, one positional
    argument, no closure, a plain function."""
    return (
        type(code) is type(_TEMPLATE)
        and code.co_code == _TEMPLATE.co_code
        and code.co_names == _TEMPLATE.co_names
        and code.co_argcount == 1
        and code.co_posonlyargcount == 0
        and code.co_kwonlyargcount == 0
        and code.co_nlocals == 1
        and not code.co_freevars
        and not code.co_cellvars
        and not code.co_flags & _UNSAFE_FLAGS
        and getattr(code, "co_exceptiontable", b"") == getattr(_TEMPLATE, "co_exceptiontable", b"")
    )


def data_items_code(cls: type) -> tuple[Any, Any] | None:
    """``(function, code)`` when calling ``.items()`` on an instance of ``cls`` runs exactly
    ``return self.data.items()`` with ``self.data`` the instance dict's entry: ``items`` is a plain
    function with that code, ``__getattribute__`` is ``object``'s and no class in the MRO defines ``data``
    (so attribute lookups find the instance dict's entries and never reach a ``__getattr__``). The walk
    still checks per instance that ``items`` is not shadowed, that ``data`` is an exact dict, and that
    the function's ``__code__`` is still ``code``. ``None`` otherwise."""
    if _lookup(cls, "__getattribute__") is not object.__dict__["__getattribute__"]:
        return None
    if any("data" in klass.__dict__ for klass in cls.__mro__):
        return None
    func = _lookup(cls, "items")
    if type(func) is not type(_template):
        return None
    code = func.__code__
    return (func, code) if is_data_items(code) else None
