//! `update_shapes_seen`: learning dynamic and batch axes from a later sample.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::key::tensors_eq;
use super::sample::{Data, SampleMetadata};
use super::view::View;
use crate::tensor_spec::{Spec, TensorSpec};

/// What `update_shapes_seen` will write: `(index, spec before, spec after)` for each tensor of
/// `self` that learns something, and for Python specs the objects to write into.
struct Plan<'py> {
    updates: Vec<(usize, Spec, Spec)>,
    /// `None` for compact metadata
    targets: Option<Vec<Bound<'py, TensorSpec>>>,
}

impl<'py> Plan<'py> {
    fn new(a: &View<'_, 'py>, b: &View<'_, 'py>, merges: Vec<(usize, usize)>) -> PyResult<Self> {
        let mut updates = Vec::new();
        let mut targets = match a {
            View::C(_) => None,
            View::P(_) => Some(Vec::new()),
        };
        for (i, j) in merges {
            if i >= a.n_tensors() || j >= b.n_tensors() {
                continue; // cannot happen: indices come from the same snapshots
            }
            if let (View::C(x), View::C(y)) = (a, b) {
                if x.learned(i).is_none() && y.learned(j).is_none() && x.dims_of(i) == y.dims_of(j)
                {
                    continue; // same sizes: nothing to learn
                }
            }
            let before = a.spec(i).into_owned();
            let mut after = before.clone();
            if !after.merge(&b.spec(j))? {
                continue;
            }
            if let (Some(t), View::P(p)) = (&mut targets, a) {
                t.push(p.tensors[i].1.clone());
            }
            updates.push((i, before, after));
        }
        Ok(Plan { updates, targets })
    }
}

impl SampleMetadata {
    /// `update_shapes_seen`: learn dynamic and batch axes from `other`, a later sample with the
    /// same tensors; `ValueError` (showing both) when the tensors differ in locators or ranks.
    pub fn learn_from(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let other = other.downcast::<SampleMetadata>().map_err(|_| {
            PyTypeError::new_err(format!(
                "update_shapes_seen expects a SampleMetadata, got {}",
                other
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if slf.is(other) {
            return Ok(());
        }
        let mismatch = || -> PyResult<PyErr> {
            Ok(PyValueError::new_err(format!(
                "Cannot update shapes seen, because tensor data is different, {} != {}",
                Self::describe_at(slf, 2)?,
                Self::describe_at(other, 2)?
            )))
        };
        match Self::plan_learning(slf, other)? {
            Some(plan) => plan.apply(slf),
            None => Err(mismatch()?),
        }
    }

    /// What `slf` learns from `other`; `None` when their tensors differ in locators or ranks.
    fn plan_learning<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, SampleMetadata>,
    ) -> PyResult<Option<Plan<'py>>> {
        let py = slf.py();
        // every index below refers to the snapshots `a` and `b`: Python code that runs meanwhile (a
        // key's `__eq__`, a list's `__iter__`, another thread) may change the metadata's lists, and
        // what changed in the compact form is checked again before it is written
        let me = slf.try_borrow()?;
        let them = other.try_borrow()?;
        // handed-out specs are the truth: they are the ones that learn
        let a = match (&me.data, me.handed.get()) {
            (Data::Compact(_), Some(h)) => me.handed_view(py, h)?,
            _ => me.view(py)?,
        };
        let b = them.view(py)?;
        match tensor_partners(py, &a, &b)? {
            Some(merges) => Ok(Some(Plan::new(&a, &b, merges)?)),
            None => Ok(None),
        }
    }
}

/// The pairs `(i, j)` of tensors at equal paths in `a` and `b` (`i` in `a`, `j` in `b`); `None`
/// when the tensors differ in locators or ranks.
fn tensor_partners(
    py: Python<'_>,
    a: &View<'_, '_>,
    b: &View<'_, '_>,
) -> PyResult<Option<Vec<(usize, usize)>>> {
    // the aligned fast path may hand over a prefix before the general path runs: keep the last
    // partner of each tensor
    let mut partner: Vec<Option<usize>> = vec![None; a.n_tensors()];
    let equal = tensors_eq(py, a, b, |i, j| {
        if let Some(slot) = partner.get_mut(i) {
            *slot = Some(j);
        }
        Ok(a.rank(i) == b.rank(j))
    })?;
    Ok(equal.then(|| {
        partner
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.map(|j| (i, j)))
            .collect()
    }))
}

impl Plan<'_> {
    /// Write what was learned: into the Python specs, or into the compact form of `slf` (which
    /// must be as it was when the plan was made).
    fn apply(self, slf: &Bound<'_, SampleMetadata>) -> PyResult<()> {
        let py = slf.py();
        match self.targets {
            Some(targets) => {
                for ((_, before, after), target) in self.updates.iter().zip(targets) {
                    target.try_borrow()?.write_back(py, before, after)?;
                }
                // handed-out specs of a compact metadata: let the compact form learn the same, so
                // that it keeps serving while the specs say what it says (checked on every use)
                if let Ok(mut me) = slf.try_borrow_mut() {
                    if me.is_handed_out() {
                        if let Data::Compact(c) = &mut me.data {
                            for (i, _, after) in self.updates {
                                if i < c.items.len() {
                                    c.set_learned(i, after);
                                }
                            }
                        }
                    }
                }
            }
            None => {
                let changed = || {
                    PyRuntimeError::new_err(
                        "SampleMetadata changed during update_shapes_seen (by code that ran meanwhile)",
                    )
                };
                let mut me = slf.try_borrow_mut()?;
                if me.is_handed_out() {
                    return Err(changed());
                }
                let Data::Compact(c) = &mut me.data else {
                    return Err(changed());
                };
                for (i, _, after) in self.updates {
                    if i >= c.items.len() {
                        return Err(changed());
                    }
                    c.set_learned(i, after);
                }
            }
        }
        Ok(())
    }
}
