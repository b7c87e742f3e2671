//! `Locator`'s Python methods: its own (`paths/`) and the staticmethods that walk a structure or
//! change the type registry (`walk/`).

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::interp::{interp, stock_state};
use crate::paths::{
    hash_to_isize, path_eq, set_value, step_into, Accessor, Arena, Kind, Locator, SharedArena, ROOT,
};

#[pymethods]
impl Locator {
    /// Its path's arena (which visits the keys the path holds). Immutable (`frozen`), so no
    /// `__clear__`: a cycle through a Locator is broken by clearing the other objects in it.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.traverse(&visit)
    }

    /// `Locator(access_path, is_output=False)`; with no path, a blank locator (see `__setstate__`).
    #[new]
    #[pyo3(signature = (access_path=None, is_output=false))]
    fn py_new(
        py: Python<'_>,
        access_path: Option<&Bound<'_, PyAny>>,
        is_output: bool,
    ) -> PyResult<Self> {
        let Some(access_path) = access_path else {
            if is_output {
                return Err(PyTypeError::new_err(
                    "Locator takes access_path (or nothing: a blank locator)",
                ));
            }
            return Ok(Locator::blank());
        };
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
        Ok(Locator::new_in(
            SharedArena::new(py, arena)?,
            cur,
            is_output,
        ))
    }

    /// Set a blank locator (as unpickling a stock AITune `Locator` makes one) from the state a
    /// stock `Locator` pickles: `{"_access_path": steps, "_is_output": bool}`. Only once.
    fn __setstate__(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let [access_path, is_output] =
            stock_state(state, "Locator", ["_access_path", "_is_output"])?;
        let is_output = is_output.extract::<bool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "Locator state: _is_output is a bool, got {is_output}"
            ))
        })?;
        let filled = Self::py_new(py, Some(&access_path), is_output)?;
        if !slf.get().fill(filled) {
            return Err(PyTypeError::new_err(
                "Locator.__setstate__: the locator is already set (only a blank one is set, once)",
            ));
        }
        Ok(())
    }

    /// Number of steps in the path.
    #[getter]
    fn depth(&self) -> usize {
        self.arena.node(self.node).depth as usize
    }

    /// The last step's accessor.
    ///
    /// Raises IndexError for the empty path.
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
        match other.cast::<Locator>() {
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
    ///
    /// A step that is missing raises KeyError, IndexError or AttributeError saying which step failed.
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
    ///
    /// Walks dicts, UserDicts, lists, tuples, dataclasses and registered user types; raises ValueError on a
    /// cyclic argument.
    #[staticmethod]
    #[pyo3(signature = (obj, only_tensors=false, is_output=false))]
    fn find_leaves<'py>(
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        only_tensors: bool,
        is_output: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let list = crate::walk::traversal::find_leaves(py, obj, only_tensors, is_output)?;
        Ok(list.as_any().try_iter()?.into_any())
    }

    /// Walk instances of `cls` like dataclasses, over their public data attributes.
    /// With `only_tensors=True` only tensors are collected inside them.
    #[staticmethod]
    #[pyo3(signature = (cls, only_tensors=false))]
    fn register_user_type(cls: &Bound<'_, PyType>, only_tensors: bool) {
        crate::walk::registry::register_user_type(cls, only_tensors)
    }

    /// Undo `register_user_type(cls)`: instances of `cls` are leaves again.
    #[staticmethod]
    fn unregister_user_type(cls: &Bound<'_, PyType>) {
        crate::walk::registry::unregister_user_type(cls)
    }

    /// Skip instances of `cls` entirely: neither walked nor reported as leaves.
    #[staticmethod]
    fn ignore_type(cls: &Bound<'_, PyType>) {
        crate::walk::registry::ignore_type(cls)
    }

    /// Undo `ignore_type(cls)`: instances of `cls` are walked or reported again.
    #[staticmethod]
    fn unignore_type(cls: &Bound<'_, PyType>) {
        crate::walk::registry::unignore_type(cls)
    }
}
