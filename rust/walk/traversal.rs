//! Walking nested arguments: dicts, UserDicts, lists, tuples, dataclasses and registered user
//! types, in the reference's order, without recursion (any depth fits) and without hanging on
//! cycles (a container met again inside itself is an error naming the path where it happens).

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple, PyType};

use super::registry::{class_fields, type_info, ClassFields, TypeInfo, Walk};
use crate::paths::{rich_eq, str_bytes, Accessor, Arena, Kind, Locator, ROOT};

/// The deepest nesting accepted; deeper structures are rejected with a `ValueError`.
pub const MAX_DEPTH: usize = 1_000_000;

/// Receives the leaves of a walk.
pub trait Visitor {
    /// `value` sits at step `(parent, acc, kind)`; `under_cache_position` says whether the
    /// path's first step is `"cache_position"`. Push the step into `arena` to keep a locator.
    #[allow(clippy::too_many_arguments)]
    fn leaf(
        &mut self,
        py: Python<'_>,
        arena: &mut Arena,
        step: Option<(u32, Accessor, Kind)>,
        value: &Bound<'_, PyAny>,
        info: &TypeInfo,
        under_cache_position: bool,
    ) -> PyResult<()>;
}

enum Source<'py> {
    /// a list, the next index, and whether to prefetch ahead (long lists, a fast tensor reader)
    List(Bound<'py, PyList>, usize, Option<Lookahead>),
    Tuple(Bound<'py, PyTuple>, usize, Option<Lookahead>),
    /// a dict, the `PyDict_Next` position, its size at the start, and how many items are left
    Dict(
        Bound<'py, PyDict>,
        ffi::Py_ssize_t,
        ffi::Py_ssize_t,
        ffi::Py_ssize_t,
    ),
    Seq(Bound<'py, PyIterator>, i64),
    Items(Bound<'py, PyIterator>),
    /// attribute fields; with the instance dict and which fields may be read from it directly
    Fields(
        Bound<'py, PyAny>,
        FieldList,
        usize,
        Kind,
        Option<(Bound<'py, PyDict>, MemoRef<[isize]>)>,
    ),
}

enum FieldList {
    /// a dataclass's fields
    Shared(InfoRef),
    Class(MemoRef<ClassFields>),
    /// an instance layout the memo holds
    Layout(MemoRef<[Py<PyString>]>),
    /// the fields of an instance whose dict is not an exact dict
    Own(Arc<[Py<PyString>]>),
}

impl FieldList {
    fn get(&self, i: usize) -> Option<&Py<PyString>> {
        match self {
            FieldList::Shared(t) => t.fields.get(i),
            FieldList::Class(c) => c.names.get(i),
            FieldList::Layout(v) => v.get(i),
            FieldList::Own(v) => v.get(i),
        }
    }
}

/// Something inside an `Arc` the walk's `Memo` holds, read without touching its reference count
/// (an atomic increment and decrement otherwise, per user-type instance). Within a walk the memo
/// drops no `Arc` (replaced instance layouts go to `Memo::retired`); it is reset only by
/// `Memo::take`, before a walk, and outlives the walk's frames, the only holders of these.
struct MemoRef<T: ?Sized>(*const T);

impl<T: ?Sized> MemoRef<T> {
    fn of(arc: &Arc<T>) -> MemoRef<T> {
        MemoRef(Arc::as_ptr(arc))
    }
}

impl<T: ?Sized> std::ops::Deref for MemoRef<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: see the type's comment
        unsafe { &*self.0 }
    }
}

/// Prefetching for long lists of tensors: a walk that reads a million tensors scattered over
/// memory otherwise waits on a cache miss for each tensor's object. At item `i` the object of
/// item `i + FAR` is requested.
#[derive(Clone, Copy)]
struct Lookahead;

impl Lookahead {
    const FAR: usize = 16;

    fn for_len(py: Python<'_>, len: usize) -> PyResult<Option<Lookahead>> {
        Ok((len > Self::FAR && crate::reader::fast_selected(py)?).then_some(Lookahead))
    }

    /// Prefetch ahead of item `i` of a sequence of `len` items read by `item`.
    #[inline]
    fn run(&self, len: usize, i: usize, item: impl Fn(usize) -> *mut ffi::PyObject) {
        if i + Self::FAR < len {
            crate::reader::prefetch(item(i + Self::FAR) as *const u8);
        }
    }
}

struct Frame<'py> {
    src: Source<'py>,
    node: u32,
    only_tensors: bool,
    ptr: usize,
}

impl<'py> Source<'py> {
    fn next(&mut self, py: Python<'py>) -> PyResult<Option<(Accessor, Bound<'py, PyAny>, Kind)>> {
        match self {
            Source::List(l, i, ahead) => {
                if *i >= l.len() {
                    return Ok(None);
                }
                if let Some(ahead) = ahead {
                    // SAFETY: `run` asks only for indices below the length, with the GIL held
                    ahead.run(l.len(), *i, |j| unsafe {
                        ffi::PyList_GET_ITEM(l.as_ptr(), j as ffi::Py_ssize_t)
                    });
                }
                let v = l.get_item(*i)?;
                *i += 1;
                Ok(Some((Accessor::Int(*i as i64 - 1), v, Kind::Sequence)))
            }
            Source::Tuple(t, i, ahead) => {
                if *i >= t.len() {
                    return Ok(None);
                }
                if let Some(ahead) = ahead {
                    // SAFETY: as for lists
                    ahead.run(t.len(), *i, |j| unsafe {
                        ffi::PyTuple_GET_ITEM(t.as_ptr(), j as ffi::Py_ssize_t)
                    });
                }
                let v = t.get_item(*i)?;
                *i += 1;
                Ok(Some((Accessor::Int(*i as i64 - 1), v, Kind::Sequence)))
            }
            Source::Dict(d, pos, len, left) => {
                // SAFETY: PyDict_Next with borrowed out-pointers on a dict we hold a reference to.
                let mut k: *mut ffi::PyObject = std::ptr::null_mut();
                let mut v: *mut ffi::PyObject = std::ptr::null_mut();
                let now = unsafe { ffi::PyDict_Size(d.as_ptr()) };
                if now != *len {
                    return Err(PyRuntimeError::new_err(
                        "dictionary changed size during iteration",
                    ));
                }
                if unsafe { ffi::PyDict_Next(d.as_ptr(), pos, &mut k, &mut v) } == 0 {
                    return Ok(None);
                }
                // as a dict iterator does: more items than the dict had means keys were replaced
                if *left == 0 {
                    return Err(PyRuntimeError::new_err(
                        "dictionary keys changed during iteration",
                    ));
                }
                *left -= 1;
                let key = unsafe { Bound::from_borrowed_ptr(py, k) };
                let value = unsafe { Bound::from_borrowed_ptr(py, v) };
                Ok(Some((Accessor::from_py(&key), value, Kind::Dict)))
            }
            Source::Seq(it, i) => match it.next() {
                None => Ok(None),
                Some(v) => {
                    *i += 1;
                    Ok(Some((Accessor::Int(*i - 1), v?, Kind::Sequence)))
                }
            },
            Source::Items(it) => match it.next() {
                None => Ok(None),
                Some(pair) => {
                    let pair = pair?;
                    let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = pair.extract()?;
                    Ok(Some((Accessor::from_py(&k), v, Kind::Dict)))
                }
            },
            Source::Fields(obj, fields, i, kind, direct) => match fields.get(*i) {
                None => Ok(None),
                Some(name) => {
                    let name = name.bind(py);
                    let from_dict = match direct {
                        Some((dict, how)) if how[*i] != NOT_DIRECT => {
                            dict_entry(py, dict, name, how[*i])?
                        }
                        _ => None,
                    };
                    *i += 1;
                    let v = match from_dict {
                        Some(v) => v,
                        None => obj.getattr(name)?,
                    };
                    Ok(Some((Accessor::Str(name.clone().unbind()), v, *kind)))
                }
            },
        }
    }
}

/// The field list of the last instance seen of a user type, keyed by its `__dict__` keys.
struct InstanceFields {
    ty: usize,
    /// the type (kept alive, so `ty` names no other type) and its version tag when the entry was
    /// made: a later walk reuses the entry only while the tag is unchanged (Python resets it on
    /// any change to the class or its bases, which could change `direct`)
    class: Py<PyType>,
    tag: u32,
    /// held (not just their addresses) so that no other string can take their place
    keys: Vec<Py<PyAny>>,
    fields: Option<Arc<[Py<PyString>]>>,
    direct: Option<Arc<[isize]>>,
}

/// Whether `dict`'s keys are exactly the objects `keys`, in order (a raw scan: no references taken).
fn same_keys(dict: &Bound<'_, PyDict>, keys: &[Py<PyAny>]) -> bool {
    let mut pos: pyo3::ffi::Py_ssize_t = 0;
    let mut k: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    let mut v: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    let mut i = 0;
    // SAFETY: PyDict_Next with borrowed out-pointers on a dict we hold; nothing runs in between
    while unsafe { pyo3::ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut k, &mut v) } != 0 {
        if i >= keys.len() || k != keys[i].as_ptr() {
            return false;
        }
        i += 1;
    }
    i == keys.len()
}

