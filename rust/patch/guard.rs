//! Guards on the code the call path does in place of Python's: a step inlined from a class's
//! methods (AITune's context, its module's hook swap, torch's `no_grad`) runs only while the class
//! still holds the functions it was learned from, and a step inlined from a module's functions
//! only while the module still names them. Anything else (a wrapper put on a method before or
//! after the patch, a replaced class or function, a subclass's override) sends the step to the
//! Python it replaces.
//!
//! A class is checked by its version tag: CPython gives each class a number that it clears
//! whenever an attribute of the class or of a base is set or deleted, and numbers anew (never
//! reusing one) at the next lookup; the same on 3.10 to 3.13. A call compares one integer. When
//! the tag moved (any attribute changed, or the tag was cleared), the guarded names are looked up
//! again, without running descriptors, and compared by identity with what was learned; the new
//! tag is kept only when they all still match.
//!
//! A module's names are checked the same way, by its dict's version (`ma_version_tag`), which
//! CPython 3.10 to 3.13 set anew from one counter of the interpreter on every change of the dict
//! (3.12 and 3.13 deprecate the field but still keep it so; 3.14 drops it: there the names are
//! looked up on every call).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

/// The version tag of `cls` now (0: none assigned, as after a change).
fn version_tag(cls: &Bound<'_, PyType>) -> u32 {
    // SAFETY: `cls` is a live type object (a `Bound` keeps it alive) and this build is not the
    // limited API, so `PyTypeObject`'s layout is the running interpreter's; `tp_version_tag` is a
    // plain integer the interpreter writes only while holding the GIL, which we hold.
    unsafe { (*cls.as_type_ptr()).tp_version_tag }
}

/// `name` as `cls` resolves it through its MRO's own dicts, without calling a descriptor's
/// `__get__` (a classmethod stays the classmethod, a property the property).
fn lookup_static<'py>(
    cls: &Bound<'py, PyType>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = cls.py();
    let mro = cls.getattr(pyo3::intern!(py, "__mro__"))?;
    for base in mro.cast::<PyTuple>()?.iter() {
        let namespace = base.getattr(pyo3::intern!(py, "__dict__"))?;
        if namespace.contains(name)? {
            return namespace.get_item(name).map(Some);
        }
    }
    Ok(None)
}

/// The dict holding `obj`'s own attributes, as attribute lookup reads it; None where its class
/// gives its objects none (`__slots__`, most builtins).
pub fn instance_dict<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = obj.py();
    // SAFETY: `obj` is live (a `Bound` keeps it), and this build is not the limited API, so
    // `PyTypeObject` is the running interpreter's: `tp_dictoffset` is 0 exactly where the class's
    // objects have no dict (it is -1 for a managed dict on 3.11+, an offset on 3.10).
    if unsafe { (*obj.get_type().as_type_ptr()).tp_dictoffset } == 0 {
        return Ok(None);
    }
    // SAFETY: as above; `PyObject_GenericGetDict` returns a new reference to the object's dict
    // (made where the object had none yet, as `obj.__dict__` makes it), or NULL with an error set.
    let dict = unsafe { ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()) };
    if dict.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `dict` is a new, non-null reference, owned from here on.
    let dict = unsafe { Bound::from_owned_ptr(py, dict) };
    Ok(dict.cast_into::<PyDict>().ok())
}

/// `obj.name` by `object.__getattribute__`'s lookup, for an object whose class's own
/// `__getattribute__` makes that lookup first (as a part's guard checks: wrapt's proxy does, before
/// it asks the wrapped object): the same value, without the method wrapper CPython makes to call
/// a C `__getattribute__` a Python class inherits. Where that lookup finds nothing, the class's
/// whole lookup runs.
pub fn generic_attr<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    // SAFETY: `obj` and `name` are live (each `Bound` keeps its object); the call returns a new
    // reference, or NULL with an error set.
    let value = unsafe { ffi::PyObject_GenericGetAttr(obj.as_ptr(), name.as_ptr()) };
    if value.is_null() {
        let err = PyErr::fetch(py);
        if !err.is_instance_of::<PyAttributeError>(py) {
            return Err(err);
        }
        return obj.getattr(name);
    }
    // SAFETY: `value` is a new, non-null reference, owned from here on.
    Ok(unsafe { Bound::from_owned_ptr(py, value) })
}

