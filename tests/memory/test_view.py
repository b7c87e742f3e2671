"""The metadata's Python view: ``tensor_data`` handed out and then changed, Python code that
changes the lists while a call reads them, threads sharing one metadata, and the process-wide dtype table.

Scenarios that could crash, panic or hang run in child processes (``view_cases.py``); the parity checks run here.
"""

from __future__ import annotations

import pytest
import torch
from child import run_child
from parity import arange_tensor, assert_same_eq_hash_classes, md_snap

NAN = float("nan")
t = arange_tensor


def SM(impl):  # noqa: N802 - reads like the class
    return impl.sample_metadata.SampleMetadata


def ESM(impl):  # noqa: N802
    return impl.exact_sample_metadata.ExactSampleMetadata


# ------------------------------------------------------------------------------ changes while a call reads the lists


@pytest.mark.parametrize("trigger", ["shape_iter", "key_eq", "thread"])
def test_update_shapes_seen_survives_its_tensor_data_list_shrinking_midway(trigger):
    """A user-built metadata's ``tensor_data`` list is emptied by Python code that runs inside
    ``update_shapes_seen`` (a shape list's ``__iter__``, a locator key's ``__eq__``, or another thread while a key's
    ``__eq__`` waits): the call used to index the re-read, shorter list and panic ("index out of bounds",
    pyo3's PanicException, which ``except Exception`` misses). Now it works on the entries it started with, as the
    reference does (the reference takes ``dict(tensor_data)`` first): the same learned shapes."""
    r = run_child("view_cases", "shrink_during_update", trigger, timeout=120)
    fast, ref = r["fast"], r["ref"]
    assert fast["result"][0] == "ok" or fast["result"][2], f"not an Exception: {fast['result']}"
    assert fast["result"] == ref["result"]
    assert fast["specs"] == ref["specs"]
    assert fast["pairs_left"] == ref["pairs_left"] == 0, "the trigger did not fire"
    assert fast["usable"] == ["ok", True]


def test_batch_size_queries_on_short_spec_lists_raise_index_error_like_the_reference():
    """``get_max_batch_size``/``get_min_batch_size`` on a spec whose min/max lists are shorter than its shape raise
    IndexError, as in the reference (they used to index past the end of the list: a panic)."""
    r = run_child("view_cases", "short_spec_lists", timeout=120)
    assert r["fast"] == r["ref"]
    assert r["fast"][0] == ["raise", "IndexError", True]


def test_tensor_data_handed_out_by_code_run_during_update_shapes_seen_is_not_left_behind():
    """Python code run at the end of ``update_shapes_seen`` (a finalizer) reads ``tensor_data`` of the compact
    metadata being updated: from then on its specs are the truth, so the call must not teach the compact form
    alone (the handed-out specs would silently not learn). It raises RuntimeError ("changed during ...") or the
    specs learn; no panic."""
    r = run_child("view_cases", "handed_out_during_update", timeout=120)
    assert r["handed"] == 1, "the finalizer did not run during the call"
    assert r["result"] == ["raise", "RuntimeError", True] or (r["result"][0] == "ok" and r["shape"] == ["dim0", 3])
    assert r["hash_ok"]


def test_a_user_built_list_changed_between_calls_is_read_again():
    """Append, remove and replace ``(Locator, TensorSpec)`` pairs of the list a metadata was built from: ``==``,
    ``hash`` and ``tensor_data`` follow the list, as in the reference."""
    r = run_child("view_cases", "user_list_mutation", timeout=120)
    assert r["fast"] == r["ref"]


# ------------------------------------------------------------------------------------- handed-out tensor_data


def _llm_like(n_layers: int = 4) -> dict:
    return {
        "input_ids": t((2, 1)),
        "attention_mask": t((2, 8)),
        "cache": {f"layer{i}": {"k": t((2, 2, 8, 4)), "v": t((2, 2, 8, 4))} for i in range(n_layers)},
        "use_cache": True,
        "scale": 0.5,
    }