/// What to walk in one user-type instance.
struct UserFields<'py> {
    /// the merged class and instance names, when the instance adds any
    own: Option<FieldList>,
    /// the instance dict and, per field, whether `getattr` would return its entry unchanged
    /// (see [`direct_fields`])
    direct: Option<(Bound<'py, PyDict>, MemoRef<[isize]>)>,
}

/// A field `getattr` must read.
const NOT_DIRECT: isize = -1;
/// A field read from the instance dict, with no position hint.
const NO_HINT: isize = -2;

/// `dict.get(name)`, first trying the entry at `PyDict_Next` position `hint` (when not negative):
/// the entry whose key is `name` itself is the one a lookup finds.
#[inline]
fn dict_entry<'py>(
    py: Python<'py>,
    dict: &Bound<'py, PyDict>,
    name: &Bound<'py, PyString>,
    hint: isize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if hint >= 0 {
        let mut pos = hint as ffi::Py_ssize_t;
        let mut k: *mut ffi::PyObject = std::ptr::null_mut();
        let mut v: *mut ffi::PyObject = std::ptr::null_mut();
        // SAFETY: PyDict_Next with borrowed out-pointers on a dict we hold (any position is
        // accepted; one out of range ends the iteration); we take our own reference to the value
        unsafe {
            if ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut k, &mut v) != 0 && k == name.as_ptr()
            {
                return Ok(Some(Bound::from_borrowed_ptr(py, v)));
            }
        }
    }
    dict.get_item(name)
}

