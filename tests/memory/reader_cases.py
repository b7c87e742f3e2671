"""Scenarios for the tensor reader tests, run in child processes by ``child.run_child``.

Each returns JSON-ready data. Reading ``cache_position[0]`` once segfaulted on views into freed or shrunk storage
and under ``torch.func.functionalize``; those cases run here, in a child, so that a crash fails one test.
"""

from __future__ import annotations

from typing import Any

from impls import fast, outcome, ref


def _phase(sm_cls, make_cp, strict: bool = True) -> list:
    """``from_inputs`` on an LLM-style input whose ``cache_position`` is ``make_cp()``: the phase or the exception."""
    inputs = {"input_ids": None, "cache_position": make_cp()}
    return outcome(lambda: sm_cls.from_inputs(inputs, strict=strict).llm_phase)


def _freed_view():
    import torch

    t = torch.arange(10)
    cp = t[5:8]
    t.untyped_storage().resize_(0)
    return cp


def _freed_base():
    import torch

    cp = torch.arange(3)
    cp.untyped_storage().resize_(0)
    return cp


def _shrunk_400mb():
    import torch

    t = torch.empty(50_000_010, dtype=torch.int64)  # virtual memory only: never touched
    cp = t[50_000_000:50_000_003]
    t.untyped_storage().resize_(8)
    return cp


def _shrunk_partial():
    import torch

    cp = torch.arange(3, dtype=torch.int64)
    cp.untyped_storage().resize_(4)  # half of the first element left
    return cp


def _int32_view():
    import torch

    return torch.arange(10, dtype=torch.int32)[2:5]


def _zero_view():
    import torch

    return torch.arange(10)[0:3]


CACHE_POSITION_CASES = {
    "freed_view": _freed_view,
    "freed_base": _freed_base,
    "shrunk_400mb": _shrunk_400mb,
    "shrunk_partial": _shrunk_partial,
    "int32_view": _int32_view,
    "zero_view": _zero_view,
}


def cache_position(python_extent: bool = False) -> dict:
    """Every storage case: the reference's and aitune_fast's outcome (``python_extent``: the storage extent asked
    of Python, as on a torch without the stable C ABI)."""
    from aitune_fast import _core

    R, F = ref(), fast()
    found = _core._stable_abi_extent(not python_extent)
    out: dict[str, Any] = {"stable_abi_found": found}
    for name, make in CACHE_POSITION_CASES.items():
        out[name] = {
            "ref": _phase(R.sample_metadata.SampleMetadata, make),
            "fast": _phase(F.SampleMetadata, make),
            "fast_not_strict": _phase(F.SampleMetadata, make, strict=False),
        }
    return out


def cache_position_transforms() -> dict:
    """Offset views of cache_position read under ``torch.func.functionalize`` and ``torch.vmap``."""
    import torch

    R, F = ref(), fast()
    out: dict[str, Any] = {}
    for key, sm in (("ref", R.sample_metadata.SampleMetadata), ("fast", F.SampleMetadata)):
        for start in (0, 2):

            def body(x, sm=sm, start=start, key=key):
                out[f"functionalize_{start}_{key}"] = _phase(sm, lambda: x[start : start + 3])
                return x + 1

            torch.func.functionalize(body)(torch.arange(8))

            def body_vmap(x, sm=sm, start=start, key=key):
                out[f"vmap_{start}_{key}"] = _phase(sm, lambda: x[start:])
                return x

            torch.vmap(body_vmap)(torch.arange(12).reshape(2, 6))
    return out


def refusals(n: int, reader: str | None = None) -> dict:
    """``n`` calls, each with a tensor the reader refuses among ordinary ones (DLPack: a fresh meta tensor; the
    stable C ABI: a nested tensor, whose sizes torch will not give): the results (or exceptions) match the
    reference's and the reader backs off instead of asking torch (a C++ exception each) every time."""
    import warnings

    import torch
    from aitune_fast import _core

    if reader is not None:
        _core._force_tensor_reader(reader)
    R, F = ref(), fast()

    def odd(i: int) -> torch.Tensor:
        if _core.tensor_reader() == "stable_abi":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # nested tensors are a prototype
                return torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(i % 3 + 1, 3)])
        return torch.empty(4, i % 3 + 1, device="meta")

    def described(sm: Any, inputs: dict, ours: bool = False) -> Any:
        try:
            return [(str(loc), s.shape, str(s.dtype)) for loc, s in sm.from_inputs(inputs).tensor_data]
        except Exception as exc:  # noqa: BLE001  (compared with the reference's)
            if ours and isinstance(exc, TypeError) and "torch.strided layout" in str(exc):
                # the deliberate difference (tests/robustness/test_nested_tensors.py): our TypeError for a strided
                # nested tensor, torch's error, which the reference raises, as its cause
                exc = exc.__cause__
            return [type(exc).__name__, str(exc)]

    same = True
    for i in range(n):
        inputs = {"a": torch.empty(2, 3), "m": odd(i), "b": torch.empty(1)}
        same = same and described(R.sample_metadata.SampleMetadata, inputs) == described(
            F.SampleMetadata, inputs, ours=True
        )
    refused, skipped = _core._dlpack_stats()
    return {"same": same, "refused": refused, "skipped": skipped, "reader": _core.tensor_reader()}


def import_with_reader() -> dict:
    """Import aitune_fast (the parent sets AITUNE_FAST_TENSOR_READER) and report what runs."""
    try:
        import aitune_fast
    except BaseException as exc:  # noqa: BLE001
        return {"error": [type(exc).__name__, str(exc)]}
    info = aitune_fast.runtime_info()
    import torch

    md = aitune_fast.SampleMetadata.from_inputs({"x": torch.ones(2, 3), "cache_position": torch.tensor([0])})
    return {"info": info, "phase": md.llm_phase, "shape": md.tensor_data[0][1].shape}
