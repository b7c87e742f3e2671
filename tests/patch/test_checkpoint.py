"""Checkpoints under the patch (``aitune_fast.patch._checkpoint``), in this process: ``reference_dict`` writes
AITune's key layout byte for byte; the reference pickler writes AITune's objects in place of ours (shared stays
shared) and the unpickler reads AITune's back, converted to ours; ``TunedModule.to_dict``/``from_dict`` write keys in
AITune's layout and read a key aitune_fast's restricted reader refuses with AITune's trust (through a stand-in key,
not under forced weights-only loads); the checkpoint file names AITune's classes, so a stock AITune reads it.
``TunedModule`` and the storage tasks are small stand-ins registered under AITune's module names before the patch,
which installs into them what it installs into AITune's own (``ON_LOAD``)."""

from __future__ import annotations

import enum
import io
import pickle
from collections import OrderedDict
from pathlib import PurePosixPath

import pytest
import torch
from aitune_fast import ExactSampleMetadata, ObjectType, SampleMetadata
from aitune_fast.patch import _checkpoint, _names
from aitune_fast.patch._state import state
from aitune_fast.patch._switch import patch_aitune, unpatch_aitune


class Mode(enum.Enum):
    """An enum of the user's: aitune_fast's ``to_dict`` refuses it, its restricted reader too."""

    FAST = 1


class Holder:
    """A backend's object holding metadata in its state."""

    def __init__(self, md: object) -> None:
        self.md = md


def _inputs(extra: dict) -> tuple:
    return ((torch.zeros(2, 3), [torch.ones(4, dtype=torch.int64)]), {"scale": 0.5, "t": (1, "x"), **extra})


INPUTS = [_inputs({}), _inputs({"mode": Mode.FAST, "where": PurePosixPath("/data")})]


def _theirs(ref, inputs: tuple):
    return ref.sample_metadata.SampleMetadata.from_inputs(inputs, strict=True)


def _ours(inputs: tuple):
    return SampleMetadata.from_inputs(inputs, strict=True)


TUNED_SOURCE = """
from collections import OrderedDict

from aitune.torch.module.sample_metadata import SampleMetadata


class TunedModule:
    # AITune 0.6.0's TunedModule.to_dict and from_dict, as far as backend keys go

    BACKENDS_KEY = "backends"

    def __init__(self, backends):
        self._backends = backends

    @staticmethod
    def from_dict(module, state_dict):
        backends = OrderedDict()
        for sample_metadata_data, backend_data in state_dict[TunedModule.BACKENDS_KEY]:
            backends[SampleMetadata.from_dict(sample_metadata_data)] = backend_data
        return TunedModule(backends)

    def to_dict(self):
        return {self.BACKENDS_KEY: [(md.to_dict(), backend) for md, backend in self._backends.items()]}
"""

STORAGE_SOURCE = """
import torch

STATE_DICT_FILE = "state_dict.pt"


class TorchSaveTask:
    def save(self, path, state_dict):
        torch.save(state_dict, path / STATE_DICT_FILE)


class TorchLoadTask:
    def load(self, path, state_dict=None):
        return torch_load_with_custom_types(path / STATE_DICT_FILE)


def torch_load_with_custom_types(path):
    from aitune.torch.module.locator import Locator, ObjectType
    from aitune.torch.module.sample_metadata import SampleMetadata
    from aitune.torch.module.tensor_spec import TensorSpec

    with torch.serialization.safe_globals([Locator, ObjectType, SampleMetadata, TensorSpec]):
        return torch.load(path, weights_only=False)
"""


def _stand_in(world, name: str, source: str):
    module = world.add_module(name)
    exec(compile(source, f"<stand-in {name}>", "exec"), vars(module))
    return module


def test_reference_dict_needs_aitunes_classes(world):
    with pytest.raises(RuntimeError, match="needs AITune's classes"):
        _checkpoint.reference_dict(_ours(INPUTS[0]))


def test_reference_dict_is_what_aitune_writes_byte_for_byte_and_both_read_it(world):
    ref = world.ref
    stock = [_theirs(ref, inputs).to_dict() for inputs in INPUTS]
    patch_aitune(call_path=False)
    written = [_checkpoint.reference_dict(_ours(inputs)) for inputs in INPUTS]
    assert written == stock
    assert SampleMetadata.from_dict(written[0]) == _ours(INPUTS[0])  # the restricted reader reads it
    unpatch_aitune()
    assert [ref.sample_metadata.SampleMetadata.from_dict(d) for d in written] == [_theirs(ref, i) for i in INPUTS]


def test_the_reference_pickler_writes_aitunes_objects_and_the_unpickler_reads_them_back(world):
    ref = world.ref
    patch_aitune(call_path=False)
    theirs = state().reference
    ours = _ours(INPUTS[1])
    exact = ExactSampleMetadata.from_inputs(INPUTS[0])
    locator, spec = ours.tensor_data[0]
    value = {"md": ours, "again": ours, "nested": [(exact, {"k": ours})], "at": locator, "spec": spec}
    value["kind"] = ObjectType.DICT
    data = _checkpoint._dumps(value)

    loaded = _checkpoint._ReferenceUnpickler(io.BytesIO(data)).load()
    assert type(loaded["md"]) is theirs["SampleMetadata"] and loaded["again"] is loaded["md"]
    assert loaded["nested"][0][1]["k"] is loaded["md"]  # shared stays shared
    assert type(loaded["nested"][0][0]) is theirs["ExactSampleMetadata"]
    assert (type(loaded["at"]), type(loaded["spec"])) == (theirs["Locator"], theirs["TensorSpec"])
    assert loaded["kind"] is theirs["ObjectType"].DICT
    back = _checkpoint._ours_in(loaded)
    assert type(back["md"]) is SampleMetadata and back["md"] == ours and back["again"] == ours
    assert type(back["nested"][0][0]) is ExactSampleMetadata and back["nested"][0][0] == exact
    assert back["at"] == locator and back["spec"] == spec and back["kind"] is ObjectType.DICT

    unpatch_aitune()
    stock = pickle.loads(data)  # what a stock AITune reads
    assert type(stock["md"]) is theirs["SampleMetadata"] and stock["md"] == _theirs(ref, INPUTS[1])
    assert stock["nested"][0][0] == ref.exact_sample_metadata.ExactSampleMetadata.from_inputs(INPUTS[0])


