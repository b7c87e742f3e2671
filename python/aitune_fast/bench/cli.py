"""``python -m aitune_fast.bench``: aitune_fast against the reference, side by side in one process.

See ``benches/README.md`` for the workloads, the operations and the method.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import aitune_tuned, memory, report, scaling, timing
from .impls import (
    OPTREE_NAMESPACE,
    Impl,
    load_fast_impl,
    load_optree,
    load_reference_impl,
    register_optree,
    register_user_types,
)
from .progress import Progress
from .workloads import WORKLOADS, Workload, flatten_tensors


@dataclass(frozen=True)
class Op:
    """One operation: the statement each implementation runs, and which extras apply."""

    name: str
    label: str
    stmt: str  # with SM = the implementation's SampleMetadata; "" = the implementation's own (to_json)
    traversal_input: str | None = None  # "a" or "b": optree and floor apply, traversing that instance
    gc_on: bool = False
    measures_memory: bool = False


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("from_inputs", "from_inputs", "SM.from_inputs(a, strict=True)", traversal_input="a"),
        Op("from_inputs_gc", "from_inputs (gc on)", "SM.from_inputs(a, strict=True)", traversal_input="a", gc_on=True),
        Op("dispatch", "dispatch", "backends[SM.from_inputs(b, strict=True)]", traversal_input="b"),
        Op("lookup", "lookup", "backends[mb]"),
        Op("update_shapes_seen", "update_shapes_seen", "ma.update_shapes_seen(mb)"),
        Op("dict_roundtrip", "dict_roundtrip", "SM.from_dict(m.to_dict())"),
        Op("to_json_dict", "to_json_dict", "dumps(m.to_json_dict())"),
        Op("to_json", "to_json", ""),
        Op("make_batch", "make_batch", "mt.make_batch(a, bs)", measures_memory=True),
    )
}
# the collector-on row is reported by default only where it differs most (benches/README.md)
DEFAULT_GC_ON_WORKLOADS = ("large_graph_10k",)
SMOKE_WORKLOADS = ("vision", "diffusion", "llm_decode")
THOROUGH_CHECK_MAX_TENSORS = 100_000  # above it, the agreement check only tries a lookup

OPTREE_STMT = "[(t.shape, t.dtype) for t in flatten(x, namespace=NS)[1] if isinstance(t, Tensor)]"
FLOOR_STMT = "[(t.shape, t.dtype) for t in flat]"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows: ratios against the
    floor differ between CPUs (see benches/README.md), so a result names the one it ran on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m aitune_fast.bench",
        description="Benchmark aitune_fast against the reference (aitune 0.6.0), optree and the floor, "
        "side by side in one process; prints a table and writes bench.json and speedups.png.",
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        metavar="NAME",
        help=f"workloads to run (default: all): {', '.join(WORKLOADS)}, aitune_tuned",
    )
    parser.add_argument(
        "--ops",
        nargs="+",
        metavar="NAME",
        help=f"operations to run (default: all; from_inputs_gc only on large_graph_10k unless named): {', '.join(OPS)}",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="fewer repeats (5) and no scale_1m: about 3 minutes on 2 idle cores; 520 s measured on 2 busy ones",
    )
    mode.add_argument("--smoke", action="store_true", help="tiny run that checks the harness works (CI)")
    parser.add_argument(
        "--out",
        type=Path,
        help="results folder (default: benches/results, or .../smoke, in a checkout; elsewhere a new folder "
        "under the system's temporary folder; the first line of output names it)",
    )
    parser.add_argument("--repeats", type=int, help="interleaved repeats per cell (default: 15, quick 5, smoke 1)")
    parser.add_argument("--target-ms", type=float, help="time of one repeat's loop (default: 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="aitune_tuned: also print a cProfile breakdown of one tuned call on aitune_fast's call path",
    )
    parser.add_argument(
        "--scaling",
        action=argparse.BooleanOptionalAction,
        help="also measure aitune_fast's cost per tensor at 10k, 100k and 1M tensors, each size in a fresh "
        "process with caches flushed before each call (default: on in full mode without --workloads/--ops; "
        "smoke mode uses 1k and 10k)",
    )
    parser.add_argument("--impl-fallback-reference", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    args.mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    workloads = _split(args.workloads)
    ops = _split(args.ops)
    # aitune_tuned runs real AITune in its own process (bench/aitune_tuned.py): by name, or in a full or quick
    # default run, where its rows (what a user of a tuned module feels) come first
    args.aitune_tuned = "aitune_tuned" in workloads or (args.mode != "smoke" and not workloads and not ops)
    args.only_aitune_tuned = bool(workloads) and set(workloads) == {"aitune_tuned"}
    workloads = [w for w in workloads if w != "aitune_tuned"]
    for name in workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for name in ops:
        if name not in OPS:
            parser.error(f"unknown operation {name!r}; choose from {', '.join(OPS)}")
    if args.scaling is None:
        args.scaling = args.mode == "smoke" or (args.mode == "full" and not workloads and not ops)
    # smoke runs every code path (the collector-on row too) on the three small workloads
    args.explicit_gc_on = "from_inputs_gc" in ops or args.mode == "smoke"
    if not workloads:
        workloads = {
            "full": list(WORKLOADS),
            "quick": [w for w in WORKLOADS if w != "scale_1m"],
            "smoke": list(SMOKE_WORKLOADS),
        }[args.mode]
    ops = [name for name in OPS if name in ops] if ops else list(OPS)  # in the canonical order
    args.workload_names = [name for name in WORKLOADS if name in workloads]
    args.op_names = ops
    if args.repeats is None:
        args.repeats = {"full": 15, "quick": 5, "smoke": 1}[args.mode]
    if args.target_ms is None:
        args.target_ms = 1.0 if args.mode == "smoke" else 20.0
    if args.repeats < 1 or args.target_ms <= 0:
        parser.error("--repeats must be at least 1 and --target-ms positive")
    if args.out is None:
        args.out = default_results_dir(args.mode)
    return args


def default_results_dir(mode: str) -> Path:
    """``benches/results`` (``.../smoke`` for a smoke run) of the checkout this package lives in; installed
    from a wheel, a new folder under the system's temporary folder (never the user's current folder)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "benches").is_dir() and (parent / "Cargo.toml").is_file():
            return parent / "benches" / "results" / ("smoke" if mode == "smoke" else "")
    return Path(tempfile.mkdtemp(prefix=f"aitune_fast-bench-{mode}-"))


