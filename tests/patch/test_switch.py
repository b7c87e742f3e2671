"""The switch (``aitune_fast.patch._switch``) in this process, on AITune's metadata modules as the differential tests
load them (under stub parent packages; ``aitune.torch`` itself, which imports TensorRT, is not loaded here):
``patch_aitune()`` swaps AITune's objects for ours in every loaded ``aitune`` module under any name and converts
live objects, ``unpatch_aitune()`` leaves every touched module and slot exactly as before, a failed patch changes
nothing, a second patch only switches the call path, a patch after an unpatch learns afresh, the version check
refuses other releases, and ``codes()``/``tuning_loops()`` find the code a switch waits for or refuses beside.
Other AITune modules are small stand-ins registered under AITune's names (``world.add_module``)."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest
import torch
from aitune_fast import Locator, SampleMetadata
from aitune_fast._core import _type_registry
from aitune_fast.patch import _call_path, _names, _switch
from aitune_fast.patch._loading import Finder
from aitune_fast.patch._quiescence import Entry, code_chain
from aitune_fast.patch._state import state
from aitune_fast.patch._switch import (
    check_aitune_version,
    codes,
    is_aitune_patched,
    patch_aitune,
    tuning_loops,
    unpatch_aitune,
)

CALLER = "aitune.torch.fake_caller"


class LiveModule:
    """An object of a class of AITune's (by its module), holding metadata as a tuned module does."""

    __module__ = CALLER

    def __init__(self, key: object) -> None:
        self._backends = {key: "backend"}
        self.spec = key


class Point:
    def __init__(self) -> None:
        self.x = torch.zeros(1)


def _theirs(ref, strict: bool = True):
    return ref.sample_metadata.SampleMetadata.from_inputs(((torch.zeros(2, 3),), {"scale": 0.5}), strict=strict)


def _unswapped() -> list[str]:
    """The names under which a loaded ``aitune`` module still holds one of AITune's objects the patch swaps."""
    by_id = state().by_id
    return [
        f"{name}.{attribute}"
        for name, module in list(sys.modules.items())
        if _names.is_aitune(name) and isinstance(module, types.ModuleType)
        for attribute, value in list(vars(module).items())
        if id(value) in by_id and by_id[id(value)][0] is value
    ]


def test_a_patch_then_an_unpatch_leaves_every_module_class_and_slot_as_before(world):
    ref = world.ref
    theirs = ref.sample_metadata.SampleMetadata
    caller = world.add_module(CALLER, SampleMetadata=theirs, Meta=theirs, Spec=ref.tensor_spec.TensorSpec, n=1)
    key = _theirs(ref)
    live = LiveModule(key)
    backends = live._backends

    patch_aitune()
    assert is_aitune_patched()
    assert _unswapped() == [] and len(state().by_id) == len(_names.CONVERTED) + 2  # + InfoLevel, batch_tensor
    assert ref.sample_metadata.SampleMetadata is SampleMetadata and caller.Meta is SampleMetadata
    assert caller.n == 1
    assert any(isinstance(finder, Finder) for finder in sys.meta_path)
    assert sys.modules["aitune_fast.global_context"]._source[0] is ref.global_context.global_context
    [ours] = backends
    assert live._backends is backends and type(ours) is SampleMetadata and type(live.spec) is SampleMetadata
    assert ours == SampleMetadata.from_inputs(((torch.zeros(2, 3),), {"scale": 0.5}), strict=True)

    unpatch_aitune()
    assert not is_aitune_patched()
    assert world.changes() == []
    assert caller.SampleMetadata is theirs and caller.Meta is theirs and caller.Spec is ref.tensor_spec.TensorSpec
    [back] = backends
    assert live._backends is backends and type(back) is theirs and back == key and type(live.spec) is theirs


def test_a_second_patch_only_switches_the_call_path_and_both_switches_are_idempotent(world):
    patch_aitune(call_path=False)
    period = state()
    replaced = {id(entry) for entry in _switch.REGISTRY.entries()}
    assert is_aitune_patched() and period.complete and not period.call_path

    patch_aitune(call_path=True)
    assert state() is period and period.call_path
    assert {id(entry) for entry in _switch.REGISTRY.entries()} == replaced  # no call-path module is loaded here
    patch_aitune(call_path=True)
    assert state() is period and period.call_path

    unpatch_aitune()
    assert not is_aitune_patched() and state() is not period
    unpatch_aitune()
    assert not is_aitune_patched() and world.changes() == []


