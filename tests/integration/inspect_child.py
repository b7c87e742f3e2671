"""Child program of ``test_inspect.py``: checkpoints saved by a real AITune, stock or patched, for the inspector.

Run as ``python inspect_child.py MODE WORKDIR``; prints one JSON document on its last stdout line. MODE: ``stock``
(aitune_fast made unimportable) or ``patched`` (``patch_aitune()`` after ``import aitune.torch``). Saves into
``WORKDIR/checkpoints/`` (AITune's default storage, the working directory's ``checkpoints`` folder):

* ``llama-MODE.ait``: the tiny Llama of ``hf_models_child`` tuned for ``generate`` with a static cache (two graphs,
  the LLM phases prefill and decode);
* ``vision-MODE.ait``: a tiny transformers ``ResNetForImageClassification`` tuned on ``pixel_values`` (one graph,
  a batch axis);
* ``jit-MODE.ait``: the same model JIT-tuned (``patch_for_jit_tuning``), then saved with ``ait.save``.

Reports, per checkpoint, the graphs the live module had (phase, number of tensors, SHORT description, and the
FULL one of AITune's ``describe``) for the test to compare with what ``inspect`` reads.
Needs tests/fixtures/tensorrt_stub on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from child_kit import block_aitune_fast, quick_strategy, report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def graphs(backends) -> list[dict]:
    from aitune.torch.module.tensor_spec import InfoLevel

    return [
        {"phase": key.llm_phase, "tensors": len(key.tensor_data), "full": key.describe(InfoLevel.FULL)}
        for key in backends
    ]


def llama(ait, torch, name: str) -> list[dict]:
    import hf_models_child as hf

    m = ait.Module(hf.build_llm(torch, "llama"), name, strategy=quick_strategy(ait))
    ids, mask = hf.prompts(torch, 1, 5, 1)
    hf.tune(ait, lambda ids, mask: hf.generate(torch, m, "static", ids, mask), [{"ids": ids[0], "mask": mask[0]}])
    ait.save(m, name)
    return graphs(m.module.backends)


def resnet(torch) -> Any:
    import transformers
    from hf_models_child import resnet_config

    torch.manual_seed(0)
    return transformers.ResNetForImageClassification(resnet_config()).eval()


def vision(ait, torch, name: str) -> list[dict]:
    m = ait.Module(resnet(torch), name, strategy=quick_strategy(ait))
    images = [{"pixel_values": torch.randn(3, 32, 32)} for _ in range(2)]
    ait.tune(lambda pixel_values: m(pixel_values=pixel_values), images, batch_sizes=[1, 2], device="cpu")
    ait.save(m, name)
    return graphs(m.module.backends)


def jit(ait, torch, name: str) -> list[dict]:
    from hf_models_child import jit_setup

    jit_setup(ait)
    model = ait.patch_for_jit_tuning(lambda: resnet(torch))()
    with torch.no_grad():
        for batch in (1, 2):
            model(pixel_values=torch.randn(batch, 3, 32, 32))
    ait.save(model, name)
    return []


def main(mode: str, workdir: str) -> dict:
    if mode == "stock":
        block_aitune_fast()
    import aitune.torch as ait
    import torch

    torch.set_num_threads(1)
    if mode != "stock":
        import aitune_fast

        aitune_fast.patch_aitune()
    from aitune.torch.module_registry import MODULE_REGISTRY

    os.chdir(workdir)
    out = {}
    for kind, make in (("llama", llama), ("vision", vision), ("jit", jit)):
        MODULE_REGISTRY.clear()
        out[kind] = make(ait, torch, f"{kind}-{mode}")
    return out


if __name__ == "__main__":
    report(main, *sys.argv[1:3])
