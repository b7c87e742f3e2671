"""Run a stock AITune (``aitune`` 0.6.0) on aitune_fast."""

from typing import Any

__all__ = ["SwitchRefused", "is_aitune_patched", "patch_aitune", "unpatch_aitune"]

class SwitchRefused(RuntimeError):
    """The patch could not be switched without breaking AITune work running in other threads (a ``tune()``, a
    checkpoint's save or load, or calls still running after 5 seconds): nothing was changed."""

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
    reads both into aitune_fast's objects. Idempotent.

    Atomic: other threads' calls into AITune wait while it runs, calls already running finish first, and an
    exception or KeyboardInterrupt leaves AITune as it was. ImportError when ``aitune`` is not installed;
    RuntimeError for an AITune outside ``aitune>=0.6.0,<0.7.0``; :class:`SwitchRefused` while another thread tunes
    or saves or loads a checkpoint, or when its AITune calls have not returned within 5 seconds.
    """

def unpatch_aitune() -> None:
    """Restore stock AITune exactly: its objects, call path and checkpoint functions everywhere (live modules'
    forward wrappers included), its registry updated with the registrations made while patched, live backend keys
    converted back. Idempotent, atomic and refused as ``patch_aitune()``."""

def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect (True also while an interrupted switch has left part of it: the
    next ``patch_aitune()`` or ``unpatch_aitune()`` finishes)."""

def reference_dict(md: Any) -> dict[str, Any]:
    """What AITune's ``SampleMetadata.to_dict()`` writes for `md` (pickled AITune objects); needs the patch to
    have seen AITune's classes."""
