"""``patch_aitune(call_path=True)``: aitune_fast's per-call path of tuned modules behaves as stock AITune's.

Each mode runs in its own child process (``tuned_call_child.py``; real AITune tuning on the CPU with the stand-in
``tensorrt`` of ``tests/fixtures/tensorrt_stub``), all four at once: stock AITune, the patch applied to live modules
(one tuned, one loaded from a checkpoint), the patch applied before AITune is imported, and the metadata-only patch.
The transcripts (outputs, hooks and their quirks, errors, AITune's context seen inside forward and by the nvtx and
hardware-metrics layers, grad mode) must agree with stock's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aitune_fast.patch import _call_path
from child import run_script

CHILD = Path(__file__).resolve().parent / "tuned_call_child.py"
TIMEOUT_S = 900
MODES = ("stock", "late", "early", "meta")
FAST = ("late", "early")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """Every mode at once, each in its own child (with its own AITune cache folder)."""
    workdir = tmp_path_factory.mktemp("tuned_call")
    with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
        futures = {
            mode: pool.submit(run_script, CHILD, mode, str(workdir), workdir=workdir, timeout=TIMEOUT_S)
            for mode in MODES
        }
        out = {mode: future.result() for mode, future in futures.items()}
    if "skip" in out["stock"]:
        pytest.skip(out["stock"]["skip"])
    return out


@pytest.mark.parametrize("mode", MODES[1:])
@pytest.mark.parametrize("module", ["tuned", "loaded"])
def test_transcript_matches_stock(runs, mode, module):
    stock, patched = runs["stock"][module], runs[mode][module]
    assert patched.keys() == stock.keys()
    for step in stock:
        assert patched[step] == stock[step], step


def test_transcript_covers_the_quirks(runs):
    """The stock behaviours the transcript holds the fast path to (so that agreement means something)."""
    stock = runs["stock"]["tuned"]
    assert stock["hook_order"] == ["pre", "pre_kw", "post", "post_kw"]
    assert stock["hook_order_after_remove"] == ["pre"] and stock["hook_dicts"] == [2, 2]  # remove() missed them
    assert stock["after_remove"]["error"] == "TypeError"  # a with_kwargs hook left without its kwargs flag
    assert stock["hook_during_call"] == stock["after_hook_during_call"] == stock["plain"]  # registered, then lost
    assert stock["raises"] == {"error": "ValueError", "message": "forward failed"}
    assert stock["after_raise_state"] == ["FunctionWrapper", 1] and "ok" in stock["after_raise"]
    assert stock["missing"] == {"error": "TypeError", "message": "missing a required argument: 'x'"}
    assert stock["no_backend_rank"] == {
        "error": "RuntimeError",
        "message": "No backend found for a graph with metadata: Tensors: x",
    }
    one_call = [
        ["push", "infer module:probe backend:TorchEagerBackend()", "green"],
        ["scope", "infer", "probe", "TorchEagerBackend()"],
        ["end_scope"],
        ["pop"],
    ]
    assert stock["log"] == one_call  # the second call (scale=...) found no backend
    # the call from inside forward meets the module's own forward (swapped in for the call): no second range
    assert stock["reenter_log"] == one_call
    assert [message.split("backend:")[1] for message in stock["config_values"]] == [
        "TorchEagerBackend(autocast_enabled=True)",
        "TorchEagerBackend(autocast_enabled=1)",
        "TorchEagerBackend(autocast_enabled=1.0)",
        "TorchEagerBackend(autocast_enabled=True)",
        "TorchEagerBackend(scale=0.0)",
        "TorchEagerBackend(scale=-0.0)",
        "TorchEagerBackend(scale=0.0)",
        "TorchEagerBackend(scale=False)",
    ]
    assert stock["grad_on"][1:] == [False, True] and stock["grad_off"][1:] == [False, False]
    assert len(stock["reenter_seen"][0]["stack"]) == 3


@pytest.mark.parametrize("mode", MODES)
def test_which_forward_live_modules_call(runs, mode):
    expected = _call_path.__name__ if mode in FAST else "aitune.torch.module.wrapper_module"
    assert runs[mode]["installed"] == [expected, expected]


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_calls_all_succeed(runs, mode):
    assert runs[mode]["threads"] == []
    assert runs[mode]["untuned"] == runs["stock"]["untuned"]


@pytest.mark.parametrize("mode", FAST)
def test_switching_the_call_path_never_fails_a_call_in_flight(runs, mode):
    toggles = runs[mode]["toggles"]
    assert toggles["failures"] == [] and toggles["calls"] > 0


@pytest.mark.parametrize("mode", FAST)
def test_unpatch_restores_stock_call_path(runs, mode):
    unpatched = runs[mode]["unpatched"]
    assert unpatched["functions"] == [
        "aitune.torch.module.wrapper_module",
        "aitune.torch.module.tuned_module",
        "aitune.torch.backend.backend",
    ]
    assert unpatched["installed"] == ["aitune.torch.module.wrapper_module"] * 3
    if mode == "late":  # the very objects that were there before the patch
        assert unpatched["same_functions"] == [True, True, True] and unpatched["wrapper"] is True


def test_wrappers_put_on_aitunes_methods_before_the_patch_keep_running(tmp_path):
    """A profiler's or tracer's ``functools.wraps`` wrappers on AITune's per-call methods, put there before
    ``patch_aitune()``: each runs as often patched as stock (issue 30 item 6; before, the call path took the
    wrappers for stock's code and ran none of them: ``TunedModule.__call__``, ``safe_call_backend``,
    ``Module._forward`` and ``TorchEagerBackend._infer`` 0 times of 3, ``normalize`` 2 of 6)."""
    out = run_script(CHILD, "wrapped", str(tmp_path), workdir=tmp_path, timeout=TIMEOUT_S)
    if "skip" in out:
        pytest.skip(out["skip"])
    stock, patched = out["stock"], out["patched"]
    assert stock["counts"] == {
        "ForwardSignature.normalize": 6,  # stock binds each call twice
        "Module._forward": 3,
        "TorchEagerBackend._infer": 3,
        "TorchEagerBackend.describe": 3,
        "TunedModule.__call__": 3,
        "TunedModule.safe_call_backend": 3,
    }
    assert patched == stock


@pytest.mark.parametrize("mode", FAST)
def test_describe_is_kept_where_it_is_a_function_of_class_and_config(runs, mode):
    """TorchEager's and Inductor JIT's descriptions are kept (Inductor's config has AITune's own checking
    ``__post_init__``); a config with a user ``__post_init__`` is described every call, as stock does."""
    kept = runs[mode]["describe_kept"]
    assert kept["eager"] == [True, True]
    assert kept["inductor_jit"] == [True, True]
    assert kept["counting"] == [False, True]
    assert kept["counting_made"] == 5