def repeats_for(workload: Workload, args: argparse.Namespace) -> int:
    # a single reference call on a million tensors takes seconds: three repeats give a median
    return min(args.repeats, 3) if workload.tensors >= 1_000_000 else args.repeats


def ops_for(workload: Workload, args: argparse.Namespace) -> list[Op]:
    ops = []
    for name in args.op_names:
        if name == "from_inputs_gc" and not args.explicit_gc_on and workload.name not in DEFAULT_GC_ON_WORKLOADS:
            continue
        ops.append(OPS[name])
    return ops


def candidates_for(op: Op, impls: list[Impl], state: dict[str, dict[str, Any]], wl: dict[str, Any]) -> list:
    cands = []
    for impl in impls:
        stmt = op.stmt or impl.to_json_stmt
        cands.append(timing.Candidate(impl.key, stmt, state[impl.key]))
    if op.traversal_input:
        optree = load_optree()
        if optree is not None:
            x = wl[op.traversal_input]
            cands.append(
                timing.Candidate(
                    "optree",
                    OPTREE_STMT,
                    {"flatten": optree.tree_flatten_with_path, "x": x, "NS": OPTREE_NAMESPACE, "Tensor": torch.Tensor},
                )
            )
        cands.append(timing.Candidate("floor", FLOOR_STMT, {"flat": wl["flat_" + op.traversal_input]}))
    return cands


