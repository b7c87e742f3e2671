//! `SampleMetadata` and `ExactSampleMetadata`.
//!
//! Metadata built by a walk is *compact*: one path arena, a 12-byte record per tensor, its sizes in
//! a shared pool, and the non-tensor leaves. No Python object is made per tensor until the caller
//! asks for `tensor_data`; the Python `(Locator, TensorSpec)` pairs it then hands out are kept
//! (once, in a cell: reading them needs no exclusive access) and from then on are the truth (so
//! mutating a spec's lists changes the metadata, as in the reference). The compact form stays
//! beside them and serves every operation while the specs still hold what it holds (see
//! `handed.rs`). Every operation reads either form through [`View`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::OnceLock;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyFrozenSet, PyList, PySet, PyString, PyTuple};

use crate::handed::{Handed, Level};
use crate::interp::{context_batch_size, info_level_index, interp, transformers_integration};
use crate::locator::{
    hash_to_isize, mix, path_eq, py_int_hash, rich_eq, Accessor, Arena, Kind, Locator, ROOT,
};
use crate::registry::TypeInfo;
use crate::tensor_spec::{dim_list, read_tensor, DtypeMemo, Spec, TensorSpec, FOREIGN_DTYPE};
use crate::traversal::{walk, Visitor};

/// One tensor of a compact metadata.
#[derive(Clone, Copy)]
pub struct Item {
    pub node: u32,
    pub off: u32,
    pub rank: u16,
    pub dtype: u16,
}

pub struct Compact {
    pub arena: Arc<Arena>,
    pub items: Vec<Item>,
    pub dims: Vec<i64>,
    pub batch_size: f64,
    /// specs changed by `update_shapes_seen`; empty, or one slot per item
    pub learned: Vec<Option<Box<Spec>>>,
    pub others: Vec<(u32, Py<PyAny>)>,
    pub is_output: bool,
    tensor_hash: OnceLock<u64>,
}

impl Compact {
    pub fn new(arena: Arena, is_output: bool) -> Compact {
        Self::new_in(Arc::new(arena), is_output)
    }

    pub fn new_in(arena: Arc<Arena>, is_output: bool) -> Compact {
        Compact {
            arena,
            items: Vec::new(),
            dims: Vec::new(),
            batch_size: f64::NAN,
            learned: Vec::new(),
            others: Vec::new(),
            is_output,
            tensor_hash: OnceLock::new(),
        }
    }

    #[inline]
    pub fn dims_of(&self, i: usize) -> &[i64] {
        let it = self.items[i];
        &self.dims[it.off as usize..it.off as usize + it.rank as usize]
    }

    pub fn learned(&self, i: usize) -> Option<&Spec> {
        self.learned.get(i).and_then(|s| s.as_deref())
    }

    pub fn spec(&self, i: usize) -> Cow<'_, Spec> {
        match self.learned(i) {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(Spec::fresh(
                self.dims_of(i),
                self.items[i].dtype,
                self.batch_size,
            )),
        }
    }

    pub fn push_tensor(&mut self, node: u32, dims: &[i64], dtype: u16) -> PyResult<()> {
        let off = u32::try_from(self.dims.len())
            .map_err(|_| PyValueError::new_err("too many tensor dimensions in one structure"))?;
        let rank = u16::try_from(dims.len())
            .map_err(|_| PyValueError::new_err("tensor rank above 65535"))?;
        self.dims.extend_from_slice(dims);
        self.items.push(Item {
            node,
            off,
            rank,
            dtype,
        });
        Ok(())
    }

    /// Record a tensor whose sizes are `dims[off..]`, just appended.
    #[inline]
    fn push_tail(&mut self, node: u32, off: usize, dtype: u16) -> PyResult<()> {
        let rank = self.dims.len().saturating_sub(off);
        let off = u32::try_from(off)
            .map_err(|_| PyValueError::new_err("too many tensor dimensions in one structure"))?;
        let rank =
            u16::try_from(rank).map_err(|_| PyValueError::new_err("tensor rank above 65535"))?;
        self.items.push(Item {
            node,
            off,
            rank,
            dtype,
        });
        Ok(())
    }

    /// New `(Locator, TensorSpec)` pairs for the tensors (Python objects the caller asked for).
    pub fn tensor_pairs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Ok(self.hand_out(py)?.0)
    }

    /// [`Compact::tensor_pairs`], with the specs in order.
    fn hand_out<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Vec<Py<TensorSpec>>)> {
        let mut pairs = Vec::with_capacity(self.items.len());
        let mut specs = Vec::with_capacity(self.items.len());
        for i in 0..self.items.len() {
            let loc = Bound::new(
                py,
                Locator::new_in(self.arena.clone(), self.items[i].node, self.is_output),
            )?;
            let spec = Bound::new(py, TensorSpec::from_spec(py, &self.spec(i))?)?;
            specs.push(spec.clone().unbind());
            pairs.push(PyTuple::new(py, [loc.into_any(), spec.into_any()])?);
        }
        Ok((PyTuple::new(py, pairs)?, specs))
    }

    pub fn set_learned(&mut self, i: usize, spec: Spec) {
        if self.learned.len() < self.items.len() {
            self.learned.resize_with(self.items.len(), || None);
        }
        if let Some(slot) = self.learned.get_mut(i) {
            *slot = Some(Box::new(spec));
        }
    }
}

/// A user-built or materialized metadata, read from its Python objects.
pub struct PyView<'py> {
    tensors: Vec<(Bound<'py, Locator>, Bound<'py, TensorSpec>, Spec)>,
    others: Vec<(Bound<'py, Locator>, Bound<'py, PyAny>)>,
}

