//! The optional C++ shim that reads tensor sizes and dtypes without Python calls
//! (rust/shim/torch_shim.cpp; compiled by build.rs when torch's headers are available).
//!
//! It is used only for exact `torch.Tensor` and `nn.Parameter` objects, and only when the torch
//! imported at run time is the version the shim was compiled against; every other case, and every
//! case the shim declines, goes through Python.

use pyo3::prelude::*;

/// Most dimensions read without Python.
pub const MAX_RANK: usize = 16;

#[cfg(aft_torch_shim)]
mod ffi {
    use std::os::raw::{c_char, c_int};
    extern "C" {
        pub fn aft_torch_version() -> *const c_char;
        pub fn aft_tensor_meta(
            obj: *mut pyo3::ffi::PyObject,
            dims: *mut i64,
            cap: c_int,
            scalar_type: *mut c_int,
        ) -> c_int;
        pub fn aft_first_int(obj: *mut pyo3::ffi::PyObject, out: *mut i64) -> c_int;
        pub fn aft_prefetch_tensor(obj: *mut pyo3::ffi::PyObject);
    }
}

/// Whether the shim was compiled against the torch now imported (checked once by `interp`).
pub fn compatible(py: Python<'_>) -> PyResult<bool> {
    #[cfg(aft_torch_shim)]
    {
        let built = unsafe { std::ffi::CStr::from_ptr(ffi::aft_torch_version()) }
            .to_string_lossy()
            .into_owned();
        let running: String = py
            .import("torch")?
            .getattr("__version__")?
            .str()?
            .extract()?;
        // torch.__version__ carries a local suffix (+cu132) the header's TORCH_VERSION lacks
        Ok(running.split('+').next() == Some(built.as_str())
            && env!("AFT_TORCH_VERSION") == running)
    }
    #[cfg(not(aft_torch_shim))]
    {
        let _ = py;
        Ok(false)
    }
}

#[cfg(aft_torch_shim)]
mod dtypes {
    use std::sync::atomic::AtomicU32;
    pub const UNSET: u32 = u32::MAX;
    /// dtype ids by c10::ScalarType, learned from the first tensor of each type
    pub static SCALAR_TYPES: [AtomicU32; 64] = [const { AtomicU32::new(UNSET) }; 64];
}

/// Sizes into `dims` and the dtype id, or `None` when the caller must ask Python.
#[inline]
pub fn tensor_meta(tensor: &Bound<'_, PyAny>, dims: &mut Vec<i64>) -> PyResult<Option<u16>> {
    #[cfg(aft_torch_shim)]
    {
        let mut buf = [0i64; MAX_RANK];
        let mut st: i32 = 0;
        // SAFETY: `tensor` is an exact torch.Tensor/Parameter (checked by the caller) and the GIL is held.
        let rank = unsafe {
            ffi::aft_tensor_meta(tensor.as_ptr(), buf.as_mut_ptr(), MAX_RANK as i32, &mut st)
        };
        if rank < 0 || !(0..64).contains(&st) {
            return Ok(None);
        }
        use std::sync::atomic::Ordering;
        let slot = &dtypes::SCALAR_TYPES[st as usize];
        let id = match slot.load(Ordering::Relaxed) {
            dtypes::UNSET => {
                let id = crate::tensor_spec::dtype_id(
                    &tensor.getattr(pyo3::intern!(tensor.py(), "dtype"))?,
                )?;
                slot.store(id as u32, Ordering::Relaxed);
                id
            }
            id => id as u16,
        };
        dims.extend_from_slice(&buf[..rank as usize]);
        Ok(Some(id))
    }
    #[cfg(not(aft_torch_shim))]
    {
        let _ = (tensor, dims);
        Ok(None)
    }
}

/// `cache_position[0].item()` for a 1-d int CPU tensor, or `None` when Python must do it.
pub fn first_int(tensor: &Bound<'_, PyAny>) -> Option<i64> {
    #[cfg(aft_torch_shim)]
    {
        let mut out = 0i64;
        // SAFETY: as for `tensor_meta`.
        if unsafe { ffi::aft_first_int(tensor.as_ptr(), &mut out) } == 0 {
            return Some(out);
        }
        None
    }
    #[cfg(not(aft_torch_shim))]
    {
        let _ = tensor;
        None
    }
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

/// Start loading the TensorImpl behind `tensor`, an exact torch.Tensor or nn.Parameter.
///
/// # Safety
/// `tensor` must be a live exact torch.Tensor or nn.Parameter, and the GIL held.
#[inline]
pub unsafe fn prefetch_tensor(tensor: *mut pyo3::ffi::PyObject) {
    #[cfg(aft_torch_shim)]
    ffi::aft_prefetch_tensor(tensor);
    #[cfg(not(aft_torch_shim))]
    let _ = tensor;
}