def build_state(impl: Impl, workload: Workload, wl: dict[str, Any], need_trained: bool) -> dict[str, Any]:
    """The names the timed statements use, for one implementation."""
    sm = impl.SampleMetadata
    ma = sm.from_inputs(wl["a"], strict=True)
    mb = sm.from_inputs(wl["b"], strict=True)
    state = {
        "SM": sm,
        "a": wl["a"],
        "b": wl["b"],
        "ma": ma,
        "mb": mb,
        "m": ma,
        "backends": {ma: "backend"},
        "dumps": json.dumps,
        "bs": 2 * workload.batch,
    }
    if need_trained:
        # learn the batch axes: the base batch, then twice that (make_batch then scales to twice the base)
        mt = sm.from_inputs(wl["a"], strict=True, batch_size=workload.batch)
        mt.update_shapes_seen(sm.from_inputs(wl["a2"], strict=True, batch_size=2 * workload.batch))
        state["mt"] = mt
    return state


def _canonical(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def _json_covers(doc: Any, expected: Any, where: str = "$") -> str | None:
    """None if ``doc`` holds everything ``expected`` does (extra keys allowed: to_json is a superset)."""
    if isinstance(expected, dict):
        if not isinstance(doc, dict):
            return f"{where} is not an object"
        for key, value in expected.items():
            if key not in doc:
                return f"{where}.{key} is missing"
            problem = _json_covers(doc[key], value, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(doc, list) or len(doc) != len(expected):
            return f"{where} is not a list of {len(expected)} items"
        for i, (d, e) in enumerate(zip(doc, expected, strict=True)):
            problem = _json_covers(d, e, f"{where}[{i}]")
            if problem:
                return problem
        return None
    return None if doc == expected else f"{where} is {doc!r}, the reference's to_json_dict has {expected!r}"


def check_agreement(ref: Impl, fast: Impl, workload: Workload, state: dict[str, dict[str, Any]]) -> list[str]:
    """Cheap checks that both implementations compute the same thing (so the times compare like with like)."""
    problems: list[str] = []
    rs, fs = state[ref.key], state[fast.key]
    thorough = workload.tensors <= THOROUGH_CHECK_MAX_TENSORS

    def check(what: str, fn) -> None:
        try:
            message = fn()
        except Exception as exc:  # noqa: BLE001 - reported, never fatal
            message = f"raised {type(exc).__name__}: {exc}"
        if message:
            problems.append(f"{workload.name}: {what}: {message}")

    check("lookup", lambda: None if fs["backends"].get(fs["mb"]) == "backend" else "metadata of b not found")
    if not thorough:  # minutes at a million tensors; large_graph_10k has the same structure and is checked
        return problems
    expected = _canonical(rs["ma"].to_json_dict())

    check("to_json_dict", lambda: None if _canonical(fs["ma"].to_json_dict()) == expected else "differs")
    if fast.to_json_stmt == "m.to_json()":
        check("to_json", lambda: _json_covers(json.loads(fs["ma"].to_json()), expected))
        from_json = getattr(fast.SampleMetadata, "from_json", None)
        if callable(from_json):
            check("from_json", lambda: None if from_json(fs["ma"].to_json()) == fs["ma"] else "round trip !=")
    check("dict_roundtrip", lambda: None if fast.SampleMetadata.from_dict(fs["ma"].to_dict()) == fs["ma"] else "!=")
    if "mt" in rs:
        check(
            "learned batch axes",
            lambda: (
                None
                if _canonical(fs["mt"].to_json_dict()) == _canonical(rs["mt"].to_json_dict())
                else "to_json_dict differs"
            ),
        )
        describe = ref.SampleMetadata.from_inputs  # one describer for both outputs

        def make_batch() -> str | None:
            want = _canonical(describe(rs["mt"].make_batch(rs["a"], rs["bs"]), strict=True).to_json_dict())
            got = _canonical(describe(fs["mt"].make_batch(fs["a"], fs["bs"]), strict=True).to_json_dict())
            return None if got == want else "outputs differ"

        check("make_batch", make_batch)
    return problems


def runtime_info(fast: Impl) -> dict[str, Any] | None:
    """``aitune_fast.runtime_info()`` (the tensor reader in use, versions), or None for a stand-in."""
    if fast.stand_in:
        return None
    import aitune_fast

    info = getattr(aitune_fast, "runtime_info", None)
    return info() if callable(info) else None


def environment(args: argparse.Namespace, ref: Impl, fast: Impl) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": args.mode,
        "repeats": args.repeats,
        "target_ms": args.target_ms,
        "torch_threads": torch.get_num_threads(),
        "python": f"Python {platform.python_version()}",
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "git_commit": commit or None,
        "reference_version": ref.version,
        "aitune_fast": fast.label,
        "aitune_fast_version": fast.version,
        "stand_in": fast.stand_in,
        "runtime_info": runtime_info(fast),
        "to_json_statements": {"reference": ref.to_json_stmt, "aitune_fast": fast.to_json_stmt},
        "gc_paused_in_loops": True,
        "memory_method": "forked child per implementation: peak RSS rise (clear_refs + VmHWM) and tracemalloc peak",
    }


# The progress bar's weights: about what one timed unit costs, in seconds (the reference's cost per tensor,
# measured on large_graph_10k, averaged with the faster columns), so that its percentage tracks time.
_US_PER_TENSOR = {
    "from_inputs": 2.0,
    "from_inputs_gc": 2.5,
    "dispatch": 3.0,
    "lookup": 0.6,
    "update_shapes_seen": 0.8,
    "dict_roundtrip": 3.0,
    "to_json_dict": 5.0,
    "to_json": 4.0,
    "make_batch": 25.0,
}
MEMORY_UNITS = 2  # a memory measurement: about two calls


def _unit_weight(workload: Workload, op: Op, target_s: float) -> float:
    return max(target_s, workload.tensors * _US_PER_TENSOR.get(op.name, 3.0) * 1e-6)


def _setup_weight(workload: Workload) -> float:
    return max(0.05, workload.tensors * 20e-6)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"aitune_fast benchmark: results go to {args.out}", flush=True)
    rc, tuned = 0, {}
    if args.aitune_tuned:
        rc, result = aitune_tuned.run(args.mode, args.out, profile=args.profile)
        tuned = result or {}
    if args.only_aitune_tuned:
        return rc
    return max(rc, _main(args, tuned))


