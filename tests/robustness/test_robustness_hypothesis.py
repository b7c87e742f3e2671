"""Differential fuzzing of hostile inputs against the reference, in a child process so that a crash
fails the test. ``AITUNE_FAST_HOSTILE_EXAMPLES`` sets the number of examples (default 300, derandomized);
``AITUNE_FAST_HOSTILE_SEED`` a random seed (0, the default: derandomized)."""

from __future__ import annotations

import os

from child import run_child

EXAMPLES = int(os.environ.get("AITUNE_FAST_HOSTILE_EXAMPLES", "300"))
SEED = int(os.environ.get("AITUNE_FAST_HOSTILE_SEED", "0"))


def test_hostile_inputs_behave_as_in_the_reference_and_never_crash():
    counts = run_child("hostile_cases", "fuzz", EXAMPLES, SEED, timeout=max(120, EXAMPLES))
    assert counts["examples"] >= min(EXAMPLES, 100)
    print(f"\nhostile fuzz: {counts}")
