//! The walk's memo, kept by each thread from walk to walk: type classifications, user-type field
//! layouts (which fields an instance dict holds, and where), and the cycle check's stack.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use super::registry::{class_fields, type_info, ClassFields, TypeInfo, Walk};
use crate::paths::str_bytes;

pub(super) enum FieldList {
    /// a dataclass's fields
    Shared(InfoRef),
    Class(MemoRef<ClassFields>),
    /// an instance layout the memo holds
    Layout(MemoRef<[Py<PyString>]>),
    /// the fields of an instance whose dict is not an exact dict
    Own(Arc<[Py<PyString>]>),
}

impl FieldList {
    pub(super) fn get(&self, i: usize) -> Option<&Py<PyString>> {
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
pub(super) struct MemoRef<T: ?Sized>(*const T);

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

/// The field list of the last instance seen of a user type, keyed by its `__dict__` keys.
pub(super) struct InstanceFields {
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
    // SAFETY: the size of a dict we hold
    if unsafe { pyo3::ffi::PyDict_Size(dict.as_ptr()) } != keys.len() as pyo3::ffi::Py_ssize_t {
        return false;
    }
    // as many entries as the dict has: no further call to learn that the iteration is over
    keys.iter().all(|key| {
        // SAFETY: PyDict_Next with borrowed out-pointers on a dict we hold; nothing runs in between
        let more = unsafe { pyo3::ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut k, &mut v) };
        more != 0 && k == key.as_ptr()
    })
}

/// What to walk in one user-type instance.
pub(super) struct UserFields<'py> {
    /// the merged class and instance names, when the instance adds any
    pub(super) own: Option<FieldList>,
    /// the instance dict, per field whether `getattr` would return its entry unchanged (see
    /// [`direct_fields`]), and the class's version tag that this holds for (0: none)
    pub(super) direct: Option<(Bound<'py, PyDict>, MemoRef<[isize]>, u32)>,
}

/// A field `getattr` must read.
pub(super) const NOT_DIRECT: isize = -1;

/// A field read from the instance dict, with no position hint.
const NO_HINT: isize = -2;

/// `dict.get(name)`, first trying the entry at `PyDict_Next` position `hint` (when not negative):
/// the entry whose key is `name` itself is the one a lookup finds.
#[inline(always)]
pub(super) fn dict_entry<'py>(
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
pub(super) struct Memo {
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
    pub(super) on_stack: OnStack,
    /// counts the points of the current walk where Python code may have run (a call that can
    /// reach Python code, or a key's `__eq__`/`__hash__`): what the walk decided from an object's
    /// layout is checked again before it is relied on after this moved (`traversal::Layout`)
    pub(super) python: u64,
}

/// A classification the walk's `Memo` holds: the memo keeps each `Arc` until it is dropped or reset
/// whole (`Memo::take`, between walks, which also empties `recent`) and never removes one, and an
/// `Arc`'s contents stay put when the memo's vector grows, so the pointee lives as long as the memo
/// (or its reset). Only the memo's `recent` index and `walk` hold these, and the memo outlives the
/// walk's. Reading through it costs no
/// reference count (an atomic increment and decrement per value otherwise: 3% of a dispatch).
#[derive(Clone, Copy)]
pub(super) struct InfoRef(*const TypeInfo);

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
    pub(super) fn take(py: Python<'_>) -> Box<Memo> {
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
    pub(super) fn put_back(memo: Box<Memo>) {
        let _ = MEMO.try_with(|m| m.set(Some(memo)));
    }

    #[inline]
    pub(super) fn info(&mut self, py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<InfoRef> {
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
                self.python += 1; // classifying asks Python
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
    pub(super) fn leaf_info(
        &mut self,
        py: Python<'_>,
        info: InfoRef,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<InfoRef> {
        if !info.proxy {
            return Ok(info);
        }
        self.python += 1; // `isinstance` reads `__class__`
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
            data_items: None,
            version_tag: 0,
        });
        // like `types`, `proxies` keeps each `Arc` for the memo's life (see `InfoRef`)
        let r = InfoRef(Arc::as_ptr(&as_tensor));
        self.proxies.push((key, as_tensor));
        Ok(r)
    }

    pub(super) fn class_fields(
        &mut self,
        py: Python<'_>,
        ty: &Bound<'_, PyType>,
    ) -> PyResult<MemoRef<ClassFields>> {
        let key = ty.as_ptr() as usize;
        if let Some((_, f)) = self.fields.iter().find(|(k, _)| *k == key) {
            return Ok(MemoRef::of(f));
        }
        self.python += 1;
        let f = class_fields(py, ty)?;
        let r = MemoRef::of(&f);
        self.fields.push((key, f));
        Ok(r)
    }
}

impl Memo {
    /// `instance_fields`, reused while instances of a type keep the same `__dict__` keys (the
    /// same interned name objects, in the same order), as instances built by one `__init__` do,
    /// and the class is unchanged. Fields are read straight from the instance dict only when it is
    /// the standard one (`getattr` reads that one, whatever `__dict__` returns).
    pub(super) fn instance_fields<'py>(
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
            self.python += 1;
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
        let (Ok(d), true) = (dict.cast_exact::<PyDict>(), class.std_dict) else {
            self.python += 1;
            return Ok(UserFields {
                own: instance_fields(py, &dict, class)?.map(|f| FieldList::Own(Arc::from(f))),
                direct: None,
            });
        };
        let tkey = ty.as_ptr() as usize;
        let tag = version_tag(ty);
        if let Some(hit) = self
            .instances
            .iter()
            .find(|e| e.ty == tkey && e.tag == tag && same_keys(d, &e.keys))
        {
            return Ok(UserFields {
                own: hit
                    .fields
                    .as_ref()
                    .map(|f| FieldList::Layout(MemoRef::of(f))),
                direct: hit
                    .direct
                    .as_ref()
                    .map(|ok| (d.clone(), MemoRef::of(ok), hit.tag)),
            });
        }
        self.python += 1;
        let keys: Vec<Py<PyAny>> = d.keys().into_iter().map(|k| k.unbind()).collect();
        let fields = instance_fields(py, &dict, class)?.map(Arc::<[Py<PyString>]>::from);
        let names: &[Py<PyString>] = match &fields {
            Some(f) => f,
            None => &class.names,
        };
        let direct = direct_fields(py, ty, d, names)?;
        // 0 (holds until Python next runs, and never in a later walk) when the class changed
        // while the lookups above ran Python code
        let tag = if version_tag(ty) == tag { tag } else { 0 };
        // one layout per type is looked up; the one replaced stays until the walk ends
        if let Some(i) = self.instances.iter().position(|e| e.ty == tkey) {
            self.retired.push(self.instances.swap_remove(i));
        }
        let found = UserFields {
            own: fields.as_ref().map(|f| FieldList::Layout(MemoRef::of(f))),
            direct: direct.as_ref().map(|ok| (d.clone(), MemoRef::of(ok), tag)),
        };
        self.instances.push(InstanceFields {
            ty: tkey,
            class: ty.clone().unbind(),
            tag,
            keys,
            fields,
            direct,
        });
        Ok(found)
    }
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
    if let Ok(d) = dict.cast::<PyDict>() {
        for k in d.keys() {
            let name = k.cast_into::<PyString>()?;
            let text = str_bytes(&name)?;
            if !text.starts_with(b"_") && !class.set.contains(text.as_ref()) {
                extra.push((text.into_owned(), name.unbind()));
            }
        }
    } else if dict.is_truthy()? {
        for k in dict.try_iter()? {
            let name = k?.cast_into::<PyString>()?;
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

/// The containers on the current path, by address, to detect cycles: a short list while the
/// nesting is shallow, a hash map beyond.
#[derive(Default)]
pub(super) struct OnStack {
    short: Vec<(usize, u32)>,
    long: Option<HashMap<usize, u32>>,
}

impl OnStack {
    const SHORT: usize = 32;

    #[inline]
    pub(super) fn get(&self, ptr: &usize) -> Option<&u32> {
        match &self.long {
            Some(m) => m.get(ptr),
            None => self.short.iter().find(|(p, _)| p == ptr).map(|(_, n)| n),
        }
    }

    #[inline(always)]
    pub(super) fn insert(&mut self, ptr: usize, node: u32) {
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
    pub(super) fn clear(&mut self) {
        self.short.clear();
        self.long = None;
    }

    #[inline]
    pub(super) fn remove(&mut self, ptr: &usize) {
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