/// Per field: whether `getattr(obj, name)` is just `obj.__dict__[name]`, i.e. the type uses
/// the generic attribute lookup and no class in its MRO defines `name` (no descriptor can
/// intervene): [`NOT_DIRECT`] when not, else the `PyDict_Next` position of `name`'s entry in
/// `dict` (a hint for instances laid out alike, checked on use), or [`NO_HINT`]. `None` when the
/// type customises attribute access.
fn direct_fields(
    py: Python<'_>,
    ty: &Bound<'_, PyType>,
    dict: &Bound<'_, PyDict>,
    names: &[Py<PyString>],
) -> PyResult<Option<Arc<[isize]>>> {
    // SAFETY: reading a slot of a live type object
    let generic = unsafe { (*ty.as_type_ptr()).tp_getattro }.map(|f| f as usize)
        == Some(pyo3::ffi::PyObject_GenericGetAttr as *const () as usize);
    if !generic {
        return Ok(None);
    }
    let mro = ty.getattr(pyo3::intern!(py, "__mro__"))?;
    let class_dicts = mro
        .try_iter()?
        .map(|k| k?.getattr(pyo3::intern!(py, "__dict__")))
        .collect::<PyResult<Vec<_>>>()?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = name.bind(py);
        let mut ok = dict.contains(name)?;
        for d in &class_dicts {
            if !ok {
                break;
            }
            ok = !d.contains(name)?;
        }
        out.push(if ok { NO_HINT } else { NOT_DIRECT });
    }
    // the positions, found by key identity (a raw scan: nothing runs)
    let mut pos: ffi::Py_ssize_t = 0;
    let mut k: *mut ffi::PyObject = std::ptr::null_mut();
    let mut v: *mut ffi::PyObject = std::ptr::null_mut();
    loop {
        let before = pos;
        // SAFETY: PyDict_Next with borrowed out-pointers on a dict we hold
        if unsafe { ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut k, &mut v) } == 0 {
            break;
        }
        for (i, name) in names.iter().enumerate() {
            if out[i] == NO_HINT && name.as_ptr() == k {
                out[i] = before as isize;
            }
        }
    }
    Ok(Some(out.into()))
}

