//! Paths into nested arguments.
//!
//! A metadata object stores all of its paths in one [`Arena`]: a prefix tree whose nodes are
//! `(parent, accessor, object type)` steps. Leaves share their containers' nodes, so a path costs
//! one node however deep it is, and each node carries the hash of its whole path, so comparing two
//! paths usually ends at the first node. [`Locator`] is the Python face of one node; it is only
//! created when the caller asks for locators.

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyTuple};

use crate::interp::interp;

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
    let b = b.downcast_into::<pyo3::types::PyBytes>()?;
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
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.downcast_into_unchecked::<PyString>())
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
    if let Ok(s) = obj.downcast_exact::<PyString>() {
        return out.push_py(s);
    }
    // SAFETY: a new reference or NULL with an exception set
    let f = unsafe {
        Bound::from_owned_ptr_or_err(
            obj.py(),
            ffi::PyObject_Format(obj.as_ptr(), interp(obj.py())?.empty_str.as_ptr()),
        )?
    };
    out.push_py(f.downcast::<PyString>()?)
}

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
            return Accessor::Str(
                unsafe { key.downcast_unchecked::<PyString>() }
                    .clone()
                    .unbind(),
            );
        }
        if key.is_exact_instance_of::<PyInt>() {
            if let Ok(v) = key.extract::<i64>() {
                return Accessor::Int(v);
            }
        }
        Accessor::Obj(key.clone().unbind())
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
                out.push_str(itoa_i64(*v).as_str());
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

