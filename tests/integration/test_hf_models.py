"""Real transformers and diffusers models tuned by AITune 0.6.0 on the CPU: stock AITune and patched AITune give
the same results.

Each mode runs ``hf_models_child.py`` in its own child process (the stand-in ``tensorrt`` of
``tests/fixtures/tensorrt_stub``; AITune's TorchEager backend, so a tune takes seconds): ``stock`` (aitune_fast made
unimportable), ``patched`` (``patch_aitune()``) and ``meta`` (``patch_aitune(call_path=False)``). The tune phase
runs every scenario (tiny Llama, Qwen2 and Phi3 ``generate`` with dynamic and static caches through AITune's LLM
prefill/decode graphs, a ``text-classification`` pipeline, ``BatchEncoding`` inputs to BERT and ESM, JIT tuning of a
ResNet, a ``UNet2DModel`` and a ``DDPMPipeline``) and saves some checkpoints; the load phase loads every mode's
checkpoints stock and patched (saved by stock or patched, loaded by stock or patched: the four directions, and
``meta``'s checkpoints). Models are built from configs with seeded random weights; nothing is downloaded.
``PYTHONHASHSEED`` is fixed: transformers builds the per-layer-type masks of ``generate`` (static caches) by
iterating a ``set`` of layer types, so the order of a Qwen2 key's mask entries follows the hash seed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child import run_script

CHILD = Path(__file__).resolve().parent / "hf_models_child.py"
TIMEOUT_S = 600
MODES = ("stock", "patched", "meta")
PATCHED = ("patched", "meta")
READERS = ("stock", "patched")  # the load phase's modes (meta's checkpoint functions are patched's)
PACKAGE = {"stock": "aitune.torch.module", "patched": "aitune_fast", "meta": "aitune_fast"}

LLM_CASES = ("llama_dynamic", "llama_static", "qwen2_dynamic", "qwen2_static", "phi3_dynamic", "phi3_static")
ENCODING_CASES = ("bert_encoding_kwargs", "bert_encoding_object", "esm_encoding_kwargs", "esm_encoding_object")
JIT_CASES = ("jit_resnet", "jit_unet", "jit_ddpm")
CASES = (*LLM_CASES, *ENCODING_CASES, "bert_pipeline", *JIT_CASES)
CHECKPOINTS = ("llama_static", "qwen2_dynamic", "bert_encoding_object", "esm_encoding_kwargs")
NEW_TOKENS = 4  # hf_models_child.NEW_TOKENS
N_GENERATE = 4  # generate calls after tuning (hf_models_child.llm_calls)


def _run_phase(phase: str, modes: tuple[str, ...], workdir: Path) -> dict[str, dict]:
    """``phase`` in ``modes``, all at once (each child one torch thread), each with its own cache folder."""

    def run(mode: str) -> dict:
        return run_script(
            CHILD, phase, mode, str(workdir), workdir=workdir / f"{phase}-{mode}", timeout=TIMEOUT_S, PYTHONHASHSEED="0"
        )

    with ThreadPoolExecutor(max_workers=len(modes)) as pool:
        futures = {mode: pool.submit(run, mode) for mode in modes}
        out = {mode: future.result() for mode, future in futures.items()}
    if "skip" in out["stock"]:
        pytest.skip(out["stock"]["skip"])
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hf_models")


@pytest.fixture(scope="module")
def tuned(workdir) -> dict[str, dict]:
    return _run_phase("tune", MODES, workdir)


@pytest.fixture(scope="module")
def loaded(tuned, workdir) -> dict[str, dict]:
    return _run_phase("load", READERS, workdir)


def _ok(result: dict) -> dict:
    assert "error" not in result, result["error"]
    return result


def _without_types(facts: dict) -> dict:
    """A scenario's facts but the classes of its keys (AITune's in a stock run, aitune_fast's patched)."""
    return {field: value for field, value in facts.items() if field != "key_types"}


def test_each_mode_runs_the_aitune_it_names(tuned):
    for mode in MODES:
        assert tuned[mode]["mode"] == mode
        assert tuned[mode]["metadata_class"] == f"{PACKAGE[mode]}.sample_metadata"


@pytest.mark.parametrize("mode", PATCHED)
@pytest.mark.parametrize("name", CASES)
def test_patched_scenario_matches_stock(tuned, name, mode):
    """Outputs, graphs (their keys rendered at every level, LLM phase, axes, backend) and the graph that served each
    call after tuning: the same stock and patched; the keys are of the running AITune's class."""
    stock, patched = _ok(tuned["stock"][name]), _ok(tuned[mode][name])
    assert stock["key_types"] == ["aitune.torch.module.sample_metadata"]
    assert patched["key_types"] == ["aitune_fast.sample_metadata"]
    assert _without_types(patched) == _without_types(stock)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CASES)
def test_tuned_outputs_equal_the_untuned_models(tuned, name, mode):
    assert _ok(tuned[mode][name])["eager_equal"] is True


