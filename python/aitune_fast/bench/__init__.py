"""The aitune_fast benchmark: ``python -m aitune_fast.bench [--quick | --smoke] [--workloads ...] [--ops ...]``.

It measures aitune_fast against the reference (``aitune`` 0.6.0), optree and the floor on the workloads that
``benches/README.md`` defines; it also describes the method and where results go.
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (``python -m aitune_fast.bench``'s command line; `argv` as its arguments)."""
    # imported here, not with the package: `python -m aitune_fast.bench.aitune_tuned` (a submodule cli imports)
    # would otherwise find that module loaded before runpy runs it, and warn (RuntimeWarning)
    from .cli import main as run

    return run(argv)
