//! [`View`]: how every operation reads a metadata, compact or as Python `(Locator, TensorSpec)`
//! and `(Locator, value)` pairs (user-built, or handed out and then changed). Its methods are the
//! only place outside `storage/mod.rs` that tells the two apart.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::compact::Compact;
use crate::paths::{Arena, Locator};
use crate::tensor_spec::{dim_list, dtype_obj, Spec, TensorSpec};

/// A user-built or materialized metadata, read from its Python objects.
pub struct PyView<'py> {
    pub tensors: Vec<(Bound<'py, Locator>, Bound<'py, TensorSpec>, Spec)>,
    pub(super) others: Vec<(Bound<'py, Locator>, Bound<'py, PyAny>)>,
}

/// A metadata as one operation reads it; made by `Storage::view`.
pub enum View<'a, 'py> {
    C(&'a Compact),
    P(PyView<'py>),
}

/// One of a metadata's two lists of entries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `tensor_data`: `(Locator, TensorSpec)`
    Tensors,
    /// `other_data`: `(Locator, value)`
    Others,
}

impl Part {
    /// The list's name, as `SampleMetadata` calls it.
    pub fn name(self) -> &'static str {
        match self {
            Part::Tensors => "tensor_data",
            Part::Others => "other_data",
        }
    }
}

/// A tensor's spec as Python objects (`shape`, `min_shape`, `max_shape`, `dtype`): a Python
/// spec's own, or new ones for a compact spec.
pub struct SpecCells<'py> {
    pub shape: Bound<'py, PyAny>,
    pub min_shape: Bound<'py, PyAny>,
    pub max_shape: Bound<'py, PyAny>,
    pub dtype: Bound<'py, PyAny>,
    /// `shape`, `min_shape` and `max_shape` are new lists of ints and strs (JSON as they are)
    pub json_ready: bool,
}

