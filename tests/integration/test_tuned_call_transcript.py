"""The whole call of a tuned module behaves as in stock AITune 0.6.0, patched or not.

Each child process (``call_transcript_child.py``) tunes real small modules on the CPU (an MLP, a probe module whose
forward reports what it sees, an LLM decode step with a dict cache and ``cache_position``, one with a tuple cache, a
module whose signature has every kind of parameter, a JIT-tuned module; TorchEager), loads checkpoints, and writes a
transcript: calls of every argument shape, outputs, hooks and their order, what ``remove()`` on
a hook handle does after a call, hooks registered during a call, the state after an exception in forward, re-entrant
calls, AITune's context stack inside and after a call, grad mode, error types and messages, torch's global hooks, the
NVTX ranges a profiler sees (through the injection library in ``tests/fixtures/nvtx_recorder``, the way Nsight
attaches), the hardware-metrics scopes and context AITune records, and what a second thread sees while a first is
inside the backend. The stock child's transcript is compared with the patched children's, section by section: any
difference is a behaviour the patch changed. The transcripts also record stock's quirks (hook dicts replaced by copies
on each call, hooks registered inside forward lost, a second thread bypassing AITune): the patch keeps them.
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aitune_fast
import pytest
from child import TESTS_DIR, run_script

CHILD = Path(__file__).resolve().parent / "call_transcript_child.py"
RECORDER_SOURCE = TESTS_DIR / "fixtures" / "nvtx_recorder" / "nvtx_recorder.c"
TIMEOUT_S = 600

SECTIONS = (
    "outputs",
    "hooks",
    "signature",
    "instrumented",
    "hook_identity",
    "registered_during_call",
    "exception",
    "reentrant",
    "context",
    "grad",
    "errors",
    "global_hooks",
    "nvtx_and_metrics",
    "thread",
    "loaded",
    "jit",
)


def differences(stock, other, path: str = "") -> list[str]:
    """Where two transcripts differ, one line per difference (a path and both values, shortened)."""
    if type(stock) is not type(other):
        return [f"{path}: {_short(stock)} != {_short(other)}"]
    if isinstance(stock, dict):
        found = []
        for key in sorted(set(stock) | set(other)):
            if key not in stock or key not in other:
                found.append(f"{path}/{key}: only in {'stock' if key in stock else 'patched'}")
            else:
                found += differences(stock[key], other[key], f"{path}/{key}")
        return found
    if isinstance(stock, list):
        if len(stock) != len(other):
            return [f"{path}: {len(stock)} items != {len(other)} items: {_short(stock)} != {_short(other)}"]
        return [d for i, (a, b) in enumerate(zip(stock, other, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if stock == other else [f"{path}: {_short(stock)} != {_short(other)}"]


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 400 else text[:400] + "..."


def _nvtx_include() -> Path | None:
    """NVTX 3's headers: the ``nvidia`` wheels torch depends on ship them."""
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for header in sorted(Path(root).glob("nvidia/*/include/nvtx3/nvToolsExt.h")):
            return header.parent.parent
    return None


def _build_recorder(folder: Path) -> Path | None:
    include, cc = _nvtx_include(), shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None:
        return None
    library = folder / "nvtx_recorder.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(library), str(RECORDER_SOURCE), "-lpthread"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return library


def _run_child(mode: str, workdir: Path, recorder: Path | None, **env: str) -> dict:
    if recorder is not None:
        env = {"NVTX_INJECTION64_PATH": str(recorder), "NVTX_RECORDER_LOG": str(workdir / "nvtx.log"), **env}
    drop = ("TRANSCRIPT_SECTIONS", "AITUNE_HARDWARE_METRICS")
    return run_script(CHILD, mode, str(workdir), workdir=workdir, timeout=TIMEOUT_S, drop=drop, **env)


NO_CALL_PATH_OPTION = "patch_aitune() has no call_path option: it patches the metadata only"


