"""``aitune_fast.patch_aitune()`` on a real AITune 0.6.0, tuning small models on the CPU.

The tuning runs in child processes (``aitune_child.py``): ``import aitune.torch`` must not meet the stub packages
that ``load_reference()`` registers for the other tests, and the patch changes process-wide state. AITune imports
``tensorrt`` unconditionally; the children get the stand-in from ``tests/fixtures/tensorrt_stub`` (a test fixture,
not TensorRT: no TensorRT backend is exercised). TorchInductor AOT is not tested: it fails on the CPU in stock
AITune too. AITune's ONNX Runtime backend is CUDA-only; the ``onnx`` children run it on the CPU through a marked
test shim (``aitune_child.onnx_on_cpu``) that replaces only its device list, execution provider and inner call.

The ``describe()`` tests at the end need no AITune and run in this process.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import aitune_fast
import pytest
import torch
from aitune_fast._reference import load_reference
from child import run_script

CHILD = Path(__file__).resolve().parent / "aitune_child.py"
TIMEOUT_S = 900


def _run_child(mode: str, workdir: Path, **env: str) -> dict:
    return run_script(CHILD, mode, str(workdir), workdir=workdir, timeout=TIMEOUT_S, **env)


def _run_child_or_skip(mode: str, workdir: Path) -> dict:
    """``_run_child``, skipping the tests that need it where the child reports why it cannot run here."""
    out = _run_child(mode, workdir)
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("aitune")


@pytest.fixture(scope="module")
def main_run(workdir) -> dict:
    return _run_child_or_skip("main", workdir)


MODELS = ("mlp", "llm_cp", "llm", "cache")


@pytest.mark.parametrize("model", MODELS)
def test_patched_tuning_matches_stock(main_run, model):
    """Same backend keys (rendered), batch axes, LLM phase and outputs, stock and patched."""
    stock, patched = main_run["stock"][model], main_run["patched"][model]
    assert [k["type"] for k in stock["keys"]] == ["aitune.torch.module.sample_metadata"]
    assert [k["type"] for k in patched["keys"]] == ["aitune_fast.sample_metadata"]
    strip = [{f: v for f, v in k.items() if f != "type"} for k in stock["keys"]]
    assert strip == [{f: v for f, v in k.items() if f != "type"} for k in patched["keys"]]
    assert patched["out"] == stock["out"]


def test_batch_axis_comes_from_aitunes_global_context(main_run):
    """tune() sets the batch size in AITune's global_context; under the patch the core reads it there."""
    key = main_run["patched"]["mlp"]["keys"][0]
    assert key["batch_axis"] is True
    assert "batch0" in key["medium"]


def test_llm_phase_follows_aitunes_config(main_run):
    assert main_run["patched"]["llm_cp"]["keys"][0]["phase"] == "decode"
    assert main_run["patched"]["llm"]["keys"][0]["phase"] == ""


def test_names_swapped_and_restored(main_run):
    swapped = main_run["swapped"]
    assert swapped["tuned_module"] and swapped["locator"] and swapped["object_type"] and swapped["is_patched"]
    assert swapped["reference_left"] == []  # no loaded aitune module still holds AITune's objects
    assert swapped["ours_in"] > 20  # tuned_module, wrapper_module, graph_spec, correctness, shapes, ...
    restored = main_run["restored"]
    assert restored["tuned_module"] and restored["locator"] and not restored["is_patched"]
    assert restored["ours_left"] == []
    assert restored["reference_in"] == swapped["ours_in"]


def test_registrations_carry_over_and_back(main_run):
    assert main_run["carried_over"] == {"cache": True, "skipped": True}
    assert main_run["restored"]["late_type_carried_back"] is True
    assert main_run["restored"]["cache_still_registered"] is True