pub enum View<'a, 'py> {
    C(&'a Compact),
    P(PyView<'py>),
}

pub struct Loc<'a> {
    pub arena: &'a Arena,
    pub node: u32,
    pub is_output: bool,
}

impl<'a, 'py> View<'a, 'py> {
    pub fn n_tensors(&self) -> usize {
        match self {
            View::C(c) => c.items.len(),
            View::P(p) => p.tensors.len(),
        }
    }
    pub fn n_others(&self) -> usize {
        match self {
            View::C(c) => c.others.len(),
            View::P(p) => p.others.len(),
        }
    }
    pub fn tensor_loc(&self, i: usize) -> Loc<'_> {
        match self {
            View::C(c) => Loc {
                arena: &c.arena,
                node: c.items[i].node,
                is_output: c.is_output,
            },
            View::P(p) => {
                let l = p.tensors[i].0.get();
                Loc {
                    arena: &l.arena,
                    node: l.node,
                    is_output: l.is_output,
                }
            }
        }
    }
    pub fn other_loc(&self, i: usize) -> Loc<'_> {
        match self {
            View::C(c) => Loc {
                arena: &c.arena,
                node: c.others[i].0,
                is_output: c.is_output,
            },
            View::P(p) => {
                let l = p.others[i].0.get();
                Loc {
                    arena: &l.arena,
                    node: l.node,
                    is_output: l.is_output,
                }
            }
        }
    }
    pub fn other_value<'s>(&'s self, py: Python<'py>, i: usize) -> Bound<'py, PyAny> {
        match self {
            View::C(c) => c.others[i].1.bind(py).clone(),
            View::P(p) => p.others[i].1.clone(),
        }
    }
    pub fn rank(&self, i: usize) -> usize {
        match self {
            View::C(c) => c.items[i].rank as usize,
            View::P(p) => p.tensors[i].2.rank(),
        }
    }
    pub fn spec(&self, i: usize) -> Cow<'_, Spec> {
        match self {
            View::C(c) => c.spec(i),
            View::P(p) => Cow::Borrowed(&p.tensors[i].2),
        }
    }
    /// `repr()` of the dtype object of tensor `i` (for messages; a compact one is in the table).
    pub fn dtype_repr(&self, py: Python<'py>, i: usize) -> String {
        let obj = match self {
            View::C(c) => c
                .items
                .get(i)
                .map(|it| crate::tensor_spec::dtype_obj(py, it.dtype)),
            View::P(p) => p
                .tensors
                .get(i)
                .and_then(|t| t.1.try_borrow().ok().map(|s| s.dtype.bind(py).clone())),
        };
        obj.and_then(|o| o.repr().ok().map(|r| r.to_string()))
            .unwrap_or_default()
    }
    /// Whether each path occurs once (true for anything built by a walk).
    pub fn unique(&self) -> bool {
        matches!(self, View::C(c) if !c.arena.may_repeat)
    }
}

fn loc_eq(py: Python<'_>, a: &Loc<'_>, b: &Loc<'_>) -> PyResult<bool> {
    path_eq(py, a.arena, a.node, b.arena, b.node)
}

struct Index {
    buckets: HashMap<u64, Vec<usize>>,
    order: Vec<usize>,
}

/// Build a dict-like index over `n` entries located by `loc`, keeping the last of equal paths.
fn build_index<'v>(py: Python<'_>, n: usize, loc: &dyn Fn(usize) -> Loc<'v>) -> PyResult<Index> {
    let mut buckets: HashMap<u64, Vec<usize>> = HashMap::with_capacity(n);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut slot_of: Vec<usize> = Vec::with_capacity(n);
    'outer: for i in 0..n {
        let li = loc(i);
        let h = li.arena.node(li.node).hash;
        let bucket = buckets.entry(h).or_default();
        for j in bucket.iter_mut() {
            if loc_eq(py, &loc(*j), &li)? {
                let slot = slot_of[*j];
                order[slot] = i;
                slot_of.push(slot);
                *j = i;
                continue 'outer;
            }
        }
        bucket.push(i);
        slot_of.push(order.len());
        order.push(i);
    }
    Ok(Index { buckets, order })
}

impl Index {
    fn find<'v>(
        &self,
        py: Python<'_>,
        loc: &dyn Fn(usize) -> Loc<'v>,
        key: &Loc<'_>,
    ) -> PyResult<Option<usize>> {
        let h = key.arena.node(key.node).hash;
        if let Some(b) = self.buckets.get(&h) {
            for &j in b {
                if loc_eq(py, &loc(j), key)? {
                    return Ok(Some(j));
                }
            }
        }
        Ok(None)
    }
}

/// The common case of comparing two walked metadata: the same tensor paths in the same order.
/// `Some(equal_ranks)` when the paths line up one to one, `None` when they do not (the caller
/// then compares them as dicts).
fn aligned_tensors(py: Python<'_>, x: &Compact, y: &Compact) -> PyResult<Option<bool>> {
    if x.items.len() != y.items.len() {
        return Ok(None);
    }
    let (nx, ny) = (&x.arena.nodes, &y.arena.nodes);
    let mut last_parents = (u32::MAX, u32::MAX);
    let mut ranks_equal = true;
    for (a, b) in x.items.iter().zip(&y.items) {
        let (p, q) = (&nx[a.node as usize], &ny[b.node as usize]);
        if p.hash != q.hash {
            return Ok(None);
        }
        let same_path = if a.node != ROOT && (p.parent, q.parent) == last_parents {
            p.kind == q.kind && p.acc.eq(py, &q.acc)?
        } else {
            path_eq(py, &x.arena, a.node, &y.arena, b.node)?
        };
        if !same_path {
            return Ok(None);
        }
        if a.node != ROOT {
            last_parents = (p.parent, q.parent);
        }
        ranks_equal &= a.rank == b.rank;
    }
    Ok(Some(ranks_equal))
}