fn itoa_i64(v: i64) -> String {
    v.to_string()
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

pub const ROOT: u32 = 0;
const ROOT_HASH: u64 = 0x243F_6A88_85A3_08D3;

pub struct Node {
    pub parent: u32,
    pub depth: u32,
    pub kind: Kind,
    pub acc: Accessor,
    /// Hash of the whole path from the root to this node.
    pub hash: u64,
}

/// The display path of the last parent seen; see [`Arena::write_display_path_cached`].
#[derive(Default)]
pub struct DisplayCache {
    parent: Option<u32>,
    text: Text,
}

/// A prefix tree of paths. Node 0 is the empty path (the root object itself).
pub struct Arena {
    pub nodes: Vec<Node>,
    /// a walk went through a mapping's own `items()`, which may yield a key twice: the same path
    /// can then occur more than once
    pub may_repeat: bool,
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena {
            may_repeat: false,
            nodes: vec![Node {
                parent: u32::MAX,
                depth: 0,
                kind: Kind::Sequence,
                acc: Accessor::Int(0),
                hash: ROOT_HASH,
            }],
        }
    }

    pub fn with_capacity(n: usize) -> Arena {
        let mut a = Arena {
            nodes: Vec::with_capacity(n + 1),
            may_repeat: false,
        };
        a.nodes.push(Node {
            parent: u32::MAX,
            depth: 0,
            kind: Kind::Sequence,
            acc: Accessor::Int(0),
            hash: ROOT_HASH,
        });
        a
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// Append a step below `parent`, given the accessor's Python hash.
    #[inline]
    pub fn push_hashed(
        &mut self,
        parent: u32,
        acc: Accessor,
        kind: Kind,
        acc_hash: isize,
    ) -> PyResult<u32> {
        let p = &self.nodes[parent as usize];
        let hash = mix(mix(p.hash, acc_hash as u64), kind as u64 + 1);
        let depth = p.depth + 1;
        let id = u32::try_from(self.nodes.len()).map_err(|_| {
            PyValueError::new_err("too many paths in one structure (more than 4 billion)")
        })?;
        self.nodes.push(Node {
            parent,
            depth,
            kind,
            acc,
            hash,
        });
        Ok(id)
    }

    #[inline]
    pub fn push(
        &mut self,
        py: Python<'_>,
        parent: u32,
        acc: Accessor,
        kind: Kind,
    ) -> PyResult<u32> {
        let h = acc.py_hash(py)?;
        self.push_hashed(parent, acc, kind, h)
    }

    #[inline]
    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    /// The steps from the root down to `id`.
    pub fn chain(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.node(id).depth as usize);
        let mut cur = id;
        while cur != ROOT {
            out.push(cur);
            cur = self.node(cur).parent;
        }
        out.reverse();
        out
    }

    /// The first step's node of `id`'s path, if the path is not empty.
    pub fn root_step(&self, id: u32) -> Option<u32> {
        let mut cur = id;
        if cur == ROOT {
            return None;
        }
        loop {
            let p = self.node(cur).parent;
            if p == ROOT {
                return Some(cur);
            }
            cur = p;
        }
    }

    /// Copy the path `id` of `src` into this arena (sharing nothing), returning the new node.
    pub fn import(&mut self, py: Python<'_>, src: &Arena, id: u32) -> PyResult<u32> {
        let mut cur = ROOT;
        for step in src.chain(id) {
            let n = src.node(step);
            let acc = n.acc.clone_ref(py);
            let h = n.acc.py_hash(py)?;
            cur = self.push_hashed(cur, acc, n.kind, h)?;
        }
        Ok(cur)
    }

    /// `Locator.display_path`: a Python-like rendering of the path.
    pub fn display_path<'py>(
        &self,
        py: Python<'py>,
        id: u32,
        is_output: bool,
    ) -> PyResult<Bound<'py, PyString>> {
        let mut out = Text::new();
        self.write_display_path(py, id, is_output, &mut out)?;
        out.to_py(py)
    }

    /// `display_path` for error messages (lone surrogates shown as U+FFFD).
    pub fn display_path_lossy(&self, py: Python<'_>, id: u32, is_output: bool) -> String {
        let mut out = Text::new();
        match self.write_display_path(py, id, is_output, &mut out) {
            Ok(()) => out.lossy().into_owned(),
            Err(_) => String::new(),
        }
    }

    pub fn write_display_path(
        &self,
        py: Python<'_>,
        id: u32,
        is_output: bool,
        out: &mut Text,
    ) -> PyResult<()> {
        let start = out.len();
        if is_output {
            out.push_str("output");
        }
        for (index, step) in self.chain(id).into_iter().enumerate() {
            self.write_step(py, step, index, is_output, start, out)?;
        }
        Ok(())
    }

    /// Append step `step` (the `index`-th of its path) to a display path that began at `start`.
    fn write_step(
        &self,
        py: Python<'_>,
        step: u32,
        index: usize,
        is_output: bool,
        start: usize,
        out: &mut Text,
    ) -> PyResult<()> {
        let n = self.node(step);
        match n.kind {
            Kind::Dataclass | Kind::UserType => {
                out.push('.');
                n.acc.format(py, out)?;
            }
            _ if !is_output && index == 0 && is_identifier(py, &n.acc)? => {
                // the reference writes `str(accessor)` here, `format(accessor, "")` elsewhere
                out.truncate(start);
                match &n.acc {
                    Accessor::Obj(o) => out.push_py(&o.bind(py).str()?)?,
                    acc => acc.format(py, out)?,
                }
            }
            Kind::Sequence => {
                out.push('[');
                n.acc.format(py, out)?;
                out.push(']');
            }
            Kind::Dict => {
                if n.acc.is_str(py) {
                    out.push_str("[\"");
                    n.acc.format(py, out)?;
                    out.push_str("\"]");
                } else {
                    out.push('[');
                    n.acc.format(py, out)?;
                    out.push(']');
                }
            }
        }
        Ok(())
    }

    /// `display_path` for many nodes in walk order: the parent's text is kept between calls, so
    /// siblings cost one step each.
    pub fn write_display_path_cached(
        &self,
        py: Python<'_>,
        id: u32,
        is_output: bool,
        cache: &mut DisplayCache,
        out: &mut Text,
    ) -> PyResult<()> {
        let n = self.node(id);
        if id == ROOT || n.parent == ROOT {
            return self.write_display_path(py, id, is_output, out);
        }
        if cache.parent != Some(n.parent) {
            cache.text.clear();
            self.write_display_path(py, n.parent, is_output, &mut cache.text)?;
            cache.parent = Some(n.parent);
        }
        let start = out.len();
        out.push_text(&cache.text);
        self.write_step(py, id, n.depth as usize - 1, is_output, start, out)
    }

    /// `Locator.path`: the accessors alone; a single step is returned bare.
    pub fn semantic_path<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyAny>> {
        let chain = self.chain(id);
        if chain.len() == 1 {
            return Ok(self.node(chain[0]).acc.to_py(py));
        }
        Ok(PyTuple::new(py, chain.iter().map(|&s| self.node(s).acc.to_py(py)))?.into_any())
    }

    /// The reference's `_access_path`: a tuple of `(accessor, ObjectType)` pairs.
    pub fn access_path<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyTuple>> {
        let it = interp(py)?;
        let items = self
            .chain(id)
            .into_iter()
            .map(|s| {
                let n = self.node(s);
                PyTuple::new(
                    py,
                    [
                        n.acc.to_py(py),
                        it.object_types[n.kind as usize].bind(py).clone(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }
}

fn is_identifier(py: Python<'_>, acc: &Accessor) -> PyResult<bool> {
    match acc {
        Accessor::Int(_) => Ok(false),
        Accessor::Str(s) => {
            let s = s.bind(py);
            match s.to_str() {
                Ok(text) if text.is_ascii() => {
                    let b = text.as_bytes();
                    Ok(!b.is_empty()
                        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
                        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_'))
                }
                _ => s
                    .call_method0(pyo3::intern!(py, "isidentifier"))?
                    .is_truthy(),
            }
        }
        Accessor::Obj(o) => {
            let o = o.bind(py);
            if o.is_instance_of::<PyString>() {
                o.call_method0(pyo3::intern!(py, "isidentifier"))?
                    .is_truthy()
            } else {
                Ok(false)
            }
        }
    }
}

/// Equality of path `a` in `aa` and path `b` in `ba`, step by step from the leaves up.
pub fn path_eq(py: Python<'_>, aa: &Arena, mut a: u32, ba: &Arena, mut b: u32) -> PyResult<bool> {
    if std::ptr::eq(aa, ba) && a == b {
        return Ok(true);
    }
    loop {
        let (na, nb) = (aa.node(a), ba.node(b));
        if na.hash != nb.hash || na.depth != nb.depth {
            return Ok(false);
        }
        if a == ROOT {
            return Ok(b == ROOT);
        }
        if na.kind != nb.kind || !na.acc.eq(py, &nb.acc)? {
            return Ok(false);
        }
        a = na.parent;
        b = nb.parent;
        if std::ptr::eq(aa, ba) && a == b {
            return Ok(true);
        }
    }
}

pub fn hash_to_isize(h: u64) -> isize {
    let v = h as isize;
    if v == -1 {
        -2
    } else {
        v
    }
}

/// A path into a nested structure of arguments or outputs.
///
/// Built from `((accessor, ObjectType), ...)` steps; equal when the steps are equal (whether the
/// locator points into outputs does not matter for equality, only for `display_path`).
#[pyclass(module = "aitune_fast.locator", name = "Locator", frozen, subclass)]
pub struct Locator {
    pub arena: Arc<Arena>,
    pub node: u32,
    pub is_output: bool,
}

impl Locator {
    pub fn new_in(arena: Arc<Arena>, node: u32, is_output: bool) -> Locator {
        Locator {
            arena,
            node,
            is_output,
        }
    }

    fn steps(&self) -> Vec<u32> {
        self.arena.chain(self.node)
    }
}

#[pymethods]
impl Locator {
    #[new]
    #[pyo3(signature = (access_path, is_output=false))]
    fn py_new(py: Python<'_>, access_path: &Bound<'_, PyAny>, is_output: bool) -> PyResult<Self> {
        let mut arena = Arena::new();
        let mut cur = ROOT;
        for step in access_path.try_iter()? {
            let step = step?;
            let pair: Vec<Bound<'_, PyAny>> =
                step.try_iter().and_then(|it| it.collect()).map_err(|_| {
                    PyTypeError::new_err(format!(
                        "Locator steps are (accessor, ObjectType) pairs, got {}",
                        step.repr().map(|r| r.to_string()).unwrap_or_default()
                    ))
                })?;
            if pair.len() != 2 {
                return Err(PyValueError::new_err(format!(
                    "Locator steps are (accessor, ObjectType) pairs, got {} items",
                    pair.len()
                )));
            }
            let kind = pair[1]
                .extract::<i64>()
                .ok()
                .and_then(Kind::from_index)
                .ok_or_else(|| PyValueError::new_err(format!("not an ObjectType: {}", pair[1])))?;
            cur = arena.push(py, cur, Accessor::from_py(&pair[0]), kind)?;
        }
        Ok(Locator {
            arena: Arc::new(arena),
            node: cur,
            is_output,
        })
    }

    /// Number of steps in the path.
    #[getter]
    fn depth(&self) -> usize {
        self.arena.node(self.node).depth as usize
    }

    /// The last step's accessor.
    #[getter]
    fn leaf_name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.node == ROOT {
            return Err(PyIndexError::new_err("the empty locator has no leaf name"));
        }
        Ok(self.arena.node(self.node).acc.to_py(py))
    }

    /// The first step's accessor, or `""` for the empty path.
    #[getter]
    fn root_name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.arena.root_step(self.node) {
            Some(s) => Ok(self.arena.node(s).acc.to_py(py)),
            None => Ok(interp(py)?.empty_str.bind(py).clone().into_any()),
        }
    }

    /// The accessors without their container types, e.g. `("inputs", "tokens", 0)`; one step alone is bare.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.arena.semantic_path(py, self.node)
    }

    /// The accessor of step `index` (negative indexes count from the end).
    fn accessor_at<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        let steps = self.steps();
        let n = steps.len() as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(PyIndexError::new_err(format!(
                "step {index} is outside a path of {n} steps"
            )));
        }
        Ok(self.arena.node(steps[i as usize]).acc.to_py(py))
    }

    /// Iterate over `(accessor, ObjectType)` steps.
    fn path_iter<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self
            .arena
            .access_path(py, self.node)?
            .as_any()
            .try_iter()?
            .into_any())
    }

    #[getter]
    fn _access_path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        self.arena.access_path(py, self.node)
    }

    #[getter]
    fn _is_output(&self) -> bool {
        self.is_output
    }

    /// The path rendered like Python code: `x`, `kwargs["k"][0]`, `cache.layers[3].keys`, `output[1]`.
    #[getter]
    fn display_path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        self.arena.display_path(py, self.node, self.is_output)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.downcast::<Locator>() {
            Ok(o) => {
                let o = o.get();
                path_eq(py, &self.arena, self.node, &o.arena, o.node)
            }
            Err(_) => Ok(false),
        }
    }

    fn __hash__(&self) -> isize {
        hash_to_isize(self.arena.node(self.node).hash)
    }

    fn __repr__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        self.display_path(py)
    }

    fn __str__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        self.display_path(py)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.get();
        let args = PyTuple::new(
            py,
            [
                me.arena.access_path(py, me.node)?.into_any(),
                pyo3::types::PyBool::new(py, me.is_output)
                    .to_owned()
                    .into_any(),
            ],
        )?;
        Ok((slf.get_type().into_any(), args))
    }

    /// The value this locator points to inside `obj`.
    fn get_value<'py>(
        &self,
        py: Python<'py>,
        obj: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut cur = obj;
        for step in self.steps() {
            cur = step_into(py, &self.arena, step, &cur)?;
        }
        Ok(cur)
    }

    /// Put `value` at this locator inside `obj` and return the (possibly new) root.
    ///
    /// Containers are changed in place; tuples cannot be, so each tuple on the way is rebuilt
    /// and put back into its parent, up to the root if needed.
    fn set_value<'py>(
        &self,
        py: Python<'py>,
        obj: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        set_value(py, &self.arena, &self.steps(), obj, value)
    }

    /// Walk `obj` and return an iterator of `(Locator, leaf)` pairs, in the reference's order.
    #[staticmethod]
    #[pyo3(signature = (obj, only_tensors=false, is_output=false))]
    fn find_leaves<'py>(
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        only_tensors: bool,
        is_output: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let list = crate::traversal::find_leaves(py, obj, only_tensors, is_output)?;
        Ok(list.as_any().try_iter()?.into_any())
    }

    /// Walk instances of `cls` like dataclasses, over their public data attributes.
    /// With `only_tensors=True` only tensors are collected inside them.
    #[staticmethod]
    #[pyo3(signature = (cls, only_tensors=false))]
    fn register_user_type(cls: &Bound<'_, PyType>, only_tensors: bool) {
        crate::registry::register_user_type(cls, only_tensors)
    }

    #[staticmethod]
    fn unregister_user_type(cls: &Bound<'_, PyType>) {
        crate::registry::unregister_user_type(cls)
    }

    /// Skip instances of `cls` entirely: neither walked nor reported as leaves.
    #[staticmethod]
    fn ignore_type(cls: &Bound<'_, PyType>) {
        crate::registry::ignore_type(cls)
    }

    #[staticmethod]
    fn unignore_type(cls: &Bound<'_, PyType>) {
        crate::registry::unignore_type(cls)
    }
}

