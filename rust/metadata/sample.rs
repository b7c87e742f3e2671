//! The `SampleMetadata` class: its storage (see `storage`), strict flag and LLM phase, its
//! construction, and its short description.

use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::{PyTraverseError, PyVisit};

use super::storage::{py_view, Compact, Level, Storage, View};

/// Metadata of the inputs (args and kwargs) or outputs of a call: every tensor's spec at its
/// locator, and, in strict mode, every other leaf value.
///
/// Equal metadata selects the same compiled backend: tensors compare by rank, other values by
/// equality, dict key order does not matter. When an LLM phase (`"prefill"`/`"decode"`, from the
/// `cache_position` argument) is known, it alone decides equality and hash.
///
/// Build with `from_inputs`/`from_outputs`.
#[pyclass(
    module = "aitune_fast.sample_metadata",
    name = "SampleMetadata",
    subclass,
    weakref
)]
pub struct SampleMetadata {
    pub storage: Storage,
    pub strict: bool,
    pub llm_phase: Option<Py<PyAny>>,
    /// made with no data (as unpickling a stock AITune metadata makes one), not yet set by
    /// `__setstate__`: reads as an empty metadata
    pub blank: bool,
}

impl SampleMetadata {
    pub fn from_compact(c: Compact, strict: bool, llm_phase: Option<Py<PyAny>>) -> SampleMetadata {
        Self::from_storage(Storage::compact(c), strict, llm_phase)
    }

    pub fn from_storage(
        storage: Storage,
        strict: bool,
        llm_phase: Option<Py<PyAny>>,
    ) -> SampleMetadata {
        SampleMetadata {
            storage,
            strict,
            llm_phase,
            blank: false,
        }
    }

    /// An empty metadata that `__setstate__` may set, once.
    pub fn blank(py: Python<'_>) -> PyResult<SampleMetadata> {
        let arena = crate::paths::Arena::new();
        let mut m = Self::from_compact(Compact::new(py, arena, false)?, false, None);
        m.blank = true;
        Ok(m)
    }

    /// A metadata holding Python `(Locator, TensorSpec)` and `(Locator, value)` pairs (as
    /// `SampleMetadata(tensor_data, other_data, ...)` makes one), for `codec::decode`.
    pub fn from_py_parts(
        tensors: Py<PyAny>,
        others: Py<PyAny>,
        strict: bool,
        llm_phase: Option<Py<PyAny>>,
    ) -> SampleMetadata {
        Self::from_storage(Storage::python(tensors, others), strict, llm_phase)
    }

    /// The form every operation reads (see `storage`).
    #[inline(always)]
    pub fn view<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<View<'a, 'py>> {
        self.storage.view(py, Level::Full)
    }

    pub fn describe_short<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let v = self.view(py)?;
        let mut out = crate::paths::Text::new();
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
                crate::paths::format_obj(&v.other_value(py, i), &mut out)?;
            }
        }
        out.to_py(py)
    }

    /// The `describe()` table at level 0 (SHORT), 1 (MEDIUM) or 2 (FULL).
    pub fn describe_at<'py>(slf: &Bound<'py, Self>, level: usize) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        if level == 0 {
            return Ok(slf.try_borrow()?.describe_short(py)?.into_any());
        }
        let it = crate::interp::interp(py)?;
        let level_obj = it.info_levels[level].bind(py).clone();
        it.describe.bind(py).call1((slf, level_obj))
    }

    /// `SampleMetadata(tensor_data, other_data, strict, llm_phase)`, the pairs validated now
    /// (with a clear error) and kept as given.
    pub fn from_py(
        py: Python<'_>,
        tensor_data: &Bound<'_, PyAny>,
        other_data: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        py_view(py, tensor_data, other_data)?;
        Ok(Self::from_py_parts(
            tensor_data.clone().unbind(),
            other_data.clone().unbind(),
            super::build::strict_flag(strict)?,
            llm_phase.filter(|p| !p.is_none(py)),
        ))
    }

    /// [`SampleMetadata::from_py`], or, given no data at all, [`SampleMetadata::blank`].
    pub fn from_py_or_blank(
        py: Python<'_>,
        tensor_data: Option<&Bound<'_, PyAny>>,
        other_data: Option<&Bound<'_, PyAny>>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        match (tensor_data, other_data) {
            (Some(t), Some(o)) => Self::from_py(py, t, o, strict, llm_phase),
            (None, None) if strict.is_none() && llm_phase.is_none() => Self::blank(py),
            _ => Err(pyo3::exceptions::PyTypeError::new_err(
                "SampleMetadata takes tensor_data and other_data (or nothing: a blank metadata)",
            )),
        }
    }

    /// For the cycle collector: the references this object holds (its path arena among them).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.storage.traverse(visit)?;
        if let Some(p) = &self.llm_phase {
            visit.call(p)?;
        }
        Ok(())
    }

    /// For the cycle collector: drop every reference.
    pub fn clear(&mut self) {
        self.storage = Python::attach(Storage::empty); // the collector holds the GIL
        self.llm_phase = None;
    }
}
