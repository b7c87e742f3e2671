"""The tensor readers: every reader gives the reference's results, for every torch dtype; the reader is
chosen and reported as documented; the extension does not link torch; reading ``cache_position[0]`` never touches
memory torch would refuse. Crash-prone cases run in child processes (``child.run_child``)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import reader_cases as rc
import torch
from child import run_child

ROOT = Path(__file__).resolve().parents[2]
ENV = "AITUNE_FAST_TENSOR_READER"


def _core():
    from aitune_fast import _core

    return _core


@pytest.fixture
def each_reader():
    """A function running ``fn()`` under each available reader in turn (restoring the selected one)."""
    core = _core()
    selected = core.tensor_reader()

    def run(fn):
        try:
            for name in core.tensor_readers_available():
                core._force_tensor_reader(name)
                fn(name)
        finally:
            core._force_tensor_reader(selected)

    return run


def _all_dtypes() -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for value in vars(torch).values():
        if isinstance(value, torch.dtype) and value not in seen:
            seen.append(value)
    return sorted(seen, key=str)


def _tensors_of(dtype: torch.dtype) -> list[torch.Tensor]:
    """Tensors of ``dtype`` in a few layouts (what torch can allocate of it)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for make in (
            lambda: torch.empty(2, 3, dtype=dtype),
            lambda: torch.empty(4, 6, dtype=dtype)[::2, 1:4],
            lambda: torch.empty((), dtype=dtype),
            lambda: torch.empty(0, 5, dtype=dtype),
            lambda: torch.nn.Parameter(torch.empty(3, 1, 2, dtype=dtype), requires_grad=False),
        ):
            try:
                out.append(make())
            except Exception:  # noqa: BLE001  (not every dtype supports every layout)
                pass
        if dtype in (torch.qint8, torch.quint8, torch.qint32):
            out.append(torch.quantize_per_tensor(torch.ones(2, 3), 0.5, 1, dtype))
    return out


def test_runtime_info_names_the_reader_in_use():
    """runtime_info() has the documented keys; the reader in use is one of the available ones; on a torch with the
    DLPack exchange API the default is the fast reader."""
    import platform

    import aitune_fast

    info = aitune_fast.runtime_info()
    assert info["version"] == aitune_fast.__version__
    assert info["torch"] == torch.__version__
    assert info["python"] == platform.python_version()
    assert info["tensor_reader"] in info["tensor_readers_available"]
    assert info["tensor_readers_available"][-1] == "python"
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        assert "dlpack" in info["tensor_readers_available"]
        if os.environ.get(ENV, "auto") in ("", "auto"):
            assert info["tensor_reader"] == "dlpack"


def test_every_dtype_gives_the_reference_spec_under_every_reader(ref, fast, each_reader):
    """Every dtype torch has (DLPack names int8 and int1..int7 alike, uint8 and uint1..uint7 alike; it refuses
    quantized and bit dtypes), in several layouts and as nn.Parameter: each reader gives the reference's spec, with
    the very dtype object."""
    dtypes = _all_dtypes()
    assert len(dtypes) > 20
    cases = [(d, t) for d in dtypes for t in _tensors_of(d)]
    ref_sm = ref.sample_metadata.SampleMetadata
    expected = [
        [(s.shape, s.min_shape, s.max_shape, s.dtype) for _, s in ref_sm.from_inputs({"x": t}).tensor_data]
        for _, t in cases
    ]
    # and all at once, in one walk: a per-walk memo must not mix dtypes up
    together = {f"t{i}": t for i, (_, t) in enumerate(cases)}
    expected_together = [
        (s.shape, s.dtype) for _, s in ref.sample_metadata.SampleMetadata.from_inputs(together).tensor_data
    ]

    def check(reader):
        for (dtype, t), want in zip(cases, expected, strict=True):
            got = [
                (s.shape, s.min_shape, s.max_shape, s.dtype)
                for _, s in fast.sample_metadata.SampleMetadata.from_inputs({"x": t}).tensor_data
            ]
            assert got == want, (reader, dtype, tuple(t.shape))
            assert got[0][3] is t.dtype, (reader, dtype)
        got = [(s.shape, s.dtype) for _, s in fast.sample_metadata.SampleMetadata.from_inputs(together).tensor_data]
        assert got == expected_together, reader

    each_reader(check)


