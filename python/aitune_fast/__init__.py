"""aitune_fast: a drop-in, Rust-accelerated SampleMetadata for NVIDIA AITune.

Change ``from aitune.torch.module.sample_metadata import SampleMetadata`` to
``from aitune_fast import SampleMetadata``; everything else stays the same.
"""

import platform
from typing import Any

import torch

from aitune_fast import _core
from aitune_fast._config import config
from aitune_fast._core import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec
from aitune_fast._enums import InfoLevel, ObjectType
from aitune_fast._helpers import batch_tensor
from aitune_fast._version import __version__ as __version__  # written once, in Cargo.toml
from aitune_fast.global_context import BATCH_SIZE_KEY, global_context
from aitune_fast.patch import is_aitune_patched, patch_aitune, unpatch_aitune

# Choose the tensor reader now: AITUNE_FAST_TENSOR_READER naming one this torch lacks fails the import.
_core.tensor_reader()


def runtime_info() -> dict[str, Any]:
    """What runs here: ``version``, ``tensor_reader`` (``"dlpack"``: torch's DLPack C exchange API;
    ``"stable_abi"``: torch's stable C ABI, only when forced; ``"python"``: the slower attribute path),
    ``tensor_readers_available``, ``torch`` and ``python``.

    ``AITUNE_FAST_TENSOR_READER`` (``auto``, ``dlpack``, ``stable_abi``, ``python``) forces a reader.
    """
    return {
        "version": __version__,
        "tensor_reader": _core.tensor_reader(),
        "tensor_readers_available": _core.tensor_readers_available(),
        "torch": getattr(torch, "__version__", None),
        "python": platform.python_version(),
    }


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
    "is_aitune_patched",
    "patch_aitune",
    "runtime_info",
    "unpatch_aitune",
]
