"""Workload ``aitune_tuned``: the per-forward overhead of AITune-tuned modules, stock and under ``patch_aitune()``.

Runs in its own process (``python -m aitune_fast.bench.aitune_tuned``): it needs a real ``import aitune.torch``,
which the rest of the benchmark never does (it loads the reference's metadata modules only). Three modules are
tuned on the CPU with ``OneBackendStrategy(TorchEagerBackend())``: an MLP and an LLM-like decode step (input ids,
attention mask, a dict cache of 24 layers of key/value tensors) with and without ``cache_position``; and the same
three with a forward that does nothing (AITune's path alone).

* overhead: a tuned call minus a plain call of an identical module on the same arguments (the thread's CPU
  time), collector paused; the median over rounds. Each round takes the modules (tuned stock) stock
  (``unpatch_aitune()``), patched (``patch_aitune(call_path=False)``: the metadata only; the backend keys converted
  at the switch) and on the call path (``patch_aitune()``) in turn, so that the three columns share the machine's
  state.
* metadata: the work inside that call, ``SampleMetadata.from_inputs(arguments, strict=True)`` plus the backend
  lookup, on the same arguments against the same backend dicts (the reference's on the stock modules, ours on
  modules tuned under the patch), the modules' rows in interleaved rounds (ours: keys as tuned and compact side by
  side).
* compact keys: the modules tuned under the metadata-only patch, with backend keys rebuilt from JSON, i.e. never
  read through their Python view (``tensor_data``), which AITune's tuning does read on the backend key.
* with ``--profile``: a cProfile breakdown of the llm_decode call on the call path (what remains).

If ``import aitune.torch`` fails, the workload is skipped with the reason and the command that installs what is
missing. AITune imports ``tensorrt`` unconditionally; where TensorRT is not installed, the child loads the stand-in
this package ships (``tensorrt_standin.py``, not TensorRT) under that name, and the report says so. No TensorRT
backend runs here either way: the modules are tuned with TorchEager, which is what this workload measures.
"""

from __future__ import annotations

import copy
import cProfile
import gc
import importlib.util
import io
import json
import pstats
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Hashable
from pathlib import Path
from typing import Any, TypeVar

N_LAYERS = 24
STAND_IN = Path(__file__).with_name("tensorrt_standin.py")
STAND_IN_NOTE = (
    "stand-in: TensorRT is not installed, so aitune_fast.bench loaded its own `tensorrt` stand-in (not TensorRT) "
    "to import AITune; the modules run on TorchEager, as with TensorRT installed"
)
# What `import aitune.torch` needs beyond the reference's metadata modules: AITune's own dependencies, less
# TensorRT (the stand-in above) and torch-tensorrt; the message of a failed import names this command.
AITUNE_DEPS_HINT = (
    'install AITune\'s dependencies: `pip install "aitune_fast[aitune]"` where TensorRT installs, '
    'else `pip install --no-deps aitune==0.6.0` and `pip install "aitune_fast[bench]"`'
)


# ---------------------------------------------------------------------------------------------- parent side


