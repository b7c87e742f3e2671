//! The `TensorSpec` Python class. Its fields are ordinary Python lists (so
//! `spec.shape[1] = "dim1"` behaves as in the reference); its methods convert to and from
//! [`Spec`] around the Rust logic of `shape.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::dtype::{dtype_id, dtype_obj, FOREIGN_DTYPE};
use super::read::{read_tensor, DtypeMemo};
use super::shape::{batch_multiplier, is_int, is_symbolic, Dim, Spec};
use crate::interp::{info_level_index, stock_state};

/// A batch axis's multiplier as the reference's `int(_bs_multipliers[axis])` gives it: exact, of
/// any size (`int(1e30)` is a 100-bit int), in an `i64` when it fits.
pub enum Multiplier {
    Small(i64),
    Big(Py<PyInt>),
}

impl Multiplier {
    /// `int(v)` of a stored multiplier: a float truncated (NaN and infinity raise as `int()` does),
    /// an int as it is; a symbolic one (traced) raises as NaN.
    fn of(v: &Bound<'_, PyAny>) -> PyResult<Multiplier> {
        let py = v.py();
        if let Ok(i) = v.cast::<PyInt>() {
            return Ok(match i.extract::<i64>() {
                Ok(n) => Multiplier::Small(n),
                // SAFETY: a new reference or NULL with an exception set; `int(i)` of an int
                Err(_) => Multiplier::Big(unsafe {
                    Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyNumber_Long(i.as_ptr()))?
                        .cast_into_unchecked::<PyInt>()
                        .unbind()
                }),
            });
        }
        let m = if !v.is_instance_of::<PyFloat>() && is_symbolic(v)? {
            f64::NAN
        } else {
            v.extract::<f64>().map_err(|_| {
                PyTypeError::new_err(format!("TensorSpec._bs_multipliers holds floats, got {v}"))
            })?
        };
        let m = batch_multiplier(m)?;
        // every float in [-2**63, 2**63) converts exactly; `int()` of any other finite float is
        // `PyLong_FromDouble`'s exact value
        let edge = i64::MIN as f64; // -2**63, exactly
        if (edge..-edge).contains(&m) {
            return Ok(Multiplier::Small(m as i64));
        }
        // SAFETY: a new reference or NULL with an exception set
        Ok(Multiplier::Big(unsafe {
            Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyLong_FromDouble(m))?
                .cast_into_unchecked::<PyInt>()
                .unbind()
        }))
    }
}

/// Small multipliers compare by value; an unbounded one never equals another (the callers only use
/// equality to share a cached tuple).
impl PartialEq for Multiplier {
    fn eq(&self, other: &Multiplier) -> bool {
        matches!((self, other), (Multiplier::Small(a), Multiplier::Small(b)) if a == b)
    }
}

impl<'py> IntoPyObject<'py> for &Multiplier {
    type Target = PyInt;
    type Output = Bound<'py, PyInt>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Bound<'py, PyInt>, Self::Error> {
        Ok(match self {
            Multiplier::Small(n) => n.into_pyobject(py)?,
            Multiplier::Big(b) => b.bind(py).clone(),
        })
    }
}

/// Metadata of one tensor: its shape (ints, or `batchN`/`dimN` for axes learned to vary), the
/// smallest and largest sizes seen on each axis, its dtype, and each axis's size divided by the
/// batch size it was recorded at.
///
/// Two specs are equal when they have the same rank: sizes may differ on dynamic axes.
///
/// The fields are plain lists: changing them changes what the spec (and any metadata holding it) reports.
#[pyclass(
    module = "aitune_fast.tensor_spec",
    name = "TensorSpec",
    subclass,
    weakref
)]
pub struct TensorSpec {
    #[pyo3(get)]
    pub shape: Py<PyAny>,
    #[pyo3(get)]
    pub min_shape: Py<PyAny>,
    #[pyo3(get)]
    pub max_shape: Py<PyAny>,
    #[pyo3(get)]
    pub dtype: Py<PyAny>,
    #[pyo3(get, name = "_bs_multipliers")]
    pub bs_multipliers: Py<PyAny>,
    /// made with no fields (as unpickling a stock AITune spec makes one), not yet set by
    /// `__setstate__`: an empty spec
    pub blank: bool,
}

