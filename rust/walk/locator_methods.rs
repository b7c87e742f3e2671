//! `Locator`'s staticmethods that walk a structure or change the type registry: a second
//! `#[pymethods]` block (pyo3's `multiple-pymethods`), so `paths/` never imports the walk.

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::paths::Locator;

#[pymethods]
impl Locator {
    /// Walk `obj` and return an iterator of `(Locator, leaf)` pairs, in the reference's order.
    #[staticmethod]
    #[pyo3(signature = (obj, only_tensors=false, is_output=false))]
    fn find_leaves<'py>(
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        only_tensors: bool,
        is_output: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let list = super::traversal::find_leaves(py, obj, only_tensors, is_output)?;
        Ok(list.as_any().try_iter()?.into_any())
    }

    /// Walk instances of `cls` like dataclasses, over their public data attributes.
    /// With `only_tensors=True` only tensors are collected inside them.
    #[staticmethod]
    #[pyo3(signature = (cls, only_tensors=false))]
    fn register_user_type(cls: &Bound<'_, PyType>, only_tensors: bool) {
        super::registry::register_user_type(cls, only_tensors)
    }

    #[staticmethod]
    fn unregister_user_type(cls: &Bound<'_, PyType>) {
        super::registry::unregister_user_type(cls)
    }

    /// Skip instances of `cls` entirely: neither walked nor reported as leaves.
    #[staticmethod]
    fn ignore_type(cls: &Bound<'_, PyType>) {
        super::registry::ignore_type(cls)
    }

    #[staticmethod]
    fn unignore_type(cls: &Bound<'_, PyType>) {
        super::registry::unignore_type(cls)
    }
}
