"""OrderedDicts in arguments, side by side with the reference.

An ``OrderedDict`` is walked through its own ``items()`` (its order is its linked list's, not the dict's), and
that view yields each key once, so its metadata compares as fast as a dict's. A mapping whose ``items()`` is
anything else (here: an OrderedDict subclass whose ``items()`` yields every item twice) may repeat a key and is
compared entry by entry. Both kinds must describe, compare, hash and learn shapes as the reference does.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from parity import assert_same_eq_hash_classes, md_snap, outcome


class RepeatingOrderedItems(OrderedDict):
    """An OrderedDict whose ``items()`` yields every item twice."""

    def items(self):
        yield from super().items()
        yield from super().items()


class Output(OrderedDict):
    """An OrderedDict subclass that keeps ``OrderedDict.items`` (as transformers' ``ModelOutput`` does)."""


def reordered(**kw) -> OrderedDict:
    """An OrderedDict whose order (last key first) differs from the order its dict stores the keys in."""
    od = OrderedDict(kw)
    od.move_to_end(next(reversed(od)), last=False)
    return od


def both(ref, fast, make, **kw):
    return (
        ref.sample_metadata.SampleMetadata.from_inputs(make(), strict=True, **kw),
        fast.sample_metadata.SampleMetadata.from_inputs(make(), strict=True, **kw),
    )


def args(bs: int, cls=OrderedDict, n: int = 1, rank: int = 2) -> dict:
    shape = (bs,) + (3,) * (rank - 1)
    return {
        "input": cls(x=torch.zeros(shape), mask=torch.ones(bs, 4), n=n),
        "cache": cls(layer0=cls(key=torch.zeros(bs, 2, 8), value=torch.zeros(bs, 2, 8))),
    }


CASES = {
    "OrderedDict": lambda bs: args(bs),
    "OrderedDict subclass": lambda bs: args(bs, Output),
    "items twice": lambda bs: args(bs, RepeatingOrderedItems),
    "plain dict": lambda bs: args(bs, dict),
    "reordered": lambda bs: {"input": reordered(x=torch.zeros(bs, 3), mask=torch.ones(bs, 4), n=1)},
    "other value": lambda bs: args(bs, n=2),
    "other rank": lambda bs: args(bs, rank=3),
    "root OrderedDict": lambda bs: OrderedDict(args(bs)),
    "root reordered": lambda bs: reordered(**args(bs)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_describes_as_the_reference(ref, fast, case):
    r, f = both(ref, fast, lambda: CASES[case](2), batch_size=2)
    assert md_snap(fast, f) == md_snap(ref, r)


def test_equality_and_hash_classes_as_the_reference(ref, fast):
    pairs = [both(ref, fast, lambda c=c: c(2), batch_size=2) for c in CASES.values()]
    # each again, built from fresh objects: equal to the first, and with the same hash
    pairs += [both(ref, fast, lambda c=c: c(2), batch_size=2) for c in CASES.values()]
    assert_same_eq_hash_classes([r for r, _ in pairs], [f for _, f in pairs])


@pytest.mark.parametrize("case", ["OrderedDict", "items twice", "reordered", "root reordered"])
def test_dict_of_the_same_items_compares_as_in_the_reference(ref, fast, case):
    def as_dicts(x):
        return {k: as_dicts(v) for k, v in x.items()} if isinstance(x, dict) else x

    r, f = both(ref, fast, lambda: CASES[case](2), batch_size=2)
    rd, fd = both(ref, fast, lambda: as_dicts(CASES[case](2)), batch_size=2)
    assert (f == fd, fd == f) == (r == rd, rd == r)
    if r == rd:
        assert hash(f) == hash(fd)


@pytest.mark.parametrize("case", ["OrderedDict", "OrderedDict subclass", "items twice", "reordered"])
def test_shapes_learned_as_the_reference(ref, fast, case):
    r, f = both(ref, fast, lambda: CASES[case](2), batch_size=2)
    r4, f4 = both(ref, fast, lambda: CASES[case](4), batch_size=4)
    assert outcome(lambda: f.update_shapes_seen(f4)) == outcome(lambda: r.update_shapes_seen(r4))
    assert md_snap(fast, f) == md_snap(ref, r)


def test_backend_dict_selects_as_the_reference(ref, fast):
    """A dict keyed by metadata of OrderedDict arguments, looked up with fresh calls as a tuned module does."""
    keys = ["OrderedDict", "other value", "other rank", "items twice"]
    selected = []
    for impl in (ref, fast):
        sm = impl.sample_metadata.SampleMetadata
        table = {sm.from_inputs(CASES[k](2), strict=True, batch_size=2): k for k in keys}
        selected.append([table.get(sm.from_inputs(c(2), strict=True, batch_size=2)) for c in CASES.values()])
    assert selected[1] == selected[0]
    assert selected[1][list(CASES).index("other value")] == "other value"
    assert selected[1][list(CASES).index("other rank")] == "other rank"
