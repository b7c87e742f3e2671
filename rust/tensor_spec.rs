//! Tensor specs: shapes, the range of shapes seen, batch-size multipliers, and how they merge.
//!
//! [`Spec`] is the plain Rust form every computation uses. [`TensorSpec`] is the Python class; its
//! fields are ordinary Python lists (so `spec.shape[1] = "dim1"` behaves as in the reference) and
//! its methods convert to and from [`Spec`] around the Rust logic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::interp::info_level_index;

/// One entry of `TensorSpec.shape`.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Int(i64),
    /// `"batch{n}"`
    Batch(u32),
    /// `"dim{n}"`
    Dyn(u32),
    /// any other string
    Str(Box<str>),
    /// a symbolic size (`torch.SymInt`), by its name; only in specs of traced tensors
    Sym(Box<str>),
}

impl Dim {
    pub fn parse(s: &str) -> Dim {
        fn num(rest: &str) -> Option<u32> {
            if rest.is_empty()
                || (rest.len() > 1 && rest.starts_with('0'))
                || !rest.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            rest.parse().ok()
        }
        if let Some(n) = s.strip_prefix("batch").and_then(num) {
            return Dim::Batch(n);
        }
        if let Some(n) = s.strip_prefix("dim").and_then(num) {
            return Dim::Dyn(n);
        }
        Dim::Str(s.into())
    }

    pub fn is_batch(&self) -> bool {
        match self {
            Dim::Batch(_) => true,
            Dim::Str(s) => s.starts_with("batch"),
            _ => false,
        }
    }

    pub fn is_dynamic(&self) -> bool {
        match self {
            Dim::Dyn(_) => true,
            Dim::Str(s) => s.starts_with("dim"),
            _ => false,
        }
    }

    pub fn write(&self, out: &mut String) {
        use std::fmt::Write;
        match self {
            Dim::Int(v) => write!(out, "{v}").unwrap(),
            Dim::Batch(n) => write!(out, "batch{n}").unwrap(),
            Dim::Dyn(n) => write!(out, "dim{n}").unwrap(),
            Dim::Str(s) | Dim::Sym(s) => out.push_str(s),
        }
    }

    pub fn to_py<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Dim::Int(v) => v.into_pyobject(py).expect("int").into_any(),
            other => {
                let mut s = String::new();
                other.write(&mut s);
                PyString::new(py, &s).into_any()
            }
        }
    }

    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Dim> {
        if let Ok(s) = v.downcast::<PyString>() {
            return Ok(Dim::parse(&s.to_cow()?));
        }
        if v.is_instance_of::<PyInt>() {
            return Ok(Dim::Int(v.extract()?));
        }
        if is_symbolic(v)? {
            // str() names the symbol without specialising it
            return Ok(Dim::Sym(v.str()?.to_cow()?.into()));
        }
        // SAFETY: a live object; PyIndex_Check only reads its type's slots
        if unsafe { pyo3::ffi::PyIndex_Check(v.as_ptr()) } != 0 {
            // an int-like (a numpy integer): the reference keeps it and does int arithmetic on it
            // SAFETY: a new reference or NULL with an exception set
            let i = unsafe {
                Bound::from_owned_ptr_or_err(v.py(), pyo3::ffi::PyNumber_Index(v.as_ptr()))?
            };
            return Ok(Dim::Int(i.extract()?));
        }
        Err(PyTypeError::new_err(format!(
            "TensorSpec.shape holds ints and strings, got {} ({})",
            v.repr()?,
            v.get_type().name()?
        )))
    }
}

/// Whether `v` is a torch.SymInt/SymFloat (a size or multiplier of a traced tensor).
pub fn is_symbolic(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = v.py();
    let it = crate::interp::interp(py)?;
    Ok(v.is_instance(it.sym_int.bind(py))? || v.is_instance(it.sym_float.bind(py))?)
}

/// A tensor's spec in plain Rust.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub shape: Vec<Dim>,
    pub min: Vec<i64>,
    pub max: Vec<i64>,
    pub mult: Vec<f64>,
    pub dtype: u16,
}

pub fn is_int(v: f64) -> PyResult<bool> {
    if v.is_nan() {
        return Ok(false);
    }
    if v.is_infinite() {
        return Err(PyOverflowError::new_err(
            "cannot convert float infinity to integer",
        ));
    }
    Ok(v.trunc() == v)
}