@dataclass
class Run:
    """One run of the metadata benchmark: what every step reads, and what they add up."""

    args: argparse.Namespace
    ref: Impl
    fast: Impl
    progress: Progress
    rows: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)

    @property
    def impls(self) -> list[Impl]:
        return [self.ref, self.fast]

    @property
    def target_s(self) -> float:
        return float(self.args.target_ms) / 1e3


def _main(args: argparse.Namespace, tuned: dict[str, Any]) -> int:
    """The metadata benchmark; the rows of `tuned` (``aitune_tuned``'s result) lead its table and chart."""
    torch.set_num_threads(args.threads)
    try:
        ref = load_reference_impl()
        fast = load_fast_impl(args.impl_fallback_reference)
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    register_user_types(ref, fast)
    register_optree()
    # Long-lived objects (torch's modules, then each workload's inputs and metadata) are frozen out of the
    # collector's reach, so that the gc.collect() before each repeat costs little and collects only
    # garbage; the collector-on rows unfreeze them, so that automatic collections scan the real heap.
    gc.collect()
    gc.freeze()
    plan = [(w, ops_for(w, args)) for w in (WORKLOADS[name] for name in args.workload_names)]
    progress = Progress(_total_weight(args, plan), enabled=not args.no_progress)
    run = Run(args, ref, fast, progress, rows=aitune_tuned.report_rows(tuned))
    _announce(run)
    for workload, ops in plan:
        _run_workload(run, workload, ops)
    scaling_result = _run_scaling(run)
    progress.close()
    meta = environment(args, ref, fast)
    if "tensorrt" in tuned:
        meta["aitune_tuned_tensorrt"] = tuned["tensorrt"]
    result: dict[str, Any] = {"meta": meta, "rows": run.rows, "problems": run.problems}
    if scaling_result:
        result["scaling"] = scaling_result
    chart_error = _write_results(args.out, result)
    _print_summary(run, result, chart_error)
    return _report_problems(run.problems)


