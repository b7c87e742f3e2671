"""Hypothesis-driven differential fuzzing of hostile inputs, run in a child process by
``test_robustness_hypothesis.py`` so that a crash fails the test instead of killing pytest.

A drawn *recipe* (plain data) is built twice into fresh objects, once for the reference and once for aitune_fast,
because hostile getters change the input while it is walked. Recipes mix dicts, lists, tuples, dict subclasses
whose ``items()`` repeat keys, registered user types whose getters count calls, raise, or replace keys of an
enclosing dict, proxies that claim the tensor class, tensor subclasses with list or numpy shapes, and odd keys
and leaves (lone surrogates, class objects, numpy scalars, NaN, huge ints, bytes, ``str`` subclasses).
Both implementations must give the same result or raise the same exception type.
"""

from __future__ import annotations

import collections
import json
import weakref
from unittest import mock

import numpy as np
import torch
from impls import fast as load_fast
from impls import ref as load_ref
from parity import canon, md_snap

# --------------------------------------------------------------------------------------------- hostile types


class RepeatingItems(dict):
    """``items()`` yields every item twice."""

    def items(self):
        yield from super().items()
        yield from super().items()


READS: collections.Counter = collections.Counter()


class Getters:
    """A registered user type whose attribute reads are counted, may raise, or replace a key of ``_target``."""

    def __getattribute__(self, name):
        if not name.startswith("_"):
            READS[name] += 1
            act = object.__getattribute__(self, "_acts").get(name)
            if act == "raise":
                raise KeyError(name)
            if act is not None:
                target = object.__getattribute__(self, "_target")
                if target is not None:
                    drop, add = act
                    target.pop(drop, None)
                    target[add] = 0
        return object.__getattribute__(self, name)


class ForwardingProxy:
    """Forwards attributes and claims the wrapped object's class, as wrapt.ObjectProxy does."""

    def __init__(self, wrapped):
        object.__setattr__(self, "_wrapped", wrapped)

    @property
    def __class__(self):
        return type(object.__getattribute__(self, "_wrapped"))

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_wrapped"), name)


class ListShape(torch.Tensor):
    @property
    def shape(self):
        return list(super().shape)


class NumpyShape(torch.Tensor):
    @property
    def shape(self):
        return tuple(np.int64(d) for d in super().shape)


class OddStr(str):
    def __str__(self):
        return "odd:" + str.__str__(self)

    def __format__(self, spec):
        return "fmt:" + str.__str__(self)


class RaisingEq:
    """Hashable, but comparing it raises."""

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return self.n

    def __eq__(self, other):
        raise ValueError("no comparison")

    def __repr__(self):
        return f"RaisingEq({self.n})"


SURROGATES = ["w\udcff.bin", "\ud800", "a\udcffb", "\udc80\udcff"]
CLASSES = [int, float, torch.nn.Linear, dict, OddStr]


# --------------------------------------------------------------------------------------------- recipes


