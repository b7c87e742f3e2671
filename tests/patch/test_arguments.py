"""``patch_aitune``'s argument: ``call_path`` takes only a bool, refused before anything is switched (no AITune
needed to see it)."""

from __future__ import annotations

import pytest
from aitune_fast.patch import is_aitune_patched, patch_aitune


@pytest.mark.parametrize("value", ["no", "", 0, 1, None, 1.0, [True]])
def test_call_path_other_than_a_bool_is_refused_and_nothing_switches(value: object) -> None:
    was = is_aitune_patched()
    with pytest.raises(TypeError, match=r"patch_aitune\(call_path=\.\.\.\) takes True or False"):
        patch_aitune(call_path=value)  # type: ignore[arg-type]
    assert is_aitune_patched() == was
