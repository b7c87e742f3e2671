"""Objects pickled by a stock AITune load into aitune_fast's classes.

A stock pickle (protocol 2+, what ``pickle.dumps`` and ``torch.save`` write) makes each object with
``cls.__new__(cls)`` and fills it with ``__setstate__(state)``, the stock object's ``__dict__`` (or
``(None, slots)`` for ``TensorSpec``). Under ``patch_aitune()`` the stock class names resolve to aitune_fast's;
here an unpickler resolves them the same way, without AITune (``test_aitune_integration.py`` checks the real
patch). Also: blank objects (``cls.__new__(cls)``, never set) behave as empty ones, and ``__setstate__`` refuses
bad states and runs only once.
"""

from __future__ import annotations

import copy
import io
import pickle

import aitune_fast
import pytest
import torch
from aitune_fast import ExactSampleMetadata, Locator, SampleMetadata, TensorSpec

_OURS = {
    "SampleMetadata": SampleMetadata,
    "ExactSampleMetadata": ExactSampleMetadata,
    "Locator": Locator,
    "TensorSpec": TensorSpec,
    "ObjectType": aitune_fast.ObjectType,
    "InfoLevel": aitune_fast.InfoLevel,
}


class _AsPatched(pickle.Unpickler):
    """Resolves AITune's metadata names to aitune_fast's, as they resolve under ``patch_aitune()``."""

    def find_class(self, module, name):
        if module.startswith("aitune.torch.module.") and name in _OURS:
            return _OURS[name]
        assert not module.startswith("aitune"), (module, name)
        return super().find_class(module, name)


def _load_as_patched(blob: bytes):
    return _AsPatched(io.BytesIO(blob)).load()


def _inputs(n: int = 2) -> dict:
    return {
        "x": torch.ones(n, 3),
        "kw": {"a": [torch.zeros(2 * n), 3, "s"], "b": (torch.ones(n, 2, dtype=torch.int64), None)},
        "n": 1.5,
    }


@pytest.fixture(scope="module")
def ref():
    from aitune_fast._reference import load_reference

    return load_reference()


def _same(got, fresh):
    assert type(got) is type(fresh)
    assert got == fresh and fresh == got
    assert hash(got) == hash(fresh)
    assert (got.display_path, got.path) == (fresh.display_path, fresh.path) if isinstance(fresh, Locator) else True
    if not isinstance(fresh, Locator):
        assert got.describe() == fresh.describe()
    if isinstance(fresh, SampleMetadata):
        assert got.to_json() == fresh.to_json()
        assert [tuple(s.shape) for s in got.tensor_specs] == [tuple(s.shape) for s in fresh.tensor_specs]


def _learned(cls, batch_size_arg=True):
    """A strict metadata that learned a batch and a dynamic axis (update_shapes_seen)."""
    md = cls.from_inputs({"x": torch.ones(2, 3)}, strict=True, batch_size=2)
    md.update_shapes_seen(cls.from_inputs({"x": torch.ones(4, 5)}, strict=True, batch_size=4))
    return md


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_stock_objects_load_as_freshly_built_ones(ref, protocol):
    stock_md = ref.sample_metadata.SampleMetadata.from_inputs(_inputs(), strict=True)
    stock_exact = ref.exact_sample_metadata.ExactSampleMetadata.from_inputs(_inputs())
    stock_learned = _learned(ref.sample_metadata.SampleMetadata)
    loc, spec = stock_md.tensor_data[1]
    blob = pickle.dumps(
        {"md": stock_md, "exact": stock_exact, "learned": stock_learned, "pairs": [(loc, spec)], "out": loc},
        protocol=protocol,
    )
    got = _load_as_patched(blob)
    fresh = SampleMetadata.from_inputs(_inputs(), strict=True)
    _same(got["md"], fresh)
    _same(got["exact"], ExactSampleMetadata.from_inputs(_inputs()))
    assert got["exact"] != fresh
    learned = _learned(SampleMetadata)
    _same(got["learned"], learned)
    assert got["learned"].tensor_specs[0].shape == ["batch0", "dim1"]
    got_spec = got["learned"].tensor_specs[0]
    want_spec = learned.tensor_specs[0]
    for field in ("shape", "min_shape", "max_shape", "dtype"):
        assert getattr(got_spec, field) == getattr(want_spec, field)
    assert got_spec.get_batch_axis_multipliers() == want_spec.get_batch_axis_multipliers() == {0: 1}
    floc, fspec = fresh.tensor_data[1]
    _same(got["pairs"][0][0], floc)
    _same(got["pairs"][0][1], fspec)
    assert got["out"] is got["pairs"][0][0]  # pickle's sharing kept
    assert got["out"].display_path == floc.display_path and got["out"].path == floc.path
    # the loaded objects are ordinary ones: our own pickles of them round-trip, and the metadata is a dict key
    assert pickle.loads(pickle.dumps(got["md"])) == fresh
    assert {fresh: 1}[got["md"]] == 1


