"""The aitune_fast benchmark: ``python -m aitune_fast.bench [--quick | --smoke] [--workloads ...] [--ops ...]``.

It measures aitune_fast against the reference (``aitune`` 0.6.0), optree and the floor on the workloads that
``benches/README.md`` defines; it also describes the method and where results go.
"""

from .cli import main

__all__ = ["main"]
