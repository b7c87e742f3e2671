"""Run-time switches, read from the environment once at import like the reference's."""

import os

from aitune_fast import _core

_TRUE = ("1", "true", "True", "yes", "Yes", "YES")


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value in _TRUE


class Config:
    """Switches consulted on every call.

    Attributes:
        enable_transformers_integration: detect the LLM phase (``"prefill"``/``"decode"``) from a
            ``cache_position`` argument; then the phase alone decides metadata equality.
            Defaults to the ``AITUNE_TRANSFORMERS_INTEGRATION`` environment variable, else on.
        explain_misses: under ``patch_aitune()``, a tuned call that finds no backend raises AITune's error with
            ``aitune_fast.explain``'s report added as an exception note. Defaults to the ``AITUNE_FAST_EXPLAIN``
            environment variable, else off; ``configure()`` sets it.
        dispatch_stats: under ``patch_aitune()``, tuned calls are counted for ``aitune_fast.dispatch_stats``.
            Defaults to the ``AITUNE_FAST_STATS`` environment variable, else off; ``configure()`` sets it (the switch
            lives in the core, which reads it on every call).
    """

    def __init__(self) -> None:
        self.enable_transformers_integration: bool = _env_flag("AITUNE_TRANSFORMERS_INTEGRATION", True)
        self.explain_misses: bool = _env_flag("AITUNE_FAST_EXPLAIN", False)
        _core._set_dispatch_stats(_env_flag("AITUNE_FAST_STATS", False))

    @property
    def dispatch_stats(self) -> bool:
        return _core._dispatch_stats_on()

    @dispatch_stats.setter
    def dispatch_stats(self, on: bool) -> None:
        configure(dispatch_stats=on)

    def __repr__(self) -> str:
        return (
            f"Config(enable_transformers_integration={self.enable_transformers_integration}, "
            f"explain_misses={self.explain_misses}, dispatch_stats={self.dispatch_stats})"
        )


config = Config()


def configure(*, explain_misses: bool | None = None, dispatch_stats: bool | None = None) -> None:
    """Set aitune_fast's switches (those given; the others stay as they are).

    Args:
        explain_misses: under ``patch_aitune()``, the "No backend found" error of a tuned call carries
            ``aitune_fast.explain``'s report as an exception note (its message stays AITune's). Off by default
            (``AITUNE_FAST_EXPLAIN=1`` turns it on at import); off, it costs the call nothing.
        dispatch_stats: under ``patch_aitune()``, the tuned call counts its hits per graph, misses and the path's
            own time for ``aitune_fast.dispatch_stats``. Off by default (``AITUNE_FAST_STATS=1`` turns it on at
            import); off, it costs a call one atomic load.
    """
    for name, value in (("explain_misses", explain_misses), ("dispatch_stats", dispatch_stats)):
        if value is not None and type(value) is not bool:
            raise TypeError(f"configure({name}=...) takes a bool, not {type(value).__name__}")
    if explain_misses is not None:
        config.explain_misses = explain_misses
    if dispatch_stats is not None:
        _core._set_dispatch_stats(dispatch_stats)


# The config the Rust core reads ``enable_transformers_integration`` from on every call: ``config``,
# or AITune's ``aitune.torch.config.config`` while ``aitune_fast.patch_aitune()`` is active.
_source: list = [config]
