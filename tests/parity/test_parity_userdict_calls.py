"""The Python code a walk runs on ``UserDict`` subclasses is the reference's: every method the reference calls
(``items`` above all, and whatever that calls) is called as often, with the same results, and side effects
happen alike; the walk reads ``data`` directly only where the reference's call runs nothing but
``return self.data.items()`` on the instance's own dict (transformers' ``BatchEncoding``)."""

from __future__ import annotations

from collections import Counter, OrderedDict, UserDict
from collections.abc import ItemsView

import pytest
import torch
from parity import leaves_snap


def t(*shape):
    return torch.zeros(*shape)


def _data():
    return {"t": t(2), "other": t(3), "n": 1, "nested": {"x": t(4)}}


def counted(name: str):
    """UserDict's method ``name``, done on ``self.data``, counting its calls in the class's ``calls``."""

    def method(self, *args):
        type(self).calls[name] += 1
        return getattr(self.data, name)(*args)

    method.__name__ = method.__qualname__ = name
    return method


class Counted(UserDict):
    """Counts the calls of the methods a walk might use; ``items`` is ``BatchEncoding``'s."""

    calls: Counter = Counter()
    items = counted("items")
    keys = counted("keys")
    values = counted("values")
    __iter__ = counted("__iter__")
    __getitem__ = counted("__getitem__")
    __len__ = counted("__len__")


class DataItems(UserDict):
    """``BatchEncoding``'s shape: ``items`` is ``return self.data.items()``; the others count."""

    calls: Counter = Counter()
    keys = counted("keys")
    __iter__ = counted("__iter__")
    __getitem__ = counted("__getitem__")

    def items(self):
        return self.data.items()

    def __getattr__(self, name):
        type(self).calls["__getattr__"] += 1
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None


class CountingGetattribute(DataItems):
    calls: Counter = Counter()

    def __getattribute__(self, name):
        type(self).calls["__getattribute__:" + name] += 1
        return super().__getattribute__(name)


class DataProperty(DataItems):
    calls: Counter = Counter()

    @property
    def data(self):
        type(self).calls["data"] += 1
        return self.__dict__["_real"]

    @data.setter
    def data(self, value):
        self.__dict__["_real"] = value


class DataPropertyWithDecoy(DataProperty):
    """The instance dict holds a ``data`` entry too, which the property hides."""

    calls: Counter = Counter()

    def __init__(self, data):
        super().__init__(data)
        self.__dict__["data"] = {"decoy": t(9)}


class DataClassAttribute(DataItems):
    """A class attribute named ``data`` (not a descriptor): the instance's entry still wins."""

    calls: Counter = Counter()
    data = {"class_level": t(7)}


class CountingDict(dict):
    calls: Counter = Counter()

    def items(self):
        CountingDict.calls["items"] += 1
        return super().items()


class ItemsAsList(DataItems):
    calls: Counter = Counter()

    def items(self):
        type(self).calls["items"] += 1
        return list(self.data.items())[::-1]


class ItemsAsGenerator(DataItems):
    calls: Counter = Counter()

    def items(self):
        type(self).calls["items"] += 1
        yield from self.data.items()


class ItemsAsView(DataItems):
    calls: Counter = Counter()

    def items(self):
        type(self).calls["items"] += 1
        return ItemsView(self)


class VarargsItems(DataItems):
    """Same body with ``*args``: not recognised, so called (the result is the same)."""

    calls: Counter = Counter()

    def items(self, *args):
        return self.data.items()


class OtherAttribute(DataItems):
    """``return self.store.items()``: another attribute, another dict."""

    calls: Counter = Counter()

    def __init__(self, data=None):
        super().__init__(data)
        self.store = {"s": t(5)}

    def items(self):
        return self.store.items()


_STATIC = {"static": t(6)}


class StaticItems(DataItems):
    calls: Counter = Counter()
    items = staticmethod(lambda: _STATIC.items())


class SubOfDataItems(DataItems):
    """A plain subclass of a ``BatchEncoding``-like class."""

    calls: Counter = Counter()


def _counting_data(ud):
    ud.data = CountingDict(ud.data)


def _ordered_data(ud):
    ud.data = OrderedDict(ud.data)
    ud.data.move_to_end("t")


def _shadowed(ud):
    calls = type(ud).calls

    def items():
        calls["shadow"] += 1
        return [("shadow", 1)]

    ud.items = items


CASES = {
    "counted": (Counted, None),
    "data_items": (DataItems, None),
    "data_items_subclass": (SubOfDataItems, None),
    "getattribute_override": (CountingGetattribute, None),
    "data_property": (DataProperty, None),
    "data_property_with_decoy": (DataPropertyWithDecoy, None),
    "data_class_attribute": (DataClassAttribute, None),
    "data_is_a_counting_dict": (DataItems, _counting_data),
    "data_is_an_ordered_dict": (DataItems, _ordered_data),
    "items_shadowed_on_instance": (DataItems, _shadowed),
    "items_returns_a_list": (ItemsAsList, None),
    "items_is_a_generator": (ItemsAsGenerator, None),
    "items_returns_an_items_view": (ItemsAsView, None),
    "varargs_items": (VarargsItems, None),
    "other_attribute": (OtherAttribute, None),
    "static_items": (StaticItems, None),
}