def test_to_dict_writes_each_backend_key_in_aitunes_layout(world):
    ref = world.ref
    tuned = _stand_in(world, _names.TUNED_MODULE, TUNED_SOURCE)
    stock = tuned.TunedModule(OrderedDict((_theirs(ref, i), f"backend {n}") for n, i in enumerate(INPUTS))).to_dict()
    patch_aitune(call_path=False)
    keys = [_ours(inputs) for inputs in INPUTS]
    with pytest.raises(TypeError, match="cannot be encoded"):
        keys[1].to_dict()  # aitune_fast's own layout refuses the user's enum
    module = tuned.TunedModule(OrderedDict((key, f"backend {n}") for n, key in enumerate(keys)))
    backends = module._backends
    assert module.to_dict() == stock
    assert module._backends is backends and [id(key) for key in backends] == [id(key) for key in keys]


def test_from_dict_reads_a_key_the_restricted_reader_refuses_with_aitunes_trust(world, monkeypatch):
    ref = world.ref
    tuned = _stand_in(world, _names.TUNED_MODULE, TUNED_SOURCE)
    stock = tuned.TunedModule(OrderedDict((_theirs(ref, i), f"backend {n}") for n, i in enumerate(INPUTS))).to_dict()
    patch_aitune(call_path=False)
    with pytest.raises(ValueError, match="refused global"):
        SampleMetadata.from_dict(stock["backends"][1][0])

    loaded = tuned.TunedModule.from_dict(None, stock)
    items = list(loaded._backends.items())
    assert items == [(_ours(INPUTS[0]), "backend 0"), (_ours(INPUTS[1]), "backend 1")]
    assert all(type(key) is SampleMetadata and "stand-in" not in str(key) for key, _ in items)

    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")  # only the restricted reader then
    with pytest.raises(ValueError, match="refused global"):
        tuned.TunedModule.from_dict(None, stock)


@pytest.mark.parametrize("held", ["in plain containers", "inside an object", "nowhere"])
def test_the_checkpoint_file_names_aitunes_classes_and_is_read_back_into_ours(world, monkeypatch, tmp_path, held):
    ref = world.ref
    tasks = _stand_in(world, _names.STORAGE_TASKS, STORAGE_SOURCE)
    references: list[object] = []

    class Counting(_checkpoint._ReferencePickler):
        def __init__(self, *args, **kwargs) -> None:
            references.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(_checkpoint._checkpoint_pickle, "Pickler", Counting)
    patch_aitune(call_path=False)
    md = _ours(INPUTS[1])
    locator, spec = md.tensor_data[0]
    state_dict = {
        "in plain containers": {"graph_spec": {"input": md, "spec": spec}, "at": [locator], "n": 1},
        "inside an object": {"backend": Holder(md), "n": 1},
        "nowhere": {"weights": torch.arange(3), "n": 1},
    }[held]
    tasks.TorchSaveTask().save(tmp_path, state_dict)
    assert len(references) == (0 if held == "nowhere" else 1)  # the C pickler where nothing needs AITune's names
    loaded = tasks.TorchLoadTask().load(tmp_path)
    if held == "in plain containers":
        assert type(loaded["graph_spec"]["input"]) is SampleMetadata and loaded["graph_spec"]["input"] == md
        assert loaded["graph_spec"]["spec"] == spec and loaded["at"] == [locator]

    unpatch_aitune()
    stock = torch.load(tmp_path / "state_dict.pt", weights_only=False)  # as a stock AITune loads it
    theirs = _theirs(ref, INPUTS[1])
    if held == "in plain containers":
        assert type(stock["graph_spec"]["input"]) is ref.sample_metadata.SampleMetadata
        assert stock["graph_spec"]["input"] == theirs and stock["at"] == [theirs._tensor_data[0][0]]
    elif held == "inside an object":
        assert type(stock["backend"].md) is ref.sample_metadata.SampleMetadata and stock["backend"].md == theirs
    else:
        assert torch.equal(stock["weights"], torch.arange(3))


def test_with_loads_forced_weights_only_the_checkpoint_file_loads_with_aitunes_classes_allowed(
    world, monkeypatch, tmp_path
):
    """``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``: torch refuses a pickle module, so AITune's own loader reads the file,
    with AITune's classes allowed under their names (which name ours while patched)."""
    tasks = _stand_in(world, _names.STORAGE_TASKS, STORAGE_SOURCE)
    patch_aitune(call_path=False)
    md = _ours(INPUTS[0])
    tasks.TorchSaveTask().save(tmp_path, {"graph_spec": {"input": md}, "kind": ObjectType.SEQUENCE})
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    loaded = tasks.TorchLoadTask().load(tmp_path)
    assert type(loaded["graph_spec"]["input"]) is SampleMetadata and loaded["graph_spec"]["input"] == md
    assert loaded["kind"] is ObjectType.SEQUENCE