def run(mode: str, out_dir: Path | None = None, profile: bool = False) -> tuple[int, dict[str, Any] | None]:
    """Run the workload in a child process and print its table: (exit status, 0 also when skipped; the result, None
    when skipped or failed)."""
    cmd = [sys.executable, "-m", "aitune_fast.bench.aitune_tuned", "--mode", mode] + (["--profile"] if profile else [])
    print("\naitune_tuned: tuning with AITune in a child process...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        print(f"aitune_tuned: FAILED ({proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr)
        return 1, None
    result = json.loads(lines[-1])
    if "skip" in result:
        print(f"\naitune_tuned: skipped: {result['skip']}")
        return 0, None
    text = table(result)
    print("\n" + text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "aitune_tuned.json").write_text(json.dumps(result, indent=1))
        (out_dir / "aitune_tuned.md").write_text(text + "\n")
    return 0, result


def table(result: dict[str, Any]) -> str:
    lines = [
        "AITune-tuned modules, per-forward overhead (tuned call minus plain call, median µs of interleaved rounds):",
        "stock AITune; patched = patch_aitune(call_path=False), the metadata only; call path = patch_aitune(), "
        "the whole per-call path; path alone = the same modules with a forward that does nothing.",
        "",
        f"{'module':<15} {'stock':>8} {'patched':>8} {'ratio':>6} {'call path':>9} {'ratio':>6}"
        f" | {'path alone:':>11} {'stock':>7} {'patched':>8} {'call path':>9} {'ratio':>6}",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"{name:<15} {row['stock_us']:>8.1f} {row['patched_us']:>8.1f} {row['ratio']:>5.1f}x"
            f" {row['fast_us']:>9.1f} {row['fast_ratio']:>5.1f}x"
            f" | {'':>11} {row['stock_path_us']:>7.1f} {row['patched_path_us']:>8.1f} {row['fast_path_us']:>9.1f}"
            f" {row['fast_path_ratio']:>5.1f}x"
        )
    if all("stats_us" in row for row in result["rows"].values()):
        lines += [
            "",
            "The call path with dispatch statistics on (configure(dispatch_stats=True)), same rounds:",
            "",
            f"{'module':<15} {'call path':>9} {'stats on':>9} {'cost':>7}"
            f" | {'path alone:':>11} {'call path':>9} {'stats on':>9} {'cost':>7}",
        ]
        for name, row in result["rows"].items():
            lines.append(
                f"{name:<15} {row['fast_us']:>9.1f} {row['stats_us']:>9.1f} {row['stats_us'] - row['fast_us']:>+7.2f}"
                f" | {'':>11} {row['fast_path_us']:>9.1f} {row['stats_path_us']:>9.1f}"
                f" {row['stats_path_us'] - row['fast_path_us']:>+7.2f}"
            )
    if all("compile_us" in row for row in result["rows"].values()):
        lines += [
            "",
            'The anchor: torch.compile(backend="eager") on the same (plain) modules, same rounds: its overhead over a '
            "plain call, and the call path's in units of it (lower is better).",
            "",
            f"{'module':<15} {'compile':>8} {'call path':>9} {'x compile':>9}"
            f" | {'path alone:':>11} {'compile':>8} {'call path':>9} {'x compile':>9}",
        ]
        for name, row in result["rows"].items():
            lines.append(
                f"{name:<15} {row['compile_us']:>8.1f} {row['fast_us']:>9.1f} {row['vs_compile']:>8.2f}x"
                f" | {'':>11} {row['compile_path_us']:>8.1f} {row['fast_path_us']:>9.1f}"
                f" {row['vs_compile_path']:>8.2f}x"
            )
    lines += [
        "",
        "The metadata work inside a call (from_inputs + backend lookup, µs), and the metadata-only patch with "
        "compact keys:",
        "",
        f"{'module':<15} {'meta ref':>9} {'meta ours':>9} {'ratio':>7} {'compact':>9} {'ratio':>7}"
        f" | {'compact keys':>12} {'ratio':>7}",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"{name:<15} {row['meta_ref_us']:>9.2f} {row['meta_ours_us']:>9.2f} {row['meta_ratio']:>6.1f}x"
            f" {row['meta_compact_us']:>9.2f} {row['meta_compact_ratio']:>6.1f}x"
            f" | {row['compact_us']:>12.1f} {row['compact_ratio']:>6.1f}x"
        )
    lines += [
        "",
        "compact keys: metadata-only patch, backend keys rebuilt from JSON (never read through tensor_data).",
        f"llm_decode backend key == a call's metadata: {result['key_eq_us']['tuned']:.2f} µs as tuned "
        f"(AITune's tuning read its tensor_data), {result['key_eq_us']['compact']:.2f} µs compact",
        f"tensorrt: {result['tensorrt']}",
    ]
    llama = result.get("llama") or {}
    if "skip" in llama:
        lines += ["", f"real model (tiny transformers Llama, decode call): skipped: {llama['skip']}"]
    elif llama:
        lines += [
            "",
            "Real model: a tiny random transformers LlamaForCausalLM (2 layers, hidden 32), the decode call generate "
            "makes on its static cache, tuned with TorchEager (overhead = tuned minus plain, µs):",
            "",
            f"{'module':<15} {'plain':>8} {'stock':>8} {'call path':>9} {'ratio':>6}",
            f"{'llama_decode':<15} {llama['plain_us']:>8.1f} {llama['stock_us']:>8.1f} {llama['fast_us']:>9.1f}"
            f" {llama['ratio']:>5.1f}x",
            "The path alone around a stub of the same signature: the llm_decode_cp row's 'path alone' columns.",
        ]
    if result.get("profile"):
        lines += ["", "cProfile of the llm_decode_cp call on the call path (top by own time):", result["profile"]]
    return "\n".join(lines)


def report_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The tuned-call rows of the main benchmark table: stock AITune in the reference column, the call path in
    aitune_fast's (overhead over a plain call, and AITune's path alone)."""
    rows = []
    for name, row in result.get("rows", {}).items():
        for op, label, stock, fast in (
            ("tuned_call", "tuned call overhead", row["stock_us"], row["fast_us"]),
            ("tuned_call_path", "AITune path alone", row["stock_path_us"], row["fast_path_us"]),
            ("tuned_call_stats", "tuned call overhead, dispatch stats on", row["stock_us"], row.get("stats_us")),
        ):
            if fast is None:  # a result from before the stats row
                continue
            times: dict[str, Any] = dict.fromkeys(("reference", "optree", "floor", "aitune_fast"))
            times["reference"] = {"median_s": stock * 1e-6}
            times["aitune_fast"] = {"median_s": fast * 1e-6}
            ratio = stock / fast if fast > 0 else None
            rows.append(
                {
                    "workload": f"tuned {name}",
                    "op": op,
                    "label": label,
                    "gc_on": False,
                    "times": times,
                    "ratios": {"reference": ratio, "optree": None, "floor": None},
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------- child side


def _import_aitune() -> tuple[Any, str]:
    """``aitune.torch``, and what ``tensorrt`` is here (installed, or the stand-in loaded where it is missing)."""
    try:
        import tensorrt

        trt = "installed (not measured: the modules run on TorchEager)"
        if getattr(tensorrt, "IS_AITUNE_FAST_TEST_FIXTURE", False):
            trt = "the test suite's stand-in (tests/fixtures/tensorrt_stub), not TensorRT"
    except ImportError:
        _load_stand_in()
        trt = STAND_IN_NOTE
    import aitune.torch as ait

    return ait, trt


def _load_stand_in() -> None:
    """Load ``tensorrt_standin.py`` as the module ``tensorrt`` of this process."""
    spec = importlib.util.spec_from_file_location("tensorrt", STAND_IN)
    assert spec is not None and spec.loader is not None, STAND_IN
    module = importlib.util.module_from_spec(spec)
    sys.modules["tensorrt"] = module
    spec.loader.exec_module(module)


def _models(torch: Any) -> dict[str, Any]:
    class TinyLLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(64, 16)
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, input_ids, attention_mask, past_key_values, cache_position=None):
            return self.proj(self.emb(input_ids) * attention_mask[..., None])

    class NoopMLP(torch.nn.Module):
        def forward(self, x):
            return x

    class NoopLLM(torch.nn.Module):
        def forward(self, input_ids, attention_mask, past_key_values, cache_position=None):
            return input_ids

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    models = {"mlp": mlp, "llm_decode_cp": TinyLLM().eval(), "llm_decode": TinyLLM().eval()}
    models[f"mlp{PATH}"] = NoopMLP().eval()
    models[f"llm_decode_cp{PATH}"] = NoopLLM().eval()
    models[f"llm_decode{PATH}"] = NoopLLM().eval()
    return models


PATH = ":path"  # suffix of the modules whose forward does nothing: AITune's path alone
ROWS = ("mlp", "llm_decode_cp", "llm_decode")  # the modules of the table, each also with PATH


def _llm_sample(torch: Any) -> dict[str, Any]:
    return {
        "input_ids": torch.zeros(1, dtype=torch.int64),
        "attention_mask": torch.ones(1),
        "past_key_values": {
            f"layer{i}": {"key": torch.zeros(2, 16, 8), "value": torch.zeros(2, 16, 8)} for i in range(N_LAYERS)
        },
    }


def _tune_all(ait: Any, torch: Any, tag: str, names: tuple = ()) -> dict[str, tuple[Any, Any, tuple, dict]]:
    """name -> (tuned module, plain copy, args, kwargs) of one call at batch size 2 (the modules in `names`, or
    all)."""
    from aitune.torch.backend import TorchEagerBackend
    from aitune.torch.module_registry import MODULE_REGISTRY

    def strategy() -> Any:
        s = ait.OneBackendStrategy(TorchEagerBackend())
        s.enable_performance_validation(False)
        s.enable_find_max_batch_size(False)
        return s

    out: dict[str, tuple[Any, Any, tuple, dict]] = {}
    for name, model in _models(torch).items():
        if names and name not in names:
            continue
        MODULE_REGISTRY.clear()
        plain = copy.deepcopy(model)
        tuned = ait.Module(model, f"{name.replace(':', '-')}-{tag}", strategy=strategy())
        if name.startswith("mlp"):
            ait.tune(tuned, torch.randn(16), batch_sizes=[1, 2], device="cpu")
            out[name] = (tuned, plain, (torch.randn(2, 16),), {})
            continue
        data = ait.DataLoaderFactory([_llm_sample(torch)], collate_fn=torch.utils.data.default_collate)
        extra = {"cache_position": torch.tensor([16])} if name.startswith("llm_decode_cp") else {}
        ait.tune(lambda t=tuned, e=extra, **kw: t(**kw, **e), data, batch_sizes=[1, 2], device="cpu")
        kwargs = dict(torch.utils.data.default_collate([_llm_sample(torch)] * 2), **extra)
        out[name] = (tuned, plain, (), kwargs)
    return out


def _stats_off(switch: Any) -> Any:
    """`switch`, then dispatch statistics off."""

    def off() -> None:
        import aitune_fast

        switch()
        aitune_fast.configure(dispatch_stats=False)

    return off


def _stats_on() -> None:
    """The call path with dispatch statistics on (``aitune_fast.dispatch_stats``): the cost of having them on."""
    import aitune_fast

    aitune_fast.patch_aitune(call_path=True)
    aitune_fast.configure(dispatch_stats=True)


def _loop(fn: Any, args: tuple, kwargs: dict, n: int) -> float:
    """µs of this thread's CPU time per call (not wall time: on a shared machine the process is descheduled
    at random, which a tuned-minus-plain difference cannot absorb)."""
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn(*args, **kwargs)
    return (time.thread_time_ns() - t0) / n / 1000.0


def _overheads(
    modules: dict[str, tuple[Any, Any, tuple, dict]],
    settings: dict[str, Any],
    rounds: int,
    n: int,
    anchors: dict[str, Any] | None = None,
) -> dict[str, dict[str, float]]:
    """setting -> module -> median µs of (tuned call - plain call), in rounds that take every setting (a function
    that puts it in place) and every module in turn, collector paused; with `anchors` (module -> the plain module
    under ``torch.compile``), also ``"compile"`` -> module -> (compiled call - plain call), in the same rounds."""
    import torch

    anchors = _compiling(anchors or {}, modules, n)
    keys = [*settings, *(["compile"] if anchors else [])]
    diffs: dict[str, dict[str, list[float]]] = {key: {name: [] for name in modules} for key in keys}
    with torch.no_grad():
        for switch in settings.values():
            switch()
            for tuned, plain, args, kwargs in modules.values():
                _loop(tuned, args, kwargs, n)
                _loop(plain, args, kwargs, n)
        gc.collect()
        gc.disable()
        try:
            for _ in range(rounds):
                for key, switch in settings.items():
                    switch()
                    for name, (tuned, plain, args, kwargs) in modules.items():
                        t = _loop(tuned, args, kwargs, n)
                        p = _loop(plain, args, kwargs, n)
                        diffs[key][name].append(t - p)
                for name, compiled in anchors.items():
                    _, plain, args, kwargs = modules[name]
                    t = _loop(compiled, args, kwargs, n)
                    p = _loop(plain, args, kwargs, n)
                    diffs["compile"][name].append(t - p)
        finally:
            gc.enable()
    return {key: {name: statistics.median(d) for name, d in per.items() if d} for key, per in diffs.items()}


def _compiling(anchors: dict[str, Any], modules: dict[str, tuple[Any, Any, tuple, dict]], n: int) -> dict[str, Any]:
    """The anchors that compile and run (each called `n` times: compiled, warmed up), all or none."""
    import torch

    try:
        with torch.no_grad():
            for name, compiled in anchors.items():
                _loop(compiled, modules[name][2], modules[name][3], n)
    except Exception as exc:  # noqa: BLE001 - Dynamo failing here leaves the column out, not the benchmark
        print(f"aitune_tuned: torch.compile anchor left out ({type(exc).__name__}: {exc})", file=sys.stderr)
        return {}
    return anchors


def _compiled(torch: Any, modules: dict[str, tuple[Any, Any, tuple, dict]]) -> dict[str, Any]:
    """The anchor: each module's plain copy under ``torch.compile(backend="eager")`` (Dynamo's guards and dispatch,
    no code generation); {} where Dynamo is unavailable."""
    try:
        return {name: torch.compile(copy.deepcopy(entry[1]), backend="eager") for name, entry in modules.items()}
    except Exception:  # noqa: BLE001 - no Dynamo here (e.g. an unsupported Python): the column is left out
        return {}


LLAMA_PROMPT, LLAMA_NEW = 5, 4  # the prompt's length and the tokens generated, in tuning and when capturing


def _llama(torch: Any) -> Any:
    """A tiny random ``LlamaForCausalLM`` from a config (no download): 2 layers, hidden size 32. The same config as
    ``tests/integration/hf_models_child.llm_config("llama")``, which cannot import this module: its stock world runs
    with aitune_fast blocked."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=64,
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
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _generate(torch: Any, model: Any, ids: Any) -> Any:
    """Greedy ``generate`` of LLAMA_NEW tokens on a static cache (transformers keeps it between calls)."""
    with torch.no_grad():
        return model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=LLAMA_NEW,
            min_new_tokens=LLAMA_NEW,
            do_sample=False,
            cache_implementation="static",
        )