/// Memo of type classifications and user-type fields, kept by each thread from walk to walk
/// (see [`Memo::take`]): valid for one registry generation, and bounded.
#[derive(Default)]
struct Memo {
    /// the registry generation the entries belong to
    gen: u64,
    types: Vec<(usize, Arc<TypeInfo>)>,
    /// a direct-mapped index into `types` by type address (`InfoRef`s of its entries)
    recent: [(usize, Option<InfoRef>); Memo::RECENT],
    /// per proxy type, its classification for instances that are tensors
    proxies: Vec<(usize, Arc<TypeInfo>)>,
    fields: Vec<(usize, Arc<ClassFields>)>,
    instances: Vec<InstanceFields>,
    /// instance layouts replaced during the current walk (its frames may still read them)
    retired: Vec<InstanceFields>,
    /// the containers on the current path (empty between walks; kept for its allocation)
    on_stack: OnStack,
}

/// A classification the walk's `Memo` holds: the memo keeps each `Arc` until it is dropped or reset
/// whole (`Memo::take`, between walks, which also empties `recent`) and never removes one, and an
/// `Arc`'s contents stay put when the memo's vector grows, so the pointee lives as long as the memo
/// (or its reset). Only the memo's `recent` index and `walk` hold these, and the memo outlives the
/// walk's. Reading through it costs no
/// reference count (an atomic increment and decrement per value otherwise: 3% of a dispatch).
#[derive(Clone, Copy)]
struct InfoRef(*const TypeInfo);

impl std::ops::Deref for InfoRef {
    type Target = TypeInfo;
    #[inline]
    fn deref(&self) -> &TypeInfo {
        // SAFETY: see the type's comment
        unsafe { &*self.0 }
    }
}

thread_local! {
    /// This thread's memo between walks; a walk takes it out (a walk nested inside a callback of
    /// another starts from an empty one) and puts it back when done.
    static MEMO: std::cell::Cell<Option<Box<Memo>>> = const { std::cell::Cell::new(None) };
}

/// `tp_version_tag` of a live type.
#[inline]
fn version_tag(ty: &Bound<'_, PyType>) -> u32 {
    // SAFETY: reading a field of a live type object
    unsafe { (*ty.as_type_ptr()).tp_version_tag }
}

impl Memo {
    /// Most entries of each kind kept between walks.
    const BOUND: usize = 64;
    const RECENT: usize = 16;

    #[inline]
    fn slot(key: usize) -> usize {
        (key >> 4 ^ key >> 9) % Self::RECENT
    }

    /// This thread's memo, ready for a walk under the current registry generation.
    fn take(py: Python<'_>) -> Box<Memo> {
        let gen = super::registry::generation();
        let mut m = MEMO
            .try_with(|m| m.take())
            .ok()
            .flatten()
            .unwrap_or_default();
        if m.gen != gen
            || m.types.len() > Self::BOUND
            || m.proxies.len() > Self::BOUND
            || m.fields.len() > Self::BOUND
            || m.instances.len() > Self::BOUND
        {
            *m = Memo {
                gen,
                ..Memo::default()
            };
        }
        m.retired.clear();
        // an instance layout learned in an earlier walk holds while its class is unchanged
        m.instances
            .retain(|e| e.tag != 0 && version_tag(e.class.bind(py)) == e.tag);
        m
    }

    /// Keep `memo` for this thread's next walk.
    fn put_back(memo: Box<Memo>) {
        let _ = MEMO.try_with(|m| m.set(Some(memo)));
    }