def test_torch_save_of_stock_objects(ref, tmp_path):
    stock_md = ref.sample_metadata.SampleMetadata.from_inputs(_inputs(), strict=True)
    path = tmp_path / "stock.pt"
    torch.save({"key": stock_md, "specs": [s for _, s in stock_md.tensor_data]}, path)

    class _Module:  # torch.load takes a pickle module with an Unpickler
        Unpickler = _AsPatched
        load = staticmethod(pickle.load)

    got = torch.load(path, pickle_module=_Module, weights_only=False)
    fresh = SampleMetadata.from_inputs(_inputs(), strict=True)
    _same(got["key"], fresh)
    assert [s.shape for s in got["specs"]] == [s.shape for s in fresh.tensor_specs]


def test_outputs_locator_keeps_is_output(ref):
    stock = ref.sample_metadata.SampleMetadata.from_outputs((torch.ones(2),), strict=True)
    got = _load_as_patched(pickle.dumps(stock))
    fresh = SampleMetadata.from_outputs((torch.ones(2),), strict=True)
    _same(got, fresh)
    assert got.tensor_data[0][0].display_path == "output[0]"


def test_protocols_0_and_1_are_refused_with_a_clear_error(ref):
    """Stock AITune cannot pickle a spec below protocol 2 (a slotted class); its Locator's protocol 0/1 pickle
    goes through copyreg's ``object.__new__``, which no extension class takes: a TypeError, not a crash."""
    loc = ref.locator.Locator((("x", ref.locator.ObjectType.DICT),))
    for protocol in (0, 1):
        with pytest.raises(TypeError):
            _load_as_patched(pickle.dumps(loc, protocol=protocol))


def test_our_own_pickles_are_unchanged():
    md = SampleMetadata.from_inputs(_inputs(), strict=True)
    exact = ExactSampleMetadata.from_inputs(_inputs())
    for obj in (md, exact, md.tensor_data[0][0], md.tensor_data[0][1]):
        reduced = obj.__reduce__()
        assert reduced[0] is type(obj) and len(reduced) == 2  # no state: __setstate__ is never called on ours
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            _same(pickle.loads(pickle.dumps(obj, protocol=protocol)), obj)
        _same(copy.deepcopy(obj), obj)


# blank objects: made by cls.__new__(cls) (or cls()), set once by __setstate__


def test_blank_objects_read_as_empty_ones():
    md = SampleMetadata.__new__(SampleMetadata)
    empty = SampleMetadata.from_inputs({})
    _same(md, empty)
    assert str(md) == str(empty) and md.tensor_data == () and md.other_data == () and not md.strict
    assert md.llm_phase == "" and md.to_dict() == empty.to_dict() and md.has_batch_axis()
    md.update_shapes_seen(empty)
    assert md.make_batch({}, 2) == {}
    assert pickle.loads(pickle.dumps(md)) == empty
    exact = ExactSampleMetadata.__new__(ExactSampleMetadata)
    assert exact == ExactSampleMetadata.from_inputs({}) and exact != md
    loc = Locator.__new__(Locator)
    _same(loc, Locator(()))
    assert loc.path == () and loc.depth == 0 and loc.display_path == "" and loc.get_value(5) == 5
    assert pickle.loads(pickle.dumps(loc)) == Locator(())
    with pytest.raises(IndexError):
        _ = loc.leaf_name
    spec = TensorSpec.__new__(TensorSpec)
    assert (spec.shape, spec.min_shape, spec.max_shape, spec.dtype, spec._bs_multipliers) == ([], [], [], None, [])
    assert spec == TensorSpec([], [], [], None, []) and spec.get_batch_axis_multipliers() == {}
    assert spec.describe() == "shape=[] min_shape=[] max_shape=[] dtype=None"
    assert SampleMetadata() == empty and Locator() == Locator(()) and TensorSpec().shape == []


def test_partial_constructor_arguments_are_refused():
    with pytest.raises(TypeError, match="tensor_data and other_data"):
        SampleMetadata(())
    with pytest.raises(TypeError, match="tensor_data and other_data"):
        SampleMetadata(strict=True)
    with pytest.raises(TypeError, match="tensor_data and other_data"):
        ExactSampleMetadata(other_data=())
    with pytest.raises(TypeError, match="_bs_multipliers"):
        TensorSpec([2], [2], [2])
    with pytest.raises(TypeError, match="access_path"):
        Locator(is_output=True)


