"""The README's install and quick start, docs/aitune.md's example, and the documented benchmark, run as written in
an installed venv.

    python scripts/readme_check.py clone --src CLONE         # the README's install from a clone: its `git clone`
                                                             # line stands for CLONE (a clean clone; the test has
                                                             # no network but the package registries)
    python scripts/readme_check.py install --wheel WHEEL     # the README's wheel install, the wheel's name put in
    python scripts/readme_check.py quickstart                # the README's quick start, from an empty folder
    python scripts/readme_check.py aitune                    # docs/aitune.md's CPU example: AITune without its
                                                             # TensorRT stack installed as it says, then the example
    python scripts/readme_check.py bench --wheel WHEEL --out DIR   # docs/performance.md's install, then the
                                                                   # tuned-module workload: its rows must print

Run with the venv's interpreter (``pip`` and ``python`` in the blocks are that venv's). The blocks are the fenced
code blocks after a ``<!-- readme-check: NAME -->`` line; a wheel file name in them is replaced by WHEEL, whose
version they must name. Used by ``scripts/check_wheel.sh`` on every wheel it installs, and (quick start, version)
by ``tests/packaging/test_readme.py``. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
AITUNE_DOC = ROOT / "docs" / "aitune.md"
# a wheel's file name, with the folder the docs put it in (dist/)
WHEEL_NAME = re.compile(r"(?:[\w.-]+/)*aitune_fast-(?P<version>[^-\s]+)-cp\d+-cp\d+-manylinux_2_28_\w+\.whl")
CLONE = re.compile(r"git clone (?P<url>\S+)")
TUNED_ROWS = ("mlp", "llm_decode_cp", "llm_decode")
TIMEOUT_S = 1800


def block(path: Path, name: str) -> str:
    """The fenced code block after ``<!-- readme-check: name -->`` in `path`."""
    match = re.search(rf"<!-- readme-check: {name} -->\s*\n```\w*\n(.*?)\n```", path.read_text(), re.S)
    if match is None:
        raise SystemExit(f"{path.name}: no code block marked <!-- readme-check: {name} -->")
    return match.group(1)


def commands(text: str, wheel: Path) -> list[str]:
    """The block's command lines (comments dropped), each wheel file name replaced by `wheel`'s path, which must
    have the version the block names."""
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for match in WHEEL_NAME.finditer(line):
            named, built = match["version"], WHEEL_NAME.search(wheel.name)
            if built is None or built["version"] != named:
                raise SystemExit(f"the docs name version {named}, the wheel is {wheel.name}: update the docs")
        out.append(WHEEL_NAME.sub(str(wheel), line))
    return out


def run_commands(lines: list[str], cwd: Path | None = None) -> None:
    """Each line in bash (in `cwd`), with this interpreter's folder first on PATH (its pip and python)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for line in lines:
        print(f"  $ {line}", flush=True)
        subprocess.run(["bash", "-c", line], env=env, check=True, timeout=TIMEOUT_S, cwd=cwd)


def clone_install(src: Path) -> None:
    """The README's install block from a clone: `git clone URL` stands for `src` (a clean clone of the commit under
    test), `cd` into the clone's folder is `src`, the other lines run there as written."""
    lines = commands(block(README, "install"), Path("unused.whl"))
    cloned = CLONE.fullmatch(lines[0])
    folder = cloned["url"].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") if cloned else None
    if cloned is None or lines[1] != f"cd {folder}":
        raise SystemExit(f"the README's install block does not start with `git clone URL` and `cd FOLDER`: {lines}")
    print(f"  $ {lines[0]}    # stands for the clean clone {src}", flush=True)
    run_commands(lines[2:], cwd=src)


def aitune_example() -> str:
    """docs/aitune.md's CPU example, after installing what it says AITune needs there: AITune without its
    dependencies, and its other dependencies, which the installed aitune_fast's `bench` extra lists (read from its
    metadata, so that nothing is built again); run from an empty folder with its own AITUNE_CACHE_DIR."""
    extra = re.compile(r";\s*extra\s*==\s*[\"']bench[\"']")
    needs = [extra.split(r)[0].strip() for r in importlib.metadata.requires("aitune_fast") or [] if extra.search(r)]
    pins = ["--no-deps", "aitune==0.6.0"] + (["--ignore-requires-python"] if sys.version_info >= (3, 13) else [])
    for args in (pins, needs):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True, timeout=TIMEOUT_S)
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "aitune_example.py"
        script.write_text(block(AITUNE_DOC, "aitune-example"))
        env = {**os.environ, "AITUNE_CACHE_DIR": str(Path(folder) / "cache")}
        env["AITUNE_JIT_CACHE_DIR"] = str(Path(folder) / "cache.jit")
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            env=env,
        )
    if proc.returncode != 0 or "unpatched" not in proc.stdout:
        raise SystemExit(f"docs/aitune.md's example failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def quickstart() -> str:
    """Run the README's quick start with this interpreter, from an empty folder; its output."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "quickstart.py"
        script.write_text(block(README, "quickstart"))
        proc = subprocess.run(
            [sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=600, check=False
        )
    if proc.returncode != 0:
        raise SystemExit(f"the README's quick start failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    document = json.loads(proc.stdout.strip().splitlines()[-1])
    assert document["format"] == "aitune_fast.sample_metadata", document
    return proc.stdout


def bench(wheel: Path, out: Path) -> None:
    """docs/performance.md's install lines, then the tuned-module workload, whose rows must be printed."""
    lines = [line for line in commands(block(PERFORMANCE, "bench"), wheel) if line.startswith("pip ")]
    if sys.version_info >= (3, 13):  # as the block's comment says: aitune 0.6.0 declares Python < 3.13
        lines = [line + " --ignore-requires-python" if "aitune==" in line else line for line in lines]
    run_commands(lines)
    cmd = [sys.executable, "-m", "aitune_fast.bench", "--smoke", "--no-progress", "--workloads", "aitune_tuned"]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=out.parent
    )
    text = proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in TUNED_ROWS]
    if proc.returncode != 0 or {row.split()[0] for row in rows} != set(TUNED_ROWS) or "tensorrt: " not in text:
        raise SystemExit(f"the tuned-module workload printed no rows (exit {proc.returncode}):\n{text[-5000:]}")
    print("\n".join(f"    {line}" for line in proc.stdout.splitlines() if line.strip()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["clone", "install", "quickstart", "aitune", "bench"])
    ap.add_argument("--wheel", type=Path, help="the wheel the blocks' wheel names stand for")
    ap.add_argument("--src", type=Path, help="clone: the clean clone the README's `git clone` stands for")
    ap.add_argument("--out", type=Path, help="bench: the results folder")
    args = ap.parse_args()
    try:
        if args.what == "clone":
            clone_install(args.src.resolve())
            print("  ok    the README's install from a clone, as written")
        elif args.what == "install":
            run_commands(commands(block(README, "install-wheel"), args.wheel.resolve()))
            print("  ok    the README's wheel install, as written")
        elif args.what == "aitune":
            print("".join(f"    {line}\n" for line in aitune_example().splitlines()), end="")
            print("  ok    docs/aitune.md's CPU example, AITune installed as it says")
        elif args.what == "quickstart":
            print("".join(f"    {line}\n" for line in quickstart().splitlines()), end="")
            print("  ok    the README's quick start, as written")
        else:
            bench(args.wheel.resolve(), args.out.resolve())
            print("  ok    the benchmark installed as docs/performance.md says printed the tuned-call rows")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError, KeyError, ValueError) as exc:
        print(f"  FAIL  {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
