"""Scoped key-value settings shared by the library, such as the batch size of the current call."""

import threading
from typing import Any, Literal

BATCH_SIZE_KEY = "batch_size"
"""The key of the batch size in ``global_context``: ``from_inputs`` and ``from_outputs`` read it when no
``batch_size`` is given (AITune's ``tune()`` sets it)."""


class GlobalContext:
    """A stack of settings: ``with global_context:`` opens a scope whose changes vanish on exit.

    Example:
        >>> global_context.set(BATCH_SIZE_KEY, 8)
        >>> with global_context:
        ...     global_context[BATCH_SIZE_KEY] = 2
        ...     assert global_context.get(BATCH_SIZE_KEY) == 2
        >>> global_context.get(BATCH_SIZE_KEY)
        8
    """

    def __init__(self) -> None:
        """An empty context: one scope, no values."""
        self._data_stack: list[dict[Any, Any]] = [{}]
        self._lock = threading.Lock()

    def __enter__(self) -> "GlobalContext":
        with self._lock:
            self._data_stack.append(dict(self._data_stack[-1]))
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> Literal[False]:
        with self._lock:
            self._data_stack.pop()
        return False

    def set(self, key: Any, value: Any) -> None:
        """Set `key` in the innermost scope."""
        with self._lock:
            self._data_stack[-1][key] = value

    __setitem__ = set

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of `key` in the innermost scope that has it, else `default`."""
        with self._lock:
            for scope in reversed(self._data_stack):
                if key in scope:
                    return scope[key]
        return default

    def __getitem__(self, key: Any) -> Any:
        with self._lock:
            for scope in reversed(self._data_stack):
                if key in scope:
                    return scope[key]
        raise KeyError(key)

    def clear(self) -> None:
        """Drop every scope and every value."""
        with self._lock:
            self._data_stack = [{}]


global_context = GlobalContext()
"""The process-wide context, shared by every thread (pass ``batch_size=`` explicitly in multi-threaded code)."""

# The context whose batch size the Rust core reads on every call: ``global_context``, or AITune's
# ``aitune.global_context.global_context`` while ``aitune_fast.patch_aitune()`` is active (the
# core reads ``_data_stack`` of ``_source[0]``, a layout both classes share).
_source: list[Any] = [global_context]

__all__ = ["BATCH_SIZE_KEY", "GlobalContext", "global_context"]
