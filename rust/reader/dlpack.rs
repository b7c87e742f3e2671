//! The DLPack C exchange API reader (torch 2.10 and later).
//!
//! `torch.Tensor.__dlpack_c_exchange_api__` is a PyCapsule named `"dlpack_exchange_api"` holding a
//! `DLPackExchangeAPI*` (DLPack's `dlpack.h`; the structs are declared here, nothing is compiled
//! against torch). Its `dltensor_from_py_object_no_sync` fills a caller's `DLTensor` with the
//! tensor's sizes, dtype, device and data address, allocating nothing; it returns -1 with a
//! Python exception set when DLPack cannot describe the tensor (meta, sparse, nested, quantized
//! and bit dtypes, symbolic sizes, tensors without storage under `vmap`).
//!
//! Refusals are expensive in torch (a C++ exception with a symbolised backtrace, milliseconds),
//! so after one the reader backs off: the refused object, and a growing number of the reads that
//! follow, go straight to Python (see [`Backoff`]).
//!
//! DLPack names some torch dtypes alike (`int8` and the sub-byte `int1`..`int7` are all
//! `(Int, 8, 1)`). The first read probes every torch dtype once; a `(code, bits, lanes)` that more
//! than one dtype exports as, or that none did, is named by `t.dtype` from Python instead.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyList};

use super::backoff::Backoff;
use super::{Fast, MAX_RANK};

// ---- dlpack.h, the parts used -------------------------------------------------------------------

/// The DLPack major version whose layout is declared here.
const MAJOR: u32 = 1;
const CAPSULE_NAME: &std::ffi::CStr = c"dlpack_exchange_api";
const KDL_CPU: i32 = 1;
const KDL_INT: u8 = 0;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLPackExchangeAPIHeader {
    version: DLPackVersion,
    prev_api: *const DLPackExchangeAPIHeader,
}

type DLTensorFromPyObjectNoSync =
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> i32;

#[repr(C)]
struct DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader,
    managed_tensor_allocator: *const c_void,
    managed_tensor_from_py_object_no_sync: *const c_void,
    managed_tensor_to_py_object_no_sync: *const c_void,
    dltensor_from_py_object_no_sync: Option<DLTensorFromPyObjectNoSync>,
    current_work_stream: *const c_void,
}

// ---- discovery ----------------------------------------------------------------------------------

struct Api {
    /// keeps the capsule (and so the table it points to) alive for the process
    _capsule: Py<PyAny>,
}

/// The capsule, or why it cannot be used.
static API: PyOnceLock<Result<Api, String>> = PyOnceLock::new();
/// `dltensor_from_py_object_no_sync`, set once the API checked out.
static FROM_PY: OnceLock<DLTensorFromPyObjectNoSync> = OnceLock::new();

/// Why this process cannot use the DLPack reader, or `None` when it can.
pub fn unavailable(py: Python<'_>) -> PyResult<Option<String>> {
    let api = API.get_or_try_init(py, || discover(py))?;
    Ok(api.as_ref().err().cloned())
}

fn discover(py: Python<'_>) -> PyResult<Result<Api, String>> {
    let torch = py.import("torch")?;
    let version: String = torch.getattr("__version__")?.str()?.extract()?;
    let tensor = torch.getattr("Tensor")?;
    let Ok(capsule) = tensor.getattr("__dlpack_c_exchange_api__") else {
        return Ok(Err(format!(
            "torch {version} has no torch.Tensor.__dlpack_c_exchange_api__ (torch 2.10 or later has it)"
        )));
    };
    // the header asks for objects of the type the API was found on: nn.Parameter must share it
    let param = torch.getattr("nn")?.getattr("Parameter")?;
    match param.getattr("__dlpack_c_exchange_api__") {
        Ok(p) if p.is(&capsule) => {}
        _ => {
            return Ok(Err(format!(
                "torch {version}: nn.Parameter does not share torch.Tensor's DLPack exchange API"
            )))
        }
    }
    let Ok(cap) = capsule.cast::<PyCapsule>() else {
        return Ok(Err(format!(
            "torch {version}: torch.Tensor.__dlpack_c_exchange_api__ is not a PyCapsule"
        )));
    };
    // SAFETY: a capsule; the name is checked by PyCapsule_GetPointer
    let ptr = unsafe { pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), CAPSULE_NAME.as_ptr()) };
    if ptr.is_null() {
        drop(PyErr::take(py));
        return Ok(Err(format!(
            "torch {version}: the DLPack exchange capsule is not named \"dlpack_exchange_api\""
        )));
    }
    // walk to a table of the major version declared here (newer majors may chain older ones)
    let mut header = ptr as *const DLPackExchangeAPIHeader;
    let mut seen = Vec::new();
    // SAFETY: the capsule holds a DLPackExchangeAPI*, whose header layout is stable across versions;
    // the table lives as long as the process (torch keeps it static), and the capsule is kept anyway
    unsafe {
        while !header.is_null() && (*header).version.major != MAJOR {
            seen.push((*header).version.major);
            if seen.len() > 16 {
                break;
            }
            header = (*header).prev_api;
        }
        if header.is_null() || (*header).version.major != MAJOR {
            return Ok(Err(format!(
                "torch {version} offers DLPack exchange API major versions {seen:?}, this build reads {MAJOR}"
            )));
        }
        let api = header as *const DLPackExchangeAPI;
        let Some(f) = (*api).dltensor_from_py_object_no_sync else {
            return Ok(Err(format!(
                "torch {version}: the DLPack exchange API has no dltensor_from_py_object_no_sync"
            )));
        };
        let _ = FROM_PY.set(f);
    }
    Ok(Ok(Api {
        _capsule: capsule.unbind(),
    }))
}

