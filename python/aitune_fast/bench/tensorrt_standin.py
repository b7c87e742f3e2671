"""NOT TensorRT: the stand-in for ``tensorrt`` that the ``aitune_tuned`` workload's child loads where TensorRT is
not installed.

AITune 0.6.0 imports ``tensorrt`` unconditionally (``import aitune.torch``), and TensorRT installs only where
NVIDIA's wheels do. The workload tunes its modules with AITune's TorchEager backend, which needs nothing of
TensorRT; this module only lets the import succeed. It defines the names AITune touches at import time (base
classes, enum-like namespaces) and nothing works: any TensorRT backend used with it fails, and the report says
that the stand-in ran. ``aitune_tuned`` loads this file under the name ``tensorrt``, in its child process only.
"""

STAND_IN_VERSION = "0.0.0+aitune-fast-bench-stand-in"  # no TensorRT release has it
__version__ = STAND_IN_VERSION
IS_AITUNE_FAST_STAND_IN = True


class _Placeholder:
    """A class usable as a base class or a namespace; it cannot do anything."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("tensorrt here is aitune_fast's benchmark stand-in, not TensorRT")


def _namespace(name: str, members: list[str]) -> type:
    return type(name, (), {m: f"{name}.{m}" for m in members})


class ILogger:
    """Base class AITune's TensorRT logger derives from."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


class IOutputAllocator:
    """Base class AITune's output allocator derives from."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


_SEVERITIES = ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"]
Logger = _namespace("Logger", _SEVERITIES)
Logger.Severity = _namespace("Severity", _SEVERITIES)  # type: ignore[attr-defined]
DataType = _namespace("DataType", ["FLOAT", "HALF", "BF16", "FP8", "FP4", "INT8", "INT32", "INT64", "UINT8", "BOOL"])
TensorIOMode = _namespace("TensorIOMode", ["NONE", "INPUT", "OUTPUT"])
MemoryPoolType = _namespace("MemoryPoolType", ["WORKSPACE"])


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder
