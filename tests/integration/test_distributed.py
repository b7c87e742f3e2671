"""AITune on two ``torch.distributed`` ranks (gloo, 127.0.0.1): stock and patched give the same results.

``distributed_child.py`` spawns two ranks (``torch.multiprocessing.spawn``, collectives bounded by a timeout). Each
rank tunes an MLP and an LLM-like decode step (dict KV cache, ``cache_position``) with TorchEager, saves, loads and
runs them with a stock AITune, then the same after ``aitune_fast.patch_aitune()``, then loads the stock checkpoints
patched and the patched ones after ``unpatch_aitune()``. AITune coordinates the ranks itself (its correctness checks
and checkpoint deployment gather every rank's outcome; cache folders are per rank): the patch must issue the same
collectives and give every rank the same outputs, keys and backends as stock.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from child import run_script

CHILD = Path(__file__).resolve().parent / "distributed_child.py"
TIMEOUT_S = 600
MODELS = ("mlp", "llm")
# the child sets up its own process group: none of the parent's may leak into it
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    workdir = tmp_path_factory.mktemp("distributed")
    port = str(_free_port())
    out = run_script(CHILD, str(workdir), port, workdir=workdir, timeout=TIMEOUT_S, drop=DISTRIBUTED_ENV)
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
