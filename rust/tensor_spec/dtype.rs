//! Dtype ids: a process-wide table of the `torch.dtype` objects (and `None`) specs hold, so a
//! compact spec stores a `u16`.

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

struct DtypeEntry {
    ptr: usize,
    obj: Py<PyAny>,
    text: String,
}

/// The process-wide table of dtype ids. It holds only `torch.dtype` objects (singletons, a few
/// dozen at most) and `None`, so it stays small however many specs a process builds; any other
/// dtype object gets [`FOREIGN_DTYPE`] and stays with the Python spec that holds it.
static DTYPES: Mutex<Vec<DtypeEntry>> = Mutex::new(Vec::new());

/// The id of a dtype that is neither a `torch.dtype` nor `None`. Such a dtype is never entered in
/// the table: a walk that meets one keeps that tensor's spec as a Python object, and code that
/// needs the object itself reads it from that spec.
pub const FOREIGN_DTYPE: u16 = u16::MAX;

fn is_table_dtype(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    static TORCH_DTYPE: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> =
        pyo3::sync::PyOnceLock::new();
    let py = obj.py();
    if obj.is_none() {
        return Ok(true);
    }
    let t = TORCH_DTYPE.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("torch")?
            .getattr("dtype")?
            .cast_into::<pyo3::types::PyType>()?
            .unbind())
    })?;
    Ok(obj.get_type().is(t.bind(py)))
}

/// A small id for a dtype object: its entry in the table for a `torch.dtype` or `None`,
/// [`FOREIGN_DTYPE`] for anything else.
pub fn dtype_id(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    let ptr = obj.as_ptr() as usize;
    {
        let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = table.iter().position(|e| e.ptr == ptr) {
            return Ok(i as u16);
        }
    }
    if !is_table_dtype(obj)? {
        return Ok(FOREIGN_DTYPE);
    }
    let text = obj.str()?.to_cow()?.into_owned();
    let mut table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = table.iter().position(|e| e.ptr == ptr) {
        return Ok(i as u16);
    }
    if table.len() >= FOREIGN_DTYPE as usize {
        return Err(PyValueError::new_err("too many distinct torch dtypes"));
    }
    table.push(DtypeEntry {
        ptr,
        obj: obj.clone().unbind(),
        text,
    });
    Ok((table.len() - 1) as u16)
}

/// The dtype object of a table id (`None` for [`FOREIGN_DTYPE`], whose object is not kept here).
pub fn dtype_obj(py: Python<'_>, id: u16) -> Bound<'_, PyAny> {
    let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    match table.get(id as usize) {
        Some(e) => e.obj.bind(py).clone(),
        None => py.None().into_bound(py),
    }
}

pub fn dtype_str(id: u16) -> String {
    let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    match table.get(id as usize) {
        Some(e) => e.text.clone(),
        None => "?".to_owned(),
    }
}
