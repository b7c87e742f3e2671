//! The `(Locator, TensorSpec)` pairs a compact metadata handed out through `tensor_data`.
//!
//! Once handed out, those Python specs are the truth: a caller may change their lists, and the
//! metadata then reads the changed values, as the reference's live lists do. The compact form stays
//! beside them and is used as long as the specs still hold what it holds, which [`Handed::intact`]
//! checks without running any Python code: a type and a length per spec for `==`/`hash` (plus the
//! values for the exact kind and for everything else). So `==` and `hash` cost about what they
//! cost before the view was read, until the view is actually changed.

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PyString, PyTuple};

use super::compact::Compact;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::tensor_spec::{dtype_obj, multiplier, Dim, TensorSpec, FIELD_SETS};

/// How much of a spec an operation reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// the rank only (`==` and `hash` of `SampleMetadata`)
    Rank,
    /// the whole shape (`ExactSampleMetadata`)
    Shape,
    /// every field (everything else)
    Full,
}

pub struct Handed {
    pub pairs: Py<PyTuple>,
    pub specs: Vec<Py<TensorSpec>>,
    /// each spec's `shape`, `min_shape`, `max_shape`, `_bs_multipliers` and `dtype` as handed out
    fields: Vec<[Py<PyAny>; 5]>,
    /// [`FIELD_SETS`] when the specs were last seen holding exactly `fields`
    seen: AtomicU64,
}

impl Handed {
    pub fn new(py: Python<'_>, pairs: Py<PyTuple>, specs: Vec<Py<TensorSpec>>) -> PyResult<Handed> {
        let seen = FIELD_SETS.load(Ordering::Relaxed);
        let mut fields = Vec::with_capacity(specs.len());
        for s in &specs {
            let s = s.bind(py).try_borrow()?;
            fields.push(
                [
                    &s.shape,
                    &s.min_shape,
                    &s.max_shape,
                    &s.bs_multipliers,
                    &s.dtype,
                ]
                .map(|f| f.clone_ref(py)),
            );
        }
        Ok(Handed {
            pairs,
            specs,
            fields,
            seen: AtomicU64::new(seen),
        })
    }

    /// Visit every reference held here, for the cycle collector.
    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.pairs)?;
        for s in &self.specs {
            visit.call(s)?;
        }
        for f in self.fields.iter().flatten() {
            visit.call(f)?;
        }
        Ok(())
    }

    /// Whether every handed-out spec still says what `c` says, as far as `level` reads. No Python
    /// code runs: while no `TensorSpec` field was assigned anywhere since the last look, this reads
    /// the lists as handed out (a type, a length, and for `Shape`/`Full` the values); otherwise it
    /// first checks that each spec still holds them.
    pub fn intact(&self, py: Python<'_>, c: &Compact, level: Level) -> bool {
        if self.specs.len() != c.items.len() || self.fields.len() != c.items.len() {
            return false;
        }
        let now = FIELD_SETS.load(Ordering::Relaxed);
        if self.seen.load(Ordering::Relaxed) != now {
            let same = self.specs.iter().zip(&self.fields).all(|(s, f)| {
                s.bind(py).try_borrow().is_ok_and(|s| {
                    s.shape.is(&f[0])
                        && s.min_shape.is(&f[1])
                        && s.max_shape.is(&f[2])
                        && s.bs_multipliers.is(&f[3])
                        && s.dtype.is(&f[4])
                })
            });
            if !same {
                return false;
            }
            self.seen.store(now, Ordering::Relaxed);
        }
        self.fields
            .iter()
            .enumerate()
            .all(|(i, f)| fields_intact(py, c, i, f, level))
    }
}

fn fields_intact(py: Python<'_>, c: &Compact, i: usize, f: &[Py<PyAny>; 5], level: Level) -> bool {
    let Ok(shape) = f[0].bind(py).cast_exact::<PyList>() else {
        return false;
    };
    let Some(item) = c.items.get(i) else {
        return false;
    };
    if shape.len() != item.rank as usize {
        return false;
    }
    if level == Level::Rank {
        return true;
    }
    let rest_intact = |min: &[i64], max: &[i64], mult: &mut dyn Iterator<Item = f64>| {
        ints_are(f[1].bind(py), min)
            && ints_are(f[2].bind(py), max)
            && floats_are(f[3].bind(py), mult)
            && f[4].bind(py).is(dtype_obj(py, item.dtype))
    };
    match c.learned(i) {
        None => {
            let dims = c.dims_of(i);
            ints_are(shape, dims)
                && (level == Level::Shape
                    || rest_intact(
                        dims,
                        dims,
                        &mut dims.iter().map(|&d| multiplier(d, c.batch_size)),
                    ))
        }
        Some(learned) => {
            dims_are(shape, &learned.shape)
                && (level == Level::Shape
                    || rest_intact(
                        &learned.min,
                        &learned.max,
                        &mut learned.mult.iter().copied(),
                    ))
        }
    }
}

/// `list` is a plain list of plain ints equal to `want`.
fn ints_are(list: &Bound<'_, PyAny>, want: &[i64]) -> bool {
    let Ok(list) = list.cast_exact::<PyList>() else {
        return false;
    };
    list.len() == want.len()
        && want.iter().enumerate().all(|(k, &w)| {
            list.get_item(k).is_ok_and(|v| {
                v.cast_exact::<PyInt>()
                    .is_ok_and(|v| v.extract::<i64>().is_ok_and(|v| v == w))
            })
        })
}

/// `list` is a plain list of floats bit-equal to `want` (NaN included).
fn floats_are(list: &Bound<'_, PyAny>, want: &mut dyn Iterator<Item = f64>) -> bool {
    let Ok(list) = list.cast_exact::<PyList>() else {
        return false;
    };
    let mut n = 0;
    for w in want {
        let same = list.get_item(n).is_ok_and(|v| {
            v.cast_exact::<PyFloat>()
                .is_ok_and(|v| v.value().to_bits() == w.to_bits())
        });
        if !same {
            return false;
        }
        n += 1;
    }
    list.len() == n
}

/// `list` (known to be a plain list of the right length) holds the Python form of `want`.
fn dims_are(list: &Bound<'_, PyList>, want: &[Dim]) -> bool {
    let mut text = String::new();
    list.len() == want.len()
        && want.iter().enumerate().all(|(k, w)| {
            list.get_item(k).is_ok_and(|v| match w {
                Dim::Int(w) => v
                    .cast_exact::<PyInt>()
                    .is_ok_and(|v| v.extract::<i64>().is_ok_and(|v| v == *w)),
                other => v.cast_exact::<PyString>().is_ok_and(|v| {
                    text.clear();
                    other.write(&mut text);
                    v.to_str().is_ok_and(|v| v == text)
                }),
            })
        })
}
