//! `ExactSampleMetadata`: equal only with the same exact shapes.

use pyo3::prelude::*;

use super::build::{build, BatchSize, Built};
use super::sample::SampleMetadata;

/// Exact-shape metadata for bucketing recorded samples: equal only with the same locators,
/// the same exact shapes (dtype ignored) and the same other values; never equal to a plain
/// `SampleMetadata`.
#[pyclass(module = "aitune_fast.exact_sample_metadata", name = "ExactSampleMetadata", extends = SampleMetadata, subclass)]
pub struct ExactSampleMetadata {}

#[pymethods]
impl ExactSampleMetadata {
    #[new]
    #[pyo3(signature = (tensor_data=None, other_data=None, strict=None, llm_phase=None))]
    fn py_new(
        py: Python<'_>,
        tensor_data: Option<&Bound<'_, PyAny>>,
        other_data: Option<&Bound<'_, PyAny>>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        Ok(PyClassInitializer::from(SampleMetadata::from_py_or_blank(
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
        let Built { storage, .. } =
            build(py, inputs, true, &BatchSize::Float(f64::NAN), false, false)?;
        Py::new(
            py,
            PyClassInitializer::from(SampleMetadata::from_storage(storage, true, None))
                .add_subclass(ExactSampleMetadata {}),
        )
    }

    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        if !other.is_instance(&slf.get_type())? {
            return Ok(false);
        }
        let other = other.cast::<SampleMetadata>()?;
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
