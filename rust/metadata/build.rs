//! Building a metadata from a walk: the `Builder` visitor reads each tensor into compact form,
//! the batch size, and the LLM phase from `cache_position`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};

use super::reuse;
use super::storage::{Compact, Storage};
use crate::interp::{context_batch_size, interp};
use crate::paths::{Accessor, Arena, Kind, SharedArena};
use crate::tensor_spec::{read_tensor, DtypeMemo, FOREIGN_DTYPE};
use crate::walk::registry::TypeInfo;
use crate::walk::traversal::{walk, Visitor};

struct Builder {
    c: Compact,
    strict: bool,
    check_cache_position: bool,
    cache_position: Option<Py<PyAny>>,
    dtypes: DtypeMemo,
    /// only Python specs can hold this metadata: a tensor with symbolic sizes or a dtype that is
    /// not a torch.dtype was met, or the batch size is a number of another type
    symbolic: bool,
}

impl Visitor for Builder {
    #[inline(always)]
    fn leaf(
        &mut self,
        py: Python<'_>,
        arena: &mut Arena,
        step: Option<(u32, Accessor, Kind)>,
        value: &Bound<'_, PyAny>,
        info: &TypeInfo,
        under_cp: bool,
    ) -> PyResult<bool> {
        if self.check_cache_position && under_cp {
            self.cache_position = Some(value.clone().unbind());
        }
        if self.symbolic || (!info.is_tensor && !self.strict) {
            return Ok(false);
        }
        let node = arena.push_leaf(py, step)?;
        if !info.is_tensor {
            self.c.others.push((node, value.clone().unbind()));
            return Ok(false);
        }
        if self.c.batch_size == 0.0
            && value
                .getattr(pyo3::intern!(py, "ndim"))?
                .extract::<usize>()?
                > 0
        {
            return Err(pyo3::exceptions::PyZeroDivisionError::new_err(
                "division by zero",
            ));
        }
        let asked = self.dtypes.python_reads();
        // the sizes go straight to the end of the shared pool; a failed read leaves them
        // there, but then the walk's result is dropped
        let off = self.c.dims.len();
        let Some(dtype) = read_tensor(
            py,
            value,
            info.fast_tensor,
            &mut self.c.dims,
            &mut self.dtypes,
        )?
        else {
            self.symbolic = true; // `build` starts over with Python specs
            return Ok(true);
        };
        let ran = self.dtypes.python_reads() != asked || self.c.batch_size == 0.0;
        if dtype == FOREIGN_DTYPE {
            // not a torch dtype: only a Python spec can hold it
            self.symbolic = true;
            return Ok(ran);
        }
        self.c.push_tail(node, off, dtype)?;
        Ok(ran)
    }
}

/// A walked metadata: compact, or held as Python pairs when a tensor has symbolic sizes.
pub struct Built {
    pub storage: Storage,
    pub cache_position: Option<Py<PyAny>>,
}

/// The batch size the sizes are divided by. `size / batch_size` keeps the type of a batch size
/// that is not a Python int or float (a numpy scalar, a 0-d tensor, a `Fraction`, a `Decimal`):
/// such multipliers only Python specs hold.
pub enum BatchSize {
    Float(f64),
    Number(Py<PyAny>),
}

/// Walk `obj` into a compact metadata.
pub fn build(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    strict: bool,
    batch_size: &BatchSize,
    is_output: bool,
    check_cp: bool,
) -> PyResult<Built> {
    // sized like the previous walk on this thread, repeating its paths while it can (see `reuse`)
    let hint = reuse::size_hint();
    let mut arena = Arena::replaying(reuse::last_paths(py, is_output), hint.nodes);
    // the placeholder stands in for the arena while the walk builds it
    let c = Compact::with_capacity(SharedArena::empty(py), is_output, hint.items, hint.dims);
    let mut b = Builder {
        c,
        strict,
        check_cache_position: check_cp,
        cache_position: None,
        dtypes: DtypeMemo::default(),
        // a batch size of another number type: the walk only looks for the cache position
        symbolic: matches!(batch_size, BatchSize::Number(_)),
    };
    if let BatchSize::Float(value) = batch_size {
        b.c.batch_size = *value;
    }
    walk(py, obj, false, &mut arena, &mut b)?;
    if b.symbolic {
        return Ok(Built {
            storage: build_with_python_specs(py, obj, strict, batch_size, is_output)?,
            cache_position: b.cache_position,
        });
    }
    reuse::note_size(reuse::SizeHint {
        nodes: arena.len(),
        items: b.c.items.len(),
        dims: b.c.dims.len(),
    });
    let shared = arena.finish(py)?;
    reuse::keep_paths(py, is_output, &shared);
    b.c.arena = shared;
    Ok(Built {
        storage: Storage::compact(b.c),
        cache_position: b.cache_position,
    })
}

