"""PEP 517 build backend: maturin's, with a manylinux tag for wheels built by pip.

maturin's own backend builds ``pip wheel .`` / ``pip install .`` with ``--compatibility off``, which
tags the wheel ``linux_x86_64`` (not installable elsewhere, rejected by PyPI). This wrapper asks for
``--compatibility pypi`` instead, the lowest manylinux (or musllinux) tag the library's symbols allow,
as ``maturin build`` picks; with ``auditwheel = "check"`` in pyproject.toml the build fails, rather
than vendoring them, if the library ever links a library outside the manylinux set (libtorch).
A ``--compatibility`` passed by the user (``-C maturin.build-args=...`` or ``MATURIN_PEP517_ARGS``)
wins. Everything else is maturin's backend unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import maturin
from maturin import (  # noqa: F401  (re-exported PEP 517 hooks)
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    args = list(maturin.get_maturin_pep517_args(config_settings))
    if not any(a in ("--compatibility", "--manylinux") or a.startswith("--compatibility=") for a in args):
        args = ["--compatibility", "pypi", *args]
    settings = {k: v for k, v in (config_settings or {}).items() if k not in ("build-args", "maturin.build-args")}
    settings["maturin.build-args"] = args
    return maturin.build_wheel(wheel_directory, settings, metadata_directory)
