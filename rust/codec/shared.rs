//! What the encoder and the decoder both use: torch dtypes by name, type names, and the rule
//! that a one-shape tensor's multipliers follow from the batch size.

use pyo3::prelude::*;

use super::error::{CodecError, CodecResult};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::tensor_spec::multiplier;

struct Torch {
    /// `torch.__dict__`: dtypes are looked up here, never through `getattr` (which may import)
    dict: Py<PyDict>,
    dtype: Py<PyType>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

fn torch(py: Python<'_>) -> PyResult<&'static Torch> {
    TORCH.get_or_try_init(py, || {
        let m = py.import("torch")?;
        Ok(Torch {
            dict: m.getattr("__dict__")?.cast_into::<PyDict>()?.unbind(),
            dtype: m.getattr("dtype")?.cast_into::<PyType>()?.unbind(),
        })
    })
}

pub(super) fn is_dtype(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(v.get_type().is(torch(py)?.dtype.bind(py)))
}

/// The torch dtype named `name` (`"torch.float32"`), or a refusal (not yet placed) saying why
/// there is none.
pub(super) fn dtype_named<'py>(py: Python<'py>, name: &str) -> CodecResult<Bound<'py, PyAny>> {
    let attr = match name.strip_prefix("torch.") {
        Some(a)
            if !a.is_empty()
                && a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                && !a.as_bytes()[0].is_ascii_digit() =>
        {
            a
        }
        _ => {
            return Err(CodecError::value(format!(
                "dtype {name:?} is not of the form \"torch.<name>\""
            )))
        }
    };
    let t = torch(py)?;
    match t.dict.bind(py).get_item(attr)? {
        Some(obj) if obj.get_type().is(t.dtype.bind(py)) => Ok(obj),
        _ => Err(CodecError::value(format!("{name:?} is not a torch dtype"))),
    }
}

pub(super) use crate::interp::type_name;

/// A batch size that would give `mults` for `dims`, when one of them tells.
pub(super) fn guess_bs(dims: &[i64], mults: &[f64]) -> Option<f64> {
    if dims.is_empty() || mults.len() != dims.len() {
        return None;
    }
    if mults.iter().all(|m| m.is_nan()) {
        return Some(f64::NAN);
    }
    let (d, m) = dims
        .iter()
        .zip(mults)
        .find(|(&d, &m)| d != 0 && m.is_finite() && m != 0.0)?;
    let mut cand = *d as f64 / m;
    if !cand.is_finite() {
        return None;
    }
    let r = cand.round();
    if (cand - r).abs() <= 1e-9 * r.abs().max(1.0) {
        cand = r;
    }
    Some(cand)
}

/// Whether `mults` are exactly the multipliers `dims` get at batch size `bs` (NaN matching NaN).
pub(super) fn mults_match(dims: &[i64], mults: &[f64], bs: f64) -> bool {
    dims.len() == mults.len()
        && dims.iter().zip(mults).all(|(&d, &m)| {
            let f = multiplier(d, bs);
            (f.is_nan() && m.is_nan()) || f.to_bits() == m.to_bits()
        })
}
