"""``python -m aitune_fast inspect`` on checkpoints a real AITune saved, stock and patched: a tiny Llama, a vision
model, a JIT-tuned model (``inspect_child.py`` saves them). The inspector must read what the live modules held, the
same from a stock checkpoint as from a patched one, without importing AITune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import PYTHON_DIR, run_script

CHILD = Path(__file__).resolve().parent / "inspect_child.py"
MODES = ("stock", "patched")
KINDS = ("llama", "vision", "jit")
TIMEOUT_S = 600

# reads every checkpoint named on the command line; prints the results and the aitune modules imported meanwhile
_READER = """
import json, sys
from aitune_fast._inspect import inspect_checkpoint
out = {path: inspect_checkpoint(path, "full") for path in sys.argv[1:]}
print(json.dumps({"read": out, "aitune_imported": sorted(m for m in sys.modules if m.split(".")[0] == "aitune")}))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    workdir = tmp_path_factory.mktemp("inspect")
    with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
        futures = {
            mode: pool.submit(run_script, CHILD, mode, str(workdir), workdir=workdir, timeout=TIMEOUT_S)
            for mode in MODES
        }
        return workdir / "checkpoints", {mode: future.result() for mode, future in futures.items()}


def python(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def read(saved) -> dict:
    folder, _ = saved
    paths = [str(folder / f"{kind}-{mode}.ait") for mode in MODES for kind in KINDS]
    done = python("-c", _READER, *paths)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["aitune_imported"] == []  # nothing of AITune's is imported to read its checkpoints
    return {(mode, kind): out["read"][str(folder / f"{kind}-{mode}.ait")] for mode in MODES for kind in KINDS}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["llama", "vision"])
def test_inspect_reads_what_the_live_module_held(saved, read, mode, kind):
    live = saved[1][mode][kind]
    (module,) = read[(mode, kind)]["modules"]
    assert module["name"] == f"{kind}-{mode}" and module["check_graph"] is True
    graphs = module["graphs"]
    assert [(g["llm_phase"], g["tensors"]) for g in graphs] == [(g["phase"], g["tensors"]) for g in live]
    assert [g["metadata"] for g in graphs] == [g["full"] for g in live]  # AITune's own describe(FULL) of the keys
    assert all(g["backend"].startswith("TorchEagerBackend(") for g in graphs)


def test_the_llama_has_its_two_phases_and_batch_axes(read):
    (module,) = read[("stock", "llama")]["modules"]
    assert [g["llm_phase"] for g in module["graphs"]] == ["prefill", "decode"]
    assert "past_key_values" in module["parameters"]
    axes = {(a["path"], a["axis"], a["kind"], a["min"], a["max"]) for a in module["graphs"][0]["axes"]}
    assert ("input_ids", 0, "batch", 1, 2) in axes


def test_the_vision_model_has_a_batch_axis(read):
    (module,) = read[("patched", "vision")]["modules"]
    assert [(a["path"], a["axis"], a["kind"]) for a in module["graphs"][0]["axes"]] == [("pixel_values", 0, "batch")]


@pytest.mark.parametrize("mode", MODES)
def test_a_jit_tuned_models_checkpoint_reads_with_no_tuned_module(read, mode):
    """AITune's ``save`` of a JIT-tuned model writes its weights only (no tuning state to inspect)."""
    assert read[(mode, "jit")]["modules"] == []


@pytest.mark.parametrize("kind", KINDS)
def test_stock_and_patched_checkpoints_read_the_same(read, kind):
    stock, patched = read[("stock", kind)]["modules"], read[("patched", kind)]["modules"]
    for module in (*stock, *patched):
        module["name"] = module["name"].rsplit("-", 1)[0]
    assert patched == stock


def test_the_cli_prints_text_and_json(saved):
    folder, _ = saved
    text = python("-m", "aitune_fast", "inspect", str(folder / "llama-stock.ait"))
    assert text.returncode == 0, text.stderr[-2000:]
    lines = text.stdout.splitlines()
    assert lines[0] == "checkpoint llama-stock.ait:state_dict.pt: 1 tuned module(s)"
    assert lines[1].startswith("tuned module 'llama-stock' (at the top): 2 graph(s), check_graph=True, forward(")
    assert lines[2].startswith("  graph #0: 4 tensors, LLM phase prefill; backend TorchEagerBackend(")
    as_json = python("-m", "aitune_fast", "inspect", str(folder / "vision-patched"), "--json", "--level", "medium")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    assert json.loads(as_json.stdout)["modules"][0]["name"] == "vision-patched"