/// Counts assignments to the fields of any `TensorSpec`, process-wide: while it has not moved,
/// every spec still holds the objects it held (`handed.rs` relies on this to check handed-out
/// specs without borrowing each one).
pub static FIELD_SETS: AtomicU64 = AtomicU64::new(0);

fn field_set() {
    FIELD_SETS.fetch_add(1, Ordering::Relaxed);
}

fn float_list<'py>(py: Python<'py>, v: &[f64]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, v.iter().map(|&x| PyFloat::new(py, x)))
}

fn int_list<'py>(py: Python<'py>, v: &[i64]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, v)
}

pub fn dim_list<'py>(py: Python<'py>, v: &[Dim]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, v.iter().map(|d| d.to_py(py)))
}

impl TensorSpec {
    fn clone_ref(&self, py: Python<'_>) -> TensorSpec {
        TensorSpec {
            shape: self.shape.clone_ref(py),
            min_shape: self.min_shape.clone_ref(py),
            max_shape: self.max_shape.clone_ref(py),
            dtype: self.dtype.clone_ref(py),
            bs_multipliers: self.bs_multipliers.clone_ref(py),
            blank: false,
        }
    }

    pub fn from_spec(py: Python<'_>, s: &Spec) -> PyResult<TensorSpec> {
        Ok(TensorSpec {
            shape: dim_list(py, &s.shape)?.into_any().unbind(),
            min_shape: int_list(py, &s.min)?.into_any().unbind(),
            max_shape: int_list(py, &s.max)?.into_any().unbind(),
            dtype: dtype_obj(py, s.dtype).unbind(),
            bs_multipliers: float_list(py, &s.mult)?.into_any().unbind(),
            blank: false,
        })
    }

