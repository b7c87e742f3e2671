//! `SampleMetadata`'s codec methods, in a second `#[pymethods]` block (pyo3's `multiple-pymethods`)
//! so that `metadata` does not import the codecs.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::metadata::SampleMetadata;

#[pymethods]
impl SampleMetadata {
    /// The JSON text of this metadata: `to_json_dict()`'s content plus what an exact round trip
    /// needs (see `from_json`).
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        super::encode::to_json(py, self)
    }

    /// Rebuild metadata from `to_json()` text.
    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str) -> PyResult<SampleMetadata> {
        super::decode::from_json(py, text)
    }

    /// A dict with the reference's keys (`tensor_data`, `other_data`, `strict`, `llm_phase`)
    /// whose data uses aitune_fast's versioned encoding: no pickle.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::encode::to_dict(py, self)
    }

    /// Rebuild metadata from `to_dict()` output, or from a dict written by the reference (its
    /// pickled data is read by a restricted reader that runs nothing).
    #[staticmethod]
    fn from_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<SampleMetadata> {
        super::decode::from_dict(py, data)
    }

    /// A JSON-ready dict: paths, shapes and dtypes; other values as the reference renders them.
    fn to_json_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::json_dict::to_json_dict(py, self)
    }
}
