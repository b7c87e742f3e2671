"""TensorSpec: the shape, dtype and learned dynamic/batch axes of one tensor."""

from aitune_fast._core import TensorSpec
from aitune_fast._enums import InfoLevel

__all__ = ["InfoLevel", "TensorSpec"]
