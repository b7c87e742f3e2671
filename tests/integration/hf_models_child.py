"""Child program of ``test_hf_models.py``: real transformers and diffusers models through AITune on the CPU.

Run as ``python hf_models_child.py PHASE MODE WORKDIR``; prints one JSON document on its last stdout line.
MODE: ``stock`` (aitune_fast made unimportable), ``patched`` (``patch_aitune()`` after ``import aitune.torch``) or
``meta`` (``patch_aitune(call_path=False)``: AITune's own call path, only the metadata swapped). PHASE:
  tune  every scenario: tiny Llama, Qwen2 (one layer a sliding window) and Phi3 ``generate`` through a tuned
        ``ait.Module`` with a dynamic and a static cache (AITune's LLM phases: one graph for prefill, one for
        decode, told apart by ``cache_position``), a ``text-classification`` pipeline (tiny BERT, a tokenizer built
        here), ``BatchEncoding`` inputs to BERT and ESM encoders (unpacked, and the object itself walked by AITune),
        JIT tuning of a transformers ResNet, a diffusers ``UNet2DModel`` and a ``DDPMPipeline``'s UNet; saves the
        checkpoints of some into ``WORKDIR/ckpt-MODE``;
  load  the checkpoints every mode's tune phase saved, each loaded into a model with other weights and run (run
        ``stock`` and ``patched``; ``meta`` saves and loads with the same checkpoint functions as ``patched``).
Every model is built from a config with seeded random weights; nothing is downloaded (the hub is off). Tuning uses
``OneBackendStrategy(TorchEagerBackend())``. Each scenario reports what a user can observe, compared across modes
by the test: outputs (token ids, or a hash of the output tensor's bytes), whether they equal the untuned model's,
the graphs (names, keys described, LLM phase, batch axis, backend) and which graph served each call after tuning.
Needs tests/fixtures/tensorrt_stub on PYTHONPATH (AITune imports ``tensorrt``; the stand-in is not TensorRT).
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from child_kit import block_aitune_fast, quick_strategy, report

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")

MODES = ("stock", "patched", "meta")
# The generate calls: at most this many new tokens (and at least, so the number of decode steps is fixed).
NEW_TOKENS = 4
VOCAB = 64  # of the tiny LLMs
CHECKPOINTS = ("llama_static", "qwen2_dynamic", "bert_encoding_object", "esm_encoding_kwargs")


# ----------------------------------------------------------------------------------------------- observation


def digest(tensor) -> dict:
    """A tensor as its shape, dtype and a hash of its bytes (outputs are compared exactly, across processes)."""
    t = tensor.detach().cpu().contiguous()
    return {"shape": list(t.shape), "dtype": str(t.dtype), "sha256": hashlib.sha256(t.numpy().tobytes()).hexdigest()}


class Tap:
    """Stands in for a TorchEager backend's module: logs the index of its backend, then calls the module. Stock
    AITune's ``TorchEagerBackend._infer`` and aitune_fast's call path both call ``backend._orig_module(...)``."""

    def __init__(self, module, index: int, log: list) -> None:
        self.__dict__.update(_module=module, _index=index, _log=log)

    def __call__(self, *args, **kwargs):
        self._log.append(self._index)
        return self._module(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._module, name)


@contextmanager
def served(backends, log: list):
    """While inside: every call a backend of ``backends`` (a tuned module's, in their order) serves appends the
    backend's index to ``log``."""
    kept = [(backend, backend._orig_module) for backend in backends.values()]
    for index, (backend, module) in enumerate(kept):
        backend._orig_module = Tap(module, index, log)
    try:
        yield log
    finally:
        for backend, module in kept:
            backend._orig_module = module


def graph_facts(backends) -> dict:
    """The keys of a tuned module's backends as AITune renders them, and the backends; the keys' classes apart
    (they differ by design: AITune's stock, aitune_fast's patched)."""
    from aitune.torch.module.tensor_spec import InfoLevel

    graphs = [
        {
            "phase": key.llm_phase,
            "short": key.describe(InfoLevel.SHORT),
            "medium": key.describe(InfoLevel.MEDIUM),
            "full": key.describe(InfoLevel.FULL),
            "batch_axis": key.has_batch_axis(),
            "dynamic_axis": key.detected_dynamic_axis(),
            "backend": backend.describe(),
            "backend_state": backend.state.name,
        }
        for key, backend in backends.items()
    ]
    return {"graphs": graphs, "key_types": sorted({type(key).__module__ for key in backends})}


def module_facts(m) -> dict:
    """A tuned ``ait.Module``: its state, the names of the graphs it recorded, its keys and backends."""
    facts = {"state": m.state.value, "graph_names": [spec.name for spec in m.graph_specs]}
    facts.update(graph_facts(m.module.backends))
    return facts


def case(fn, *args) -> dict:
    """``fn(*args)``, or the traceback it raised: one broken scenario fails its own test only."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001
        return {"error": traceback.format_exc()}


def fresh(ait) -> None:
    """``ait.tune`` tunes every registered Module: forget the earlier scenarios' ones."""
    from aitune.torch.module_registry import MODULE_REGISTRY

    MODULE_REGISTRY.clear()


def tune(ait, fn, data, batch_sizes=(1, 2)) -> None:
    ait.tune(fn, data, batch_sizes=list(batch_sizes), device="cpu", ignore_failing_modules=False)


# ----------------------------------------------------------------------------------------------- LLMs: generate


def llm_config(kind: str):
    import transformers

    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    if kind == "qwen2":  # the second layer a sliding window (AITune registers StaticSlidingWindowLayer)
        return transformers.Qwen2Config(**common, use_sliding_window=True, sliding_window=6, max_window_layers=1)
    if kind == "phi3":
        return transformers.Phi3Config(**common, original_max_position_embeddings=64)
    raise ValueError(kind)


def build_llm(torch, kind: str, seed: int = 0):
    import transformers

    classes = {
        "llama": transformers.LlamaForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM,
        "phi3": transformers.Phi3ForCausalLM,
    }
    torch.manual_seed(seed)
    return classes[kind](llm_config(kind)).eval()


def prompts(torch, batch: int, length: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:  # left padding in the last row
        ids[-1, :2] = 0
        mask[-1, :2] = 0
    return ids, mask


def llm_calls(torch) -> list:
    """The prompts generated for after tuning, of shapes never tuned: (input_ids, attention_mask) pairs. The
    second has the first's batch size: ``generate`` reuses the static cache it kept, its tensors already allocated,
    so that prefill's key holds the cache's tensors (the first prefill's did not; the keys are equal by phase)."""
    return [prompts(torch, 3, 7, 3), prompts(torch, 3, 6, 4), prompts(torch, 1, 4, 5), prompts(torch, 2, 5, 6)]


def generate(torch, model, cache: str, ids, mask):
    """``model.generate`` greedily with the cache named by ``cache``: ``dynamic`` (the default, a DynamicCache),
    ``dynamic_object`` (a DynamicCache passed in), ``static`` (``cache_implementation="static"``),
    ``static_object`` (a StaticCache passed in)."""
    import transformers

    kwargs: dict[str, Any] = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    if cache == "dynamic_object":
        kwargs["past_key_values"] = transformers.DynamicCache()
    elif cache == "static":
        kwargs["cache_implementation"] = "static"
    elif cache == "static_object":
        kwargs["past_key_values"] = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + 8)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **kwargs)


