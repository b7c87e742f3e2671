"""A tuned module's whole call, AITune's path and its backend (TorchEager), on the benchmark's modules.

MODEL (default ``mlp:path``, whose forward returns its input: the path alone; ``mlp`` runs the real MLP) and MODE
(``patched``, the default: ``patch_aitune()``; ``stock``: AITune's own path). The tuning in make() runs reduce too:
subtract a run with N=0 (count.sh prints that window's instructions) from one with N.
"""

import os
import warnings

warnings.filterwarnings("ignore")


def make():
    import aitune_fast
    from aitune_fast.bench import aitune_tuned

    ait, _ = aitune_tuned._import_aitune()
    import torch

    if os.environ.get("MODE", "patched") == "patched":
        aitune_fast.patch_aitune()
    name = os.environ.get("MODEL", "mlp:path")
    tuned, _plain, args, kwargs = aitune_tuned._tune_all(ait, torch, "cg", (name,))[name]

    def call():
        return tuned(*args, **kwargs)

    return call
