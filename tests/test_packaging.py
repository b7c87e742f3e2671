"""Packaging: one version, the declared metadata, and a benchmark that says what is missing.

The wheel itself (tags, contents, ELF, installs next to several torch versions) is checked end to end by
``scripts/check_wheel.sh``; these tests guard what the source tree and the installed package promise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import aitune_fast

ROOT = Path(__file__).resolve().parent.parent


def _cargo_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    match = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    assert match, "no [package] version in Cargo.toml"
    return match.group(1)


def test_version_is_written_once_in_cargo_toml():
    assert aitune_fast.__version__ == _cargo_version()
    assert aitune_fast.runtime_info()["version"] == aitune_fast.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic\s*=\s*\["version"\]', pyproject, re.M)
    assert not re.search(r"^version\s*=", pyproject, re.M), "pyproject.toml must not repeat the version"
    # no other hard-coded copy in the package
    for path in (ROOT / "python" / "aitune_fast").rglob("*.py"):
        assert not re.search(r"__version__\s*=\s*[\"']\d+\.\d", path.read_text()), path


def test_installed_metadata_declares_torch_license_and_bench_extra():
    meta = metadata("aitune_fast")
    requires = meta.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    assert any(re.match(r"torch\s*>=", r) for r in base), base
    assert any(re.match(r"tabulate\b", r) for r in base), base
    bench = [r.split(";")[0].strip() for r in requires if "extra == 'bench'" in r or 'extra == "bench"' in r]
    assert {"optree", "matplotlib", "nvtx"} <= {re.split(r"[<>=! \[]", r)[0] for r in bench}, bench
    assert meta["License-Expression"] == "Apache-2.0"
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text


def _bench_smoke(tmp_path: Path, block: str) -> subprocess.CompletedProcess:
    """The smoke benchmark on one workload and operation, in a child where ``block`` cannot be imported."""
    code = f"""
import importlib.util, sys
blocked = {block!r}
real_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == blocked else real_find_spec(name, *a)
sys.modules[blocked] = None  # `import blocked` raises ImportError
from aitune_fast.bench.cli import main
sys.exit(main(["--smoke", "--no-progress", "--no-scaling", "--workloads", "vision", "--ops", "from_inputs",
               "--out", {str(tmp_path)!r}]))
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_bench_without_optree_skips_its_column_and_says_so(tmp_path):
    proc = _bench_smoke(tmp_path, "optree")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "optree is not installed" in proc.stderr and "aitune_fast[bench]" in proc.stderr
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert rows and all(row["times"]["optree"] is None and row["times"]["floor"] for row in rows)


def test_bench_without_the_reference_says_how_to_install_it(tmp_path):
    proc = _bench_smoke(tmp_path, "aitune")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    assert "pip install --no-deps aitune==0.6.0" in proc.stderr
