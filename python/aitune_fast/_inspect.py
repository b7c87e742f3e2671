"""``python -m aitune_fast inspect PATH``: what a checkpoint saved by AITune serves, read without running its code.

AITune's own loader reads a checkpoint with ``torch.load(weights_only=False)``, which runs whatever code the pickle
names. This reader:

* opens the file as a zip first (a ``.ait`` checkpoint holding ``state_dict.pt``, that file itself, or a folder
  holding it), and refuses a pickle record larger than :data:`MAX_PICKLE_BYTES`;
* reads it with ``torch.load(weights_only=True, map_location="meta")``: torch's restricted unpickler, which builds
  only torch's plain types and the allow-list here (AITune's metadata classes under their names, rebuilt as
  aitune_fast's, whose ``__setstate__`` checks the state; AITune's small value classes as inert stand-ins), and
  reads no tensor data (weights stay on the meta device). Anything else is refused, naming it, before it runs;
* reads each graph's key, which AITune stores as pickled bytes, with aitune_fast's restricted reader
  (``SampleMetadata.from_dict``).

Nothing is imported because the file names it, and AITune itself is never imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path, PosixPath
from typing import IO, Any

__all__ = ["CheckpointError", "inspect_checkpoint", "main"]

MAX_PICKLE_BYTES = 256 * 1024 * 1024  # a state dict's pickle record (tensor data lies apart and is never read)
PROGRESS_BYTES = 64 * 1024 * 1024  # files at least this large get a progress line on stderr
STATE_DICT_FILE = "state_dict.pt"  # what AITune's checkpoint folder and .ait zip hold
_LEVELS = ("short", "medium", "full")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read safely: refused, truncated, or not one AITune writes."""


class _Opaque:
    """Stands in for an AITune value class (``ArtifactPath``, ``BatchDim``, ``DynamicDim``): keeps its state as
    data; runs nothing."""

    kind = "object"

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return (
            f"{self.kind}({', '.join(map(repr, self.args))}{', ' if self.args and self.state else ''}"
            + (repr(self.state) if self.state else "")
            + ")"
        )


def _opaque(name: str) -> type:
    return type(name, (_Opaque,), {"kind": name})


def _allowed() -> list[Any]:
    """The names a checkpoint may use beyond torch's own, as ``(class, "module.name")`` pairs."""
    from aitune_fast import ExactSampleMetadata, Locator, ObjectType, SampleMetadata, TensorSpec

    module = "aitune.torch.module."
    ours: list[tuple[Any, str]] = [
        (SampleMetadata, module + "sample_metadata.SampleMetadata"),
        (ExactSampleMetadata, module + "exact_sample_metadata.ExactSampleMetadata"),
        (Locator, module + "locator.Locator"),
        (ObjectType, module + "locator.ObjectType"),
        (TensorSpec, module + "tensor_spec.TensorSpec"),
    ]
    stand_ins = [
        (_opaque("ArtifactPath"), "aitune.torch.checkpoint.artifact.ArtifactPath"),
        (_opaque("BatchDim"), "aitune.torch.dynamic_shapes.BatchDim"),
        (_opaque("DynamicDim"), "aitune.torch.dynamic_shapes.DynamicDim"),
    ]
    return [*ours, *stand_ins, PosixPath]


# ---------------------------------------------------------------------------------------------- reading


def _open_state_dict(path: Path) -> tuple[IO[bytes], int, str, list[Any]]:
    """The state dict file as a seekable binary stream, its size, what it is, and what to close afterwards."""
    if path.is_dir():
        path = path / STATE_DICT_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (expected a .ait checkpoint, its folder or {STATE_DICT_FILE})")
    outer = _zip(path, path.name)
    names = outer.namelist()
    if STATE_DICT_FILE in names:  # a .ait: the state dict is a member
        info = outer.getinfo(STATE_DICT_FILE)
        stream: IO[bytes] = outer.open(info)
        _check_torch_zip(_zip(stream, f"{path.name}:{STATE_DICT_FILE}"), f"{path.name}:{STATE_DICT_FILE}")
        stream.seek(0)
        return stream, info.file_size, f"{path.name}:{STATE_DICT_FILE}", [stream, outer]
    _check_torch_zip(outer, path.name)
    outer.close()
    stream = path.open("rb")
    return stream, path.stat().st_size, path.name, [stream]


