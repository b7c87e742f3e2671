"""The report: the tables (``tabulate``: plain text on stdout, Markdown in ``results.md``), ``bench.json`` and
``speedups.png``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tabulate import tabulate

from . import scaling

COLUMNS = ("reference", "optree", "floor", "aitune_fast")


def fmt_time(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "n/a"
    unit, scale = next((u, s) for u, s in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 0.0)) if seconds >= s)
    value = seconds / (scale or 1e-9)
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None or math.isnan(ratio):
        return "n/a"
    if ratio >= 100:
        return f"{ratio:.0f}x"
    return f"{ratio:.3g}x"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def median(row: dict[str, Any], key: str) -> float | None:
    timing = row["times"].get(key)
    return None if timing is None else timing["median_s"]


def ratios(row: dict[str, Any]) -> dict[str, float | None]:
    """Time of each column divided by aitune_fast's time (above 1: aitune_fast is faster)."""
    fast = median(row, "aitune_fast")
    out: dict[str, float | None] = {}
    for key in ("reference", "optree", "floor"):
        other = median(row, key)
        out[key] = None if other is None or not fast else other / fast
    return out


def _table(header: list[str], body: list[list[str]], left: int, fmt: str) -> str:
    """``body`` under ``header``, the first ``left`` columns aligned left and the rest right; ``fmt`` is a
    ``tabulate`` format: ``simple`` for the terminal, ``pipe`` for Markdown."""
    align = ["left"] * left + ["right"] * (len(header) - left)
    return tabulate(body, headers=header, tablefmt=fmt, colalign=align, disable_numparse=True)


def time_table(rows: list[dict[str, Any]], fmt: str = "simple") -> str:
    header = ["workload", "operation", *COLUMNS, "ref/fast", "optree/fast", "floor/fast"]
    body = []
    for row in rows:
        r = row["ratios"]
        body.append(
            [
                row["workload"],
                row["label"],
                *(fmt_time(median(row, key)) for key in COLUMNS),
                fmt_ratio(r["reference"]),
                fmt_ratio(r["optree"]),
                fmt_ratio(r["floor"]),
            ]
        )
    return _table(header, body, left=2, fmt=fmt)


def _memory_cells(workload: str, key: str, m: dict[str, Any], ref_rss: int | None) -> list[str]:
    if "error" in m:
        return [workload, key, f"error: {m['error']}", "", "", ""]
    ratio = ""
    if key == "aitune_fast" and ref_rss is not None and m.get("peak_rss_bytes"):
        ratio = fmt_ratio(ref_rss / m["peak_rss_bytes"])
    return [
        workload,
        key,
        fmt_bytes(m.get("peak_rss_bytes")),
        fmt_bytes(m.get("python_peak_bytes")),
        fmt_bytes(m.get("output_tensor_bytes")),
        ratio,
    ]


def memory_table(rows: list[dict[str, Any]], fmt: str = "simple") -> str:
    """Peak memory of ``make_batch`` per implementation ("" when no row measured it)."""
    header = ["workload", "implementation", "peak RSS", "Python heap peak", "output tensors", "ref/fast RSS"]
    body = []
    for row in rows:
        mem = row.get("memory")
        if not mem:
            continue
        ref_rss = (mem.get("reference") or {}).get("peak_rss_bytes")
        body += [
            _memory_cells(row["workload"], key, mem.get(key) or {}, ref_rss) for key in ("reference", "aitune_fast")
        ]
    return _table(header, body, left=2, fmt=fmt) if body else ""


def scaling_table(result: dict[str, Any], fmt: str = "simple") -> str:
    """aitune_fast per tensor at each size of a scaling run (``scaling.run``), and the ratio to the smallest."""
    sizes = result["sizes"]
    header = (
        ["operation"]
        + [f"{s['tensors']:,}" for s in sizes]
        + [f"x at {s['tensors']:,} (less faults)" for s in sizes[1:]]
    )
    body = []
    for name in scaling.OPS:
        cells = [s["ops"][name] for s in sizes]
        body.append(
            [name]
            + [f"{c['ns_per_tensor']:.0f} ns ({c['minor_faults']:,.0f} faults)" for c in cells]
            + [f"{c['vs_smallest']:.2f}x ({c['vs_smallest_less_faults']:.2f}x)" for c in cells[1:]]
        )
    return _table(header, body, left=1, fmt=fmt)


def fault_note(result: dict[str, Any]) -> str:
    """What one page fault cost in each size's process of a scaling run."""
    costs = ", ".join(f"{s['fault_s'] * 1e6:.1f} µs at {s['tensors']:,}" for s in result["sizes"])
    return f"one minor page fault (a fresh 64 MiB mapping touched page by page): {costs}"


