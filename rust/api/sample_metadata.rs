//! `SampleMetadata`'s Python methods: construction, `from_inputs`/`from_outputs`, `==`, `hash`,
//! `describe`, the data accessors, batching and `update_shapes_seen` (`metadata/`), and the codecs
//! (`codec/`).

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use crate::codec::{decode, encode, json_dict};
use crate::interp::{info_level_index, interp, stock_state, transformers_integration};
use crate::metadata::build::{build, phase_of, resolve_batch_size, strict_flag, Built};
use crate::metadata::{pair, ExactSampleMetadata, SampleMetadata};
use crate::paths::{step_into, Locator};
use crate::tensor_spec::{Multiplier, TensorSpec};

fn already_set() -> PyErr {
    PyTypeError::new_err(
        "SampleMetadata.__setstate__: the metadata is already set (only a blank one is set, once)",
    )
}

/// `(axis, multiplier)` for each batch axis of a spec.
type BatchAxes = Vec<(usize, Multiplier)>;

/// `SampleMetadata.from_inputs(inputs, strict, batch_size)` (also the call path's, without the
/// Python call).
pub(crate) fn describe_inputs(
    py: Python<'_>,
    inputs: &Bound<'_, PyAny>,
    strict: Option<&Bound<'_, PyAny>>,
    batch_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<SampleMetadata> {
    let strict = strict_flag(strict)?;
    let bs = resolve_batch_size(py, batch_size)?;
    let check_cp = transformers_integration(py)?;
    let Built {
        storage,
        cache_position: cp,
    } = build(py, inputs, strict, &bs, false, check_cp)?;
    let phase = match cp {
        Some(cp) if !cp.is_none(py) => Some(phase_of(py, cp.bind(py))?),
        _ => None,
    };
    Ok(SampleMetadata::from_storage(storage, strict, phase))
}

#[pymethods]
impl SampleMetadata {
    /// `SampleMetadata(tensor_data, other_data, strict=False, llm_phase=None)`; with no data, a
    /// blank metadata (see `__setstate__`).
    #[new]
    #[pyo3(signature = (tensor_data=None, other_data=None, strict=None, llm_phase=None))]
    fn py_new(
        py: Python<'_>,
        tensor_data: Option<&Bound<'_, PyAny>>,
        other_data: Option<&Bound<'_, PyAny>>,
        strict: Option<&Bound<'_, PyAny>>,
        llm_phase: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Self::from_py_or_blank(py, tensor_data, other_data, strict, llm_phase)
    }

    /// Set a blank metadata (as unpickling a stock AITune `SampleMetadata` or
    /// `ExactSampleMetadata` makes one) from the state the stock class pickles: its `__dict__`,
    /// `{"_tensor_data", "_other_data", "_strict", "_llm_phase"}`, validated as the constructor
    /// validates its arguments. Only once.
    fn __setstate__(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        if !slf.try_borrow()?.blank {
            return Err(already_set());
        }
        let [tensors, others, strict, phase] = stock_state(
            state,
            "SampleMetadata",
            ["_tensor_data", "_other_data", "_strict", "_llm_phase"],
        )?;
        if !strict.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "SampleMetadata state: _strict is a bool, got {strict}"
            )));
        }
        if !phase.is_none() && !phase.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(format!(
                "SampleMetadata state: _llm_phase is a str or None, got {phase}"
            )));
        }
        let filled = Self::from_py(py, &tensors, &others, Some(&strict), Some(phase.unbind()))?;
        let mut me = slf.try_borrow_mut()?;
        if !me.blank {
            return Err(already_set()); // set meanwhile (validation ran Python code)
        }
        *me = filled;
        Ok(())
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.traverse(&visit)
    }

    fn __clear__(&mut self) {
        self.clear();
    }

    /// Describe `inputs` (forward arguments keyed by parameter name). In strict mode non-tensor
    /// leaves are recorded too. `batch_size` defaults to the one in `global_context`.
    #[staticmethod]
    #[pyo3(signature = (inputs, strict=None, batch_size=None))]
    fn from_inputs(
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        batch_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SampleMetadata> {
        describe_inputs(py, inputs, strict, batch_size)
    }

    /// Describe the outputs of a call; locators render as `output...`.
    #[staticmethod]
    #[pyo3(signature = (output, strict=None, batch_size=None))]
    fn from_outputs(
        py: Python<'_>,
        output: &Bound<'_, PyAny>,
        strict: Option<&Bound<'_, PyAny>>,
        batch_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SampleMetadata> {
        let strict = strict_flag(strict)?;
        let bs = resolve_batch_size(py, batch_size)?;
        let Built { storage, .. } = build(py, output, strict, &bs, true, false)?;
        Ok(SampleMetadata::from_storage(storage, strict, None))
    }

    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        // SAFETY: both pointers are live objects we hold references to; reading their type is safe
        let other = if unsafe { ffi::Py_TYPE(other.as_ptr()) == ffi::Py_TYPE(slf.as_ptr()) } {
            // SAFETY: `other`'s type is exactly `slf`'s, a `SampleMetadata` class (ours, or a Python
            // subclass, which Python lays out with our struct first), so `other` has that layout
            unsafe { other.cast_unchecked::<SampleMetadata>() }
        } else if other.is_instance(&slf.get_type())? {
            other.cast::<SampleMetadata>()?
        } else {
            return Ok(false);
        };
        if slf.is(other) {
            return Ok(true);
        }
        let them = other.try_borrow()?;
        slf.try_borrow()?.equal(py, &them, false)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.hash(py, false)
    }

    /// `copy.copy`: a new metadata sharing this one's `(Locator, TensorSpec)` pairs, as a shallow
    /// copy of the reference's shares its specs.
    fn __copy__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (tensors, others, strict, phase) = {
            let me = slf.try_borrow()?;
            let tensors = me.storage.tensors_tuple(py)?;
            let others = me.storage.others_tuple(py)?;
            let phase = match &me.llm_phase {
                Some(p) => p.bind(py).clone(),
                None => py.None().into_bound(py),
            };
            (tensors, others, me.strict, phase)
        };
        slf.get_type().call1((tensors, others, strict, phase))
    }

    /// Pickling and `deepcopy`: rebuilt from `(Locator, TensorSpec)` pairs (fresh ones
    /// for compact metadata, which is left as it is).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.try_borrow()?;
        let others = me.storage.others_tuple(py)?;
        let tensors = me.storage.pickled_tensors(py)?;
        let phase = match &me.llm_phase {
            Some(p) => p.bind(py).clone(),
            None => py.None().into_bound(py),
        };
        let strict = pyo3::types::PyBool::new(py, me.strict)
            .to_owned()
            .into_any();
        Ok((
            slf.get_type().into_any(),
            PyTuple::new(py, [tensors, others, strict, phase])?,
        ))
    }

    fn __str__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyString>> {
        slf.try_borrow()?.describe_short(slf.py())
    }

    fn __repr__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyString>> {
        Ok(Self::describe_at(slf, 2)?.cast_into::<PyString>()?)
    }

    /// A table of the tensors (and other values) at SHORT, MEDIUM or FULL detail.
    ///
    /// SHORT lists the tensor paths, MEDIUM and FULL (the default; also for None) render tables. Any enum member
    /// named SHORT, MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError (the
    /// reference renders nothing).
    #[pyo3(signature = (info_level=None))]
    fn describe<'py>(
        slf: &Bound<'py, Self>,
        info_level: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let level = match info_level {
            None => 2,
            Some(l) => info_level_index(slf.py(), l)?,
        };
        Self::describe_at(slf, level)
    }

    /// Rows for the MEDIUM/FULL tables: `(tensor_rows, other_rows)` with the reference's cell objects.
    fn _describe_rows<'py>(
        slf: &Bound<'py, Self>,
        full: bool,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = slf.py();
        let me = slf.try_borrow()?;
        let v = me.view(py)?;
        let tensors = PyList::empty(py);
        for i in 0..v.n_tensors() {
            let l = v.tensor_loc(i);
            let access = l.arena.display_path(py, l.node, l.is_output)?;
            let semantic = l.arena.semantic_path(py, l.node)?.str()?;
            let s = v.spec_cells(py, i)?;
            let mut row = vec![access.into_any(), semantic.into_any(), s.shape];
            if full {
                row.extend([s.min_shape, s.max_shape, s.dtype]);
            }
            tensors.append(PyTuple::new(py, row)?)?;
        }
        let others = PyList::empty(py);
        for i in 0..v.n_others() {
            let l = v.other_loc(i);
            let access = l.arena.display_path(py, l.node, l.is_output)?;
            let semantic = l.arena.semantic_path(py, l.node)?.str()?;
            others.append(PyTuple::new(
                py,
                [
                    access.into_any(),
                    semantic.into_any(),
                    v.other_value(py, i).str()?.into_any(),
                ],
            )?)?;
        }
        Ok((tensors, others))
    }

    /// Whether any tensor has a dynamic or batch axis.
    fn detected_dynamic_axis(&self, py: Python<'_>) -> PyResult<bool> {
        let v = self.view(py)?;
        for i in 0..v.n_tensors() {
            let s = v.spec(i);
            if s.has_dynamic_axis() || s.has_batch_axis() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether every tensor has a batch axis (true when there are no tensors).
    fn has_batch_axis(&self, py: Python<'_>) -> PyResult<bool> {
        let v = self.view(py)?;
        for i in 0..v.n_tensors() {
            if !v.spec(i).has_batch_axis() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `"prefill"`, `"decode"`, or `""` when no LLM phase was detected.
    #[getter]
    fn llm_phase(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.llm_phase {
            Some(p) => Ok(p.clone_ref(py)),
            None => Ok(interp(py)?.empty_str.clone_ref(py).into_any()),
        }
    }

    /// Whether non-tensor leaves were recorded.
    #[getter]
    fn strict(&self) -> bool {
        self.strict
    }

    /// `((Locator, value), ...)` for the non-tensor leaves (strict mode).
    #[getter]
    fn other_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.storage.others_tuple(py)
    }

    /// `((Locator, TensorSpec), ...)`. The specs are live: changing them changes this metadata.
    #[getter]
    fn tensor_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.storage.tensors_tuple(py)
    }

    /// The tensor specs, in order.
    #[getter]
    fn tensor_specs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let td = self.storage.tensors_tuple(py)?;
        let out = PyList::empty(py);
        for item in td.try_iter()? {
            out.append(pair(&item?, "tensor_data")?.1)?;
        }
        Ok(out)
    }

    /// For `make_batch`: `(indices, values, axes)`, three lists with an entry for each `(locator, spec)`
    /// of `pairs` (this metadata's `tensor_data`, as a list) whose spec has batch axes: its index,
    /// the value read from `inputs` at the locator, and `((axis, multiplier), ...)` (equal ones are
    /// one object: few objects for the collector to track). In order, each spec asked and each
    /// locator read once, as the Python loop did (one call instead of two method calls and a dict
    /// per tensor). Exact `Locator`s and `TensorSpec`s are read here; subclasses through their methods.
    fn _batch_reads<'py>(
        &self,
        pairs: &Bound<'py, PyList>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = pairs.py();
        let (indices, values, all_axes) = (PyList::empty(py), PyList::empty(py), PyList::empty(py));
        let mut seen: Vec<(BatchAxes, Bound<'py, PyTuple>)> = Vec::new();
        for (index, item) in pairs.try_iter()?.enumerate() {
            let (locator, spec) = pair(&item?, "tensor_data")?;
            let axes = if let Ok(s) = spec.cast_exact::<TensorSpec>() {
                let axes = s.try_borrow()?.batch_axes(py)?;
                if axes.is_empty() {
                    continue;
                }
                match seen.iter().find(|(a, _)| *a == axes) {
                    Some((_, t)) => t.clone(),
                    None => {
                        let t = PyTuple::new(py, &axes)?;
                        if seen.len() < 16 {
                            seen.push((axes, t.clone()));
                        }
                        t
                    }
                }
            } else {
                let multipliers = spec.call_method0("get_batch_axis_multipliers")?;
                if !multipliers.is_truthy()? {
                    continue;
                }
                let items = multipliers.call_method0("items")?;
                PyTuple::new(py, items.try_iter()?.collect::<PyResult<Vec<_>>>()?)?
            };
            let value = match locator.cast_exact::<Locator>() {
                Ok(l) => {
                    let l = l.get();
                    let mut cur = inputs.clone();
                    for step in l.steps() {
                        cur = step_into(py, &l.arena, step, &cur)?;
                    }
                    cur
                }
                Err(_) => locator.call_method1("get_value", (inputs,))?,
            };
            indices.append(index)?;
            values.append(value)?;
            all_axes.append(axes)?;
        }
        PyTuple::new(py, [indices, values, all_axes])
    }

    /// Copies of `inputs` with every tensor sliced or repeated along its batch axes to `batch_size`.
    /// The input is left untouched and the result shares no memory with it.
    ///
    /// `batch_size` must be an integer of at least 1 (TypeError/ValueError otherwise; the reference slices
    /// silently).
    fn make_batch<'py>(
        slf: &Bound<'py, Self>,
        inputs: &Bound<'py, PyAny>,
        batch_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let it = interp(slf.py())?;
        it.make_batch
            .bind(slf.py())
            .call1((slf, inputs, batch_size))
    }

    /// Learn the batch axes' largest sizes from `inputs` batched to `max_batch_size`.
    ///
    /// `max_batch_size` must be an integer of at least 1, as `make_batch`'s `batch_size`.
    fn update_max_batch_size(
        slf: &Bound<'_, Self>,
        inputs: &Bound<'_, PyAny>,
        max_batch_size: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let it = interp(slf.py())?;
        it.update_max_batch_size
            .bind(slf.py())
            .call1((slf, inputs, max_batch_size))?;
        Ok(())
    }

    /// Learn dynamic and batch axes from `other`, a later sample with the same tensors.
    /// Raises `ValueError` (showing both) when the tensors differ in locators or ranks.
    fn update_shapes_seen(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::learn_from(slf, other)
    }

    /// The JSON text of this metadata: `to_json_dict()`'s content plus what an exact round trip
    /// needs (see `from_json`), and for an `ExactSampleMetadata` its class.
    ///
    /// Other values as `to_dict()` keeps them: plain Python data, `torch.dtype`, `torch.device`, and
    /// members of Enum classes allowed with `aitune_fast.add_safe_enums`; anything else is a
    /// `TypeError` naming the ways out.
    fn to_json<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyString>> {
        let exact = slf.is_instance_of::<ExactSampleMetadata>();
        encode::to_json(slf.py(), &*slf.try_borrow()?, exact)
    }

    /// Rebuild metadata from `to_json()` text (a `str`, or its UTF-8 as `bytes`, `bytearray` or
    /// `memoryview`): a `SampleMetadata`, or an `ExactSampleMetadata` where the document says it
    /// was one (whichever class this is called on). Text it cannot read raises
    /// `aitune_fast.MetadataDecodeError`, a `json.JSONDecodeError` with its position. Lone
    /// surrogates in a `str` are read inside strings as `json.loads` reads them, and are an
    /// error anywhere else.
    #[staticmethod]
    fn from_json(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let (md, exact) = decode::from_json(py, text)?;
        of_class(py, md, exact)
    }

    /// A dict with the reference's keys (`tensor_data`, `other_data`, `strict`, `llm_phase`)
    /// whose data uses aitune_fast's versioned encoding: no pickle.
    ///
    /// An `ExactSampleMetadata`'s dict names its class.
    ///
    /// Other values are kept exactly: plain Python data, `torch.dtype`, `torch.device`, and members of
    /// Enum classes allowed with `aitune_fast.add_safe_enums`; any other value raises `TypeError`
    /// naming the ways out (the allow-list, `pickle`, `strict=False`).
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let exact = slf.is_instance_of::<ExactSampleMetadata>();
        encode::to_dict(slf.py(), &*slf.try_borrow()?, exact)
    }

    /// Rebuild metadata from `to_dict()` output (of the class that wrote it, as `from_json`), or
    /// from a dict written by the reference (its pickled data is read by a restricted reader that
    /// runs nothing; a `SampleMetadata`, as the reference's `from_dict` returns).
    ///
    /// What is wrong inside a part's JSON text raises `aitune_fast.MetadataDecodeError` placed in that
    /// text; a wrong key or value type of the dict, or a refused pickle, a `ValueError`. Enum members
    /// are read back only while their class is allowed (`aitune_fast.add_safe_enums`).
    #[staticmethod]
    fn from_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let (md, exact) = decode::from_dict(py, data)?;
        of_class(py, md, exact)
    }

    /// A JSON-ready dict: paths, shapes and dtypes; other values as the reference renders them.
    ///
    /// Identical to the reference's `to_json_dict()`.
    fn to_json_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        json_dict::to_json_dict(py, self)
    }
}

/// A decoded metadata as a Python object of the class its document named.
fn of_class(py: Python<'_>, md: SampleMetadata, exact: bool) -> PyResult<Py<PyAny>> {
    if exact {
        let init = PyClassInitializer::from(md).add_subclass(ExactSampleMetadata {});
        return Ok(Py::new(py, init)?.into_any());
    }
    Ok(Py::new(py, md)?.into_any())
}