def llm_case(ait, torch, kind: str, cache: str, workdir: Path, save_as: str | None) -> dict:
    """Tune ``generate`` of a tiny ``kind`` LLM; generate for prompts of shapes never tuned; save the module."""
    fresh(ait)
    strategy = quick_strategy(ait)
    if cache.startswith("dynamic"):
        # AITune ignores DynamicCache (its integration: only TorchEager can run with it): the correctness check's
        # boundary shapes would meet a cache of the recorded batch size
        strategy.enable_correctness_check(False)
    m = ait.Module(build_llm(torch, kind), f"{kind}-{cache}", strategy=strategy)
    # cache_implementation="static": generate keeps its StaticCache for the next call of the same batch size, so a
    # second prompt of a batch size would meet an allocated cache while recording (llm_static_cache_reused_case)
    data = []
    for seed in (1,) if cache == "static" else (1, 2):
        ids, mask = prompts(torch, 1, 5, seed)
        data.append({"ids": ids[0], "mask": mask[0]})
    tune(ait, lambda ids, mask: generate(torch, m, cache, ids, mask), data)
    facts = module_facts(m)
    eager = build_llm(torch, kind)
    tokens, log = [], []
    with served(m.module.backends, log):
        for ids, mask in llm_calls(torch):
            tokens.append(generate(torch, m, cache, ids, mask).tolist())
    facts.update(
        tokens=tokens,
        served=log,
        eager_equal=tokens == [generate(torch, eager, cache, ids, mask).tolist() for ids, mask in llm_calls(torch)],
    )
    if save_as:
        ait.save(m, str(workdir / save_as))
    return facts