/// Whether `name` is set on `obj` itself (its instance dict), hiding its class's attribute: a step
/// done in place of a method is not what a call of that object does.
pub fn has_own(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<bool> {
    has_any_own(obj, [name])
}

/// Whether any of `names` is set on `obj` itself (`has_own` of each, the instance dict read once).
pub fn has_any_own<'py, N>(
    obj: &Bound<'py, PyAny>,
    names: impl IntoIterator<Item = N>,
) -> PyResult<bool>
where
    N: IntoPyObject<'py>,
{
    let Some(namespace) = instance_dict(obj)? else {
        return Ok(false);
    };
    if namespace.is_empty() {
        return Ok(false);
    }
    for name in names {
        if namespace.contains(name)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A class and the functions (or other attributes) it held under some names when a step was
/// learned from it: [`ClassGuard::holds`] tells whether it holds the same objects now.
#[pyclass(module = "aitune_fast._core", name = "_ClassGuard", frozen)]
pub struct ClassGuard {
    cls: Py<PyType>,
    expected: Vec<(Py<PyString>, Py<PyAny>)>,
    /// The class's version tag when the names were last found unchanged (0: never).
    tag: AtomicU32,
}

#[pymethods]
impl ClassGuard {
    /// `_ClassGuard(cls, names)`: what `cls` holds under each of `names` now (looked up as a class
    /// attribute is, without descriptors); AttributeError where it holds nothing.
    #[new]
    #[pyo3(signature = (cls, names, /))]
    fn py_new(cls: &Bound<'_, PyType>, names: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let mut expected = Vec::with_capacity(names.len());
        for name in names.iter() {
            let name = name.cast_into::<PyString>()?;
            let Some(value) = lookup_static(cls, &name)? else {
                return Err(PyAttributeError::new_err(format!(
                    "_ClassGuard: {} has no attribute {}",
                    cls.fully_qualified_name()?,
                    name
                )));
            };
            expected.push((name.unbind(), value.unbind()));
        }
        Ok(Self {
            cls: cls.clone().unbind(),
            expected,
            tag: AtomicU32::new(0),
        })
    }

    /// Whether the class holds the same objects under the guarded names as when the guard was made.
    #[pyo3(name = "holds")]
    fn py_holds(&self, py: Python<'_>) -> PyResult<bool> {
        self.holds(py)
    }

    /// The guarded class.
    #[getter]
    fn cls(&self, py: Python<'_>) -> Py<PyType> {
        self.cls.clone_ref(py)
    }

    /// The guarded names, in the order given.
    #[getter]
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.expected.iter().map(|(name, _)| name.bind(py)))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.cls)?;
        for (name, value) in &self.expected {
            visit.call(name)?;
            visit.call(value)?;
        }
        Ok(())
    }
}

impl ClassGuard {
    /// Whether the class still holds what it held: one integer compared while nothing changed.
    #[inline]
    pub fn holds(&self, py: Python<'_>) -> PyResult<bool> {
        let cls = self.cls.bind(py);
        let now = version_tag(cls);
        if now != 0 && now == self.tag.load(Ordering::Relaxed) {
            return Ok(true);
        }
        self.recheck(cls)
    }

    /// Whether `obj` is of the guarded class exactly, and the class still holds what it held.
    pub fn holds_for(&self, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = obj.py();
        Ok(obj.get_type().is(self.cls.bind(py)) && self.holds(py)?)
    }

    /// The names looked up again and compared; the tag kept when all match.
    #[cold]
    fn recheck(&self, cls: &Bound<'_, PyType>) -> PyResult<bool> {
        let py = cls.py();
        for (name, expected) in &self.expected {
            match lookup_static(cls, name.bind(py))? {
                Some(value) if value.is(expected.bind(py)) => {}
                _ => return Ok(false),
            }
        }
        // a lookup through the class numbers it where the change cleared its tag (one that finds
        // nothing runs no descriptor)
        cls.hasattr(pyo3::intern!(py, "__aitune_fast_version_probe__"))?;
        self.tag.store(version_tag(cls), Ordering::Relaxed);
        Ok(true)
    }
}