def strategies():
    from hypothesis import strategies as st

    text = st.one_of(
        st.sampled_from(["x", "y", "cache", "k0", "k1", "_p", "1a", "a b", "é"]),
        st.sampled_from(SURROGATES),
        st.text(max_size=4),
    )
    key = st.one_of(
        st.tuples(st.just("str"), text),
        st.tuples(st.just("int"), st.integers(-3, 3)),
        st.tuples(st.just("big"), st.sampled_from([2**70, -(2**64)])),
        st.tuples(st.just("cls"), st.integers(0, len(CLASSES) - 1)),
        st.tuples(st.just("oddstr"), text),
        st.tuples(st.just("bytes"), st.binary(max_size=3)),
        st.tuples(st.just("tuple"), st.tuples(st.integers(0, 2), text)),
        st.tuples(st.just("nan"), st.just(0)),
        st.tuples(st.just("none"), st.just(0)),
        st.tuples(st.just("float"), st.sampled_from([1.0, 0.5, -0.0])),
        st.tuples(st.just("npint"), st.integers(-2, 2)),
    )
    shape = st.lists(st.integers(0, 3), max_size=3)
    leaf = st.one_of(
        st.tuples(st.just("tensor"), shape, st.sampled_from(["float32", "int64", "bool"])),
        st.tuples(st.just("listshape"), shape),
        st.tuples(st.just("npshape"), shape),
        st.tuples(st.just("weakproxy"), shape),
        st.tuples(st.just("fwdproxy"), shape),
        st.tuples(st.just("mock"), shape),
        st.tuples(st.just("int"), st.integers(-(2**66), 2**66)),
        st.tuples(st.just("float"), st.floats(allow_nan=True, allow_infinity=True)),
        st.tuples(st.just("str"), text),
        st.tuples(st.just("oddstr"), text),
        st.tuples(st.just("cls"), st.integers(0, len(CLASSES) - 1)),
        st.tuples(st.just("npscalar"), st.sampled_from(["int64", "float32", "bool_"])),
        st.tuples(st.just("bytes"), st.binary(max_size=3)),
        st.tuples(st.just("none"), st.just(0)),
        st.tuples(st.just("set"), st.lists(st.integers(0, 3), max_size=3)),
        st.tuples(st.just("raising_eq"), st.integers(0, 3)),
    )

    def containers(children):
        entries = st.lists(st.tuples(key, children), max_size=4)
        return st.one_of(
            st.tuples(st.just("dict"), entries),
            st.tuples(st.just("repeating"), entries),
            st.tuples(st.just("list"), st.lists(children, max_size=4)),
            st.tuples(st.just("tuple"), st.lists(children, max_size=4)),
            st.tuples(
                st.just("getters"),
                st.lists(st.tuples(st.sampled_from(["a", "b", "c", "x\udcff"]), children), max_size=3),
                st.lists(
                    st.tuples(
                        st.sampled_from(["a", "b", "c"]),
                        st.one_of(st.just("raise"), st.tuples(st.sampled_from(["k0", "k1", "x"]), st.just("k9"))),
                    ),
                    max_size=2,
                ),
            ),
        )

    tree = st.recursive(leaf, containers, max_leaves=10)
    root = st.lists(st.tuples(st.tuples(st.just("str"), text), tree), max_size=4)
    return root


def build_key(k):
    kind, v = k
    if kind == "str":
        return v
    if kind == "int":
        return v
    if kind == "big":
        return v
    if kind == "cls":
        return CLASSES[v]
    if kind == "oddstr":
        return OddStr(v)
    if kind == "bytes":
        return bytes(v)
    if kind == "tuple":
        return tuple(v)
    if kind == "nan":
        return float("nan")
    if kind == "none":
        return None
    if kind == "float":
        return v
    if kind == "npint":
        return np.int64(v)
    raise AssertionError(kind)


def build(recipe, keep, enclosing=None):
    kind = recipe[0]
    if kind == "tensor":
        return torch.zeros(recipe[1], dtype=getattr(torch, recipe[2]))
    if kind == "listshape":
        return torch.zeros(recipe[1]).as_subclass(ListShape)
    if kind == "npshape":
        return torch.zeros(recipe[1]).as_subclass(NumpyShape)
    if kind in ("weakproxy", "fwdproxy"):
        t = torch.zeros(recipe[1])
        keep.append(t)
        return weakref.proxy(t) if kind == "weakproxy" else ForwardingProxy(t)
    if kind == "mock":
        m = mock.Mock(spec=torch.Tensor)
        m.shape = torch.Size(recipe[1])
        m.dtype = torch.float16
        return m
    if kind in ("int", "float", "none"):
        return None if kind == "none" else recipe[1]
    if kind == "str":
        return recipe[1]
    if kind == "oddstr":
        return OddStr(recipe[1])
    if kind == "cls":
        return CLASSES[recipe[1]]
    if kind == "npscalar":
        return getattr(np, recipe[1])(1)
    if kind == "bytes":
        return bytes(recipe[1])
    if kind == "set":
        return set(recipe[1])
    if kind == "raising_eq":
        return RaisingEq(recipe[1])
    if kind in ("dict", "repeating"):
        d = {} if kind == "dict" else RepeatingItems()
        for k, child in recipe[1]:
            try:
                d[build_key(k)] = build(child, keep, d)
            except TypeError:
                pass  # an unhashable key
        return d
    if kind in ("list", "tuple"):
        items = [build(child, keep, enclosing) for child in recipe[1]]
        return items if kind == "list" else tuple(items)
    if kind == "getters":
        g = Getters()
        object.__setattr__(g, "_target", enclosing)
        object.__setattr__(g, "_acts", dict(recipe[2]))
        for name, child in recipe[1]:
            object.__setattr__(g, name, build(child, keep, enclosing))
        return g
    raise AssertionError(kind)