// ---- refusals ---------------------------------------------------------------------------------

static BACKOFF: Backoff = Backoff::new();

/// `(refused, skipped)` reads so far.
pub fn stats() -> (u64, u64) {
    BACKOFF.stats()
}

/// Fill `out` for `tensor`; `false` (exception cleared) when declined or refused.
#[inline(always)]
fn export(py: Python<'_>, tensor: &Bound<'_, PyAny>, out: &mut MaybeUninit<DLTensor>) -> bool {
    let Some(f) = FROM_PY.get() else {
        return false;
    };
    let ptr = tensor.as_ptr();
    if !BACKOFF.may_try(ptr as usize) {
        return false;
    }
    // SAFETY: `tensor` is a live exact torch.Tensor/nn.Parameter (the caller's check), the type the
    // API was found on; the GIL is held, as the function needs to set an exception
    let rc = unsafe { f(ptr.cast(), out.as_mut_ptr()) };
    if rc != 0 {
        drop(PyErr::take(py)); // the exception torch set
        BACKOFF.refused(ptr as usize);
        return false;
    }
    true
}

// ---- dtypes -------------------------------------------------------------------------------------

/// Torch dtype objects by DLPack `(code, bits)` with one lane: `slots[code][log2(bits) - 3]` is
/// 1 + the index into `dtypes`, or 0 when only Python can name the dtype.
struct DtypeTable {
    slots: [[u8; 5]; 32],
    dtypes: Vec<Py<PyAny>>,
}

static DTYPES: PyOnceLock<DtypeTable> = PyOnceLock::new();

/// `(row, column)` of a DLPack dtype in the table.
#[inline(always)]
fn slot(dt: DLDataType) -> Option<(usize, usize)> {
    let bits = dt.bits as u32;
    if dt.lanes != 1 || dt.code >= 32 || !bits.is_power_of_two() || !(8..=128).contains(&bits) {
        return None;
    }
    Some((dt.code as usize, bits.trailing_zeros() as usize - 3))
}

/// Export an empty tensor of every torch dtype and keep the `(code, bits, lanes)` that exactly one
/// dtype exports as.
fn build_table(py: Python<'_>) -> PyResult<DtypeTable> {
    let probes = py
        .import("aitune_fast._reader")?
        .getattr("dtype_probes")?
        .call0()?;
    let probes = probes.cast::<PyList>()?;
    let mut owners: Vec<((usize, usize), Option<usize>)> = Vec::new();
    let mut dtypes: Vec<Py<PyAny>> = Vec::new();
    for item in probes.iter() {
        let (dtype, tensor): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let mut out = MaybeUninit::<DLTensor>::zeroed();
        let Some(f) = FROM_PY.get() else { break };
        // SAFETY: an exact torch.Tensor made by `dtype_probes`, the GIL held
        if unsafe { f(tensor.as_ptr().cast(), out.as_mut_ptr()) } != 0 {
            drop(PyErr::take(py)); // a dtype DLPack refuses: its tensors are refused too
            continue;
        }
        // SAFETY: filled by the successful call
        let dt = unsafe { out.assume_init_ref() }.dtype;
        let Some(key) = slot(dt) else { continue };
        match owners.iter_mut().find(|(k, _)| *k == key) {
            Some((_, owner)) => *owner = None, // a second dtype: ambiguous
            None => {
                dtypes.push(dtype.unbind());
                owners.push((key, Some(dtypes.len() - 1)));
            }
        }
    }
    let mut slots = [[0u8; 5]; 32];
    for ((row, col), owner) in owners {
        if let Some(i) = owner {
            slots[row][col] = u8::try_from(i + 1).unwrap_or(0);
        }
    }
    Ok(DtypeTable { slots, dtypes })
}