def test_a_torch_function_mode_sees_the_reads_under_every_reader(ref, fast, each_reader):
    """Under a TorchFunctionMode, ``t.shape`` goes through the mode, which may change it: the fast reader must step
    aside and give what the reference gets."""

    class FakeShape(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__self__", None) is torch.Tensor.shape:  # the getter of Tensor.shape
                return torch.Size([7, 7])
            return func(*args, **(kwargs or {}))

    inputs = {"x": torch.ones(2, 3), "y": [torch.ones(4)] * 20}
    with FakeShape():
        want = [(s.shape, s.dtype) for _, s in ref.sample_metadata.SampleMetadata.from_inputs(inputs).tensor_data]
    assert want[0][0] == [7, 7]

    def check(reader):
        with FakeShape():
            got = [(s.shape, s.dtype) for _, s in fast.sample_metadata.SampleMetadata.from_inputs(inputs).tensor_data]
        assert got == want, reader

    each_reader(check)


def _elf_needed(data: bytes) -> list[str]:
    """The DT_NEEDED libraries of a 64-bit little-endian ELF shared object."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF file"
    shoff, shentsize, shnum = (
        int.from_bytes(data[0x28:0x30], "little"),
        int.from_bytes(data[0x3A:0x3C], "little"),
        int.from_bytes(data[0x3C:0x3E], "little"),
    )
    sections = []
    for i in range(shnum):
        h = data[shoff + i * shentsize : shoff + (i + 1) * shentsize]
        sh_type = int.from_bytes(h[4:8], "little")
        offset, size, link = (
            int.from_bytes(h[24:32], "little"),
            int.from_bytes(h[32:40], "little"),
            int.from_bytes(h[40:44], "little"),
        )
        sections.append((sh_type, offset, size, link))
    needed = []
    for sh_type, offset, size, link in sections:
        if sh_type != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[link][1]
        for j in range(offset, offset + size, 16):
            tag, val = int.from_bytes(data[j : j + 8], "little"), int.from_bytes(data[j + 8 : j + 16], "little")
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", strtab + val)
                needed.append(data[strtab + val : end].decode())
    return needed


def test_the_extension_links_no_torch_library():
    """The built extension has no link-time dependency on libtorch/libc10 (it reads tensors through interfaces
    resolved at run time), so one build works next to any torch."""
    path = Path(_core().__file__)
    if not path.name.endswith(".so"):
        pytest.skip("not an ELF shared object")
    needed = _elf_needed(path.read_bytes())
    assert any(n.startswith("libc.so") for n in needed), needed  # the parser works
    assert not [n for n in needed if "torch" in n or "c10" in n], needed
    assert not (ROOT / "rust" / "shim").exists()
    assert not hasattr(_core(), "HAS_TORCH_SHIM")


# ============================================================================================== choosing a reader


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        ("python", ("reader", "python")),
        ("auto", ("reader", None)),
        ("", ("reader", None)),
        ("stable_abi", ("reader", "stable_abi")),
        ("bogus", ("error", "ValueError")),
    ],
)
def test_the_environment_variable_forces_a_reader(value, expect):
    """AITUNE_FAST_TENSOR_READER=python forces the attribute path; auto/empty pick the fastest available; naming
    a reader this torch (or build) does not offer fails the import with a message naming it and saying why; an
    unknown name fails with the accepted values."""
    r = run_child("reader_cases", "import_with_reader", env={ENV: value}, timeout=120)
    kind, detail = expect
    if value == "stable_abi" and not _stable_abi_in_this_torch():
        kind, detail = "error", "RuntimeError"  # torch before 2.14: no torch_tensor_from_pyobject
    if kind == "error":
        assert "error" in r, r
        assert r["error"][0] == detail
        assert ENV in r["error"][1] and value in r["error"][1]
        return
    assert "error" not in r, r
    info = r["info"]
    assert info["tensor_reader"] == (detail or info["tensor_readers_available"][0])
    assert r["phase"] == "prefill" and r["shape"] == [2, 3]


def _stable_abi_in_this_torch() -> bool:
    return "stable_abi" in _core().tensor_readers_available()


def test_forcing_dlpack_where_torch_lacks_it_says_why():
    """On a torch without the DLPack exchange API, AITUNE_FAST_TENSOR_READER=dlpack fails the import naming the
    missing attribute; where torch has it, the reader is used."""
    r = run_child("reader_cases", "import_with_reader", env={ENV: "dlpack"}, timeout=120)
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        assert r["info"]["tensor_reader"] == "dlpack", r
    else:
        assert r["error"][0] == "RuntimeError" and "__dlpack_c_exchange_api__" in r["error"][1], r


@pytest.mark.parametrize("reader", ["dlpack", "stable_abi"])
def test_refused_tensors_give_the_reference_results_and_the_reader_backs_off(reader):
    """A fast reader refuses some tensors (DLPack: meta; the stable C ABI: nested, whose sizes torch will not
    give), by a C++ exception in torch, costly each time: the results are the reference's, and after a refusal
    the reader sends the refused object and a growing number of later reads to Python rather than asking torch
    again every call."""
    if reader not in _core().tensor_readers_available():
        pytest.skip(f"this torch has no {reader} reader")
    r = run_child("reader_cases", "refusals", 300, reader, timeout=180)
    assert r["same"], r
    assert r["reader"] == reader, r
    assert 1 <= r["refused"] <= 12, r
    assert r["skipped"] > 0, r


# ============================================================================================== cache_position


@pytest.fixture(scope="module", params=[False, True], ids=["extent_stable_abi", "extent_python"])
def cache_position_results(request):
    """All storage cases in one child per way of getting the storage extent (a crash fails them all)."""
    return run_child("reader_cases", "cache_position", request.param, timeout=150)


@pytest.mark.parametrize("case", sorted(rc.CACHE_POSITION_CASES))
def test_cache_position_reads_never_touch_memory_torch_refuses(case, cache_position_results):
    """``cache_position`` a view into storage that was freed (``t.untyped_storage().resize_(0)``, offloading and
    FSDP do this) or shrunk (an offset of 400 MB into 8 bytes; half an element left), or an ordinary offset view:
    the reference's phase or its exception (torch's out-of-bounds RuntimeError), never a crash or a read of freed
    memory. Once a segfault. The storage extent comes from torch's stable C ABI (torch 2.14+) or from Python."""
    r = cache_position_results[case]
    assert r["fast"] == r["ref"], r
    assert r["fast_not_strict"] == r["ref"], r


