"""The Enum classes whose members ``to_json``/``to_dict`` encode and ``from_json``/``from_dict`` decode."""

import enum
import threading
from collections.abc import Iterable

from aitune_fast._core import _safe_enum_table

# {"module.QualName": class}: the core's own dict, which the codecs read (one lookup per value, under the GIL)
_TABLE: dict[str, type[enum.Enum]] = _safe_enum_table()
# serializes changes, so that checking a name and adding the class are one step
_LOCK = threading.Lock()


def _qualified_name(cls: type[enum.Enum]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _checked(classes: Iterable[type[enum.Enum]], what: str) -> list[type[enum.Enum]]:
    if isinstance(classes, (type, str, bytes)):
        raise TypeError(f"{what} takes a list of Enum classes, not {classes!r}")
    out = list(classes)
    for cls in out:
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise TypeError(f"{what} takes Enum classes, not {cls!r}")
        name = (getattr(cls, "__module__", None), getattr(cls, "__qualname__", None))
        if not all(isinstance(n, str) for n in name):
            raise TypeError(f"{what}: {cls!r} has no str __module__ and __qualname__ to be named by")
    return out


def add_safe_enums(classes: Iterable[type[enum.Enum]]) -> None:
    """Allow the members of these Enum classes in ``to_json()``/``from_json()`` and ``to_dict()``/``from_dict()``.

    A member is written as its class's qualified name and its own name, ``{"$enum": ["mymodule.Color", "RED"]}``,
    and read back only while its class is allowed: the reader looks the name up in this list and never imports a
    module a document names. Call it where you write and where you read, before reading:

    ```python
    aitune_fast.add_safe_enums([Color, Mode])
    SampleMetadata.from_json(text)
    ```

    In the spirit of ``torch.serialization.add_safe_globals``. The list is process-wide and applies to every
    thread; changes are atomic (a reader sees the list before or after a change). Allowing a class twice is
    harmless; a class whose qualified name another allowed class holds already is refused with a ``ValueError``
    (a document could not tell them apart): ``remove_safe_enums`` the other first.

    Raises:
        TypeError: if an item is not an Enum class.
        ValueError: if another class of the same qualified name is allowed.
    """
    checked = _checked(classes, "add_safe_enums")
    with _LOCK:
        names: dict[str, type[enum.Enum]] = {}
        for cls in checked:
            name = _qualified_name(cls)
            held = names.get(name, _TABLE.get(name))
            if held is not None and held is not cls:
                raise ValueError(
                    f"add_safe_enums: another class named {name!r} is allowed already ({held!r}); "
                    "documents name classes by qualified name, so remove_safe_enums that one first"
                )
            names[name] = cls
        _TABLE.update(names)


def remove_safe_enums(classes: Iterable[type[enum.Enum]]) -> None:
    """Stop allowing the members of these Enum classes (classes not allowed are ignored).

    Documents naming them are refused again by ``from_json``/``from_dict``, and ``to_json``/``to_dict`` raise for
    their members. Process-wide, like ``add_safe_enums``.
    """
    checked = _checked(classes, "remove_safe_enums")
    with _LOCK:
        for name in [name for name, held in _TABLE.items() if any(held is cls for cls in checked)]:
            del _TABLE[name]


def get_safe_enums() -> list[type[enum.Enum]]:
    """The Enum classes allowed now, in the order they were added."""
    with _LOCK:
        return list(_TABLE.values())
