"""aitune_fast: a drop-in, Rust-accelerated SampleMetadata for NVIDIA AITune.

Change ``from aitune.torch.module.sample_metadata import SampleMetadata`` to
``from aitune_fast import SampleMetadata``; everything else stays the same.
"""

import torch  # noqa: F401  (loaded first: the extension links against its libraries)

from aitune_fast._config import config
from aitune_fast._core import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec
from aitune_fast._enums import InfoLevel, ObjectType
from aitune_fast._helpers import batch_tensor
from aitune_fast._version import __version__ as __version__  # written once, in Cargo.toml
from aitune_fast.global_context import BATCH_SIZE_KEY, global_context

__all__ = [
    "BATCH_SIZE_KEY",
    "ExactSampleMetadata",
    "InfoLevel",
    "Locator",
    "ObjectType",
    "SampleMetadata",
    "TensorSpec",
    "batch_tensor",
    "config",
    "global_context",
]