def llm_static_cache_reused_case(ait, torch) -> dict:
    """Stock AITune cannot record two prompts of one batch size with ``cache_implementation="static"``: the second
    prefill meets the StaticCache ``generate`` kept, its tensors allocated, so its key (equal: the same LLM phase)
    holds tensors the first did not, and ``update_shapes_seen`` raises. The patched AITune must raise the same."""
    fresh(ait)
    m = ait.Module(build_llm(torch, "llama"), "llama-static-reused", strategy=quick_strategy(ait))
    data = [{"ids": prompts(torch, 1, 5, seed)[0][0], "mask": torch.ones(5, dtype=torch.int64)} for seed in (1, 2)]
    try:
        tune(ait, lambda ids, mask: generate(torch, m, "static", ids, mask), data)
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None, **module_facts(m)}


def llm_load(ait, torch, kind: str, cache: str, path: Path) -> dict:
    """A checkpoint of ``llm_case`` loaded into a model with other weights; the same generate calls."""
    m = ait.load(build_llm(torch, kind, seed=100), str(path))
    facts = module_facts_loaded(m)
    tokens, log = [], []
    with served(m.module.backends, log):
        for ids, mask in llm_calls(torch):
            tokens.append(generate(torch, m, cache, ids, mask).tolist())
    facts.update(tokens=tokens, served=log)
    return facts


def module_facts_loaded(m) -> dict:
    """``module_facts`` of a loaded module (it recorded no graphs: the keys come from the checkpoint)."""
    facts = {"state": m.state.value}
    facts.update(graph_facts(m.module.backends))
    return facts


# ----------------------------------------------------------------------------------------------- tokenizers


WORDS = "the a cat dog sat ran on under mat big small red blue quickly slowly and".split()


def word_tokenizer():
    """A BERT-style fast tokenizer built here: a word-level vocabulary, ``[CLS] ... [SEP]``, padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


ESM_VOCAB = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO.-", "<null_1>", "<mask>"]


def esm_tokenizer(workdir: Path):
    from transformers import EsmTokenizer

    vocab = workdir / "esm_vocab.txt"
    vocab.write_text("\n".join(ESM_VOCAB) + "\n")
    return EsmTokenizer(str(vocab))


TEXTS = [
    "the cat sat on the mat",
    "a big dog ran",
    "the small red cat ran quickly under a blue mat",
    "dog and cat",
]
PROTEINS = ["MKTAYIAKQR", "GVLSEAD", "MHWCYFNQKTPDIRE", "AAGG"]


# ----------------------------------------------------------------------------------------------- encoders


def bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        **extra,
    )


def build_encoder(torch, kind: str, seed: int = 0):
    from transformers import BertModel, EsmConfig, EsmModel

    torch.manual_seed(seed)
    if kind == "bert":
        return BertModel(bert_config(), add_pooling_layer=False).eval()
    config = EsmConfig(
        vocab_size=len(ESM_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=1,
        mask_token_id=len(ESM_VOCAB) - 1,
        position_embedding_type="rotary",
        token_dropout=True,
    )
    return EsmModel(config, add_pooling_layer=False).eval()


def encoding_object_module(torch):
    """A module whose ``forward`` takes a tokenizer's ``BatchEncoding`` whole: AITune walks the object."""

    class EncodeBatch(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, batch):
            return self.encoder(**batch).last_hidden_state

    return EncodeBatch


