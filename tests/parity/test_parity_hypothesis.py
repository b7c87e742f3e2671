"""Generated differential tests: random nested inputs, built once per implementation from a plain description.

A *description* is a tree of tuples (``("dict", [(key, child), ...])``, ``("tensor", dims, dtype, offset)``, ...).
``build(desc, batch_size, sample)`` turns it into fresh Python objects, so each implementation gets its own inputs
(user-type classes are shared plain classes).  Tensor dims are ``("s", n)`` static, ``("b", m)`` ``m * batch_size``
and ``("d", n)`` ``n + sample`` (dynamic), which lets a sequence of samples with changing batch sizes keep one
structure.  Set ``AITUNE_FAST_HYPOTHESIS_EXAMPLES`` to change the number of examples per test.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections import UserDict, namedtuple
from typing import ClassVar

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from parity import (
    arange_tensor,
    assert_no_aliasing,
    assert_no_shared_containers,
    assert_same_eq_hash_classes,
    assert_same_tree,
    canon,
    leaves_snap,
    md_snap,
    outcome,
    raised,
)

EXAMPLES = int(os.environ.get("AITUNE_FAST_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ------------------------------------------------------------------------------------------- shared plain classes

Pair = namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class DC1:
    registry_name: ClassVar[str] = "dc1"
    a: object = None


@dataclasses.dataclass
class DC2:
    b: object = None
    a: object = None


class RegUser:
    """Registered (all leaves): class attribute, property and method besides instance attributes."""

    kind = "reg"

    @property
    def prop(self):
        return "property"

    def method(self):
        return None


class TensorUser:
    """Registered with only_tensors=True."""

    label = 3


class PlainUser:
    """Not registered: a leaf."""

    def __repr__(self):
        return f"PlainUser{sorted(vars(self))}"


class IgnoredUser:
    """Ignored: neither walked nor returned."""

    def __repr__(self):
        return "IgnoredUser"


USER_CLASSES = {"reg": RegUser, "tensors": TensorUser, "plain": PlainUser, "ignored": IgnoredUser}


@pytest.fixture(scope="module", autouse=True)
def _user_types(ref, fast):
    for impl in (ref, fast):
        locator = impl.locator.Locator
        locator.register_user_type(RegUser)
        locator.register_user_type(TensorUser, only_tensors=True)
        locator.ignore_type(IgnoredUser)
    yield
    for impl in (ref, fast):
        locator = impl.locator.Locator
        for cls in USER_CLASSES.values():
            locator.unregister_user_type(cls)
            locator.unignore_type(cls)


# ------------------------------------------------------------------------------------------- descriptions

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

TEXT = st.text(alphabet=st.sampled_from("ab Z1.e-_\n\té日"), max_size=6)
IDENT_KEYS = st.sampled_from(["x", "input_ids", "mask", "values", "class", "kind", "a_b"])
DICT_KEYS = st.one_of(
    IDENT_KEYS,
    TEXT,
    st.integers(-2, 3),
    st.booleans(),
    st.none(),
    st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"])),
)
ATTR_NAMES = st.sampled_from(["a", "b", "Z", "value", "kind", "label", "_hidden"])


def dims(batchable: bool):
    static = st.tuples(st.just("s"), st.integers(0, 3))
    if not batchable:
        return st.lists(static, max_size=5).map(tuple)
    dim = st.one_of(static, st.tuples(st.just("b"), st.integers(1, 2)), st.tuples(st.just("d"), st.integers(1, 3)))

    def at_most_two_varying(items):
        varying = 0
        out = []
        for kind, n in items:
            if kind != "s":
                varying += 1
                if varying > 2:
                    kind, n = "s", 1
            out.append((kind, n))
        return tuple(out)

    return st.lists(dim, max_size=5).map(at_most_two_varying)


def tensors(batchable: bool):
    return st.tuples(st.just("tensor"), dims(batchable), st.sampled_from(sorted(DTYPES)), st.integers(0, 3))


SCALARS = st.one_of(
    st.tuples(st.just("int"), st.one_of(st.integers(-1000, 1000), st.just(10**20))),
    st.tuples(st.just("float"), st.floats(width=32)),
    st.tuples(st.just("str"), TEXT),
    st.just(("none",)),
    st.tuples(st.just("bool"), st.booleans()),
    st.tuples(st.just("set"), st.frozensets(st.integers(-3, 3), max_size=3)),
)


def trees(batchable: bool, max_leaves: int = 12):
    leaf = st.one_of(tensors(batchable), tensors(batchable), SCALARS)

    def extend(children):
        return st.one_of(
            st.tuples(st.just("dict"), st.lists(st.tuples(DICT_KEYS, children), max_size=4)),
            st.tuples(st.just("userdict"), st.lists(st.tuples(IDENT_KEYS, children), max_size=3)),
            st.tuples(st.just("list"), st.lists(children, max_size=4)),
            st.tuples(st.just("tuple"), st.lists(children, max_size=4)),
            st.tuples(st.just("namedtuple"), st.tuples(children, children)),
            st.tuples(st.just("dc1"), st.tuples(children)),
            st.tuples(st.just("dc2"), st.tuples(children, children)),
            st.tuples(
                st.just("user"),
                st.sampled_from(sorted(USER_CLASSES)),
                st.lists(st.tuples(ATTR_NAMES, children), max_size=3),
            ),
        )

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def roots(batchable: bool):
    """Mostly forward-parameter dicts (including ``cache_position``), sometimes any other root."""
    params = st.sampled_from(["x", "input_ids", "attention_mask", "cache_position", "past_key_values", "my arg", 0])
    return st.one_of(
        st.tuples(st.just("dict"), st.lists(st.tuples(params, trees(batchable)), max_size=5)),
        st.tuples(st.just("dict"), st.lists(st.tuples(params, trees(batchable)), max_size=5)),
        trees(batchable),
    )


def batched_roots():
    """Forward-parameter dicts whose first argument is a tensor with a leading batch axis, plus anything else."""
    first = st.tuples(
        st.just("tensor"),
        st.tuples(st.tuples(st.just("b"), st.integers(1, 2))).flatmap(lambda head: dims(True).map(lambda d: head + d)),
        st.sampled_from(sorted(DTYPES)),
        st.integers(0, 3),
    )
    return st.tuples(first, roots(batchable=True)).map(
        lambda pair: ("dict", [("batched", pair[0])] + (pair[1][1] if pair[1][0] == "dict" else [("rest", pair[1])]))
    )


def build(desc, batch_size: int = 1, sample: int = 0):
    """Fresh Python objects for ``desc``."""
    kind = desc[0]
    if kind == "tensor":
        _, tensor_dims, dtype, offset = desc
        shape = []
        for dim_kind, n in tensor_dims:
            shape.append(n if dim_kind == "s" else n * batch_size if dim_kind == "b" else n + sample)
        tensor = arange_tensor(tuple(shape), torch.int64)
        if DTYPES[dtype] == torch.bool:
            return (tensor + offset) % 2 == 1
        return ((tensor + offset) % 100).to(DTYPES[dtype])
    if kind in ("int", "float", "str", "bool"):
        return desc[1]
    if kind == "none":
        return None
    if kind == "set":
        return set(desc[1])
    children = [(k, build(c, batch_size, sample)) for k, c in desc[1]] if kind in ("dict", "userdict") else None
    if kind == "dict":
        return dict(children)
    if kind == "userdict":
        return UserDict(dict(children))
    if kind == "list":
        return [build(c, batch_size, sample) for c in desc[1]]
    if kind == "tuple":
        return tuple(build(c, batch_size, sample) for c in desc[1])
    if kind == "namedtuple":
        return Pair(*(build(c, batch_size, sample) for c in desc[1]))
    if kind == "dc1":
        return DC1(*(build(c, batch_size, sample) for c in desc[1]))
    if kind == "dc2":
        return DC2(*(build(c, batch_size, sample) for c in desc[1]))
    if kind == "user":
        obj = USER_CLASSES[desc[1]]()
        for name, child in desc[2]:
            setattr(obj, name, build(child, batch_size, sample))
        return obj
    raise AssertionError(desc)


def mutate(draw, desc):
    """A variant of ``desc``: most nodes kept, some tensors resized/re-ranked/re-typed, values changed, keys dropped."""
    kind = desc[0]
    choice = draw(st.integers(0, 9))
    if kind == "tensor":
        _, tensor_dims, dtype, offset = desc
        if choice == 0:
            return ("tensor", (*tensor_dims, ("s", 1)), dtype, offset)
        if choice == 1 and tensor_dims:
            return ("tensor", tensor_dims[:-1], dtype, offset)
        if choice in (2, 3):
            return ("tensor", tuple(("s", draw(st.integers(0, 3))) for _ in tensor_dims), dtype, offset)
        if choice == 4:
            return ("tensor", tensor_dims, draw(st.sampled_from(sorted(DTYPES))), offset)
        return desc
    if kind in ("int", "float", "str", "bool", "none", "set"):
        return draw(SCALARS) if choice < 2 else desc
    if kind in ("dict", "userdict"):
        items = [(k, mutate(draw, c)) for k, c in desc[1]]
        if choice == 0:
            items.reverse()
        elif choice == 1 and items:
            items.pop()
        return (kind, items)
    if kind in ("list", "tuple"):
        items = [mutate(draw, c) for c in desc[1]]
        if choice == 0 and items:
            items.pop()
        return (kind, items)
    if kind in ("namedtuple", "dc1", "dc2"):
        return (kind, tuple(mutate(draw, c) for c in desc[1]))
    if kind == "user":
        return (kind, desc[1], [(k, mutate(draw, c)) for k, c in desc[2]])
    raise AssertionError(desc)


# ------------------------------------------------------------------------------------------- helpers


def guarded(fn):
    """(result, None) or (None, exception)."""
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001
        return None, exc


def assert_same_failure(ref_exc, fast_exc):
    if ref_exc is None:
        assert fast_exc is None, f"aitune_fast raised {type(fast_exc).__name__}: {fast_exc}"
    else:
        assert fast_exc is not None, f"aitune_fast did not raise, the reference raised {type(ref_exc).__name__}"
        assert isinstance(fast_exc, type(ref_exc)), f"{type(fast_exc).__name__} is not a {type(ref_exc).__name__}"


def SM(impl):  # noqa: N802
    return impl.sample_metadata.SampleMetadata


def specs_state(md):
    return [canon([s.shape, s.min_shape, s.max_shape, s.dtype, s._bs_multipliers]) for s in md.tensor_specs]


def ESM(impl):  # noqa: N802
    return impl.exact_sample_metadata.ExactSampleMetadata


# ------------------------------------------------------------------------------------------- properties


@SETTINGS
@given(desc=roots(batchable=False), strict=st.booleans(), batch_size=st.sampled_from([None, 1, 2, 3]))
def test_generated_inputs_describe_json_serialise_and_query_alike(ref, fast, desc, strict, batch_size):
    for factory in ("from_inputs", "from_outputs"):
        ref_md, ref_exc = guarded(lambda factory=factory: getattr(SM(ref), factory)(build(desc), strict, batch_size))
        fast_md, fast_exc = guarded(lambda factory=factory: getattr(SM(fast), factory)(build(desc), strict, batch_size))
        assert_same_failure(ref_exc, fast_exc)
        if ref_exc is not None:
            continue
        assert md_snap(fast, fast_md) == md_snap(ref, ref_md)
        ref_again = SM(ref).from_dict(ref_md.to_dict())
        fast_dict, fast_exc = guarded(fast_md.to_dict)
        if fast_exc is not None:
            # a deliberate difference: no pickle, so leaves outside the plain-data types are refused
            assert isinstance(fast_exc, TypeError) and "cannot be encoded" in str(fast_exc)
            continue
        fast_again = SM(fast).from_dict(fast_dict)
        assert md_snap(fast, fast_again) == md_snap(ref, ref_again) == md_snap(ref, ref_md)
        assert (fast_again == fast_md) == (ref_again == ref_md)
    ref_exact, ref_exc = guarded(lambda: ESM(ref).from_inputs(build(desc)))
    fast_exact, fast_exc = guarded(lambda: ESM(fast).from_inputs(build(desc)))
    assert_same_failure(ref_exc, fast_exc)
    if ref_exc is None:
        assert md_snap(fast, fast_exact) == md_snap(ref, ref_exact)


@SETTINGS
@given(desc=roots(batchable=False), only_tensors=st.booleans(), is_output=st.booleans())
def test_generated_inputs_locate_get_and_set_leaves_alike(ref, fast, desc, only_tensors, is_output):
    obj = build(desc)
    kwargs = {"only_tensors": only_tensors, "is_output": is_output}
    ref_leaves = list(ref.locator.Locator.find_leaves(obj, **kwargs))
    fast_leaves = list(fast.locator.Locator.find_leaves(obj, **kwargs))
    assert leaves_snap(fast_leaves) == leaves_snap(ref_leaves)
    for (ref_loc, value), (fast_loc, _) in zip(ref_leaves, fast_leaves, strict=True):
        assert fast_loc.get_value(obj) is ref_loc.get_value(obj) is value
    assert_same_eq_hash_classes([loc for loc, _ in ref_leaves], [loc for loc, _ in fast_leaves])
    for index in range(len(ref_leaves)):
        ref_obj, fast_obj = build(desc), build(desc)
        ref_result, ref_exc = guarded(lambda i=index, o=ref_obj: ref_leaves[i][0].set_value(o, "SENTINEL"))
        fast_result, fast_exc = guarded(lambda i=index, o=fast_obj: fast_leaves[i][0].set_value(o, "SENTINEL"))
        assert_same_failure(ref_exc, fast_exc)
        if ref_exc is None:
            assert_same_tree(fast_result, ref_result)
            assert_same_tree(fast_obj, ref_obj)
            assert (fast_result is fast_obj) == (ref_result is ref_obj)


@st.composite
def variants(draw):
    base = draw(roots(batchable=False))
    return [base] + [mutate(draw, base) for _ in range(draw(st.integers(2, 4)))]


@SETTINGS
@given(descs=variants(), strict=st.booleans())
def test_generated_variants_have_the_same_equality_hash_and_merge_outcomes(ref, fast, descs, strict):
    factories = {
        "from_inputs": lambda impl: lambda x: SM(impl).from_inputs(x, strict=strict),
        "from_outputs": lambda impl: lambda x: SM(impl).from_outputs(x, strict=strict),
        "exact": lambda impl: ESM(impl).from_inputs,
    }
    for factory in factories.values():
        ref_make, fast_make = factory(ref), factory(fast)
        built = []  # (desc index, ref metadata, fast metadata)
        for index, desc in enumerate(descs):
            ref_md, ref_exc = guarded(lambda desc=desc, make=ref_make: make(build(desc)))
            fast_md, fast_exc = guarded(lambda desc=desc, make=fast_make: make(build(desc)))
            assert_same_failure(ref_exc, fast_exc)
            if ref_exc is None:
                built.append((index, ref_md, fast_md))
        assert_same_eq_hash_classes([r for _, r, _ in built], [f for _, _, f in built])
        for index, _, _ in built:
            for _, ref_other, fast_other in built:
                ref_md, fast_md = ref_make(build(descs[index])), fast_make(build(descs[index]))
                ref_exc = raised(lambda a=ref_md, b=ref_other: a.update_shapes_seen(b))
                fast_exc = raised(lambda a=fast_md, b=fast_other: a.update_shapes_seen(b))
                assert_same_failure(ref_exc, fast_exc)
                if ref_exc is not None:
                    assert str(fast_exc) == str(ref_exc)
                assert repr(fast_md) == repr(ref_md)
                assert specs_state(fast_md) == specs_state(ref_md)


@SETTINGS
@given(
    desc=st.one_of(batched_roots(), batched_roots(), roots(batchable=True)),
    batch_sizes=st.one_of(
        st.lists(st.integers(1, 4), min_size=2, max_size=4, unique=True),
        st.lists(st.integers(1, 4), min_size=2, max_size=4),
    ),
    via_context=st.booleans(),
    strict=st.booleans(),
    target=st.integers(1, 6),  # 0 and below are refused (test_parity_batch_edges.py)
    max_batch_size=st.integers(1, 8),
)
def test_generated_batch_size_sequences_learn_axes_and_batch_alike(
    ref, fast, desc, batch_sizes, via_context, strict, target, max_batch_size
):
    def observe(impl, batch_size, sample):
        inputs = build(desc, batch_size, sample)
        if not via_context:
            return SM(impl).from_inputs(inputs, strict=strict, batch_size=batch_size)
        context = impl.global_context
        with context.global_context:
            context.global_context.set(context.BATCH_SIZE_KEY, batch_size)
            return SM(impl).from_inputs(inputs, strict=strict)

    def learn(impl):
        first = observe(impl, batch_sizes[0], 0)
        snaps = []
        for sample, batch_size in enumerate(batch_sizes[1:], start=1):
            first.update_shapes_seen(observe(impl, batch_size, sample))
            snaps.append(md_snap(impl, first))
        return first, snaps

    ref_result, ref_exc = guarded(lambda: learn(ref))
    fast_result, fast_exc = guarded(lambda: learn(fast))
    assert_same_failure(ref_exc, fast_exc)
    event(f"learning raised {type(ref_exc).__name__}" if ref_exc else "learned")
    if ref_exc is not None:
        return
    (ref_md, ref_snaps), (fast_md, fast_snaps) = ref_result, fast_result
    event(f"tensors={bool(ref_md.tensor_specs)} batch axes={any(s.has_batch_axis() for s in ref_md.tensor_specs)}")
    assert fast_snaps == ref_snaps

    results = []
    for md in (ref_md, fast_md):
        inputs = build(desc, batch_sizes[0], 0)
        pristine = copy.deepcopy(inputs)
        result, exc = guarded(lambda md=md, inputs=inputs: md.make_batch(inputs, target))
        results.append((result, exc))
        if exc is None:
            assert_same_tree(inputs, pristine)
            assert_no_aliasing(result, inputs)
            assert_no_shared_containers(result, inputs)
    assert_same_failure(results[0][1], results[1][1])
    if results[0][1] is None:
        assert_same_tree(results[1][0], results[0][0])

    outcomes = []
    for impl, md in ((ref, ref_md), (fast, fast_md)):
        inputs = build(desc, batch_sizes[0], 0)
        exc = raised(lambda md=md, inputs=inputs: md.update_max_batch_size(inputs, max_batch_size))
        outcomes.append(
            (exc, md_snap(impl, md), outcome(lambda md=md: [s.get_max_batch_size() for s in md.tensor_specs]))
        )
    assert_same_failure(outcomes[0][0], outcomes[1][0])
    assert outcomes[1][1:] == outcomes[0][1:]