/// The reference's way, for arguments holding traced tensors: `(Locator, TensorSpec)` pairs whose
/// specs keep the symbolic sizes as they are (never converted, so no guard is added).
fn build_with_python_specs(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    strict: bool,
    batch_size: &BatchSize,
    is_output: bool,
) -> PyResult<Storage> {
    let it = interp(py)?;
    let batch_size = match batch_size {
        BatchSize::Float(value) => value.into_pyobject(py)?.into_any(),
        BatchSize::Number(number) => number.bind(py).clone(),
    };
    let mut tensors = Vec::new();
    let mut others = Vec::new();
    for pair in crate::walk::traversal::find_leaves(py, obj, false, is_output)?.iter() {
        let (loc, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
        if value.is_instance(it.tensor_type.bind(py))? {
            let spec = it.reference_spec.bind(py).call1((&value, &batch_size))?;
            tensors.push(PyTuple::new(py, [loc, spec])?);
        } else if strict {
            others.push(PyTuple::new(py, [loc, value])?);
        }
    }
    Ok(Storage::python(
        PyTuple::new(py, tensors)?.into_any().unbind(),
        PyTuple::new(py, others)?.into_any().unbind(),
    ))
}

/// The `strict` argument of the constructors and `from_inputs`/`from_outputs`: its truth value,
/// `False` when not given.
pub fn strict_flag(strict: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    match strict {
        Some(s) => s.is_truthy(),
        None => Ok(false),
    }
}

/// Ints up to this size divide as floats exactly as Python divides them.
const EXACT_FLOAT_INT: i64 = 1 << 53;

/// `batch_size or global_context.get(BATCH_SIZE_KEY, nan)`: a float where dividing by it gives
/// what Python gives (a float, a bool, an int up to 2**53), else the number itself.
pub fn resolve_batch_size(
    py: Python<'_>,
    batch_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<BatchSize> {
    let chosen = match batch_size {
        Some(b) if b.is_truthy()? => Some(b.clone()),
        _ => context_batch_size(py)?,
    };
    let Some(v) = chosen else {
        return Ok(BatchSize::Float(f64::NAN));
    };
    if v.is_exact_instance_of::<PyInt>() {
        return Ok(match v.extract::<i64>() {
            Ok(n) if n.abs() <= EXACT_FLOAT_INT => BatchSize::Float(n as f64),
            _ => BatchSize::Number(v.unbind()),
        });
    }
    if v.is_exact_instance_of::<PyFloat>() || v.is_exact_instance_of::<PyBool>() {
        return Ok(BatchSize::Float(v.extract()?));
    }
    if v.extract::<f64>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "batch size must be a number, got {}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    Ok(BatchSize::Number(v.unbind()))
}

pub fn phase_of(py: Python<'_>, cache_position: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let it = interp(py)?;
    if let Some(first) = crate::reader::first_int(py, cache_position)? {
        return Ok(if first == 0 {
            it.prefill.clone_ref(py).into_any()
        } else {
            it.decode.clone_ref(py).into_any()
        });
    }
    let first = cache_position
        .get_item(0)?
        .call_method0(pyo3::intern!(py, "item"))?;
    let zero = 0i64.into_pyobject(py)?;
    Ok(if first.eq(zero)? {
        it.prefill.clone_ref(py).into_any()
    } else {
        it.decode.clone_ref(py).into_any()
    })
}