def encoding_case(ait, torch, kind: str, how: str, workdir: Path, save_as: str | None) -> dict:
    """An encoder called with a ``BatchEncoding``: ``model(**encoding)`` (``how="kwargs"``) or a module taking the
    ``BatchEncoding`` object (``how="object"``); outputs for texts of lengths never tuned."""
    fresh(ait)
    tok = word_tokenizer() if kind == "bert" else esm_tokenizer(workdir)
    texts = TEXTS if kind == "bert" else PROTEINS

    def build(seed=0):
        encoder = build_encoder(torch, kind, seed)
        return encoding_object_module(torch)(encoder).eval() if how == "object" else encoder

    def call(model, batch):
        encoding = tok(batch, padding=True, return_tensors="pt")
        assert type(encoding).__name__ == "BatchEncoding"
        with torch.no_grad():
            return model(encoding) if how == "object" else model(**encoding).last_hidden_state

    m = ait.Module(build(), f"{kind}-encoding-{how}", strategy=quick_strategy(ait))
    tune(ait, lambda text: call(m, text), [{"text": t} for t in texts[:2]])
    facts = module_facts(m)
    eager = build()
    batches = [texts[1:4], texts[:1], texts[2:4]]
    outs, log = [], []
    with served(m.module.backends, log):
        for batch in batches:
            outs.append(call(m, batch))
    facts.update(
        out=[digest(o) for o in outs],
        served=log,
        eager_equal=all(torch.equal(o, call(eager, b)) for o, b in zip(outs, batches, strict=True)),
    )
    if save_as:
        ait.save(m, str(workdir / save_as))
    return facts


def encoding_load(ait, torch, kind: str, how: str, workdir: Path, path: Path) -> dict:
    tok = word_tokenizer() if kind == "bert" else esm_tokenizer(workdir)
    texts = TEXTS if kind == "bert" else PROTEINS
    encoder = build_encoder(torch, kind, seed=100)
    model = encoding_object_module(torch)(encoder).eval() if how == "object" else encoder
    m = ait.load(model, str(path))
    facts = module_facts_loaded(m)
    outs, log = [], []
    with served(m.module.backends, log), torch.no_grad():
        for batch in [texts[1:4], texts[:1], texts[2:4]]:
            encoding = tok(batch, padding=True, return_tensors="pt")
            outs.append(m(encoding) if how == "object" else m(**encoding).last_hidden_state)
    facts.update(out=[digest(o) for o in outs], served=log)
    return facts


def pipeline_case(ait, torch) -> dict:
    """A ``text-classification`` pipeline (tiny BERT, the tokenizer built here) whose model is a tuned Module."""
    from transformers import BertForSequenceClassification, pipeline

    fresh(ait)
    tok = word_tokenizer()

    def build():
        torch.manual_seed(0)
        return BertForSequenceClassification(bert_config(num_labels=3)).eval()

    eager_pipe = pipeline("text-classification", model=build(), tokenizer=tok, device="cpu", top_k=None)
    pipe = pipeline("text-classification", model=build(), tokenizer=tok, device="cpu", top_k=None)
    pipe.model = m = ait.Module(pipe.model, "bert-pipeline", strategy=quick_strategy(ait))
    tune(ait, lambda text: pipe(text, batch_size=len(text)), [{"text": t} for t in TEXTS[:2]])
    facts = module_facts(m)
    log: list = []
    with served(m.module.backends, log):
        out = [pipe(TEXTS, batch_size=3), pipe(TEXTS[2])]
    facts.update(out=out, served=log, eager_equal=out == [eager_pipe(TEXTS, batch_size=3), eager_pipe(TEXTS[2])])
    return facts


# ----------------------------------------------------------------------------------------------- JIT