/// The torch dtype a DLPack dtype names, when exactly one does.
#[inline]
fn dtype_of(py: Python<'_>, dt: DLDataType) -> Option<&'static Py<PyAny>> {
    let key = dt.code as u64 | (dt.bits as u64) << 8 | (dt.lanes as u64) << 16;
    let last = LAST_DTYPE.load(Ordering::Relaxed);
    if last >> 32 == key && last as u32 != 0 {
        if let Some(t) = DTYPES.get(py) {
            return t.dtypes.get(last as u32 as usize - 1);
        }
    }
    let (row, col) = slot(dt)?;
    let table = match DTYPES.get(py) {
        Some(t) => t,
        None => table_slow(py)?,
    };
    let i = table.slots[row][col];
    if i == 0 {
        return None;
    }
    LAST_DTYPE.store(key << 32 | i as u64, Ordering::Relaxed);
    table.dtypes.get(i as usize - 1)
}

/// The last DLPack dtype named, `(code | bits << 8 | lanes << 16) << 32 | table index + 1`.
static LAST_DTYPE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cold]
fn table_slow(py: Python<'_>) -> Option<&'static DtypeTable> {
    match DTYPES.get_or_try_init(py, || build_table(py)) {
        Ok(t) => Some(t),
        Err(e) => {
            // no table: every dtype is read from Python; say why once
            e.write_unraisable(py, None);
            let _ = DTYPES.set(
                py,
                DtypeTable {
                    slots: [[0; 5]; 32],
                    dtypes: Vec::new(),
                },
            );
            DTYPES.get(py)
        }
    }
}

// ---- reads --------------------------------------------------------------------------------------

/// Sizes and dtype of `tensor`, an exact `torch.Tensor`/`nn.Parameter`.
#[inline]
pub fn read(py: Python<'_>, tensor: &Bound<'_, PyAny>, dims: &mut Vec<i64>) -> Fast {
    let mut out = MaybeUninit::<DLTensor>::uninit();
    if !export(py, tensor, &mut out) {
        return Fast::Declined;
    }
    // SAFETY: filled by the successful call; valid until we return to Python
    let t = unsafe { out.assume_init_ref() };
    let Ok(ndim) = usize::try_from(t.ndim) else {
        return Fast::Declined;
    };
    if ndim > MAX_RANK || (ndim > 0 && t.shape.is_null()) {
        return Fast::Declined;
    }
    if ndim > 0 {
        // SAFETY: torch points `shape` at `ndim` sizes it owns, alive while we hold the GIL
        dims.extend_from_slice(unsafe { std::slice::from_raw_parts(t.shape, ndim) });
    }
    Fast::Read(dtype_of(py, t.dtype))
}

/// Where the first element of `tensor` is, as `(address, size in bytes)`, when `tensor` is a 1-d
/// int64/int32 CPU tensor with at least one element and a data address; `None` otherwise. Nothing
/// is read: the caller checks the address against the storage first.
pub fn first_element(py: Python<'_>, tensor: &Bound<'_, PyAny>) -> Option<(usize, usize)> {
    let mut out = MaybeUninit::<DLTensor>::uninit();
    if !export(py, tensor, &mut out) {
        return None;
    }
    // SAFETY: filled by the successful call
    let t = unsafe { out.assume_init_ref() };
    if t.ndim != 1 || t.shape.is_null() || t.device.device_type != KDL_CPU || t.data.is_null() {
        return None;
    }
    // SAFETY: one size, owned by torch
    if unsafe { *t.shape } < 1 {
        return None;
    }
    let dt = t.dtype;
    let size = match (dt.code, dt.bits, dt.lanes) {
        (KDL_INT, 64, 1) => 8,
        (KDL_INT, 32, 1) => 4,
        _ => return None,
    };
    // only a dtype DLPack names unambiguously (int64/int32 today)
    dtype_of(py, dt)?;
    let addr = (t.data as usize).checked_add(usize::try_from(t.byte_offset).ok()?)?;
    Some((addr, size))
}

/// The signed integer of `size` (8 or 4) bytes at `addr`.
///
/// # Safety
/// `size` bytes at `addr` must be readable: inside a live CPU storage, checked against the
/// extent torch reports with no Python run since.
pub unsafe fn load_int(addr: usize, size: usize) -> i64 {
    if size == 8 {
        std::ptr::read_unaligned(addr as *const i64)
    } else {
        std::ptr::read_unaligned(addr as *const i32) as i64
    }
}
