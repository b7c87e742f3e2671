"""Smoke test of an installed aitune_fast (from a wheel or the sdist); exit status 1 on any failure.

    python scripts/wheel_smoke.py --version 0.2.0.dev0 --out DIR   # with the interpreter it is installed in

Run from outside the source tree (the installed package must be what runs). Checks: aitune_fast imports from
this interpreter's environment, at the expected version; ``runtime_info()`` names this Python and torch and the
fast reader (``dlpack``; ``python`` below torch 2.10); ``from_inputs``, dispatch and ``to_json`` round trips work;
``AITUNE_FAST_TENSOR_READER=python`` forces the fallback; the benchmark's smoke run
(``python -m aitune_fast.bench --smoke``) passes against the reference (aitune 0.6.0, installed ``--no-deps``).
Used by ``scripts/check_wheel.sh`` and by ``.github/workflows/release.yml``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

BENCH_TIMEOUT_S = 900


def check_import(version: str) -> None:
    import aitune_fast
    import torch
    from aitune_fast import SampleMetadata

    info = aitune_fast.runtime_info()
    print("  runtime_info():", json.dumps(info))
    where = os.path.realpath(aitune_fast.__file__)
    assert where.startswith(os.path.realpath(sys.prefix) + os.sep), f"imported from {where}, not {sys.prefix}"
    assert info["version"] == aitune_fast.__version__ == version, (info, version)
    assert info["torch"] == torch.__version__ and info["python"] == sys.version.split()[0], info
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    expected = {"dlpack", "stable_abi"} if (major, minor) >= (2, 10) else {"python"}
    reader = info["tensor_reader"]
    assert reader in expected, f"torch {torch.__version__}: reader {reader}, expected {expected}"
    x = {"input_ids": torch.ones(1, 7, dtype=torch.int64), "cache_position": torch.tensor([5]), "scale": 0.5}
    m = SampleMetadata.from_inputs(x, strict=True)
    assert {m: 1}[SampleMetadata.from_inputs(dict(x), strict=True)] == 1
    assert SampleMetadata.from_json(m.to_json()) == m
    print(f"  ok    imports from {sys.prefix}; reader {reader} as expected; from_inputs/dispatch/to_json work")


def check_forced_reader() -> None:
    code = 'import aitune_fast as a; r = a.runtime_info()["tensor_reader"]; assert r == "python", r'
    env = {**os.environ, "AITUNE_FAST_TENSOR_READER": "python"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    print("  ok    AITUNE_FAST_TENSOR_READER=python forces the fallback")


def check_bench(out: Path) -> None:
    cmd = [sys.executable, "-m", "aitune_fast.bench", "--smoke", "--no-progress", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        print(proc.stdout[-6000:], proc.stderr[-6000:], sep="\n")
        raise AssertionError(f"the benchmark smoke run failed (exit {proc.returncode})")
    for line in (proc.stdout + proc.stderr).splitlines():
        if re.match(r"^ *(workload|llm_decode +dispatch)", line):
            print("   ", line)
    print("  ok    benchmark smoke run (python -m aitune_fast.bench --smoke) from the installed package")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", required=True, help="the version the installed package must report")
    ap.add_argument("--out", type=Path, required=True, help="where the benchmark writes its results")
    args = ap.parse_args()
    try:
        check_import(args.version)
        check_forced_reader()
        check_bench(args.out)
    except (AssertionError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        print(f"  FAIL  {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