def jit_facts(model) -> dict:
    """What AITune's JIT patcher made of ``model``: the wrapper of its PatchedModule and that wrapper's keys."""
    from aitune.torch.jit.patcher import Patcher

    mine = [pm for pm in Patcher._patched_modules if getattr(pm, "__wrapped__", None) is model]
    wrapper = getattr(mine[0], "_wrapper", None) if mine else None
    facts = {"wrapper": type(wrapper).__name__, "state": mine[0]._state.value if mine else None}
    facts.update(graph_facts(getattr(wrapper, "backends", None) or {}))
    return facts


def jit_setup(ait) -> None:
    ait.jit_config.strategy = quick_strategy(ait)
    ait.jit_config.min_samples = 2  # tune once two calls were seen and a batch axis was detected
    ait.jit_config.device = "cpu"


def resnet_config():
    from transformers import ResNetConfig

    return ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=4
    )


def jit_resnet_case(ait, torch) -> dict:
    """JIT tuning of a transformers ``ResNetForImageClassification``: tuned on its second call, with batch 2."""
    from transformers import ResNetForImageClassification

    def build():
        torch.manual_seed(0)
        return ResNetForImageClassification(resnet_config()).eval()

    model = ait.patch_for_jit_tuning(build)()
    eager = build()
    images = [torch.randn(bs, 3, 32, 32, generator=torch.Generator().manual_seed(bs)) for bs in (1, 2, 3, 1)]
    outs = []
    with torch.no_grad():
        for x in images[:2]:
            outs.append(model(pixel_values=x).logits)
    facts = jit_facts(model)
    from aitune.torch.jit.patcher import Patcher

    wrapper = next(pm._wrapper for pm in Patcher._patched_modules if pm.__wrapped__ is model)
    log: list = []
    with served(wrapper.backends, log), torch.no_grad():
        for x in images[2:]:
            outs.append(model(pixel_values=x).logits)
    with torch.no_grad():
        eager_equal = all(torch.equal(o, eager(pixel_values=x).logits) for o, x in zip(outs, images, strict=True))
    facts.update(out=[digest(o) for o in outs], served=log, eager_equal=eager_equal)
    return facts


def unet_config() -> dict:
    return dict(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
        attention_head_dim=4,
    )


def build_unet(torch):
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(**unet_config()).eval()


def jit_unet_case(ait, torch) -> dict:
    """JIT tuning of a diffusers ``UNet2DModel`` called as a diffusion loop does: ``unet(sample, t).sample``."""
    unet = ait.patch_for_jit_tuning(build_unet)(torch)
    eager = build_unet(torch)
    calls = [
        (torch.randn(bs, 3, 16, 16, generator=torch.Generator().manual_seed(bs)), torch.tensor(t))
        for bs, t in ((1, 10), (2, 5), (3, 7), (1, 0))
    ]
    outs = []
    with torch.no_grad():
        for x, t in calls[:2]:
            outs.append(unet(x, t).sample)
    facts = jit_facts(unet)
    from aitune.torch.jit.patcher import Patcher

    wrapper = next(pm._wrapper for pm in Patcher._patched_modules if pm.__wrapped__ is unet)
    log: list = []
    with served(wrapper.backends, log), torch.no_grad():
        for x, t in calls[2:]:
            outs.append(unet(x, t).sample)
    with torch.no_grad():
        eager_equal = all(torch.equal(o, eager(x, t).sample) for o, (x, t) in zip(outs, calls, strict=True))
    facts.update(out=[digest(o) for o in outs], served=log, eager_equal=eager_equal)
    return facts


def jit_ddpm_case(ait, torch) -> dict:
    """A ``DDPMPipeline`` whose UNet was built for JIT tuning: recorded during a batch-1 run, tuned in a batch-2
    run, serving the rest of it and a third run."""
    from diffusers import DDPMPipeline, DDPMScheduler

    def pipe_with(unet):
        return DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=20))

    pipe = pipe_with(ait.patch_for_jit_tuning(build_unet)(torch))
    eager = pipe_with(build_unet(torch))

    def run(p, batch, seed):
        return p(
            batch_size=batch, num_inference_steps=3, generator=torch.Generator().manual_seed(seed), output_type="np"
        ).images

    images = [run(pipe, 1, 0), run(pipe, 2, 1)]
    facts = jit_facts(pipe.unet)
    from aitune.torch.jit.patcher import Patcher

    wrapper = next(pm._wrapper for pm in Patcher._patched_modules if pm.__wrapped__ is pipe.unet)
    log: list = []
    with served(wrapper.backends, log):
        images.append(run(pipe, 1, 2))
    eager_images = [run(eager, 1, 0), run(eager, 2, 1), run(eager, 1, 2)]
    facts.update(
        out=[digest(torch.from_numpy(i)) for i in images],
        served=log,
        eager_equal=all((a == b).all() for a, b in zip(images, eager_images, strict=True)),
    )
    return facts