    #[inline]
    fn info(&mut self, py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<InfoRef> {
        let key = ty.as_ptr() as usize;
        let slot = Self::slot(key);
        if let (k, Some(r)) = self.recent[slot] {
            if k == key {
                return Ok(r);
            }
        }
        self.info_slow(py, ty, key, slot)
    }

    #[inline(never)]
    fn info_slow(
        &mut self,
        py: Python<'_>,
        ty: &Bound<'_, PyType>,
        key: usize,
        slot: usize,
    ) -> PyResult<InfoRef> {
        let r = match self.types.iter().find(|(k, _)| *k == key) {
            Some((_, i)) => InfoRef(Arc::as_ptr(i)),
            None => {
                let info = type_info(py, ty)?;
                let r = InfoRef(Arc::as_ptr(&info));
                self.types.push((key, info));
                r
            }
        };
        self.recent[slot] = (key, Some(r));
        Ok(r)
    }

    /// `info` for a leaf `value`: for types whose instances may forward `__class__`, the
    /// classification as a tensor when `isinstance(value, torch.Tensor)` says so.
    #[inline]
    fn leaf_info(
        &mut self,
        py: Python<'_>,
        info: InfoRef,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<InfoRef> {
        if !info.proxy {
            return Ok(info);
        }
        self.proxy_info(py, info, value)
    }

    #[inline(never)]
    fn proxy_info(
        &mut self,
        py: Python<'_>,
        info: InfoRef,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<InfoRef> {
        if !value.is_instance(crate::interp::interp(py)?.tensor_type.bind(py))? {
            return Ok(info);
        }
        let key = info.ty.as_ptr() as usize;
        if let Some((_, i)) = self.proxies.iter().find(|(k, _)| *k == key) {
            return Ok(InfoRef(Arc::as_ptr(i)));
        }
        let as_tensor = Arc::new(TypeInfo {
            ty: info.ty.clone_ref(py),
            walk: Walk::Leaf,
            ignored: info.ignored,
            is_tensor: true,
            fast_tensor: false,
            proxy: true,
            only_tensors: info.only_tensors,
            fields: Vec::new(),
            user_dict_data: false,
            version_tag: 0,
        });
        // like `types`, `proxies` keeps each `Arc` for the memo's life (see `InfoRef`)
        let r = InfoRef(Arc::as_ptr(&as_tensor));
        self.proxies.push((key, as_tensor));
        Ok(r)
    }

    fn class_fields(
        &mut self,
        py: Python<'_>,
        ty: &Bound<'_, PyType>,
    ) -> PyResult<MemoRef<ClassFields>> {
        let key = ty.as_ptr() as usize;
        if let Some((_, f)) = self.fields.iter().find(|(k, _)| *k == key) {
            return Ok(MemoRef::of(f));
        }
        let f = class_fields(py, ty)?;
        let r = MemoRef::of(&f);
        self.fields.push((key, f));
        Ok(r)
    }
}

impl Memo {
    /// `instance_fields`, reused while instances of a type keep the same `__dict__` keys (the
    /// same interned name objects, in the same order), as instances built by one `__init__` do.
    fn instance_fields<'py>(
        &mut self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        ty: &Bound<'py, PyType>,
        class: &ClassFields,
    ) -> PyResult<UserFields<'py>> {
        let dict = if class.std_dict {
            // SAFETY: new reference or NULL with an exception set; the type has the standard dict
            unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    pyo3::ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()),
                )
            }
        } else {
            obj.getattr(pyo3::intern!(py, "__dict__"))
        };
        let dict = match dict {
            Ok(d) => d,
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
                return Ok(UserFields {
                    own: None,
                    direct: None,
                })
            }
            Err(e) => return Err(e),
        };
        let Ok(d) = dict.downcast_exact::<PyDict>() else {
            return Ok(UserFields {
                own: instance_fields(py, &dict, class)?.map(|f| FieldList::Own(Arc::from(f))),
                direct: None,
            });
        };
        let tkey = ty.as_ptr() as usize;
        if let Some(hit) = self
            .instances
            .iter()
            .find(|e| e.ty == tkey && same_keys(d, &e.keys))
        {
            return Ok(UserFields {
                own: hit
                    .fields
                    .as_ref()
                    .map(|f| FieldList::Layout(MemoRef::of(f))),
                direct: hit.direct.as_ref().map(|ok| (d.clone(), MemoRef::of(ok))),
            });
        }
        let keys: Vec<Py<PyAny>> = d.keys().into_iter().map(|k| k.unbind()).collect();
        let fields = instance_fields(py, &dict, class)?.map(Arc::<[Py<PyString>]>::from);
        let names: &[Py<PyString>] = match &fields {
            Some(f) => f,
            None => &class.names,
        };
        let direct = direct_fields(py, ty, d, names)?;
        // one layout per type is looked up; the one replaced stays until the walk ends
        if let Some(i) = self.instances.iter().position(|e| e.ty == tkey) {
            self.retired.push(self.instances.swap_remove(i));
        }
        let found = UserFields {
            own: fields.as_ref().map(|f| FieldList::Layout(MemoRef::of(f))),
            direct: direct.as_ref().map(|ok| (d.clone(), MemoRef::of(ok))),
        };
        self.instances.push(InstanceFields {
            ty: tkey,
            class: ty.clone().unbind(),
            tag: version_tag(ty),
            keys,
            fields,
            direct,
        });
        Ok(found)
    }
}

