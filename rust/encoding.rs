//! Versioned, pickle-free encodings of a metadata: `to_json`/`from_json` and `to_dict`/`from_dict`.
//! (Being written: see issue 4.)

use pyo3::exceptions::PyNotImplementedError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::metadata::SampleMetadata;

pub fn to_json(_py: Python<'_>, _md: &SampleMetadata) -> PyResult<String> {
    Err(PyNotImplementedError::new_err("to_json is not written yet"))
}

pub fn from_json(_py: Python<'_>, _text: &str) -> PyResult<SampleMetadata> {
    Err(PyNotImplementedError::new_err(
        "from_json is not written yet",
    ))
}

pub fn to_dict<'py>(_py: Python<'py>, _md: &SampleMetadata) -> PyResult<Bound<'py, PyDict>> {
    Err(PyNotImplementedError::new_err("to_dict is not written yet"))
}

pub fn from_dict(_py: Python<'_>, _data: &Bound<'_, PyAny>) -> PyResult<SampleMetadata> {
    Err(PyNotImplementedError::new_err(
        "from_dict is not written yet",
    ))
}