def _mutations():
    """Changes a user may make to the specs of ``tensor_data`` once read; each is applied the same way to both
    implementations (``md`` is the metadata, ``specs`` its ``tensor_specs``)."""

    def shape_append(md, specs):
        specs[0].shape.append(1)

    def shape_pop(md, specs):
        specs[2].shape.pop()

    def shape_item(md, specs):
        specs[1].shape[1] = "dim1"

    def shape_same_value_new_object(md, specs):
        specs[1].shape[1] = int("8")  # an equal int: nothing changes

    def shape_reassigned(md, specs):
        specs[3].shape = [2, 2, 8]

    def shape_reassigned_equal(md, specs):
        specs[3].shape = list(specs[3].shape)

    def shape_cleared(md, specs):
        specs[0].shape.clear()

    def min_max_item(md, specs):
        specs[0].min_shape[0] = 1
        specs[0].max_shape[0] = 64

    def multipliers(md, specs):
        specs[0]._bs_multipliers[0] = 1.0
        specs[0].shape[0] = "batch0"

    def dtype(md, specs):
        specs[2].dtype = torch.float16

    def through_tensor_data(md, specs):
        md.tensor_data[4][1].shape[0] = "batch0"

    def update_shapes_seen(md, specs):
        later = _llm_like() | {"input_ids": t((3, 1))}
        kwargs = {} if "Exact" in type(md).__name__ else {"strict": True}
        md.update_shapes_seen(type(md).from_inputs(later, **kwargs))

    def shape_extend_then_undo(md, specs):
        specs[0].shape.append(7)
        specs[0].shape.pop()

    return [
        shape_append,
        shape_pop,
        shape_item,
        shape_same_value_new_object,
        shape_reassigned,
        shape_reassigned_equal,
        shape_cleared,
        min_max_item,
        multipliers,
        dtype,
        through_tensor_data,
        update_shapes_seen,
        shape_extend_then_undo,
    ]


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_a_changed_handed_out_spec_changes_the_metadata_as_in_the_reference(ref, fast, mutate):
    """After ``tensor_data`` was read, ``==``/``hash`` use the compact form while the specs are unchanged (no
    conversion on every comparison); after each kind of change they and everything else report what the reference
    reports: equality classes and hashes against fresh and handed-out metadata, plain and exact, and every reading."""

    def run(impl):
        md = SM(impl).from_inputs(_llm_like(), strict=True)
        exact = ESM(impl).from_inputs(_llm_like())
        fresh = SM(impl).from_inputs(_llm_like(), strict=True)
        fresh_exact = ESM(impl).from_inputs(_llm_like())
        shorter = SM(impl).from_inputs(_llm_like() | {"input_ids": t((2, 1, 1))}, strict=True)
        before = [md == fresh, hash(md) == hash(fresh), exact == fresh_exact]
        mutate(md, md.tensor_specs)
        mutate(exact, exact.tensor_specs)
        return md, exact, [fresh, shorter], [fresh_exact], before

    r_md, r_exact, r_plain, r_exacts, r_before = run(ref)
    f_md, f_exact, f_plain, f_exacts, f_before = run(fast)
    assert f_before == r_before == [True, True, True]
    assert_same_eq_hash_classes([r_md, *r_plain], [f_md, *f_plain])
    assert_same_eq_hash_classes([r_exact, *r_exacts], [f_exact, *f_exacts])
    assert md_snap(fast, f_md) == md_snap(ref, r_md)
    assert md_snap(fast, f_exact) == md_snap(ref, r_exact)


def test_handed_out_specs_stay_live_after_a_comparison_used_the_compact_form(ref, fast):
    """``==`` between reads of a handed-out spec (compact form used) does not detach the specs: a later change
    still counts, for ``==``, ``hash``, ``to_json`` round trips and ``update_shapes_seen``."""

    def run(impl):
        md = SM(impl).from_inputs({"x": t((2, 3)), "y": t((4,))}, strict=True)
        other = SM(impl).from_inputs({"x": t((5, 3)), "y": t((4,))}, strict=True)
        spec = md.tensor_specs[0]
        steps = [md == other, hash(md) == hash(other)]
        spec.shape.append(9)
        steps += [md == other, hash(md) == hash(other)]
        spec.shape.pop()
        steps += [md == other, hash(md) == hash(other)]
        md.update_shapes_seen(other)
        steps += [list(spec.shape), list(md.tensor_specs[0].shape), md.detected_dynamic_axis()]
        return steps

    assert run(fast) == run(ref)