# ----------------------------------------------------------------------------------------------- the phases


LLM_CASES = {  # name: (model, cache)
    "llama_dynamic": ("llama", "dynamic"),
    "llama_static": ("llama", "static"),
    "qwen2_dynamic": ("qwen2", "dynamic_object"),
    "qwen2_static": ("qwen2", "static_object"),
    "phi3_dynamic": ("phi3", "dynamic"),
    "phi3_static": ("phi3", "static"),
}
ENCODING_CASES = {  # name: (encoder, how)
    "bert_encoding_kwargs": ("bert", "kwargs"),
    "bert_encoding_object": ("bert", "object"),
    "esm_encoding_kwargs": ("esm", "kwargs"),
    "esm_encoding_object": ("esm", "object"),
}


def start(mode: str):
    """Import AITune as ``mode`` runs it; the modules every phase uses."""
    if mode == "stock":
        block_aitune_fast()
    import aitune.torch as ait
    import torch

    torch.set_num_threads(1)  # two children share the machine; one thread also keeps the sums' order fixed
    if mode != "stock":
        import aitune_fast

        aitune_fast.patch_aitune(call_path=mode == "patched")
    import aitune.torch.module.tuned_module as tuned_module

    return ait, torch, {"mode": mode, "metadata_class": tuned_module.SampleMetadata.__module__}


def tune_phase(mode: str, workdir: Path) -> dict:
    ait, torch, out = start(mode)
    ckpt = workdir / f"ckpt-{mode}"
    ckpt.mkdir(parents=True, exist_ok=True)
    for name, (kind, cache) in LLM_CASES.items():
        out[name] = case(llm_case, ait, torch, kind, cache, ckpt, name if name in CHECKPOINTS else None)
    for name, (kind, how) in ENCODING_CASES.items():
        out[name] = case(encoding_case, ait, torch, kind, how, ckpt, name if name in CHECKPOINTS else None)
    out["llama_static_cache_reused"] = case(llm_static_cache_reused_case, ait, torch)
    out["bert_pipeline"] = case(pipeline_case, ait, torch)
    jit_setup(ait)
    out["jit_resnet"] = case(jit_resnet_case, ait, torch)
    out["jit_unet"] = case(jit_unet_case, ait, torch)
    out["jit_ddpm"] = case(jit_ddpm_case, ait, torch)
    return out


def load_phase(mode: str, workdir: Path) -> dict:
    """Every mode's checkpoints, loaded as ``mode``: ``out[f"{writer}->{mode}"][checkpoint]``."""
    ait, torch, out = start(mode)
    for writer in MODES:
        ckpt = workdir / f"ckpt-{writer}"
        loaded = out[f"{writer}->{mode}"] = {}
        for name in CHECKPOINTS:
            fresh(ait)
            if name in LLM_CASES:
                kind, cache = LLM_CASES[name]
                loaded[name] = case(llm_load, ait, torch, kind, cache, ckpt / name)
            else:
                kind, how = ENCODING_CASES[name]
                loaded[name] = case(encoding_load, ait, torch, kind, how, ckpt, ckpt / name)
    return out


def main(phase: str, mode: str, workdir: str) -> dict:
    try:
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return {"skip": f"transformers and diffusers are test dependencies (scripts/setup.sh): {exc!r}"}
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    return {"tune": tune_phase, "load": load_phase}[phase](mode, Path(workdir))


if __name__ == "__main__":
    report(main, *sys.argv[1:4])