def test_modules_tuned_before_patch_keep_dispatching(main_run):
    assert main_run["stock_keys_after_patch"] == ["aitune_fast.sample_metadata"]
    for model in ("mlp", "llm_cp", "llm"):
        assert main_run["stock_after_patch"][model] == main_run["stock"][model]["out"]


def test_modules_tuned_under_patch_keep_dispatching_after_unpatch(main_run):
    assert main_run["patched_keys_after_unpatch"] == ["aitune.torch.module.sample_metadata"]
    for model in ("mlp", "llm_cp", "llm"):
        assert main_run["patched_after_unpatch"][model] == main_run["patched"][model]["out"]


def test_jit_tuning_matches_stock(main_run):
    stock, patched = main_run["stock_jit"], main_run["patched_jit"]
    assert stock["wrapper"] == patched["wrapper"] == "TunedModule"
    assert stock["backends"] == patched["backends"] == ["TorchInductorJitBackend"]
    assert stock["key_types"] == ["aitune.torch.module.sample_metadata"]
    assert patched["key_types"] == ["aitune_fast.sample_metadata"]
    assert patched["out"] == stock["out"]


def test_patched_process_loads_stock_checkpoints(main_run):
    loaded = main_run["stock_ckpt_under_patch"]
    assert loaded["llm_cp_type"] == "aitune_fast.sample_metadata"
    for model in ("mlp", "llm_cp", "llm"):
        assert loaded[model] == main_run["stock"][model]["out"]


def test_patched_checkpoints_load_under_patch(main_run):
    """AITune's pickled layout written by the patch, read back by aitune_fast's restricted reader."""
    loaded = main_run["patched_ckpt_under_patch"]
    assert loaded["llm_cp_type"] == "aitune_fast.sample_metadata"
    for model in ("mlp", "llm_cp", "llm"):
        assert loaded[model] == main_run["patched"][model]["out"]


def test_patched_checkpoints_load_in_stock_aitune_without_aitune_fast(main_run, workdir):
    out = _run_child("stock", workdir)
    assert out["aitune_fast_importable"] is False
    assert out["loaded"]["llm_cp_type"] == "aitune.torch.module.sample_metadata"
    for model in ("mlp", "llm_cp", "llm"):
        assert out["loaded"][model] == main_run["patched"][model]["out"]
    # and after unpatch_aitune() in the patching process
    for model in ("mlp", "llm_cp", "llm"):
        assert main_run["patched_ckpt_in_unpatched"][model] == main_run["patched"][model]["out"]


@pytest.fixture(scope="module")
def onnx_run(workdir) -> dict:
    return _run_child_or_skip("onnx", workdir)


@pytest.fixture(scope="module")
def onnx_stock_run(onnx_run, workdir) -> dict:
    return _run_child("onnx_stock", workdir)


ONNX_MODELS = ("mlp", "llm")


