"""The walk against the reference where Python code runs in the middle of a walk.

- The cycle check compares only containers the walk keeps alive: a container made fresh by a getter or an
  `__iter__` (a `UserDict` whose walk holds only its `data`) is freed as soon as nothing holds it, and the next
  fresh one may take its address while the first is still on the path.
- What the walk decided from an object's layout when it opened it (fields read straight from `__dict__`, a
  `UserDict` read through its `data`, an instance layout remembered for a class) is checked again after Python code
  ran: a getter may replace `obj.__dict__`, assign `obj.__class__`, add a property to the class or replace
  `UserDict.data` / `__getitem__` before the next field is read.

Each case builds fresh objects for each implementation (the getters change them) and compares the metadata, the
leaves and the outcome with the reference's.
"""

from __future__ import annotations

from collections import UserDict

import pytest
import torch
from parity import canon, md_snap, outcome


def t(*shape):
    return torch.zeros(*shape)


def described(impl, build, strict=True):
    """`from_inputs` of `build()` (fresh objects) and `find_leaves` of another `build()`, in plain form."""

    def run():
        md = impl.sample_metadata.SampleMetadata.from_inputs(build(), strict=strict)
        snap = md_snap(impl, md)
        leaves = [(loc.display_path, canon(v)) for loc, v in impl.locator.Locator.find_leaves(build())]
        return snap, leaves

    return outcome(run)


def assert_same(ref, fast, build, strict=True):
    theirs = described(ref, build, strict)
    assert theirs[0] == "ok", theirs
    assert described(fast, build, strict) == theirs


def shapes(impl, build):
    md = impl.sample_metadata.SampleMetadata.from_inputs(build(), strict=True)
    return [list(spec.shape) for _, spec in md.tensor_data]


# ---------------------------------------------------------------------- fresh containers, reused addresses


class FreshUserDicts(list):
    """A list whose items are walked as fresh `UserDict` copies (freed once walked)."""

    def __iter__(self):
        for x in list.__iter__(self):
            yield UserDict(x)


def nested_fresh(depth=4, width=2):
    node: object = {"t": t(1)}
    for level in range(depth):
        node = FreshUserDicts([{"child": node, "t": t(level + 2)} for _ in range(width)])
    return {"arg": node}


@pytest.mark.parametrize("strict", [True, False])
def test_fresh_userdicts_from_iter_are_no_cycle(ref, fast, strict):
    assert_same(ref, fast, nested_fresh, strict)
    for _ in range(20):  # every call, not by chance
        fast.sample_metadata.SampleMetadata.from_inputs(nested_fresh(), strict=strict)


class FreshHolder:
    """A registered type whose `d` getter returns a fresh `UserDict` each time."""

    d = None

    def __init__(self, child):
        self._child = child

    def __getattribute__(self, name):
        if name == "d":
            child = object.__getattribute__(self, "_child")
            return UserDict({"t": t(2), "child": child})
        return object.__getattribute__(self, name)


def test_fresh_userdict_from_a_getter_is_no_cycle(ref, fast, registry):
    registry.register(FreshHolder)

    def build():
        return {"h": FreshHolder(FreshHolder(FreshHolder(None)))}

    assert_same(ref, fast, build)
    for _ in range(20):
        fast.sample_metadata.SampleMetadata.from_inputs(build(), strict=True)


def test_a_real_cycle_through_a_fresh_userdict_is_still_found(fast, registry):
    registry.register(FreshHolder)
    h = FreshHolder(None)
    object.__setattr__(h, "_child", h)  # h.d["child"] is h
    with pytest.raises(ValueError, match="cyclic structure"):
        fast.sample_metadata.SampleMetadata.from_inputs({"h": h}, strict=True)


# ---------------------------------------------------------------------- layouts checked after Python ran


class ReplacesDict:
    """A non-data descriptor (kept as a field: neither a property nor callable) whose getter replaces the instance's
    `__dict__`."""

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        obj.__dict__ = {"b": t(5, 5, 5), "c": 7}
        return t(1)


class AddsProperty:
    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        type(obj).b = property(lambda self: t(5, 5, 5))
        return t(1)


class SwapsClass:
    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        obj.__class__ = obj.other
        return t(1)


def test_getter_that_replaces_the_instance_dict(ref, fast, registry):
    class U:
        a = ReplacesDict()

        def __init__(self):
            self.b = t(2)
            self.c = 3

    registry.register(U)
    assert_same(ref, fast, lambda: {"u": U()})
    assert shapes(fast, lambda: {"u": U()}) == [[1], [5, 5, 5]]


def _registered_class_adding_a_property(registry) -> type:
    """A new registered class whose getter ``a`` adds a property to it (``AddsProperty``)."""

    class U:
        a = AddsProperty()

        def __init__(self):
            self.b = t(2)

    registry.register(U)
    return U


def test_getter_that_adds_a_property_to_the_class(ref, fast, registry):
    def build():
        U = _registered_class_adding_a_property(registry)
        # the second instance is opened after the first one's getter changed the class
        return {"u": U(), "v": [U(), U()]}

    assert_same(ref, fast, build)
    assert [2] not in shapes(fast, build)


def test_getter_that_assigns_the_class(ref, fast, registry):
    class Other:
        a = None

        @property
        def b(self):
            return t(5, 5, 5)

    class U:
        a = SwapsClass()
        other = Other

        def __init__(self):
            self.b = t(2)

    registry.register(U)
    registry.register(Other)
    assert_same(ref, fast, lambda: {"u": U()})


def test_same_layout_instances_after_a_class_change(ref, fast, registry):
    """Instances laid out alike share one remembered layout; a getter of the first changes the class."""

    def build():
        U = _registered_class_adding_a_property(registry)
        return {"xs": [U() for _ in range(3)]}

    assert_same(ref, fast, build)
    assert_same(ref, fast, build)  # again, with the layouts a first walk left behind


class Mutates(list):
    """A list whose walk runs `action` first."""

    def __init__(self, items, action):
        super().__init__(items)
        self.action = action

    def __iter__(self):
        self.action()
        return list.__iter__(self)


class PlainUD(UserDict):
    pass


def test_userdict_data_replaced_mid_walk(ref, fast):
    def build():
        ud = PlainUD()
        ud.data = {"a": Mutates([t(1)], lambda: setattr(ud, "data", {"a": 0, "b": t(5, 5, 5)})), "b": t(2)}
        return {"ud": ud}

    assert_same(ref, fast, build)
    assert shapes(fast, build) == [[1], [5, 5, 5]]


def test_userdict_getitem_replaced_mid_walk(ref, fast):
    def build():
        class UD(UserDict):
            pass

        def patch():
            UD.__getitem__ = lambda self, key: t(5, 5, 5)

        return {"ud": UD({"a": Mutates([t(1)], patch), "b": t(2), "c": t(3)})}

    assert_same(ref, fast, build)
    assert shapes(fast, build) == [[1], [5, 5, 5], [5, 5, 5]]


def test_userdict_data_mutated_mid_walk_raises_alike(ref, fast):
    def build():
        ud = PlainUD({"b": t(2)})
        ud.data = {"a": Mutates([t(1)], lambda: ud.data.update(x=1)), "b": t(2)}
        return {"ud": ud}

    theirs = described(ref, build)
    assert theirs == ("raise", "RuntimeError")
    assert described(fast, build) == theirs
