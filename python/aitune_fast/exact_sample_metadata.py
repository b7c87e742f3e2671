"""ExactSampleMetadata: metadata that matches only identical shapes, for bucketing samples."""

from aitune_fast._core import ExactSampleMetadata

__all__ = ["ExactSampleMetadata"]