def test_to_json_and_to_dict_read_a_changed_handed_out_spec(fast):
    """A handed-out spec changed after reading ``tensor_data`` is what ``to_json``/``to_dict`` write."""
    md = SM(fast).from_inputs({"x": t((2, 3))}, strict=True)
    md.tensor_specs[0].shape[0] = "batch0"
    md.tensor_specs[0]._bs_multipliers[0] = 1.0
    for again in (SM(fast).from_json(md.to_json()), SM(fast).from_dict(md.to_dict())):
        assert again.tensor_specs[0].shape == ["batch0", 3]
        assert again.has_batch_axis()


# ------------------------------------------------------------------------------------------------- threads


def test_a_shared_metadata_is_readable_while_another_thread_is_inside_eq():
    """The README's thread-safety promise: while one thread is inside ``==`` on a metadata (held there by a key's
    ``__eq__``, deterministically), another thread reads it: ``tensor_data`` (first access included),
    ``other_data``, ``tensor_specs``, ``hash``, ``==``, ``str``, ``to_json_dict``, ``to_json``, ``copy.copy``,
    ``copy.deepcopy``. Every read gives what it gives single-threaded (it used to raise "Already borrowed": the
    getters borrowed mutably), and the comparison still answers True."""
    r = run_child("view_cases", "concurrent_reads", timeout=180)
    bad = {k: v for k, v in r.items() if len(v) != 3 or v[0] != v[1] or v[2] != ["ok", True]}
    assert not bad, bad
    assert len(r) == 20
    assert sum(v[0][0] == "ok" for v in r.values()) >= 18, "only to_json (a key it cannot encode) may raise"


# ------------------------------------------------------------------------------------------------- dtypes


def test_fresh_str_dtypes_do_not_fill_a_process_wide_table():
    """200,000 specs from JSON documents, each with its own fresh ``str`` dtype (distinct values, too), each asked
    for its batch axes, hashed and learned from: no error (the table used to keep every dtype object and give up
    at 65,535 with "too many distinct dtype objects"), memory flat over the second half, and afterwards a dtype
    never seen before in the process (bfloat16) is described normally."""
    r = run_child("view_cases", "fresh_dtypes", 200_000, timeout=300)
    assert r["errors"] == []
    assert r["bf16"] == ["torch.bfloat16", "torch.bfloat16", "torch.bfloat16"]
    assert r["growth_kib"] < 4096, f"RSS grew {r['growth_kib']} KiB over 100,000 specs"


def test_a_tensor_with_a_foreign_dtype_is_described_as_in_the_reference(ref, fast):
    """A tensor subclass whose ``dtype`` is not a ``torch.dtype`` is described with that object (kept by its spec,
    not by the process-wide table), as the reference describes it."""

    class Odd(torch.Tensor):
        @property
        def dtype(self):
            return "odd-dtype"

    def run(impl):
        x = torch.zeros(2, 3).as_subclass(Odd)
        md = SM(impl).from_inputs({"x": x, "y": t((4,))}, strict=True)
        spec = impl.tensor_spec.TensorSpec.from_tensor(x, 2.0)
        return md_snap(impl, md), [spec.shape, spec.dtype, spec.describe()]

    assert run(fast) == run(ref)


def test_a_cycle_through_a_handed_out_spec_list_is_collected(fast):
    """A handed-out spec's list that refers back to its metadata makes a reference cycle; the metadata reports
    every reference it keeps (the pairs, the specs, the lists as handed out) to the cycle collector, so the cycle
    is freed."""
    import gc

    freed = []

    class Back:
        def __init__(self, md):
            self.md = md

        def __del__(self):
            freed.append(True)

    md = SM(fast).from_inputs({"x": t((2, 3))}, strict=True)
    md.tensor_specs[0].max_shape.append(Back(md))
    del md
    gc.collect()
    assert freed == [True]
