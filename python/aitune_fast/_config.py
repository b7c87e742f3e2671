"""Run-time switches, read from the environment once at import like the reference's."""

import os

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
    """

    def __init__(self) -> None:
        self.enable_transformers_integration: bool = _env_flag("AITUNE_TRANSFORMERS_INTEGRATION", True)
        self.explain_misses: bool = _env_flag("AITUNE_FAST_EXPLAIN", False)

    def __repr__(self) -> str:
        return (
            f"Config(enable_transformers_integration={self.enable_transformers_integration}, "
            f"explain_misses={self.explain_misses})"
        )


config = Config()


def configure(*, explain_misses: bool | None = None) -> None:
    """Set aitune_fast's switches (those given; the others stay as they are).

    Args:
        explain_misses: under ``patch_aitune()``, the "No backend found" error of a tuned call carries
            ``aitune_fast.explain``'s report as an exception note (its message stays AITune's). Off by default
            (``AITUNE_FAST_EXPLAIN=1`` turns it on at import); off, it costs the call nothing.
    """
    if explain_misses is not None:
        if type(explain_misses) is not bool:
            raise TypeError(f"configure(explain_misses=...) takes a bool, not {type(explain_misses).__name__}")
        config.explain_misses = explain_misses


# The config the Rust core reads ``enable_transformers_integration`` from on every call: ``config``,
# or AITune's ``aitune.torch.config.config`` while ``aitune_fast.patch_aitune()`` is active.
_source: list = [config]