def _zip(source: Any, what: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise CheckpointError(
            f"{what}: not a readable zip (truncated, or not a checkpoint AITune writes): {exc}"
        ) from None


def _check_torch_zip(archive: zipfile.ZipFile, what: str) -> None:
    """A torch zip checkpoint: one pickle record (``<folder>/data.pkl``), not larger than the limit."""
    records = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
    if len(records) != 1:
        raise CheckpointError(f"{what}: not a torch checkpoint (it holds {len(records)} data.pkl records, not one)")
    if records[0].file_size > MAX_PICKLE_BYTES:
        raise CheckpointError(
            f"{what}: its pickle record is {records[0].file_size} bytes, over the limit of {MAX_PICKLE_BYTES}"
        )


def load_state_dict(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """The checkpoint's state dict, read weights-only (tensors on the meta device), and what was read."""
    import torch

    stream, size, what, opened = _open_state_dict(Path(path))
    try:
        if size >= PROGRESS_BYTES:
            print(f"aitune_fast inspect: reading {what} ({size / 2**20:.0f} MiB)...", file=sys.stderr, flush=True)
        with torch.serialization.safe_globals(_allowed()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols and the like: the error says enough
            return torch.load(stream, weights_only=True, map_location="meta"), what
    except Exception as exc:  # noqa: BLE001 - torch's reader raises many kinds; each becomes a clear refusal
        raise CheckpointError(_refusal(what, exc)) from None
    finally:
        for item in opened:
            item.close()


_GLOBAL = re.compile(r"GLOBAL (\S+?)(?: was| whose|[,.]?\s|$)")


def _refusal(what: str, exc: BaseException) -> str:
    """Why torch's restricted reader stopped, in one line."""
    text = str(exc)
    named = _GLOBAL.search(text)
    if named:
        return f"{what}: refused: it names {named.group(1)}, which inspect does not load (nothing from the file ran)"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(_TORCH_BOILERPLATE)]
    return f"{what}: not a readable checkpoint: {type(exc).__name__}: {(lines or [''])[0][:300]}"


# the lines torch's weights-only errors wrap the reason in
_TORCH_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


# ---------------------------------------------------------------------------------------------- what it holds


@dataclasses.dataclass
class Graph:
    """One tuned graph: its key and backend."""

    key: Any  # aitune_fast's SampleMetadata
    backend: str


@dataclasses.dataclass
class TunedEntry:
    """One tuned module found in a state dict."""

    where: str  # its place in the state dict ("" for the top)
    name: str
    check_graph: Any
    parameters: list[str]
    graphs: list[Graph]


def tuned_entries(state: Any) -> Iterator[TunedEntry]:
    """Every tuned module the state dict holds (dicts with ``backends`` and ``forward_signature``), in order."""
    for where, value in _dicts(state, ""):
        if isinstance(value.get("backends"), list) and "forward_signature" in value:
            yield _entry(where, value)


def _dicts(value: Any, where: str) -> Iterator[tuple[str, dict]]:
    stack = [(where, value)]
    while stack:
        place, item = stack.pop()
        if isinstance(item, dict):
            yield place, item
            children = [(f"{place}.{k}" if place else str(k), v) for k, v in item.items() if isinstance(v, dict)]
            stack.extend(reversed(children))


def _entry(where: str, tuned: dict) -> TunedEntry:
    graphs = []
    for index, pair in enumerate(tuned["backends"]):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise CheckpointError(f"{where or 'top'}: backend {index} is not a (key, backend) pair")
        graphs.append(Graph(_key(pair[0], where, index), _backend(pair[1])))
    signature = tuned.get("forward_signature")
    parameters = signature.get("parameters", []) if isinstance(signature, dict) else []
    return TunedEntry(
        where=where.rpartition(".")[0] if where.endswith("tuned_module") else where,
        name=str(tuned.get("module_name", "Unknown")),
        check_graph=tuned.get("check_graph"),
        parameters=[str(p.get("name")) for p in parameters if isinstance(p, dict)],
        graphs=graphs,
    )


def _key(data: Any, where: str, index: int) -> Any:
    from aitune_fast import SampleMetadata

    if isinstance(data, SampleMetadata):
        return data
    if not isinstance(data, dict):
        raise CheckpointError(f"{where or 'top'}: graph {index}'s key is a {type(data).__name__}, not a dict")
    try:
        return SampleMetadata.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where or 'top'}: graph {index}'s key refused: {exc}") from None


def _backend(data: Any) -> str:
    """A backend by type and config: ``TorchEagerBackend(autocast_enabled=False, ...)``."""
    if not isinstance(data, dict):
        return type(data).__name__
    config = data.get("config")
    fields = ", ".join(f"{k}={v!r}" for k, v in config.items()) if isinstance(config, dict) else ""
    return f"{data.get('type', '?')}({fields})"


# ---------------------------------------------------------------------------------------------- output


def axes(key: Any) -> list[dict[str, Any]]:
    """The key's dynamic and batch axes: path, axis, kind and the min/max seen."""
    found = []
    for locator, spec in key.tensor_data:
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str):
                kind = "batch" if dim.startswith("batch") else "dynamic"
                found.append(
                    {
                        "path": locator.display_path,
                        "axis": axis,
                        "kind": kind,
                        "min": spec.min_shape[axis],
                        "max": spec.max_shape[axis],
                    }
                )
    return found


