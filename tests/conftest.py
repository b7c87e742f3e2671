"""Fixtures for the differential (parity) tests: the reference ``aitune`` 0.6.0 against ``aitune_fast``.

``ref`` and ``fast`` are namespaces with the same attribute names (``sample_metadata``,
``exact_sample_metadata``, ``locator``, ``tensor_spec``, ``global_context``, ``config``, ``serialization``).
``config.config`` is the configuration object (``enable_transformers_integration``) in both.

With ``AITUNE_FAST_TESTS_AGAINST_REFERENCE=1`` the ``fast`` fixture is a second handle to the reference, which is
how the suite itself is validated while the extension is not built.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# Helpers every folder shares (``parity``, ``child``, ``impls``) live in ``support/``; each test folder keeps its own
# child scripts and scenario modules beside its tests (pytest puts a test's folder on sys.path).
sys.path.insert(0, str(TESTS_DIR / "support"))
if importlib.util.find_spec("aitune_fast") is None:
    sys.path.insert(0, str(TESTS_DIR.parent / "python"))

from impls import ref as _load_reference  # noqa: E402

AGAINST_REFERENCE = os.environ.get("AITUNE_FAST_TESTS_AGAINST_REFERENCE", "") == "1"
# the modules of aitune_fast the ``fast`` namespace holds under the reference's names
FAST_MODULES = ("sample_metadata", "exact_sample_metadata", "locator", "tensor_spec", "global_context")


def _load_fast() -> SimpleNamespace:
    if AGAINST_REFERENCE:
        return SimpleNamespace(**vars(_load_reference()))
    package = importlib.import_module("aitune_fast")
    modules = {name: importlib.import_module(f"aitune_fast.{name}") for name in FAST_MODULES}
    # the reference's ``config`` is a module whose ``config`` attribute is the object; mirror that shape
    return SimpleNamespace(**modules, config=SimpleNamespace(config=package.config), serialization=None)


@pytest.fixture(scope="session")
def ref() -> SimpleNamespace:
    """The reference implementation (``aitune`` 0.6.0)."""
    return _load_reference()


@pytest.fixture(scope="session")
def fast() -> SimpleNamespace:
    """``aitune_fast`` (or the reference again under AITUNE_FAST_TESTS_AGAINST_REFERENCE=1)."""
    return _load_fast()


@pytest.fixture(scope="session")
def impls(ref, fast) -> tuple[SimpleNamespace, SimpleNamespace]:
    """``(ref, fast)`` for tests that run the same code on both."""
    return ref, fast


def reset_global_state(ref: SimpleNamespace, fast: SimpleNamespace) -> None:
    """Clear the batch-size global context of both implementations."""
    for impl in (ref, fast):
        impl.global_context.global_context.clear()


@pytest.fixture(autouse=True)
def _isolate_global_state(ref, fast):
    """Every test starts and ends with empty global contexts and the default transformers integration flag."""
    saved = [(impl.config.config, impl.config.config.enable_transformers_integration) for impl in (ref, fast)]
    reset_global_state(ref, fast)
    yield
    reset_global_state(ref, fast)
    for cfg, value in saved:
        cfg.enable_transformers_integration = value


class TypeRegistry:
    """Registers / ignores the same class in both implementations and undoes it all on teardown."""

    def __init__(self, ref: SimpleNamespace, fast: SimpleNamespace) -> None:
        self._impls = (ref, fast)
        self._touched: list[type] = []

    def register(self, cls: type, only_tensors: bool = False) -> type:
        self._touched.append(cls)
        for impl in self._impls:
            impl.locator.Locator.register_user_type(cls, only_tensors=only_tensors)
        return cls

    def unregister(self, cls: type) -> None:
        for impl in self._impls:
            impl.locator.Locator.unregister_user_type(cls)

    def ignore(self, cls: type) -> type:
        self._touched.append(cls)
        for impl in self._impls:
            impl.locator.Locator.ignore_type(cls)
        return cls

    def unignore(self, cls: type) -> None:
        for impl in self._impls:
            impl.locator.Locator.unignore_type(cls)

    def cleanup(self) -> None:
        for cls in reversed(self._touched):
            for impl in self._impls:
                impl.locator.Locator.unregister_user_type(cls)
                impl.locator.Locator.unignore_type(cls)
        self._touched.clear()


@pytest.fixture
def registry(ref, fast):
    """A :class:`TypeRegistry`; every class it touched is unregistered and unignored in both afterwards."""
    reg = TypeRegistry(ref, fast)
    yield reg
    reg.cleanup()
