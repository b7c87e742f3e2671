"""``aitune_fast.dispatch_stats`` on a module tuned by a real AITune (``stats_child.py``): under ``patch_aitune()`` the
tuned call counts hits per graph exactly (one thread, and threads), misses with the last miss's report, and the
path's own time; ``reset()`` starts again; off (the default), a stock AITune and ``patch_aitune(call_path=False)``
count nothing and say why."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import run_script

CHILD = Path(__file__).resolve().parent / "stats_child.py"
MODES = ("patched", "metadata", "stock")
TIMEOUT_S = 600
CALLS_A, CALLS_B, MISSES = 7, 5, 2  # stats_child.py's


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    workdir = tmp_path_factory.mktemp("stats")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            mode: pool.submit(
                run_script, CHILD, mode, workdir=workdir / mode, timeout=TIMEOUT_S, drop=("AITUNE_FAST_STATS",)
            )
            for mode in MODES
        }
        return {mode: future.result() for mode, future in futures.items()}


def module(run: dict, name: str) -> dict:
    (entry,) = run[name]["modules"]
    return entry


def test_off_by_default_nothing_is_counted(runs):
    for mode in MODES:
        off = runs[mode]["off"]
        assert off["calls"] == 0
        assert off["collecting"].startswith("dispatch statistics are off")
        assert "nothing is collected" in off["text"]


def test_hits_per_graph_are_counted_exactly(runs):
    entry = module(runs["patched"], "on")
    assert runs["patched"]["on"]["collecting"] == ""
    assert [(g["index"], g["hits"]) for g in entry["graphs"]] == [(0, CALLS_A), (1, CALLS_B)]
    assert [g["graph"] for g in entry["graphs"]] == ["Tensors: x, y Others: mode=a", "Tensors: x Others: mode=b"]
    assert entry["graphs"][0]["backend"] == "TorchEagerBackend()"
    assert (entry["calls"], entry["misses"], entry["other"]) == (CALLS_A + CALLS_B + MISSES, MISSES, 0)


def test_hits_are_exact_across_threads(runs):
    threads = runs["patched"]["threads"]
    assert threads["hits"] == threads["backend_runs"]  # every tuned call counted once, on its graph
    assert sum(threads["hits"]) > 0 and (threads["other"], threads["misses"]) == (0, 0)


def test_the_last_miss_is_explained(runs):
    patched = runs["patched"]
    last = module(patched, "on")["last_miss"]
    assert last == patched["explained_miss"]  # explain()'s report of the same call
    assert last["message"] == patched["miss_message"] and not last["found"]
    assert "last miss: aitune_fast.explain: module 'pair' (2 graphs): no backend found" in patched["on_text"]


def test_the_paths_own_time_is_given(runs):
    entry = module(runs["patched"], "on")
    assert 0 < entry["p50_us"] <= entry["p99_us"] <= entry["max_us"]
    assert "the path's own time per call: p50" in runs["patched"]["on_text"]


def test_to_dict_is_plain_data_and_reset_starts_again(runs):
    patched = runs["patched"]
    assert patched["json"] is True
    reset = module(patched, "reset")
    assert (reset["calls"], reset["misses"], reset["last_miss"], reset["max_us"]) == (0, 0, None, None)
    assert [g["hits"] for g in reset["graphs"]] == [0, 0]


def test_switched_off_counting_stops(runs):
    assert runs["patched"]["after_off"] == runs["patched"]["threads"]["hits"]


def test_the_tuned_module_or_an_object_holding_it(runs):
    patched = runs["patched"]
    assert patched["inner"] == patched["held"] == patched["on"]


@pytest.mark.parametrize(
    ("mode", "why"),
    [("stock", "AITune is not patched"), ("metadata", "AITune is patched without its call path")],
)
def test_nothing_is_counted_without_the_call_path(runs, mode, why):
    on = runs[mode]["on"]
    assert on["collecting"].startswith(why)
    assert module(runs[mode], "on")["calls"] == 0


def test_a_dead_modules_record_is_dropped(runs):
    dead = runs["patched"]["dead_module"]
    assert dead["module_gone"] and dead["kept_meanwhile"]  # the last miss's metadata is kept while no module is new
    assert dead["released"]  # a new module recorded: the dead one's record, and that metadata, dropped