def _onnx_loaded_as(loaded: dict, tuned: dict, module: str) -> None:
    """`loaded` (a checkpoint loaded and called once) matches `tuned` and keeps its graph spec in `module`'s
    classes, and the loaded ONNX Runtime backend served the call."""
    assert "error" not in loaded, loaded["error"]
    assert loaded["out"] == tuned["out"]
    assert loaded["backends"] == ["ONNXRuntimeBackend"]
    assert loaded["served"] == 1
    assert loaded["key_type"] == module
    assert loaded["spec_types"] == [module]
    assert loaded["locator_types"] == [module.replace("sample_metadata", "locator")]
    assert loaded["input_paths"] == tuned["input_paths"]
    assert loaded["n_inputs"] == tuned["n_inputs"]


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_tuning_matches_stock(onnx_run, model):
    stock, patched = onnx_run["stock"][model], onnx_run["patched"][model]
    assert patched["out"] == stock["out"]
    assert stock["served"] == patched["served"] == 1
    assert stock["spec_types"] == ["aitune.torch.module.sample_metadata"]
    assert patched["spec_types"] == ["aitune_fast.sample_metadata"]
    assert patched["input_paths"] == stock["input_paths"]


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_stock_checkpoint_loads_in_stock(onnx_run, model):
    """The control: a stock checkpoint loaded by a stock AITune."""
    loaded = onnx_run["stock_ckpt_stock"][model]
    _onnx_loaded_as(loaded, onnx_run["stock"][model], "aitune.torch.module.sample_metadata")
    assert loaded["names_aitune_fast"] is False


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_stock_checkpoint_loads_patched(onnx_run, model):
    """The graph spec a stock ONNX Runtime backend stored (AITune's objects pickled whole) loads as ours."""
    _onnx_loaded_as(onnx_run["stock_ckpt_patched"][model], onnx_run["stock"][model], "aitune_fast.sample_metadata")


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_patched_checkpoint_loads_patched(onnx_run, model):
    loaded = onnx_run["patched_ckpt_patched"][model]
    _onnx_loaded_as(loaded, onnx_run["patched"][model], "aitune_fast.sample_metadata")
    assert loaded["names_aitune_fast"] is False  # written with AITune's classes, as a stock AITune writes


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_patched_checkpoint_loads_in_stock_aitune_without_aitune_fast(onnx_stock_run, onnx_run, model):
    assert onnx_stock_run["aitune_fast_importable"] is False
    loaded = onnx_stock_run["patched_ckpt_stock"][model]
    _onnx_loaded_as(loaded, onnx_run["patched"][model], "aitune.torch.module.sample_metadata")


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_module_tuned_before_patch_saves_loadable_both_ways(onnx_stock_run, onnx_run, model):
    """A module tuned stock, saved under the patch (its graph spec converted to ours at patch time)."""
    tuned = onnx_run["stock"][model]
    _onnx_loaded_as(onnx_run["restock_ckpt_patched"][model], tuned, "aitune_fast.sample_metadata")
    _onnx_loaded_as(onnx_stock_run["restock_ckpt_stock"][model], tuned, "aitune.torch.module.sample_metadata")
    assert onnx_run["restock_ckpt_patched"][model]["names_aitune_fast"] is False


DIRECTIONS = ["stock->stock", "stock->patched", "patched->patched", "patched->stock"]


def _written_and_read(onnx_run, onnx_stock_run, section, direction):
    """What the ``section`` of the onnx children wrote in ``direction``'s first mode and read back in its second,
    and the package the classes read back must come from. A stock AITune reads what was written stock in the
    ``onnx`` child, what was written patched in the ``onnx_stock`` one."""
    source, target = direction.split("->")
    reader = onnx_stock_run if direction == "patched->stock" else onnx_run
    after = reader[f"{section}_{source}_{target}"]
    assert "error" not in after, after["error"]
    package = "aitune_fast" if target == "patched" else "aitune.torch.module"
    return onnx_run[f"{section}_{source}"], after, package


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tensorrt_backend_state_round_trips(onnx_run, onnx_stock_run, direction):
    """TensorRT cannot run here: its backend state (AITune's TensorRTBackend holding the LLM-like module's graph
    spec) is written by AITune's checkpoint file task and read back by ``TensorRTBackend.from_dict``."""
    before, after, package = _written_and_read(onnx_run, onnx_stock_run, "trt", direction)
    assert after["described"] == before["described"]
    assert after["name"] == before["name"]
    assert after["types"] == [f"{package}.sample_metadata"]
    assert after["locator_types"] == [f"{package}.locator"]
    assert len(before["described"][0].splitlines()) > 50  # the 50 inputs of the LLM-like module


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_checkpoint_metadata_in_any_container_round_trips(onnx_run, onnx_stock_run, direction):
    """Shared metadata stays shared (and a list holding itself holds itself), tuples, OrderedDicts,
    ExactSampleMetadata, lone locators and specs, and other_data values come back equal in either package."""
    before, after, package = _written_and_read(onnx_run, onnx_stock_run, "details", direction)
    names = ("sample_metadata", "exact_sample_metadata", "locator", "tensor_spec", "sample_metadata")
    assert after["types"] == [f"{package}.{name}" for name in names]
    assert after["exact_is_exact"] and after["shared"] and after["loop"]
    assert after["od"] == "OrderedDict"
    for field in ("described", "other_data", "pair"):
        assert after[field] == before[field]
    # metadata inside an object that is no plain container: written as AITune's in any case; a patched read
    # converts plain containers only (AITune 0.6.0 keeps metadata nowhere else), so this one stays AITune's
    assert after["hidden"]["described"] == before["hidden"]["described"]
    if direction.endswith("->stock"):
        assert after["hidden"]["type"] == "aitune.torch.module.sample_metadata"


