"""Packaging: one version, the declared metadata, and a benchmark that says what is missing.

The wheel itself (tags, contents, ELF, installs next to several torch versions) is checked end to end by
``scripts/check_wheel.sh``; these tests guard what the source tree and the installed package promise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import aitune_fast
import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _cargo_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    match = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    assert match, "no [package] version in Cargo.toml"
    return match.group(1)


def _shell_package_version() -> str:
    """scripts/release_tools.sh's package_version: what check_wheel.sh and the release workflow expect."""
    cmd = ["bash", "-c", '. scripts/release_tools.sh && package_version "$PWD"']
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def test_version_is_written_once_in_cargo_toml():
    # Cargo's SemVer (0.2.0-dev.0) in PEP 440's normal form (0.2.0.dev0) is what maturin writes into the wheel
    assert aitune_fast.__version__ == str(Version(_cargo_version())) == _shell_package_version()
    assert aitune_fast.runtime_info()["version"] == aitune_fast.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic\s*=\s*\["version"\]', pyproject, re.M)
    assert not re.search(r"^version\s*=", pyproject, re.M), "pyproject.toml must not repeat the version"
    # no other hard-coded copy in the package
    for path in (ROOT / "python" / "aitune_fast").rglob("*.py"):
        assert not re.search(r"__version__\s*=\s*[\"']\d+\.\d", path.read_text()), path


def test_an_unreleased_build_says_so_and_the_changelog_matches():
    """Between releases the version is a .devN of the next one, and the CHANGELOG has no section of its own for it
    (its changes are under [Unreleased]); every released version has a dated section."""
    version = Version(aitune_fast.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\](.*)$", changelog, re.M)
    assert sections and sections[0][0] == "Unreleased", sections[:1]
    for name, rest in sections[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", name), name
        assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), f"[{name}]{rest}: a released section needs its date"
        assert Version(name) < version, f"[{name}] is not older than this build ({version})"
    if version.is_devrelease:
        assert version.base_version not in {name for name, _ in sections}, "a dev build of a released version"


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


def test_bench_without_its_extra_names_the_pip_install_to_run(tmp_path):
    proc = _bench_smoke(tmp_path, "nvtx")  # what the reference's modules import: the bench extra brings it
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    assert "'nvtx'" in proc.stderr and 'pip install "aitune_fast[bench]"' in proc.stderr, proc.stderr[-3000:]


def test_bench_names_its_results_folder_first(tmp_path):
    proc = _bench_smoke(tmp_path, "no-such-module")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0] == f"aitune_fast benchmark: results go to {tmp_path}"
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "results.md").is_file()


def test_installed_bench_writes_to_a_new_temporary_folder_not_the_current_one(monkeypatch, tmp_path):
    from aitune_fast.bench import cli

    monkeypatch.chdir(tmp_path)
    assert cli.default_results_dir("quick") == ROOT / "benches" / "results"  # in a checkout
    installed = tmp_path / "venv" / "lib" / "site-packages" / "aitune_fast" / "bench" / "cli.py"
    monkeypatch.setattr(cli, "__file__", str(installed))
    out = cli.default_results_dir("smoke")
    assert out.is_dir() and not any(out.iterdir()) and tmp_path not in out.parents
    assert out.name.startswith("aitune_fast-bench-smoke-")
    out.rmdir()