def test_the_stable_c_abi_is_found_where_torch_has_it(cache_position_results):
    """torch 2.14+ exports torch_tensor_from_pyobject and the storage getters: the reader must find them (else
    cache_position costs three Python calls more)."""
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__") and torch.__version__ >= "2.14":
        assert cache_position_results["stable_abi_found"]


def test_cache_position_under_functionalize_and_vmap_matches_the_reference():
    """Offset views of cache_position under ``torch.func.functionalize`` (whose tensors have no data of their own)
    and ``torch.vmap``: the reference's phase or exception. Once a segfault under functionalize."""
    r = run_child("reader_cases", "cache_position_transforms", timeout=150)
    for key in [k for k in r if k.endswith("_ref")]:
        assert r[key[: -len("ref")] + "fast"] == r[key], (key, r)


# ============================================================================================ parity under each reader

PARITY_UNDER_PYTHON_READER = [
    "tests/parity/test_parity_sample_metadata.py",
    "tests/parity/test_parity_tensor_spec.py",
    "tests/parity/test_parity_exact.py",
    "tests/parity/test_parity_locator.py",
]


@pytest.mark.skipif(os.environ.get(ENV) == "python", reason="this run already uses the python reader")
def test_the_parity_suite_passes_under_the_python_reader():
    """The default run covers the default (fastest) reader; this runs the hand-written parity suites again with
    AITUNE_FAST_TENSOR_READER=python (the hypothesis suite is left to the default run, for CI time)."""
    env = dict(os.environ, **{ENV: "python"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PARITY_UNDER_PYTHON_READER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
