"""One source for the Rust classes' docstrings: the stubs (``python/aitune_fast/_core.pyi``).

The documentation site is rendered from the stubs, ``help()`` shows the compiled docstrings, which pyo3 takes from
the Rust ``///`` comments. This writes each public docstring of the stubs into the Rust comment it becomes:

    python scripts/sync_docstrings.py            # rewrite the Rust doc comments from the stubs
    python scripts/sync_docstrings.py --check    # exit 1, naming them, when any differs (nothing written)

Covered: the public classes of ``_core`` (their own docstring, their public methods and properties) and its public
functions. ``tests/packaging/test_docstrings.py`` checks the result in the built extension (``inspect.getdoc``
against the stub's docstring), for these and for the patch's stub.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "aitune_fast" / "_core.pyi"
# class -> (the file of its `#[pyclass]` struct, the file of its `#[pymethods]` block)
CLASSES = {
    "Locator": ("rust/paths/locator.rs", "rust/api/locator.rs"),
    "TensorSpec": ("rust/tensor_spec/class.rs", "rust/tensor_spec/class.rs"),
    "SampleMetadata": ("rust/metadata/sample.rs", "rust/api/sample_metadata.rs"),
    "ExactSampleMetadata": ("rust/metadata/exact.rs", "rust/metadata/exact.rs"),
}
FUNCTIONS_FILE = "rust/reader/mod.rs"  # the public `#[pyfunction]`s: tensor_reader, tensor_readers_available


def stub_docs() -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, str]]:
    """The stub's public docstrings: (class docs, class -> {member: doc}, function -> doc)."""
    tree = ast.parse(STUB.read_text())
    classes: dict[str, str] = {}
    members: dict[str, dict[str, str]] = {}
    functions: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in CLASSES:
            classes[node.name] = ast.get_docstring(node) or ""
            members[node.name] = {
                item.name: doc
                for item in node.body
                if isinstance(item, ast.FunctionDef)
                and not item.name.startswith("_")
                and (doc := ast.get_docstring(item)) is not None
            }
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            if (doc := ast.get_docstring(node)) is not None:
                functions[node.name] = doc
    return classes, members, functions


def doc_lines(doc: str, indent: str) -> list[str]:
    return [f"{indent}///{' ' + line if line else ''}\n" for line in doc.splitlines()]


def block_range(lines: list[str], start: int, end: int) -> tuple[int, int]:
    """The `#[pymethods]` block that begins at or after line `start` (a pyclass's methods): (first, last) line."""
    for i in range(start, end):
        if lines[i].startswith("#[pymethods]"):
            for j in range(i + 1, end):
                if lines[j].startswith("}"):
                    return i, j
    raise SystemExit("no #[pymethods] block found")


def replace_doc(lines: list[str], item: int, doc: str) -> bool:
    """Replace the `///` lines of the item at line `item` (its `fn` or `#[pyclass` line) with `doc`, kept before
    its attributes; True when that changed anything."""
    top = item
    while top > 0 and re.match(r"\s*(///|#\[)", lines[top - 1]):
        top -= 1
    indent = re.match(r"\s*", lines[item]).group(0)
    attrs = [line for line in lines[top:item] if not line.lstrip().startswith("///")]
    new = doc_lines(doc, indent) + attrs
    if lines[top:item] == new:
        return False
    lines[top:item] = new
    return True


def find_item(lines: list[str], lo: int, hi: int, name: str) -> int:
    """The line of the `fn` named `name` in Python (by its own name, or `#[pyo3(name = "...")]`) in lines lo..hi."""
    for i in range(lo, hi):
        match = re.match(r"\s*(?:pub )?fn (\w+)", lines[i])
        if not match:
            continue
        if match[1] == name:
            return i
        above = i
        while above > lo and re.match(r"\s*(///|#\[)", lines[above - 1]):
            above -= 1
            if re.search(rf'name = "{name}"', lines[above]):
                return i
    raise SystemExit(f"no fn for {name} found")


def sync(check: bool) -> list[str]:
    """Rewrite (or, with `check`, only compare) the Rust doc comments; the names that differed."""
    classes, members, functions = stub_docs()
    changed: list[str] = []
    files: dict[str, list[str]] = {}

    def text(rel: str) -> list[str]:
        return files.setdefault(rel, (ROOT / rel).read_text().splitlines(keepends=True))

    for cls, (struct_file, methods_file) in CLASSES.items():
        lines = text(struct_file)
        item = next(
            i
            for i, line in enumerate(lines)
            if line.startswith("#[pyclass") and f'name = "{cls}"' in "".join(lines[i : i + 8])
        )
        if replace_doc(lines, item, classes[cls]):
            changed.append(cls)
        lines = text(methods_file)
        first = next(
            i
            for i, line in enumerate(lines)
            if re.match(rf"impl {cls} \{{", line) and lines[i - 1].startswith("#[pymethods]")
        )
        for name, doc in members[cls].items():
            lo, hi = block_range(lines, first - 1, len(lines))  # again: each replacement moves the lines below it
            if replace_doc(lines, find_item(lines, lo, hi, name), doc):
                changed.append(f"{cls}.{name}")
    lines = text(FUNCTIONS_FILE)
    for name, doc in functions.items():
        if replace_doc(lines, find_item(lines, 0, len(lines), name), doc):
            changed.append(name)
    if not check:
        for rel, lines in files.items():
            (ROOT / rel).write_text("".join(lines))
    return changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 when any Rust docstring differs")
    args = ap.parse_args()
    changed = sync(args.check)
    for name in changed:
        print(f"{'differs' if args.check else 'written'}: {name}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
