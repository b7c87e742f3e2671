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


def test_code_done_in_place_runs_only_while_it_is_stock(tmp_path):
    """A wrapper on a piece of stock code the call path does in place (torch's module call, AITune's hook-swap
    helpers, its context's ``with`` and ``set``, ``torch.no_grad``, the hardware-metrics scope's no-op collector), or a
    context or collector of its own given to the code it does, or a ``__getattribute__`` on AITune's ``Module``, put
    there before the patch, after it, or between an unpatch and a patch, runs as often as under stock AITune, with the
    same outputs (round six, items 1-4: before, each ran 0 times of 3 patched)."""
    out = run_script(CHILD, "inlined", str(tmp_path), workdir=tmp_path, timeout=TIMEOUT_S)
    if "skip" in out:
        pytest.skip(out["skip"])
    assert set(out) == {
        "hardware_metrics_annotation.get_default_collector",
        "HardwareMetricsSession.get_collector",
        "HardwareMetricsSession._should_collect",
        "NoOpHardwareMetricsCollector.start_scope",
        "NoOpHardwareMetricsCollector.end_scope",
        "session._noop_collector",
        "Module.__getattribute__",
        "tuned_module.global_context",
        "backend_context.global_context",
        "nn.Module.__call__",
        "nn.Module._call_impl",
        "module._call_impl",
        "Module._restore_original_forward",
        "Module._proxy_forward",
        "GlobalContext.__enter__",
        "GlobalContext.__exit__",
        "GlobalContext.set",
        "torch.no_grad",
    }
    problems = []  # (site, when, runs patched, runs stock): every site listed, not the first only
    for site, runs in out.items():
        stock = runs.pop("stock")
        assert stock[0] >= 3, site  # the wrapper runs at least once a call under stock AITune
        problems += [(site, when, patched[0], stock[0]) for when, patched in runs.items() if patched != stock]
    assert problems == []


def test_what_the_patch_learnt_lives_while_patched(tmp_path):
    """AITune's context and the call path's parts are learnt by each ``patch_aitune()`` and dropped by
    ``unpatch_aitune()`` (issue 41: before, module globals learnt once for the life of the process)."""
    out = run_script(CHILD, "learnt", str(tmp_path), workdir=tmp_path, timeout=TIMEOUT_S)
    if "skip" in out:
        pytest.skip(out["skip"])
    nothing = {"context": False, "parts": []}
    learnt = {"context": True, "parts": ["context", "eager", "forward", "infer", "metrics", "module_call", "tuned"]}
    assert out == {
        "before": nothing,
        "patched": learnt,
        "unpatched": nothing,
        "repatched": learnt,
        "afresh": [True, True],
    }


@pytest.mark.parametrize("mode", FAST)
def test_describe_follows_config_objects_and_changing_defaults(runs, mode):
    """A config with its own ``describe`` or ``_get_changed_fields`` is described by them, not by a description kept
    for an equal config without; a ``default_factory`` default that changes changes the description (round six, items
    5 and 6)."""
    stock = runs["stock"]["tuned"]["describe_overrides"]
    assert [message.split("backend:")[1] for message in stock] == [
        "TorchEagerBackend()",
        "TorchEagerBackend(labelled)",
        "TorchEagerBackend()",
        "TorchEagerBackend(own=1)",
        "TorchEagerBackend()",
        "TorchEagerBackend()",
        "TorchEagerBackend(dtype=torch.float32)",
    ]
    assert runs[mode]["tuned"]["describe_overrides"] == stock


@pytest.mark.parametrize("mode", FAST)
def test_calls_on_small_stacks_return_as_stock(runs, mode):
    """On threads with 36 and 40 KiB stacks every call returns, as stock's does (round six, item 9: the binding plan
    refused them with RecursionError)."""
    stock = runs["stock"]["tuned"]["small_stacks"]
    assert all("ok" in result for results in stock.values() for result in results)
    assert runs[mode]["tuned"]["small_stacks"] == stock


def test_nested_tuned_modules_on_a_small_stack_return_as_stock(tmp_path):
    """Ten nested tuned modules called on a thread with a 76 KiB stack return what stock returns (round six, item 9:
    the native path's frames overflowed it, a SIGSEGV; with too little stack left it now runs stock's code)."""
    out = run_script(CHILD, "nested", str(tmp_path), workdir=tmp_path, timeout=TIMEOUT_S)
    if "skip" in out:
        pytest.skip(out["skip"])
    assert all("ok" in result for result in out["stock"]), out["stock"]
    assert out["patched"] == out["stock"]
    assert out["unpatched"] == out["stock"]


@pytest.mark.parametrize("mode", FAST)
def test_describe_is_kept_where_it_is_a_function_of_class_and_config(runs, mode):
    """TorchEager's and Inductor JIT's descriptions are kept (Inductor's config has AITune's own checking
    ``__post_init__``); a config with a user ``__post_init__`` is described every call, as stock does."""
    kept = runs[mode]["describe_kept"]
    assert kept["eager"] == [True, True]
    assert kept["inductor_jit"] == [True, True]
    assert kept["counting"] == [False, True]
    assert kept["counting_made"] == 5