@pytest.fixture(scope="module")
def edges_run(workdir) -> dict:
    return _run_child_or_skip("edges", workdir)


@pytest.fixture(scope="module")
def weights_only_run(onnx_run, edges_run, workdir) -> dict:
    return _run_child("weights_only", workdir, TORCH_FORCE_WEIGHTS_ONLY_LOAD="1")


def test_weights_only_loading_keeps_refusing_unknown_globals_in_keys(weights_only_run):
    """Forced weights-only, the patched load reads pickled backend keys with the restricted reader only: the key
    naming the user's enums (saved by the edges child) is refused, naming the global."""
    out = weights_only_run
    assert out["odd_key_patched"].startswith("ValueError"), out["odd_key_patched"]
    assert "refused global __main__." in out["odd_key_patched"]


@pytest.mark.parametrize("written", ["stock", "patched"])
def test_weights_only_loading_of_checkpoints(onnx_run, weights_only_run, written):
    """With TORCH_FORCE_WEIGHTS_ONLY_LOAD=1 torch loads weights-only whatever AITune asks, with AITune's allowlist
    of classes; it refuses a pickle module, so the patched load takes AITune's own loader with AITune's classes
    allowed under their names. The stock load is the control."""
    out = weights_only_run
    fast, stock = "aitune_fast.sample_metadata", "aitune.torch.module.sample_metadata"
    for model in ONNX_MODELS:
        _onnx_loaded_as(out["stock_ckpt_stock"][model], onnx_run["stock"][model], stock)
        _onnx_loaded_as(out[f"{written}_ckpt_patched"][model], onnx_run[written][model], fast)
    for key in ("trt_stock_stock", f"trt_{written}_patched"):
        assert "error" not in out[key], out[key]["error"]
        assert (
            out[key]["described"] == onnx_run[f"trt_{written}" if key.endswith("patched") else "trt_stock"]["described"]
        )
    assert out[f"trt_{written}_patched"]["types"] == [fast]


def test_unpatch_restores_checkpoint_functions(onnx_run):
    """TorchSaveTask.save, torch_load_with_custom_types and TunedModule.to_dict are AITune's own again."""
    assert onnx_run["functions_restored"] is True


def test_autowrapt_bootstrap_patches_aitune(main_run, workdir):
    out = _run_child("autowrapt", workdir, AUTOWRAPT_BOOTSTRAP="aitune_fast")
    assert out == {"patched": True, "swapped": True, "reference_left": []}


def test_patch_before_import_patches_modules_as_they_load(main_run, workdir):
    out = _run_child("early", workdir)
    assert out["reference_left"] == []
    assert out["reference_classes_defined"] == []  # AITune's metadata classes never reached any module's names
    assert out["late_module_is_new"] is True
    assert out["late_module_swapped"] is True
    assert out["mlp"] == {"key_type": "aitune_fast.sample_metadata", "batch_axis": True}


# ------------------------------------------------------------------------- in this process (no AITune needed)


