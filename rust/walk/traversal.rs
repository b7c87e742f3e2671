//! Walking nested arguments: dicts, UserDicts, lists, tuples, dataclasses and registered user
//! types, in the reference's order, without recursion (any depth fits) and without hanging on
//! cycles (a container met again inside itself is an error naming the path where it happens).

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple};

use super::memo::{dict_entry, FieldList, InfoRef, Memo, MemoRef, NOT_DIRECT};
use super::registry::{TypeInfo, Walk};
use crate::paths::{rich_eq, Accessor, Arena, Kind, Locator, SharedArena, ROOT};

/// The deepest nesting accepted; deeper structures are rejected with a `ValueError`.
pub const MAX_DEPTH: usize = 1_000_000;

/// Receives the leaves of a walk.
pub trait Visitor {
    /// `value` sits at step `(parent, acc, kind)`; `under_cache_position` says whether the
    /// path's first step is `"cache_position"`. Push the step into `arena` to keep a locator.
    /// Returns whether Python code may have run (beyond hashing the step's key, which the walk
    /// accounts for): the walk then checks again what it decided from an object's layout.
    fn leaf(
        &mut self,
        py: Python<'_>,
        arena: &mut Arena,
        step: Option<(u32, Accessor, Kind)>,
        value: &Bound<'_, PyAny>,
        info: &TypeInfo,
        under_cache_position: bool,
    ) -> PyResult<bool>;
}