fn open<'py>(
    py: Python<'py>,
    memo: &mut Memo,
    obj: &Bound<'py, PyAny>,
    info: InfoRef,
) -> PyResult<Source<'py>> {
    Ok(match info.walk {
        Walk::List => {
            let l = obj.downcast::<PyList>()?.clone();
            let ahead = Lookahead::for_len(py, l.len())?;
            Source::List(l, 0, ahead)
        }
        Walk::Tuple => {
            let t = obj.downcast::<PyTuple>()?.clone();
            let ahead = Lookahead::for_len(py, t.len())?;
            Source::Tuple(t, 0, ahead)
        }
        Walk::Dict => {
            let d = obj.downcast::<PyDict>()?.clone();
            let len = unsafe { ffi::PyDict_Size(d.as_ptr()) };
            Source::Dict(d, 0, len, len)
        }
        Walk::Sequence => Source::Seq(obj.try_iter()?, 0),
        Walk::Mapping => mapping_source(py, obj, &info)?,
        Walk::Dataclass => Source::Fields(
            obj.clone(),
            FieldList::Shared(info),
            0,
            Kind::Dataclass,
            None,
        ),
        Walk::UserType => {
            let ty = obj.get_type();
            let class = memo.class_fields(py, &ty)?;
            let found = memo.instance_fields(py, obj, &ty, &class)?;
            let fields = found.own.unwrap_or(FieldList::Class(class));
            Source::Fields(obj.clone(), fields, 0, Kind::UserType, found.direct)
        }
        Walk::Leaf => unreachable!("leaves are not opened"),
    })
}

/// The layout of CPython's dict views (`_PyDictViewObject`): the object header, then the dict.
#[repr(C)]
struct DictView {
    ob_base: ffi::PyObject,
    dv_dict: *mut ffi::PyObject,
}

/// A dict that holds exactly what walking `.items()` of the mapping `obj` would yield, in order:
/// the `data` of a plain `UserDict` subclass (without calling anything), or the dict behind the
/// `dict_items` view that `.items()` returned (a `BatchEncoding` returns `self.data.items()`, a dict
/// subclass that keeps `dict.items` returns its own), iterated without calling anything, as the view is.
/// Otherwise the items are iterated as Python iterates them.
fn mapping_source<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    info: &TypeInfo,
) -> PyResult<Source<'py>> {
    let dict_source = |d: Bound<'py, PyDict>| {
        // SAFETY: the size of a dict we hold
        let len = unsafe { ffi::PyDict_Size(d.as_ptr()) };
        Source::Dict(d, 0, len, len)
    };
    if info.user_dict_data_valid(&obj.get_type()) {
        if let Some(d) = user_dict_data(py, obj) {
            return Ok(dict_source(d));
        }
    }
    let items = obj.call_method0(pyo3::intern!(py, "items"))?;
    // SAFETY: an exact `dict_items` object has the `_PyDictViewObject` layout; its dict is alive
    // while the view is, and `from_borrowed_ptr` takes our own reference to it
    unsafe {
        if ffi::PyDictItems_Check(items.as_ptr()) != 0 {
            let dict = (*(items.as_ptr() as *const DictView)).dv_dict;
            if !dict.is_null() && ffi::PyDict_Check(dict) != 0 {
                return Ok(dict_source(
                    Bound::from_borrowed_ptr(py, dict).downcast_into_unchecked(),
                ));
            }
        }
    }
    Ok(Source::Items(items.try_iter()?))
}

/// `obj.data` of a plain `UserDict` subclass instance when it is an exact dict and the instance
/// does not shadow `items`; `None` otherwise (the caller then calls `.items()`).
fn user_dict_data<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyDict>> {
    // SAFETY: new reference or NULL with an exception set; the type uses the generic lookup
    let dict = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()),
        )
    };
    let dict = match dict {
        Ok(d) => d.downcast_into_exact::<PyDict>().ok()?,
        Err(_) => return None, // no instance dict: let `.items()` say what happens
    };
    if dict.contains(pyo3::intern!(py, "items")).ok()? {
        return None;
    }
    dict.get_item(pyo3::intern!(py, "data"))
        .ok()??
        .downcast_into_exact::<PyDict>()
        .ok()
}

