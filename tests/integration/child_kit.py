"""What the child programs of this folder share. Each runs as ``python NAME_child.py ...``, which puts this folder
first on its ``sys.path``: a quick one-backend tuning strategy, a stock AITune's environment without aitune_fast,
the small MLP they tune, and the report on the last stdout line that ``child.run_script`` reads."""

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


def report(main: Callable[..., Any], *args: Any) -> None:
    """Print ``main(*args)`` as JSON on the last line of stdout, or ``{"error": traceback}`` if it raised."""
    try:
        out = main(*args)
    except BaseException:  # noqa: BLE001 - the parent reports whatever stopped the child
        out = {"error": traceback.format_exc()}
    sys.stdout.flush()
    print("\n" + json.dumps(out))
