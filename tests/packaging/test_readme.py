"""The README for users: short, in the order a user needs it, its quick start working as written, its install and
the documented benchmark install naming the current version, and the project's address written alike everywhere.

The README's install, quick start and the documented benchmark are run from the built wheel in fresh venvs by
scripts/check_wheel.sh (through scripts/readme_check.py); here, what needs no wheel.
"""

from __future__ import annotations

import importlib.util
import re
from importlib.metadata import metadata
from pathlib import Path

import aitune_fast
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_WORDS = 1000  # about a third of the 3,006 words it had before it was written for users

_spec = importlib.util.spec_from_file_location("readme_check", ROOT / "scripts" / "readme_check.py")
assert _spec is not None and _spec.loader is not None
readme_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_check)


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (CI runs these on its newer interpreter)
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_readme_is_short_and_in_the_order_a_user_needs():
    text = README.read_text()
    assert len(text.split()) <= MAX_WORDS, len(text.split())
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == ["Install", "Quick start", "With AITune: one line", "Documentation", "From a checkout"]
    intro = text.split("## Install")[0]
    assert "![" in intro and "speedups.png" in intro, "the headline numbers' chart comes first"
    before = text.split("## From a checkout")[0]
    # the benchmark and the test suite come last (building the wheels to install is part of the install)
    assert "scripts/bench.sh" not in before and "scripts/test.sh" not in before, "checkout scripts come last"


def test_readme_quick_start_runs_as_written():
    out = readme_check.quickstart()
    assert '"format":"aitune_fast.sample_metadata"' in out


@pytest.mark.parametrize(("path", "name"), [(README, "install-wheel"), (ROOT / "docs" / "performance.md", "bench")])
def test_documented_installs_name_this_version(path, name, tmp_path):
    wheel = tmp_path / f"aitune_fast-{aitune_fast.__version__}-cp312-cp312-manylinux_2_28_x86_64.whl"
    lines = readme_check.commands(readme_check.block(path, name), wheel)
    assert any(str(wheel) in line and line.startswith("pip install") for line in lines), lines
    assert not any("/" + str(wheel) in line for line in lines), lines  # the folder before the name replaced too
    stale = tmp_path / "aitune_fast-0.0.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    with pytest.raises(SystemExit, match="update the docs"):
        readme_check.commands(readme_check.block(path, name), stale)


def test_readme_installs_from_a_clone_with_a_plain_pip_install():
    """What works before any release leads: a clone of the project's repository and `pip install .` (run from a
    clean clone by scripts/check_wheel.sh, through readme_check.py's `clone`)."""
    lines = readme_check.commands(readme_check.block(README, "install"), Path("unused.whl"))
    homepage = _pyproject()["project"]["urls"]["Homepage"]
    assert lines == [f"git clone {homepage}.git", "cd aitune-fast", "pip install ."], lines
    assert f"pip install git+{homepage}.git" in README.read_text()
    before_release = README.read_text().split("## Install")[1].split("## Quick start")[0]
    assert "From the first release on" in before_release and "pip install aitune_fast`" in before_release


def test_every_artifact_name_in_the_docs_is_this_version():
    """A wheel or sdist named in the README or the docs (install commands, examples) carries this build's version:
    bumping Cargo.toml's version without the docs fails here."""
    names = re.compile(r"aitune_fast-(\d[^-\s\[\]\"`]*?)(?:-cp\d+-[^\s\"`\[]+\.whl|\.tar\.gz)")
    for path in [README, *(ROOT / "docs").glob("*.md")]:
        for version in names.findall(path.read_text()):
            assert version == aitune_fast.__version__, (
                f"{path.name} names {version}, this build is {aitune_fast.__version__}"
            )


def test_the_project_address_is_written_alike_everywhere():
    urls = _pyproject()["project"]["urls"]
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    site = re.search(r"^site_url: (\S+)$", mkdocs, re.M)
    repo = re.search(r"^repo_url: (\S+)$", mkdocs, re.M)
    assert site and repo
    assert urls["Documentation"] == site[1] and urls["Homepage"] == repo[1]
    assert urls["Changelog"] == site[1] + "changelog/" and urls["Issues"] == repo[1] + "/issues"
    text = README.read_text()
    assert repo[1] + "/actions/workflows/ci.yml/badge.svg" in text and site[1] in text
    for path in [ROOT / "SECURITY.md", *(ROOT / "docs").glob("*.md"), *(ROOT / ".github").rglob("*.yml")]:
        for url in re.findall(r"https://(?:github\.com|[\w-]+\.github\.io)/aitune-fast[\w./-]*", path.read_text()):
            assert url.startswith((repo[1], site[1])), f"{path.name}: {url}"


def test_dependency_groups_pin_what_the_scripts_install():
    groups = _pyproject()["dependency-groups"]
    pins = dict(re.findall(r'^(\w+)_PIN="([^"]+)"', (ROOT / "scripts" / "lint_pins.sh").read_text(), re.M))
    assert sorted(groups["lint"]) == sorted(pins.values())
    assert pins["RUFF"] in groups["docs"], "the docs job formats signatures with ruff, the linter's pin"
    extras = metadata("aitune_fast").get_all("Provides-Extra") or []
    assert sorted(extras) == ["aitune", "bench"], extras  # no dev extra in the published metadata