def _decode_call(torch: Any, model: Any, ids: Any) -> dict[str, Any]:
    """The keyword arguments of the last decode call (one new token) ``generate`` makes of `model`."""
    calls: list[dict[str, Any]] = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(dict(kwargs)) if not args else None, with_kwargs=True
    )
    try:
        _generate(torch, model, ids)
    finally:
        handle.remove()
    decodes = [kw for kw in calls if kw.get("input_ids") is not None and kw["input_ids"].shape[-1] == 1]
    if not decodes:
        raise RuntimeError("generate made no decode call")
    return decodes[-1]


def tuned_llama(ait: Any, torch: Any, model: Any, name: str) -> tuple[Any, Any, dict[str, Any]]:
    """`model` tuned by a stock AITune (TorchEager, on ``generate``'s calls), a plain copy of it made first, and the
    keyword arguments of the decode call ``generate`` makes; aitune_fast is unpatched when it returns."""
    from aitune.torch.backend import TorchEagerBackend
    from aitune.torch.module_registry import MODULE_REGISTRY

    import aitune_fast

    aitune_fast.unpatch_aitune()
    MODULE_REGISTRY.clear()
    plain = copy.deepcopy(model)
    strategy = ait.OneBackendStrategy(TorchEagerBackend())
    strategy.enable_performance_validation(False)
    strategy.enable_find_max_batch_size(False)
    tuned = ait.Module(model, name, strategy=strategy)
    ids = torch.randint(3, 64, (1, LLAMA_PROMPT), generator=torch.Generator().manual_seed(1))
    ait.tune(lambda ids: _generate(torch, tuned, ids), [{"ids": ids[0]}], batch_sizes=[1], device="cpu")
    return tuned, plain, _decode_call(torch, plain, ids)


