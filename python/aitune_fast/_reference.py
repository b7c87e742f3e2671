"""Load the reference implementation (``aitune`` 0.6.0) without importing TensorRT.

``aitune/torch/__init__.py`` pulls in TensorRT and half of the tuning stack, so the
parent packages are registered as empty stubs whose ``__path__`` points at the
installed sources; Python then imports only the leaf modules we ask for.  Used by
the differential tests and the benchmark, never by the library itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from types import SimpleNamespace

_PACKAGES = ("aitune", "aitune.utils", "aitune.torch", "aitune.torch.module")


def load_reference() -> SimpleNamespace:
    """Return the reference modules: ``sample_metadata``, ``locator``, ``tensor_spec``, ...

    Raises ImportError with instructions when ``aitune`` is not installed.
    """
    loaded = sys.modules.get("aitune")
    if loaded is not None and getattr(loaded, "__path__", None):
        root = list(loaded.__path__)[0]  # a stub from an earlier call, or the real package
    else:
        spec = importlib.util.find_spec("aitune")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(
                "the reference implementation (aitune 0.6.0) is not installed: run "
                "`pip install --no-deps aitune==0.6.0` (add --ignore-requires-python on Python 3.13)"
            )
        root = list(spec.submodule_search_locations)[0]
    for name in _PACKAGES:
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) is not None:
            if module is not None:
                continue  # the real package is already imported (a full aitune install)
            stub = types.ModuleType(name)
            stub.__path__ = [root + "/" + "/".join(name.split(".")[1:])] if "." in name else [root]
            sys.modules[name] = stub
    mod = importlib.import_module
    return SimpleNamespace(
        sample_metadata=mod("aitune.torch.module.sample_metadata"),
        exact_sample_metadata=mod("aitune.torch.module.exact_sample_metadata"),
        locator=mod("aitune.torch.module.locator"),
        tensor_spec=mod("aitune.torch.module.tensor_spec"),
        global_context=mod("aitune.global_context"),
        config=mod("aitune.torch.config"),
        serialization=mod("aitune.utils.serialization"),
    )
