"""Leaks: repeated use keeps the peak RSS flat, and dropped metadata keeps nothing alive.

The RSS measurements run in child processes (a clean heap, a time limit); the reference-count and garbage
collection checks run here.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import weakref

import pytest
import robust_cases as rc
import torch
from child import run_scenario

MIB_LIMIT = 20


def test_200k_from_inputs_hash_to_json_dict_cycles_keep_peak_rss_within_20_mib():
    r = run_scenario(rc.rss_cycles, 20_000, 200_000, timeout=180)
    assert r.after - r.before <= MIB_LIMIT, f"peak RSS grew {r.after - r.before:.1f} MiB ({r})"


def test_every_operation_and_error_path_keeps_peak_rss_flat():
    """==, hash, update_shapes_seen, tensor_data, other_data, tensor_specs, str, to_json_dict, to_json,
    ExactSampleMetadata, find_leaves/get_value, cycle errors, structure-mismatch errors, bad JSON: 6,000 rounds
    after a warm-up of 1,000."""
    r = run_scenario(rc.rss_everything, 1_000, 6_000, timeout=180)
    assert r.after - r.before <= MIB_LIMIT, f"peak RSS grew {r.after - r.before:.1f} MiB ({r})"


class Value:
    def __repr__(self):
        return "Value<fixed>"


@dataclasses.dataclass
class Holder:
    tensor: object
    value: object


def _inputs():
    t = torch.zeros(2, 3)
    t2 = torch.zeros(4)
    value = Value()
    key = Value()  # an object used as a dict key: kept in the metadata's paths while it lives
    inner = [t2, value, "text", 2**90]
    holder = Holder(t, value)
    inputs = {"x": t, "inner": inner, "d": {key: t2, "h": holder}}
    return inputs, [inputs, t, t2, value, key, inner, holder, inputs["d"]]


def _use(fast, md, other):
    """Every operation that can make a metadata keep Python objects: views, caches, renderings."""
    hash(md)
    _ = md == other, md != other, str(md), repr(md), md.to_json_dict()
    _ = md.tensor_data, md.other_data, md.tensor_specs, md.detected_dynamic_axis(), md.has_batch_axis()
    try:
        md.to_json()
    except (NotImplementedError, TypeError):
        pass  # to_json encodes plain data only; the error path must not leak either
    if type(md) is fast.sample_metadata.SampleMetadata:
        md.update_shapes_seen(other)


@pytest.mark.parametrize("strict", [False, True])
def test_dropped_metadata_releases_its_inputs_tensors_and_values(fast, strict):
    inputs, objects = _inputs()
    SM = fast.sample_metadata.SampleMetadata
    ESM = fast.exact_sample_metadata.ExactSampleMetadata
    gc.collect()
    before = [sys.getrefcount(o) for o in objects]
    for _ in range(3):
        other = SM.from_inputs(inputs, strict=strict)
        for md in (
            SM.from_inputs(inputs, strict=strict),
            SM.from_outputs(inputs, strict=strict),
            ESM.from_inputs(inputs),
        ):
            _use(fast, md, other)
        leaves = list(fast.locator.Locator.find_leaves(inputs))
        for loc, _value in leaves:
            loc.get_value(inputs)
        del md, other, leaves, loc, _value
    gc.collect()
    after = [sys.getrefcount(o) for o in objects]
    names = ["inputs", "tensor", "tensor2", "value", "key", "inner list", "dataclass", "inner dict"]
    assert dict(zip(names, after, strict=True)) == dict(zip(names, before, strict=True))


@pytest.mark.parametrize("strict", [False, True])
def test_metadata_never_keeps_tensors_alive(ref, fast, strict):
    """Neither implementation holds the tensors it describes: they die with the inputs, while the metadata
    (compact or with its tensor_data handed out) lives on."""
    for impl in (ref, fast):
        t = torch.zeros(3, 2)
        alive = weakref.ref(t)
        md = impl.sample_metadata.SampleMetadata.from_inputs({"x": t, "y": [t, 1]}, strict=strict)
        md2 = impl.sample_metadata.SampleMetadata.from_inputs({"x": t, "y": [t, 1]}, strict=strict)
        _ = md2.tensor_data, hash(md), md.to_json_dict()
        del t
        gc.collect()
        assert alive() is None, f"{impl.sample_metadata.__name__} keeps the tensor alive"
        assert md == md2


def test_error_paths_release_their_arguments(fast):
    SM = fast.sample_metadata.SampleMetadata
    cyclic: list = [torch.zeros(1)]
    cyclic.append({"back": cyclic})

    class Raises:
        @property
        def __dict__(self):
            raise KeyError("no dict")

    fast.locator.Locator.register_user_type(Raises)
    try:
        bad = Raises()
        t = torch.zeros(2)
        objects = [cyclic, cyclic[1], bad, t]
        gc.collect()
        before = [sys.getrefcount(o) for o in objects]
        for _ in range(3):
            for call in (
                lambda: SM.from_inputs({"c": cyclic}, strict=True),
                lambda: SM.from_inputs({"t": t, "b": bad}, strict=True),
                lambda: SM.from_inputs({"t": t}).update_shapes_seen(SM.from_inputs({"u": t})),
                lambda: list(fast.locator.Locator.find_leaves({"c": cyclic})),
            ):
                with pytest.raises((ValueError, KeyError)):
                    call()
        gc.collect()
        assert [sys.getrefcount(o) for o in objects] == before
    finally:
        fast.locator.Locator.unregister_user_type(Raises)


def _cycle_through_metadata(impl, how):
    SM = impl.sample_metadata.SampleMetadata
    owner = Value()
    if how == "other_data":
        md = SM.from_inputs({"v": owner, "t": torch.zeros(1)}, strict=True)
    elif how == "tensor_spec":
        md = SM.from_inputs({"t": torch.zeros(1)})
        md.tensor_data[0][1].dtype = owner  # a live spec of this metadata refers to the owner
    elif how == "llm_phase":
        md = SM((), (), llm_phase=owner)
    else:
        raise ValueError(how)
    owner.md = md  # the owner refers back: a reference cycle through the metadata
    return weakref.ref(owner)


@pytest.mark.parametrize("how", ["other_data", "tensor_spec", "llm_phase"])
def test_reference_cycles_through_a_metadata_are_collected(ref, fast, how):
    """An object that a metadata holds (a strict-mode value, a field of a handed-out TensorSpec, the LLM phase)
    and that refers back to the metadata forms a cycle; once dropped, the garbage collector frees it, as it
    does for the reference. (Needs __traverse__/__clear__ on the Rust classes.)"""
    for impl in (ref, fast):
        alive = _cycle_through_metadata(impl, how)
        gc.collect()
        assert alive() is None, f"{impl.sample_metadata.__name__}: the cycle through the metadata is never freed"
