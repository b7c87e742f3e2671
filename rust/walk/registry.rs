//! Which types are walked and how: registered user types, ignored types, and a per-type cache.
//!
//! The registry is shared by all threads. It is only ever locked for a moment and never while
//! Python code runs, so it cannot deadlock with the GIL. Every change bumps a generation counter
//! that invalidates the classification cache, as the reference clears its `functools.cache`s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

use crate::interp::interp;

/// How instances of a type are walked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Walk {
    List,
    Tuple,
    Dict,
    /// list or tuple subclasses: iterated
    Sequence,
    /// dict subclasses and UserDicts: `.items()`
    Mapping,
    Dataclass,
    UserType,
    Leaf,
}

pub struct TypeInfo {
    pub ty: Py<PyType>,
    pub walk: Walk,
    pub ignored: bool,
    pub is_tensor: bool,
    /// an exact torch.Tensor or nn.Parameter, which a fast tensor reader may read
    pub fast_tensor: bool,
    /// instances may claim another class through `__class__` (proxies, mocks): whether one is a
    /// tensor is asked per instance, as `isinstance` does
    pub proxy: bool,
    /// `Some(flag)` when the type is a registered user type: its `only_tensors` setting
    pub only_tensors: Option<bool>,
    /// dataclass field names, in declaration order
    pub fields: Vec<Py<PyString>>,
    /// a `UserDict` subclass that walks like its `data` dict (see `plain_user_dict`)
    pub user_dict_data: bool,
    /// a `UserDict` subclass whose `items` is `return self.data.items()` (see `data_items`)
    pub data_items: Option<DataItems>,
    /// the type's version tag when it was classified: Python resets it on any change to the class
    /// or its bases, which turns `user_dict_data` off until the next classification
    pub version_tag: u32,
}

/// The `items` function of a `UserDict` subclass and the code it had when it was recognised as
/// `return self.data.items()` (`aitune_fast._mapping.data_items_code`).
pub struct DataItems {
    pub func: Py<PyAny>,
    /// held so that its address cannot be reused while we compare against it
    pub code: Py<PyAny>,
}

impl TypeInfo {
    /// Whether walking an instance of `ty` (this type) the reference's way, `.items()`, yields what
    /// walking its `data` dict does, given that `data` is the instance dict's exact dict and the
    /// instance does not shadow `items` (the walk checks those per instance): the class is a plain
    /// `UserDict` subclass, or its `items` still runs `return self.data.items()`; and the class was
    /// not changed since it was classified.
    #[inline]
    pub fn walks_like_data(&self, ty: &Bound<'_, PyType>) -> bool {
        // SAFETY: reading a field of a live type object
        let unchanged = self.version_tag != 0
            && unsafe { (*ty.as_type_ptr()).tp_version_tag } == self.version_tag;
        unchanged
            && (self.user_dict_data
                || self.data_items.as_ref().is_some_and(|m| {
                    // SAFETY: `func` is a function object (checked when recognised); borrowed result
                    unsafe { pyo3::ffi::PyFunction_GetCode(m.func.as_ptr()) == m.code.as_ptr() }
                }))
    }
}

