//! A Python `str` written in place, for documents too large to hold twice.
//!
//! Writers build text in a small Rust `String` and hand it over in chunks; ASCII chunks are copied
//! straight into the buffer of the `str` that is finally returned, so a large document is neither
//! kept in a second buffer of its full size nor decoded after writing. The first non-ASCII chunk
//! moves everything into a Rust buffer, decoded once at the end.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// How much text a writer gathers before handing it over: small enough to stay in cache.
pub const CHUNK: usize = 1 << 15;

pub struct StrSink<'py> {
    py: Python<'py>,
    /// a compact ASCII `str` of length `cap` owned here (refcount 1, never shared); its first
    /// `len` characters are written. `None` once a non-ASCII chunk moved the text to `text`.
    obj: Option<*mut ffi::PyObject>,
    len: usize,
    cap: usize,
    text: String,
}

impl<'py> StrSink<'py> {
    /// A sink expecting about `size_hint` bytes (a guess: it grows as needed).
    pub fn new(py: Python<'py>, size_hint: usize) -> PyResult<StrSink<'py>> {
        let cap = size_hint.max(64);
        // SAFETY: the GIL is held; a NULL result carries a Python exception
        let obj = unsafe { ffi::PyUnicode_New(cap as ffi::Py_ssize_t, 127) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(StrSink {
            py,
            obj: Some(obj),
            len: 0,
            cap,
            text: String::new(),
        })
    }

    /// Append `chunk`.
    pub fn write(&mut self, chunk: &str) -> PyResult<()> {
        let Some(obj) = self.obj else {
            self.text.push_str(chunk);
            return Ok(());
        };
        if !chunk.is_ascii() {
            let mut text = String::with_capacity(self.len + chunk.len() + self.len / 8);
            // SAFETY: `obj` is a live compact ASCII str whose first `len` bytes were written here
            text.push_str(unsafe { std::str::from_utf8_unchecked(self.written(obj)) });
            text.push_str(chunk);
            self.text = text;
            self.release();
            return Ok(());
        }
        let need = self.len + chunk.len();
        if need > self.cap {
            self.resize(need.max(self.cap + self.cap / 2))?;
        }
        let obj = self.obj.expect("resize keeps the str");
        // SAFETY: `obj` is a compact ASCII str of `cap >= need` characters, one byte each, that
        // nobody else sees; the chunk is ASCII
        unsafe {
            let data = ffi::PyUnicode_DATA(obj) as *mut u8;
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), data.add(self.len), chunk.len());
        }
        self.len = need;
        Ok(())
    }

    /// The finished `str`.
    pub fn finish(mut self) -> PyResult<Bound<'py, PyString>> {
        if self.obj.is_none() {
            return Ok(PyString::new(self.py, &self.text));
        }
        self.resize(self.len)?;
        let obj = self.obj.take().expect("resize keeps the str");
        // SAFETY: a new reference to a str whose characters are all written
        Ok(unsafe { Bound::from_owned_ptr(self.py, obj).cast_into_unchecked() })
    }

    /// # Safety
    /// `obj` must be this sink's str.
    unsafe fn written(&self, obj: *mut ffi::PyObject) -> &[u8] {
        std::slice::from_raw_parts(ffi::PyUnicode_DATA(obj) as *const u8, self.len)
    }

    fn resize(&mut self, cap: usize) -> PyResult<()> {
        let mut obj = self.obj.take().expect("only called while writing in place");
        // SAFETY: the str has refcount 1, no hash and is not interned, so CPython resizes it in
        // place (realloc); on failure it is released and `obj` is NULL with an exception set
        if unsafe { ffi::PyUnicode_Resize(&mut obj, cap as ffi::Py_ssize_t) } != 0 {
            return Err(PyErr::fetch(self.py));
        }
        self.obj = Some(obj);
        self.cap = cap;
        Ok(())
    }

    fn release(&mut self) {
        if let Some(obj) = self.obj.take() {
            // SAFETY: the reference owned by this sink
            unsafe { ffi::Py_DECREF(obj) };
        }
    }
}

impl Drop for StrSink<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