@pytest.mark.parametrize("name", LLM_CASES)
def test_generate_runs_on_aitunes_prefill_and_decode_graphs(tuned, name):
    """What the comparison holds the patch to: two graphs told apart by ``cache_position`` (AITune's transformers
    integration), each ``generate`` served by the prefill graph once, then by the decode graph; prompts of batch
    sizes and lengths never tuned reach the same two graphs (the LLM phase alone is the key)."""
    stock = _ok(tuned["stock"][name])
    assert stock["state"] == "tuned"
    assert stock["graph_names"] == ["0 (LLM phase prefill)", "1 (LLM phase decode)"]
    assert [g["phase"] for g in stock["graphs"]] == ["prefill", "decode"]
    assert stock["served"] == [0, *[1] * (NEW_TOKENS - 1)] * N_GENERATE
    assert [len(row) for call in stock["tokens"] for row in call][:1] == [7 + NEW_TOKENS]
    decode = stock["graphs"][1]["medium"]
    if name.endswith("_static"):  # AITune walks a StaticCache (registered only_tensors): its layers' tensors
        assert "past_key_values.layers[1].keys" in decode
    else:  # AITune ignores a DynamicCache
        assert "past_key_values" not in decode


def test_qwen2_keys_hold_the_sliding_window_masks(tuned):
    """Qwen2's second layer has a sliding window: with a static cache, generate passes one mask per layer type and
    the cache holds a StaticSlidingWindowLayer (registered by AITune) of the window's length."""
    decode = _ok(tuned["stock"]["qwen2_static"])["graphs"][1]["medium"]
    assert 'attention_mask["sliding_attention"]' in decode and 'attention_mask["full_attention"]' in decode
    assert "['batch0', 2, 6, 8]" in decode  # the sliding layer's keys: sliding_window=6


@pytest.mark.parametrize("name", [*ENCODING_CASES, "bert_pipeline"])
def test_encoders_dispatch_one_graph(tuned, name):
    stock = _ok(tuned["stock"][name])
    assert stock["state"] == "tuned"
    assert stock["graph_names"] == ["0"]
    assert stock["served"] == [0, 0, 0]
    assert stock["graphs"][0]["batch_axis"] is True


def test_batch_encoding_object_is_walked_by_aitune(tuned):
    """A ``BatchEncoding`` passed whole: AITune reads it as the ``UserDict`` it is, so the key names its entries."""
    medium = _ok(tuned["stock"]["bert_encoding_object"])["graphs"][0]["medium"]
    for entry in ("input_ids", "token_type_ids", "attention_mask"):
        assert f'batch["{entry}"]' in medium
    medium = _ok(tuned["stock"]["esm_encoding_object"])["graphs"][0]["medium"]
    assert 'batch["input_ids"]' in medium and 'batch["attention_mask"]' in medium


@pytest.mark.parametrize("name", JIT_CASES)
def test_jit_tuning_tunes_the_model(tuned, name):
    stock = _ok(tuned["stock"][name])
    assert stock["wrapper"] == "TunedModule"
    assert stock["state"] == "tuned"
    assert [g["backend"] for g in stock["graphs"]] == ["TorchEagerBackend()"]
    assert set(stock["served"]) == {0} and stock["served"]


@pytest.mark.parametrize("mode", MODES)
def test_jit_tuning_keeps_its_samples_in_the_childs_own_folder(tuned, workdir, mode):
    """The three children tune the same models at once: each JIT module's folder (named by the model's hierarchy,
    the same in every child) must be the child's own, or one child reads another's half-written samples."""
    (jit_cache,) = (workdir / f"tune-{mode}").glob("cache-*.jit")
    assert len(list(jit_cache.iterdir())) >= len(JIT_CASES)


@pytest.mark.parametrize("mode", PATCHED)
def test_recording_a_filled_static_cache_fails_as_in_stock(tuned, mode):
    """Stock AITune cannot record a second prompt of one batch size under ``cache_implementation="static"``
    (``update_shapes_seen`` meets the cache generate kept, allocated); the patched AITune raises the same error."""
    stock, patched = tuned["stock"]["llama_static_cache_reused"], tuned[mode]["llama_static_cache_reused"]
    assert stock["raised"] == "ValueError"
    assert stock["message"].startswith("Cannot update shapes seen, because tensor data is different")
    assert patched == stock


DIRECTIONS = [(writer, reader) for writer in MODES for reader in READERS]


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.parametrize(("writer", "reader"), DIRECTIONS, ids=[f"{w}->{r}" for w, r in DIRECTIONS])
def test_checkpoint_loads_in_every_direction(tuned, loaded, name, writer, reader):
    """``ait.save`` in one mode, ``ait.load`` in another into a model with other weights: the loaded module's keys
    (of the reader's class), backends and outputs are those the writer tuned, and the calls reach the same graphs."""
    before = _ok(tuned[writer][name])
    after = _ok(loaded[reader][f"{writer}->{reader}"][name])
    assert after["state"] == "tuned"
    assert after["key_types"] == [f"{PACKAGE[reader]}.sample_metadata"]
    assert after["served"] == before["served"]
    out = "tokens" if name in LLM_CASES else "out"
    assert after[out] == before[out]
    assert [{f: v for f, v in g.items() if f != "backend_state"} for g in after["graphs"]] == [
        {f: v for f, v in g.items() if f != "backend_state"} for g in before["graphs"]
    ]


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_loads_the_same_in_every_direction(loaded, name):
    """Everything a load reports, but the keys' classes, is the same in every direction."""
    reports = {
        f"{writer}->{reader}": _without_types(_ok(loaded[reader][f"{writer}->{reader}"][name]))
        for writer, reader in DIRECTIONS
    }
    first = reports["stock->stock"]
    assert {direction: r for direction, r in reports.items() if r != first} == {}
