"""Run a stock AITune (``aitune`` 0.6.0) on aitune_fast."""

from typing import Any

__all__ = ["SwitchRefused", "is_aitune_patched", "patch_aitune", "unpatch_aitune"]

class SwitchRefused(RuntimeError):
    """The patch could not be switched without breaking AITune work running in other threads.

    Raised while another thread runs a ``tune()`` or a checkpoint's save or load, or when calls are still running
    after 5 seconds: nothing was changed.
    """

def patch_aitune(call_path: bool = True) -> None:
    """Make every loaded ``aitune`` module, and any imported later, use aitune_fast.

    `call_path`: also run a tuned module's per-call path (``Module._forward``, ``TunedModule.__call__``,
    ``Backend.infer``) on aitune_fast's implementation (``_call_path``); False keeps AITune's own, with only the
    metadata swapped. Calling it again while patched switches the call path. Idempotent.

    The switch is atomic: calls into AITune made meanwhile by other threads wait for it, the calls already running
    finish first, and any failure (or KeyboardInterrupt) leaves AITune as it was. Raises ImportError when ``aitune``
    is not installed, RuntimeError when its version is not one the patch was made for (``aitune>=0.6.0,<0.7.0``),
    and ``SwitchRefused`` (a RuntimeError) while another thread tunes or saves or loads a checkpoint, or when
    AITune calls of other threads have not returned within 5 seconds: call it again once they have; TypeError when
    `call_path` is not a bool.

    Swapped with the classes: the core reads AITune's ``global_context`` and ``config``; AITune's ``Locator``
    registrations carry over; live tuned modules' backend keys are converted; ``aitune.torch.save`` writes what a stock
    AITune writes (AITune's pickled key layout, AITune's own metadata objects in backends' graph specs) and
    ``aitune.torch.load`` reads both into aitune_fast's objects.
    """

def unpatch_aitune() -> None:
    """Undo ``patch_aitune()``: AITune's own objects everywhere again, its ``Locator`` registry updated with the
    registrations made while patched, and live tuned modules' backend keys converted back. Idempotent, atomic as
    ``patch_aitune()`` is, and refused (``SwitchRefused``) in the same cases.
    """

def is_aitune_patched() -> bool:
    """Whether ``patch_aitune()`` is in effect (also True while an interrupted switch has left some of it in
    place: ``unpatch_aitune()`` then takes the rest away, ``patch_aitune()`` completes it).
    """

def reference_dict(md: Any) -> dict[str, Any]:
    """The dict AITune 0.6.0's ``SampleMetadata.to_dict()`` writes for `md`: pickled AITune objects.

    Needs AITune's classes (known once ``patch_aitune()`` has seen ``aitune.torch.module``). The result loads in
    a stock AITune, and in aitune_fast's ``from_dict`` through the restricted reader.
    """