/// Compare two sets of `(path, value)` entries with dict semantics. `same(i, j)` compares values.
fn dict_eq<'a, 'b>(
    py: Python<'_>,
    na: usize,
    la: &dyn Fn(usize) -> Loc<'a>,
    nb: usize,
    lb: &dyn Fn(usize) -> Loc<'b>,
    unique: bool,
    same: &mut dyn FnMut(usize, usize) -> PyResult<bool>,
) -> PyResult<bool> {
    if unique {
        if na != nb {
            return Ok(false);
        }
        // entries usually come in the same order: compare pairwise, remembering the last pair of
        // parents found equal so that siblings cost one step each
        let mut aligned = true;
        let mut last_parents: Option<(u32, u32)> = None;
        for i in 0..na {
            let (x, y) = (la(i), lb(i));
            let (nx, ny) = (x.arena.node(x.node), y.arena.node(y.node));
            if nx.hash != ny.hash {
                aligned = false;
                break;
            }
            let equal = if x.node != ROOT && last_parents == Some((nx.parent, ny.parent)) {
                nx.kind == ny.kind && nx.acc.eq(py, &ny.acc)?
            } else {
                loc_eq(py, &x, &y)?
            };
            if !equal {
                aligned = false;
                break;
            }
            if x.node != ROOT {
                last_parents = Some((nx.parent, ny.parent));
            }
            if !same(i, i)? {
                return Ok(false);
            }
        }
        if aligned {
            return Ok(true);
        }
    }
    let ia = build_index(py, na, la)?;
    let ib = build_index(py, nb, lb)?;
    if ia.order.len() != ib.order.len() {
        return Ok(false);
    }
    for &i in &ia.order {
        match ib.find(py, lb, &la(i))? {
            Some(j) => {
                if !same(i, j)? {
                    return Ok(false);
                }
            }
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// Order-independent hash of `(path, value-hash)` entries with dict semantics.
fn dict_hash<'a>(
    py: Python<'_>,
    n: usize,
    loc: &dyn Fn(usize) -> Loc<'a>,
    unique: bool,
    value_hash: &mut dyn FnMut(usize) -> PyResult<u64>,
) -> PyResult<u64> {
    let mut acc: u64 = 0;
    if unique {
        for i in 0..n {
            let l = loc(i);
            acc = acc.wrapping_add(mix(l.arena.node(l.node).hash, value_hash(i)?));
        }
        return Ok(acc);
    }
    for i in build_index(py, n, loc)?.order {
        let l = loc(i);
        acc = acc.wrapping_add(mix(l.arena.node(l.node).hash, value_hash(i)?));
    }
    Ok(acc)
}

/// The reference's `_hash_value`: equal values hash alike, unhashable leaves hash to 0.
pub fn value_hash(py: Python<'_>, v: &Bound<'_, PyAny>, depth: usize) -> PyResult<u64> {
    if depth == 0 {
        return value_hash_inner(py, v, depth);
    }
    // nested values recurse: count against Python's recursion limit, as the reference does
    // SAFETY: plain C-API call with the GIL held; paired with Py_LeaveRecursiveCall below
    if unsafe { pyo3::ffi::Py_EnterRecursiveCall(c" while hashing other data".as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let r = value_hash_inner(py, v, depth);
    unsafe { pyo3::ffi::Py_LeaveRecursiveCall() };
    r
}

fn value_hash_inner(py: Python<'_>, v: &Bound<'_, PyAny>, depth: usize) -> PyResult<u64> {
    let it = interp(py)?;
    if v.is_none()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<pyo3::types::PyInt>()
        || v.is_exact_instance_of::<PyFloat>()
        || v.is_exact_instance_of::<pyo3::types::PyBool>()
    {
        return Ok(v.hash()? as u64);
    }
    if v.is_instance(it.mapping_abc.bind(py))? {
        let mut acc: u64 = 0x6d61_7070;
        for item in v.call_method0(pyo3::intern!(py, "items"))?.try_iter()? {
            let (k, x): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            acc = acc.wrapping_add(mix(
                value_hash(py, &k, depth + 1)?,
                value_hash(py, &x, depth + 1)?,
            ));
        }
        return Ok(mix(acc, 1));
    }
    if v.is_instance_of::<PySet>() || v.is_instance_of::<PyFrozenSet>() {
        let mut acc: u64 = 0x7365_7473;
        for x in v.try_iter()? {
            acc = acc.wrapping_add(mix(value_hash(py, &x?, depth + 1)?, 7));
        }
        return Ok(mix(acc, 2));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut acc: u64 = 0x7475_706c;
        for x in v.try_iter()? {
            acc = mix(acc, value_hash(py, &x?, depth + 1)?);
        }
        return Ok(mix(acc, 3));
    }
    match v.hash() {
        Ok(h) => Ok(h as u64),
        Err(e) if e.is_instance_of::<PyTypeError>(py) => Ok(0),
        Err(e) => Err(e),
    }
}

fn hash_dims(spec: &Spec) -> u64 {
    let mut h: u64 = spec.rank() as u64;
    for d in &spec.shape {
        h = mix(
            h,
            match d {
                crate::tensor_spec::Dim::Int(v) => py_int_hash(*v) as u64,
                crate::tensor_spec::Dim::Batch(n) => 0xba7c_0000_0000 + *n as u64,
                crate::tensor_spec::Dim::Dyn(n) => 0xd1a0_0000_0000 + *n as u64,
                crate::tensor_spec::Dim::Str(s) | crate::tensor_spec::Dim::Sym(s) => {
                    let mut x: u64 = 0x5157;
                    for b in s.bytes() {
                        x = mix(x, b as u64);
                    }
                    x
                }
            },
        );
    }
    h
}

// ---- building from a walk -----------------------------------------------------------------------

struct Builder {
    c: Compact,
    strict: bool,
    check_cache_position: bool,
    cache_position: Option<Py<PyAny>>,
    dtypes: DtypeMemo,
    /// a tensor with symbolic sizes, or a dtype that is not a torch.dtype, was met
    symbolic: bool,
}

impl Visitor for Builder {
    fn leaf(
        &mut self,
        py: Python<'_>,
        arena: &mut Arena,
        step: Option<(u32, Accessor, Kind)>,
        value: &Bound<'_, PyAny>,
        info: &TypeInfo,
        under_cp: bool,
    ) -> PyResult<()> {
        if self.check_cache_position && under_cp {
            self.cache_position = Some(value.clone().unbind());
        }
        if self.symbolic || (!info.is_tensor && !self.strict) {
            return Ok(());
        }
        let node = match step {
            Some((parent, acc, kind)) => arena.push(py, parent, acc, kind)?,
            None => ROOT,
        };
        if info.is_tensor {
            if self.c.batch_size == 0.0
                && value
                    .getattr(pyo3::intern!(py, "ndim"))?
                    .extract::<usize>()?
                    > 0
            {
                return Err(pyo3::exceptions::PyZeroDivisionError::new_err(
                    "division by zero",
                ));
            }
            // the sizes go straight to the end of the shared pool; a failed read leaves them
            // there, but then the walk's result is dropped
            let off = self.c.dims.len();
            let Some(dtype) = read_tensor(
                py,
                value,
                info.fast_tensor,
                &mut self.c.dims,
                &mut self.dtypes,
            )?
            else {
                self.symbolic = true; // `build` starts over with Python specs
                return Ok(());
            };
            if dtype == FOREIGN_DTYPE {
                // not a torch dtype: only a Python spec can hold it
                self.symbolic = true;
                return Ok(());
            }
            self.c.push_tail(node, off, dtype)?;
        } else {
            self.c.others.push((node, value.clone().unbind()));
        }
        Ok(())
    }
}

thread_local! {
    /// Node, tensor and size counts of this thread's previous walk.
    static SIZE_HINT: std::cell::Cell<[usize; 3]> = const { std::cell::Cell::new([16, 4, 8]) };
}

/// Stands in for a compact metadata's arena while the walk builds the real one.
fn placeholder_arena() -> Arc<Arena> {
    static EMPTY: OnceLock<Arc<Arena>> = OnceLock::new();
    EMPTY
        .get_or_init(|| {
            Arc::new(Arena {
                nodes: Vec::new(),
                may_repeat: false,
            })
        })
        .clone()
}

/// A walked metadata: compact, or held as Python pairs when a tensor has symbolic sizes.
pub struct Built {
    pub data: Data,
    pub cache_position: Option<Py<PyAny>>,
}

/// Walk `obj` into a compact metadata.
pub fn build(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    strict: bool,
    batch_size: f64,
    is_output: bool,
    check_cp: bool,
) -> PyResult<Built> {
    // size the buffers like the previous walk on this thread (callers describe the same kind of
    // call again and again), up to a bound so one huge structure does not inflate small ones
    let [n_nodes, n_items, n_dims] = SIZE_HINT.with(|h| h.get());
    let mut arena = Arena::with_capacity(n_nodes);
    let mut c = Compact::new_in(placeholder_arena(), is_output);
    c.items.reserve(n_items);
    c.dims.reserve(n_dims);
    let mut b = Builder {
        c,
        strict,
        check_cache_position: check_cp,
        cache_position: None,
        dtypes: DtypeMemo::default(),
        symbolic: false,
    };
    b.c.batch_size = batch_size;
    walk(py, obj, false, &mut arena, &mut b)?;
    if b.symbolic {
        return Ok(Built {
            data: build_with_python_specs(py, obj, strict, batch_size, is_output)?,
            cache_position: b.cache_position,
        });
    }
    const BOUND: usize = 4096;
    SIZE_HINT.with(|h| {
        h.set([
            arena.len().min(BOUND),
            b.c.items.len().min(BOUND),
            b.c.dims.len().min(BOUND),
        ])
    });
    b.c.arena = Arc::new(arena);
    Ok(Built {
        data: Data::Compact(b.c),
        cache_position: b.cache_position,
    })
}

/// The reference's way, for arguments holding traced tensors: `(Locator, TensorSpec)` pairs whose
/// specs keep the symbolic sizes as they are (never converted, so no guard is added).
fn build_with_python_specs(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    strict: bool,
    batch_size: f64,
    is_output: bool,
) -> PyResult<Data> {
    let it = interp(py)?;
    let mut tensors = Vec::new();
    let mut others = Vec::new();
    for pair in crate::traversal::find_leaves(py, obj, false, is_output)?.iter() {
        let (loc, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
        if value.is_instance(it.tensor_type.bind(py))? {
            let spec = it.reference_spec.bind(py).call1((&value, batch_size))?;
            tensors.push(PyTuple::new(py, [loc, spec])?);
        } else if strict {
            others.push(PyTuple::new(py, [loc, value])?);
        }
    }
    Ok(Data::Py {
        tensors: PyTuple::new(py, tensors)?.into_any().unbind(),
        others: PyTuple::new(py, others)?.into_any().unbind(),
    })
}

/// `batch_size or global_context.get(BATCH_SIZE_KEY, nan)`, as a float.
fn resolve_batch_size(py: Python<'_>, batch_size: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    let chosen = match batch_size {
        Some(b) if b.is_truthy()? => Some(b.clone()),
        _ => context_batch_size(py)?,
    };
    match chosen {
        None => Ok(f64::NAN),
        Some(v) => v.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(format!(
                "batch size must be a number, got {}",
                v.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        }),
    }
}

// ---- the Python classes -------------------------------------------------------------------------

pub enum Data {
    Compact(Compact),
    /// `(Locator, TensorSpec)` and `(Locator, value)` pairs, as given or as handed out
    Py {
        tensors: Py<PyAny>,
        others: Py<PyAny>,
    },
}

/// Metadata of the inputs (args and kwargs) or outputs of a call: every tensor's spec at its
/// locator, and, in strict mode, every other leaf value.
///
/// Equal metadata selects the same compiled backend: tensors compare by rank, other values by
/// equality, dict key order does not matter. When an LLM phase (`"prefill"`/`"decode"`, from the
/// `cache_position` argument) is known, it alone decides equality and hash.
#[pyclass(
    module = "aitune_fast.sample_metadata",
    name = "SampleMetadata",
    subclass
)]
pub struct SampleMetadata {
    pub data: Data,
    pub strict: bool,
    pub llm_phase: Option<Py<PyAny>>,
    /// compact metadata: the `(Locator, value)` pairs `other_data` handed out
    other_cache: OnceLock<Py<PyTuple>>,
    /// compact metadata: the `(Locator, TensorSpec)` pairs `tensor_data` handed out
    handed: OnceLock<Handed>,
}

impl SampleMetadata {
    pub fn from_compact(c: Compact, strict: bool, llm_phase: Option<Py<PyAny>>) -> SampleMetadata {
        Self::from_data(Data::Compact(c), strict, llm_phase)
    }

    pub fn from_data(data: Data, strict: bool, llm_phase: Option<Py<PyAny>>) -> SampleMetadata {
        SampleMetadata {
            data,
            strict,
            llm_phase,
            other_cache: OnceLock::new(),
            handed: OnceLock::new(),
        }
    }

    /// A metadata holding Python `(Locator, TensorSpec)` and `(Locator, value)` pairs (as
    /// `SampleMetadata(tensor_data, other_data, ...)` makes one), for `codec::decode`.
    pub fn from_py_parts(
        tensors: Py<PyAny>,
        others: Py<PyAny>,
        strict: bool,
        llm_phase: Option<Py<PyAny>>,
    ) -> SampleMetadata {
        Self::from_data(Data::Py { tensors, others }, strict, llm_phase)
    }

    /// The form every operation reads: the compact one while it says what the Python view (if
    /// one was handed out) says, the Python objects otherwise.
    pub fn view<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<View<'a, 'py>> {
        self.view_at(py, Level::Full)
    }

    /// [`SampleMetadata::view`] for an operation that reads only `level` of each spec.
    fn view_at<'a, 'py>(&'a self, py: Python<'py>, level: Level) -> PyResult<View<'a, 'py>> {
        match &self.data {
            Data::Compact(c) => match self.handed.get() {
                Some(h) if !h.intact(py, c, level) => self.handed_view(py, h),
                _ => Ok(View::C(c)),
            },
            Data::Py { tensors, others } => {
                Ok(View::P(py_view(py, tensors.bind(py), others.bind(py))?))
            }
        }
    }

    /// The Python objects of a compact metadata whose tensors were handed out.
    fn handed_view<'a, 'py>(&'a self, py: Python<'py>, h: &Handed) -> PyResult<View<'a, 'py>> {
        let others = self.others_tuple(py)?;
        Ok(View::P(py_view(py, h.pairs.bind(py).as_any(), &others)?))
    }

    /// The Python pairs to read instead of the compact form, if any: those of a user-built
    /// metadata, or handed-out ones that were changed.
    pub fn py_parts(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Py<PyAny>)>> {
        match &self.data {
            Data::Py { tensors, others } => Ok(Some((tensors.clone_ref(py), others.clone_ref(py)))),
            Data::Compact(c) => match self.handed.get() {
                Some(h) if !h.intact(py, c, Level::Full) => Ok(Some((
                    h.pairs.clone_ref(py).into_any(),
                    self.others_tuple(py)?.unbind(),
                ))),
                _ => Ok(None),
            },
        }
    }

    fn others_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.data {
            Data::Py { others, .. } => Ok(others.bind(py).clone()),
            Data::Compact(c) => {
                if let Some(t) = self.other_cache.get() {
                    return Ok(t.bind(py).clone().into_any());
                }
                let pairs = c
                    .others
                    .iter()
                    .map(|(node, v)| {
                        let loc =
                            Bound::new(py, Locator::new_in(c.arena.clone(), *node, c.is_output))?;
                        PyTuple::new(py, [loc.into_any(), v.bind(py).clone()])
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                let t = PyTuple::new(py, pairs)?;
                // another thread may have made them meanwhile (Python code ran): keep the first
                let _ = self.other_cache.set(t.clone().unbind());
                match self.other_cache.get() {
                    Some(first) => Ok(first.bind(py).clone().into_any()),
                    None => Ok(t.into_any()),
                }
            }
        }
    }

    /// The `(Locator, TensorSpec)` pairs: made once for compact metadata, then the same objects.
    fn tensors_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = match &self.data {
            Data::Py { tensors, .. } => return Ok(tensors.bind(py).clone()),
            Data::Compact(c) => c,
        };
        if let Some(h) = self.handed.get() {
            return Ok(h.pairs.bind(py).clone().into_any());
        }
        self.others_tuple(py)?; // handed-out views read `other_data` as handed out too
        let (pairs, specs) = c.hand_out(py)?;
        // another thread may have made them meanwhile (Python code ran): keep the first
        let _ = self
            .handed
            .set(Handed::new(py, pairs.clone().unbind(), specs)?);
        match self.handed.get() {
            Some(first) => Ok(first.pairs.bind(py).clone().into_any()),
            None => Ok(pairs.into_any()),
        }
    }

    /// Whether `tensor_data` was handed out (its specs are then the truth).
    fn is_handed_out(&self) -> bool {
        self.handed.get().is_some()
    }

    pub fn equal(&self, py: Python<'_>, other: &SampleMetadata, exact: bool) -> PyResult<bool> {
        if !exact {
            if let Some(p) = &self.llm_phase {
                return match &other.llm_phase {
                    Some(q) => rich_eq(p.bind(py), q.bind(py)),
                    None => rich_eq(p.bind(py), &py.None().into_bound(py)),
                };
            }
        }
        // the plain kind reads only ranks, the exact kind shapes
        let level = if exact { Level::Shape } else { Level::Rank };
        let (a, b) = (self.view_at(py, level)?, other.view_at(py, level)?);
        let unique = a.unique() && b.unique();
        let mut tensors_checked = false;
        if let (false, true, View::C(x), View::C(y)) = (exact, unique, &a, &b) {
            match aligned_tensors(py, x, y)? {
                Some(false) => return Ok(false),
                Some(true) => tensors_checked = true,
                None => {}
            }
        }
        let la = |i: usize| a.tensor_loc(i);
        let lb = |i: usize| b.tensor_loc(i);
        let tensors_equal = tensors_checked
            || dict_eq(
                py,
                a.n_tensors(),
                &la,
                b.n_tensors(),
                &lb,
                unique,
                &mut |i, j| {
                    // exact metadata compares whole shapes, the plain kind only ranks
                    Ok(if exact {
                        a.spec(i).shape == b.spec(j).shape
                    } else {
                        a.rank(i) == b.rank(j)
                    })
                },
            )?;
        if !tensors_equal {
            return Ok(false);
        }
        let oa = |i: usize| a.other_loc(i);
        let ob = |i: usize| b.other_loc(i);
        dict_eq(
            py,
            a.n_others(),
            &oa,
            b.n_others(),
            &ob,
            unique,
            &mut |i, j| rich_eq(&a.other_value(py, i), &b.other_value(py, j)),
        )
    }

    pub fn hash(&self, py: Python<'_>, exact: bool) -> PyResult<isize> {
        if !exact {
            if let Some(p) = &self.llm_phase {
                return p.bind(py).hash();
            }
        }
        let v = self.view_at(py, if exact { Level::Shape } else { Level::Rank })?;
        let unique = v.unique();
        let lt = |i: usize| v.tensor_loc(i);
        let tensor_part = match (&v, exact) {
            (View::C(c), false) => {
                match c.tensor_hash.get() {
                    Some(h) => *h,
                    None => {
                        let h = dict_hash(py, v.n_tensors(), &lt, unique, &mut |i| {
                            Ok(v.rank(i) as u64)
                        })?;
                        let _ = c.tensor_hash.set(h);
                        h
                    }
                }
            }
            (_, false) => dict_hash(
                py,
                v.n_tensors(),
                &lt,
                unique,
                &mut |i| Ok(v.rank(i) as u64),
            )?,
            (_, true) => dict_hash(py, v.n_tensors(), &lt, unique, &mut |i| {
                Ok(hash_dims(&v.spec(i)))
            })?,
        };
        let lo = |i: usize| v.other_loc(i);
        let other_part = dict_hash(py, v.n_others(), &lo, unique, &mut |i| {
            value_hash(py, &v.other_value(py, i), 0)
        })?;
        Ok(hash_to_isize(mix(tensor_part, other_part)))
    }

    fn describe_short<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let v = self.view(py)?;
        let mut out = crate::locator::Text::new();
        out.push_str("Tensors: ");
        for i in 0..v.n_tensors() {
            if i > 0 {
                out.push_str(", ");
            }
            let l = v.tensor_loc(i);
            l.arena
                .write_display_path(py, l.node, l.is_output, &mut out)?;
        }
        if v.n_others() > 0 {
            out.push_str(" Others: ");
            for i in 0..v.n_others() {
                if i > 0 {
                    out.push_str(", ");
                }
                let l = v.other_loc(i);
                l.arena
                    .write_display_path(py, l.node, l.is_output, &mut out)?;
                out.push('=');
                crate::locator::format_obj(&v.other_value(py, i), &mut out)?;
            }
        }
        out.to_py(py)
    }
}

/// What `update_shapes_seen` will write: `(index, spec before, spec after)` for each tensor of
/// `self` that learns something, and for Python specs the objects to write into.
struct Plan<'py> {
    updates: Vec<(usize, Spec, Spec)>,
    /// `None` for compact metadata
    targets: Option<Vec<Bound<'py, TensorSpec>>>,
}

