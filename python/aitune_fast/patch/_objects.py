"""What the patch looks through: the live objects of some classes (:func:`live_instances`), and the plain
containers a value holds (:func:`plan_conversion`, the one walker over them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aitune_fast._core import _gc_objects_but_tuples
from aitune_fast.patch._journal import Rekey, SetItem

# How deep :func:`plan_conversion` looks into nested containers: the root is at depth 0, and a container deeper
# than this is left as it is (AITune keeps its metadata a few levels down: a wrapper's dict of graph specs, a
# checkpoint's list of backends' states).
CONTAINER_DEPTH = 8


def live_instances(wanted: Callable[[type], bool]) -> list[Any]:
    """The live objects whose class `wanted` accepts (asked once per class). Taken through
    ``_core._gc_objects_but_tuples()``, not ``gc.get_objects()``: see there."""
    classes = {cls for cls in _all_classes() if wanted(cls)}
    return [obj for obj in _gc_objects_but_tuples() if type(obj) in classes]


def _all_classes() -> list[type]:
    """Every class there is: ``object`` and its subclasses, however deep."""
    found: list[type] = []
    seen: set[int] = set()
    stack: list[type] = [object]
    while stack:
        cls = stack.pop()
        if id(cls) not in seen:
            seen.add(id(cls))
            found.append(cls)
            stack.extend(type.__subclasses__(cls))
    return found


def _is_container(value: Any) -> bool:
    """Plain containers: tuples (not their subclasses: named tuples are rebuilt by no one), dicts and lists."""
    return type(value) is tuple or isinstance(value, (dict, list))


def _containers_innermost_first(roots: list[Any], is_leaf: Callable[[Any], bool]) -> list[Any]:
    """The containers `roots` hold (themselves included), each once, every one after those it holds (iterative)."""
    order: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(root, 0, False) for root in reversed(roots)]
    while stack:
        value, depth, children_done = stack.pop()
        if children_done:
            order.append(value)
            continue
        if is_leaf(value) or not _is_container(value) or depth > CONTAINER_DEPTH or id(value) in seen:
            continue
        seen.add(id(value))
        stack.append((value, depth, True))
        items = list(value.values()) if isinstance(value, dict) else list(value)
        stack.extend((item, depth + 1, False) for item in reversed(items))
    return order


def plan_conversion(
    roots: list[Any], is_leaf: Callable[[Any], bool], convert: Callable[[Any], Any]
) -> tuple[list[Any], list[Any]]:
    """`roots` with every leaf (`is_leaf`) in the plain containers they hold replaced by ``convert(leaf)``, as
    (the new roots, the edits that make the change).

    Each root is at depth 0; dict keys and values, list items and tuple items are looked at, down to
    :data:`CONTAINER_DEPTH`. Nothing is changed here: dicts and lists are changed by the edits (:class:`SetItem`, or
    one :class:`Rekey` for a dict whose keys change, so that no dict ever holds keys of both kinds), innermost
    containers first; a tuple holding a leaf is rebuilt, and its holder gets the new one. A leaf held twice is
    converted once. Raises RuntimeError (nothing planned) when converting a dict's keys would make two of them
    equal.
    """
    memo: dict[int, tuple[Any, Any]] = {}
    rebuilt: dict[int, Any] = {}  # id(tuple) -> the tuple with its leaves converted (the tuples stay alive in order)
    edits: list[Any] = []

    def new(value: Any) -> Any:
        if is_leaf(value):
            done = memo.get(id(value))
            if done is None:
                done = memo[id(value)] = (value, convert(value))
            return done[1]
        return rebuilt.get(id(value), value) if type(value) is tuple else value

    for container in _containers_innermost_first(roots, is_leaf):
        if type(container) is tuple:
            items = tuple(new(item) for item in container)
            if any(a is not b for a, b in zip(items, container, strict=True)):
                rebuilt[id(container)] = items
        elif isinstance(container, list):
            for index, item in enumerate(list(container)):
                replacement = new(item)
                if replacement is not item:
                    edits.append(SetItem(container, index, item, replacement))
        else:
            edits.extend(_dict_edits(container, new))
    return [new(root) for root in roots], edits


def _dict_edits(mapping: dict, new: Callable[[Any], Any]) -> list[Any]:
    pairs = list(mapping.items())
    new_pairs = [(new(key) if type(key) is not tuple else key, new(value)) for key, value in pairs]
    if all(a[0] is b[0] for a, b in zip(pairs, new_pairs, strict=True)):
        return [SetItem(mapping, k, v, n) for (k, v), (_, n) in zip(pairs, new_pairs, strict=True) if n is not v]
    if len(dict(new_pairs)) != len(new_pairs):
        raise RuntimeError(
            "aitune_fast: converting the metadata keys of an AITune object would make two of them equal; nothing "
            "was changed. Please report this with the keys' describe() output."
        )
    return [Rekey(mapping, pairs, new_pairs)]