/// Whether the running interpreter keeps `ma_version_tag` as 3.10 to 3.13 do.
fn dicts_versioned(py: Python<'_>) -> bool {
    py.version_info() < (3, 14)
}

/// The version of `dict` now, where `versioned` (else 0: none known, the names looked up).
fn dict_version(dict: &Bound<'_, PyDict>, versioned: bool) -> u64 {
    if !versioned {
        return 0;
    }
    // SAFETY: `dict` is a live dict (a `Bound` keeps it; a subclass's object begins with
    // `PyDictObject`), this build is not the limited API, the running interpreter is 3.10-3.13
    // (`versioned`), whose `PyDictObject` has `ma_version_tag` where pyo3's declaration puts it,
    // and that plain integer is written only while the GIL is held, which we hold.
    #[allow(deprecated)]
    unsafe {
        (*dict.as_ptr().cast::<ffi::PyDictObject>()).ma_version_tag
    }
}

/// A module's namespace and the objects it named under some names when a step was learned:
/// [`NameGuard::holds`] tells whether it names the same ones now (one integer compared while the
/// dict is unchanged, else a dict lookup per name).
#[pyclass(module = "aitune_fast._core", name = "_NameGuard", frozen)]
pub struct NameGuard {
    namespace: Py<PyDict>,
    /// The dict's version when the names were last found unchanged (0: never).
    version: AtomicU64,
    /// The interpreter keeps dict versions (`dicts_versioned`).
    versioned: bool,
    expected: Vec<(Py<PyString>, Py<PyAny>)>,
}

#[pymethods]
impl NameGuard {
    /// `_NameGuard(namespace, names)`: what the dict `namespace` (a module's `vars()`) holds under
    /// each of `names` now; KeyError where it holds nothing.
    #[new]
    #[pyo3(signature = (namespace, names, /))]
    fn py_new(namespace: &Bound<'_, PyDict>, names: &Bound<'_, PyTuple>) -> PyResult<Self> {
        let mut expected = Vec::with_capacity(names.len());
        for name in names.iter() {
            let name = name.cast_into::<PyString>()?;
            let value = namespace.as_any().get_item(&name)?;
            expected.push((name.unbind(), value.unbind()));
        }
        Ok(Self {
            namespace: namespace.clone().unbind(),
            version: AtomicU64::new(0),
            versioned: dicts_versioned(namespace.py()),
            expected,
        })
    }

    /// Whether the namespace holds the same objects under the guarded names.
    #[pyo3(name = "holds")]
    fn py_holds(&self, py: Python<'_>) -> PyResult<bool> {
        self.holds(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.namespace)?;
        for (name, value) in &self.expected {
            visit.call(name)?;
            visit.call(value)?;
        }
        Ok(())
    }
}

impl NameGuard {
    /// Whether the namespace names the same objects now: one integer compared while the dict is
    /// unchanged.
    #[inline]
    pub fn holds(&self, py: Python<'_>) -> PyResult<bool> {
        let namespace = self.namespace.bind(py);
        let now = dict_version(namespace, self.versioned);
        if now != 0 && now == self.version.load(Ordering::Relaxed) {
            return Ok(true);
        }
        self.recheck(namespace, now)
    }

    /// The names looked up again and compared; the version kept when all match.
    #[cold]
    fn recheck(&self, namespace: &Bound<'_, PyDict>, now: u64) -> PyResult<bool> {
        let py = namespace.py();
        for (name, expected) in &self.expected {
            match namespace.get_item(name.bind(py))? {
                Some(value) if value.is(expected.bind(py)) => {}
                _ => return Ok(false),
            }
        }
        // kept only where the lookups changed nothing (a key's own `__eq__` may run code)
        if dict_version(namespace, self.versioned) == now {
            self.version.store(now, Ordering::Relaxed);
        }
        Ok(true)
    }
}