/// Public instance attributes that the class does not declare; when there are any, the merged,
/// sorted field list (the reference sorts class and instance names together).
fn instance_fields(
    py: Python<'_>,
    dict: &Bound<'_, PyAny>,
    class: &ClassFields,
) -> PyResult<Option<Vec<Py<PyString>>>> {
    // sorted by their UTF-8 bytes (surrogates in their 3-byte form): Python's code point order
    let mut extra: Vec<(Vec<u8>, Py<PyString>)> = Vec::new();
    if let Ok(d) = dict.downcast::<PyDict>() {
        for k in d.keys() {
            let name = k.downcast_into::<PyString>()?;
            let text = str_bytes(&name)?;
            if !text.starts_with(b"_") && !class.set.contains(text.as_ref()) {
                extra.push((text.into_owned(), name.unbind()));
            }
        }
    } else if dict.is_truthy()? {
        for k in dict.try_iter()? {
            let name = k?.downcast_into::<PyString>()?;
            let text = str_bytes(&name)?;
            if !text.starts_with(b"_") && !class.set.contains(text.as_ref()) {
                extra.push((text.into_owned(), name.unbind()));
            }
        }
    }
    if extra.is_empty() {
        return Ok(None);
    }
    for n in &class.names {
        extra.push((str_bytes(n.bind(py))?.into_owned(), n.clone_ref(py)));
    }
    extra.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(extra.into_iter().map(|(_, n)| n).collect()))
}

fn is_cache_position(py: Python<'_>, acc: &Accessor) -> PyResult<bool> {
    match acc {
        Accessor::Str(s) => {
            // a str whose content hash is known and differs from "cache_position"'s is another
            // string (the common case: no comparison)
            static CP_HASH: GILOnceCell<isize> = GILOnceCell::new();
            let cp = *CP_HASH.get_or_try_init(py, || PyString::new(py, "cache_position").hash())?;
            if let Some(h) = crate::paths::cached_str_hash(s.bind(py)) {
                if h != cp {
                    return Ok(false);
                }
            }
            // SAFETY: a live str and a NUL-terminated ASCII literal; this comparison cannot fail
            Ok(unsafe {
                ffi::PyUnicode_CompareWithASCIIString(s.as_ptr(), c"cache_position".as_ptr()) == 0
            })
        }
        Accessor::Int(_) => Ok(false),
        Accessor::Obj(o) => rich_eq(o.bind(py), &PyString::new(py, "cache_position")),
    }
}

/// The containers on the current path, by address, to detect cycles: a short list while the
/// nesting is shallow, a hash map beyond.
#[derive(Default)]
struct OnStack {
    short: Vec<(usize, u32)>,
    long: Option<HashMap<usize, u32>>,
}

impl OnStack {
    const SHORT: usize = 32;

    #[inline]
    fn get(&self, ptr: &usize) -> Option<&u32> {
        match &self.long {
            Some(m) => m.get(ptr),
            None => self.short.iter().find(|(p, _)| p == ptr).map(|(_, n)| n),
        }
    }

    #[inline]
    fn insert(&mut self, ptr: usize, node: u32) {
        match &mut self.long {
            Some(m) => {
                m.insert(ptr, node);
            }
            None if self.short.len() < Self::SHORT => self.short.push((ptr, node)),
            None => {
                let mut m: HashMap<usize, u32> = self.short.drain(..).collect();
                m.insert(ptr, node);
                self.long = Some(m);
            }
        }
    }

    /// Forget every container (keeping the short list's allocation).
    fn clear(&mut self) {
        self.short.clear();
        self.long = None;
    }

    #[inline]
    fn remove(&mut self, ptr: &usize) {
        match &mut self.long {
            Some(m) => {
                m.remove(ptr);
            }
            None => {
                if let Some(i) = self.short.iter().rposition(|(p, _)| p == ptr) {
                    self.short.swap_remove(i);
                }
            }
        }
    }
}

/// Walk `root`, handing every leaf to `visitor` and building container paths in `arena`.
pub fn walk<V: Visitor>(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    only_tensors: bool,
    arena: &mut Arena,
    visitor: &mut V,
) -> PyResult<()> {
    let mut memo = Memo::take(py);
    let result = walk_with(py, root, only_tensors, arena, visitor, &mut memo);
    Memo::put_back(memo);
    result
}

fn walk_with<V: Visitor>(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    only_tensors: bool,
    arena: &mut Arena,
    visitor: &mut V,
    memo: &mut Memo,
) -> PyResult<()> {
    let info = memo.info(py, &root.get_type())?;
    if info.ignored {
        return Ok(());
    }
    if info.walk == Walk::Leaf {
        let info = memo.leaf_info(py, info, root)?;
        if !only_tensors || info.is_tensor {
            visitor.leaf(py, arena, None, root, &info, false)?;
        }
        return Ok(());
    }
    let mut on_stack = std::mem::take(&mut memo.on_stack);
    on_stack.clear();
    let result = walk_frames(
        py,
        root,
        only_tensors,
        arena,
        visitor,
        memo,
        &mut on_stack,
        info,
    );
    on_stack.clear();
    memo.on_stack = on_stack;
    result
}

