"""The stubs as an editor shows them: every public member documented, and a user's code type-checking under
pyright's strict mode (basedpyright, which ships its own Node.js). That a stub's docstring is the run-time one,
word for word: test_docstrings.py."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import aitune_fast
import pytest

PACKAGE = Path(aitune_fast.__file__).parent
STUBS = sorted(PACKAGE.rglob("*.pyi"))
TYPING_DIR = Path(__file__).parent / "typing"


def module_of(stub: Path) -> str:
    parts = stub.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def public(name: str) -> bool:
    return not name.startswith("_")


def stub_members() -> list[tuple[str, str, ast.AST, Any]]:
    """(module, qualified name, stub node, run-time object or None) for every public class, function, method and
    property the stubs declare (an overloaded method counts once, by its first overload)."""
    members = []
    for stub in STUBS:
        module_name = module_of(stub)
        module = importlib.import_module(module_name)
        for node in ast.parse(stub.read_text()).body:
            if isinstance(node, ast.FunctionDef) and public(node.name):
                members.append((module_name, node.name, node, getattr(module, node.name, None)))
            if isinstance(node, ast.ClassDef) and public(node.name):
                cls = getattr(module, node.name, None)
                members.append((module_name, node.name, node, cls))
                seen = set()
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and public(item.name) and item.name not in seen:
                        seen.add(item.name)
                        attr = inspect.getattr_static(cls, item.name, None) if cls is not None else None
                        if isinstance(attr, (staticmethod, classmethod)):
                            attr = attr.__func__
                        members.append((module_name, f"{node.name}.{item.name}", item, attr))
    return members


MEMBERS = stub_members()
IDS = [f"{module}.{name}" for module, name, _, _ in MEMBERS]


def test_the_stubs_declare_the_public_classes():
    declared = {name for _, name, _, _ in MEMBERS}
    assert {"SampleMetadata", "ExactSampleMetadata", "Locator", "TensorSpec", "patch_aitune"} <= declared
    assert "SampleMetadata.update_max_batch_size" in declared


@pytest.mark.parametrize(("module", "name", "node", "runtime"), MEMBERS, ids=IDS)
def test_every_public_stub_member_has_a_docstring(module, name, node, runtime):
    assert ast.get_docstring(node), f"{module}.{name} has no docstring in its stub: editors show nothing for it"


def test_runtime_info_is_the_typed_dict():
    info = aitune_fast.runtime_info()
    hints = get_type_hints(aitune_fast.RuntimeInfo)
    assert get_type_hints(aitune_fast.runtime_info)["return"] is aitune_fast.RuntimeInfo
    assert list(info) == list(hints)
    assert info["tensor_reader"] in hints["tensor_reader"].__args__
    assert isinstance(info["tensor_readers_available"], list)


def basedpyright() -> str:
    found = shutil.which("basedpyright", path=str(Path(sys.executable).parent)) or shutil.which("basedpyright")
    if found is None:
        pytest.fail("basedpyright is not installed: run scripts/setup.sh (it installs the pinned linters)")
    return found


def test_a_users_code_type_checks_in_pyrights_strict_mode():
    result = subprocess.run(
        [basedpyright(), "--pythonpath", sys.executable, "-p", str(TYPING_DIR)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 errors" in result.stdout
