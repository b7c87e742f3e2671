"""What a switch is about: the one lock, and the one record of whether the patch (and its call path) is on and of
what it learnt of AITune. Everything else reads these; only the switch (and the call-path toggle) writes them."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from aitune_fast._core import _CallPath

# the switch lock, for the life of the process: held by a switch from start to end, by the call-path toggle and by
# hooked imports
LOCK = threading.RLock()


class LearntContext(NamedTuple):
    """AITune's global context (``aitune.global_context``) as learnt when that module loads while patched: the core
    reads it through ``global_context._source[0]``, the call path pushes and pops it."""

    obj: Any  # AITune's `global_context`
    cls: Any  # GlobalContext
    module_key: str
    backend_key: str


class Registry(NamedTuple):
    """What a ``Locator``'s type registry holds."""

    user_types: dict[type, bool]  # class -> only_tensors
    ignored: set[type]


class PathRefs:
    """AITune's objects the Python steps of the call path use (the native path's are in its parts), learnt when
    their modules load while patched (`_call_path.install_jit_swap`, `learn_eager_infer`)."""

    def __init__(self) -> None:
        self.eager_describe: Any = None  # stock's TorchEagerBackend.describe: the describe() the cache may keep
        self.config_functions: Any = None  # BackendConfig's own functions of _CONFIG_FUNCTIONS, as AITune has them
        self.jit_decorator: Any = None  # wrapt.decorator as AITune's JIT module uses it
        self.nn_setattr: Any = None  # nn.Module.__setattr__: the JIT swap writes __dict__ only under it


class State:
    """One patched period (or the unpatched world between two), put in place and taken away by a journaled step of
    the switch."""

    def __init__(self, active: bool = False) -> None:
        self.active = active  # the patch is (partly) in place: `is_aitune_patched()`
        self.complete = False  # every step of the patch done
        self.call_path = False  # the tuned-call path is on (`_call_path`)
        self.reference: dict[str, Any] = {}  # name -> AITune's object
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(AITune's object) -> (it, ours)
        self.seen: dict[str, Any] = {}  # module name -> the module object already swapped
        # aitune_fast's type registry before AITune's registrations were copied in, and after (`_aitune`)
        self.registry_before_patch: Registry | None = None
        self.registry_at_patch: Registry | None = None
        self.holders: list[Any] = []  # modules holding swapped names
        self.importing = 0  # hooked imports running (all threads)
        self.views: list[Any] = []  # modules whose class is _ImportView now
        self.context: LearntContext | None = None  # AITune's global context, once its module loaded
        self.path_refs = PathRefs()  # what the call path's Python steps use (`_call_path`)
        self.call_path_parts: dict[str, Any] = {}  # the parts of the native call path learnt (`_call_path`)
        # the native call path built from them (frozen: a part newly learnt makes a new one; a call in flight keeps
        # the one it started with). With none learnt, its entries answer `_STOCK_STEP`: a shim kept past an unpatch
        # runs stock's step
        self.native = _CallPath()


class _Current:
    """Holds the state now in place (`state()`); replaced whole by the switch (`_switch.set_state`)."""

    def __init__(self) -> None:
        self.state = State()


CURRENT = _Current()


def state() -> State:
    """The state now in place."""
    return CURRENT.state
