"""``import aitune_fast`` loads none of the AITune integration: a user of SampleMetadata alone pays nothing for it
(no ``patch`` module, so no fork handler and no import hook); the first use of ``patch_aitune`` and its siblings loads
it, and they are the integration's own functions."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import aitune_fast
before = sorted(m for m in sys.modules if m.startswith("aitune_fast.patch"))
from aitune_fast import patch_aitune
import aitune_fast.patch as patch
print(json.dumps({
    "before": before,
    "after": "aitune_fast.patch._switch" in sys.modules,
    "same": [patch_aitune is patch.patch_aitune, aitune_fast.unpatch_aitune is patch.unpatch_aitune],
    "patched": aitune_fast.is_aitune_patched(),
    "listed": sorted({"patch_aitune", "unpatch_aitune", "is_aitune_patched"} & set(dir(aitune_fast))),
}))
"""


def test_import_loads_no_patch_module_until_used():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "before": [],
        "after": True,
        "same": [True, True],
        "patched": False,
        "listed": ["is_aitune_patched", "patch_aitune", "unpatch_aitune"],
    }


def test_unknown_attribute_is_an_attribute_error():
    import aitune_fast
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        aitune_fast.no_such_name  # noqa: B018