def test_the_tuned_workload_runs_as_a_module_without_a_warning_and_explains_its_mode(tmp_path):
    """`python -m aitune_fast.bench.aitune_tuned`, which the docs quote: no runpy RuntimeWarning (the package once
    imported the module before runpy ran it), and `--mode` says what each mode runs."""
    cmd = [sys.executable, "-m", "aitune_fast.bench.aitune_tuned", "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and "RuntimeWarning" not in proc.stderr, proc.stderr[-2000:]
    help_text = " ".join(proc.stdout.split())
    assert "full 15 rounds of 200 calls, quick 7 rounds of 100 calls, smoke 2 rounds of 20 calls" in help_text


def test_tuned_table_prints_a_profile_only_when_asked():
    from aitune_fast.bench import aitune_tuned

    row = dict.fromkeys(
        "stock_us patched_us ratio fast_us fast_ratio stock_path_us patched_path_us fast_path_us fast_path_ratio "
        "meta_ref_us meta_ours_us meta_ratio meta_compact_us meta_compact_ratio compact_us compact_ratio".split(),
        1.0,
    )
    result = {"rows": {"mlp": row}, "key_eq_us": {"tuned": 1.0, "compact": 1.0}, "tensorrt": "installed"}
    assert "cProfile" not in aitune_tuned.table(result)
    assert "cProfile" in aitune_tuned.table({**result, "profile": "ncalls ..."})


def test_tuned_child_loads_the_benchmark_stand_in_where_tensorrt_is_missing(tmp_path):
    """From an installed package, with no TensorRT: `import aitune.torch` works on the stand-in the package ships,
    and the workload says so (the test suite's own stand-in is not on the path here)."""
    code = (
        "import importlib.util, json; assert importlib.util.find_spec('tensorrt') is None\n"
        "from aitune_fast.bench.aitune_tuned import STAND_IN_NOTE, _import_aitune\n"
        "ait, trt = _import_aitune(); import tensorrt\n"
        "print(json.dumps([trt == STAND_IN_NOTE, tensorrt.IS_AITUNE_FAST_STAND_IN, hasattr(ait, 'tune')]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, True, True]


# ------------------------------------------------------------------------------------------ release workflow
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _actionlint() -> str | None:
    """actionlint from PATH or from the release tools venv (scripts/release_tools.sh; scripts/setup.sh makes it)."""
    cache = os.environ.get("AITUNE_FAST_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aitune_fast"
    )
    candidate = Path(cache) / "tools" / "bin" / "actionlint"
    return shutil.which("actionlint") or (str(candidate) if candidate.is_file() else None)


def test_release_workflow_passes_actionlint():
    tool = _actionlint()
    if tool is None:
        assert not os.environ.get("CI"), "actionlint missing: scripts/setup.sh installs it (release_tools.sh)"
        pytest.skip("actionlint not installed: bash scripts/setup.sh installs it")
    # shellcheck from the same tools venv checks the `run:` scripts (actionlint skips them without it)
    env = {**os.environ, "PATH": f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [tool, "-no-color", "-oneline"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _shell_array(path: Path, name: str) -> list[str]:
    match = re.search(rf"^{name}=\(([^)]*)\)", path.read_text(), re.M)
    assert match, f"no {name}=(...) in {path.name}"
    return [w.strip('"') for w in match.group(1).split()]


def test_release_workflow_builds_tests_and_publishes_what_the_scripts_build():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    jobs = wf["jobs"]
    pythons = _shell_array(ROOT / "scripts" / "build_wheels.sh", "PYTHONS")
    classifiers = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pythons == classifiers == ["3.10", "3.11", "3.12", "3.13"]
    # the wheels: maturin's action, both architectures, manylinux_2_28, the same interpreters, the pinned maturin
    build = next(s for s in jobs["wheels"]["steps"] if s.get("uses", "").startswith("PyO3/maturin-action@"))
    assert jobs["wheels"]["strategy"]["matrix"]["target"] == ["x86_64", "aarch64"]
    assert build["with"]["manylinux"] == "2_28" and build["with"]["target"] == "${{ matrix.target }}"
    args = build["with"]["args"].split()
    assert "--release" in args and "--locked" in args
    assert args[args.index("--interpreter") + 1 :][: len(pythons)] == pythons
    maturin_pin = next(p for p in _shell_array(ROOT / "scripts" / "release_tools.sh", "TOOL_PINS") if "maturin" in p)
    assert maturin_pin == f"maturin=={wf['env']['MATURIN_VERSION']}"
    sdist = next(s for s in jobs["sdist"]["steps"] if s.get("uses", "").startswith("PyO3/maturin-action@"))
    assert sdist["with"]["command"] == "sdist"
    # the tests: the x86_64 wheels next to torch 2.10 on the oldest Python and the newest torch on the newest; the sdist
    runs = {(m["python"], m["torch"], m["install"]) for m in jobs["test"]["strategy"]["matrix"]["include"]}
    assert {(pythons[0], "torch==2.10.*", "wheel"), (pythons[-1], "torch", "wheel")} <= runs
    assert any(install == "sdist" for _, _, install in runs)
    assert "scripts/wheel_smoke.py" in str(jobs["test"]["steps"])
    # publishing: only for a version tag, after the tests, by trusted publishing from an environment
    on = wf.get("on", wf.get(True))
    assert on["push"]["tags"] == ["v*"]
    publish = jobs["publish"]
    assert "startsWith(github.ref, 'refs/tags/v')" in publish["if"] and "github.event_name == 'push'" in publish["if"]
    assert {"wheels", "sdist", "test"} <= set(publish["needs"])
    assert publish["permissions"] == {"id-token": "write"} and publish["environment"] == "pypi"
    assert wf["permissions"] == {"contents": "read"}
    assert publish["steps"][-1]["uses"].startswith("pypa/gh-action-pypi-publish@")
    assert "password" not in publish["steps"][-1].get("with", {})
    # the clone install the README leads with, tested like the wheels
    assert any(install == "clone" for _, _, install in runs)
    assert "python -m pip install ." in str(jobs["test"]["steps"])
    # the GitHub Release: on the same tag, after the tests and before the index, the nine files with the
    # CHANGELOG's section for the version as its text
    release = jobs["github-release"]
    assert release["if"] == publish["if"] and {"wheels", "sdist", "test"} <= set(release["needs"])
    assert "github-release" in publish["needs"], "nothing reaches the index unless its release was made"
    assert release["permissions"] == {"contents": "write"}
    script = "\n".join(step.get("run", "") for step in release["steps"])
    assert 'scripts/changelog_section.py "${TAG#v}" >release-notes.md' in script
    assert 'gh release create "$TAG" dist/*' in script and "--notes-file release-notes.md" in script


def test_docs_workflow_builds_strictly_and_deploys_main_to_pages():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "docs.yml").read_text())
    on = wf.get("on", wf.get(True))
    assert "push" in on and "pull_request" in on and wf["permissions"] == {"contents": "read"}
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    steps = str(build["steps"])
    assert "--group docs" in steps and "mkdocs build --strict --site-dir site" in steps
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "site/"
    assert deploy["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["steps"][-1]["uses"].startswith("actions/deploy-pages@")


def test_changelog_section_is_the_release_text(tmp_path):
    spec = importlib.util.spec_from_file_location("changelog_section", ROOT / "scripts" / "changelog_section.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-24\n\n### Added\n\n- it\n\n[0.2.0]: https://x\n"
    assert module.section(text, "0.2.0") == "### Added\n\n- it"
    assert module.section(text, "Unreleased") is None  # empty: no release text
    assert module.section(text, "0.2") is None and module.section(text, "0.3.0") is None
    script = [sys.executable, str(ROOT / "scripts" / "changelog_section.py")]
    unreleased = subprocess.run([*script, "Unreleased"], capture_output=True, text=True, check=False)
    assert unreleased.returncode == 0 and unreleased.stdout.startswith("Nothing has been released yet")
    missing = subprocess.run([*script, "0.0.1"], capture_output=True, text=True, check=False)
    assert missing.returncode == 1 and missing.stdout == "" and "no (or an empty) section [0.0.1]" in missing.stderr


def test_workflow_actions_are_pinned_to_commits():
    """Each `uses:` names a full commit hash, with the release it is in as a comment."""
    for path in (ROOT / ".github" / "workflows").glob("*.yml"):
        uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", path.read_text(), re.M)
        assert uses, path
        for ref, comment in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned to a commit"
            assert re.fullmatch(r"\s*# v\d+(\.\d+)*", comment), f"{path.name}: {ref} has no `# vX.Y.Z` comment"
