//! [`View`]: how every operation reads a metadata, compact or as Python `(Locator, TensorSpec)`
//! and `(Locator, value)` pairs (user-built, or handed out and then changed).

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use super::compact::Compact;
use crate::paths::{Arena, Locator};
use crate::tensor_spec::{Spec, TensorSpec};

/// A user-built or materialized metadata, read from its Python objects.
pub struct PyView<'py> {
    pub tensors: Vec<(Bound<'py, Locator>, Bound<'py, TensorSpec>, Spec)>,
    pub(super) others: Vec<(Bound<'py, Locator>, Bound<'py, PyAny>)>,
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

pub(super) fn py_view<'py>(
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