impl<'py> Plan<'py> {
    fn new(a: &View<'_, 'py>, b: &View<'_, 'py>, merges: Vec<(usize, usize)>) -> PyResult<Self> {
        let mut updates = Vec::new();
        let mut targets = match a {
            View::C(_) => None,
            View::P(_) => Some(Vec::new()),
        };
        for (i, j) in merges {
            if i >= a.n_tensors() || j >= b.n_tensors() {
                continue; // cannot happen: indices come from the same snapshots
            }
            if let (View::C(x), View::C(y)) = (a, b) {
                if x.learned(i).is_none() && y.learned(j).is_none() && x.dims_of(i) == y.dims_of(j)
                {
                    continue; // same sizes: nothing to learn
                }
            }
            let before = a.spec(i).into_owned();
            let mut after = before.clone();
            if !after.merge(&b.spec(j))? {
                continue;
            }
            if let (Some(t), View::P(p)) = (&mut targets, a) {
                t.push(p.tensors[i].1.clone());
            }
            updates.push((i, before, after));
        }
        Ok(Plan { updates, targets })
    }
}

fn pair<'py>(
    item: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    item.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "SampleMetadata {what} holds (Locator, ...) pairs, got {}",
                item.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
}

fn py_view<'py>(
    py: Python<'py>,
    tensors: &Bound<'py, PyAny>,
    others: &Bound<'py, PyAny>,
) -> PyResult<PyView<'py>> {
    let mut v = PyView {
        tensors: Vec::new(),
        others: Vec::new(),
    };
    // take the pairs first, as `dict(tensor_data)` does: reading a spec runs Python code (a shape
    // list's `__iter__`) that may change the list
    let items = tensors.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    for item in items {
        let (l, s) = pair(&item, "tensor_data")?;
        let l = l.downcast_into::<Locator>().map_err(|e| {
            PyTypeError::new_err(format!(
                "tensor_data locators must be aitune_fast.Locator: {e}"
            ))
        })?;
        let s = s.downcast_into::<TensorSpec>().map_err(|e| {
            PyTypeError::new_err(format!(
                "tensor_data specs must be aitune_fast.TensorSpec: {e}"
            ))
        })?;
        let spec = s.try_borrow()?.to_spec(py)?;
        v.tensors.push((l, s, spec));
    }
    for item in others.try_iter()? {
        let (l, x) = pair(&item?, "other_data")?;
        let l = l.downcast_into::<Locator>().map_err(|e| {
            PyTypeError::new_err(format!(
                "other_data locators must be aitune_fast.Locator: {e}"
            ))
        })?;
        v.others.push((l, x));
    }
    Ok(v)
}

