"""Every name the native call path reads of AITune's, torch's or wrapt's objects is listed once, in
``_names.NATIVE_NAMES``, and each library installed here still defines its names: a new release that renames one
fails here, not in a user's call."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
from aitune_fast.patch import _names

RUST = Path(__file__).resolve().parents[2] / "rust" / "patch"


def _read_by_rust() -> set[str]:
    """The names the Rust of the patch interns (every name it reads from an object or a namespace)."""
    names: set[str] = set()
    for path in RUST.glob("*.rs"):
        names |= set(re.findall(r'intern!\(\s*py,\s*"([^"]+)"\s*\)', path.read_text()))
    return names


def test_rust_reads_exactly_the_listed_names():
    listed = [name for names in _names.NATIVE_NAMES.values() for name in names]
    assert len(listed) == len(set(listed)), "a name listed twice"
    read = _read_by_rust()
    assert len(read) >= 40, "is the scan of rust/patch/ broken?"
    assert sorted(read - set(listed)) == [], "read by the Rust, not listed in _names.NATIVE_NAMES"
    assert sorted(set(listed) - read) == [], "listed in _names.NATIVE_NAMES, read by no Rust"


def _source_of(module: str) -> str | None:
    """The installed source of `module` (read from its distribution's files: nothing is imported), or None."""
    top = module.split(".")[0]
    try:
        distribution = importlib.metadata.distribution(top)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(distribution.locate_file(module.replace(".", "/") + ".py")))
    return path.read_text() if path.is_file() else None


@pytest.mark.parametrize("module", sorted(name for name in _names.NATIVE_NAMES if name))
def test_each_library_still_has_its_names(module):
    source = _source_of(module)
    if source is None:
        pytest.skip(f"{module} is not installed here")
    missing = [name for name in _names.NATIVE_NAMES[module] if not re.search(rf"\b{re.escape(name)}\b", source)]
    assert missing == [], f"{module} no longer names {missing}"


def test_a_missing_name_is_found_missing(monkeypatch):
    """The check above can fail: a name a library does not define is reported."""
    monkeypatch.setitem(_names.NATIVE_NAMES, _names.GLOBAL_CONTEXT, ("_lock", "_no_such_name"))
    with pytest.raises(AssertionError, match="_no_such_name"):
        test_each_library_still_has_its_names(_names.GLOBAL_CONTEXT)