_LOC_STATE = {"_access_path": (("x", aitune_fast.ObjectType.DICT),), "_is_output": False}
_SPEC_STATE = (
    None,
    {"shape": [2], "min_shape": [2], "max_shape": [2], "dtype": torch.float32, "_bs_multipliers": [1.0]},
)


def _md_state():
    loc = Locator((("x", aitune_fast.ObjectType.DICT),))
    spec = TensorSpec([2], [2], [2], torch.float32, [1.0])
    return {"_tensor_data": ((loc, spec),), "_other_data": (), "_strict": True, "_llm_phase": None}


def test_setstate_runs_once_and_only_on_blank_objects():
    cases = [
        (Locator, _LOC_STATE, Locator((("x", aitune_fast.ObjectType.DICT),))),
        (TensorSpec, _SPEC_STATE, TensorSpec([2], [2], [2], torch.float32, [1.0])),
        (SampleMetadata, _md_state(), SampleMetadata(_md_state()["_tensor_data"], (), True)),
        (ExactSampleMetadata, _md_state(), ExactSampleMetadata(_md_state()["_tensor_data"], (), True)),
    ]
    for cls, state, built in cases:
        obj = cls.__new__(cls)
        assert obj.__setstate__(state) is None
        _same(obj, built)
        with pytest.raises(TypeError, match="already set"):
            obj.__setstate__(state)
        _same(obj, built)
        with pytest.raises(TypeError, match="already set"):
            built.__setstate__(state)


_BAD_MD = [
    (None, TypeError, "takes the dict"),
    ({}, ValueError, 'missing "_tensor_data"'),
    ({**_md_state(), "extra": 1}, ValueError, "unexpected keys"),
    ({**_md_state(), "_strict": 1}, TypeError, "_strict is a bool"),
    ({**_md_state(), "_llm_phase": 3}, TypeError, "_llm_phase is a str or None"),
    ({**_md_state(), "_tensor_data": 5}, TypeError, None),
    ({**_md_state(), "_tensor_data": ((1, 2),)}, TypeError, "Locator"),
    ({**_md_state(), "_other_data": (("x", 1),)}, TypeError, "Locator"),
    ({**_md_state(), "_tensor_data": ((Locator(()),),)}, (TypeError, ValueError), None),
]
_BAD_LOC = [
    ([], TypeError, "takes the dict"),
    ({"_access_path": ()}, ValueError, 'missing "_is_output"'),
    ({**_LOC_STATE, "_is_output": "no"}, TypeError, "_is_output is a bool"),
    ({**_LOC_STATE, "_access_path": 5}, TypeError, None),
    ({**_LOC_STATE, "_access_path": (("x",),)}, ValueError, "pairs"),
    ({**_LOC_STATE, "_access_path": (("x", 99),)}, ValueError, "not an ObjectType"),
]
_SPEC_FIELDS = _SPEC_STATE[1]
_BAD_SPEC = [
    ((1, _SPEC_FIELDS), TypeError, "takes the dict"),
    ((None, {**_SPEC_FIELDS, "x": 1}), ValueError, "unexpected keys"),
    ((None, {**_SPEC_FIELDS, "shape": (2,)}), TypeError, "shape is a list"),
    ((None, {**_SPEC_FIELDS, "shape": [2.5]}), TypeError, "shape holds 2.5"),
    ((None, {**_SPEC_FIELDS, "min_shape": ["a"]}), TypeError, "min_shape holds a"),
    ((None, {**_SPEC_FIELDS, "max_shape": [2, 2]}), ValueError, "max_shape is as long as shape"),
    ((None, {**_SPEC_FIELDS, "_bs_multipliers": []}), ValueError, "_bs_multipliers is as long"),
    ((None, {**_SPEC_FIELDS, "_bs_multipliers": ["x"]}), TypeError, "_bs_multipliers holds x"),
    ((None, {**_SPEC_FIELDS, "dtype": "float32"}), TypeError, "dtype is a torch.dtype or None"),
]


@pytest.mark.parametrize(
    "cls,state,exc,match",
    [(SampleMetadata, *c) for c in _BAD_MD]
    + [(ExactSampleMetadata, *c) for c in _BAD_MD[:3]]
    + [(Locator, *c) for c in _BAD_LOC]
    + [(TensorSpec, *c) for c in _BAD_SPEC],
)
def test_bad_states_are_refused_and_leave_the_object_blank(cls, state, exc, match):
    obj = cls.__new__(cls)
    with pytest.raises(exc, match=match):
        obj.__setstate__(state)
    assert obj == cls.__new__(cls)  # still blank: a good state may follow
    good = {Locator: _LOC_STATE, TensorSpec: _SPEC_STATE}.get(cls) or _md_state()
    obj.__setstate__(good)
    assert obj != cls.__new__(cls) or cls is TensorSpec