/// `items` of the `UserDict` subclass `ty` when it is `return self.data.items()` and attribute
/// lookups on its instances are the generic ones (no `__getattribute__` of its own; a `__getattr__`,
/// like `BatchEncoding`'s, only runs when the generic lookup fails, which it does not for `data` in
/// the instance dict): calling it then returns a view of the instance's `data` and runs nothing else.
fn data_items(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<Option<DataItems>> {
    let helper = py.import("aitune_fast._mapping")?;
    // SAFETY: reading a slot of live type objects
    let (getattro, hook) = unsafe {
        (
            (*ty.as_type_ptr()).tp_getattro.map(|f| f as usize),
            (*helper
                .getattr("GetattrHook")?
                .cast::<PyType>()?
                .as_type_ptr())
            .tp_getattro
            .map(|f| f as usize),
        )
    };
    let generic = Some(pyo3::ffi::PyObject_GenericGetAttr as *const () as usize);
    if getattro != generic && getattro != hook {
        return Ok(None);
    }
    let found = helper.getattr("data_items_code")?.call1((ty,))?;
    if found.is_none() {
        return Ok(None);
    }
    let (func, code) = found.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
    Ok(Some(DataItems {
        func: func.unbind(),
        code: code.unbind(),
    }))
}

/// Whether walking an instance of the `UserDict` subclass `ty` the reference's way (`.items()`,
/// i.e. `Mapping.items`: iterate `self`, then `self[key]`) is the same as walking its `data` dict:
/// `items`, `__iter__` and `__getitem__` are `UserDict`'s own, attribute lookup is the generic one
/// and no class in the MRO defines `data` (so `self.data` is the instance dict's entry). The walk
/// still checks per instance that `data` is an exact dict and that `items` is not shadowed.
fn plain_user_dict(
    py: Python<'_>,
    ty: &Bound<'_, PyType>,
    user_dict: &Bound<'_, PyType>,
) -> PyResult<bool> {
    // SAFETY: reading a slot of a live type object
    let generic = unsafe { (*ty.as_type_ptr()).tp_getattro }.map(|f| f as usize)
        == Some(pyo3::ffi::PyObject_GenericGetAttr as *const () as usize);
    if !generic {
        return Ok(false);
    }
    for name in [
        pyo3::intern!(py, "items"),
        pyo3::intern!(py, "__iter__"),
        pyo3::intern!(py, "__getitem__"),
    ] {
        if !ty.getattr(name)?.is(&user_dict.getattr(name)?) {
            return Ok(false);
        }
    }
    for k in ty.getattr(pyo3::intern!(py, "__mro__"))?.try_iter()? {
        if k?
            .getattr(pyo3::intern!(py, "__dict__"))?
            .contains(pyo3::intern!(py, "data"))?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[derive(Default)]
struct Registry {
    user_types: HashMap<usize, (Py<PyType>, bool)>,
    ignored: HashMap<usize, Py<PyType>>,
    cache: HashMap<usize, Arc<TypeInfo>>,
    /// the public data attributes of user-type classes (never invalidated, like the reference)
    class_fields: HashMap<usize, Arc<ClassFields>>,
}

pub struct ClassFields {
    pub _ty: Py<PyType>,
    pub names: Vec<Py<PyString>>,
    /// the names' UTF-8 bytes (surrogates in their 3-byte form)
    pub set: std::collections::HashSet<Vec<u8>>,
    /// `obj.__dict__` is the standard instance dict (generic attribute lookup, the usual `__dict__`
    /// getset descriptor), so it can be read with `PyObject_GenericGetDict`
    pub std_dict: bool,
}

/// Whether instances of `ty` expose their dict through the standard machinery.
fn standard_dict(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<bool> {
    // SAFETY: reading a slot of a live type object
    let generic = unsafe { (*ty.as_type_ptr()).tp_getattro }.map(|f| f as usize)
        == Some(pyo3::ffi::PyObject_GenericGetAttr as *const () as usize);
    if !generic {
        return Ok(false);
    }
    let getset = py.import("types")?.getattr("GetSetDescriptorType")?;
    for k in ty.getattr(pyo3::intern!(py, "__mro__"))?.try_iter()? {
        let vars = k?.getattr(pyo3::intern!(py, "__dict__"))?;
        if let Ok(d) = vars.get_item("__dict__") {
            return Ok(d.is_exact_instance(getset.cast::<PyType>()?));
        }
    }
    Ok(false)
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Registry::default))
}

pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn changed(r: &mut Registry) -> Vec<Arc<TypeInfo>> {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    // hand the old entries back so they are dropped outside the lock
    r.cache.drain().map(|(_, v)| v).collect()
}

/// Apply `edit` to the registry for class `cls` (`edit` gets its key) and start a new generation;
/// the cleared cache and what `edit` returns (the entries it removed) are dropped after the lock
/// is released.
fn edit_registry<T>(cls: &Bound<'_, PyType>, edit: impl FnOnce(&mut Registry, usize) -> T) {
    let key = cls.as_ptr() as usize;
    let old = with_registry(|r| {
        let gone = edit(r, key);
        (changed(r), gone)
    });
    drop(old);
}

pub fn register_user_type(cls: &Bound<'_, PyType>, only_tensors: bool) {
    edit_registry(cls, |r, key| {
        r.user_types
            .insert(key, (cls.clone().unbind(), only_tensors));
        r.ignored.remove(&key)
    });
}

pub fn unregister_user_type(cls: &Bound<'_, PyType>) {
    edit_registry(cls, |r, key| r.user_types.remove(&key));
}

pub fn ignore_type(cls: &Bound<'_, PyType>) {
    edit_registry(cls, |r, key| {
        r.ignored.insert(key, cls.clone().unbind());
        r.user_types.remove(&key)
    });
}

pub fn unignore_type(cls: &Bound<'_, PyType>) {
    edit_registry(cls, |r, key| r.ignored.remove(&key));
}

/// The registered user types (with their `only_tensors` flag) and the ignored types, as Python
/// objects: `(dict[type, bool], list[type])`. For `aitune_fast.patch` to hand registrations over.
#[pyfunction]
pub fn _type_registry(py: Python<'_>) -> PyResult<(Bound<'_, PyDict>, Bound<'_, PyList>)> {
    let (users, ignored) = with_registry(|r| {
        let users: Vec<(Py<PyType>, bool)> = r
            .user_types
            .values()
            .map(|(t, f)| (t.clone_ref(py), *f))
            .collect();
        let ignored: Vec<Py<PyType>> = r.ignored.values().map(|t| t.clone_ref(py)).collect();
        (users, ignored)
    });
    let dict = PyDict::new(py);
    for (t, f) in users {
        dict.set_item(t, f)?;
    }
    Ok((dict, PyList::new(py, ignored)?))
}

/// A registry generation and the classifications cached under it.
type LocalCache = (u64, Vec<(usize, Arc<TypeInfo>)>);

thread_local! {
    /// This thread's copy of recent classifications, valid for one registry generation.
    static LOCAL: std::cell::RefCell<LocalCache> = const { std::cell::RefCell::new((u64::MAX, Vec::new())) };
}

/// Classify `ty`: from this thread's cache, else the shared cache, else by asking Python once.
pub fn type_info(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<Arc<TypeInfo>> {
    let key = ty.as_ptr() as usize;
    let gen = generation();
    let local = LOCAL.with(|l| {
        let l = l.borrow();
        if l.0 == gen {
            l.1.iter().find(|(k, _)| *k == key).map(|(_, i)| i.clone())
        } else {
            None
        }
    });
    if let Some(info) = local {
        return Ok(info);
    }
    let info = shared_type_info(py, ty, key, gen)?;
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        if l.0 != gen {
            l.0 = gen;
            l.1.clear();
        }
        if l.1.len() >= 64 {
            l.1.remove(0);
        }
        l.1.push((key, info.clone()));
    });
    Ok(info)
}

fn shared_type_info(
    py: Python<'_>,
    ty: &Bound<'_, PyType>,
    key: usize,
    gen: u64,
) -> PyResult<Arc<TypeInfo>> {
    let (hit, user, ignored) = with_registry(|r| {
        (
            r.cache.get(&key).cloned(),
            r.user_types.get(&key).map(|(_, f)| *f),
            r.ignored.contains_key(&key),
        )
    });
    if let Some(info) = hit {
        return Ok(info);
    }
    let info = Arc::new(classify(py, ty, user, ignored)?);
    with_registry(|r| {
        if generation() == gen {
            r.cache.insert(key, info.clone());
        }
    });
    Ok(info)
}

fn classify(
    py: Python<'_>,
    ty: &Bound<'_, PyType>,
    user: Option<bool>,
    ignored: bool,
) -> PyResult<TypeInfo> {
    let it = interp(py)?;
    let mut fields = Vec::new();
    let mut user_dict_data = false;
    let mut data_items_fn = None;
    let mut tag_before = None;
    let walk = if ty.is(py.get_type::<PyList>()) {
        Walk::List
    } else if ty.is(py.get_type::<PyTuple>()) {
        Walk::Tuple
    } else if ty.is(py.get_type::<PyDict>()) {
        Walk::Dict
    } else if ty.is_subclass_of::<PyList>()? || ty.is_subclass_of::<PyTuple>()? {
        Walk::Sequence
    } else if ty.is_subclass_of::<PyDict>()? {
        Walk::Mapping
    } else if ty.is_subclass(it.user_dict.bind(py))? {
        // a type lookup, which gives the type a version tag if it had none
        ty.getattr(pyo3::intern!(py, "items"))?;
        tag_before = Some(version_tag(ty));
        user_dict_data = plain_user_dict(py, ty, it.user_dict.bind(py))?;
        if !user_dict_data {
            data_items_fn = data_items(py, ty)?;
        }
        Walk::Mapping
    } else if ty.hasattr(pyo3::intern!(py, "__dataclass_fields__"))? {
        let dc = py.import("dataclasses")?;
        let field_marker = dc.getattr("_FIELD")?;
        let declared = ty.getattr(pyo3::intern!(py, "__dataclass_fields__"))?;
        for f in declared.cast::<PyDict>()?.values() {
            if f.getattr("_field_type")?.is(&field_marker) {
                fields.push(f.getattr("name")?.cast_into::<PyString>()?.unbind());
            }
        }
        Walk::Dataclass
    } else if user.is_some() {
        Walk::UserType
    } else {
        Walk::Leaf
    };
    let is_tensor = ty.is_subclass(it.tensor_type.bind(py))?;
    Ok(TypeInfo {
        ty: ty.clone().unbind(),
        walk,
        ignored,
        proxy: walk == Walk::Leaf && !is_tensor && !standard_class(py, ty)?,
        is_tensor,
        fast_tensor: ty.is(it.tensor_type.bind(py)) || ty.is(it.parameter_type.bind(py)),
        only_tensors: user,
        fields,
        user_dict_data,
        data_items: data_items_fn,
        // read after the lookups above, which assign the tag when the type had none; 0 (never
        // matches) when the class changed while the checks above ran Python code
        version_tag: match tag_before {
            Some(before) if before != version_tag(ty) => 0,
            _ => version_tag(ty),
        },
    })
}

/// `tp_version_tag` of a live type.
fn version_tag(ty: &Bound<'_, PyType>) -> u32 {
    // SAFETY: reading a field of a live type object
    unsafe { (*ty.as_type_ptr()).tp_version_tag }
}

/// Whether `obj.__class__` is `type(obj)` for every instance of `ty`: the generic attribute
/// lookup finds `object`'s `__class__` descriptor (not a property, not a forwarding `__getattr__`).
fn standard_class(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<bool> {
    // SAFETY: reading a slot of a live type object
    let generic = unsafe { (*ty.as_type_ptr()).tp_getattro }.map(|f| f as usize)
        == Some(pyo3::ffi::PyObject_GenericGetAttr as *const () as usize);
    if !generic {
        return Ok(false);
    }
    let object = py.get_type::<pyo3::types::PyAny>();
    let name = pyo3::intern!(py, "__class__");
    for k in ty.getattr(pyo3::intern!(py, "__mro__"))?.try_iter()? {
        let k = k?;
        if k.getattr(pyo3::intern!(py, "__dict__"))?.contains(name)? {
            return Ok(k.is(&object));
        }
    }
    Ok(false)
}

/// The public data attributes a user-type class declares: `dir(cls)` without private names,
/// properties and callables, computed once per class.
pub fn class_fields(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<Arc<ClassFields>> {
    let key = ty.as_ptr() as usize;
    if let Some(f) = with_registry(|r| r.class_fields.get(&key).cloned()) {
        return Ok(f);
    }
    let property = py.import("builtins")?.getattr("property")?;
    let mut names = Vec::new();
    let mut set = std::collections::HashSet::new();
    for attr in ty.dir()?.iter() {
        let name = attr.cast_into::<PyString>()?;
        let text = crate::paths::str_bytes(&name)?.into_owned();
        if text.starts_with(b"_") {
            continue;
        }
        let value = match ty.getattr(&name) {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
                py.None().into_bound(py)
            }
            Err(e) => return Err(e),
        };
        if value.is_instance(&property)? || value.is_callable() {
            continue;
        }
        set.insert(text);
        names.push(name.unbind());
    }
    let fields = Arc::new(ClassFields {
        _ty: ty.clone().unbind(),
        names,
        set,
        std_dict: standard_dict(py, ty)?,
    });
    Ok(with_registry(|r| {
        r.class_fields.entry(key).or_insert(fields).clone()
    }))
}
