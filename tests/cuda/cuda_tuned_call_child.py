"""A module tuned by AITune (TorchEager) on CUDA, called with CUDA tensors: outputs, devices and the backend found,
stock (``stock``) or under ``patch_aitune()`` (``patched``). ``python cuda_tuned_call_child.py MODE cpu`` runs the
same on the CPU (how it was checked on a machine without CUDA)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))  # child_kit, beside the other children
from child_kit import quick_strategy, report  # noqa: E402


def main(mode: str, device: str = "cuda") -> dict:
    warnings.filterwarnings("ignore")
    if mode == "patched":
        import aitune_fast

        aitune_fast.patch_aitune()
    try:
        import aitune.torch as ait
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"import aitune.torch failed: {type(exc).__name__}: {exc}"}
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return {"skip": "no CUDA device"}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).to(device).eval()
    m = ait.Module(model, "cuda-mlp", strategy=quick_strategy(ait))
    ait.tune(m, torch.randn(16, device=device), batch_sizes=[1, 2], device=device)
    outputs = []
    with torch.no_grad():
        for bs in (1, 2):
            x = torch.arange(16.0 * bs, device=device).reshape(bs, 16) / 100
            y = m(x)
            outputs.append([round(v, 4) for v in y.flatten().tolist()])
        try:
            m(torch.ones(2, 16, device=device, dtype=torch.float64))
            missing = None
        except RuntimeError as exc:
            missing = str(exc)[:80]
    return {"outputs": outputs, "device": str(y.device), "missing": missing}


if __name__ == "__main__":
    report(main, *sys.argv[1:3])
