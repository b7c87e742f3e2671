"""What happens when an AITune module loads under the patch (``aitune_fast.patch._loading``), in this process:
``on_loaded`` swaps AITune's objects for ours under any name through the registry (an unpatch or a rolled-back
switch puts them back) and installs what ``ON_LOAD`` names, the call path's parts only while it is on; the import
hook (``Finder``) takes AITune's modules only; a module imported while patched runs its code on AITune's own
objects (``_ImportView``, for the importing thread only) and is swapped after, also when its import fails.
The modules are AITune's metadata modules as the differential tests load them, stand-ins, and small files imported
as ``aitune`` submodules from a temporary folder."""

from __future__ import annotations

import importlib
import importlib.machinery
import pickle
import sys
import threading
import types

import pytest
from aitune_fast import ObjectType, SampleMetadata, TensorSpec
from aitune_fast._helpers import batch_tensor
from aitune_fast.patch import _loading, _names
from aitune_fast.patch._journal import JOURNAL
from aitune_fast.patch._loading import Finder, Part, _ImportView, _Loader, on_loaded
from aitune_fast.patch._registry import REGISTRY, Layer
from aitune_fast.patch._state import LOCK, state
from aitune_fast.patch._switch import patch_aitune, unpatch_aitune


@pytest.fixture
def patched(world):
    patch_aitune(call_path=False)
    return world


@pytest.mark.parametrize("undone_by", ["unpatch", "roll back"])
def test_on_loaded_swaps_aitunes_objects_under_any_name_and_they_come_back(patched, undone_by):
    ref = patched.ref
    theirs = state().reference
    module = types.ModuleType("aitune.torch.fake_loaded")
    mine = object()
    vars(module).update(
        SampleMetadata=theirs["SampleMetadata"],
        Meta=theirs["SampleMetadata"],
        Spec=theirs["TensorSpec"],
        batch=theirs["batch_tensor"],
        Kind=theirs["ObjectType"],
        mine=mine,
    )
    before = dict(vars(module))
    JOURNAL.recording = undone_by == "roll back"  # as inside a switch: every change written down
    try:
        with LOCK:
            on_loaded(module)
        assert (module.SampleMetadata, module.Meta, module.Spec) == (SampleMetadata, SampleMetadata, TensorSpec)
        assert module.batch is batch_tensor and module.Kind is ObjectType and module.mine is mine
        assert state().seen[module.__name__] is module and module in state().holders
        assert REGISTRY.stock_name(module.__name__, "Meta") is theirs["SampleMetadata"]
        assert {entry.layer for entry in REGISTRY.entries() if entry.owner is module} == {Layer.CALLERS}
        count = len(REGISTRY.entries())
        with LOCK:
            on_loaded(module)  # seen: nothing more
        assert len(REGISTRY.entries()) == count
        if undone_by == "roll back":
            JOURNAL.roll_back()
        else:
            unpatch_aitune()
    finally:
        JOURNAL.recording = False
        JOURNAL.commit()
    assert dict(vars(module)) == before and module.Meta is theirs["SampleMetadata"]
    assert not any(entry.owner is module for entry in REGISTRY.entries())
    still_patched = undone_by == "roll back"  # the roll back undid the load's changes, not the patch
    assert ref.sample_metadata.SampleMetadata is (SampleMetadata if still_patched else theirs["SampleMetadata"])


def test_on_load_parts_are_installed_for_their_module_and_the_call_paths_only_while_it_is_on(world, monkeypatch):
    name = "aitune.torch.fake_installed"
    module = world.add_module(name, hook="stock")
    installed: list[str] = []

    def plain(target) -> None:
        installed.append(f"plain {target.__name__}")

    def call_path(target) -> None:
        installed.append(f"call path {target.__name__}")
        REGISTRY.replace(Layer.CALL_PATH, target, "hook", "call path")

    monkeypatch.setitem(_loading.ON_LOAD, name, (Part(plain), Part(call_path, call_path=True)))
    patch_aitune(call_path=False)
    assert installed == [f"plain {name}"] and module.hook == "stock"
    patch_aitune(call_path=True)  # the call path switched on: its parts of every loaded module
    assert installed == [f"plain {name}", f"call path {name}"] and module.hook == "call path"
    patch_aitune(call_path=False)
    assert module.hook == "stock" and len(installed) == 2
    other = types.ModuleType("aitune.torch.fake_not_listed")
    with LOCK:
        on_loaded(other)
    assert len(installed) == 2


def test_the_import_hook_takes_only_aitunes_modules(world):
    finder = Finder()
    assert finder.find_spec("json", None) is None
    assert finder.find_spec("aitune_fast._config", None) is None
    parent = sys.modules["aitune.torch.module"]
    assert finder.find_spec("aitune.torch.module.no_such_module", parent.__path__) is None
    loaded = sys.modules.get("aitune.torch.module.forward_signature")  # an earlier test may have imported it
    sys.meta_path.insert(0, finder)  # it asks the finders after it, never itself
    try:
        spec = finder.find_spec("aitune.torch.module.forward_signature", parent.__path__)
    finally:
        sys.meta_path.remove(finder)
    assert spec.name == "aitune.torch.module.forward_signature" and isinstance(spec.loader, _Loader)
    assert isinstance(spec.loader._loader, importlib.machinery.SourceFileLoader)
    assert spec.loader.get_filename(spec.name).endswith("forward_signature.py")  # the rest is the real loader's
    assert sys.modules.get("aitune.torch.module.forward_signature") is loaded  # found, not imported