use pyo3::types::PyType;

/// One step down: `obj[key]` or `getattr(obj, name)`, with errors that say which step failed.
pub fn step_into<'py>(
    py: Python<'py>,
    arena: &Arena,
    step: u32,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = arena.node(step);
    let key = n.acc.to_py(py);
    if n.kind.is_attribute() {
        let name = key.downcast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "attribute names are strings, the locator holds {}",
                key.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        obj.getattr(name)
    } else {
        obj.get_item(&key).map_err(|e| {
            if e.is_instance_of::<PyKeyError>(py) || e.is_instance_of::<PyIndexError>(py) {
                let msg = format!(
                    "locator {} does not resolve: {} has no item {}",
                    arena.display_path_lossy(py, step, false),
                    obj.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    key.repr().map(|r| r.to_string()).unwrap_or_default()
                );
                if e.is_instance_of::<PyKeyError>(py) {
                    PyKeyError::new_err(msg)
                } else {
                    PyIndexError::new_err(msg)
                }
            } else {
                e
            }
        })
    }
}

pub fn set_value<'py>(
    py: Python<'py>,
    arena: &Arena,
    steps: &[u32],
    root: Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if steps.is_empty() {
        return Ok(value);
    }
    // the containers along the path: parents[i] holds step i
    let mut parents = Vec::with_capacity(steps.len());
    let mut cur = root.clone();
    for &s in &steps[..steps.len() - 1] {
        parents.push(cur.clone());
        cur = step_into(py, arena, s, &cur)?;
    }
    parents.push(cur);
    let mut new_value = value;
    for i in (0..steps.len()).rev() {
        let container = &parents[i];
        let n = arena.node(steps[i]);
        let key = n.acc.to_py(py);
        if n.kind.is_attribute() {
            container.setattr(key.downcast::<PyString>()?, new_value)?;
            return Ok(root);
        } else if container.is_instance_of::<PyTuple>() {
            let mut items: Vec<Bound<'py, PyAny>> =
                container.try_iter()?.collect::<PyResult<_>>()?;
            let len = items.len() as i64;
            let idx = key.extract::<i64>()?;
            let j = if idx < 0 { idx + len } else { idx };
            if j < 0 || j >= len {
                return Err(PyIndexError::new_err("list assignment index out of range"));
            }
            items[j as usize] = new_value;
            new_value = PyTuple::new(py, items)?.into_any();
            if i == 0 {
                return Ok(new_value);
            }
        } else {
            container.set_item(key, new_value)?;
            return Ok(root);
        }
    }
    unreachable!("the loop returns at the root")
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
    fn path_hashes_depend_on_order_and_kind() {
        let a = mix(mix(ROOT_HASH, 1), 2);
        let b = mix(mix(ROOT_HASH, 2), 1);
        assert_ne!(a, b);
        assert_ne!(
            mix(mix(ROOT_HASH, 7), Kind::Sequence as u64 + 1),
            mix(mix(ROOT_HASH, 7), Kind::Dict as u64 + 1)
        );
    }

    #[test]
    fn hash_values_never_return_minus_one() {
        assert_eq!(hash_to_isize(u64::MAX), -2);
        assert_eq!(hash_to_isize(7), 7);
    }

    #[test]
    fn kinds_map_to_object_type_values() {
        assert_eq!(Kind::from_index(3), Some(Kind::UserType));
        assert_eq!(Kind::from_index(4), None);
        assert!(Kind::Dataclass.is_attribute() && !Kind::Dict.is_attribute());
    }
}