def _level(name: str) -> Any:
    from aitune_fast import InfoLevel

    return InfoLevel[name.upper()]


def entry_dict(entry: TunedEntry, level: str) -> dict[str, Any]:
    """A tuned module as plain data."""
    return {
        "where": entry.where,
        "name": entry.name,
        "check_graph": entry.check_graph,
        "parameters": entry.parameters,
        "graphs": [
            {
                "index": index,
                "backend": graph.backend,
                "llm_phase": graph.key.llm_phase,
                "strict": graph.key.strict,
                "tensors": len(graph.key.tensor_data),
                "axes": axes(graph.key),
                "metadata": graph.key.describe(_level(level)),
            }
            for index, graph in enumerate(entry.graphs)
        ],
    }


def entry_text(entry: TunedEntry, level: str) -> str:
    """A tuned module as text."""
    data = entry_dict(entry, level)
    lines = [
        f"tuned module {entry.name!r} (at {entry.where or 'the top'}): {len(entry.graphs)} graph(s), "
        f"check_graph={entry.check_graph}, forward({', '.join(entry.parameters)})"
    ]
    for graph in data["graphs"]:
        phase = f", LLM phase {graph['llm_phase']}" if graph["llm_phase"] else ""
        lines.append(f"  graph #{graph['index']}: {graph['tensors']} tensors{phase}; backend {graph['backend']}")
        for axis in graph["axes"]:
            lines.append(f"    {axis['kind']} axis {axis['path']}[{axis['axis']}]: {axis['min']}..{axis['max']}")
        lines.extend("    " + line for line in graph["metadata"].rstrip("\n").splitlines())
    return "\n".join(lines)


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[str, list[TunedEntry]]:
    """What was read at `path`, and the tuned modules it holds."""
    state, what = load_state_dict(path)
    return what, list(tuned_entries(state))


def inspect_checkpoint(path: str | os.PathLike[str], level: str = "short") -> dict[str, Any]:
    """What the checkpoint at `path` serves, as plain data: ``{"checkpoint": ..., "modules": [...]}``, each
    graph's metadata described at `level` (``short``, ``medium``, ``full``). Raises ``CheckpointError`` for a
    file it refuses or cannot read."""
    if level not in _LEVELS:
        raise ValueError(f"level must be one of {_LEVELS}, not {level!r}")
    what, entries = read_checkpoint(path)
    return {"checkpoint": what, "modules": [entry_dict(e, level) for e in entries]}


def main(argv: list[str] | None = None) -> int:
    """``inspect PATH [--json] [--level short|medium|full]``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m aitune_fast inspect", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a .ait checkpoint, its folder, or its state_dict.pt")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--level", choices=_LEVELS, default="short", help="how much of each graph's metadata")
    options = parser.parse_args(argv)
    try:
        what, entries = read_checkpoint(options.path)
    except CheckpointError as exc:
        print(f"aitune_fast inspect: error: {exc}", file=sys.stderr)
        return 2
    if options.json:
        found = {"checkpoint": what, "modules": [entry_dict(e, options.level) for e in entries]}
        print(json.dumps(found, indent=2, default=str))
        return 0
    print(f"checkpoint {what}: {len(entries)} tuned module(s)")
    for entry in entries:
        print(entry_text(entry, options.level))
    return 0
