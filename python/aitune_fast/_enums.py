"""The enums shared by the Rust core and the Python layer."""

from enum import Enum, IntEnum


class ObjectType(IntEnum):
    """How a locator step enters its container."""

    SEQUENCE = 0
    DICT = 1
    DATACLASS = 2
    USER_TYPE = 3


class InfoLevel(Enum):
    """How much `describe()` shows: paths only, paths and shapes, or everything."""

    SHORT = 1
    MEDIUM = 2
    FULL = 3