    /// Read the Python fields into a [`Spec`].
    pub fn to_spec(&self, py: Python<'_>) -> PyResult<Spec> {
        let seq =
            |o: &Py<PyAny>| -> PyResult<Vec<Bound<'_, PyAny>>> { o.bind(py).try_iter()?.collect() };
        let shape = seq(&self.shape)?
            .iter()
            .map(Dim::from_py)
            .collect::<PyResult<Vec<_>>>()?;
        let ints = |o: &Py<PyAny>, what: &str| -> PyResult<Vec<i64>> {
            seq(o)?
                .iter()
                .map(|v| {
                    if v.is_instance_of::<PyInt>() {
                        return v.extract::<i64>();
                    }
                    if is_symbolic(v)? {
                        return Ok(0); // never read: specs with symbolic sizes are not merged
                    }
                    v.extract::<i64>().map_err(|_| {
                        PyTypeError::new_err(format!("TensorSpec.{what} holds ints, got {v}"))
                    })
                })
                .collect()
        };
        let min = ints(&self.min_shape, "min_shape")?;
        let max = ints(&self.max_shape, "max_shape")?;
        let mult = seq(&self.bs_multipliers)?
            .iter()
            .map(|v| {
                if !v.is_instance_of::<PyFloat>() && !v.is_instance_of::<PyInt>() && is_symbolic(v)?
                {
                    return Ok(f64::NAN);
                }
                v.extract::<f64>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "TensorSpec._bs_multipliers holds floats, got {v}"
                    ))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Spec {
            shape,
            min,
            max,
            mult,
            dtype: dtype_id(self.dtype.bind(py))?,
        })
    }

    /// `(axis, multiplier)` for every batch axis (a string size starting with `batch`), as
    /// [`Spec::batch_axes`] computes it, but reading only `shape` and the batch axes' entries of
    /// `_bs_multipliers`, as the reference's `get_batch_axis_multipliers` does: a fifth of the cost
    /// of [`Self::to_spec`], and no error from fields the query does not use.
    pub fn batch_axes(&self, py: Python<'_>) -> PyResult<Vec<(usize, Multiplier)>> {
        let mut out = Vec::new();
        let mut mult: Option<Vec<Bound<'_, PyAny>>> = None;
        for (i, item) in self.shape.bind(py).try_iter()?.enumerate() {
            let item = item?;
            let Ok(s) = item.cast::<PyString>() else {
                continue;
            };
            if !s.to_cow()?.starts_with("batch") {
                continue;
            }
            if mult.is_none() {
                mult = Some(
                    self.bs_multipliers
                        .bind(py)
                        .try_iter()?
                        .collect::<PyResult<_>>()?,
                );
            }
            let v = mult
                .as_ref()
                .and_then(|m| m.get(i))
                .ok_or_else(|| PyValueError::new_err("_bs_multipliers must be as long as shape"))?;
            out.push((i, Multiplier::of(v)?));
        }
        Ok(out)
    }

    /// Write a merged spec back into the existing lists, item by item, where it changed.
    pub fn write_back(&self, py: Python<'_>, before: &Spec, after: &Spec) -> PyResult<()> {
        // the lists may be shorter than the shape (a user-built spec): only entries that exist change
        for (i, (b, a)) in before.shape.iter().zip(&after.shape).enumerate() {
            if b != a {
                self.shape.bind(py).set_item(i, a.to_py(py))?;
            }
        }
        for (i, (b, a)) in before.min.iter().zip(&after.min).enumerate() {
            if b != a {
                self.min_shape.bind(py).set_item(i, *a)?;
            }
        }
        for (i, (b, a)) in before.max.iter().zip(&after.max).enumerate() {
            if b != a {
                self.max_shape.bind(py).set_item(i, *a)?;
            }
        }
        for (i, (b, a)) in before.mult.iter().zip(&after.mult).enumerate() {
            if b.to_bits() != a.to_bits() {
                self.bs_multipliers.bind(py).set_item(i, *a)?;
            }
        }
        Ok(())
    }

    pub fn rank(&self, py: Python<'_>) -> PyResult<usize> {
        self.shape.bind(py).len()
    }

    fn describe_text(&self, py: Python<'_>, level: usize) -> PyResult<String> {
        let mut out = String::from("shape=[");
        join_py(self.shape.bind(py), &mut out)?;
        out.push(']');
        if level == 0 {
            return Ok(out);
        }
        if level == 2 {
            out.push_str(" min_shape=[");
            join_py(self.min_shape.bind(py), &mut out)?;
            out.push_str("] max_shape=[");
            join_py(self.max_shape.bind(py), &mut out)?;
            out.push(']');
        }
        out.push_str(" dtype=");
        out.push_str(&self.dtype.bind(py).str()?.to_cow()?);
        Ok(out)
    }
}

/// The length of `value`, a list of items that pass `ok`, for `TensorSpec.__setstate__`.
fn state_list(
    value: &Bound<'_, PyAny>,
    name: &str,
    ok: impl Fn(&Bound<'_, PyAny>) -> bool,
) -> PyResult<usize> {
    let list = value.cast::<PyList>().map_err(|_| {
        PyTypeError::new_err(format!("TensorSpec state: {name} is a list, got {value}"))
    })?;
    for item in list.iter() {
        if !ok(&item) {
            return Err(PyTypeError::new_err(format!(
                "TensorSpec state: {name} holds {item}, of an unexpected type"
            )));
        }
    }
    Ok(list.len())
}

fn short_list() -> PyErr {
    PyIndexError::new_err("list index out of range")
}

fn join_py(seq: &Bound<'_, PyAny>, out: &mut String) -> PyResult<()> {
    for (i, v) in seq.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&v?.str()?.to_cow()?);
    }
    Ok(())
}

