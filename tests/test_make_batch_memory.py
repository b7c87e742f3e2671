"""make_batch's memory: the result is built from the input without copying the input whole first."""

from __future__ import annotations

import pytest
from child import run_child

MIB = 1 << 20


@pytest.mark.parametrize("which", ["aitune_fast", "reference"])
def test_slicing_a_one_gib_batch_down_costs_about_the_result(which):
    """On an input holding a resident 1 GiB tensor with a batch axis, slicing to 16 of 256 rows raises peak
    memory by at most 1.1x the returned bytes plus 16 MiB. The reference deep-copies the whole input first
    (about 1 GiB more), which is what this test shows it does."""
    r = run_child("memory_cases", "make_batch_peak", which, 1.0, 16, timeout=240)
    assert r["shape"][0] == 16 and r["input_untouched"] and not r["shares_input"]
    limit = 1.1 * r["result_bytes"] + 16 * MIB
    if which == "aitune_fast":
        assert r["peak"] <= limit, f"peak {r['peak'] / MIB:.0f} MiB > {limit / MIB:.0f} MiB"
    else:
        assert r["peak"] > 900 * MIB, "the reference copies the whole input first"
