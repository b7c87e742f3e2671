"""AITune on two ``torch.distributed`` ranks (gloo, 127.0.0.1): stock and patched give the same results.

``distributed_child.py`` spawns two ranks (``torch.multiprocessing.spawn``, collectives bounded by a timeout). Each
rank tunes an MLP and an LLM-like decode step (dict KV cache, ``cache_position``) with TorchEager, saves, loads and
runs them with a stock AITune, then the same after ``aitune_fast.patch_aitune()``, then loads the stock checkpoints
patched and the patched ones after ``unpatch_aitune()``. AITune coordinates the ranks itself (its correctness checks
and checkpoint deployment gather every rank's outcome; cache folders are per rank): the patch must issue the same
collectives and give every rank the same outputs, keys and backends as stock.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHILD = HERE / "distributed_child.py"
STUB = HERE / "fixtures" / "tensorrt_stub"
TIMEOUT_S = 600
MODELS = ("mlp", "llm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    workdir = tmp_path_factory.mktemp("distributed")
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STUB), environ.get("PYTHONPATH")]))
    for name in ("AUTOWRAPT_BOOTSTRAP", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        environ.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(workdir), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=environ,
        cwd=str(workdir),
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0 and lines, f"distributed child failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    out = json.loads(lines[-1])
    assert "error" not in out, out["error"]
    for rank in out["ranks"]:
        assert "error" not in rank, f"rank {rank['rank']}:\n{rank['error']}"
    return out["ranks"]


def test_ranks_see_the_group(ranks):
    assert [r["context"] for r in ranks] == [[0, 2], [1, 2]]


@pytest.mark.parametrize("model", MODELS)
def test_patched_matches_stock_on_every_rank(ranks, model):
    """Tuned and loaded outputs, backend keys, backends, device and cache folder: the same, rank by rank."""
    for rank in ranks:
        assert rank["patched"][model] == rank["stock"][model], f"rank {rank['rank']}"
        assert rank["stock"][model]["loaded"] == rank["stock"][model]["tuned"]
        assert rank["stock"][model]["cache_dir"].startswith(f"rank-{rank['rank']}-of-2")


@pytest.mark.parametrize("model", MODELS)
def test_ranks_ran_their_own_inputs(ranks, model):
    """Each rank fed its own inputs: equal outputs across ranks would hide a mix-up."""
    assert ranks[0]["stock"][model]["tuned"] != ranks[1]["stock"][model]["tuned"]


def test_same_collectives_stock_and_patched(ranks):
    for rank in ranks:
        assert rank["stock_collectives"], "AITune issued no collective: the ranks were not coordinated"
        assert rank["patched_collectives"] == rank["stock_collectives"]


@pytest.mark.parametrize("model", MODELS)
def test_checkpoints_cross_load(ranks, model):
    for rank in ranks:
        assert rank["stock_ckpt_patched"][model] == rank["stock"][model]["tuned"]
        assert rank["patched_ckpt_unpatched"][model] == rank["patched"][model]["tuned"]
