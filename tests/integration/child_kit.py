"""What the child programs of this folder share. Each runs as ``python NAME_child.py ...``, which puts this folder
first on its ``sys.path``: a quick one-backend tuning strategy, a stock AITune's environment without aitune_fast,
the small models they tune, and the report on the last stdout line that ``child.run_script`` reads."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any


def quick_strategy(ait, backend=None):
    """AITune's ``OneBackendStrategy`` of ``backend`` (TorchEager by default) without performance validation or the
    search for a maximum batch size: a tune takes seconds on a CPU."""
    if backend is None:
        from aitune.torch.backend import TorchEagerBackend

        backend = TorchEagerBackend()
    strategy = ait.OneBackendStrategy(backend)
    strategy.enable_performance_validation(False)
    strategy.enable_find_max_batch_size(False)
    return strategy


def block_aitune_fast() -> None:
    """Make ``import aitune_fast`` fail, as in an environment without it."""

    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "aitune_fast" or name.startswith("aitune_fast."):
                raise ImportError(f"{name} is blocked in this child (a stock AITune)")
            return None

    sys.meta_path.insert(0, _Block())


def mlp(torch):
    """A small MLP (16 -> 32 -> 4), the same weights every time."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


def seeded(torch, seed: int, make: Callable[[], Any]) -> Callable[[], Any]:
    """A builder of ``make().eval()`` that seeds torch with ``seed`` first: the same weights on every call."""

    def build():
        torch.manual_seed(seed)
        return make().eval()

    return build


def tiny_llm(torch) -> type:
    """The class of an LLM-like decode step: ``forward(input_ids, attention_mask, past_key_values, cache_position)``
    with the KV cache a dict of per-layer dicts or a tuple of ``(key, value)`` tuples; every layer's key and the
    cache position (when given) reach the output."""

    class TinyLLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(32, 8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, input_ids, attention_mask, past_key_values, cache_position=None):
            h = self.proj(self.emb(input_ids) * attention_mask[..., None])
            layers = past_key_values.values() if isinstance(past_key_values, dict) else past_key_values
            for layer in layers:
                key = layer["key"] if isinstance(layer, dict) else layer[0]
                h = h + key.mean((1, 2))[:, None] * 0.01
            if cache_position is not None:
                h = h + cache_position.float()[:, None] * 0.001
            return h

    return TinyLLM


def report(main: Callable[..., Any], *args: Any) -> None:
    """Print ``main(*args)`` as JSON on the last line of stdout, or ``{"error": traceback}`` if it raised."""
    try:
        out = main(*args)
    except BaseException:  # noqa: BLE001 - the parent reports whatever stopped the child
        out = {"error": traceback.format_exc()}
    sys.stdout.flush()
    print("\n" + json.dumps(out))