impl Spec {
    pub fn fresh(dims: &[i64], dtype: u16, batch_size: f64) -> Spec {
        Spec {
            shape: dims.iter().map(|&d| Dim::Int(d)).collect(),
            min: dims.to_vec(),
            max: dims.to_vec(),
            mult: dims.iter().map(|&d| multiplier(d, batch_size)).collect(),
            dtype,
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn is_symbolic(&self) -> bool {
        self.shape.iter().any(|d| matches!(d, Dim::Sym(_)))
    }

    /// Learn from another sample of the same tensor: axes whose size changed become `batchN` when
    /// both samples have the same integer multiplier of the batch size, `dimN` otherwise.
    /// Returns whether anything changed.
    pub fn merge(&mut self, other: &Spec) -> PyResult<bool> {
        if self.rank() != other.rank() {
            return Err(PyValueError::new_err("Tensors must have the same rank"));
        }
        if self.is_symbolic() || other.is_symbolic() {
            return Err(PyTypeError::new_err(
                "update_shapes_seen needs concrete sizes; this spec holds symbolic sizes (torch.SymInt) from a traced tensor",
            ));
        }
        let mut changed = false;
        for i in 0..self.rank() {
            if self.shape[i] == other.shape[i] {
                continue;
            }
            changed = true;
            let (lo, hi) = (other.min.get(i).copied(), other.max.get(i).copied());
            let (lo, hi) = match (lo, hi, self.min.get(i), self.max.get(i)) {
                (Some(lo), Some(hi), Some(_), Some(_)) => (lo, hi),
                _ => {
                    return Err(PyIndexError::new_err(
                        "list index out of range: min_shape or max_shape is shorter than shape",
                    ))
                }
            };
            self.min[i] = self.min[i].min(lo);
            self.max[i] = self.max[i].max(hi);
            let (a, b) = (self.mult.get(i).copied(), other.mult.get(i).copied());
            let (a, b) = match (a, b) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    return Err(PyIndexError::new_err(
                        "list index out of range: _bs_multipliers is shorter than shape",
                    ))
                }
            };
            if a == b && is_int(a)? {
                self.shape[i] = Dim::Batch(i as u32);
            } else {
                self.mult[i] = f64::NAN;
                self.shape[i] = Dim::Dyn(i as u32);
            }
        }
        Ok(changed)
    }

    pub fn batch_axes(&self) -> PyResult<Vec<(usize, i64)>> {
        let mut out = Vec::new();
        for (i, d) in self.shape.iter().enumerate() {
            if d.is_batch() {
                let m = *self.mult.get(i).ok_or_else(|| {
                    PyValueError::new_err("_bs_multipliers must be as long as shape")
                })?;
                if m.is_nan() {
                    return Err(PyValueError::new_err("cannot convert float NaN to integer"));
                }
                if m.is_infinite() {
                    return Err(PyOverflowError::new_err(
                        "cannot convert float infinity to integer",
                    ));
                }
                out.push((i, m.trunc() as i64));
            }
        }
        Ok(out)
    }

    pub fn has_batch_axis(&self) -> bool {
        self.shape.iter().any(Dim::is_batch)
    }

    pub fn has_dynamic_axis(&self) -> bool {
        self.shape.iter().any(Dim::is_dynamic)
    }

    /// The `describe()` text of a spec at level 0 (SHORT), 1 (MEDIUM) or 2 (FULL).
    pub fn describe(&self, level: usize, out: &mut String) {
        out.push_str("shape=[");
        join_dims(&self.shape, out);
        out.push(']');
        if level == 0 {
            return;
        }
        if level == 2 {
            out.push_str(" min_shape=[");
            join_ints(&self.min, out);
            out.push_str("] max_shape=[");
            join_ints(&self.max, out);
            out.push(']');
        }
        out.push_str(" dtype=");
        out.push_str(&dtype_str(self.dtype));
    }
}

pub fn multiplier(size: i64, batch_size: f64) -> f64 {
    if batch_size.is_nan() {
        f64::NAN
    } else {
        size as f64 / batch_size
    }
}

fn join_dims(dims: &[Dim], out: &mut String) {
    for (i, d) in dims.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        d.write(out);
    }
}

fn join_ints(v: &[i64], out: &mut String) {
    use std::fmt::Write;
    for (i, d) in v.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{d}").unwrap();
    }
}

// ---- dtypes -------------------------------------------------------------------------------------

struct DtypeEntry {
    ptr: usize,
    obj: Py<PyAny>,
    text: String,
}