def _total_weight(args: argparse.Namespace, plan: list[tuple[Workload, list[Op]]]) -> float:
    """The progress bar's total: every set-up, timed repeat and memory measurement, weighted by its cost."""
    total, n_impls = 0.0, 2
    for w, ops in plan:
        total += 2 * _setup_weight(w)  # build, check
        for op in ops:
            n = n_impls + (2 if op.traversal_input else 0)
            unit = _unit_weight(w, op, args.target_ms / 1e3)
            total += unit * (n * (1 + repeats_for(w, args)) + (2 * MEMORY_UNITS if op.measures_memory else 0))
    return total + (scaling.SECONDS[args.mode] if args.scaling else 0.0)


def _announce(run: Run) -> None:
    args, fast = run.args, run.fast
    print(
        f"aitune_fast benchmark ({args.mode}): {fast.label} vs {run.ref.label}; "
        f"{args.repeats} interleaved repeats of ~{args.target_ms:g} ms loops, collector paused",
        file=sys.stderr,
    )
    if fast.stand_in:
        print("warning: aitune_fast is not importable, the reference stands in for it", file=sys.stderr)
    elif fast.to_json_stmt != "m.to_json()":
        print(
            "note: aitune_fast has no SampleMetadata.to_json(): to_json times json.dumps(to_json_dict())",
            file=sys.stderr,
        )


def _run_workload(run: Run, workload: Workload, ops: list[Op]) -> None:
    """Build one workload for both implementations, check that they agree, then time each operation."""
    progress = run.progress
    progress.set_label(f"{workload.name}: building")
    need_trained = any(op.measures_memory for op in ops)
    wl: dict[str, Any] = {"a": workload.make(), "b": workload.make()}
    if need_trained:
        wl["a2"] = workload.make(2 * workload.batch)
    wl["flat_a"], wl["flat_b"] = flatten_tensors(wl["a"]), flatten_tensors(wl["b"])
    state = {impl.key: build_state(impl, workload, wl, need_trained) for impl in run.impls}
    wl.pop("a2", None)
    gc.collect()
    gc.freeze()
    progress.advance(_setup_weight(workload))
    progress.set_label(f"{workload.name}: checking agreement")
    run.problems += check_agreement(run.ref, run.fast, workload, state)
    progress.advance(_setup_weight(workload))
    for op in ops:
        progress.set_label(f"{workload.name}: {op.label}")
        row = _time_op(run, workload, op, state, wl)
        if op.measures_memory and "error" not in row:
            row["memory"] = _measure_memory(run, workload, op, state)
        run.rows.append(row)
    gc.unfreeze()
    del state, wl
    gc.collect()
    gc.freeze()


