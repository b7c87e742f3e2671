//! Equality and hashing: what makes a metadata a dict key. Tensors compare by rank (or exact
//! shape), other values by equality, dict key order does not matter.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyFrozenSet, PyList, PySet, PyString, PyTuple};

use super::sample::SampleMetadata;
use super::storage::{Level, Loc, View};
use crate::interp::interp;
use crate::paths::{hash_to_isize, mix, path_eq, py_int_hash, rich_eq, PathIndex, ROOT};
use crate::tensor_spec::Spec;

fn loc_eq(py: Python<'_>, a: &Loc<'_>, b: &Loc<'_>) -> PyResult<bool> {
    path_eq(py, a.arena, a.node, b.arena, b.node)
}

struct Index {
    paths: PathIndex,
    order: Vec<usize>,
}

/// Build a dict-like index over `n` entries located by `loc`, keeping the last of equal paths.
fn build_index<'v>(py: Python<'_>, n: usize, loc: &dyn Fn(usize) -> Loc<'v>) -> PyResult<Index> {
    let mut paths = PathIndex::with_capacity(n);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut slot_of: Vec<usize> = Vec::with_capacity(n);
    for i in 0..n {
        let li = loc(i);
        let h = li.arena.node(li.node).hash;
        match paths.find(h, |j| loc_eq(py, &loc(j), &li))? {
            Some(j) => {
                let slot = slot_of[j];
                order[slot] = i;
                slot_of.push(slot);
                paths.replace(h, j, i);
            }
            None => {
                paths.insert(h, i);
                slot_of.push(order.len());
                order.push(i);
            }
        }
    }
    Ok(Index { paths, order })
}

impl Index {
    fn find<'v>(
        &self,
        py: Python<'_>,
        loc: &dyn Fn(usize) -> Loc<'v>,
        key: &Loc<'_>,
    ) -> PyResult<Option<usize>> {
        let h = key.arena.node(key.node).hash;
        self.paths.find(h, |j| loc_eq(py, &loc(j), key))
    }
}

/// The common case of comparing two walked metadata: the same paths in the same order. Compares
/// entries pairwise while their paths agree, remembering the last pair of parents found equal so
/// that siblings cost one step each; `twins`: the arenas agree node for node, so the same node is
/// the same path. `Some(true)` when the paths line up one to one and `same(i, i)` holds for each,
/// `Some(false)` at the first pair of equal paths whose values differ, `None` at the first pair
/// of paths that differ (the caller then compares the entries as dicts).
#[inline]
fn aligned_pairs<'a, 'b>(
    py: Python<'_>,
    n: usize,
    la: impl Fn(usize) -> Loc<'a>,
    lb: impl Fn(usize) -> Loc<'b>,
    twins: bool,
    mut same: impl FnMut(usize, usize) -> PyResult<bool>,
) -> PyResult<Option<bool>> {
    let mut last_parents: Option<(u32, u32)> = None;
    for i in 0..n {
        let (x, y) = (la(i), lb(i));
        let (nx, ny) = (x.arena.node(x.node), y.arena.node(y.node));
        if nx.hash != ny.hash {
            return Ok(None);
        }
        let same_path = if twins && x.node == y.node {
            true
        } else if x.node != ROOT && last_parents == Some((nx.parent, ny.parent)) {
            nx.kind == ny.kind && nx.acc.eq(py, &ny.acc)?
        } else {
            loc_eq(py, &x, &y)?
        };
        if !same_path {
            return Ok(None);
        }
        if x.node != ROOT {
            last_parents = Some((nx.parent, ny.parent));
        }
        if !same(i, i)? {
            return Ok(Some(false));
        }
    }
    Ok(Some(true))
}

/// Compare the tensors of two views with dict semantics: `same(i, j)` compares the tensors at
/// equal paths (`i` in `a`, `j` in `b`).
pub(super) fn tensors_eq(
    py: Python<'_>,
    a: &View<'_, '_>,
    b: &View<'_, '_>,
    mut same: impl FnMut(usize, usize) -> PyResult<bool>,
) -> PyResult<bool> {
    let unique = a.unique() && b.unique();
    let (na, nb) = (a.n_tensors(), b.n_tensors());
    let twins = unique && na == nb && View::twins(py, a, b)?;
    let paths = Paths { unique, twins };
    if let (Some(la), Some(lb)) = (a.compact_tensor_locs(), b.compact_tensor_locs()) {
        return dict_eq(py, na, la, nb, lb, paths, &mut same);
    }
    dict_eq(
        py,
        na,
        |i| a.tensor_loc(i),
        nb,
        |i| b.tensor_loc(i),
        paths,
        same,
    )
}