/// The process-wide table of dtype ids. It holds only `torch.dtype` objects (singletons, a few
/// dozen at most) and `None`, so it stays small however many specs a process builds; any other
/// dtype object gets [`FOREIGN_DTYPE`] and stays with the Python spec that holds it.
static DTYPES: Mutex<Vec<DtypeEntry>> = Mutex::new(Vec::new());

/// The id of a dtype that is neither a `torch.dtype` nor `None`. Such a dtype is never entered in
/// the table: a walk that meets one keeps that tensor's spec as a Python object, and code that
/// needs the object itself reads it from that spec.
pub const FOREIGN_DTYPE: u16 = u16::MAX;

fn is_table_dtype(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    static TORCH_DTYPE: pyo3::sync::GILOnceCell<Py<pyo3::types::PyType>> =
        pyo3::sync::GILOnceCell::new();
    let py = obj.py();
    if obj.is_none() {
        return Ok(true);
    }
    let t = TORCH_DTYPE.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("torch")?
            .getattr("dtype")?
            .downcast_into::<pyo3::types::PyType>()?
            .unbind())
    })?;
    Ok(obj.get_type().is(t.bind(py)))
}

/// A small id for a dtype object: its entry in the table for a `torch.dtype` or `None`,
/// [`FOREIGN_DTYPE`] for anything else.
pub fn dtype_id(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    let ptr = obj.as_ptr() as usize;
    {
        let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = table.iter().position(|e| e.ptr == ptr) {
            return Ok(i as u16);
        }
    }
    if !is_table_dtype(obj)? {
        return Ok(FOREIGN_DTYPE);
    }
    let text = obj.str()?.to_cow()?.into_owned();
    let mut table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = table.iter().position(|e| e.ptr == ptr) {
        return Ok(i as u16);
    }
    if table.len() >= FOREIGN_DTYPE as usize {
        return Err(PyValueError::new_err("too many distinct torch dtypes"));
    }
    table.push(DtypeEntry {
        ptr,
        obj: obj.clone().unbind(),
        text,
    });
    Ok((table.len() - 1) as u16)
}

