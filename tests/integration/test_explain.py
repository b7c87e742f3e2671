"""``aitune_fast.explain`` and the note a miss carries, on modules tuned by a real AITune, stock and patched.

Two children (``explain_child.py``) tune the same modules, one with a stock AITune, one under ``patch_aitune()``;
each explains the same calls. The reports must be the same (a metadata of ours and AITune's is explained the same
way) and name each kind of difference; the miss's error keeps AITune's message and carries the report as a note only
where ``configure(explain_misses=True)`` is on under the patch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import run_script

CHILD = Path(__file__).resolve().parent / "explain_child.py"
MODES = ("stock", "patched")
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    workdir = tmp_path_factory.mktemp("explain")
    with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
        futures = {
            mode: pool.submit(run_script, CHILD, mode, str(workdir), workdir=workdir / mode, timeout=TIMEOUT_S)
            for mode in MODES
        }
        return {mode: future.result() for mode, future in futures.items()}


def kinds(report: dict, graph: int = 0) -> list[tuple[str, str, bool]]:
    """(kind, path, blocking) of the differences of the report's `graph`-th nearest graph."""
    return [(d["kind"], d["path"], d["blocking"]) for d in report["graphs"][graph]["differences"]]


def test_modes_are_what_they_say(runs):
    assert runs["stock"]["patched"] is False
    assert runs["patched"]["patched"] is True


@pytest.mark.parametrize("mode", MODES)
def test_each_kind_of_difference_is_explained(runs, mode):
    reports = runs[mode]["reports"]
    assert reports["hit"]["found"] and kinds(reports["hit"]) == []
    assert not reports["rank"]["found"]
    assert kinds(reports["rank"]) == [("rank", "x", True)]
    assert reports["rank"]["graphs"][0]["differences"][0]["call"] == [2, 3, 1]
    assert kinds(reports["missing_tensor"]) == [("missing_tensor", "y", True)]
    assert reports["missing_tensor"]["graphs"][0]["differences"][0]["call"] is None  # y not passed: nothing there
    graph_b = next(g for g in reports["extra_tensor"]["graphs"] if g["index"] == 1)
    assert [(d["kind"], d["path"], d["blocking"]) for d in graph_b["differences"]] == [("extra_tensor", "y", True)]
    assert reports["extra_tensor"]["graph"] is None
    value = reports["value"]["graphs"][0]["differences"]
    assert [(d["kind"], d["path"], d["call"], d["graph"]) for d in value] == [("value", "mode", "'c'", "'a'")]
    # dispatch does not check dtypes or sizes: a hit, with warnings
    assert reports["dtype"]["found"] and kinds(reports["dtype"]) == [("dtype", "x", False)]
    shape = reports["shape"]
    assert shape["found"] and kinds(shape) == [("shape", "x", False)]
    assert (shape["graphs"][0]["differences"][0]["axis"], shape["graphs"][0]["differences"][0]["graph"]) == (0, [1, 2])


@pytest.mark.parametrize("mode", MODES)
def test_the_llm_phase_is_explained(runs, mode):
    reports = runs[mode]["reports"]
    phase = reports["phase"]["graphs"][0]["differences"]
    assert not reports["phase"]["found"]
    assert [(d["kind"], d["call"], d["graph"], d["blocking"]) for d in phase] == [("phase", "decode", "prefill", True)]
    assert [d["kind"] for d in reports["no_phase"]["graphs"][0]["differences"]][:1] == ["phase"]
    # a cache of another length: the phase alone decides, so it is a hit; the extra layer is shown, not blocking
    other = reports["phase_hit_other_cache"]
    assert other["found"]
    assert {(d["kind"], d["blocking"]) for d in other["graphs"][0]["differences"]} == {("extra_tensor", False)}


@pytest.mark.parametrize("mode", MODES)
def test_graphs_are_ranked_nearest_first(runs, mode):
    value = runs[mode]["reports"]["value"]["graphs"]  # mode="c" with y: graph "a" differs in the value only
    assert [len([d for d in g["differences"] if d["blocking"]]) for g in value] == [1, 2]
    assert [g["index"] for g in value] == [0, 1]
    rank_b = runs[mode]["reports"]["rank_b"]["graphs"]  # x of rank 3, mode="b", no y: graph "b" differs in x only
    assert [g["index"] for g in rank_b] == [1, 0]
    assert [len([d for d in g["differences"] if d["blocking"]]) for g in rank_b] == [1, 3]


def test_stock_and_patched_explain_the_same(runs):
    assert runs["patched"]["reports"] == runs["stock"]["reports"]
    assert runs["patched"]["texts"] == runs["stock"]["texts"]
    assert runs["patched"]["inner"] == runs["stock"]["inner"]


def test_the_text_shows_the_first_difference_per_graph(runs):
    short, medium, full = runs["stock"]["texts"]["value"]
    assert short.splitlines()[0] == (
        "aitune_fast.explain: module 'pair' (2 graphs): no backend found for this call; nearest graphs first:"
    )
    assert short.splitlines()[1].endswith("mode: value 'c' in the call, 'a' in the graph (strict mode)")
    assert "(+1 more)" in short.splitlines()[2]
    assert len(medium.splitlines()) > len(short.splitlines()) and "The call:" in full and "Tensors:" in full


@pytest.mark.parametrize("name", ["rank", "rank_b", "missing_tensor", "extra_tensor", "value", "phase", "no_phase"])
def test_a_miss_carries_the_note_only_when_switched_on_under_the_patch(runs, name):
    stock, patched = runs["stock"]["calls"][name], runs["patched"]["calls"][name]
    message = runs["stock"]["reports"][name]["message"]
    assert message.startswith("No backend found for a graph with metadata: ")
    for switch in ("False", "True"):  # the message stays AITune's
        assert stock[switch]["message"] == patched[switch]["message"] == message
    assert stock["False"]["notes"] == stock["True"]["notes"] == patched["False"]["notes"] == []
    assert patched["True"]["notes"] == [runs["patched"]["texts"][name][0]]


@pytest.mark.parametrize("mode", MODES)
def test_an_object_holding_tuned_modules_explains_the_one_the_call_binds(runs, mode):
    held = runs[mode]["held"]
    assert held["pipeline"] == held["model"] == runs[mode]["reports"]["hit"]
    assert runs[mode]["held_ambiguous"] == (
        "a torch.nn.modules.container.ModuleList holds several tuned modules ('tiny-llm', 'pair') that this call "
        "could be for: pass one"
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_jit_tuned_model_is_explained(runs, mode):
    jit = runs[mode]["jit"]
    assert jit["hit"]["found"] and jit["hit"]["module"] == jit["miss"]["module"]
    assert not jit["miss"]["found"] and kinds(jit["miss"]) == [("rank", "x", True)]
