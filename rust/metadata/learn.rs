//! `update_shapes_seen`: learning dynamic and batch axes from a later sample.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::key::tensors_eq;
use super::sample::SampleMetadata;
use super::storage::View;
use crate::tensor_spec::{Spec, TensorSpec};

/// One tensor of `self` that learns something from its partner in the later sample.
struct Update<'py> {
    index: usize,
    before: Spec,
    after: Spec,
    /// the Python spec that holds it, which learns it too (none when held compact)
    spec_object: Option<Bound<'py, TensorSpec>>,
}

/// What `update_shapes_seen` will write.
struct Plan<'py> {
    updates: Vec<Update<'py>>,
}

impl<'py> Plan<'py> {
    fn new(a: &View<'_, 'py>, b: &View<'_, 'py>, merges: Vec<(usize, usize)>) -> PyResult<Self> {
        let mut updates = Vec::new();
        for (i, j) in merges {
            if i >= a.n_tensors() || j >= b.n_tensors() {
                continue; // cannot happen: indices come from the same snapshots
            }
            if View::same_fresh_sizes(a, i, b, j) {
                continue; // nothing to learn
            }
            let before = a.spec(i).into_owned();
            let mut after = before.clone();
            if !after.merge(&b.spec(j))? {
                continue;
            }
            updates.push(Update {
                index: i,
                before,
                after,
                spec_object: a.spec_object(i),
            });
        }
        Ok(Plan { updates })
    }
}

impl SampleMetadata {
    /// `update_shapes_seen`: learn dynamic and batch axes from `other`, a later sample with the
    /// same tensors; `ValueError` (showing both) when the tensors differ in locators or ranks.
    pub fn learn_from(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let other = other.cast::<SampleMetadata>().map_err(|_| {
            PyTypeError::new_err(format!(
                "update_shapes_seen expects a SampleMetadata, got {}",
                crate::interp::type_name(other)
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
        let a = me.storage.learning_view(py)?;
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
    /// Write what was learned: into the Python specs that hold it, and into the storage of `slf`
    /// (which must be as it was when the plan was made).
    fn apply(self, slf: &Bound<'_, SampleMetadata>) -> PyResult<()> {
        let py = slf.py();
        let Some(first) = self.updates.first() else {
            return Ok(()); // nothing learned
        };
        let in_python = first.spec_object.is_some(); // all or none: they come from one view
        for u in &self.updates {
            if let Some(target) = &u.spec_object {
                target.try_borrow()?.write_back(py, &u.before, &u.after)?;
            }
        }
        let learned = self.updates.into_iter().map(|u| (u.index, u.after));
        match slf.try_borrow_mut() {
            Ok(mut me) => me.storage.keep_learned(learned, in_python),
            // borrowed elsewhere meanwhile: the Python specs hold what was learned
            Err(_) if in_python => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
