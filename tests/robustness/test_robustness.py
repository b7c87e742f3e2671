"""Robustness: cycles, depth, tensor kinds, other data and panics.

A library that runs inside every forward call must not hang, crash or leak. Where a hang or a crash is the
failure mode, the scenario runs in a child process with a time limit (``child.run_child``; the scenarios are in
``robust_cases.py``), so a failure is reported as a failed test instead of taking pytest down. Threads and leaks
are in ``test_threads.py`` and ``test_leaks.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import robust_cases as rc
from child import run_scenario

ROOT = Path(__file__).resolve().parents[2]


# ============================================================================================== cycles


@pytest.fixture(scope="module")
def cycle_results():
    return run_scenario(rc.cycles, timeout=120)


@pytest.mark.parametrize("case", rc.CYCLE_CASES)
def test_cyclic_argument_raises_a_value_error_naming_where_the_cycle_closes(cycle_results, case):
    """A list, dict, tuple (through a list), dataclass, user type, UserDict or container subclass that contains
    itself, given to any entry point, raises ValueError naming the path where the cycle closes, at once and
    again on a second call (the reference loops forever)."""
    entries = {k: v for k, v in cycle_results.cases.items() if k.startswith(case + "/")}
    assert entries, case
    for key, r in entries.items():
        assert r.first[:2] == ["raise", "ValueError"], f"{key}: {r.first}"
        assert r.path in r.first[2], f"{key}: the message does not name {r.path}: {r.first[2]}"
        assert r.again == r.first, f"{key}: a second call behaves differently: {r.again}"
        assert r.seconds < 10, f"{key}: took {r.seconds:.1f} s"


def test_cycle_errors_leave_the_library_usable_and_memory_bounded(cycle_results):
    assert cycle_results.usable_after
    assert cycle_results.hwm_growth_mib < 200, cycle_results.hwm_growth_mib


def test_endlessly_deep_argument_without_a_cycle_is_rejected_with_bounded_time_and_memory():
    """A user type that makes a new child on every attribute access is infinitely deep but never cyclic: it is
    rejected at the depth limit, in bounded time and memory (the reference grows without end)."""
    r = run_scenario(rc.endless, timeout=120)
    assert r.outcome[:2] == ["raise", "ValueError"], r.outcome
    assert str(r.max_depth) in r.outcome[2]
    assert r.seconds < 60
    assert r.hwm_growth_mib < 1024, r.hwm_growth_mib


def test_shared_references_that_are_not_cycles_describe_as_in_the_reference():
    """The same tensor, list, dataclass or user object in several places (a DAG, not a cycle) is walked every
    time it is met, exactly as the reference does: same description, equality and hash classes."""
    results = rc.shared_references()
    for mode, r in results.items():
        assert r.snap_same, f"{mode}: the description differs from the reference"
        assert r.classes is True, f"{mode}: {r.classes}"
        assert r.n_tensors[0] == r.n_tensors[1] == 17


def test_user_type_nesting_itself_with_other_layouts_walks_as_the_reference():
    """Inner instances of a registered type, laid out otherwise, replace the layout the walk looks up while the
    outer instance still reads its own: the walk keeps the outer one alive (a crash otherwise)."""
    r = run_scenario(rc.nested_layouts, timeout=120)
    assert r == rc.NestedLayouts(same=[True, True, True], n=7 * 6 + 1 + 7 * 3 + 1)


# ============================================================================================== depth


def test_100k_deep_arguments_work_everywhere_on_a_small_thread_stack():
    """Lists, tuples, dicts, dataclasses, user types and a mix of them nested 100,000 levels deep, through
    from_inputs, from_outputs, ExactSampleMetadata, ==, hash, update_shapes_seen, to_json_dict, to_json, str,
    find_leaves, get_value and set_value, on a thread with a 512 KiB stack (smaller than any main thread's)."""
    results = run_scenario(rc.deep, rc.SMALL_STACK, timeout=150)
    assert set(results) == set(rc.DEPTH_KINDS)
    for kind, r in results.items():
        assert r.n_tensors == 1 and r.depth == rc.DEEP + 1, kind
        assert r.eq == ["ok", True], (kind, r.eq)
        assert r.hash_eq == ["ok", True], (kind, r.hash_eq)
        assert r.json[0] == "ok" and r.str[0] == "ok", kind
        assert r.update == ["ok", None] and r.learned == ["dim0", 3], (kind, r.update, r.learned)
        assert r.exact == ["ok", True], (kind, r.exact)
        assert r.outputs == ["ok", 1], (kind, r.outputs)
        assert r.leaves == 2 and r.get_value == ["ok", True] and r.set_value == ["ok", True], kind
        assert r.to_json[0] == "ok" or r.to_json[1] == "NotImplementedError", (kind, r.to_json)


def test_100k_deep_arguments_describe_as_in_the_reference():
    results = run_scenario(rc.deep_parity, timeout=150)
    assert results == {"list": True, "dict": True}


def test_beyond_the_documented_depth_limit_a_clear_error_on_a_small_thread_stack():
    """``aitune_fast._core.MAX_DEPTH`` is the documented limit; one level more is a ValueError that says so."""
    r = run_scenario(rc.too_deep, rc.SMALL_STACK, timeout=150)
    assert r.limit is not None, "aitune_fast._core.MAX_DEPTH is missing"
    assert r.limit >= rc.DEEP
    assert r.outcome[:2] == ["raise", "ValueError"], r.outcome
    assert str(r.limit) in r.outcome[2]


@pytest.mark.parametrize("stack", [0, rc.SMALL_STACK], ids=["main-thread", "512KiB-thread"])
def test_deeply_nested_other_data_never_overflows_the_stack(stack):
    """Leaves that are not walked but are hashed, compared and rendered recursively (frozensets, mapping
    proxies) nested 100,000 deep, in strict mode: hash, ==, to_json_dict and str raise a clear error (the
    reference raises RecursionError) and never overflow the stack, on the main thread or a 512 KiB one."""
    results = run_scenario(rc.deep_other_data, stack, rc.DEEP, timeout=120)
    for value, ops in results.items():
        for op, out in ops.by_name().items():
            assert out[0] == "ok" or out[1] in ("RecursionError", "ValueError"), (value, op, out)


TINY_IDS = ["256KiB-thread", "128KiB-thread"]


@pytest.mark.parametrize("stack", rc.TINY_STACKS, ids=TINY_IDS)
def test_nested_documents_on_small_thread_stacks_raise_instead_of_crashing(stack):
    """A document whose other value is a list nested 400 deep (inside the 512-level limit): from_json, to_json,
    to_dict, from_dict and hash on a small thread stack each work or raise RecursionError (the C stack left
    is checked before each level; it was a SIGSEGV). Reading needs less stack than writing: on 256 KiB it works."""
    r = run_scenario(rc.nested_documents, stack, 400, timeout=120)
    for op, out in r.by_name().items():
        assert out[0] == "ok" or out[1] == "RecursionError", (op, out)
        if out[0] == "raise" and op.startswith("to_"):
            assert 'other_data[0] at locator "o"' in out[2], (op, out)
    if stack >= 256 * 1024:
        assert r.from_json == ["ok", "SampleMetadata"] and r.from_dict == ["ok", "SampleMetadata"], r


@pytest.mark.parametrize("stack", rc.TINY_STACKS, ids=TINY_IDS)
def test_hash_of_a_deep_unwalked_mapping_on_a_small_thread_raises_recursion_error(stack):
    """hash() of a strict metadata whose other value is a mapping proxy around a list nested 950 deep: the
    reference raises RecursionError; it was a SIGSEGV on a 256 KiB thread."""
    r = run_scenario(rc.deep_mapping_hash, stack, 950, timeout=120)
    assert r[:2] == ["raise", "RecursionError"], r


@pytest.mark.parametrize("stack", rc.TINY_STACKS, ids=TINY_IDS)
def test_nested_reference_pickles_on_small_thread_stacks_raise_instead_of_crashing(stack):
    """from_dict of reference pickles whose other value nests tuples, frozensets or lists 300 and 700 deep, on a
    small thread: read, or refused with a ValueError (tuples and frozensets 300 deep were a SIGSEGV on 128 KiB)."""
    for depth in (300, 700):
        r = run_scenario(rc.nested_reference_pickles, stack, depth, timeout=120)
        for kind, out in r.items():
            assert out[0] == "ok" or out[1] == "ValueError", (depth, kind, out)
            if out[0] == "raise":
                assert "nested too deeply" in out[2], (depth, kind, out)


@pytest.mark.parametrize("stack", rc.TINY_STACKS, ids=TINY_IDS)
def test_the_robustness_corpus_holds_on_small_thread_stacks(stack):
    """The battery (tensor kinds, other data, getter errors), the cycle cases, nested other data, shared
    references and 40 hostile fuzz examples, all on one small thread, behave as on the main thread."""
    r = run_scenario(rc.small_stack_corpus, stack, 40, timeout=300)
    battery = r.battery
    for kind, checks in battery.tensor_kinds.items():
        for check, x in checks.items():
            assert x.same, f"{kind}/{check}: {x.diff}"
    for case, x in battery.other_data.items():
        assert x.same, (case, x.diff)
    for key, x in battery.getter_errors.items():
        assert x.fast == x.ref, (key, x)
    for key, x in r.cycles.cases.items():
        assert x.first[:2] == ["raise", "ValueError"], (key, x.first)
    for value, ops in r.deep_other_data.items():
        for op, out in ops.by_name().items():
            assert out[0] == "ok" or out[1] in ("RecursionError", "ValueError"), (value, op, out)
    for mode, x in r.shared.items():
        assert x.snap_same and x.classes is True, mode
    assert r.hostile["examples"] >= 40


def test_shared_sublists_of_a_reference_pickle_are_written_quickly_or_refused():
    """A reference-format dict whose pickled other value shares sub-lists (x = [x, x], 40 times: 371 bytes, 2**40
    lists once expanded): to_dict/to_json refuse it within seconds, saying why (it never finished); 10 times
    is written in full and reads back equal."""
    r = run_scenario(rc.shared_sublists, 40, timeout=60)
    assert r.input_bytes < 400
    for out, seconds in ((r.to_dict, r.to_dict_seconds), (r.to_json, r.to_json_seconds)):
        assert out[:2] == ["raise", "ValueError"], out
        assert "shared" in out[2] and "MiB" in out[2], out
        assert seconds < 5, r
    small = run_scenario(rc.shared_sublists, 10, timeout=60)
    assert small.to_dict[0] == small.to_json[0] == "ok" and small.round_trip is True, small


# ============================================================================================== tensor kinds and data


@pytest.fixture(scope="module")
def battery():
    return run_scenario(rc.battery, timeout=150)


@pytest.mark.parametrize("kind", [*rc.TENSOR_KINDS, "__eq_hash_classes__"])
def test_tensor_kinds_behave_as_in_the_reference(battery, kind):
    """nn.Parameter, 0-d, empty, non-contiguous and strided views, meta, sparse COO/CSR, bfloat16/float8/complex/
    bool and other dtypes, quantized tensors and tensor subclasses: the same description, shape learning,
    exact-metadata equality and output description as the reference; the same ==/hash classes across them all."""
    for check, r in battery.tensor_kinds[kind].items():
        assert r.same, f"{kind}/{check}: {r.diff}"


def test_symbolic_sizes_behave_as_in_the_reference():
    """Tensors whose shape holds SymInts (a fake tensor mode with a shape environment, make_fx symbolic tracing)
    and tensors seen under torch.compile(dynamic=True): the reference records the symbolic sizes (rendered as
    their names); aitune_fast must give the same results and must not specialise the symbols (no guard added)."""
    results = run_scenario(rc.symbolic, timeout=150)
    failures = {name: r.diff for name, r in results.items() if not r.same}
    assert not failures, failures


@pytest.mark.parametrize("case", rc.OTHER_CASES)
def test_other_data_behaves_as_in_the_reference(battery, case):
    """Huge ints, NaN (distinct or shared objects, values and keys), __eq__/__hash__/__bool__ that raise, numpy
    arrays and scalars: ==, !=, hash, to_json_dict, json.dumps, str, repr, update_shapes_seen and dict lookup
    give the same results or raise the same exception types as the reference."""
    r = battery.other_data[case]
    assert r.same, r.diff


def test_exceptions_from_attribute_getters_propagate_unchanged(battery):
    """An exception raised while reading a user type's or dataclass's attribute (a descriptor, __getattribute__,
    a __dict__ property), including an AttributeError or a BaseException, reaches the caller as the very same
    object, from from_inputs, from_outputs and find_leaves, as in the reference."""
    for key, r in battery.getter_errors.items():
        assert r.fast == r.ref, (key, r)
        if r.ref[0] == "raise":
            assert r.fast[2] is True, f"{key}: a different exception object arrived"


# ============================================================================================== panics


def test_no_build_profile_aborts_on_panic():
    """``panic = "abort"`` would turn any Rust panic into a crash of the host process: no profile, config file
    or build script may set it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    for name, profile in cargo.get("profile", {}).items():
        assert profile.get("panic", "unwind") == "unwind", f"[profile.{name}] sets panic = {profile['panic']!r}"
    pattern = re.compile(r"panic\s*=\s*\"?abort|panic=abort|CARGO_PROFILE_\w*_PANIC")
    candidates = [ROOT / "pyproject.toml", ROOT / "build.rs", *ROOT.glob(".cargo/config*")]
    candidates += [*ROOT.glob("scripts/*.sh"), *ROOT.glob(".ci/*")]
    for path in candidates:
        if path.is_file():
            assert not pattern.search(path.read_text()), f"{path.relative_to(ROOT)} makes panics abort"


@pytest.fixture(scope="module")
def panic_results():
    return run_scenario(rc.panics, timeout=90)


def test_a_rust_panic_is_a_python_exception_and_the_interpreter_stays_usable(panic_results):
    """Operations that have made the core panic: the process survives (the child exits normally), each ends in
    a result or a Python exception, and metadata keeps working afterwards. If the core exposes the test hook
    ``_core._test_panic``, it must raise pyo3's PanicException."""
    for name, r in panic_results.items():
        assert r.usable_after is True, f"{name}: the library is unusable afterwards"
    hook = panic_results["hook"].outcome
    if hook[0] == "raise":
        assert hook[1] == "PanicException", hook


def test_update_shapes_seen_on_specs_with_short_min_max_lists_matches_the_reference(panic_results):
    """A user-built TensorSpec whose min_shape/max_shape are shorter than its shape, merged on an axis that
    changed: the reference updates it (``shape ['dim0', 3], min [2], max [4]``)."""
    r = panic_results["short_min_shape"].outcome
    assert r[0] == "ok", f"raised {r[1]}: {r[3]}"


@pytest.mark.parametrize("case", ["reentrant_update", "reentrant_tensor_data"])
def test_reentrant_use_of_a_metadata_from_a_user_hook_is_not_a_panic(panic_results, case):
    """A value's __hash__/__eq__ that touches the metadata being hashed/compared (update_shapes_seen,
    tensor_data): the reference allows it; aitune_fast must at least raise an ordinary exception
    (RuntimeError), never a PanicException (a BaseException that ``except Exception`` does not catch)."""
    r = panic_results[case].outcome
    assert r[0] == "ok" or (r[2] is True and r[1] != "PanicException"), r


def test_symbolic_sizes_are_refused_by_serialization_and_shape_learning_without_specialising():
    """Specs of traced tensors hold torch.SymInt sizes: encoding them would lose the symbols and merging them
    would add guards, so to_json/to_dict/update_shapes_seen raise TypeError and the symbols stay symbolic."""
    import aitune_fast
    import torch
    from robust_cases import _symbolic_fake

    ft, env = _symbolic_fake((2, 3), (True, False))
    guards = len(env.guards)
    md = aitune_fast.SampleMetadata.from_inputs({"x": ft})
    other = aitune_fast.SampleMetadata.from_inputs({"x": ft})
    for call in (md.to_json, md.to_dict, lambda: md.update_shapes_seen(other)):
        with pytest.raises(TypeError, match="symbolic"):
            call()
    assert isinstance(ft.shape[0], torch.SymInt) and len(env.guards) == guards
