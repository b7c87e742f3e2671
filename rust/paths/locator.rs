//! [`Locator`], the Python face of one arena node, and reading and writing the value a path
//! points to. Its staticmethods that walk or change the type registry are a second `#[pymethods]`
//! block in `walk/locator_methods.rs` (this folder never imports the walk).

use std::sync::Arc;

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::interp::interp;
use pyo3::types::{PyString, PyTuple};

use super::accessor::{Accessor, Kind};
use super::arena::{hash_to_isize, path_eq, Arena, ROOT};

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
    pub fn get_value<'py>(
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
}

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
