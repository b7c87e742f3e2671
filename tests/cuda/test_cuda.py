"""CUDA tensors side by side with the reference: dispatch, ``make_batch`` on the device, ``cache_position`` on the
device, and a tuned call with CUDA tensors through stock AITune and under ``patch_aitune()``. Skipped where torch
sees no CUDA device; ``scripts/gpu_check.sh`` runs them (with the benchmark) on a machine with one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from parity import md_snap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CHILD = Path(__file__).resolve().parent / "cuda_tuned_call_child.py"


def decode_inputs(device: str, bs: int = 2) -> dict:
    return {
        "input_ids": torch.zeros(bs, 1, dtype=torch.int64, device=device),
        "attention_mask": torch.ones(bs, 5, device=device),
        "past_key_values": [
            (torch.zeros(bs, 2, 4, 8, device=device), torch.zeros(bs, 2, 4, 8, device=device)) for _ in range(3)
        ],
        "scale": torch.tensor(0.5, device=device, dtype=torch.float16),
    }


def test_dispatch_on_cuda_tensors_matches_the_reference(impls):
    ref, fast = impls
    inputs = decode_inputs("cuda")
    ours = fast.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)
    theirs = ref.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)
    assert md_snap(fast, ours) == md_snap(ref, theirs)
    assert ours == fast.sample_metadata.SampleMetadata.from_inputs(decode_inputs("cuda"), strict=True)
    assert ours != fast.sample_metadata.SampleMetadata.from_inputs(decode_inputs("cpu"), strict=True)


def test_make_batch_on_the_device_matches_the_reference(impls):
    ref, fast = impls
    out = []
    for impl in (ref, fast):
        SM = impl.sample_metadata.SampleMetadata  # noqa: N806 - the class
        md = SM.from_inputs(decode_inputs("cuda", 2), strict=True, batch_size=2)
        md.update_shapes_seen(SM.from_inputs(decode_inputs("cuda", 4), strict=True, batch_size=4))
        out.append(md.make_batch(decode_inputs("cuda", 1), 3))
    theirs, ours = out
    flat_theirs, flat_ours = torch.utils._pytree.tree_leaves(theirs), torch.utils._pytree.tree_leaves(ours)
    assert len(flat_theirs) == len(flat_ours)
    for a, b in zip(flat_theirs, flat_ours, strict=True):
        assert b.device == a.device and b.dtype == a.dtype and b.shape == a.shape
        assert torch.equal(a, b)


def test_cache_position_on_the_device_gives_the_reference_phase(impls):
    ref, fast = impls
    for position in (torch.tensor([4], device="cuda"), torch.arange(5, device="cuda")):
        inputs = {**decode_inputs("cuda"), "cache_position": position}
        theirs = ref.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)
        ours = fast.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)
        assert md_snap(fast, ours) == md_snap(ref, theirs)


def test_a_tuned_call_with_cuda_tensors_matches_stock(tmp_path):
    from child import run_script

    out = {mode: run_script(CHILD, mode, workdir=tmp_path, timeout=600) for mode in ("stock", "patched")}
    if "skip" in out["stock"]:
        pytest.skip(out["stock"]["skip"])
    assert out["patched"] == out["stock"]
    assert out["stock"]["outputs"] and out["stock"]["device"] == "cuda:0"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