#[pymethods]
impl TensorSpec {
    /// `TensorSpec(shape, min_shape, max_shape, dtype, _bs_multipliers)`; with no fields, a blank
    /// spec (see `__setstate__`).
    #[new]
    #[pyo3(signature = (shape=None, min_shape=None, max_shape=None, dtype=None, _bs_multipliers=None))]
    fn py_new(
        py: Python<'_>,
        shape: Option<Py<PyAny>>,
        min_shape: Option<Py<PyAny>>,
        max_shape: Option<Py<PyAny>>,
        dtype: Option<Py<PyAny>>,
        _bs_multipliers: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        match (shape, min_shape, max_shape, _bs_multipliers) {
            (Some(shape), Some(min_shape), Some(max_shape), Some(bs_multipliers)) => {
                Ok(TensorSpec {
                    shape,
                    min_shape,
                    max_shape,
                    dtype: dtype.unwrap_or_else(|| py.None()),
                    bs_multipliers,
                    blank: false,
                })
            }
            (None, None, None, None) if dtype.is_none() => {
                let empty = || PyList::empty(py).into_any().unbind();
                Ok(TensorSpec {
                    shape: empty(),
                    min_shape: empty(),
                    max_shape: empty(),
                    dtype: py.None(),
                    bs_multipliers: empty(),
                    blank: true,
                })
            }
            _ => Err(PyTypeError::new_err(
                "TensorSpec takes shape, min_shape, max_shape, dtype and _bs_multipliers \
                 (or nothing: a blank spec)",
            )),
        }
    }

    /// Set a blank spec (as unpickling a stock AITune `TensorSpec` makes one) from the state the
    /// stock class pickles: `(None, {"shape", "min_shape", "max_shape", "dtype",
    /// "_bs_multipliers"})`, lists of one length with ints (and `str` sizes in `shape`), float
    /// multipliers and a torch dtype or `None`. Only once.
    fn __setstate__(&mut self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.blank {
            return Err(PyTypeError::new_err(
                "TensorSpec.__setstate__: the spec is already set (only a blank one is set, once)",
            ));
        }
        let fields = stock_state(
            state,
            "TensorSpec",
            [
                "shape",
                "min_shape",
                "max_shape",
                "dtype",
                "_bs_multipliers",
            ],
        )?;
        let [shape, min_shape, max_shape, dtype, mult] = &fields;
        let rank = state_list(shape, "shape", |v| {
            v.is_instance_of::<PyInt>() || v.is_instance_of::<PyString>()
        })?;
        for (list, name) in [(min_shape, "min_shape"), (max_shape, "max_shape")] {
            if state_list(list, name, |v| v.is_instance_of::<PyInt>())? != rank {
                return Err(PyValueError::new_err(format!(
                    "TensorSpec state: {name} is as long as shape ({rank})"
                )));
            }
        }
        let floats =
            |v: &Bound<'_, PyAny>| v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>();
        if state_list(mult, "_bs_multipliers", floats)? != rank {
            return Err(PyValueError::new_err(format!(
                "TensorSpec state: _bs_multipliers is as long as shape ({rank})"
            )));
        }
        if !dtype.is_none() && dtype_id(dtype)? == FOREIGN_DTYPE {
            return Err(PyTypeError::new_err(format!(
                "TensorSpec state: dtype is a torch.dtype or None, got {dtype}"
            )));
        }
        field_set();
        let [shape, min_shape, max_shape, dtype, mult] = fields.map(Bound::unbind);
        *self = TensorSpec {
            shape,
            min_shape,
            max_shape,
            dtype,
            bs_multipliers: mult,
            blank: false,
        };
        Ok(())
    }