fn phase_of(py: Python<'_>, cache_position: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let it = interp(py)?;
    if let Some(first) = crate::reader::first_int(py, cache_position)? {
        return Ok(if first == 0 {
            it.prefill.clone_ref(py).into_any()
        } else {
            it.decode.clone_ref(py).into_any()
        });
    }
    let first = cache_position
        .get_item(0)?
        .call_method0(pyo3::intern!(py, "item"))?;
    let zero = 0i64.into_pyobject(py)?;
    Ok(if first.eq(zero)? {
        it.prefill.clone_ref(py).into_any()
    } else {
        it.decode.clone_ref(py).into_any()
    })
}

#[pymethods]
impl SampleMetadata {
    #[new]
    #[pyo3(signature = (tensor_data, other_data, strict=None, llm_phase=None))]
    fn py_new(
        py: Python<'_>,
        tensor_data: &Bound<'_, PyAny>,
        other_data: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        py_view(py, tensor_data, other_data)?; // validate now, with a clear error
        Ok(SampleMetadata {
            data: Data::Py {
                tensors: tensor_data.clone().unbind(),
                others: other_data.clone().unbind(),
            },
            strict: match strict {
                Some(s) => s.is_truthy()?,
                None => false,
            },
            llm_phase: llm_phase.filter(|p| !p.is_none(py)),
            other_cache: OnceLock::new(),
            handed: OnceLock::new(),
        })
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        // only references this object owns alone: the path arena may be shared with Locators
        match &self.data {
            Data::Compact(c) => {
                for (_, v) in &c.others {
                    visit.call(v)?;
                }
            }
            Data::Py { tensors, others } => {
                visit.call(tensors)?;
                visit.call(others)?;
            }
        }
        if let Some(p) = &self.llm_phase {
            visit.call(p)?;
        }
        if let Some(t) = self.other_cache.get() {
            visit.call(t)?;
        }
        if let Some(h) = self.handed.get() {
            h.traverse(&visit)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.data = Data::Compact(Compact::new(Arena::new(), false));
        self.llm_phase = None;
        self.other_cache = OnceLock::new();
        self.handed = OnceLock::new();
    }

    /// Describe `inputs` (forward arguments keyed by parameter name). In strict mode non-tensor
    /// leaves are recorded too. `batch_size` defaults to the one in `global_context`.
    #[staticmethod]
    #[pyo3(signature = (inputs, strict=None, batch_size=None))]
    fn from_inputs(
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        batch_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SampleMetadata> {
        let strict = match strict {
            Some(s) => s.is_truthy()?,
            None => false,
        };
        let bs = resolve_batch_size(py, batch_size)?;
        let check_cp = transformers_integration(py)?;
        let Built {
            data,
            cache_position: cp,
        } = build(py, inputs, strict, bs, false, check_cp)?;
        let phase = match cp {
            Some(cp) if !cp.is_none(py) => Some(phase_of(py, cp.bind(py))?),
            _ => None,
        };
        Ok(SampleMetadata::from_data(data, strict, phase))
    }

    /// Describe the outputs of a call; locators render as `output...`.
    #[staticmethod]
    #[pyo3(signature = (output, strict=None, batch_size=None))]
    fn from_outputs(
        py: Python<'_>,
        output: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        batch_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SampleMetadata> {
        let strict = match strict {
            Some(s) => s.is_truthy()?,
            None => false,
        };
        let bs = resolve_batch_size(py, batch_size)?;
        let Built { data, .. } = build(py, output, strict, bs, true, false)?;
        Ok(SampleMetadata::from_data(data, strict, None))
    }

    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        if !other.is_instance(&slf.get_type())? {
            return Ok(false);
        }
        let other = other.downcast::<SampleMetadata>()?;
        if slf.is(other) {
            return Ok(true);
        }
        let them = other.try_borrow()?;
        slf.try_borrow()?.equal(py, &them, false)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.hash(py, false)
    }

    /// `copy.copy`: a new metadata sharing this one's `(Locator, TensorSpec)` pairs, as a shallow
    /// copy of the reference's shares its specs.
    fn __copy__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (tensors, others, strict, phase) = {
            let me = slf.try_borrow()?;
            let tensors = me.tensors_tuple(py)?;
            let others = me.others_tuple(py)?;
            let phase = match &me.llm_phase {
                Some(p) => p.bind(py).clone(),
                None => py.None().into_bound(py),
            };
            (tensors, others, me.strict, phase)
        };
        slf.get_type().call1((tensors, others, strict, phase))
    }

    /// Pickling and `deepcopy`: rebuilt from `(Locator, TensorSpec)` pairs (fresh ones
    /// for compact metadata, which is left as it is).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.try_borrow()?;
        let others = me.others_tuple(py)?;
        let tensors = match (&me.data, me.handed.get()) {
            (Data::Py { tensors, .. }, _) => tensors.bind(py).clone(),
            (Data::Compact(_), Some(h)) => h.pairs.bind(py).clone().into_any(),
            (Data::Compact(c), None) => c.tensor_pairs(py)?.into_any(),
        };
        let phase = match &me.llm_phase {
            Some(p) => p.bind(py).clone(),
            None => py.None().into_bound(py),
        };
        let strict = pyo3::types::PyBool::new(py, me.strict)
            .to_owned()
            .into_any();
        Ok((
            slf.get_type().into_any(),
            PyTuple::new(py, [tensors, others, strict, phase])?,
        ))
    }