def _llama_row(ait: Any, torch: Any, rounds: int, n: int) -> dict[str, Any]:
    """The real-model row: a tiny Llama's decode call (the forward ``generate`` makes for one new token, on its static
    cache), tuned by AITune with TorchEager; its overhead stock and on the call path (tuned minus plain, same rounds);
    {"skip": why} where transformers is missing or the call finds no backend."""
    import aitune_fast

    try:
        model = _llama(torch)
    except ImportError as exc:
        return {"skip": f"transformers is not installed ({exc})"}
    tuned, plain, kwargs = tuned_llama(ait, torch, model, "llama-decode-bench")
    try:
        with torch.no_grad():
            tuned(**kwargs)
    except RuntimeError as exc:
        return {"skip": f"the captured decode call found no backend ({exc})"}
    settings = {"stock": aitune_fast.unpatch_aitune, "fast": lambda: aitune_fast.patch_aitune(call_path=True)}
    overheads = _overheads({"llama": (tuned, plain, (), kwargs)}, settings, rounds, n)
    aitune_fast.unpatch_aitune()
    stock, fast = overheads["stock"]["llama"], overheads["fast"]["llama"]
    with torch.no_grad():
        plain_us = statistics.median(_loop(plain, (), kwargs, n) for _ in range(rounds))
    return {"stock_us": stock, "fast_us": fast, "plain_us": plain_us, "ratio": stock / max(fast, 1e-9)}


