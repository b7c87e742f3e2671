//! Torch's stable C ABI (`torch/csrc/stable/c/shim.h`, torch 2.14 and later), used for two things:
//! - the storage offset and storage size of `cache_position`, which DLPack does not give, so that its
//!   first element is read only when it lies inside the storage (as torch checks when
//!   `cache_position[0]` makes a view);
//! - a tensor reader (`AITUNE_FAST_TENSOR_READER=stable_abi`), sizes and dtype code per tensor; the
//!   dtype codes are learnt by reading one probe tensor of every torch dtype.
//!
//! The functions are plain C symbols of the `libtorch_cpu` torch has already loaded, found with
//! `dlopen(RTLD_NOLOAD)` + `dlsym` at run time: nothing is linked, no header is compiled. Without
//! them (older torch) the extent is asked of Python (`untyped_storage()`), three calls slower.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

type Handle = *mut c_void;
type FromPy = unsafe extern "C" fn(py_obj: *mut c_void, ret: *mut Handle) -> i32;
type GetI64 = unsafe extern "C" fn(tensor: Handle, ret: *mut i64) -> i32;
type Delete = unsafe extern "C" fn(tensor: Handle) -> i32;
type GetSizes = unsafe extern "C" fn(tensor: Handle, ret: *mut *mut i64) -> i32;
type GetI32 = unsafe extern "C" fn(tensor: Handle, ret: *mut i32) -> i32;

use libc::{dlopen, dlsym, RTLD_LAZY, RTLD_NOLOAD};

pub struct StableAbi {
    from_pyobject: FromPy,
    storage_offset: GetI64,
    storage_size: GetI64,
    delete: Delete,
    dim: GetI64,
    sizes: GetSizes,
    dtype: GetI32,
}

static STABLE: PyOnceLock<Option<StableAbi>> = PyOnceLock::new();
/// Set by tests to take the Python path for the extent even where torch has the functions.
static OFF: AtomicBool = AtomicBool::new(false);

