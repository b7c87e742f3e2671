"""Parity of walking ``UserDict`` subclasses: the walk reads ``data`` (or the dict behind ``.items()``)
directly only where that yields exactly what the reference's ``.items()`` does; every override is honoured."""

from __future__ import annotations

from collections import OrderedDict, UserDict

import pytest
import torch
from parity import leaves_snap


def t(*shape):
    return torch.zeros(*shape)


class Plain(UserDict):
    pass


class BatchEncodingLike(UserDict):
    """transformers' ``BatchEncoding``: ``items`` returns ``self.data.items()``, ``__getattr__`` reads data."""

    def __init__(self, data=None, encoding=None):
        super().__init__(data)
        self._encodings = encoding

    def __getitem__(self, item):
        if isinstance(item, str):
            return self.data[item]
        raise KeyError(item)

    def __getattr__(self, item):
        try:
            return self.data[item]
        except KeyError:
            raise AttributeError(item) from None

    def __getstate__(self):
        return {"data": self.data, "encodings": self._encodings}

    def __setstate__(self, state):
        self.data = state["data"]
        self._encodings = state["encodings"]

    def keys(self):
        return self.data.keys()

    def values(self):
        return self.data.values()

    def items(self):
        return self.data.items()


class SwapsValues(UserDict):
    """``__getitem__`` answers something else than ``data`` holds."""

    def __getitem__(self, key):
        return self.data["other"] if key == "t" else self.data[key]


class Reversed(UserDict):
    def __iter__(self):
        return iter(list(self.data)[::-1])


class OwnItems(UserDict):
    def items(self):
        return [("made_up", self.data["t"]), ("t", 5)]


class DataProperty(UserDict):
    """``self.data`` is a property: the instance dict's ``data`` is not what iteration reads."""

    def __init__(self, data):
        super().__init__(data)
        self.__dict__["data"] = {"hidden": t(9)}  # a decoy

    @property
    def data(self):
        return self.__dict__["_real"]

    @data.setter
    def data(self, value):
        self.__dict__["_real"] = value


class ItemsView(dict):
    """A dict subclass whose ``items`` is dict's own: the walk reads the dict itself."""


def _with(cls, extra=None):
    ud = cls({"t": t(2), "other": t(3), "n": 1, "nested": {"x": t(4)}})
    if extra:
        extra(ud)
    return ud


def _shadowed(ud):
    ud.items = lambda: [("shadow", ud.data["t"])]


def _ordered(ud):
    ud.data = OrderedDict(ud.data)
    ud.data.move_to_end("t")  # iteration order is no longer the dict storage order


def _no_data(ud):
    del ud.__dict__["data"]


CASES = {
    "userdict": lambda: _with(UserDict),
    "plain_subclass": lambda: _with(Plain),
    "batch_encoding": lambda: _with(BatchEncodingLike),
    "getitem_override": lambda: _with(SwapsValues),
    "iter_override": lambda: _with(Reversed),
    "items_override": lambda: _with(OwnItems),
    "data_property": lambda: DataProperty({"t": t(2), "n": 1}),
    "items_shadowed_on_instance": lambda: _with(Plain, _shadowed),
    "data_is_an_ordered_dict": lambda: _with(Plain, _ordered),
    "dict_subclass": lambda: ItemsView({"t": t(2), "n": 1}),
    "empty": lambda: Plain(),
}


@pytest.mark.parametrize("only_tensors", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_find_leaves_in_userdict_subclasses(ref, fast, case, only_tensors):
    obj = {"a": CASES[case](), "b": [CASES[case]()]}
    snaps = [leaves_snap(impl.locator.Locator.find_leaves(obj, only_tensors=only_tensors)) for impl in (ref, fast)]
    assert snaps[1] == snaps[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_inputs_over_userdict_subclasses(ref, fast, case):
    described = []
    for impl in (ref, fast):
        md = impl.sample_metadata.SampleMetadata.from_inputs({"x": CASES[case]()}, strict=True)
        described.append([(loc.display_path, list(spec.shape)) for loc, spec in md.tensor_data])
    assert described[1] == described[0]


def test_a_userdict_without_data_raises_alike(ref, fast):
    errors = []
    for impl in (ref, fast):
        try:
            list(impl.locator.Locator.find_leaves({"x": _with(Plain, _no_data)}))
        except Exception as exc:  # noqa: BLE001 - the exception type is the observable
            errors.append(type(exc))
    assert errors[1] is errors[0] is AttributeError


def test_a_class_changed_after_a_walk_is_walked_as_changed(ref, fast):
    class Late(UserDict):
        pass

    obj = {"x": _with(Late)}
    snaps = []
    for impl in (ref, fast):
        before = leaves_snap(impl.locator.Locator.find_leaves(obj))
        Late.__getitem__ = lambda self, key: self.data["other"]
        try:
            after = leaves_snap(impl.locator.Locator.find_leaves(obj))
        finally:
            del Late.__getitem__
        snaps.append((before, after))
    assert snaps[1] == snaps[0]
    assert snaps[0][0] != snaps[0][1]
