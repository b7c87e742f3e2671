"""docs/aitune.md's CPU example runs as written: a small module tuned with TorchEager under the patch, called, saved,
loaded and unpatched.

It runs in a child process, as the other AITune tests do (``import aitune.torch`` must not meet the stub packages
the reference loader registers here, and the patch is process-wide), with its own ``AITUNE_CACHE_DIR``. The test
suite's ``tensorrt`` fixture is kept off the child's path: the example says how to import AITune without TensorRT
(aitune_fast's stand-in), and that is what runs. scripts/check_wheel.sh runs the same block from an installed
package (readme_check.py ``aitune``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from child import ROOT, TENSORRT_STUB, aitune_env, run_python

_spec = importlib.util.spec_from_file_location("readme_check", ROOT / "scripts" / "readme_check.py")
assert _spec is not None and _spec.loader is not None
readme_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_check)

TIMEOUT_S = 600  # about 50 s on 2 shared cores, most of it `import aitune.torch`


def test_the_cpu_example_tunes_calls_saves_loads_and_unpatches(tmp_path: Path) -> None:
    pytest.importorskip("aitune", reason="the reference (aitune 0.6.0, installed --no-deps) is not installed")
    script = tmp_path / "aitune_example.py"
    script.write_text(readme_check.block(readme_check.AITUNE_DOC, "aitune-example"))
    env = aitune_env(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if p != str(TENSORRT_STUB))
    out = run_python([str(script)], "docs/aitune.md's example", timeout=TIMEOUT_S, env=env, cwd=tmp_path)
    last = out.strip().splitlines()[-1]
    # after unpatch_aitune() the loaded module's backend keys are stock AITune's again
    assert last == "tuned, called, saved, loaded and unpatched; key: aitune.torch.module.sample_metadata", out[-3000:]
