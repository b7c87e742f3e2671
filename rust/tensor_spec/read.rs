//! Reading a tensor's sizes and dtype during a walk: a fast reader (`reader/`) when it may, the
//! Python attributes otherwise; [`DtypeMemo`] keeps a walk's dtype ids.

use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple};

use super::dtype::{dtype_id, FOREIGN_DTYPE};

/// Per-walk memo of dtype ids, so the shared table is locked once per distinct dtype; whether
/// the fast tensor reader may read this walk's tensors (asked once per walk); and how many reads
/// asked Python (see [`DtypeMemo::python_reads`]).
#[derive(Default)]
pub struct DtypeMemo(SmallMap, Option<bool>, u32);

/// `(dtype address, id)` pairs: the first few inline (no allocation for a typical call). Only ids
/// of the shared table, whose objects the table holds for good, are kept: the address of any other
/// object could be taken by another one once it is freed.
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
        self.2 += 1; // `dtype_id` may ask the object (`isinstance`, `str`)
        let id = dtype_id(obj)?;
        if id != FOREIGN_DTYPE {
            self.0.push(ptr, id);
        }
        Ok(id)
    }

    /// How many times reads through this memo asked Python (attribute reads, dtype lookups), any
    /// of which may have run Python code: a walk compares it before and after a read.
    #[inline]
    pub fn python_reads(&self) -> u32 {
        self.2
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
                None => {
                    memo.2 += 1;
                    memo.id(&tensor.getattr(pyo3::intern!(py, "dtype"))?)?
                }
            }));
        }
    }
    memo.2 += 1;
    let start = dims.len();
    let shape = tensor
        .getattr(pyo3::intern!(py, "shape"))
        .map_err(|err| no_shape(py, tensor, err))?;
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
    if let Ok(t) = shape.cast::<PyTuple>() {
        for d in t.iter_borrowed() {
            if !take(&d)? {
                return Ok(None);
            }
        }
    } else if let Ok(l) = shape.cast::<PyList>() {
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

/// torch refuses the sizes of a nested tensor of the strided layout with "Internal error: NestedTensorImpl doesn't
/// support sizes. Please file an issue." (the reference passes that on): a `TypeError` saying what is not supported
/// and what is, torch's error as its cause. Any other tensor's error is returned as it is.
fn no_shape(py: Python<'_>, tensor: &Bound<'_, PyAny>, err: PyErr) -> PyErr {
    let nested = tensor
        .getattr(pyo3::intern!(py, "is_nested"))
        .and_then(|v| v.is_truthy())
        .unwrap_or(false);
    if !nested {
        return err;
    }
    let ours = pyo3::exceptions::PyTypeError::new_err(
        "a nested tensor of the torch.strided layout has no shape (torch gives none), so aitune_fast cannot \
         describe it: make it with layout=torch.jagged, whose shape has a symbolic ragged axis",
    );
    ours.set_cause(py, Some(err));
    ours
}
