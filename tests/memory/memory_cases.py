"""Scenarios for test_make_batch_memory.py, run in child processes (fresh heap, own peak RSS)."""

from __future__ import annotations

MIB = 1 << 20


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def make_batch_peak(which: str, gib: float, batch: int) -> dict:
    """Peak RSS growth of one make_batch that slices a resident `gib` GiB tensor (batch axis 0, learned
    from two samples) down to `batch` rows, with the bytes the result holds."""
    import gc

    import torch

    if which == "reference":
        from aitune_fast._reference import load_reference

        sm = load_reference().sample_metadata.SampleMetadata
    else:
        from aitune_fast import SampleMetadata as sm

    rows, cols = 256, int(gib * (1 << 30)) // (256 * 4)
    big = torch.ones(rows, cols)  # resident: every page written
    md = sm.from_inputs({"x": torch.empty(2, cols), "n": 3}, batch_size=2, strict=True)
    md.update_shapes_seen(sm.from_inputs({"x": torch.empty(4, cols), "n": 3}, batch_size=4, strict=True))
    inputs = {"x": big, "n": 3}
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    before = _rss("VmRSS")
    out = md.make_batch(inputs, batch)
    peak = _rss("VmHWM") - before
    result = out["x"]
    return {
        "peak": peak,
        "result_bytes": result.numel() * result.element_size(),
        "shape": list(result.shape),
        "input_untouched": bool(torch.equal(big[:1], torch.ones(1, cols))) and big.shape[0] == rows,
        "shares_input": result.untyped_storage().data_ptr() == big.untyped_storage().data_ptr(),
    }


def retained_bytes_per_tensor(which: str, blocks: int) -> float:
    """RSS growth per tensor while a strict SampleMetadata of `blocks` x 100 tensors is alive (the tensors
    themselves exist before the first reading)."""
    import gc

    import torch

    if which == "reference":
        from aitune_fast._reference import load_reference

        sm = load_reference().sample_metadata.SampleMetadata
    else:
        from aitune_fast import SampleMetadata as sm

    inputs = {
        "blocks": {f"b{i}": [torch.empty(2, j % 5 + 1) for j in range(100)] for i in range(blocks)},
        "scale": 0.5,
        "names": [f"n{i}" for i in range(50)],
    }
    warm = sm.from_inputs({"x": torch.empty(1), "y": [torch.empty(2)]}, strict=True)
    hash(warm)
    gc.collect()
    before = _rss("VmRSS")
    md = sm.from_inputs(inputs, strict=True)
    hash(md)
    gc.collect()
    return (_rss("VmRSS") - before) / (blocks * 100)