    fn __str__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyString>> {
        slf.try_borrow()?.describe_short(slf.py())
    }

    fn __repr__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyString>> {
        let it = interp(slf.py())?;
        Ok(Self::describe(slf, Some(it.info_levels[2].bind(slf.py())))?
            .downcast_into::<PyString>()?)
    }

    /// A table of the tensors (and other values) at SHORT, MEDIUM or FULL detail.
    #[pyo3(signature = (info_level=None))]
    fn describe<'py>(
        slf: &Bound<'py, Self>,
        info_level: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let it = interp(py)?;
        let level = match info_level {
            None => 2,
            Some(l) => info_level_index(py, l)?,
        };
        if level == 0 {
            return Ok(slf.try_borrow()?.describe_short(py)?.into_any());
        }
        let level_obj = it.info_levels[level].bind(py).clone();
        it.describe.bind(py).call1((slf, level_obj))
    }

    /// Rows for the MEDIUM/FULL tables: `(tensor_rows, other_rows)` with the reference's cell objects.
    fn _describe_rows<'py>(
        slf: &Bound<'py, Self>,
        full: bool,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = slf.py();
        let me = slf.try_borrow()?;
        let v = me.view(py)?;
        let tensors = PyList::empty(py);
        for i in 0..v.n_tensors() {
            let l = v.tensor_loc(i);
            let access = l.arena.display_path(py, l.node, l.is_output)?;
            let semantic = l.arena.semantic_path(py, l.node)?.str()?;
            let row = match &v {
                View::P(p) => {
                    let s = p.tensors[i].1.try_borrow()?;
                    if full {
                        PyTuple::new(
                            py,
                            [
                                access.into_any(),
                                semantic.into_any(),
                                s.shape.bind(py).clone(),
                                s.min_shape.bind(py).clone(),
                                s.max_shape.bind(py).clone(),
                                s.dtype.bind(py).clone(),
                            ],
                        )?
                    } else {
                        PyTuple::new(
                            py,
                            [
                                access.into_any(),
                                semantic.into_any(),
                                s.shape.bind(py).clone(),
                            ],
                        )?
                    }
                }
                View::C(c) => {
                    let s = c.spec(i);
                    if full {
                        PyTuple::new(
                            py,
                            [
                                access.into_any(),
                                semantic.into_any(),
                                dim_list(py, &s.shape)?.into_any(),
                                PyList::new(py, &s.min)?.into_any(),
                                PyList::new(py, &s.max)?.into_any(),
                                crate::tensor_spec::dtype_obj(py, s.dtype),
                            ],
                        )?
                    } else {
                        PyTuple::new(
                            py,
                            [
                                access.into_any(),
                                semantic.into_any(),
                                dim_list(py, &s.shape)?.into_any(),
                            ],
                        )?
                    }
                }
            };
            tensors.append(row)?;
        }
        let others = PyList::empty(py);
        for i in 0..v.n_others() {
            let l = v.other_loc(i);
            let access = l.arena.display_path(py, l.node, l.is_output)?;
            let semantic = l.arena.semantic_path(py, l.node)?.str()?;
            others.append(PyTuple::new(
                py,
                [
                    access.into_any(),
                    semantic.into_any(),
                    v.other_value(py, i).str()?.into_any(),
                ],
            )?)?;
        }
        Ok((tensors, others))
    }

    /// Whether any tensor has a dynamic or batch axis.
    fn detected_dynamic_axis(&self, py: Python<'_>) -> PyResult<bool> {
        let v = self.view(py)?;
        for i in 0..v.n_tensors() {
            let s = v.spec(i);
            if s.has_dynamic_axis() || s.has_batch_axis() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether every tensor has a batch axis (true when there are no tensors).
    fn has_batch_axis(&self, py: Python<'_>) -> PyResult<bool> {
        let v = self.view(py)?;
        for i in 0..v.n_tensors() {
            if !v.spec(i).has_batch_axis() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `"prefill"`, `"decode"`, or `""` when no LLM phase was detected.
    #[getter]
    fn llm_phase(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.llm_phase {
            Some(p) => Ok(p.clone_ref(py)),
            None => Ok(interp(py)?.empty_str.clone_ref(py).into_any()),
        }
    }

    /// Whether non-tensor leaves were recorded.
    #[getter]
    fn strict(&self) -> bool {
        self.strict
    }

    /// `((Locator, value), ...)` for the non-tensor leaves (strict mode).
    #[getter]
    fn other_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.others_tuple(py)
    }

    /// `((Locator, TensorSpec), ...)`. The specs are live: changing them changes this metadata.
    #[getter]
    fn tensor_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.tensors_tuple(py)
    }

    /// The tensor specs, in order.
    #[getter]
    fn tensor_specs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let td = self.tensors_tuple(py)?;
        let out = PyList::empty(py);
        for item in td.try_iter()? {
            out.append(pair(&item?, "tensor_data")?.1)?;
        }
        Ok(out)
    }

    /// Learn dynamic and batch axes from `other`, a later sample with the same tensors.
    /// Raises `ValueError` (showing both) when the tensors differ in locators or ranks.
    fn update_shapes_seen(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let other = other.downcast::<SampleMetadata>().map_err(|_| {
            PyTypeError::new_err(format!(
                "update_shapes_seen expects a SampleMetadata, got {}",
                other
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if slf.is(other) {
            return Ok(());
        }
        let mismatch = || -> PyResult<PyErr> {
            let it = interp(py)?;
            let full = it.info_levels[2].bind(py);
            Ok(PyValueError::new_err(format!(
                "Cannot update shapes seen, because tensor data is different, {} != {}",
                Self::describe(slf, Some(full))?,
                Self::describe(other, Some(full))?
            )))
        };
        // every index below refers to the snapshots `a` and `b`: Python code that runs meanwhile (a
        // key's `__eq__`, a list's `__iter__`, another thread) may change the metadata's lists, and
        // what changed in the compact form is checked again before it is written
        let plan: Option<Plan<'_>> = {
            let me = slf.try_borrow()?;
            let them = other.try_borrow()?;
            // handed-out specs are the truth: they are the ones that learn
            let a = match (&me.data, me.handed.get()) {
                (Data::Compact(_), Some(h)) => me.handed_view(py, h)?,
                _ => me.view(py)?,
            };
            let b = them.view(py)?;
            let aligned = match (&a, &b) {
                (View::C(x), View::C(y)) if a.unique() && b.unique() => aligned_tensors(py, x, y)?,
                _ => None,
            };
            let merges: Option<Vec<(usize, usize)>> = match aligned {
                Some(false) => None,
                Some(true) => Some((0..a.n_tensors()).map(|i| (i, i)).collect()),
                None => {
                    let unique = a.unique() && b.unique();
                    let la = |i: usize| a.tensor_loc(i);
                    let lb = |i: usize| b.tensor_loc(i);
                    // the aligned fast path may hand over a prefix before the general path runs:
                    // keep the last
                    let mut partner: Vec<Option<usize>> = vec![None; a.n_tensors()];
                    let mut collect = |i: usize, j: usize| -> PyResult<bool> {
                        if let Some(slot) = partner.get_mut(i) {
                            *slot = Some(j);
                        }
                        Ok(a.rank(i) == b.rank(j))
                    };
                    if dict_eq(
                        py,
                        a.n_tensors(),
                        &la,
                        b.n_tensors(),
                        &lb,
                        unique,
                        &mut collect,
                    )? {
                        Some(
                            partner
                                .iter()
                                .enumerate()
                                .filter_map(|(i, j)| j.map(|j| (i, j)))
                                .collect(),
                        )
                    } else {
                        None
                    }
                }
            };
            match merges {
                Some(merges) => Some(Plan::new(&a, &b, merges)?),
                None => None,
            }
        };
        let Some(plan) = plan else {
            return Err(mismatch()?);
        };
        match plan.targets {
            Some(targets) => {
                for ((_, before, after), target) in plan.updates.iter().zip(targets) {
                    target.try_borrow()?.write_back(py, before, after)?;
                }
                // handed-out specs of a compact metadata: let the compact form learn the same, so
                // that it keeps serving while the specs say what it says (checked on every use)
                if let Ok(mut me) = slf.try_borrow_mut() {
                    if me.is_handed_out() {
                        if let Data::Compact(c) = &mut me.data {
                            for (i, _, after) in plan.updates {
                                if i < c.items.len() {
                                    c.set_learned(i, after);
                                }
                            }
                        }
                    }
                }
            }
            None => {
                let changed = || {
                    PyRuntimeError::new_err(
                        "SampleMetadata changed during update_shapes_seen (by code that ran meanwhile)",
                    )
                };
                let mut me = slf.try_borrow_mut()?;
                if me.is_handed_out() {
                    return Err(changed());
                }
                let Data::Compact(c) = &mut me.data else {
                    return Err(changed());
                };
                for (i, _, after) in plan.updates {
                    if i >= c.items.len() {
                        return Err(changed());
                    }
                    c.set_learned(i, after);
                }
            }
        }
        Ok(())
    }

    /// Copies of `inputs` with every tensor sliced or repeated along its batch axes to `batch_size`.
    /// The input is left untouched and the result shares no memory with it.
    fn make_batch<'py>(
        slf: &Bound<'py, Self>,
        inputs: &Bound<'py, PyAny>,
        batch_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let it = interp(slf.py())?;
        it.make_batch
            .bind(slf.py())
            .call1((slf, inputs, batch_size))
    }

    /// Learn the batch axes' largest sizes from `inputs` batched to `max_batch_size`.
    fn update_max_batch_size(
        slf: &Bound<'_, Self>,
        inputs: &Bound<'_, PyAny>,
        max_batch_size: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let it = interp(slf.py())?;
        it.update_max_batch_size
            .bind(slf.py())
            .call1((slf, inputs, max_batch_size))?;
        Ok(())
    }
}

/// Exact-shape metadata for bucketing recorded samples: equal only with the same locators,
/// the same exact shapes (dtype ignored) and the same other values; never equal to a plain
/// `SampleMetadata`.
#[pyclass(module = "aitune_fast.exact_sample_metadata", name = "ExactSampleMetadata", extends = SampleMetadata, subclass)]
pub struct ExactSampleMetadata {}

#[pymethods]
impl ExactSampleMetadata {
    #[new]
    #[pyo3(signature = (tensor_data, other_data, strict=None, llm_phase=None))]
    fn py_new(
        py: Python<'_>,
        tensor_data: &Bound<'_, PyAny>,
        other_data: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        Ok(PyClassInitializer::from(SampleMetadata::py_new(
            py,
            tensor_data,
            other_data,
            strict,
            llm_phase,
        )?)
        .add_subclass(ExactSampleMetadata {}))
    }

    /// Describe `inputs` with exact shapes, recording every leaf.
    #[staticmethod]
    fn from_inputs(py: Python<'_>, inputs: &Bound<'_, PyAny>) -> PyResult<Py<ExactSampleMetadata>> {
        let Built { data, .. } = build(py, inputs, true, f64::NAN, false, false)?;
        Py::new(
            py,
            PyClassInitializer::from(SampleMetadata::from_data(data, true, None))
                .add_subclass(ExactSampleMetadata {}),
        )
    }

    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        if !other.is_instance(&slf.get_type())? {
            return Ok(false);
        }
        let other = other.downcast::<SampleMetadata>()?;
        if slf.as_any().is(other) {
            return Ok(true);
        }
        let me = slf.as_super().try_borrow()?;
        let them = other.try_borrow()?;
        me.equal(py, &them, true)
    }

    fn __hash__(slf: &Bound<'_, Self>) -> PyResult<isize> {
        slf.as_super().try_borrow()?.hash(slf.py(), true)
    }
}
