//! One step of a path: how it enters its container ([`Kind`]) and its key ([`Accessor`]), with
//! Python's equality and hashing of keys.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};

use super::text::{format_obj, str_eq, Text};

/// How a step enters its container: the reference's `ObjectType` values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    Sequence = 0,
    Dict = 1,
    Dataclass = 2,
    UserType = 3,
}

impl Kind {
    pub fn from_index(i: i64) -> Option<Kind> {
        match i {
            0 => Some(Kind::Sequence),
            1 => Some(Kind::Dict),
            2 => Some(Kind::Dataclass),
            3 => Some(Kind::UserType),
            _ => None,
        }
    }
    pub fn is_attribute(self) -> bool {
        matches!(self, Kind::Dataclass | Kind::UserType)
    }
}

/// One step's key: a sequence index, a string key or attribute, or any other hashable dict key.
pub enum Accessor {
    Int(i64),
    Str(Py<PyString>),
    Obj(Py<PyAny>),
}

impl Accessor {
    pub fn from_py(key: &Bound<'_, PyAny>) -> Accessor {
        if key.is_exact_instance_of::<PyString>() {
            // SAFETY: exact str checked above
            return Accessor::Str(unsafe { key.cast_unchecked::<PyString>() }.clone().unbind());
        }
        if key.is_exact_instance_of::<PyInt>() {
            if let Ok(v) = key.extract::<i64>() {
                return Accessor::Int(v);
            }
        }
        Accessor::Obj(key.clone().unbind())
    }

    /// Whether this key is an int or an exact str: comparing and hashing it calls no user code, and
    /// holding on to it keeps no user object alive.
    #[inline(always)]
    pub fn is_plain(&self) -> bool {
        match self {
            Accessor::Int(_) => true,
            // SAFETY: reading the type of a live str
            Accessor::Str(s) => unsafe { ffi::PyUnicode_CheckExact(s.as_ptr()) != 0 },
            Accessor::Obj(_) => false,
        }
    }

    /// Whether `other` is this very key, so that a path with it in place of this one is the same
    /// path with the same hash, without calling anything: the same int, or the same exact str
    /// object. Other keys are never the same here (their equality and hash are user code).
    #[inline(always)]
    pub fn is_plain_same(&self, other: &Accessor) -> bool {
        match (self, other) {
            (Accessor::Int(a), Accessor::Int(b)) => a == b,
            (Accessor::Str(a), Accessor::Str(b)) => a.as_ptr() == b.as_ptr() && other.is_plain(),
            _ => false,
        }
    }

    /// Drop, releasing the key with the GIL known to be held (pyo3's own drop checks for it).
    #[inline]
    pub fn release(self, _py: Python<'_>) {
        match self {
            Accessor::Int(_) => {}
            // SAFETY: the `py` token proves the GIL is held; `into_ptr` hands over our reference
            Accessor::Str(s) => unsafe { ffi::Py_DECREF(s.into_ptr()) },
            // SAFETY: as for `Str`: the GIL is held and `into_ptr` hands over the one reference we own
            Accessor::Obj(o) => unsafe { ffi::Py_DECREF(o.into_ptr()) },
        }
    }

    pub fn clone_ref(&self, py: Python<'_>) -> Accessor {
        match self {
            Accessor::Int(v) => Accessor::Int(*v),
            Accessor::Str(s) => Accessor::Str(s.clone_ref(py)),
            Accessor::Obj(o) => Accessor::Obj(o.clone_ref(py)),
        }
    }