def _metadata_work(sample_metadata: Any, tuned: Any, args: tuple, kwargs: dict, backends: Any = None) -> Any:
    """What a tuned call does to find its backend: the call's metadata, then `in` and `[]` on the backend dict."""
    wrapper = tuned.module
    arguments = wrapper._forward_signature.normalize(args, kwargs).arguments
    backends = wrapper.backends if backends is None else backends

    def work() -> Any:
        md = sample_metadata.from_inputs(arguments, strict=True)
        if md not in backends:
            raise RuntimeError("no backend for the benchmark's call")
        return backends[md]

    return work


_Key = TypeVar("_Key", bound=Hashable)


def _metadata_us(works: dict[_Key, Any], rounds: int, n: int) -> dict[_Key, float]:
    """Median µs per call of each work, measured in interleaved rounds (so that drift, and the state a
    tuning leaves behind, weigh on each alike), collector paused."""
    times: dict[_Key, list[float]] = {name: [] for name in works}
    for work in works.values():
        work()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, work in works.items():
                t0 = time.thread_time_ns()
                for _ in range(n):
                    work()
                times[name].append((time.thread_time_ns() - t0) / n / 1000.0)
    finally:
        gc.enable()
    return {name: statistics.median(t) for name, t in times.items()}


def _eq_us(key: Any, tuned: Any, args: tuple, kwargs: dict, n: int = 2000) -> float:
    wrapper = tuned.module
    md = type(key).from_inputs(wrapper._forward_signature.normalize(args, kwargs).arguments, strict=True)
    assert md == key
    t0 = time.thread_time_ns()
    for _ in range(n):
        md == key  # noqa: B015
    return (time.thread_time_ns() - t0) / n / 1000.0