enum Source<'py> {
    /// a list, the next index, and whether to prefetch ahead (long lists, a fast tensor reader)
    List(Bound<'py, PyList>, usize, Option<Lookahead>),
    Tuple(Bound<'py, PyTuple>, usize, Option<Lookahead>),
    Dict(DictItems<'py>),
    /// a plain `UserDict` subclass walked through its `data` dict, as long as `self[key]` is
    /// still that dict's entry (see [`Source::next`])
    Data(DictItems<'py>, Bound<'py, PyAny>, Layout),
    Seq(Bound<'py, PyIterator>, i64),
    /// a mapping's `.items()`, and whether it may yield a key twice
    Items(Bound<'py, PyIterator>, bool),
    /// attribute fields; with the instance dict and which fields may be read from it directly,
    /// as long as that decision holds (see [`Source::next`])
    Fields(
        Bound<'py, PyAny>,
        FieldList,
        usize,
        Kind,
        Option<(Bound<'py, PyDict>, MemoRef<[isize]>, Layout)>,
    ),
}

/// A dict's items as its iterator yields them: the `PyDict_Next` position, its size at the start,
/// and how many items are left.
struct DictItems<'py> {
    dict: Bound<'py, PyDict>,
    pos: ffi::Py_ssize_t,
    len: ffi::Py_ssize_t,
    left: ffi::Py_ssize_t,
}

impl<'py> DictItems<'py> {
    fn new(dict: Bound<'py, PyDict>) -> Self {
        // SAFETY: the size of a dict we hold
        let len = unsafe { ffi::PyDict_Size(dict.as_ptr()) };
        DictItems {
            dict,
            pos: 0,
            len,
            left: len,
        }
    }

    /// The next `(key, value)`, raising as a dict iterator does when the dict changed.
    #[inline(always)]
    fn next(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        let mut k: *mut ffi::PyObject = std::ptr::null_mut();
        let mut v: *mut ffi::PyObject = std::ptr::null_mut();
        // SAFETY: `self.dict` is a live dict we hold a reference to (the GIL is held: `py`);
        // PyDict_Size cannot fail on a dict
        let now = unsafe { ffi::PyDict_Size(self.dict.as_ptr()) };
        if now != self.len {
            return Err(PyRuntimeError::new_err(
                "dictionary changed size during iteration",
            ));
        }
        // SAFETY: a live dict we hold, with the GIL held; PyDict_Next checks `pos` against the
        // dict's current entries (so a dict changed meanwhile is still read in bounds) and stores
        // borrowed pointers, owned by the dict, into `k` and `v`
        if unsafe { ffi::PyDict_Next(self.dict.as_ptr(), &mut self.pos, &mut k, &mut v) } == 0 {
            return Ok(None);
        }
        // as a dict iterator does: more items than the dict had means keys were replaced
        if self.left == 0 {
            return Err(PyRuntimeError::new_err(
                "dictionary keys changed during iteration",
            ));
        }
        self.left -= 1;
        // SAFETY: borrowed pointers PyDict_Next gave us; we take our own references
        unsafe {
            Ok(Some((
                Bound::from_borrowed_ptr(py, k),
                Bound::from_borrowed_ptr(py, v),
            )))
        }
    }
}

/// What a source decided from an object's layout when it was opened (its type, the type's version
/// tag, its instance dict), checked again before the decision is relied on after Python code may
/// have run (the walk's `Memo::python` counter moved): the getter of one field may replace
/// `obj.__dict__`, assign `obj.__class__` or add a property to the class before the next field
/// is read. Between two such points nothing can change it, so the check then costs a compare.
struct Layout {
    ty: *mut ffi::PyTypeObject,
    /// the class's version tag when decided (0: none, so the decision holds only until Python runs)
    tag: u32,
    /// `Memo::python` when last checked; [`Layout::FAILED`] once a check failed (for good: the slow
    /// way is always right)
    seen: u64,
}

impl Layout {
    /// A `seen` that `Memo::python` never reaches.
    const FAILED: u64 = u64::MAX;

    fn new(obj: &Bound<'_, PyAny>, tag: u32, python: u64) -> Self {
        Layout {
            // SAFETY: the type of a live object
            ty: unsafe { ffi::Py_TYPE(obj.as_ptr()) },
            tag,
            seen: python,
        }
    }

    /// Whether `obj` still has the type and class it had.
    #[inline]
    fn same_class(&self, obj: &Bound<'_, PyAny>) -> bool {
        // SAFETY: the type of a live object, and a field of that live type
        unsafe {
            let ty = ffi::Py_TYPE(obj.as_ptr());
            ty == self.ty && self.tag != 0 && (*ty).tp_version_tag == self.tag
        }
    }

    /// `obj`'s instance dict now (`None` when it has none or reading it fails).
    fn instance_dict<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        // SAFETY: new reference or NULL with an exception set; the sources with a `Layout` checked
        // that the type uses the standard dict when opened, and `same_class` since
        let d = unsafe {
            Bound::from_owned_ptr_or_err(
                obj.py(),
                ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()),
            )
        };
        d.ok()
    }

    /// Whether the decision still holds for `obj`'s fields read from `dict`: same class, and
    /// `dict` is still the instance dict.
    #[inline]
    fn holds_for_fields(
        &mut self,
        obj: &Bound<'_, PyAny>,
        dict: &Bound<'_, PyDict>,
        python: u64,
    ) -> bool {
        self.recheck(python, |this| {
            this.same_class(obj) && Self::instance_dict(obj).is_some_and(|d| d.is(dict))
        })
    }

    /// Whether `obj[key]` is still `data[key]`: same class, and `data` is still the instance
    /// dict's `data` entry.
    #[inline]
    fn holds_for_data(
        &mut self,
        obj: &Bound<'_, PyAny>,
        data: &Bound<'_, PyDict>,
        python: u64,
    ) -> bool {
        self.recheck(python, |this| {
            this.same_class(obj)
                && Self::instance_dict(obj)
                    .and_then(|d| d.cast_into_exact::<PyDict>().ok())
                    .and_then(|d| d.get_item(pyo3::intern!(d.py(), "data")).ok().flatten())
                    .is_some_and(|v| v.is(data))
        })
    }

    /// `still` asked again only when Python code ran since the last check (`python` moved), and
    /// never again once it failed.
    #[inline]
    fn recheck(&mut self, python: u64, still: impl FnOnce(&Self) -> bool) -> bool {
        if self.seen == python {
            return true;
        }
        let ok = self.seen != Self::FAILED && still(self);
        self.seen = if ok { python } else { Self::FAILED };
        ok
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
    /// the container: held while its address is in the cycle check's `OnStack` (a source may hold
    /// only part of it, as a `UserDict`'s does its `data`), so no other object can take that
    /// address meanwhile
    obj: Bound<'py, PyAny>,
}

impl<'py> Source<'py> {
    /// Whether this source may yield a key twice (a mapping's `items()` other than an
    /// `OrderedDict`'s), so that one path can occur more than once in the walk.
    fn may_repeat(&self) -> bool {
        matches!(self, Source::Items(_, true))
    }

    /// The next step and value. `python` is the walk's count of points where Python code may have
    /// run (`Memo::python`): a source that reads around Python (`Data`, `Fields` with direct
    /// reads) checks its layout again when it moved, and one that calls Python moves it.
    #[inline(always)]
    fn next(
        &mut self,
        py: Python<'py>,
        python: &mut u64,
    ) -> PyResult<Option<(Accessor, Bound<'py, PyAny>, Kind)>> {
        match self {
            Source::List(l, i, ahead) => next_indexed(
                l.len(),
                i,
                ahead,
                // SAFETY: `run` asks only for indices below the length, with the GIL held
                |j| unsafe { ffi::PyList_GET_ITEM(l.as_ptr(), j as ffi::Py_ssize_t) },
                |j| l.get_item(j),
            ),
            Source::Tuple(t, i, ahead) => next_indexed(
                t.len(),
                i,
                ahead,
                // SAFETY: as for lists
                |j| unsafe { ffi::PyTuple_GET_ITEM(t.as_ptr(), j as ffi::Py_ssize_t) },
                |j| t.get_item(j),
            ),
            Source::Dict(items) => Ok(items
                .next(py)?
                .map(|(key, value)| (Accessor::from_py(&key), value, Kind::Dict))),
            Source::Data(items, obj, layout) => {
                let Some((key, value)) = items.next(py)? else {
                    return Ok(None);
                };
                // the reference reads `self[key]` (`UserDict.__getitem__`: `self.data[key]`)
                let value = if layout.holds_for_data(obj, &items.dict, *python) {
                    value
                } else {
                    *python += 1;
                    obj.get_item(&key)?
                };
                Ok(Some((Accessor::from_py(&key), value, Kind::Dict)))
            }
            Source::Seq(it, i) => {
                *python += 1;
                match it.next() {
                    None => Ok(None),
                    Some(v) => {
                        *i += 1;
                        Ok(Some((Accessor::Int(*i - 1), v?, Kind::Sequence)))
                    }
                }
            }
            Source::Items(it, _) => {
                *python += 1;
                match it.next() {
                    None => Ok(None),
                    Some(pair) => {
                        let pair = pair?;
                        let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = pair.extract()?;
                        Ok(Some((Accessor::from_py(&k), v, Kind::Dict)))
                    }
                }
            }
            Source::Fields(obj, fields, i, kind, direct) => match fields.get(*i) {
                None => Ok(None),
                Some(name) => {
                    let name = name.bind(py);
                    let from_dict = match direct {
                        Some((dict, how, layout)) if how[*i] != NOT_DIRECT => {
                            if layout.holds_for_fields(obj, dict, *python) {
                                let v = dict_entry(py, dict, name, how[*i])?;
                                if v.is_none() {
                                    *python += 1; // a lookup by key, which may compare keys
                                }
                                v
                            } else {
                                *direct = None;
                                None
                            }
                        }
                        _ => None,
                    };
                    *i += 1;
                    let v = match from_dict {
                        Some(v) => v,
                        None => {
                            *python += 1;
                            obj.getattr(name)?
                        }
                    };
                    Ok(Some((Accessor::Str(name.clone().unbind()), v, *kind)))
                }
            },
        }
    }
}

/// The next item of a list or tuple of `len` items, `*i` the next index: `item` reads it, `raw`
/// (unchecked, below `len` only) is what the prefetch reads ahead.
#[inline(always)]
fn next_indexed<'py>(
    len: usize,
    i: &mut usize,
    ahead: &Option<Lookahead>,
    raw: impl Fn(usize) -> *mut ffi::PyObject,
    item: impl FnOnce(usize) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Option<(Accessor, Bound<'py, PyAny>, Kind)>> {
    if *i >= len {
        return Ok(None);
    }
    if let Some(ahead) = ahead {
        ahead.run(len, *i, raw);
    }
    let v = item(*i)?;
    *i += 1;
    Ok(Some((Accessor::Int(*i as i64 - 1), v, Kind::Sequence)))
}

fn open<'py>(
    py: Python<'py>,
    memo: &mut Memo,
    obj: &Bound<'py, PyAny>,
    info: InfoRef,
) -> PyResult<Source<'py>> {
    Ok(match info.walk {
        Walk::List => {
            let l = obj.cast::<PyList>()?.clone();
            let ahead = Lookahead::for_len(py, l.len())?;
            Source::List(l, 0, ahead)
        }
        Walk::Tuple => {
            let t = obj.cast::<PyTuple>()?.clone();
            let ahead = Lookahead::for_len(py, t.len())?;
            Source::Tuple(t, 0, ahead)
        }
        Walk::Dict => Source::Dict(DictItems::new(obj.cast::<PyDict>()?.clone())),
        Walk::Sequence => {
            memo.python += 1;
            Source::Seq(obj.try_iter()?, 0)
        }
        Walk::Mapping => mapping_source(py, obj, &info, &mut memo.python)?,
        Walk::Dataclass => Source::Fields(
            obj.clone(),
            FieldList::Shared(info),
            0,
            Kind::Dataclass,
            None,
        ),
        Walk::UserType => {
            let ty = obj.get_type();
            // a decision made while Python code ran is checked before its first use
            let start = memo.python;
            let class = memo.class_fields(py, &ty)?;
            let found = memo.instance_fields(py, obj, &ty, &class)?;
            let fields = found.own.unwrap_or(FieldList::Class(class));
            let direct = found
                .direct
                .map(|(dict, how, tag)| (dict, how, Layout::new(obj, tag, start)));
            Source::Fields(obj.clone(), fields, 0, Kind::UserType, direct)
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
/// the `data` of a plain `UserDict` subclass (as long as `self[key]` reads it: `Source::Data`), or
/// of one whose `items` is `return self.data.items()` (transformers' `BatchEncoding`; see
/// `TypeInfo::walks_like_data`), without calling anything; or the dict behind the `dict_items`
/// view that `.items()` returned (a dict subclass that keeps `dict.items` returns its own),
/// iterated without calling anything, as the view is. Otherwise the items are iterated as Python
/// iterates them. `python`: the walk's count of points where Python code may have run.
fn mapping_source<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    info: &TypeInfo,
    python: &mut u64,
) -> PyResult<Source<'py>> {
    if info.walks_like_data(&obj.get_type()) {
        if let Some(d) = user_dict_data(py, obj) {
            if !info.user_dict_data {
                // `self.data.items()`: a view of this dict, whatever happens to `self` later
                return Ok(Source::Dict(DictItems::new(d)));
            }
            let layout = Layout::new(obj, info.version_tag, *python);
            return Ok(Source::Data(DictItems::new(d), obj.clone(), layout));
        }
    }
    *python += 1;
    let items = obj.call_method0(pyo3::intern!(py, "items"))?;
    // SAFETY: an exact `dict_items` object has the `_PyDictViewObject` layout; its dict is alive
    // while the view is, and `from_borrowed_ptr` takes our own reference to it. The type is
    // compared exactly: `odict_items` (an `OrderedDict`'s view) derives from `dict_items` but
    // walks the linked list's order, and pyo3-ffi's `PyDictItems_Check` accepts subtypes.
    unsafe {
        if ffi::Py_TYPE(items.as_ptr()) == &raw mut ffi::PyDictItems_Type {
            let dict = (*(items.as_ptr() as *const DictView)).dv_dict;
            if !dict.is_null() && ffi::PyDict_Check(dict) != 0 {
                return Ok(Source::Dict(DictItems::new(
                    Bound::from_borrowed_ptr(py, dict).cast_into_unchecked(),
                )));
            }
        }
    }
    // an `OrderedDict`'s own items view (transformers' `ModelOutput` keeps it) walks its linked
    // list of keys, each once; any other iterable of pairs may repeat a key
    let may_repeat = !items
        .get_type()
        .is(crate::interp::interp(py)?.odict_items.bind(py));
    Ok(Source::Items(items.try_iter()?, may_repeat))
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
        Ok(d) => d.cast_into_exact::<PyDict>().ok()?,
        Err(_) => return None, // no instance dict: let `.items()` say what happens
    };
    if dict.contains(pyo3::intern!(py, "items")).ok()? {
        return None;
    }
    dict.get_item(pyo3::intern!(py, "data"))
        .ok()??
        .cast_into_exact::<PyDict>()
        .ok()
}

fn is_cache_position(py: Python<'_>, acc: &Accessor) -> PyResult<bool> {
    match acc {
        Accessor::Str(s) => {
            // a str whose content hash is known and differs from "cache_position"'s is another
            // string (the common case: no comparison)
            static CP_HASH: PyOnceLock<isize> = PyOnceLock::new();
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
    memo.on_stack.clear();
    let result = walk_frames(py, root, only_tensors, arena, visitor, memo, info);
    memo.on_stack.clear();
    result
}

/// The walk below a container `root`; `memo.on_stack` holds the containers being walked (empty
/// at the start).
fn walk_frames<'py, V: Visitor>(
    py: Python<'py>,
    root: &Bound<'py, PyAny>,
    only_tensors: bool,
    arena: &mut Arena,
    visitor: &mut V,
    memo: &mut Memo,
    info: InfoRef,
) -> PyResult<()> {
    memo.on_stack.insert(root.as_ptr() as usize, ROOT);
    let src = open(py, memo, root, info)?;
    arena.may_repeat |= src.may_repeat();
    let mut stack = Vec::with_capacity(8);
    stack.push(Frame {
        src,
        node: ROOT,
        only_tensors: info.only_tensors.unwrap_or(only_tensors),
        obj: root.clone(),
    });
    // whether the first step of the current path is "cache_position"
    let mut under_cp = false;
    while let Some(frame) = stack.last_mut() {
        let Some((acc, value, kind)) = frame.src.next(py, &mut memo.python)? else {
            let done = stack.pop().expect("non-empty");
            memo.on_stack.remove(&(done.obj.as_ptr() as usize));
            continue;
        };
        let parent = frame.node;
        let frame_only = frame.only_tensors;
        let info = memo.info(py, &value.get_type())?;
        if info.ignored {
            continue;
        }
        if !acc.is_plain() {
            // comparing or hashing the key (for the path) may run its `__eq__`/`__hash__`
            memo.python += 1;
        }
        if parent == ROOT {
            under_cp = is_cache_position(py, &acc)?;
        }
        if info.walk == Walk::Leaf {
            let info = memo.leaf_info(py, info, &value)?;
            if !frame_only || info.is_tensor {
                let ran = visitor.leaf(
                    py,
                    arena,
                    Some((parent, acc, kind)),
                    &value,
                    &info,
                    under_cp,
                )?;
                memo.python += ran as u64;
            }
            continue;
        }
        let node = arena.push(py, parent, acc, kind)?;
        let ptr = value.as_ptr() as usize;
        // every address in `on_stack` is a container some frame holds: none can be reused
        if let Some(&ancestor) = memo.on_stack.get(&ptr) {
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
        memo.on_stack.insert(ptr, node);
        let src = open(py, memo, &value, info)?;
        arena.may_repeat |= src.may_repeat();
        stack.push(Frame {
            src,
            node,
            only_tensors: info.only_tensors.unwrap_or(frame_only),
            obj: value,
        });
    }
    Ok(())
}

/// The display path of `node` for an error message (a replaying arena first copies the steps it
/// has matched: they are not in `nodes` yet).
fn display(py: Python<'_>, arena: &mut Arena, node: u32) -> String {
    arena.settle(py);
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
    ) -> PyResult<bool> {
        let node = arena.push_leaf(py, step)?;
        self.leaves.push((node, value.clone().unbind()));
        Ok(false)
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
    let arena = SharedArena::new(py, arena)?;
    let out = PyList::empty(py);
    for (node, value) in c.leaves {
        let loc = Bound::new(py, Locator::new_in(arena.clone_ref(py), node, is_output))?;
        out.append(PyTuple::new(py, [loc.into_any(), value.into_bound(py)])?)?;
    }
    Ok(out)
}
