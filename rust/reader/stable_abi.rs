//! Torch's stable C ABI (`torch/csrc/stable/c/shim.h`, torch 2.14 and later), used for one thing: the
//! storage offset and storage size of `cache_position`, which DLPack does not give, so that its first
//! element is read only when it lies inside the storage (as torch checks when `cache_position[0]`
//! makes a view).
//!
//! The functions are plain C symbols of the `libtorch_cpu` torch has already loaded, found with
//! `dlopen(RTLD_NOLOAD)` + `dlsym` at run time: nothing is linked, no header is compiled. Without
//! them (older torch) the extent is asked of Python (`untyped_storage()`), three calls slower.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;

type Handle = *mut c_void;
type FromPy = unsafe extern "C" fn(py_obj: *mut c_void, ret: *mut Handle) -> i32;
type GetI64 = unsafe extern "C" fn(tensor: Handle, ret: *mut i64) -> i32;
type Delete = unsafe extern "C" fn(tensor: Handle) -> i32;

const RTLD_LAZY: c_int = 0x1;
const RTLD_NOLOAD: c_int = 0x4;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

pub struct StableAbi {
    from_pyobject: FromPy,
    storage_offset: GetI64,
    storage_size: GetI64,
    delete: Delete,
}

static STABLE: GILOnceCell<Option<StableAbi>> = GILOnceCell::new();
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

fn resolve(py: Python<'_>) -> PyResult<Option<StableAbi>> {
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
    if handle.is_null() {
        return Ok(None);
    }
    let sym = |name: &std::ffi::CStr| -> Option<*mut c_void> {
        // SAFETY: a live handle and a NUL-terminated name
        let p = unsafe { dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let (Some(f), Some(o), Some(s), Some(d)) = (
        sym(c"torch_tensor_from_pyobject"),
        sym(c"aoti_torch_get_storage_offset"),
        sym(c"aoti_torch_get_storage_size"),
        sym(c"aoti_torch_delete_tensor_object"),
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
