//! Scans of the live interpreter for `patch_aitune()`/`unpatch_aitune()`, each made in one step
//! that runs no Python code, so no other thread can run in the middle of it.
//!
//! - `_gc_objects_but_tuples()`: what `gc.get_objects()` lists, less the tuples. A tuple another
//!   thread is still filling (`tuple(generator)`: the generator runs Python code, so the thread can
//!   pause half-way) must keep its builder's reference as its only one: CPython grows it in place
//!   only then and otherwise fails the builder with `SystemError: bad argument to internal
//!   function`. A scan in Python holding the full list while its own code runs lets that thread go
//!   on meanwhile.
//! - `_frames_running(codes, me)` and `_still_running(pending)`: which other threads are inside
//!   given functions. Walking another thread's frames (`f_back`) from Python lets that thread run
//!   between two steps and unwind the frames being walked: the walk then read freed frames
//!   (segfaults, or `f_back` giving a dict).
//!
//! Each step pauses the cycle collector (a collection could run a finalizer, which is Python code),
//! calls only C functions, and drops nothing that could be freed.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyTuple};

/// Run `f` with the cycle collector paused (restored as it was).
fn gc_paused<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    // SAFETY: plain C API calls, the GIL is held (the caller has a `Python` token)
    let was_enabled = unsafe { ffi::PyGC_Disable() };
    let out = f();
    if was_enabled != 0 {
        // SAFETY: as above
        unsafe { ffi::PyGC_Enable() };
    }
    out
}

#[pyfunction]
pub fn _gc_objects_but_tuples<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let get_objects = py.import("gc")?.getattr("get_objects")?;
    let kept = PyList::empty(py);
    gc_paused(|| {
        let all = get_objects.call0()?;
        for obj in all.cast::<PyList>()?.iter() {
            // SAFETY: `obj` is a live object the list holds
            if unsafe { ffi::PyTuple_Check(obj.as_ptr()) } == 0 {
                kept.append(obj)?;
            }
        }
        Ok(())
    })?;
    Ok(kept)
}

/// Each thread's innermost frame, by thread id (`sys._current_frames()`).
fn current_frames<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let frames = py.import("sys")?.getattr("_current_frames")?;
    Ok(frames.call0()?.cast_into::<PyDict>()?)
}

/// The frame below `frame` on its thread's stack, if any.
fn back<'py>(frame: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    // SAFETY: `frame` is a frame object (from `sys._current_frames()` or an earlier `back`), the
    // GIL is held and no Python code runs, so its thread is paused at a consistent point;
    // `PyFrame_GetBack` returns a new reference or NULL (it sets no exception)
    unsafe {
        let b = ffi::PyFrame_GetBack(frame.as_ptr().cast());
        Bound::from_owned_ptr_or_opt(frame.py(), b.cast())
    }
}

/// The code object a frame runs.
fn code<'py>(frame: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    // SAFETY: as in `back`; `PyFrame_GetCode` returns a new, non-NULL reference
    unsafe {
        let c = ffi::PyFrame_GetCode(frame.as_ptr().cast());
        Bound::from_owned_ptr(frame.py(), c.cast())
    }
}

/// For every thread but `me`: its innermost frame running one of `codes`, as `(thread id, frame)`.
#[pyfunction]
pub fn _frames_running<'py>(
    py: Python<'py>,
    codes: &Bound<'py, PySet>,
    me: u64,
) -> PyResult<Bound<'py, PyList>> {
    let found = PyList::empty(py);
    gc_paused(|| {
        for (ident, top) in current_frames(py)?.iter() {
            if ident.extract::<u64>()? == me {
                continue;
            }
            let mut frame = Some(top);
            while let Some(f) = frame {
                if codes.contains(code(&f))? {
                    found.append(PyTuple::new(py, [ident.clone(), f])?)?;
                    break;
                }
                frame = back(&f);
            }
        }
        Ok(())
    })?;
    Ok(found)
}

/// Of `pending` (`(thread id, frame)` pairs), those whose frame is still on its thread's stack.
#[pyfunction]
pub fn _still_running<'py>(
    py: Python<'py>,
    pending: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let left = PyList::empty(py);
    gc_paused(|| {
        let frames = current_frames(py)?;
        for pair in pending.iter() {
            let (ident, wanted) = pair.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
            let mut frame = frames.get_item(&ident)?;
            while let Some(f) = frame {
                if f.is(&wanted) {
                    left.append(&pair)?;
                    break;
                }
                frame = back(&f);
            }
        }
        Ok(())
    })?;
    Ok(left)
}
