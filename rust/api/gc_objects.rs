//! `_gc_objects_but_tuples()`: what `gc.get_objects()` lists, less the tuples, for the patch's scans
//! of live AITune objects.
//!
//! A tuple another thread is still filling (`tuple(generator)`: the generator runs Python code, so
//! the thread can pause half-way) must keep its builder's reference as its only one: CPython grows
//! it in place only then and otherwise fails the builder with `SystemError: bad argument to
//! internal function`. A scan in Python that holds `gc.get_objects()`'s list while its own code
//! runs lets that thread go on meanwhile. Here the list is made, filtered and dropped in one step
//! that runs no Python code (nothing in it is freed and the result list is made beforehand, so
//! no finalizer or collection runs either): no other thread can run in between.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;

#[pyfunction]
pub fn _gc_objects_but_tuples<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let get_objects = py.import("gc")?.getattr("get_objects")?;
    let kept = PyList::empty(py);
    let all = get_objects.call0()?;
    let all = all.downcast::<PyList>()?;
    for obj in all.iter() {
        // SAFETY: `obj` is a live object the list holds
        if unsafe { ffi::PyTuple_Check(obj.as_ptr()) } == 0 {
            kept.append(obj)?;
        }
    }
    Ok(kept)
}
