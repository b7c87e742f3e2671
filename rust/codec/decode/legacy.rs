//! Dicts written by the reference: rows from `aitune_fast._legacy`'s restricted unpickler.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::shared::is_dtype;
use crate::paths::{Kind, ROOT};
use crate::tensor_spec::{dtype_id, Dim};

use super::build::{Acc, Build, TensorDims};

pub(super) fn legacy_rows<'py>(
    py: Python<'py>,
    func: &str,
    data: &[u8],
) -> CodecResult<Bound<'py, PyList>> {
    let m = py.import("aitune_fast._legacy")?;
    let rows = m.getattr(func)?.call1((PyBytes::new(py, data),))?;
    Ok(rows.cast_into::<PyList>().map_err(PyErr::from)?)
}

fn legacy_path<'py>(b: &mut Build<'py>, steps: &Bound<'py, PyAny>) -> CodecResult<u32> {
    let mut cur = ROOT;
    for step in steps.try_iter()? {
        let step = step?;
        let (acc, kind): (Bound<'py, PyAny>, i64) = step.extract()?;
        let kind = Kind::from_index(kind)
            .ok_or_else(|| CodecError::value(format!("object type {kind} is not 0, 1, 2 or 3")))?;
        cur = b.step(cur, Acc::Obj(acc), kind)?;
    }
    Ok(cur)
}

pub(super) fn legacy_tensors<'py>(
    b: &mut Build<'py>,
    rows: &Bound<'py, PyList>,
    what: &str,
) -> CodecResult<()> {
    each_row(b, rows, what, "tensor_data", legacy_tensor)
}

fn legacy_tensor<'py>(b: &mut Build<'py>, row: &Bound<'py, PyAny>) -> CodecResult<()> {
    let py = b.py;
    #[allow(clippy::type_complexity)]
    let (steps, out, shape, min, max, dtype, mult): (
        Bound<'py, PyAny>,
        bool,
        Vec<Bound<'py, PyAny>>,
        Vec<i64>,
        Vec<i64>,
        Bound<'py, PyAny>,
        Vec<f64>,
    ) = row.extract()?;
    let node = legacy_path(b, &steps)?;
    let mut dims = Vec::with_capacity(shape.len());
    for d in &shape {
        if let Ok(s) = d.cast::<PyString>() {
            dims.push(Dim::parse(s.to_str()?));
        } else {
            dims.push(Dim::Int(d.extract()?));
        }
    }
    if min.len() != dims.len() || max.len() != dims.len() || mult.len() != dims.len() {
        return Err(CodecError::value(format!(
            "shape, min_shape, max_shape and _bs_multipliers have different lengths ({}, {}, {}, {})",
            dims.len(),
            min.len(),
            max.len(),
            mult.len()
        )));
    }
    let dtype = if dtype.is_none() {
        b.dtype_none()?
    } else if is_dtype(py, &dtype)? {
        dtype_id(&dtype)?
    } else {
        return Err(CodecError::value("the dtype is not a torch.dtype"));
    };
    let seen = TensorDims {
        shape: &dims,
        min: &min,
        max: &max,
        mult: &mult,
    };
    b.add_tensor(node, if out { 2 } else { 1 }, seen, dtype)
}

pub(super) fn legacy_others<'py>(
    b: &mut Build<'py>,
    rows: &Bound<'py, PyList>,
    what: &str,
) -> CodecResult<()> {
    each_row(b, rows, what, "other_data", |b, row| {
        let (steps, out, value): (Bound<'py, PyAny>, bool, Bound<'py, PyAny>) = row.extract()?;
        let node = legacy_path(b, &steps)?;
        b.add_other(node, if out { 2 } else { 1 }, value.unbind());
        Ok(())
    })
}

/// `add` each row of `rows` (of the `list` part) to `b`; an error names the row.
fn each_row<'py>(
    b: &mut Build<'py>,
    rows: &Bound<'py, PyList>,
    what: &str,
    list: &str,
    mut add: impl FnMut(&mut Build<'py>, &Bound<'py, PyAny>) -> CodecResult<()>,
) -> CodecResult<()> {
    let py = b.py;
    for (i, row) in rows.iter().enumerate() {
        add(b, &row).map_err(|e| bad_row(py, e).prefixed(&format!("{what}: {list}[{i}]")))?;
    }
    Ok(())
}

/// A row's error: a row the restricted reader returned in a shape other than the reference's
/// (Python's `TypeError`, `ValueError` or `OverflowError` while taking it apart) is refused with
/// that as the cause; anything else is passed on.
fn bad_row(py: Python<'_>, e: CodecError) -> CodecError {
    match e {
        CodecError::Python(err)
            if err.is_instance_of::<PyTypeError>(py)
                || err.is_instance_of::<PyValueError>(py)
                || err.is_instance_of::<PyOverflowError>(py) =>
        {
            CodecError::value("not a row as the reference writes it").caused_by(err)
        }
        other => other,
    }
}
