//! Reading a tensor's sizes, dtype and `cache_position[0]`: one interface over the readers torch
//! offers at run time, chosen once per process.
//!
//! - `dlpack` ([`dlpack`]): torch's DLPack C exchange API (torch 2.10 and later), a C function that
//!   fills a `DLTensor` for an exact `torch.Tensor`/`nn.Parameter` without allocating. Resolved at
//!   run time from a PyCapsule on `torch.Tensor`: no link-time dependency on torch's libraries and
//!   no C++ ABI coupling.
//! - `stable_abi` ([`stable_abi`]): torch's stable C ABI (torch 2.14 and later), C functions found
//!   with `dlsym` in the `libtorch_cpu` torch loaded. Reads meta tensors too, but allocates a tensor
//!   handle per read and measured about 30 ns per tensor slower than DLPack: used only when forced.
//! - `python`: the attribute path (`t.shape`, `t.dtype`, in `tensor_spec::read_tensor`), for every
//!   torch, every tensor subclass, and every tensor the fast reader declines (meta, sparse,
//!   quantized, nested, symbolic sizes, an active `TorchFunctionMode`).
//!
//! `AITUNE_FAST_TENSOR_READER` (`auto`, the default; `dlpack`; `stable_abi`; `python`) forces one;
//! forcing a reader this torch does not offer is an error at import, saying why.
//!
//! This layer knows torch and Python only: it hands back dtype objects, never the ids the
//! metadata layers store.

mod backoff;
pub mod dlpack;
pub mod stable_abi;

use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

/// Most dimensions a fast reader hands over; higher ranks go through Python.
pub const MAX_RANK: usize = 64;

/// The environment variable that forces a reader.
pub const ENV: &str = "AITUNE_FAST_TENSOR_READER";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Python = 1,
    Dlpack = 2,
    StableAbi = 3,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Python => "python",
            Kind::Dlpack => "dlpack",
            Kind::StableAbi => "stable_abi",
        }
    }
}

/// 0 until chosen, else a `Kind`.
static KIND: AtomicU8 = AtomicU8::new(0);

/// What the selection needs again and again.
struct Types {
    tensor: Py<PyType>,
    parameter: Py<PyType>,
    mode_enabled: Py<PyAny>,
    /// `mode_enabled`'s C function and its `self`, when it is a plain `METH_NOARGS` builtin (called
    /// directly, as CPython would call it, without the call machinery around it)
    mode_enabled_c: Option<(ffi::PyCFunction, usize)>,
    /// `at::impl::torch_function_mode_enabled`, the C++ function that `mode_enabled` wraps (in a
    /// warning handler, which costs ten times the answer), when `libtorch_cpu` exports it and it
    /// agrees with `mode_enabled` when found
    mode_enabled_native: Option<ModeEnabled>,
    untyped_storage: Py<PyAny>,
}

/// `bool at::impl::torch_function_mode_enabled()`: two thread-local reads, no argument, no
/// exception, no Python.
type ModeEnabled = unsafe extern "C" fn() -> bool;
const MODE_ENABLED_SYMBOL: &std::ffi::CStr = c"_ZN2at4impl27torch_function_mode_enabledEv";

static TYPES: PyOnceLock<Types> = PyOnceLock::new();