def _compact(backends: Any) -> dict[Any, Any]:
    """The backend dict with its keys rebuilt from JSON: metadata whose Python view was never built."""
    return {type(key).from_json(key.to_json()): backend for key, backend in backends.items()}


def _compact_keys(tuned: Any) -> None:
    """Give a tuned module backend keys rebuilt from JSON (see `_compact`)."""
    backends = tuned.module.backends
    compact = _compact(backends)
    backends.clear()
    backends.update(compact)


def _profile(tuned: Any, args: tuple, kwargs: dict, n: int) -> str:
    import torch

    profiler = cProfile.Profile()
    with torch.no_grad():
        profiler.enable()
        for _ in range(n):
            tuned(*args, **kwargs)
        profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("tottime").print_stats(18)
    text = stream.getvalue()
    body = text[text.find("ncalls") :] if "ncalls" in text else text
    return f"({n} calls; per-call µs = tottime / {n} * 1e6)\n" + body.rstrip()


def child(mode: str, profile: bool = False) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    try:
        ait, trt = _import_aitune()
    except Exception as exc:  # noqa: BLE001 - any failure to import AITune skips the workload
        return {"skip": f"`import aitune.torch` failed ({type(exc).__name__}: {exc}); {AITUNE_DEPS_HINT}"}
    import logging

    import aitune.torch.module.sample_metadata as reference_module
    import torch

    import aitune_fast

    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    rounds, n = MODE_ROUNDS[mode]

    reference_sm = reference_module.SampleMetadata
    stock = _tune_all(ait, torch, "stock")
    rows: dict[str, dict[str, float]] = {name: {} for name in ROWS}
    works = {}
    for name in ROWS:
        tuned, _, args, kwargs = stock[name]
        works[name] = _metadata_work(reference_sm, tuned, args, kwargs)
    for name, us in _metadata_us(works, rounds, n).items():
        rows[name]["meta_ref_us"] = us
    del works
    # the same modules (tuned stock) stock, patched, on the call path and on it with dispatch statistics on, in rounds
    # that switch between the four
    settings = {
        "stock": _stats_off(aitune_fast.unpatch_aitune),
        "patched": _stats_off(lambda: aitune_fast.patch_aitune(call_path=False)),
        "fast": _stats_off(lambda: aitune_fast.patch_aitune(call_path=True)),
        "stats": _stats_on,
    }
    overheads = _overheads(stock, settings, rounds, n, _compiled(torch, stock))
    for name, row in rows.items():
        for key, per_module in overheads.items():
            row[f"{key}_us"], row[f"{key}_path_us"] = per_module[name], per_module[name + PATH]
    aitune_fast.unpatch_aitune()
    aitune_fast.configure(dispatch_stats=False)
    del stock
    aitune_fast.patch_aitune(call_path=False)
    patched = _tune_all(ait, torch, "patched", ROWS)
    tuned, _, args, kwargs = patched["llm_decode"]
    key_eq = {"tuned": _eq_us(next(iter(tuned.module.backends)), tuned, args, kwargs)}
    # the keys as tuned and rebuilt from JSON, side by side
    field_works: dict[tuple[str, str], Any] = {}
    for name in ROWS:
        tuned, _, args, kwargs = patched[name]
        field_works[(name, "meta_ours_us")] = _metadata_work(aitune_fast.SampleMetadata, tuned, args, kwargs)
        compact = _compact(tuned.module.backends)
        field_works[(name, "meta_compact_us")] = _metadata_work(
            aitune_fast.SampleMetadata, tuned, args, kwargs, compact
        )
    for (name, field), us in _metadata_us(field_works, rounds, n).items():
        rows[name][field] = us
    del field_works
    compact_modules = {name: patched[name] for name in ROWS}
    for tuned, *_ in compact_modules.values():
        _compact_keys(tuned)
    for name, us in _overheads(compact_modules, {"compact": lambda: None}, rounds, n)["compact"].items():
        rows[name]["compact_us"] = us
    tuned, _, args, kwargs = patched["llm_decode"]
    key_eq["compact"] = _eq_us(next(iter(tuned.module.backends)), tuned, args, kwargs)
    for row in rows.values():
        row["ratio"] = row["stock_us"] / max(row["patched_us"], 1e-9)
        row["fast_ratio"] = row["stock_us"] / max(row["fast_us"], 1e-9)
        row["fast_path_ratio"] = row["stock_path_us"] / max(row["fast_path_us"], 1e-9)
        row["stats_ratio"] = row["stock_us"] / max(row["stats_us"], 1e-9)
        if "compile_us" in row:  # the call path's overhead in units of torch.compile's (lower is better)
            row["vs_compile"] = row["fast_us"] / max(row["compile_us"], 1e-9)
            row["vs_compile_path"] = row["fast_path_us"] / max(row["compile_path_us"], 1e-9)
        row["compact_ratio"] = row["stock_us"] / max(row["compact_us"], 1e-9)
        row["meta_ratio"] = row["meta_ref_us"] / max(row["meta_ours_us"], 1e-9)
        row["meta_compact_ratio"] = row["meta_ref_us"] / max(row["meta_compact_us"], 1e-9)
    result = {"rows": rows, "key_eq_us": key_eq, "tensorrt": trt, "mode": mode}
    result["llama"] = _llama_row(ait, torch, rounds, n)
    if profile:
        aitune_fast.patch_aitune(call_path=True)
        tuned, _, args, kwargs = patched["llm_decode_cp"]
        result["profile"] = _profile(tuned, args, kwargs, n * 5)
    aitune_fast.unpatch_aitune()
    return result


# --mode: rounds (stock, patched and call path interleaved) and calls per round of each measurement
MODE_ROUNDS = {"full": (15, 200), "quick": (7, 100), "smoke": (2, 20)}


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rounds = ", ".join(f"{mode} {r} rounds of {n} calls" for mode, (r, n) in MODE_ROUNDS.items())
    parser.add_argument(
        "--mode",
        choices=list(MODE_ROUNDS),
        default="quick",
        help=f"how long each measurement runs: {rounds} (default quick; smoke only checks that it runs)",
    )
    parser.add_argument("--table", action="store_true", help="print the table, not JSON")
    parser.add_argument("--profile", action="store_true", help="add a cProfile breakdown of one call path call")
    ns = parser.parse_args()
    result = child(ns.mode, ns.profile)
    sys.stdout.flush()
    if ns.table and "rows" in result:
        print(table(result))
    else:
        print("\n" + json.dumps(result))


if __name__ == "__main__":
    _main()