/// What is known of two sets of paths before comparing them.
#[derive(Clone, Copy)]
struct Paths {
    /// each path occurs once on both sides (so a pairwise walk may settle the comparison)
    unique: bool,
    /// the two sides' arenas agree node for node (see [`View::twins`])
    twins: bool,
}

/// Compare two sets of `(path, value)` entries with dict semantics. `same(i, j)` compares values.
fn dict_eq<'a, 'b>(
    py: Python<'_>,
    na: usize,
    la: impl Fn(usize) -> Loc<'a>,
    nb: usize,
    lb: impl Fn(usize) -> Loc<'b>,
    paths: Paths,
    mut same: impl FnMut(usize, usize) -> PyResult<bool>,
) -> PyResult<bool> {
    if paths.unique {
        if na != nb {
            return Ok(false);
        }
        if let Some(equal) = aligned_pairs(py, na, &la, &lb, paths.twins, &mut same)? {
            return Ok(equal);
        }
    }
    let ia = build_index(py, na, &la)?;
    let ib = build_index(py, nb, &lb)?;
    if ia.order.len() != ib.order.len() {
        return Ok(false);
    }
    for &i in &ia.order {
        match ib.find(py, &lb, &la(i))? {
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
#[inline]
fn dict_hash<'a>(
    py: Python<'_>,
    n: usize,
    loc: impl Fn(usize) -> Loc<'a>,
    unique: bool,
    mut value_hash: impl FnMut(usize) -> PyResult<u64>,
) -> PyResult<u64> {
    let mut acc: u64 = 0;
    if unique {
        for i in 0..n {
            let l = loc(i);
            acc = acc.wrapping_add(mix(l.arena.node(l.node).hash, value_hash(i)?));
        }
        return Ok(acc);
    }
    for i in build_index(py, n, &loc)?.order {
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
    // nested values recurse: count against Python's recursion limit, as the reference does, and
    // against the C stack left
    crate::stack::check("hashing other data")?;
    // SAFETY: plain C-API call with the GIL held; paired with Py_LeaveRecursiveCall below
    if unsafe { pyo3::ffi::Py_EnterRecursiveCall(c" while hashing other data".as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let r = value_hash_inner(py, v, depth);
    // SAFETY: the GIL is held, and the Py_EnterRecursiveCall above succeeded, so this leaves the
    // one level it entered (CPython requires the calls to pair up on the same thread)
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

impl SampleMetadata {
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
        let (a, b) = (
            self.storage.view(py, level)?,
            other.storage.view(py, level)?,
        );
        // exact metadata compares whole shapes, the plain kind only ranks
        let tensors_equal = tensors_eq(py, &a, &b, |i, j| {
            Ok(if exact {
                a.spec(i).shape == b.spec(j).shape
            } else {
                a.rank(i) == b.rank(j)
            })
        })?;
        if !tensors_equal {
            return Ok(false);
        }
        let paths = Paths {
            unique: a.unique() && b.unique(),
            twins: false,
        };
        dict_eq(
            py,
            a.n_others(),
            |i| a.other_loc(i),
            b.n_others(),
            |i| b.other_loc(i),
            paths,
            |i, j| rich_eq(&a.other_value(py, i), &b.other_value(py, j)),
        )
    }

    pub fn hash(&self, py: Python<'_>, exact: bool) -> PyResult<isize> {
        if !exact {
            if let Some(p) = &self.llm_phase {
                return p.bind(py).hash();
            }
        }
        let v = self
            .storage
            .view(py, if exact { Level::Shape } else { Level::Rank })?;
        let unique = v.unique();
        let lt = |i: usize| v.tensor_loc(i);
        let tensor_part = if exact {
            dict_hash(py, v.n_tensors(), lt, unique, |i| Ok(hash_dims(&v.spec(i))))?
        } else if let Some(h) = v.remembered_rank_hash() {
            h
        } else {
            let h = dict_hash(py, v.n_tensors(), lt, unique, |i| Ok(v.rank(i) as u64))?;
            v.remember_rank_hash(h);
            h
        };
        let other_part = dict_hash(
            py,
            v.n_others(),
            |i| v.other_loc(i),
            unique,
            |i| value_hash(py, &v.other_value(py, i), 0),
        )?;
        Ok(hash_to_isize(mix(tensor_part, other_part)))
    }
}