fn types(py: Python<'_>) -> PyResult<&'static Types> {
    TYPES.get_or_try_init(py, || {
        let torch = py.import("torch")?;
        let tensor = torch.getattr("Tensor")?.cast_into::<PyType>()?;
        let mode_enabled = torch
            .getattr("_C")?
            .getattr("_is_torch_function_mode_enabled")?;
        // SAFETY: type and flag queries on a live object; the function pointer and `self` stay
        // valid while `mode_enabled` (kept below) is alive
        let mode_enabled_c = unsafe {
            let f = mode_enabled.as_ptr();
            if ffi::PyCFunction_Check(f) != 0 && ffi::PyCFunction_GetFlags(f) == ffi::METH_NOARGS {
                ffi::PyCFunction_GetFunction(f).map(|c| (c, ffi::PyCFunction_GetSelf(f) as usize))
            } else {
                None
            }
        };
        let mode_enabled_native = stable_abi::torch_cpu_symbol(py, MODE_ENABLED_SYMBOL)?
            // SAFETY: the exported function of that mangled name (no parameters) returns a bool
            .map(|p| unsafe { std::mem::transmute::<*mut std::ffi::c_void, ModeEnabled>(p) })
            .filter(|f| {
                // SAFETY: as above; the answer must be the Python function's, asked at the same moment
                let native = unsafe { f() };
                mode_enabled
                    .call0()
                    .and_then(|r| r.is_truthy())
                    .is_ok_and(|wrapped| wrapped == native)
            });
        Ok(Types {
            mode_enabled_c,
            mode_enabled_native,
            untyped_storage: tensor.getattr("untyped_storage")?.unbind(),
            tensor: tensor.unbind(),
            parameter: torch
                .getattr("nn")?
                .getattr("Parameter")?
                .cast_into::<PyType>()?
                .unbind(),
            mode_enabled: mode_enabled.unbind(),
        })
    })
}

/// The reader in use, chosen on first call from `AITUNE_FAST_TENSOR_READER`.
pub fn kind(py: Python<'_>) -> PyResult<Kind> {
    match KIND.load(Ordering::Relaxed) {
        1 => Ok(Kind::Python),
        2 => Ok(Kind::Dlpack),
        3 => Ok(Kind::StableAbi),
        _ => {
            let requested = std::env::var(ENV).unwrap_or_default();
            let k = select(py, requested.trim())?;
            KIND.store(k as u8, Ordering::Relaxed);
            Ok(k)
        }
    }
}

/// Why `name` cannot be used here, or `None` when it can.
fn unavailable(py: Python<'_>, name: &str) -> PyResult<Option<String>> {
    Ok(match name {
        "python" => None,
        "dlpack" => dlpack::unavailable(py)?,
        "stable_abi" => stable_abi::unavailable(py),
        _ => unreachable!("checked by the caller"),
    })
}

fn select(py: Python<'_>, requested: &str) -> PyResult<Kind> {
    match requested {
        "" | "auto" => Ok(if dlpack::unavailable(py)?.is_none() {
            Kind::Dlpack
        } else {
            Kind::Python
        }),
        "python" | "dlpack" | "stable_abi" => match unavailable(py, requested)? {
            Some(why) => Err(PyRuntimeError::new_err(format!(
                "{ENV}={requested}: the {requested} tensor reader is not available: {why}"
            ))),
            None => Ok(match requested {
                "dlpack" => Kind::Dlpack,
                "stable_abi" => Kind::StableAbi,
                _ => Kind::Python,
            }),
        },
        other => Err(PyValueError::new_err(format!(
            "{ENV}={other:?}: expected one of auto, dlpack, stable_abi, python"
        ))),
    }
}

/// The readers this process could use, fastest first.
pub fn available(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    let mut v = Vec::new();
    if dlpack::unavailable(py)?.is_none() {
        v.push("dlpack");
    }
    if stable_abi::unavailable(py).is_none() {
        v.push("stable_abi");
    }
    v.push("python");
    Ok(v)
}

/// Switch readers (tests compare them in one process); the name must be available.
pub fn force(py: Python<'_>, name: &str) -> PyResult<()> {
    let k = match name {
        "python" | "dlpack" | "stable_abi" => select(py, name)?,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown tensor reader {other:?}: expected one of dlpack, stable_abi, python"
            )))
        }
    };
    KIND.store(k as u8, Ordering::Relaxed);
    Ok(())
}

/// Whether a fast reader may read exact tensors now: one is selected and no `TorchFunctionMode`
/// is active (a mode sees, and may change, what `t.shape` returns). Callers ask once per walk.
pub fn fast_now(py: Python<'_>) -> PyResult<bool> {
    if kind(py)? == Kind::Python {
        return Ok(false);
    }
    let t = types(py)?;
    if let Some(f) = t.mode_enabled_native {
        // SAFETY: see `Types::mode_enabled_native`
        return Ok(!unsafe { f() });
    }
    let enabled = match t.mode_enabled_c {
        // SAFETY: a live METH_NOARGS builtin's C function, called with its `self` and no argument
        // as CPython calls it; a new reference, or NULL with an exception set
        Some((f, slf)) => unsafe {
            Bound::from_owned_ptr_or_err(py, f(slf as *mut ffi::PyObject, std::ptr::null_mut()))?
        },
        None => t.mode_enabled.bind(py).call0()?,
    };
    Ok(!enabled.is_truthy()?)
}

/// Whether a fast reader is selected (modes aside): worth prefetching tensor objects.
#[inline]
pub fn fast_selected(py: Python<'_>) -> PyResult<bool> {
    Ok(kind(py)? != Kind::Python)
}

