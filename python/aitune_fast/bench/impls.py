"""The implementations under test: the reference (``aitune`` 0.6.0), ``aitune_fast``, and optree's registry."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

from .workloads import BatchEncoding, Cache, Layer

OPTREE_NAMESPACE = "aitune_fast.bench"
# what to run when a module the benchmark needs is missing
BENCH_EXTRA = 'pip install "aitune_fast[bench]"'


@dataclass(frozen=True)
class Impl:
    """One implementation of the SampleMetadata API, as the timed statements see it."""

    key: str  # "reference" or "aitune_fast": the column it fills
    label: str  # what the report calls it
    SampleMetadata: Any
    Locator: Any
    to_json_stmt: str  # the `to_json` operation's statement, with the metadata bound to `m`
    version: str
    stand_in: bool = False  # the reference standing in for aitune_fast (harness testing only)


@cache  # load_reference() is not idempotent: its stub packages lack __spec__ on a second call
def load_reference_impl() -> Impl:
    """The reference, loaded without TensorRT by ``aitune_fast._reference.load_reference``."""
    from importlib.metadata import PackageNotFoundError, version

    from aitune_fast._reference import load_reference

    try:
        ref = load_reference()
    except ModuleNotFoundError as exc:  # a module the reference imports (nvtx, tabulate), not aitune itself
        missing = (exc.name or "?").split(".")[0]
        raise ImportError(
            f"the reference (aitune) needs the module {missing!r}, which is not installed: run `{BENCH_EXTRA}` "
            "(the benchmark's extra brings what the reference's metadata modules import)"
        ) from exc
    try:
        ver = version("aitune")
    except PackageNotFoundError:  # pragma: no cover - load_reference would have failed first
        ver = "?"
    return Impl(
        key="reference",
        label=f"reference (aitune {ver})",
        SampleMetadata=ref.sample_metadata.SampleMetadata,
        Locator=ref.locator.Locator,
        to_json_stmt="dumps(m.to_json_dict())",
        version=ver,
    )


def load_fast_impl(fallback_reference: bool) -> Impl:
    """``aitune_fast``; with ``fallback_reference``, the reference stands in when it cannot be imported."""
    try:
        import aitune_fast

        sample_metadata, locator = aitune_fast.SampleMetadata, aitune_fast.Locator
    except (ImportError, AttributeError) as exc:
        if not fallback_reference:
            raise ImportError(
                f"aitune_fast is not importable ({exc}); run `bash scripts/setup.sh` to build it "
                "(or pass --impl-fallback-reference to test the harness with the reference standing in)"
            ) from exc
        ref = load_reference_impl()
        return Impl(
            key="aitune_fast",
            label="reference standing in for aitune_fast",
            SampleMetadata=ref.SampleMetadata,
            Locator=ref.Locator,
            to_json_stmt=ref.to_json_stmt,
            version=f"stand-in: aitune {ref.version}",
            stand_in=True,
        )
    has_to_json = callable(getattr(sample_metadata, "to_json", None))
    return Impl(
        key="aitune_fast",
        label=f"aitune_fast {getattr(aitune_fast, '__version__', '')}".strip(),
        SampleMetadata=sample_metadata,
        Locator=locator,
        to_json_stmt="m.to_json()" if has_to_json else "dumps(m.to_json_dict())",
        version=str(getattr(aitune_fast, "__version__", "?")),
    )


def register_user_types(*impls: Impl) -> None:
    """Register ``Cache`` and ``Layer`` with every implementation's Locator (``only_tensors=True``)."""
    for impl in impls:
        for cls in (Cache, Layer):
            impl.Locator.register_user_type(cls, only_tensors=True)


@cache  # one note per process
def load_optree() -> Any | None:
    """optree, or None when it is not installed (said once on stderr): its column is then skipped."""
    try:
        import optree
    except ImportError:
        print(
            f"note: optree is not installed: the optree baseline is skipped (`{BENCH_EXTRA}` brings it)",
            file=sys.stderr,
        )
        return None
    return optree


def register_optree() -> None:
    """Register ``Cache``, ``Layer`` and ``BatchEncoding`` as optree pytree nodes (in our own namespace;
    idempotent)."""
    optree = load_optree()
    if optree is None:
        return

    def unflatten_layer(_: Any, children: Any) -> Layer:
        return Layer(*children)

    def unflatten_cache(_: Any, children: Any) -> Cache:
        return Cache(*children)

    def flatten_encoding(x: BatchEncoding) -> tuple:
        keys = tuple(x.data)
        return tuple(x.data.values()), keys, keys

    def unflatten_encoding(keys: Any, children: Any) -> BatchEncoding:
        return BatchEncoding(dict(zip(keys, children, strict=True)))

    nodes = (
        (BatchEncoding, flatten_encoding, unflatten_encoding),
        (Layer, lambda x: ((x.keys, x.values), None, ("keys", "values")), unflatten_layer),
        (Cache, lambda x: ((x.layers,), None, ("layers",)), unflatten_cache),
    )
    for cls, flatten, unflatten in nodes:
        try:
            optree.register_pytree_node(cls, flatten, unflatten, namespace=OPTREE_NAMESPACE)
        except ValueError:
            pass  # already registered in this process