    pub fn to_py<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Accessor::Int(v) => v.into_pyobject(py).expect("int conversion").into_any(),
            Accessor::Str(s) => s.bind(py).clone().into_any(),
            Accessor::Obj(o) => o.bind(py).clone(),
        }
    }

    /// Python's `hash()` of the accessor, so that `1`, `1.0` and `True` keys hash alike.
    pub fn py_hash(&self, py: Python<'_>) -> PyResult<isize> {
        match self {
            Accessor::Int(v) => Ok(py_int_hash(*v)),
            Accessor::Str(s) => str_hash(s.bind(py)),
            Accessor::Obj(o) => o.bind(py).hash(),
        }
    }

    /// Python equality of two accessors.
    pub fn eq(&self, py: Python<'_>, other: &Accessor) -> PyResult<bool> {
        match (self, other) {
            (Accessor::Int(a), Accessor::Int(b)) => Ok(a == b),
            (Accessor::Str(a), Accessor::Str(b)) => Ok(str_eq(a.bind(py), b.bind(py))),
            (Accessor::Int(_), Accessor::Str(_)) | (Accessor::Str(_), Accessor::Int(_)) => {
                Ok(false)
            }
            _ => rich_eq(&self.to_py(py), &other.to_py(py)),
        }
    }

    /// `str(accessor)`, as an f-string would render it.
    pub fn format(&self, py: Python<'_>, out: &mut Text) -> PyResult<()> {
        match self {
            Accessor::Int(v) => {
                out.push_str(itoa::Buffer::new().format(*v));
                Ok(())
            }
            Accessor::Str(s) => out.push_py(s.bind(py)),
            Accessor::Obj(o) => format_obj(o.bind(py), out),
        }
    }

    pub fn is_str(&self, py: Python<'_>) -> bool {
        match self {
            Accessor::Int(_) => false,
            Accessor::Str(_) => true,
            Accessor::Obj(o) => o.bind(py).is_instance_of::<PyString>(),
        }
    }
}

/// `a == b` with Python's identity shortcut, as dict and tuple comparison do it.
pub fn rich_eq(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    if a.as_ptr() == b.as_ptr() {
        return Ok(true);
    }
    // SAFETY: both pointers are valid, owned by the bound references
    let r = unsafe { ffi::PyObject_RichCompareBool(a.as_ptr(), b.as_ptr(), ffi::Py_EQ) };
    if r < 0 {
        Err(PyErr::fetch(a.py()))
    } else {
        Ok(r == 1)
    }
}

/// CPython's hash of an int that fits in 64 bits (`hash(n)` without calling Python).
pub fn py_int_hash(v: i64) -> isize {
    const MODULUS: u64 = (1u64 << 61) - 1;
    let m = v.unsigned_abs() % MODULUS;
    let h = if v < 0 { -(m as i64) } else { m as i64 };
    if h == -1 {
        -2
    } else {
        h as isize
    }
}

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The hash of `s`'s content, when str's own hash function has computed it (any `str`, subclasses
/// too: the field is only ever written by str's hash of the content), without calling anything.
#[inline]
pub fn cached_str_hash(s: &Bound<'_, PyString>) -> Option<isize> {
    // SAFETY: every str (subclass instances too) is a `PyASCIIObject` underneath; `hash` is -1
    // until computed
    let h = unsafe { (*(s.as_ptr() as *const ffi::PyASCIIObject)).hash };
    (h != -1).then_some(h)
}

/// `hash(s)`: an exact `str`'s cached hash when it has one (no call), else Python's (a subclass may
/// define its own `__hash__`).
#[inline]
pub fn str_hash(s: &Bound<'_, PyString>) -> PyResult<isize> {
    // SAFETY: checking the type of a live object
    if unsafe { ffi::PyUnicode_CheckExact(s.as_ptr()) } != 0 {
        if let Some(h) = cached_str_hash(s) {
            return Ok(h);
        }
    }
    s.hash()
}

#[inline]
pub fn mix(a: u64, b: u64) -> u64 {
    let x = (a.rotate_left(23) ^ b).wrapping_mul(K);
    x ^ (x >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_hashes_match_cpython() {
        // values printed by CPython's hash()
        assert_eq!(py_int_hash(0), 0);
        assert_eq!(py_int_hash(5), 5);
        assert_eq!(py_int_hash(-1), -2);
        assert_eq!(py_int_hash(-5), -5);
        assert_eq!(py_int_hash((1 << 61) - 1), 0);
        assert_eq!(py_int_hash(1 << 61), 1);
        assert_eq!(py_int_hash(i64::MIN), -4);
    }

    #[test]
    fn kinds_map_to_object_type_values() {
        assert_eq!(Kind::from_index(3), Some(Kind::UserType));
        assert_eq!(Kind::from_index(4), None);
        assert!(Kind::Dataclass.is_attribute() && !Kind::Dict.is_attribute());
    }
}