@pytest.mark.parametrize("call_path", [1, "yes", None])
def test_a_call_path_that_is_not_a_bool_is_refused_and_nothing_changes(world, call_path):
    with pytest.raises(TypeError, match="True or False"):
        patch_aitune(call_path=call_path)
    assert not is_aitune_patched() and world.changes() == []


def test_a_patch_interrupted_half_way_changes_nothing(world, monkeypatch):
    """A KeyboardInterrupt after every step but the last (the call path): the journal takes all of it back, the
    state of the patched period included."""
    ref = world.ref
    caller = world.add_module(CALLER, Meta=ref.sample_metadata.SampleMetadata)
    real = _switch.set_call_path

    def interrupted(on: bool) -> None:
        real(on)
        assert caller.Meta is SampleMetadata  # the names were swapped by then
        raise KeyboardInterrupt

    monkeypatch.setattr(_switch, "set_call_path", interrupted)
    with pytest.raises(KeyboardInterrupt):
        patch_aitune()
    assert not is_aitune_patched() and not state().reference
    assert caller.Meta is ref.sample_metadata.SampleMetadata
    assert world.changes() == []


def test_a_patch_after_an_unpatch_learns_afresh(world):
    """The second patched period learns AITune again: the modules the first one swapped are swapped again, a module
    loaded in between is swapped, and AITune's type registrations made in between carry over."""
    ref = world.ref
    theirs = ref.sample_metadata.SampleMetadata
    patch_aitune(call_path=False)
    first = state()
    unpatch_aitune()
    later = world.add_module("aitune.torch.fake_later", SampleMetadata=theirs)
    ref.locator.Locator.register_user_type(Point, only_tensors=True)
    try:
        patch_aitune(call_path=False)
        assert state() is not first and state().reference["SampleMetadata"] is theirs
        assert _unswapped() == [] and later.SampleMetadata is SampleMetadata
        assert ref.sample_metadata.SampleMetadata is SampleMetadata
        assert _type_registry()[0].get(Point) is True
        unpatch_aitune()
        assert later.SampleMetadata is theirs and ref.sample_metadata.SampleMetadata is theirs
        assert Point not in _type_registry()[0]  # copied into ours by the patch, taken out by the unpatch
    finally:
        if is_aitune_patched():
            unpatch_aitune()
        ref.locator.Locator.unregister_user_type(Point)


class Kept(Point):
    pass


class Added(Point):
    pass


def _registered(locator) -> dict:
    return {cls: only for cls, only in locator._user_types.items() if cls in (Point, Kept, Added)}


def _ours() -> dict:
    return {cls: only for cls, only in _type_registry()[0].items() if cls in (Point, Kept, Added)}


def test_the_type_registries_come_back_with_the_changes_made_while_patched(world):
    """At patch time AITune's registrations are copied into ours; at unpatch they go from ours again, and what was
    registered, changed or unregistered while patched (through AITune's ``Locator``, which then registers in ours)
    is made to both."""
    theirs = world.ref.locator.Locator
    theirs.register_user_type(Point, only_tensors=True)
    theirs.register_user_type(Kept, only_tensors=True)
    Locator.register_user_type(Kept, only_tensors=False)  # ours only, as a user of aitune_fast registers
    try:
        patch_aitune(call_path=False)
        assert _ours() == {Point: True, Kept: True}
        theirs.register_user_type(Added, only_tensors=False)
        theirs.unregister_user_type(Point)
        unpatch_aitune()
        assert _registered(theirs) == {Kept: True, Added: False}
        assert _ours() == {Kept: False, Added: False}
    finally:
        for cls in _registered(theirs):
            theirs.unregister_user_type(cls)
        for cls in _ours():
            Locator.unregister_user_type(cls)


def test_a_patch_rolled_back_leaves_our_type_registry_as_it_was(world, monkeypatch):
    world.ref.locator.Locator.register_user_type(Point, only_tensors=True)

    def interrupted(on: bool) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_switch, "set_call_path", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            patch_aitune()
        assert not is_aitune_patched() and Point not in _ours()
    finally:
        world.ref.locator.Locator.unregister_user_type(Point)


@pytest.mark.parametrize("version", ["0.6.0", "0.6.3", "0.6", "0.6.1.post2", "0.6.0+nv.1"])
def test_the_version_check_accepts_the_releases_it_was_made_for(monkeypatch, version):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    check_aitune_version()


