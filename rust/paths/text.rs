//! Text of display paths and values: Python `str`s kept as UTF-8 even when they hold lone
//! surrogates, `str` equality by code points, `format(obj, "")`.

use pyo3::ffi;
use pyo3::prelude::*;

use crate::interp::interp;
use pyo3::types::PyString;

/// Text built from Python strings, which may hold lone surrogates (`os.fsdecode` makes them from
/// undecodable file-name bytes). Kept as UTF-8, with any surrogate written as its 3-byte
/// "surrogatepass" form; `lone` says whether one was, so the plain case stays a `str` copy.
#[derive(Default, Clone)]
pub struct Text {
    bytes: Vec<u8>,
    lone: bool,
}

impl Text {
    pub fn new() -> Text {
        Text::default()
    }

    #[inline]
    pub fn push_str(&mut self, s: &str) {
        self.bytes.extend_from_slice(s.as_bytes());
    }

    #[inline]
    pub fn push(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.push_str(c.encode_utf8(&mut buf));
    }

    pub fn push_text(&mut self, t: &Text) {
        self.bytes.extend_from_slice(&t.bytes);
        self.lone |= t.lone;
    }

    /// Append a Python string.
    pub fn push_py(&mut self, s: &Bound<'_, PyString>) -> PyResult<()> {
        match s.to_str() {
            Ok(t) => self.push_str(t),
            Err(_) => {
                self.bytes.extend_from_slice(&str_bytes(s)?);
                self.lone = true;
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Cut back to `n` bytes (a length this text had before).
    pub fn truncate(&mut self, n: usize) {
        self.bytes.truncate(n);
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.lone = false;
    }

    /// The text as `str`, unless it holds a lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        if self.lone {
            std::str::from_utf8(&self.bytes).ok()
        } else {
            // SAFETY: only `str` data was appended
            Some(unsafe { std::str::from_utf8_unchecked(&self.bytes) })
        }
    }

    /// UTF-8, with surrogates in their 3-byte form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// For error messages: surrogates become U+FFFD.
    pub fn lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }

    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        match self.as_str() {
            Some(s) => Ok(PyString::new(py, s)),
            None => decode_surrogatepass(py, &self.bytes),
        }
    }
}

/// A Python string's UTF-8 bytes, with lone surrogates in their 3-byte form ("surrogatepass"),
/// which keeps Python's code point order when compared bytewise.
pub fn str_bytes<'a>(s: &'a Bound<'_, PyString>) -> PyResult<std::borrow::Cow<'a, [u8]>> {
    if let Ok(t) = s.to_str() {
        return Ok(std::borrow::Cow::Borrowed(t.as_bytes()));
    }
    // SAFETY: a new reference or NULL with an exception set
    let b = unsafe {
        Bound::from_owned_ptr_or_err(
            s.py(),
            ffi::PyUnicode_AsEncodedString(
                s.as_ptr(),
                c"utf-8".as_ptr(),
                c"surrogatepass".as_ptr(),
            ),
        )?
    };
    let b = b.cast_into::<pyo3::types::PyBytes>()?;
    Ok(std::borrow::Cow::Owned(b.as_bytes().to_vec()))
}

/// The `str` of UTF-8 bytes that may hold surrogates in their 3-byte form.
pub fn decode_surrogatepass<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyString>> {
    // SAFETY: a valid buffer and length; the result is checked for NULL
    unsafe {
        let ptr = ffi::PyUnicode_DecodeUTF8(
            b.as_ptr() as *const std::os::raw::c_char,
            b.len() as ffi::Py_ssize_t,
            c"surrogatepass".as_ptr(),
        );
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyString>())
    }
}

/// `a == b` for two `str` objects, by code points (no UTF-8 conversion, so surrogates compare).
#[inline]
pub fn str_eq(a: &Bound<'_, PyString>, b: &Bound<'_, PyString>) -> bool {
    if a.as_ptr() == b.as_ptr() {
        return true;
    }
    // SAFETY: two live str objects: PyUnicode_Compare cannot fail on them
    unsafe { ffi::PyUnicode_Compare(a.as_ptr(), b.as_ptr()) == 0 }
}

/// `format(obj, "")`, as an f-string renders `obj` (`type(obj).__format__`, so classes work too).
pub fn format_obj(obj: &Bound<'_, PyAny>, out: &mut Text) -> PyResult<()> {
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return out.push_py(s);
    }
    // SAFETY: a new reference or NULL with an exception set
    let f = unsafe {
        Bound::from_owned_ptr_or_err(
            obj.py(),
            ffi::PyObject_Format(obj.as_ptr(), interp(obj.py())?.empty_str.as_ptr()),
        )?
    };
    out.push_py(f.cast::<PyString>()?)
}
