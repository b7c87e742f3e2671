"""aitune_fast: a drop-in, Rust-accelerated SampleMetadata for NVIDIA AITune.

Change ``from aitune.torch.module.sample_metadata import SampleMetadata`` to
``from aitune_fast import SampleMetadata``; everything else stays the same. Added, which AITune's class does not
have: ``to_json()``, ``from_json()`` and the Enum allow-list (``add_safe_enums``, ``remove_safe_enums``,
``get_safe_enums``).
"""

import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import torch

from aitune_fast import _core
from aitune_fast._config import config, configure
from aitune_fast._core import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec
from aitune_fast._enums import InfoLevel, ObjectType
from aitune_fast._errors import MetadataDecodeError
from aitune_fast._explain import Difference, DispatchReport, GraphReport, explain
from aitune_fast._helpers import batch_tensor
from aitune_fast._safe_enums import add_safe_enums, get_safe_enums, remove_safe_enums
from aitune_fast._stats import DispatchStats, GraphHits, ModuleStats, dispatch_stats
from aitune_fast._version import __version__ as __version__  # written once, in Cargo.toml
from aitune_fast.global_context import BATCH_SIZE_KEY, global_context

if TYPE_CHECKING:
    from aitune_fast.patch import is_aitune_patched, patch_aitune, unpatch_aitune

# The AITune integration loads when first used (`aitune_fast.patch_aitune`, `AUTOWRAPT_BOOTSTRAP=aitune_fast`, the
# import hook): a user of SampleMetadata alone imports none of it and gets no fork handler.
_PATCH_NAMES = frozenset(("is_aitune_patched", "patch_aitune", "unpatch_aitune"))


def __getattr__(name: str) -> Any:
    if name in _PATCH_NAMES:
        from aitune_fast import patch

        return getattr(patch, name)
    raise AttributeError(f"module 'aitune_fast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _PATCH_NAMES)


# Choose the tensor reader now: AITUNE_FAST_TENSOR_READER naming one this torch lacks fails the import.
_core.tensor_reader()


class RuntimeInfo(TypedDict):
    """What `runtime_info()` returns."""

    version: str
    """aitune_fast's version."""
    tensor_reader: Literal["dlpack", "stable_abi", "python"]
    """The tensor reader in use."""
    tensor_readers_available: list[str]
    """The readers this process could use, fastest first (``"python"`` always)."""
    torch: str | None
    """torch's version."""
    python: str
    """The Python version."""


def runtime_info() -> RuntimeInfo:
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


# what torch.serialization.add_safe_globals and safe_globals take (a list is invariant: the same element type)
_SafeGlobal = Callable[..., Any] | tuple[Callable[..., Any], str]


def safe_globals() -> list[_SafeGlobal]:
    """The classes a saved metadata pickles, for ``torch.load(..., weights_only=True)``.

    ``torch.load`` with ``weights_only=True`` (torch's default since 2.6) rebuilds only types it was told are safe.
    A checkpoint holding a ``SampleMetadata``, an ``ExactSampleMetadata`` or their locators and specs loads after:

    ```python
    torch.serialization.add_safe_globals(aitune_fast.safe_globals())          # for the whole process
    with torch.serialization.safe_globals(aitune_fast.safe_globals()): ...    # or for one block
    ```

    Each of these classes is rebuilt blank and filled by its ``__setstate__``, which checks the state it is given
    and runs no code named by the file. Values the user put in a metadata (other leaves of a strict metadata, such
    as enum members or user objects) need their own classes allowed as well.
    """
    return [SampleMetadata, ExactSampleMetadata, Locator, TensorSpec, ObjectType]


__all__ = [
    "BATCH_SIZE_KEY",
    "Difference",
    "DispatchReport",
    "DispatchStats",
    "ExactSampleMetadata",
    "GraphHits",
    "GraphReport",
    "InfoLevel",
    "Locator",
    "MetadataDecodeError",
    "ModuleStats",
    "ObjectType",
    "RuntimeInfo",
    "SampleMetadata",
    "TensorSpec",
    "add_safe_enums",
    "batch_tensor",
    "config",
    "configure",
    "dispatch_stats",
    "explain",
    "get_safe_enums",
    "global_context",
    "is_aitune_patched",
    "patch_aitune",
    "remove_safe_enums",
    "runtime_info",
    "safe_globals",
    "unpatch_aitune",
]