    /// The spec of `tensor`, with multipliers relative to `batch_size` (NaN when unknown).
    #[staticmethod]
    fn from_tensor(py: Python<'_>, tensor: &Bound<'_, PyAny>, batch_size: f64) -> PyResult<Self> {
        let mut dims = Vec::new();
        let Some(dtype) = read_tensor(py, tensor, false, &mut dims, &mut DtypeMemo::default())?
            .filter(|&d| d != FOREIGN_DTYPE)
        else {
            let it = crate::interp::interp(py)?;
            let spec = it.reference_spec.bind(py).call1((tensor, batch_size))?;
            return Ok(spec.cast_into::<TensorSpec>()?.try_borrow()?.clone_ref(py));
        };
        if batch_size == 0.0 && !dims.is_empty() {
            return Err(pyo3::exceptions::PyZeroDivisionError::new_err(
                "division by zero",
            ));
        }
        TensorSpec::from_spec(py, &Spec::fresh(&dims, dtype, batch_size))
    }

    /// Shape (SHORT), plus dtype (MEDIUM), plus min/max shapes (FULL, the default; also for None). Any enum
    /// member named SHORT, MEDIUM or FULL (AITune's `InfoLevel`) is accepted; anything else is a ValueError.
    #[pyo3(signature = (info_level=None))]
    fn describe(&self, py: Python<'_>, info_level: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let level = match info_level {
            None => 2,
            Some(l) => info_level_index(py, l)?,
        };
        self.describe_text(py, level)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.describe_text(py, 1)
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        self.describe_text(py, 0)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.cast::<TensorSpec>() {
            Ok(o) => Ok(self.rank(py)? == o.try_borrow()?.rank(py)?),
            Err(_) => Ok(false),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        Ok(self.rank(py)? as isize)
    }

    /// Learn from `other`, a later sample of the same tensor (see the class docs).
    ///
    /// Changed axes become ``batchN`` (the same integer multiple of the batch size in both samples) or
    /// ``dimN``. Raises ValueError when the ranks differ.
    fn update_shapes_seen(&self, py: Python<'_>, other: &Bound<'_, TensorSpec>) -> PyResult<()> {
        let before = self.to_spec(py)?;
        let theirs = other.try_borrow()?.to_spec(py)?;
        let mut after = before.clone();
        after.merge(&theirs)?;
        self.write_back(py, &before, &after)
    }

