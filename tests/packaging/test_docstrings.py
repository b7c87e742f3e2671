"""One text per docstring: what ``help()`` shows is what the documentation site shows.

The site renders the Rust classes from the stubs (``_core.pyi``) and the Python functions from their sources;
``help()`` reads the compiled docstrings (from the Rust ``///`` comments, written from the stubs by
``scripts/sync_docstrings.py``). Every public member of a stub has a docstring, and the runtime object's
``inspect.getdoc`` is that same text. No docstring a user reads carries reST markup, which neither the site
(Google style, Markdown) nor ``help()`` renders.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import aitune_fast
import aitune_fast.patch
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "aitune_fast"
STUBS = {"aitune_fast._core": PACKAGE / "_core.pyi", "aitune_fast.patch": PACKAGE / "patch" / "__init__.pyi"}
REST = re.compile(r":(?:class|func|meth|attr|mod|exc|obj|data|ref):`|::$", re.M)


def _public(name: str) -> bool:
    return not name.startswith("_")


def _stub_docstrings() -> dict[str, str | None]:
    """Qualified name -> docstring of every public class, function, method and property in the stubs."""
    out: dict[str, str | None] = {}
    for module, path in STUBS.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and _public(node.name):
                out[f"{module}.{node.name}"] = ast.get_docstring(node)
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and _public(item.name):
                            out[f"{module}.{node.name}.{item.name}"] = ast.get_docstring(item)
    return out


STUB_DOCS = _stub_docstrings()


def _resolve(qualified: str) -> object:
    module = next(m for m in STUBS if qualified.startswith(m + "."))
    obj: object = importlib.import_module(module)
    for part in qualified[len(module) + 1 :].split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
    return obj


def test_the_stubs_cover_every_documented_member():
    # the four classes' public members, the two reader functions, the patch's three functions and its exception
    assert len(STUB_DOCS) >= 50, sorted(STUB_DOCS)  # 56 when this was written
    assert not [name for name, doc in STUB_DOCS.items() if not doc], "a public member without a docstring"


@pytest.mark.parametrize("name", sorted(STUB_DOCS))
def test_help_shows_the_stubs_docstring(name):
    assert inspect.getdoc(_resolve(name)) == STUB_DOCS[name]


def test_the_rust_comments_are_written_from_the_stubs():
    """The same check without a build: the Rust `///` comments hold the stubs' text (sync_docstrings.py)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync_docstrings.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _user_docstrings() -> dict[str, str]:
    """Every docstring a user reads: the public names of aitune_fast and aitune_fast.patch, and their public
    members (methods, properties, enum classes' own docs)."""
    out: dict[str, str] = {}
    for module in (aitune_fast, aitune_fast.patch):
        for name in module.__all__:
            obj = getattr(module, name)
            qualified = f"{module.__name__}.{name}"
            if doc := inspect.getdoc(obj):
                out[qualified] = doc
            if isinstance(obj, type) and not issubclass(obj, enum.Enum):
                for member, value in vars(obj).items():
                    if _public(member) and (doc := getattr(value, "__doc__", None)):
                        out[f"{qualified}.{member}"] = inspect.cleandoc(doc)
    return out


USER_DOCS = _user_docstrings()


@pytest.mark.parametrize("name", sorted(USER_DOCS))
def test_no_rest_markup_in_what_users_read(name):
    assert not REST.findall(USER_DOCS[name]), f"{name}: reST markup ({REST.findall(USER_DOCS[name])})"


@pytest.mark.parametrize("name", sorted(n for n, d in STUB_DOCS.items() if d))
def test_no_rest_markup_in_the_stubs(name):
    assert not REST.findall(STUB_DOCS[name] or ""), name
