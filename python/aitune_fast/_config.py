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
    """

    def __init__(self) -> None:
        self.enable_transformers_integration: bool = _env_flag("AITUNE_TRANSFORMERS_INTEGRATION", True)

    def __repr__(self) -> str:
        return f"Config(enable_transformers_integration={self.enable_transformers_integration})"


config = Config()

# The config the Rust core reads ``enable_transformers_integration`` from on every call: ``config``,
# or AITune's ``aitune.torch.config.config`` while ``aitune_fast.patch_aitune()`` is active.
_source: list = [config]