def test_patch_without_aitune_installed_is_a_clear_error(monkeypatch):
    import importlib.util

    for name in [n for n in sys.modules if n == "aitune" or n.startswith("aitune.")]:
        monkeypatch.delitem(sys.modules, name)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "aitune" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match="needs AITune installed"):
        aitune_fast.patch_aitune()
    assert not aitune_fast.is_aitune_patched()


@pytest.mark.parametrize("version", ["0.3.0", "0.4.1", "0.5.0", "0.7.0", "1.0.0", "0.6.0rc1", "0.6.0.dev3", "junk"])
def test_patch_refuses_aitune_versions_it_was_not_made_for(monkeypatch, version):
    """0.3.0/0.4.1 call ``from_inputs(args, kwargs)``; 0.5.0 has no ExactSampleMetadata, hashes other values
    differently and keeps no post-input spec: the patch refuses them, naming the supported range, and changes
    nothing."""
    import importlib.metadata

    from aitune_fast import patch

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version if name == "aitune" else real(name))
    meta_path = list(sys.meta_path)
    with pytest.raises(RuntimeError, match=r"supports aitune>=0\.6\.0,<0\.7\.0 .* installed AITune is"):
        aitune_fast.patch_aitune()
    assert not aitune_fast.is_aitune_patched()
    assert sys.meta_path == meta_path
    with pytest.warns(RuntimeWarning, match="supports aitune>=0.6.0"):
        patch._autowrapt_hook()
    assert not aitune_fast.is_aitune_patched()


@pytest.mark.parametrize("version", ["0.6.0", "0.6.3", "0.6.0.post1", "0.6.0+local"])
def test_patch_accepts_the_aitune_versions_it_was_made_for(monkeypatch, version):
    import importlib.metadata

    from aitune_fast.patch import _switch

    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    _switch.check_aitune_version()  # no error


class _Foreign(enum.Enum):
    SHORT = "s"
    MEDIUM = "m"
    FULL = "f"
    HUGE = "h"


def _metadata():
    return aitune_fast.SampleMetadata.from_inputs({"x": torch.empty(2, 3), "k": 4}, strict=True, batch_size=2)


@pytest.mark.parametrize("name", ["SHORT", "MEDIUM", "FULL"])
def test_describe_accepts_aitunes_infolevel(name):
    """AITune's own InfoLevel members (and any enum member named alike) select the same level as ours."""
    reference_level = getattr(load_reference().tensor_spec.InfoLevel, name)
    ours = getattr(aitune_fast.InfoLevel, name)
    md = _metadata()
    spec = md.tensor_specs[0]
    assert md.describe(reference_level) == md.describe(getattr(_Foreign, name)) == md.describe(ours)
    assert spec.describe(reference_level) == spec.describe(getattr(_Foreign, name)) == spec.describe(ours)
    assert md.describe(ours).startswith("Tensors:")
    assert md.describe(ours) != "Tensors:\n\n"


@pytest.mark.parametrize("level", [_Foreign.HUGE, "FULL", 2, None.__class__])
def test_describe_refuses_unknown_levels(level):
    """Deliberate difference: the reference renders nothing ("Tensors:\\n\\n", None) for an unknown level."""
    md = _metadata()
    with pytest.raises(ValueError, match="InfoLevel member"):
        md.describe(level)
    with pytest.raises(ValueError, match="InfoLevel member"):
        md.tensor_specs[0].describe(level)


# ------------------------------------------------------------------------- patch_aitune() edge cases (one child)


def _ok(result: dict):
    assert "error" not in result, result["error"]
    return result["ok"]


def test_patch_before_import_captures_nothing_and_unpatch_restores_stock(edges_run):
    """AITune imported while patched: its modules' own code never saw aitune_fast's objects (no class bases,
    defaults, closures, annotations or aliases of ours), so after unpatch nothing of ours is left anywhere."""
    assert edges_run["captured_while_patched"] == []
    assert edges_run["captured_after_unpatch"] == []
    exact = _ok(edges_run["stock_exact"])
    assert exact == {
        "eq": True,
        "hash": True,
        "subclass_of_ours": False,
        "bases": ["aitune.torch.module.sample_metadata.SampleMetadata"],
        "defaults_stock": True,
        "described": True,
    }


