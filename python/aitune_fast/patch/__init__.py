"""Run a stock AITune on aitune_fast: ``patch_aitune()`` / ``unpatch_aitune()``.

AITune (``aitune`` 0.6.0) imports ``SampleMetadata``, ``ExactSampleMetadata``, ``TensorSpec``, ``Locator``,
``InfoLevel``, ``ObjectType`` and ``batch_tensor`` by name from ``aitune.torch.module.*``. ``patch_aitune()``
replaces those objects with aitune_fast's in every loaded ``aitune`` module (the defining modules and every
module holding them under any name), and in every ``aitune`` module imported later (an import hook on
``sys.meta_path``). It also:

* makes the Rust core read AITune's ``global_context`` (the batch size ``tune()`` sets) and AITune's
  ``config.enable_transformers_integration`` on every call;
* copies the type registrations of AITune's ``Locator`` (``register_user_type``/``ignore_type``) into
  aitune_fast's registry; ``unpatch_aitune()`` hands back the changes made while patched;
* converts every metadata AITune's live objects hold (backend keys, recorded graph specs, strategy maps, sample
  stores), so modules tuned or recorded before the patch keep dispatching; ``unpatch_aitune()`` converts them
  back. Dict keys of both classes stand side by side until the calls in flight at the switch have returned, so a
  toggle never fails a call on another thread;
* makes an ``aitune`` module imported while patched run its own code on AITune's objects (:class:`_ImportView`),
  so nothing it builds at import time captures ours, and makes AITune's ``Locator`` methods act on our registry;
* refuses AITune releases it was not made for (``aitune>=0.6.0,<0.7.0``);
* makes checkpoints written by ``aitune.torch.save`` hold what a stock AITune writes, so a stock AITune without
  aitune_fast loads them: ``TunedModule.to_dict()`` stores each backend key in the reference's pickled layout, and
  the checkpoint file is pickled with AITune's own classes in place of aitune_fast's metadata, locators and specs
  wherever backends put them in their state (the graph specs of the ONNX Runtime and TensorRT backends);
* makes ``aitune.torch.load`` accept both: the checkpoint's AITune classes are rebuilt as AITune's objects and then
  converted to aitune_fast's. The reference's pickled key bytes go through aitune_fast's restricted reader
  (``_legacy``), which runs nothing, and a key it refuses is unpickled as AITune does (unless loads are forced
  weights-only); the checkpoint file itself is read as AITune reads it (``torch.load`` with
  ``weights_only=False``), with nothing more admitted than AITune admits.

``AUTOWRAPT_BOOTSTRAP=aitune_fast`` patches AITune as soon as ``aitune.torch`` is imported (an entry point in
the ``aitune_fast`` group, the convention AITune's own ``aitune_enable_jit_tuning`` uses).

The integration's parts, by job: ``_names`` (every AITune name it relies on), ``_state`` (the lock, whether the
patch and its call path are on), ``_switch`` (``patch_aitune``/``unpatch_aitune``: a switch's steps),
``_quiescence`` (the gates and the wait for calls in flight), ``_journal`` (every change undoable),
``_registry`` (the one record of what was replaced, and the order it is taken back in), ``_loading`` (what is
installed when an AITune module loads; the import hook), ``_aitune`` (AITune's classes, global context, config
and type registrations learnt), ``_convert`` (objects of one world made from the other's), ``_objects`` (the live
objects and the one walker over the containers they hold), ``_checkpoint`` (checkpoints both ways) and
``_call_path`` (the tuned-call path).
"""

from __future__ import annotations

from typing import Any

from aitune_fast.patch._checkpoint import reference_dict as reference_dict
from aitune_fast.patch._quiescence import SwitchRefused
from aitune_fast.patch._switch import is_aitune_patched, patch_aitune, unpatch_aitune

__all__ = ["SwitchRefused", "is_aitune_patched", "patch_aitune", "unpatch_aitune"]


def _autowrapt_hook(_module: Any = None) -> None:
    """Entry point for ``AUTOWRAPT_BOOTSTRAP=aitune_fast``: called once ``aitune.torch`` is imported. An AITune
    the patch was not made for stays unpatched, with a warning (the import itself must not fail)."""
    try:
        patch_aitune()
    except RuntimeError as exc:
        import warnings

        warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
