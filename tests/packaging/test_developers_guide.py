"""DEVELOPERS.md stays a guide a newcomer reads in ten minutes, and names the rooms the code is in."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "DEVELOPERS.md"
MAX_CHARS = 12_000  # history goes to benches/PERFORMANCE.md and the CHANGELOG


def test_guide_is_short():
    assert len(GUIDE.read_text()) <= MAX_CHARS


def test_guide_names_only_files_that_exist():
    """Every `rust/...` or `python/aitune_fast/...` path the guide names is there (a move updates the guide)."""
    text = GUIDE.read_text()
    named = set(re.findall(r"`((?:rust|python/aitune_fast|tests|benches|scripts)/[\w./-]+)`", text))
    assert len(named) >= 5, named
    missing = sorted(path for path in named if not (ROOT / path.rstrip("/")).exists())
    assert missing == []
