"""A tuned module's whole call, AITune's path and its backend (TorchEager), on the benchmark's modules.

MODEL (default ``mlp:path``, whose forward returns its input: the path alone; ``mlp`` runs the real MLP; ``llama``
the real-model row's tiny transformers Llama, its decode call as ``generate`` makes it) and MODE (``patched``, the
default: ``patch_aitune()``; ``stock``: AITune's own path). WHICH=plain counts the plain copy of the module instead
of the tuned one. STATS=1 switches dispatch statistics on (``configure(dispatch_stats=True)``). The tuning in
make() runs reduce too: count.sh leaves it out (instrumentation starts after the warm-up); with GATE=0, subtract a
run with N=0 (count.sh prints that window's instructions) from one with N.
"""

import os
import warnings

warnings.filterwarnings("ignore")


def make():
    import aitune_fast
    from aitune_fast.bench import aitune_tuned

    ait, _ = aitune_tuned._import_aitune()
    import torch

    name = os.environ.get("MODEL", "mlp:path")
    if name == "llama":
        tuned, plain, kwargs = aitune_tuned.tuned_llama(ait, torch, aitune_tuned._llama(torch), "llama-cg")
        args: tuple = ()
        torch.set_grad_enabled(False)  # as generate() calls it
    if os.environ.get("MODE", "patched") == "patched":
        aitune_fast.patch_aitune()
    if os.environ.get("STATS", "0") == "1":  # only then: the case also counts trees from before dispatch_stats
        aitune_fast.configure(dispatch_stats=True)
    if name != "llama":
        tuned, plain, args, kwargs = aitune_tuned._tune_all(ait, torch, "cg", (name,))[name]
    target = plain if os.environ.get("WHICH", "tuned") == "plain" else tuned

    def call():
        return target(*args, **kwargs)

    return call