def _runs() -> dict[str, tuple[str, dict]]:
    runs = {
        "stock": ("stock", {}),
        "patched": ("patched", {}),
        "nvtx_disabled": ("nvtx_disabled", {"NVTX_DISABLE": "1"}),
    }
    if "call_path" in inspect.signature(aitune_fast.patch_aitune).parameters:
        runs["patched_meta"] = ("patched_meta", {})
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Every child, two at a time (each is mostly one busy core)."""
    root = tmp_path_factory.mktemp("tuned_call")
    recorder = _build_recorder(root)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(_run_child, mode, root / name, recorder, **env) for name, (mode, env) in _runs().items()
        }
        out = {name: future.result() for name, future in futures.items()}
    out.setdefault("patched_meta", {"skip": NO_CALL_PATH_OPTION})
    out["recorder"] = recorder is not None
    return out


def _sections(run: dict, name: str) -> dict:
    section = run["sections"][name]
    assert "section_failed" not in section, section.get("section_failed")
    return section


@pytest.mark.parametrize("patched", ["patched", "patched_meta"])
@pytest.mark.parametrize("section", SECTIONS)
def test_transcript_matches_stock(runs, patched, section):
    if "skip" in runs[patched]:
        pytest.skip(runs[patched]["skip"])
    stock, other = _sections(runs["stock"], section), _sections(runs[patched], section)
    found = differences(stock, other)
    assert not found, f"{patched} differs from stock in section {section!r}:\n" + "\n".join(found[:40])


@pytest.mark.parametrize("patched", ["patched", "patched_meta"])
def test_after_unpatch_matches_stock(runs, patched):
    """unpatch_aitune() hands the live modules back to stock's call path."""
    if "skip" in runs[patched]:
        pytest.skip(runs[patched]["skip"])
    found = differences(runs["stock"]["after_unpatch"], runs[patched]["after_unpatch"])
    assert not found, "after unpatch_aitune():\n" + "\n".join(found[:40])


def test_patched_children_were_patched(runs):
    """The transcripts compared a patched AITune, and, where the patch has its own call path, that path."""
    assert runs["patched"]["patched"] is True
    assert "patched" not in runs["stock"]
    stock_path = runs["stock"]["call_path"]
    assert set(stock_path.values()) <= {"aitune.torch.module.wrapper_module", "aitune.torch.module.tuned_module"} | {
        "aitune.torch.backend.backend"
    }
    if "skip" not in runs["patched_meta"]:
        assert runs["patched"]["call_path"] != stock_path
        assert runs["patched_meta"]["call_path"] == stock_path


def test_nvtx_disabled_matches_stock(runs):
    """With NVTX_DISABLE set, the patched path emits no range either, and records metrics the same way."""
    stock, patched = runs["nvtx_disabled"]["stock"], runs["nvtx_disabled"]["patched"]
    found = differences(stock, patched)
    assert not found, "NVTX_DISABLE:\n" + "\n".join(found[:40])
    assert "push" not in json.dumps(stock)
    assert stock["mlp"]["samples"] == [["infer", "mlp-nvtx", "TorchEagerBackend()"]]


def test_transcript_sees_what_it_claims(runs):
    """The stock transcript is not vacuous: it holds the behaviours the comparison is meant to guard."""
    stock = runs["stock"]["sections"]
    hooks = stock["hooks"]
    assert [e[0] for e in hooks["events"] if not e[0].startswith("metrics")] == [
        "pre_first",
        "pre",
        "pre_kw",
        "hook_always",
        "hook",
        "hook_kw",
    ]
    # a handle removed after a call: the hook dicts were replaced by copies, the with_kwargs sets were not
    assert hooks["after_remove"]["raised"][0] == "TypeError"
    identity = stock["hook_identity"]
    assert identity["hooks_same_dict"] is False and identity["forward_same"] is True
    assert stock["registered_during_call"]["inside_forward_call"] == [
        ["metrics.start_scope", "infer"],
        ["metrics.end_scope"],
    ]
    assert stock["exception"]["call"]["raised"] == ["ValueError", "forward failed on purpose"]
    assert stock["errors"]["no_backend_rank"]["raised"][1].startswith("No backend found for a graph with metadata")
    assert stock["thread"]["seen_by_second"]["forward_is_proxy"] is False
    assert stock["grad"]["events"][0] == [False, False]
    metrics = stock["nvtx_and_metrics"]["mlp"]
    assert metrics["samples"] == [["infer", "mlp-early", "TorchEagerBackend()"]]
    if runs["recorder"]:
        assert metrics["nvtx"] == [
            ["push", "AITune", "00008000", "infer module:mlp-early backend:TorchEagerBackend()"],
            ["pop", "AITune"],
        ]
    assert stock["jit"]["state"] == ["tuned"]


def test_nvtx_recorder_present(runs):
    """The NVTX comparison is only as good as the recorder: say so when it could not be built."""
    if not runs["recorder"]:
        pytest.skip("no C compiler or no NVTX 3 headers: NVTX ranges were not recorded (metrics still were)")
    assert runs["stock"]["sections"]["nvtx_and_metrics"]["llm_dict"]["nvtx"]


def test_differences_reports_each_change():
    """The comparison itself: a dropped event, a changed message, an extra key are each reported."""
    stock = {"events": [["pre"], ["hook"]], "raised": ["TypeError", "missing a required argument: 'x'"]}
    assert differences(stock, json.loads(json.dumps(stock))) == []
    assert differences(stock, {**stock, "events": [["pre"]]})
    assert differences(stock, {**stock, "raised": ["TypeError", "missing a required argument: 'y'"]})
    assert differences(stock, {**stock, "extra": 1})
    assert differences(stock, {**stock, "events": [["hook"], ["pre"]]})
