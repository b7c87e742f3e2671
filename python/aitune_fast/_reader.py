"""Support for the Rust tensor readers (``rust/reader/``): the dtype probe of the DLPack reader."""

from __future__ import annotations

import warnings

import torch


def dtype_probes() -> list[tuple[torch.dtype, torch.Tensor]]:
    """One empty CPU tensor per torch dtype (each dtype once, aliases skipped).

    The DLPack reader exports each to learn which ``(code, bits, lanes)`` names exactly one dtype.
    Dtypes torch cannot allocate are left out: no tensor of them can reach the reader.
    """
    probes: dict[torch.dtype, torch.Tensor] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental dtypes warn on allocation
        for value in list(vars(torch).values()):
            if isinstance(value, torch.dtype) and value not in probes:
                try:
                    probes[value] = torch.empty((0,), dtype=value)
                except Exception:  # noqa: BLE001  (any failure: not a dtype tensors can have here)
                    continue
    return list(probes.items())