/// The dtype object of a table id (`None` for [`FOREIGN_DTYPE`], whose object is not kept here).
pub fn dtype_obj(py: Python<'_>, id: u16) -> Bound<'_, PyAny> {
    let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    match table.get(id as usize) {
        Some(e) => e.obj.bind(py).clone(),
        None => py.None().into_bound(py),
    }
}

pub fn dtype_str(id: u16) -> String {
    let table = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    match table.get(id as usize) {
        Some(e) => e.text.clone(),
        None => "?".to_owned(),
    }
}

/// Per-walk memo of dtype ids, so the shared table is locked once per distinct dtype; and whether
/// the fast tensor reader may read this walk's tensors (asked once per walk).
#[derive(Default)]
pub struct DtypeMemo(SmallMap, Option<bool>);

/// `(dtype address, id)` pairs: the first few inline (no allocation for a typical call).
#[derive(Default)]
pub struct SmallMap {
    few: [(usize, u16); 4],
    n: usize,
    more: Vec<(usize, u16)>,
}

impl SmallMap {
    #[inline]
    fn get(&self, key: usize) -> Option<u16> {
        let few = &self.few[..self.n.min(self.few.len())];
        few.iter()
            .chain(self.more.iter())
            .find(|(p, _)| *p == key)
            .map(|&(_, id)| id)
    }

    fn push(&mut self, key: usize, id: u16) {
        if self.n < self.few.len() {
            self.few[self.n] = (key, id);
            self.n += 1;
        } else {
            self.more.push((key, id));
        }
    }
}

impl DtypeMemo {
    #[inline]
    pub fn id(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u16> {
        let ptr = obj.as_ptr() as usize;
        if let Some(id) = self.0.get(ptr) {
            return Ok(id);
        }
        let id = dtype_id(obj)?;
        self.0.push(ptr, id);
        Ok(id)
    }

    /// Whether the fast tensor reader may read exact tensors in this walk.
    #[inline]
    fn fast_reader(&mut self, py: Python<'_>) -> PyResult<bool> {
        match self.1 {
            Some(f) => Ok(f),
            None => {
                let f = crate::reader::fast_now(py)?;
                self.1 = Some(f);
                Ok(f)
            }
        }
    }
}

// ---- reading tensors ----------------------------------------------------------------------------

/// Append the sizes of `tensor` to `dims` and return its dtype id; `None` (with `dims` as it
/// was) when a size is symbolic (`torch.SymInt`): the caller then keeps the tensor's Python spec.
///
/// `fast`: the tensor is an exact `torch.Tensor`/`nn.Parameter`, which a fast reader may read.
pub fn read_tensor(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    fast: bool,
    dims: &mut Vec<i64>,
    memo: &mut DtypeMemo,
) -> PyResult<Option<u16>> {
    if fast && memo.fast_reader(py)? {
        if let crate::reader::Fast::Read(dtype) = crate::reader::read_fast(py, tensor, dims) {
            return Ok(Some(match dtype {
                Some(d) => memo.id(d.bind(py))?,
                None => memo.id(&tensor.getattr(pyo3::intern!(py, "dtype"))?)?,
            }));
        }
    }
    let start = dims.len();
    let shape = tensor.getattr(pyo3::intern!(py, "shape"))?;
    // a tuple (torch.Size) or list of exact ints; anything else (a torch.SymInt, a numpy integer,
    // another iterable) is kept as the reference keeps it, in a spec built the Python way
    // check the type first: converting a torch.SymInt to int would specialise it (add a guard);
    // exact ints convert without running Python code, so the sequence cannot change meanwhile
    let mut take = |d: &Bound<'_, PyAny>| -> PyResult<bool> {
        if !d.is_exact_instance_of::<PyInt>() {
            dims.truncate(start);
            return Ok(false);
        }
        dims.push(d.extract::<i64>()?);
        Ok(true)
    };
    if let Ok(t) = shape.downcast::<PyTuple>() {
        for d in t.iter_borrowed() {
            if !take(&d)? {
                return Ok(None);
            }
        }
    } else if let Ok(l) = shape.downcast::<PyList>() {
        for d in l.iter() {
            if !take(&d)? {
                return Ok(None);
            }
        }
    } else {
        return Ok(None);
    }
    let dtype = tensor.getattr(pyo3::intern!(py, "dtype"))?;
    Ok(Some(memo.id(&dtype)?))
}

// ---- the Python class ---------------------------------------------------------------------------

/// Metadata of one tensor: its shape (ints, or `batchN`/`dimN` for axes learned to vary), the
/// smallest and largest sizes seen on each axis, its dtype, and each axis's size divided by the
/// batch size it was recorded at.
///
/// Two specs are equal when they have the same rank: sizes may differ on dynamic axes.
#[pyclass(module = "aitune_fast.tensor_spec", name = "TensorSpec", subclass)]
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
        }
    }

    pub fn from_spec(py: Python<'_>, s: &Spec) -> PyResult<TensorSpec> {
        Ok(TensorSpec {
            shape: dim_list(py, &s.shape)?.into_any().unbind(),
            min_shape: int_list(py, &s.min)?.into_any().unbind(),
            max_shape: int_list(py, &s.max)?.into_any().unbind(),
            dtype: dtype_obj(py, s.dtype).unbind(),
            bs_multipliers: float_list(py, &s.mult)?.into_any().unbind(),
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
    #[new]
    #[pyo3(signature = (shape, min_shape, max_shape, dtype, _bs_multipliers))]
    fn py_new(
        shape: Py<PyAny>,
        min_shape: Py<PyAny>,
        max_shape: Py<PyAny>,
        dtype: Py<PyAny>,
        _bs_multipliers: Py<PyAny>,
    ) -> Self {
        TensorSpec {
            shape,
            min_shape,
            max_shape,
            dtype,
            bs_multipliers: _bs_multipliers,
        }
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
            return Ok(spec
                .downcast_into::<TensorSpec>()?
                .try_borrow()?
                .clone_ref(py));
        };
        if batch_size == 0.0 && !dims.is_empty() {
            return Err(pyo3::exceptions::PyZeroDivisionError::new_err(
                "division by zero",
            ));
        }
        TensorSpec::from_spec(py, &Spec::fresh(&dims, dtype, batch_size))
    }

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
        match other.downcast::<TensorSpec>() {
            Ok(o) => Ok(self.rank(py)? == o.try_borrow()?.rank(py)?),
            Err(_) => Ok(false),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        Ok(self.rank(py)? as isize)
    }

    /// Learn from `other`, a later sample of the same tensor (see the class docs).
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
        for (axis, m) in self.to_spec(py)?.batch_axes()? {
            d.set_item(axis, m)?;
        }
        Ok(d)
    }

    fn get_max_batch_size(&self, py: Python<'_>) -> PyResult<i64> {
        let s = self.to_spec(py)?;
        let mut out = 1;
        for (a, _) in s.batch_axes()? {
            out = out.max(*s.max.get(a).ok_or_else(short_list)?);
        }
        Ok(out)
    }

    fn get_min_batch_size(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let s = self.to_spec(py)?;
        let mut out: Option<i64> = None;
        for (a, _) in s.batch_axes()? {
            let v = *s.min.get(a).ok_or_else(short_list)?;
            out = Some(out.map_or(v, |m| m.min(v)));
        }
        Ok(out)
    }

    fn has_batch_axis(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.to_spec(py)?.has_batch_axis())
    }

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
        Python::with_gil(|py| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(shape: &[i64], bs: f64) -> Spec {
        Spec::fresh(shape, 0, bs)
    }

    #[test]
    fn symbolic_names_parse_only_in_canonical_form() {
        assert_eq!(Dim::parse("batch0"), Dim::Batch(0));
        assert_eq!(Dim::parse("dim12"), Dim::Dyn(12));
        assert_eq!(Dim::parse("batch01"), Dim::Str("batch01".into()));
        assert_eq!(Dim::parse("batch"), Dim::Str("batch".into()));
        assert_eq!(Dim::parse("dimension"), Dim::Str("dimension".into()));
        for text in ["batch0", "dim12", "batch01", "x", ""] {
            let mut out = String::new();
            Dim::parse(text).write(&mut out);
            assert_eq!(out, text, "a parsed name writes back unchanged");
        }
    }

    #[test]
    fn batch_and_dynamic_axes_follow_the_prefix_like_the_reference() {
        assert!(Dim::Batch(3).is_batch() && Dim::Str("batchX".into()).is_batch());
        assert!(Dim::Dyn(1).is_dynamic() && Dim::Str("dimension".into()).is_dynamic());
        assert!(!Dim::Int(4).is_batch() && !Dim::Int(4).is_dynamic());
    }

    #[test]
    fn fresh_specs_divide_sizes_by_the_batch_size() {
        let s = spec(&[4, 6], 2.0);
        assert_eq!(s.mult, vec![2.0, 3.0]);
        assert_eq!((s.min.clone(), s.max.clone()), (vec![4, 6], vec![4, 6]));
        assert!(spec(&[4], f64::NAN).mult[0].is_nan());
    }

    #[test]
    fn merging_marks_equal_integer_multipliers_as_batch_axes_and_the_rest_dynamic() {
        // the reference's docstring example: [1, 2, 3, 4] at bs=1, then [2, 8, 6, 4] at bs=2
        let mut a = spec(&[1, 2, 3, 4], 1.0);
        let b = spec(&[2, 8, 6, 4], 2.0);
        assert!(a.merge(&b).unwrap());
        assert_eq!(
            a.shape,
            vec![Dim::Batch(0), Dim::Dyn(1), Dim::Batch(2), Dim::Int(4)]
        );
        assert_eq!(a.min, vec![1, 2, 3, 4]);
        assert_eq!(a.max, vec![2, 8, 6, 4]);
        assert!(a.mult[1].is_nan());
        assert_eq!(a.batch_axes().unwrap(), vec![(0, 1), (2, 3)]);
    }

    #[test]
    fn merging_equal_shapes_changes_nothing_and_unknown_batch_sizes_give_dynamic_axes() {
        let mut a = spec(&[2, 3], 2.0);
        assert!(!a.merge(&spec(&[2, 3], 2.0)).unwrap());
        assert_eq!(a, spec(&[2, 3], 2.0));
        let mut c = spec(&[2, 3], f64::NAN);
        c.merge(&spec(&[4, 3], f64::NAN)).unwrap();
        assert_eq!(c.shape, vec![Dim::Dyn(0), Dim::Int(3)]);
    }

    #[test]
    fn merging_rejects_a_different_rank() {
        let mut a = spec(&[2, 3], 1.0);
        assert!(a.merge(&spec(&[2], 1.0)).is_err());
    }

    #[test]
    fn is_int_checks_the_value_and_rejects_nan() {
        assert!(is_int(3.0).unwrap());
        assert!(!is_int(2.5).unwrap());
        assert!(!is_int(f64::NAN).unwrap());
        assert!(
            is_int(f64::INFINITY).is_err(),
            "int(inf) raises OverflowError in Python"
        );
    }

    #[test]
    fn describe_matches_the_reference_layout() {
        let mut s = spec(&[2, 3], 1.0);
        s.shape[0] = Dim::Batch(0);
        let mut out = String::new();
        s.describe(0, &mut out);
        assert_eq!(out, "shape=[batch0, 3]");
    }
}