def _time_op(run: Run, workload: Workload, op: Op, state: dict[str, dict[str, Any]], wl: dict[str, Any]) -> dict:
    """One row of the table: every column's times for one operation on one workload, and the ratios."""
    unit = _unit_weight(workload, op, run.target_s)
    row: dict[str, Any] = {"workload": workload.name, "op": op.name, "label": op.label, "gc_on": op.gc_on}
    try:
        cands = candidates_for(op, run.impls, state, wl)
        if op.gc_on:
            gc.unfreeze()
        tick = functools.partial(run.progress.advance, unit)
        times = timing.measure(cands, repeats_for(workload, run.args), run.target_s, op.gc_on, tick=tick)
        row["times"] = {key: times[key].to_json() if key in times else None for key in report.COLUMNS}
        row["stmts"] = {c.key: c.stmt for c in cands}
    except Exception as exc:  # noqa: BLE001 - one broken cell must not lose the whole run
        run.problems.append(f"{workload.name}: {op.name}: raised {type(exc).__name__}: {exc}")
        row["times"] = dict.fromkeys(report.COLUMNS)
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        gc.freeze()
    row["ratios"] = report.ratios(row)
    return row


def _measure_memory(run: Run, workload: Workload, op: Op, state: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Peak memory of one ``make_batch`` call per implementation, each in a forked child."""
    out = {}
    for impl in run.impls:
        st = state[impl.key]
        make_batch = functools.partial(st["mt"].make_batch, st["a"], st["bs"])
        out[impl.key] = memory.peak_memory(make_batch, large=workload.tensors >= 1_000_000)
        run.progress.advance(MEMORY_UNITS * _unit_weight(workload, op, run.target_s))
    return out


def _run_scaling(run: Run) -> dict[str, Any] | None:
    if not run.args.scaling or run.fast.stand_in:
        return None
    run.progress.set_label("scaling: 10k/100k/1M tensors, one process each")
    try:
        return scaling.run(run.args.mode, run.args.threads)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        run.problems.append(f"scaling: raised {type(exc).__name__}: {exc}")
        return None
    finally:
        run.progress.advance(scaling.SECONDS[run.args.mode])


def _write_results(out: Path, result: dict[str, Any]) -> str | None:
    """``bench.json``, ``speedups.png`` and ``results.md`` in `out`; why the chart was not drawn, or None."""
    report.write_json(out / "bench.json", result)
    chart_error = report.write_chart(out / "speedups.png", result)
    (out / "results.md").write_text(report.markdown(result))
    return chart_error


def _print_summary(run: Run, result: dict[str, Any], chart_error: str | None) -> None:
    args, fast, out = run.args, run.fast, run.args.out
    print()
    if fast.stand_in:
        print("NOTE: the reference stands in for aitune_fast (harness test); the ratios mean nothing.\n")
    elif info := runtime_info(fast):
        print(f"aitune_fast tensor reader: {info['tensor_reader']} (torch {info['torch']}, Python {info['python']})\n")
    print(report.time_table(run.rows))
    if trt := result["meta"].get("aitune_tuned_tensorrt"):
        print(f"tuned rows: AITune's TorchEager backend; tensorrt: {trt}")
    mem = report.memory_table(run.rows)
    if mem:
        print("\nmake_batch peak memory (one call, forked child; RSS includes tensor storage):\n")
        print(mem)
    if scaling_result := result.get("scaling"):
        print("\naitune_fast per tensor by size (fresh process per size, caches flushed before each call):\n")
        print(report.scaling_table(scaling_result))
        print(report.fault_note(scaling_result))
    big = any(WORKLOADS[name].tensors >= 1_000_000 for name in args.workload_names)
    print(
        "\nratios: baseline time / aitune_fast time (above 1x: aitune_fast is faster); "
        f"median per call of {args.repeats} interleaved repeats"
        + (" (3 on scale_1m)" if big and args.repeats > 3 else "")
    )
    print(f"results: {out / 'bench.json'}, {out / 'results.md'}" + ("" if chart_error else f", {out / 'speedups.png'}"))
    if chart_error:
        print(f"no chart: {chart_error}")


def _report_problems(problems: list[str]) -> int:
    if not problems:
        return 0
    print("\nPROBLEMS (the implementations disagree or failed; see bench.json):", file=sys.stderr)
    for p in problems:
        print(f"  - {p}", file=sys.stderr)
    return 1
