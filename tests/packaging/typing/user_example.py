"""How a user's code reads against aitune_fast's stubs: type-checked by pyright in strict mode
(tests/packaging/test_stubs.py), never run. Each line is something the README or the docs show."""

from __future__ import annotations

import enum
import weakref
from typing import Literal

import aitune_fast
import torch
from aitune_fast import ExactSampleMetadata, InfoLevel, Locator, RuntimeInfo, SampleMetadata, TensorSpec


def dispatch(backends: dict[SampleMetadata, str], inputs: dict[str, object]) -> str | None:
    return backends.get(SampleMetadata.from_inputs(inputs, strict=True))


def inspect_metadata(md: SampleMetadata) -> list[str]:
    paths: list[str] = [locator.display_path for locator, _ in md.tensor_data]
    specs: list[TensorSpec] = md.tensor_specs
    shapes: list[list[int | str]] = [spec.shape for spec in specs]
    phase: Literal["prefill", "decode", ""] = md.llm_phase
    text: str = md.describe(InfoLevel.SHORT)
    return [*paths, str(shapes), phase, text]


def round_trips(md: SampleMetadata) -> tuple[SampleMetadata, SampleMetadata]:
    return SampleMetadata.from_json(md.to_json()), SampleMetadata.from_dict(md.to_dict())


def exact(inputs: dict[str, object]) -> ExactSampleMetadata:
    return ExactSampleMetadata.from_inputs(inputs)


def batches(md: SampleMetadata, inputs: dict[str, object]) -> dict[str, object]:
    md.update_max_batch_size(inputs, 8)
    return md.make_batch(inputs, 4)


def leaves(obj: object) -> list[tuple[Locator, object]]:
    return list(Locator.find_leaves(obj, only_tensors=False))


def info() -> str:
    details: RuntimeInfo = aitune_fast.runtime_info()
    reader: Literal["dlpack", "stable_abi", "python"] = details["tensor_reader"]
    return reader + details["version"]


def load(path: str) -> object:
    with torch.serialization.safe_globals(aitune_fast.safe_globals()):
        return torch.load(path, weights_only=True)


def patched() -> bool:
    aitune_fast.patch_aitune(call_path=True)
    try:
        return aitune_fast.is_aitune_patched()
    finally:
        aitune_fast.unpatch_aitune()


def watch(md: SampleMetadata) -> weakref.ref[SampleMetadata]:
    return weakref.ref(md)


class Mode(enum.Enum):
    FAST = 1
    EXACT = 2


def with_modes(md: SampleMetadata) -> SampleMetadata:
    aitune_fast.add_safe_enums([Mode])
    try:
        allowed: list[type[enum.Enum]] = aitune_fast.get_safe_enums()
        assert Mode in allowed
        return SampleMetadata.from_json(md.to_json())
    except aitune_fast.MetadataDecodeError as e:
        raise ValueError(f"{e.msg} at line {e.lineno}") from e
    finally:
        aitune_fast.remove_safe_enums([Mode])