def _make(case):
    cls, extra = CASES[case]
    ud = cls(_data())
    if extra:
        extra(ud)
    return ud


def _reset():
    for cls, _ in CASES.values():
        cls.calls.clear()
    CountingDict.calls.clear()


def _calls(case):
    return dict(CASES[case][0].calls) | {"dict:" + k: v for k, v in CountingDict.calls.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_walks_call_what_the_reference_calls(ref, fast, case):
    seen = []
    obj = {"a": _make(case), "b": [_make(case), (_make(case),)]}
    for impl in (ref, fast):
        _reset()
        leaves = leaves_snap(impl.locator.Locator.find_leaves(obj))
        after_find = _calls(case)
        _reset()
        md = impl.sample_metadata.SampleMetadata.from_inputs(obj, strict=True)
        described = [(loc.display_path, list(spec.shape)) for loc, spec in md.tensor_data]
        seen.append((leaves, after_find, described, _calls(case)))
    assert seen[1] == seen[0]


def test_the_bench_workload_calls_nothing_the_reference_does_not(ref, fast):
    """``BatchEncoding`` (benchmarks) with counting keys/values/__getitem__/__getattr__: none is called."""
    for impl in (ref, fast):
        obj = {"inputs": DataItems({"input_ids": t(8, 128), "mask": t(8, 128)}), "flag": True}
        DataItems.calls.clear()
        impl.sample_metadata.SampleMetadata.from_inputs(obj, strict=True)
        assert DataItems.calls == Counter()


def _counting_items(self):
    _counting_items.calls += 1
    return self.data.items()


_counting_items.calls = 0


@pytest.mark.parametrize("change", ["code", "class_attribute", "base_class"])
def test_items_changed_after_a_walk_is_called(ref, fast, change):
    """Walks after the class's ``items`` (or its code, or a base class) changed run the new code, as the
    reference's do."""

    class Base(UserDict):
        pass

    class Late(Base):
        def items(self):
            return self.data.items()

    original = Late.__dict__["items"]
    original_code = original.__code__
    counts = []
    obj = {"x": Late(_data())}
    for impl in (ref, fast):
        before = leaves_snap(impl.locator.Locator.find_leaves(obj))
        _counting_items.calls = 0
        if change == "code":
            original.__code__ = _counting_items.__code__
        elif change == "class_attribute":
            Late.items = _counting_items
        else:
            Base.data = property(lambda self: _STATIC)
        try:
            after = leaves_snap(impl.locator.Locator.find_leaves(obj))
        finally:
            original.__code__ = original_code
            Late.items = original
            if change == "base_class":
                del Base.data
        counts.append((before, after, _counting_items.calls))
    assert counts[1] == counts[0]
    assert counts[0][0] != counts[0][1] if change == "base_class" else counts[0][2] == 1


def test_a_data_items_class_without_data_raises_alike(ref, fast):
    class NoData(UserDict):
        def items(self):
            return self.data.items()

    errors = []
    for impl in (ref, fast):
        ud = NoData(_data())
        del ud.__dict__["data"]
        with pytest.raises(AttributeError) as info:
            list(impl.locator.Locator.find_leaves({"x": ud}))
        errors.append(str(info.value))
    assert errors[1] == errors[0]


def test_a_recursive_getattr_without_data_raises_alike(ref, fast):
    """``BatchEncoding``'s own ``__getattr__`` reads ``self.data``: without ``data`` it recurses."""
    for impl in (ref, fast):
        ud = DataItems(_data())
        del ud.__dict__["data"]
        with pytest.raises(RecursionError):
            list(impl.locator.Locator.find_leaves({"x": ud}))


# ------------------------------------------------------------------ which classes the walk reads directly


def _items_variants():
    def documented(self):
        """The items."""
        return self.data.items()

    def other_name(this):
        return this.data.items()

    return documented, other_name


def test_data_items_code_recognises_the_batch_encoding_body():
    from aitune_fast._mapping import data_items_code

    for func in _items_variants():
        cls = type("C", (UserDict,), {"items": func})
        assert data_items_code(cls) == (func, func.__code__)
    assert data_items_code(DataItems) is not None
    assert data_items_code(SubOfDataItems) is not None
    assert data_items_code(DataClassAttribute) is None  # `data` in the class
    assert data_items_code(DataProperty) is None
    assert data_items_code(CountingGetattribute) is None
    for cls in (Counted, ItemsAsList, ItemsAsGenerator, ItemsAsView, VarargsItems, OtherAttribute, StaticItems):
        assert data_items_code(cls) is None, cls
    assert data_items_code(UserDict) is None  # Mapping.items: the plain path handles it


def test_data_items_code_rejects_look_alikes():
    from aitune_fast._mapping import data_items_code

    def keys_instead(self):
        return self.data.keys()

    def with_default(self, other=None):
        return self.data.items()

    def kw_only(self, *, other=None):
        return self.data.items()

    cell = None

    def closure(self):
        return self.data.items() if cell is None else cell

    for func in (keys_instead, with_default, kw_only, closure):
        assert data_items_code(type("C", (UserDict,), {"items": func})) is None, func.__name__
    assert data_items_code(type("C", (UserDict,), {"items": classmethod(lambda cls: {}.items())})) is None