def markdown(report: dict[str, Any]) -> str:
    """The run as Markdown: a candidate for ``benches/RESULTS.md`` (copy it there to publish)."""
    meta = report["meta"]
    parts = [
        "# Benchmark results",
        "",
        f"{meta['aitune_fast']} against the reference (aitune {meta['reference_version']}), "
        f"`python -m aitune_fast.bench` in {meta['mode']} mode, {meta['date']}"
        + (f", commit {meta['git_commit']}" if meta.get("git_commit") else "")
        + ".",
        "",
        f"Machine: {meta['platform']}, {meta.get('cpu') or meta['processor']}, {meta['cpu_count']} CPUs; "
        f"{meta['python']}, "
        f"torch {meta['torch']} ({meta['torch_threads']} intra-op thread(s)).",
        "",
        *(
            [
                f"aitune_fast tensor reader: `{info['tensor_reader']}` (available here: "
                f"{', '.join(info.get('tensor_readers_available', []))}); `aitune_fast.runtime_info()`: `{info}`.",
                "",
            ]
            if (info := meta.get("runtime_info"))
            else []
        ),
        f"Median per call of {meta['repeats']} interleaved repeats (at most 3 on scale_1m), loops of about "
        f"{meta['target_ms']:g} ms, collector paused except in the `(gc on)` row. Ratios are baseline time / "
        "aitune_fast time: above 1x, aitune_fast is faster. Method: `benches/README.md`.",
        "",
        time_table(report["rows"], "pipe"),
    ]
    if trt := meta.get("aitune_tuned_tensorrt"):
        parts += ["", f"The `tuned` rows: AITune-tuned modules on AITune's TorchEager backend; `tensorrt`: {trt}."]
    mem = memory_table(report["rows"], "pipe")
    if mem:
        parts += ["", "## make_batch peak memory", "", "One call, in a forked child; RSS includes tensor storage.", ""]
        parts.append(mem)
    if report.get("scaling"):
        parts += [
            "",
            "## Scaling",
            "",
            "aitune_fast's cost per tensor on `large_graph` at each size: a fresh process per size, each call "
            "timed alone after a 64 MiB buffer is written (caches flushed), median per call; minor page "
            "faults per call in brackets. Ratios against the smallest size (`benches/README.md`).",
            "",
            scaling_table(report["scaling"], "pipe"),
            "",
            fault_note(report["scaling"]) + ".",
        ]
    if report.get("problems"):
        parts += ["", "## Problems", ""] + [f"- {p}" for p in report["problems"]]
    if meta.get("stand_in"):
        parts.insert(2, "**Harness test: the reference stood in for aitune_fast; the ratios mean nothing.**\n")
    return "\n".join(parts) + "\n"


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")


def write_chart(path: Path, report: dict[str, Any]) -> str | None:
    """Horizontal bars of reference/aitune_fast per operation, one panel per workload (log scale).

    Returns None on success, else why no chart was drawn.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f'matplotlib is not available ({exc}): `pip install "aitune_fast[bench]"` brings it'

    rows = [r for r in report["rows"] if r["ratios"]["reference"]]
    if not rows:
        return "no row has both a reference and an aitune_fast time"
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    by_workload = {w: [r for r in rows if r["workload"] == w] for w in workloads}
    all_values = [v for r in rows for v in (r["ratios"]["reference"], r["ratios"]["optree"]) if v]
    lo, hi = min(all_values + [1.0]), max(all_values + [1.0])
    # room on the left for the labels of slow-downs, on the right for those of speed-ups
    xmin, xmax = 10 ** math.floor(math.log10(lo) - 0.3), 10 ** math.ceil(math.log10(hi) + 0.3)

    heights = [max(1.0, 0.3 * len(by_workload[w]) + 0.45) for w in workloads]
    fig, axes = plt.subplots(
        len(workloads),
        1,
        figsize=(9, sum(heights) + 1.3),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    ref_color, optree_color = "#2a7ab9", "#e08a2b"
    for ax, workload in zip(axes[:, 0], workloads, strict=True):
        wrows = by_workload[workload]
        labels = [r["label"] for r in wrows]
        ys = list(range(len(wrows)))[::-1]
        ref = [r["ratios"]["reference"] for r in wrows]
        opt = [r["ratios"]["optree"] for r in wrows]
        # bars grow from 1x: right for a speed-up, left for a slow-down
        bars = ax.barh(ys, [v - 1.0 for v in ref], height=0.62, color=ref_color, left=1.0)
        for bar, value in zip(bars, ref, strict=True):
            x, align = (value * 1.06, "left") if value >= 1 else (value / 1.06, "right")
            ax.text(x, bar.get_y() + bar.get_height() / 2, fmt_ratio(value), va="center", ha=align, fontsize=8.5)
        for y, value in zip(ys, opt, strict=True):
            if value:
                ax.plot([value], [y], marker="D", color=optree_color, markersize=5, linestyle="none")
        ax.set_yticks(ys, labels, fontsize=8.5)
        ax.set_xscale("log")
        ax.set_xlim(xmin, xmax)
        ax.set_ylim(-0.6, len(wrows) - 0.4)
        ax.axvline(1.0, color="#555555", linewidth=1, linestyle="--")
        ax.set_title(workload, loc="left", fontsize=10, fontweight="bold")
        ax.grid(axis="x", which="major", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    axes[-1, 0].set_xlabel("speed-up (baseline time / aitune_fast time, log scale; right of the dashed line = faster)")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=ref_color),
        plt.Line2D([], [], marker="D", color=optree_color, linestyle="none"),
    ]
    fig.legend(
        handles,
        ["reference / aitune_fast", "optree / aitune_fast (traversal ops)"],
        loc="upper right",
        fontsize=8.5,
        frameon=False,
        ncol=2,
    )
    meta = report["meta"]
    title = f"aitune_fast speed-ups over the reference (aitune {meta['reference_version']})"
    if meta.get("stand_in"):
        title = "HARNESS TEST: the reference standing in for aitune_fast (ratios ~1x by design)"
    fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
    fig.text(
        0.01,
        0.005,
        f"median of {meta['repeats']} interleaved repeats per cell, collector paused except '(gc on)' rows; "
        f"{meta['python']}, torch {meta['torch']}, {meta.get('cpu') or meta['processor']}, {meta['cpu_count']} CPUs, "
        f"mode={meta['mode']}",
        fontsize=7.5,
        color="#555555",
    )
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