@pytest.mark.parametrize(
    "version", ["0.5.9", "0.7.0", "1.6.0", "0.6.0rc1", "0.6.0.dev3", "0.6.1a1", "0.6.0.post", "", "unknown", None]
)
def test_the_version_check_refuses_other_releases_and_patch_aitune_then_changes_nothing(world, monkeypatch, version):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    with pytest.raises(RuntimeError, match=r"supports aitune>=0\.6\.0,<0\.7\.0.*installed AITune is"):
        check_aitune_version()
    with pytest.raises(RuntimeError, match=r"aitune>=0\.6\.0,<0\.7\.0"):
        patch_aitune()
    assert not is_aitune_patched() and world.changes() == []


def test_without_distribution_metadata_the_version_is_the_packages_own(monkeypatch):
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(RuntimeError, match="installed AITune is None"):
        check_aitune_version()  # the stub package here has no __version__
    monkeypatch.setattr(sys.modules[_names.PACKAGE], "__version__", "0.6.2", raising=False)
    check_aitune_version()
    monkeypatch.setattr(sys.modules[_names.PACKAGE], "__version__", "0.8.0")
    with pytest.raises(RuntimeError, match="'0.8.0'"):
        check_aitune_version()


TUNING_SOURCE = """
import functools

def report_module_tune(*args):
    return None

def tune_loop(module):
    report_module_tune(module)

def not_tuning(module):
    return module

def _decorate(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper

@_decorate
def decorated_tune(module):
    report_module_tune(module)

class Strategy:
    def tune(self, module):
        report_module_tune(module)

    def describe(self):
        return "strategy"
"""

TUNED_SOURCE = """
class TunedModule:
    def __call__(self, *args):
        return self.safe_call_backend(*args)

    def safe_call_backend(self, *args):
        return args

    def to_dict(self):
        return {}

    @staticmethod
    def from_dict(module, state_dict):
        return module
"""

WRAPPER_SOURCE = """
def report_module_tune(*args):
    return None

class Module:
    def tune(self):
        report_module_tune(self)
"""


def _stand_in(world, name: str, source: str) -> types.ModuleType:
    """A module named `name` running `source` (its functions and classes are that module's own)."""
    module = world.add_module(name)
    exec(compile(source, f"<stand-in {name}>", "exec"), vars(module))
    return module


def test_tuning_loops_are_found_by_what_they_call(world):
    """Functions and methods an AITune module defines whose code calls the module-tuning span, decorators
    unwrapped; not the other functions, nor a function the module only holds."""
    fake = _stand_in(world, "aitune.torch.fake_tuning", TUNING_SOURCE)
    elsewhere: dict = {"__name__": "elsewhere", "report_module_tune": print}
    exec("def tune_loop(module):\n    report_module_tune(module)\n", elsewhere)
    fake.borrowed = elsewhere["tune_loop"]
    found = tuning_loops()
    mine = {code for code in found if code.co_filename == "<stand-in aitune.torch.fake_tuning>"}
    assert mine == {fake.tune_loop.__code__, fake.decorated_tune.__wrapped__.__code__, fake.Strategy.tune.__code__}
    assert elsewhere["tune_loop"].__code__ not in found


def test_codes_split_what_a_switch_waits_for_from_what_it_refuses_beside(world):
    tuned = _stand_in(world, _names.TUNED_MODULE, TUNED_SOURCE)
    wrapper = _stand_in(world, _names.WRAPPER_MODULE, WRAPPER_SOURCE)
    loops = _stand_in(world, "aitune.torch.fake_tuning", TUNING_SOURCE)
    tuning = _stand_in(world, _names.TUNING, "def tune(m): pass\ndef save(m): pass\ndef load(m): pass\n")
    found = codes()
    cls = tuned.TunedModule
    gated = {cls.__call__.__code__, cls.to_dict.__code__, cls.from_dict.__code__, cls.safe_call_backend.__code__}
    assert gated <= found.calls
    long = {tuning.tune.__code__, tuning.save.__code__, tuning.load.__code__, wrapper.Module.tune.__code__}
    assert long <= found.long and loops.Strategy.tune.__code__ in found.long and tuning_loops() <= found.long
    assert not found.calls & found.long  # Module.tune is gated and tunes: refused beside, never waited for
    own = {code for function in _call_path.CALL_CODE for code in code_chain(function)}
    assert found.entering == own and own <= found.calls
    assert Entry(cls, "__call__") in _switch._entries() and Entry(wrapper.Module, "tune") in _switch._entries()