    /// `{axis: multiplier}` for every batch axis.
    fn get_batch_axis_multipliers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (axis, m) in self.batch_axes(py)? {
            d.set_item(axis, &m)?;
        }
        Ok(d)
    }

    /// The largest size seen on any batch axis (1 when there is none).
    fn get_max_batch_size(&self, py: Python<'_>) -> PyResult<i64> {
        let s = self.to_spec(py)?;
        let mut out = 1;
        for (a, _) in s.batch_axes()? {
            out = out.max(*s.max.get(a).ok_or_else(short_list)?);
        }
        Ok(out)
    }

    /// The smallest size seen on any batch axis, or None when there is none.
    fn get_min_batch_size(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let s = self.to_spec(py)?;
        let mut out: Option<i64> = None;
        for (a, _) in s.batch_axes()? {
            let v = *s.min.get(a).ok_or_else(short_list)?;
            out = Some(out.map_or(v, |m| m.min(v)));
        }
        Ok(out)
    }

    /// Whether an axis was learned to be a batch axis (``batchN``).
    fn has_batch_axis(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.to_spec(py)?.has_batch_axis())
    }

    /// Whether an axis was learned to vary apart from the batch size (``dimN``).
    fn has_dynamic_axis(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.to_spec(py)?.has_dynamic_axis())
    }

    /// Same rank, and equal sizes wherever both specs hold a concrete size.
    fn matches(&self, py: Python<'_>, other: &Bound<'_, TensorSpec>) -> PyResult<bool> {
        let a = self.to_spec(py)?;
        let b = other.try_borrow()?.to_spec(py)?;
        if a.rank() != b.rank() {
            return Ok(false);
        }
        Ok(a.shape.iter().zip(&b.shape).all(|pair| match pair {
            (Dim::Int(x), Dim::Int(y)) => x == y,
            _ => true,
        }))
    }

    /// The reference's dict: ``type`` (``"TensorSpec"``) and the five fields.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let copy = py.import("copy")?.getattr("deepcopy")?;
        let d = PyDict::new(py);
        d.set_item("type", "TensorSpec")?;
        d.set_item("shape", copy.call1((self.shape.bind(py),))?)?;
        d.set_item("min_shape", copy.call1((self.min_shape.bind(py),))?)?;
        d.set_item("max_shape", copy.call1((self.max_shape.bind(py),))?)?;
        d.set_item("dtype", copy.call1((self.dtype.bind(py),))?)?;
        d.set_item(
            "_bs_multipliers",
            copy.call1((self.bs_multipliers.bind(py),))?,
        )?;
        Ok(d)
    }

    /// Build a spec from `to_dict()` output. Like the reference, removes the `"type"` key from `data`.
    #[staticmethod]
    fn from_dict(data: &Bound<'_, PyDict>) -> PyResult<Self> {
        let ok = match data.get_item("type")? {
            Some(t) => t
                .extract::<String>()
                .map(|s| s == "TensorSpec")
                .unwrap_or(false),
            None => false,
        };
        if !ok {
            return Err(PyValueError::new_err(
                "Invalid dictionary format for TensorSpec",
            ));
        }
        data.del_item("type")?;
        let get = |k: &str| -> PyResult<Py<PyAny>> {
            data.get_item(k)?.map(|v| v.unbind()).ok_or_else(|| {
                PyTypeError::new_err(format!("TensorSpec.from_dict: missing key {k:?}"))
            })
        };
        let known = [
            "shape",
            "min_shape",
            "max_shape",
            "dtype",
            "_bs_multipliers",
        ];
        for k in data.keys() {
            let k = k.extract::<String>().unwrap_or_default();
            if !known.contains(&k.as_str()) {
                return Err(PyTypeError::new_err(format!(
                    "TensorSpec.from_dict: unexpected key {k:?}"
                )));
            }
        }
        Ok(TensorSpec {
            shape: get("shape")?,
            min_shape: get("min_shape")?,
            max_shape: get("max_shape")?,
            dtype: get("dtype")?,
            bs_multipliers: get("_bs_multipliers")?,
            blank: false,
        })
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        for field in [
            &self.shape,
            &self.min_shape,
            &self.max_shape,
            &self.dtype,
            &self.bs_multipliers,
        ] {
            visit.call(field)?;
        }
        Ok(())
    }

    #[setter]
    fn set_shape(&mut self, value: Py<PyAny>) {
        field_set();
        self.shape = value;
    }

    #[setter]
    fn set_min_shape(&mut self, value: Py<PyAny>) {
        field_set();
        self.min_shape = value;
    }

    #[setter]
    fn set_max_shape(&mut self, value: Py<PyAny>) {
        field_set();
        self.max_shape = value;
    }

    #[setter]
    fn set_dtype(&mut self, value: Py<PyAny>) {
        field_set();
        self.dtype = value;
    }

    #[setter(_bs_multipliers)]
    fn set_bs_multipliers(&mut self, value: Py<PyAny>) {
        field_set();
        self.bs_multipliers = value;
    }

    fn __clear__(&mut self) {
        field_set();
        Python::attach(|py| {
            for field in [
                &mut self.shape,
                &mut self.min_shape,
                &mut self.max_shape,
                &mut self.dtype,
                &mut self.bs_multipliers,
            ] {
                *field = py.None();
            }
        });
    }

    /// Whether `value` is a whole number (by value, not by type); NaN is not.
    #[staticmethod]
    fn is_int(value: f64) -> PyResult<bool> {
        is_int(value)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.try_borrow()?;
        let args = PyTuple::new(
            py,
            [
                &me.shape,
                &me.min_shape,
                &me.max_shape,
                &me.dtype,
                &me.bs_multipliers,
            ]
            .map(|o| o.bind(py).clone()),
        )?;
        Ok((slf.get_type().into_any(), args))
    }
}
