"""SampleMetadata: the description of a call's inputs or outputs that selects a backend."""

from aitune_fast._core import SampleMetadata
from aitune_fast._helpers import batch_tensor

__all__ = ["SampleMetadata", "batch_tensor"]