/// A tensor that has seen one shape only, as a compact metadata holds it: its sizes are its
/// shape, min and max shapes.
pub struct Fresh<'a> {
    pub dims: &'a [i64],
    pub dtype: u16,
    pub batch_size: f64,
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
    #[inline(always)]
    pub fn tensor_loc(&self, i: usize) -> Loc<'_> {
        match self {
            View::C(c) => compact_loc(c, c.items[i].node),
            View::P(p) => locator_loc(&p.tensors[i].0),
        }
    }
    /// The locator of each tensor without the dispatch of [`View::tensor_loc`], where the view is
    /// compact (for the loops of `==` and `hash`, which compare walked metadata most of the time).
    #[inline(always)]
    pub fn compact_tensor_locs(&self) -> Option<impl Fn(usize) -> Loc<'a> + Copy + 'a> {
        match *self {
            View::C(c) => Some(move |i: usize| compact_loc(c, c.items[i].node)),
            View::P(_) => None,
        }
    }
    #[inline(always)]
    pub fn other_loc(&self, i: usize) -> Loc<'_> {
        match self {
            View::C(c) => compact_loc(c, c.others[i].0),
            View::P(p) => locator_loc(&p.others[i].0),
        }
    }
    /// How many entries `part` holds.
    pub fn len(&self, part: Part) -> usize {
        match part {
            Part::Tensors => self.n_tensors(),
            Part::Others => self.n_others(),
        }
    }
    /// The locator of entry `i` of `part`.
    pub fn loc(&self, part: Part, i: usize) -> Loc<'_> {
        match part {
            Part::Tensors => self.tensor_loc(i),
            Part::Others => self.other_loc(i),
        }
    }
    pub fn other_value<'s>(&'s self, py: Python<'py>, i: usize) -> Bound<'py, PyAny> {
        match self {
            View::C(c) => c.others[i].1.bind(py).clone(),
            View::P(p) => p.others[i].1.clone(),
        }
    }
    #[inline(always)]
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
    /// The dtype id of tensor `i` (`tensor_spec::dtype`).
    pub fn dtype(&self, i: usize) -> u16 {
        match self {
            View::C(c) => c.items[i].dtype,
            View::P(p) => p.tensors[i].2.dtype,
        }
    }
    /// Tensor `i` if it has seen one shape only and is held compact (so its spec need not be built).
    pub fn fresh(&self, i: usize) -> Option<Fresh<'_>> {
        match self {
            View::C(c) if c.learned(i).is_none() => Some(Fresh {
                dims: c.dims_of(i),
                dtype: c.items[i].dtype,
                batch_size: c.batch_size,
            }),
            _ => None,
        }
    }
    /// Whether tensor `i` of `a` and `j` of `b` are both fresh with the same sizes (so nothing
    /// is learned from one about the other).
    pub fn same_fresh_sizes(a: &Self, i: usize, b: &Self, j: usize) -> bool {
        matches!((a.fresh(i), b.fresh(j)), (Some(x), Some(y)) if x.dims == y.dims)
    }
    /// The batch size the walk used, where the view knows it (compact metadata).
    pub fn known_batch_size(&self) -> Option<f64> {
        match self {
            View::C(c) => Some(c.batch_size),
            View::P(_) => None,
        }
    }
    /// The Python spec that holds tensor `i`, if it is held as one.
    pub fn spec_object(&self, i: usize) -> Option<Bound<'py, TensorSpec>> {
        match self {
            View::C(_) => None,
            View::P(p) => p.tensors.get(i).map(|t| t.1.clone()),
        }
    }
    /// Tensor `i`'s spec as Python objects.
    pub fn spec_cells(&self, py: Python<'py>, i: usize) -> PyResult<SpecCells<'py>> {
        if let View::P(p) = self {
            let s = p.tensors[i].1.try_borrow()?;
            return Ok(SpecCells {
                shape: s.shape.bind(py).clone(),
                min_shape: s.min_shape.bind(py).clone(),
                max_shape: s.max_shape.bind(py).clone(),
                dtype: s.dtype.bind(py).clone(),
                json_ready: false,
            });
        }
        let s = self.spec(i);
        Ok(SpecCells {
            shape: dim_list(py, &s.shape)?.into_any(),
            min_shape: PyList::new(py, &s.min)?.into_any(),
            max_shape: PyList::new(py, &s.max)?.into_any(),
            dtype: dtype_obj(py, s.dtype),
            json_ready: true,
        })
    }
    /// The hash of the tensors' paths and ranks, if a compact metadata remembers it.
    #[inline(always)]
    pub fn remembered_rank_hash(&self) -> Option<u64> {
        match self {
            View::C(c) => c.tensor_hash.get().copied(),
            View::P(_) => None,
        }
    }
    /// Remember the hash of the tensors' paths and ranks (compact metadata only: Python specs
    /// may change).
    pub fn remember_rank_hash(&self, h: u64) {
        if let View::C(c) = self {
            let _ = c.tensor_hash.set(h); // another thread may have set it meanwhile: the same value
        }
    }
    /// Whether each path occurs once (true for anything built by a walk).
    pub fn unique(&self) -> bool {
        matches!(self, View::C(c) if !c.arena.may_repeat)
    }
    /// Whether `a` and `b` hold tensors at paths that agree node for node (the same node is the
    /// same path): compact metadata of the same walked structure.
    #[inline(always)]
    pub fn twins(py: Python<'_>, a: &Self, b: &Self) -> PyResult<bool> {
        match (a, b) {
            (View::C(x), View::C(y)) if !x.items.is_empty() => {
                crate::paths::Arena::twins(py, &x.arena, &y.arena)
            }
            _ => Ok(false),
        }
    }
}

/// Where node `node` of a compact metadata's paths is.
#[inline(always)]
fn compact_loc(c: &Compact, node: u32) -> Loc<'_> {
    Loc {
        arena: &c.arena,
        node,
        is_output: c.is_output,
    }
}

/// Where a `Locator` points (out of line: the compact branch of the `View` methods stays small
/// enough to inline into the operations' loops).
#[inline(never)]
fn locator_loc<'a>(l: &'a Bound<'_, Locator>) -> Loc<'a> {
    let l = l.get();
    Loc {
        arena: &l.arena,
        node: l.node,
        is_output: l.is_output,
    }
}

pub fn pair<'py>(
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

pub fn py_view<'py>(
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
        let l = l.cast_into::<Locator>().map_err(|e| {
            PyTypeError::new_err(format!(
                "tensor_data locators must be aitune_fast.Locator: {e}"
            ))
        })?;
        let s = s.cast_into::<TensorSpec>().map_err(|e| {
            PyTypeError::new_err(format!(
                "tensor_data specs must be aitune_fast.TensorSpec: {e}"
            ))
        })?;
        let spec = s.try_borrow()?.to_spec(py)?;
        v.tensors.push((l, s, spec));
    }
    for item in others.try_iter()? {
        let (l, x) = pair(&item?, "other_data")?;
        let l = l.cast_into::<Locator>().map_err(|e| {
            PyTypeError::new_err(format!(
                "other_data locators must be aitune_fast.Locator: {e}"
            ))
        })?;
        v.others.push((l, x));
    }
    Ok(v)
}
