//! Shapes: [`Dim`] (an int or a learned `batchN`/`dimN` name), [`Spec`] (the plain Rust form
//! every computation uses), how two specs merge (`update_shapes_seen`), batch-size multipliers,
//! and the `describe` text.

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};

use super::dtype::dtype_str;

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

    pub(super) fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Dim> {
        if let Ok(s) = v.cast::<PyString>() {
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

/// A batch axis's multiplier as the reference's `int(multiplier)`, truncated (still a float, of any
/// size: the caller converts it); NaN and infinity raise.
pub fn batch_multiplier(m: f64) -> PyResult<f64> {
    if m.is_nan() {
        return Err(PyValueError::new_err("cannot convert float NaN to integer"));
    }
    if m.is_infinite() {
        return Err(PyOverflowError::new_err(
            "cannot convert float infinity to integer",
        ));
    }
    Ok(m.trunc())
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

    pub fn batch_axes(&self) -> PyResult<Vec<(usize, f64)>> {
        let mut out = Vec::new();
        for (i, d) in self.shape.iter().enumerate() {
            if d.is_batch() {
                let m = *self.mult.get(i).ok_or_else(|| {
                    PyValueError::new_err("_bs_multipliers must be as long as shape")
                })?;
                out.push((i, batch_multiplier(m)?));
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
        assert_eq!(a.batch_axes().unwrap(), vec![(0, 1.0), (2, 3.0)]);
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