HOOKED_SOURCE = """
from aitune.torch.module import tensor_spec
from aitune.torch.module.sample_metadata import SampleMetadata

SEEN = SampleMetadata
SPEC_SEEN = tensor_spec.TensorSpec


class Sub(SampleMetadata):
    pass


def default(kind=SampleMetadata):
    return kind
"""


def _import_from(tmp_path, monkeypatch, name: str, source: str) -> types.ModuleType:
    """Import ``aitune.<name>`` from a file holding `source`, through the import machinery."""
    (tmp_path / f"{name}.py").write_text(source)
    package = sys.modules[_names.PACKAGE]
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    return importlib.import_module(f"{_names.PACKAGE}.{name}")


def _forget_import(tmp_path, name: str) -> None:
    sys.modules.pop(f"{_names.PACKAGE}.{name}", None)
    vars(sys.modules[_names.PACKAGE]).pop(name, None)
    sys.path_importer_cache.pop(str(tmp_path), None)


def test_a_module_imported_while_patched_runs_on_aitunes_objects_and_is_swapped_after(patched, monkeypatch, tmp_path):
    """What the module builds at import time from AITune's names (a subclass, a default argument) is built on
    AITune's objects, as without the patch; its names are swapped once its code has run, and put back by the
    unpatch."""
    theirs = state().reference
    try:
        hooked = _import_from(tmp_path, monkeypatch, "zz_hooked", HOOKED_SOURCE)
        assert type(hooked.__spec__.loader) is _Loader
        assert hooked.Sub.__mro__[1] is theirs["SampleMetadata"]
        assert hooked.default() is theirs["SampleMetadata"]
        assert hooked.SEEN is SampleMetadata and hooked.SampleMetadata is SampleMetadata
        assert hooked.SPEC_SEEN is TensorSpec
        assert state().seen[hooked.__name__] is hooked and state().importing == 0 and state().views == []
        assert type(sys.modules[_names.SAMPLE_METADATA]) is types.ModuleType
        unpatch_aitune()
        assert hooked.SEEN is theirs["SampleMetadata"] and hooked.SPEC_SEEN is theirs["TensorSpec"]
    finally:
        unpatch_aitune()
        _forget_import(tmp_path, "zz_hooked")


def test_a_hooked_import_that_fails_leaves_no_view_and_no_count(patched, monkeypatch, tmp_path):
    source = "from aitune.torch.module.sample_metadata import SampleMetadata\nraise ValueError('broken at import')\n"
    try:
        with pytest.raises(ValueError, match="broken at import"):
            _import_from(tmp_path, monkeypatch, "zz_broken", source)
        assert state().importing == 0 and state().views == [] and _loading._importing.depth == 0
        assert type(sys.modules[_names.SAMPLE_METADATA]) is types.ModuleType
        assert sys.modules[_names.SAMPLE_METADATA].SampleMetadata is SampleMetadata
    finally:
        unpatch_aitune()
        _forget_import(tmp_path, "zz_broken")


def test_a_hooked_import_whose_swap_fails_leaves_no_view(patched, monkeypatch, tmp_path):
    def failing(module):
        raise RuntimeError("install step failed")

    monkeypatch.setattr(_loading, "on_loaded", failing)
    source = "from aitune.torch.module.sample_metadata import SampleMetadata\n"
    try:
        with pytest.raises(RuntimeError, match="install step failed"):
            _import_from(tmp_path, monkeypatch, "zz_swap_fails", source)
        assert state().importing == 0 and state().views == [] and _loading._importing.depth == 0
        assert type(sys.modules[_names.SAMPLE_METADATA]) is types.ModuleType
    finally:
        unpatch_aitune()
        _forget_import(tmp_path, "zz_swap_fails")


def test_the_import_view_shows_aitunes_objects_to_the_importing_thread_only(patched):
    theirs = state().reference
    holder = sys.modules[_names.SAMPLE_METADATA]
    other_thread: list = []
    changed = object()
    with LOCK:
        _loading._views_on()
    try:
        assert type(holder) is _ImportView and holder in state().views
        assert holder.SampleMetadata is SampleMetadata  # no hooked import runs on this thread
        _loading._importing.depth = 1
        thread = threading.Thread(target=lambda: other_thread.append(holder.SampleMetadata))
        thread.start()
        thread.join()
        assert other_thread == [SampleMetadata]
        assert holder.SampleMetadata is theirs["SampleMetadata"] and holder.batch_tensor is theirs["batch_tensor"]
        assert holder.pickle is pickle  # a name the patch did not swap
        holder.SampleMetadata = changed  # a swapped name changed since: the view shows what it holds
        assert holder.SampleMetadata is changed
    finally:
        _loading._importing.depth = 0
        holder.SampleMetadata = SampleMetadata
        with LOCK:
            _loading.views_off()
    assert type(holder) is types.ModuleType and state().views == [] and state().importing == 0


def test_in_a_forked_child_only_its_own_threads_imports_keep_the_views(patched):
    """After a fork only the forking thread goes on: the hooked imports other threads were running never end, so
    the views are counted for its own imports alone."""
    holder = sys.modules[_names.SAMPLE_METADATA]
    with LOCK:
        _loading._views_on()
        _loading._views_on()  # two hooked imports, of other threads
    _loading.forget_other_threads_imports()
    assert type(holder) is types.ModuleType and state().importing == 0 and state().views == []
    with LOCK:
        _loading._views_on()
        _loading._views_on()  # one of them this thread's
    _loading._importing.depth = 1
    try:
        _loading.forget_other_threads_imports()
        assert type(holder) is _ImportView and state().importing == 1
    finally:
        _loading._importing.depth = 0
        with LOCK:
            _loading.views_off(everything=True)
    assert type(holder) is types.ModuleType