#[allow(clippy::too_many_arguments)]
fn walk_frames<V: Visitor>(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    only_tensors: bool,
    arena: &mut Arena,
    visitor: &mut V,
    memo: &mut Memo,
    on_stack: &mut OnStack,
    info: InfoRef,
) -> PyResult<()> {
    let root_ptr = root.as_ptr() as usize;
    on_stack.insert(root_ptr, ROOT);
    let src = open(py, memo, root, info)?;
    arena.may_repeat |= matches!(src, Source::Items(_));
    let mut stack = Vec::with_capacity(8);
    stack.push(Frame {
        src,
        node: ROOT,
        only_tensors: info.only_tensors.unwrap_or(only_tensors),
        ptr: root_ptr,
    });
    // whether the first step of the current path is "cache_position"
    let mut under_cp = false;
    while let Some(frame) = stack.last_mut() {
        let Some((acc, value, kind)) = frame.src.next(py)? else {
            let done = stack.pop().expect("non-empty");
            on_stack.remove(&done.ptr);
            continue;
        };
        let parent = frame.node;
        let frame_only = frame.only_tensors;
        let info = memo.info(py, &value.get_type())?;
        if info.ignored {
            continue;
        }
        if parent == ROOT {
            under_cp = is_cache_position(py, &acc)?;
        }
        if info.walk == Walk::Leaf {
            let info = memo.leaf_info(py, info, &value)?;
            if !frame_only || info.is_tensor {
                visitor.leaf(
                    py,
                    arena,
                    Some((parent, acc, kind)),
                    &value,
                    &info,
                    under_cp,
                )?;
            }
            continue;
        }
        let node = arena.push(py, parent, acc, kind)?;
        let ptr = value.as_ptr() as usize;
        if let Some(&ancestor) = on_stack.get(&ptr) {
            return Err(PyValueError::new_err(format!(
                "cyclic structure: {} is the same {} object as its enclosing {}; aitune_fast cannot describe an argument that contains itself",
                display(py, arena, node),
                value.get_type().name()?,
                if ancestor == ROOT { "root argument".to_string() } else { display(py, arena, ancestor) },
            )));
        }
        if stack.len() >= MAX_DEPTH {
            return Err(PyValueError::new_err(format!(
                "argument nested deeper than {MAX_DEPTH} levels (at {})",
                display(py, arena, node)
            )));
        }
        on_stack.insert(ptr, node);
        let src = open(py, memo, &value, info)?;
        // a mapping read through its own `items()` may yield a key twice
        arena.may_repeat |= matches!(src, Source::Items(_));
        stack.push(Frame {
            src,
            node,
            only_tensors: info.only_tensors.unwrap_or(frame_only),
            ptr,
        });
    }
    Ok(())
}

fn display(py: Python<'_>, arena: &Arena, node: u32) -> String {
    let text = arena.display_path_lossy(py, node, false);
    if text.is_empty() {
        "the root".into()
    } else {
        text
    }
}

struct Collect {
    leaves: Vec<(u32, Py<PyAny>)>,
}

impl Visitor for Collect {
    fn leaf(
        &mut self,
        py: Python<'_>,
        arena: &mut Arena,
        step: Option<(u32, Accessor, Kind)>,
        value: &Bound<'_, PyAny>,
        _info: &TypeInfo,
        _cp: bool,
    ) -> PyResult<()> {
        let node = match step {
            Some((parent, acc, kind)) => arena.push(py, parent, acc, kind)?,
            None => ROOT,
        };
        self.leaves.push((node, value.clone().unbind()));
        Ok(())
    }
}

/// `Locator.find_leaves`: a list of `(Locator, leaf)` pairs.
pub fn find_leaves<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    only_tensors: bool,
    is_output: bool,
) -> PyResult<Bound<'py, PyList>> {
    let mut arena = Arena::new();
    let mut c = Collect { leaves: Vec::new() };
    walk(py, obj, only_tensors, &mut arena, &mut c)?;
    let arena = Arc::new(arena);
    let out = PyList::empty(py);
    for (node, value) in c.leaves {
        let loc = Bound::new(py, Locator::new_in(arena.clone(), node, is_output))?;
        out.append(PyTuple::new(py, [loc.into_any(), value.into_bound(py)])?)?;
    }
    Ok(out)
}
