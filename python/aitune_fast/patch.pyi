"""Run a stock AITune (``aitune`` 0.6.0) on aitune_fast."""

from typing import Any

__all__ = ["is_aitune_patched", "patch_aitune", "unpatch_aitune"]

def patch_aitune(call_path: bool = True) -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast's ``SampleMetadata``,
    ``ExactSampleMetadata``, ``TensorSpec``, ``Locator``, ``InfoLevel``, ``ObjectType`` and ``batch_tensor``.

    `call_path` (default): also a tuned module's per-call path (``Module._forward`` and its hook swap,
    ``TunedModule.__call__``, ``Backend.infer`` and its context, nvtx and hardware-metrics wrappers) runs on
    aitune_fast's implementation, live modules included; ``call_path=False``: AITune's own call path with only the
    metadata swapped. Calling it again while patched switches the call path.

    Also: the core reads AITune's ``global_context`` and ``config``; AITune's ``Locator`` registrations carry
    over; live tuned modules' backend keys are converted; ``aitune.torch.save`` writes what a stock AITune writes
    (AITune's pickled key layout, AITune's own metadata objects in backends' graph specs) and ``aitune.torch.load``
    reads both into aitune_fast's objects. Idempotent. ImportError when ``aitune`` is not installed.
    """

def unpatch_aitune() -> None:
    """Restore stock AITune exactly: its objects, call path and checkpoint functions everywhere (live modules'
    forward wrappers included), its registry updated with the registrations made while patched, live backend keys
    converted back. Idempotent."""

def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect."""

def reference_dict(md: Any) -> dict[str, Any]:
    """What AITune's ``SampleMetadata.to_dict()`` writes for `md` (pickled AITune objects); needs the patch to
    have seen AITune's classes."""