def build_root(recipe, keep):
    root = {}
    for k, child in recipe:
        root[build_key(k)] = build(child, keep, root)
    return root


# --------------------------------------------------------------------------------------------- comparison


def result(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the exception type is what is compared
        return ("raise", type(exc))


def same_outcome(r, f, what):
    if r[0] == "raise":
        assert f[0] == "raise", f"{what}: the reference raised {r[1].__name__}, aitune_fast returned {f[1]!r}"
        assert issubclass(f[1], r[1]), f"{what}: {f[1].__name__} is not a {r[1].__name__}"
        return False
    assert f[0] == "ok", f"{what}: aitune_fast raised {f[1].__name__}, the reference returned {r[1]!r}"
    return True


def plain_snap(impl, md):
    """md_snap, or the exception type a part of it raises."""
    try:
        return ("ok", md_snap(impl, md))
    except Exception as exc:  # noqa: BLE001
        return ("raise", type(exc))


def check(recipe, strict, counts):
    ref, fast = load_ref(), load_fast()
    impls = (ref.sample_metadata.SampleMetadata, fast.SampleMetadata)
    locators = (ref.locator.Locator, fast.Locator)
    keeps = ([], [])
    mds = []
    reads = []
    for i, sm in enumerate(impls):
        READS.clear()
        mds.append(result(lambda sm=sm, i=i: sm.from_inputs(build_root(recipe, keeps[i]), strict=strict)))
        reads.append(dict(READS))
    counts["examples"] += 1
    if not same_outcome(mds[0], mds[1], "from_inputs"):
        counts["both raised"] += 1
        return
    if "npshape" not in repr(recipe):
        # known difference: a tensor whose sizes are not ints makes aitune_fast walk the argument again
        assert reads[1] == reads[0], f"getter calls differ: {reads[1]} != {reads[0]}"
    r, f = mds[0][1], mds[1][1]
    rs, fs = plain_snap(ref, r), plain_snap(fast, f)
    if same_outcome(rs, fs, "snapshot"):
        assert fs[1] == rs[1], "snapshots differ"
    # equality and hashing against a second build of the same recipe
    again = [
        result(lambda sm=sm, i=i: sm.from_inputs(build_root(recipe, keeps[i]), strict=strict))
        for i, sm in enumerate(impls)
    ]
    if same_outcome(again[0], again[1], "second from_inputs"):
        eq = [result(lambda x=x, y=y: x == y) for x, y in ((r, again[0][1]), (f, again[1][1]))]
        if same_outcome(eq[0], eq[1], "=="):
            assert eq[1][1] == eq[0][1], "== differs"
            if eq[0][1]:
                hr = result(lambda: (hash(r), hash(again[0][1])))
                hf = result(lambda: (hash(f), hash(again[1][1])))
                if same_outcome(hr, hf, "hash") and hr[1][0] == hr[1][1]:
                    assert hf[1][0] == hf[1][1], "equal metadata hash differently"
    # JSON: aitune_fast's own round trip, where it can encode the metadata
    try:
        text = f.to_json()
    except (TypeError, ValueError):
        counts["to_json refused"] += 1
    else:
        back = fast.SampleMetadata.from_json(text)
        json.loads(text)
        assert str(back) == str(f), "to_json round trip differs"
        counts["json round trips"] += 1
    # find_leaves on one shared object
    shared = build_root(recipe, keeps[0])
    leaves = [
        result(lambda L=L: [(loc.display_path, canon(loc.path), id(v)) for loc, v in L.find_leaves(shared)])
        for L in locators
    ]
    if same_outcome(leaves[0], leaves[1], "find_leaves"):
        assert leaves[1][1] == leaves[0][1], "find_leaves differs"


def fuzz(examples: int, seed: int) -> dict:
    """Run ``examples`` hypothesis examples; return counts (a failure raises, which fails the child)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    ref, fast = load_ref(), load_fast()
    for L in (ref.locator.Locator, fast.Locator):
        L.register_user_type(Getters)
    counts: collections.Counter = collections.Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed == 0,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategies(), st.booleans())
    def run(recipe, strict):
        check(recipe, strict, counts)

    if seed:
        run = __import__("hypothesis").seed(seed)(run)
    run()
    return dict(counts)