def test_locator_bound_before_patch_uses_the_one_registry(edges_run):
    out = _ok(edges_run["bound_locator"])
    assert _ok(out["register"]) is True
    assert _ok(out["find_leaves"]) == out["ours_sees_it"] == [["p", "xy"]]
    assert _ok(out["ignore"]) is True
    assert out["carried_back"] is True
    assert out["stock_find_leaves"] == [["p", "xy"]]


STRATEGY_CASES = {
    "stock": "aitune.torch.module",
    "before_patch": "aitune_fast",
    "after_unpatch": "aitune.torch.module",
    # a user's `class UserModule(ait.Module)`: its strategy map is converted too (issue 30 item 4: before, only
    # objects of classes defined in aitune were looked into, and tune() failed with "missing strategy for graph")
    "user_before_patch": "aitune_fast",
    "user_after_unpatch": "aitune.torch.module",
}


@pytest.mark.parametrize("case", STRATEGY_CASES)
def test_strategy_map_keys_built_in_the_other_world(edges_run, case):
    """``ait.Module(strategies={key: strategy})``: the key built before patch_aitune() (or patched, and tuned after
    unpatch_aitune()) still names the graph (the module is tuned, with keys of the world it was tuned in)."""
    assert _ok(_ok(edges_run["strategies"])[case]) == [f"{STRATEGY_CASES[case]}.sample_metadata"]


ODD_LOADS = ("stock_stock", "stock_patched", "patched_patched", "patched_stock", "restock_stock")


@pytest.mark.parametrize("load", ODD_LOADS)
def test_checkpoints_with_values_json_cannot_hold(edges_run, load):
    """Enum and torch.device other values (strict mode), a str-Enum dict key, numpy scalars, Path, slice, range,
    functions, datetime, Decimal, str subclasses, torch layouts and memory formats: saved and loaded as AITune
    does, stock or patched on either side."""
    out = _ok(edges_run["odd_values"])
    for save in ("stock_save", "restock_save", "patched_save"):
        assert _ok(out[save]) is True
    assert out["patched_tune"] and _ok(out["patched_out"]) == out["stock_out"]
    loaded = _ok(out[load])
    assert loaded["out"] == out["stock_out"]
    package = "aitune_fast" if load.endswith("_patched") else "aitune.torch.module"
    assert loaded["key_type"] == f"{package}.sample_metadata"


STOCK_PICKLES = ("md", "exact", "learned", "locator", "spec", "nested", "torch_save")


@pytest.mark.parametrize("what", STOCK_PICKLES)
def test_stock_pickles_load_under_patch(edges_run, what):
    """Objects pickled by a stock AITune (pickle.dumps at the default protocol; torch.save of all of them) load
    under the patch into aitune_fast objects of the same classes, equal to freshly built ones (==, hash,
    describe(), to_json(); a spec's fields)."""
    assert _ok(_ok(edges_run["stock_pickles"])[what]) == []


@pytest.mark.parametrize("what", ["md", "exact", "learned"])
def test_reference_dict_writes_what_stock_to_dict_writes(edges_run, what):
    """A key of a checkpoint saved under the patch (`reference_dict`) is byte for byte what a stock AITune's
    ``to_dict()`` writes for the equal metadata: the pickled pairs (tuples, pickle's default protocol), strict and
    llm_phase. The list holds the keys that differ."""
    assert _ok(edges_run["stock_pickles"])["to_dict"][what] == []


def test_toggling_the_patch_never_fails_a_call_in_flight(edges_run):
    out = _ok(edges_run["toggles"])
    assert out["errors"] == 0, out["first_errors"]
    assert out["calls"] > 0
