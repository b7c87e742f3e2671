//! The `SampleMetadata` class: its data (compact or Python pairs), the view every operation
//! reads, and the Python pairs it hands out.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::compact::Compact;
use super::handed::{Handed, Level};
use super::view::{py_view, View};
use crate::paths::Locator;

pub enum Data {
    Compact(Compact),
    /// `(Locator, TensorSpec)` and `(Locator, value)` pairs, as given or as handed out
    Py {
        tensors: Py<PyAny>,
        others: Py<PyAny>,
    },
}

/// Metadata of the inputs (args and kwargs) or outputs of a call: every tensor's spec at its
/// locator, and, in strict mode, every other leaf value.
///
/// Equal metadata selects the same compiled backend: tensors compare by rank, other values by
/// equality, dict key order does not matter. When an LLM phase (`"prefill"`/`"decode"`, from the
/// `cache_position` argument) is known, it alone decides equality and hash.
#[pyclass(
    module = "aitune_fast.sample_metadata",
    name = "SampleMetadata",
    subclass
)]
pub struct SampleMetadata {
    pub data: Data,
    pub strict: bool,
    pub llm_phase: Option<Py<PyAny>>,
    /// compact metadata: the `(Locator, value)` pairs `other_data` handed out
    pub(super) other_cache: OnceLock<Py<PyTuple>>,
    /// compact metadata: the `(Locator, TensorSpec)` pairs `tensor_data` handed out
    pub(super) handed: OnceLock<Handed>,
    /// made with no data (as unpickling a stock AITune metadata makes one), not yet set by
    /// `__setstate__`: reads as an empty metadata
    pub blank: bool,
}

impl SampleMetadata {
    pub fn from_compact(c: Compact, strict: bool, llm_phase: Option<Py<PyAny>>) -> SampleMetadata {
        Self::from_data(Data::Compact(c), strict, llm_phase)
    }

    pub fn from_data(data: Data, strict: bool, llm_phase: Option<Py<PyAny>>) -> SampleMetadata {
        SampleMetadata {
            data,
            strict,
            llm_phase,
            other_cache: OnceLock::new(),
            handed: OnceLock::new(),
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
        Self::from_data(Data::Py { tensors, others }, strict, llm_phase)
    }

    /// The form every operation reads: the compact one while it says what the Python view (if
    /// one was handed out) says, the Python objects otherwise.
    pub fn view<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<View<'a, 'py>> {
        self.view_at(py, Level::Full)
    }

    /// [`SampleMetadata::view`] for an operation that reads only `level` of each spec.
    pub(super) fn view_at<'a, 'py>(
        &'a self,
        py: Python<'py>,
        level: Level,
    ) -> PyResult<View<'a, 'py>> {
        match &self.data {
            Data::Compact(c) => match self.handed.get() {
                Some(h) if !h.intact(py, c, level) => self.handed_view(py, h),
                _ => Ok(View::C(c)),
            },
            Data::Py { tensors, others } => {
                Ok(View::P(py_view(py, tensors.bind(py), others.bind(py))?))
            }
        }
    }

    /// The Python objects of a compact metadata whose tensors were handed out.
    pub fn handed_view<'a, 'py>(&'a self, py: Python<'py>, h: &Handed) -> PyResult<View<'a, 'py>> {
        let others = self.others_tuple(py)?;
        Ok(View::P(py_view(py, h.pairs.bind(py).as_any(), &others)?))
    }

    /// The Python pairs to read instead of the compact form, if any: those of a user-built
    /// metadata, or handed-out ones that were changed.
    pub fn py_parts(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Py<PyAny>)>> {
        match &self.data {
            Data::Py { tensors, others } => Ok(Some((tensors.clone_ref(py), others.clone_ref(py)))),
            Data::Compact(c) => match self.handed.get() {
                Some(h) if !h.intact(py, c, Level::Full) => Ok(Some((
                    h.pairs.clone_ref(py).into_any(),
                    self.others_tuple(py)?.unbind(),
                ))),
                _ => Ok(None),
            },
        }
    }

    pub fn others_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.data {
            Data::Py { others, .. } => Ok(others.bind(py).clone()),
            Data::Compact(c) => {
                if let Some(t) = self.other_cache.get() {
                    return Ok(t.bind(py).clone().into_any());
                }
                let pairs = c
                    .others
                    .iter()
                    .map(|(node, v)| {
                        let loc = Bound::new(
                            py,
                            Locator::new_in(c.arena.clone_ref(py), *node, c.is_output),
                        )?;
                        PyTuple::new(py, [loc.into_any(), v.bind(py).clone()])
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                let t = PyTuple::new(py, pairs)?;
                // another thread may have made them meanwhile (Python code ran): keep the first
                let _ = self.other_cache.set(t.clone().unbind());
                match self.other_cache.get() {
                    Some(first) => Ok(first.bind(py).clone().into_any()),
                    None => Ok(t.into_any()),
                }
            }
        }
    }

    /// The `(Locator, TensorSpec)` pairs: made once for compact metadata, then the same objects.
    pub fn tensors_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = match &self.data {
            Data::Py { tensors, .. } => return Ok(tensors.bind(py).clone()),
            Data::Compact(c) => c,
        };
        if let Some(h) = self.handed.get() {
            return Ok(h.pairs.bind(py).clone().into_any());
        }
        self.others_tuple(py)?; // handed-out views read `other_data` as handed out too
        let (pairs, specs) = c.hand_out(py)?;
        // another thread may have made them meanwhile (Python code ran): keep the first
        let _ = self
            .handed
            .set(Handed::new(py, pairs.clone().unbind(), specs)?);
        match self.handed.get() {
            Some(first) => Ok(first.pairs.bind(py).clone().into_any()),
            None => Ok(pairs.into_any()),
        }
    }

    /// Whether `tensor_data` was handed out (its specs are then the truth).
    pub(super) fn is_handed_out(&self) -> bool {
        self.handed.get().is_some()
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
        match &self.data {
            Data::Compact(c) => {
                for (_, v) in &c.others {
                    visit.call(v)?;
                }
                c.arena.visit(visit)?;
            }
            Data::Py { tensors, others } => {
                visit.call(tensors)?;
                visit.call(others)?;
            }
        }
        if let Some(p) = &self.llm_phase {
            visit.call(p)?;
        }
        if let Some(t) = self.other_cache.get() {
            visit.call(t)?;
        }
        if let Some(h) = self.handed.get() {
            h.traverse(visit)?;
        }
        Ok(())
    }

    /// For the cycle collector: drop every reference.
    pub fn clear(&mut self) {
        let empty = Python::with_gil(crate::paths::SharedArena::empty); // the collector holds the GIL
        self.data = Data::Compact(Compact::new_in(empty, false));
        self.llm_phase = None;
        self.other_cache = OnceLock::new();
        self.handed = OnceLock::new();
    }

    /// The `(Locator, TensorSpec)` pairs pickling writes: the Python pairs if there are any,
    /// else fresh ones (a compact metadata is left as it is).
    pub fn pickled_tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match (&self.data, self.handed.get()) {
            (Data::Py { tensors, .. }, _) => tensors.bind(py).clone(),
            (Data::Compact(_), Some(h)) => h.pairs.bind(py).clone().into_any(),
            (Data::Compact(c), None) => c.tensor_pairs(py)?.into_any(),
        })
    }
}