/// The functions, when the torch loaded in this process has them.
pub fn get(py: Python<'_>) -> Option<&'static StableAbi> {
    if OFF.load(Ordering::Relaxed) {
        return None;
    }
    STABLE
        .get_or_init(py, || resolve(py).ok().flatten())
        .as_ref()
}

/// Whether the functions are found (`use_them` false: tests of the Python path).
pub fn enable(py: Python<'_>, use_them: bool) -> bool {
    OFF.store(!use_them, Ordering::Relaxed);
    STABLE
        .get_or_init(py, || resolve(py).ok().flatten())
        .is_some()
}

/// The `libtorch_cpu` that the imported torch has loaded, as a `dlopen` handle (nothing is loaded
/// here), or `None`.
fn torch_cpu(py: Python<'_>) -> PyResult<Option<*mut c_void>> {
    let torch = py.import("torch")?;
    let file: String = torch.getattr("__file__")?.extract()?;
    let Some(dir) = std::path::Path::new(&file).parent() else {
        return Ok(None);
    };
    let lib = dir.join("lib").join("libtorch_cpu.so");
    let Ok(path) = CString::new(lib.to_string_lossy().into_owned()) else {
        return Ok(None);
    };
    // SAFETY: RTLD_NOLOAD only finds a library already loaded (torch's own); it loads nothing
    let handle = unsafe { dlopen(path.as_ptr(), RTLD_LAZY | RTLD_NOLOAD) };
    Ok((!handle.is_null()).then_some(handle))
}

/// The address of the symbol `name` of `libtorch_cpu`, when torch has loaded it and exports it.
pub(super) fn torch_cpu_symbol(
    py: Python<'_>,
    name: &std::ffi::CStr,
) -> PyResult<Option<*mut c_void>> {
    Ok(torch_cpu(py)?.and_then(|handle| symbol(handle, name)))
}

/// `dlsym(handle, name)`, `None` when not found.
fn symbol(handle: *mut c_void, name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: a live handle and a NUL-terminated name
    let p = unsafe { dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn resolve(py: Python<'_>) -> PyResult<Option<StableAbi>> {
    let Some(handle) = torch_cpu(py)? else {
        return Ok(None);
    };
    let sym = |name: &std::ffi::CStr| symbol(handle, name);
    let (Some(f), Some(o), Some(s), Some(d), Some(n), Some(z), Some(t)) = (
        sym(c"torch_tensor_from_pyobject"),
        sym(c"aoti_torch_get_storage_offset"),
        sym(c"aoti_torch_get_storage_size"),
        sym(c"aoti_torch_delete_tensor_object"),
        sym(c"aoti_torch_get_dim"),
        sym(c"aoti_torch_get_sizes"),
        sym(c"aoti_torch_get_dtype"),
    ) else {
        return Ok(None);
    };
    // SAFETY: the shim.h signatures of these stable C functions
    Ok(Some(unsafe {
        StableAbi {
            from_pyobject: std::mem::transmute::<*mut c_void, FromPy>(f),
            storage_offset: std::mem::transmute::<*mut c_void, GetI64>(o),
            storage_size: std::mem::transmute::<*mut c_void, GetI64>(s),
            delete: std::mem::transmute::<*mut c_void, Delete>(d),
            dim: std::mem::transmute::<*mut c_void, GetI64>(n),
            sizes: std::mem::transmute::<*mut c_void, GetSizes>(z),
            dtype: std::mem::transmute::<*mut c_void, GetI32>(t),
        }
    }))
}

impl StableAbi {
    /// `(storage offset in elements, storage size in bytes)` of `tensor`, an exact
    /// `torch.Tensor`/`nn.Parameter` that DLPack has just exported (so it has a storage).
    pub fn extent(&self, tensor: &Bound<'_, PyAny>) -> Option<(i64, i64)> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: a live tensor object, the GIL held (the function's contract); a new handle on success
        if unsafe { (self.from_pyobject)(tensor.as_ptr().cast(), &mut h) } != 0 || h.is_null() {
            return None;
        }
        let (mut offset, mut size) = (0i64, 0i64);
        // SAFETY: `h` is the handle made just above, deleted exactly once below
        let ok = unsafe {
            (self.storage_offset)(h, &mut offset) == 0 && (self.storage_size)(h, &mut size) == 0
        };
        // SAFETY: as above
        unsafe { (self.delete)(h) };
        ok.then_some((offset, size))
    }
}

impl StableAbi {
    /// Sizes appended to `dims` and the dtype code, or `None` (dims unchanged) when torch refused.
    #[inline]
    pub fn sizes_dtype(&self, tensor: &Bound<'_, PyAny>, dims: &mut Vec<i64>) -> Option<i32> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: a live tensor object, the GIL held; a new handle on success
        if unsafe { (self.from_pyobject)(tensor.as_ptr().cast(), &mut h) } != 0 || h.is_null() {
            return None;
        }
        let (mut ndim, mut sizes, mut code) = (0i64, std::ptr::null_mut::<i64>(), 0i32);
        // SAFETY: `h` made just above, deleted once below; `sizes` borrowed from the tensor the
        // handle keeps alive, copied before the delete
        let ok = unsafe {
            (self.dim)(h, &mut ndim) == 0
                && (self.dtype)(h, &mut code) == 0
                && (0..=super::MAX_RANK as i64).contains(&ndim)
                && (ndim == 0 || ((self.sizes)(h, &mut sizes) == 0 && !sizes.is_null()))
        };
        if ok && ndim > 0 {
            // SAFETY: `ndim` sizes owned by the tensor, alive while the handle is
            dims.extend_from_slice(unsafe { std::slice::from_raw_parts(sizes, ndim as usize) });
        }
        // SAFETY: as above
        unsafe { (self.delete)(h) };
        ok.then_some(code)
    }
}

/// The functions whether or not tests turned the extent off (the reader itself).
pub fn resolved(py: Python<'_>) -> Option<&'static StableAbi> {
    STABLE
        .get_or_init(py, || resolve(py).ok().flatten())
        .as_ref()
}

/// Why this process cannot use the stable C ABI reader, or `None` when it can.
pub fn unavailable(py: Python<'_>) -> Option<String> {
    resolved(py).is_none().then(|| {
        "torch's stable C ABI (torch_tensor_from_pyobject, torch 2.14 or later) is not in this torch"
            .to_string()
    })
}

static BACKOFF: super::backoff::Backoff = super::backoff::Backoff::new();

/// `(refused, skipped)` reads of the reader so far.
pub fn stats() -> (u64, u64) {
    BACKOFF.stats()
}

/// Torch dtype objects by stable-ABI dtype code (c10's ScalarType numbering).
static DTYPES: PyOnceLock<Vec<Option<Py<PyAny>>>> = PyOnceLock::new();

fn build_table(py: Python<'_>, abi: &StableAbi) -> PyResult<Vec<Option<Py<PyAny>>>> {
    let probes = py
        .import("aitune_fast._reader")?
        .getattr("dtype_probes")?
        .call0()?;
    let mut table: Vec<Option<Py<PyAny>>> = Vec::new();
    for item in probes.try_iter()? {
        let (dtype, tensor): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let mut dims = Vec::new();
        let Some(code) = abi.sizes_dtype(&tensor, &mut dims) else {
            continue;
        };
        let Ok(i) = usize::try_from(code) else {
            continue;
        };
        if i >= 256 {
            continue;
        }
        if table.len() <= i {
            table.resize_with(i + 1, || None);
        }
        table[i] = Some(dtype.unbind());
    }
    Ok(table)
}

/// Sizes and dtype of `tensor`, an exact `torch.Tensor`/`nn.Parameter`.
#[inline]
pub fn read(py: Python<'_>, tensor: &Bound<'_, PyAny>, dims: &mut Vec<i64>) -> super::Fast {
    let Some(abi) = resolved(py) else {
        return super::Fast::Declined;
    };
    let ptr = tensor.as_ptr() as usize;
    if !BACKOFF.may_try(ptr) {
        return super::Fast::Declined;
    }
    let Some(code) = abi.sizes_dtype(tensor, dims) else {
        BACKOFF.refused(ptr);
        return super::Fast::Declined;
    };
    let table = match DTYPES.get(py) {
        Some(t) => t,
        None => match DTYPES.get_or_try_init(py, || build_table(py, abi)) {
            Ok(t) => t,
            Err(e) => {
                e.write_unraisable(py, None);
                let _ = DTYPES.set(py, Vec::new());
                DTYPES.get(py).expect("just set")
            }
        },
    };
    super::Fast::Read(
        usize::try_from(code)
            .ok()
            .and_then(|i| table.get(i))
            .and_then(|d| d.as_ref()),
    )
}