/// What a fast read found.
pub enum Fast {
    /// sizes appended to `dims`; the dtype object, or `None` when only Python can name it
    Read(Option<&'static Py<PyAny>>),
    /// nothing read (`dims` unchanged): ask Python
    Declined,
}

/// Read `tensor`, an exact `torch.Tensor`/`nn.Parameter`, with the fast reader. Only call when
/// [`fast_now`] said yes for this walk.
#[inline]
pub fn read_fast(py: Python<'_>, tensor: &Bound<'_, PyAny>, dims: &mut Vec<i64>) -> Fast {
    if KIND.load(Ordering::Relaxed) == Kind::StableAbi as u8 {
        return stable_abi::read(py, tensor, dims);
    }
    dlpack::read(py, tensor, dims)
}

/// `cache_position[0].item()` when a fast reader can prove the read safe and exact: a 1-d
/// int64/int32 CPU tensor with at least one element whose first element lies inside its storage.
/// `None`: the caller must do what the reference does (`cache_position[0].item()`), which raises
/// torch's own error for a view past its storage.
pub fn first_int(py: Python<'_>, tensor: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if kind(py)? == Kind::Python || dlpack::unavailable(py)?.is_some() {
        return Ok(None);
    }
    let t = types(py)?;
    let ty = tensor.get_type();
    if !(ty.is(t.tensor.bind(py)) || ty.is(t.parameter.bind(py))) || !fast_now(py)? {
        return Ok(None);
    }
    // No Python may run between the DLPack export and the load (it could free the storage).
    let (addr, size, base, nbytes) = match stable_abi::get(py) {
        Some(abi) => {
            let Some((addr, size)) = dlpack::first_element(py, tensor) else {
                return Ok(None);
            };
            let Some((offset, nbytes)) = abi.extent(tensor) else {
                return Ok(None);
            };
            // the storage's data address: the element's minus the storage offset
            let Some(base) = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_mul(size))
                .and_then(|o| addr.checked_sub(o))
            else {
                return Ok(None);
            };
            (addr, size, base, usize::try_from(nbytes).unwrap_or(0))
        }
        None => {
            let Some((base, nbytes)) = storage_extent(py, tensor, t) else {
                return Ok(None);
            };
            let Some((addr, size)) = dlpack::first_element(py, tensor) else {
                return Ok(None);
            };
            (addr, size, base, nbytes)
        }
    };
    // inside the storage, as torch checks when `cache_position[0]` makes a view; a storage
    // without data (freed, or a functional wrapper's) has none
    if base == 0 || addr < base || nbytes < size || addr - base > nbytes - size {
        return Ok(None);
    }
    // SAFETY: `size` bytes at `addr` lie inside the tensor's live CPU storage, as just checked
    // against the extent torch reported, with no Python run since the export
    Ok(Some(unsafe { dlpack::load_int(addr, size) }))
}

/// `(data address, size in bytes)` of the tensor's storage, or `None` when torch would not say.
fn storage_extent(py: Python<'_>, tensor: &Bound<'_, PyAny>, t: &Types) -> Option<(usize, usize)> {
    let read = || -> PyResult<(usize, usize)> {
        let storage = t
            .untyped_storage
            .bind(py)
            .call1(PyTuple::new(py, [tensor])?)?;
        let base: usize = storage
            .call_method0(pyo3::intern!(py, "data_ptr"))?
            .extract()?;
        let nbytes: usize = storage
            .call_method0(pyo3::intern!(py, "nbytes"))?
            .extract()?;
        Ok((base, nbytes))
    };
    read().ok() // a storage torch will not describe: the reference path raises its error
}

/// Start loading the memory at `ptr` into cache (a hint: it never faults and may do nothing).
#[inline(always)]
pub fn prefetch(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never dereferences in a way that can fault
    unsafe {
        std::arch::x86_64::_mm_prefetch(ptr as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// The tensor reader in use, chosen on first call from ``AITUNE_FAST_TENSOR_READER`` (``auto``,
/// ``dlpack``, ``stable_abi``, ``python``): RuntimeError when the one named is unavailable, saying why;
/// ValueError for an unknown name.
#[pyfunction]
pub fn tensor_reader(py: Python<'_>) -> PyResult<&'static str> {
    Ok(kind(py)?.name())
}

/// The readers this process could use, fastest first (``"python"`` always).
#[pyfunction]
pub fn tensor_readers_available(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    available(py)
}

/// `_core._force_tensor_reader(name)`: for tests that compare readers in one process.
#[pyfunction]
#[pyo3(name = "_force_tensor_reader")]
pub fn force_tensor_reader(py: Python<'_>, name: &str) -> PyResult<()> {
    force(py, name)
}

/// `_core._stable_abi_extent(use_it)`: whether torch's stable C ABI gives the storage extent for
/// `cache_position` (false: this torch lacks it); `use_it` false makes Python give it (tests).
#[pyfunction]
#[pyo3(name = "_stable_abi_extent")]
pub fn stable_abi_extent(py: Python<'_>, use_it: bool) -> bool {
    stable_abi::enable(py, use_it)
}

/// `_core._dlpack_stats()`: how often the selected fast reader was refused, and how many reads
/// the back-off then sent to Python (tests, diagnostics).
#[pyfunction]
#[pyo3(name = "_dlpack_stats")]
pub fn dlpack_stats(py: Python<'_>) -> PyResult<(u64, u64)> {
    Ok(match kind(py)? {
        Kind::StableAbi => stable_abi::stats(),
        _ => dlpack::stats(),
    })
}
