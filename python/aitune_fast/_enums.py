"""The enums shared by the Rust core and the Python layer."""

from enum import Enum, IntEnum


class ObjectType(IntEnum):
    """How a locator step enters its container."""

    SEQUENCE = 0
    """An index into a list or tuple (``x[0]``)."""
    DICT = 1
    """A key of a dict or mapping (``x["k"]``)."""
    DATACLASS = 2
    """A field of a dataclass (``x.field``)."""
    USER_TYPE = 3
    """An attribute of a type registered with ``Locator.register_user_type`` (``x.attr``)."""


class InfoLevel(Enum):
    """How much `describe()` shows: paths only, paths and shapes, or everything."""

    SHORT = 1
    """One line: the tensors' paths and the other values."""
    MEDIUM = 2
    """Tables: the tensors' paths and shapes, the other values."""
    FULL = 3
    """Tables with everything: the tensors' shapes, min and max shapes and dtypes, the other values (the default)."""
