//! Where a metadata's data lives. It has two forms, and this folder is the only code that tells
//! them apart; every operation (`==`, `hash`, `update_shapes_seen`, `describe`, the codecs) reads
//! a metadata through the [`View`] that [`Storage::view`] gives and writes what it learned
//! through [`Storage::keep_learned`].
//!
//! - *compact* ([`Compact`]): what a walk builds. No Python object per tensor until a caller asks
//!   for `tensor_data`; the `(Locator, TensorSpec)` pairs it then hands out ([`Handed`]) are the
//!   truth from then on (mutating a spec's lists changes the metadata, as in the reference), and
//!   the compact form serves every operation while those specs still hold what it holds.
//! - *Python pairs*: `(Locator, TensorSpec)` and `(Locator, value)` pairs, as a user gave them to
//!   the constructor (or as a walk over traced tensors made them), read as they are each time.
//!
//! - `compact`: [`Compact`], the storage a walk builds.
//! - `handed`: the pairs handed out through `tensor_data`, and whether they still say what the
//!   compact form says.
//! - `view`: [`View`], the one interface operations read, and reading Python pairs.

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{PyTraverseError, PyVisit};

mod compact;
mod handed;
mod view;

pub use compact::{Compact, Item, RANK_LIMIT_MESSAGE};
pub use handed::Level;
pub use view::{pair, py_view, Fresh, Loc, Part, SpecCells, View};

use crate::paths::{Locator, SharedArena};
use crate::tensor_spec::Spec;
use handed::Handed;

enum Data {
    Compact(Compact),
    /// `(Locator, TensorSpec)` and `(Locator, value)` pairs, as given
    Py {
        tensors: Py<PyAny>,
        others: Py<PyAny>,
    },
}

/// A metadata's tensors and other values, in one of the two forms, with the Python pairs a compact
/// one handed out.
pub struct Storage {
    data: Data,
    /// compact: the `(Locator, value)` pairs `other_data` handed out
    other_cache: OnceLock<Py<PyTuple>>,
    /// compact: the `(Locator, TensorSpec)` pairs `tensor_data` handed out (boxed: most metadata
    /// never hands any out, and a smaller `Storage` moves faster from the walk into its object)
    handed: OnceLock<Box<Handed>>,
}

fn changed() -> PyErr {
    PyRuntimeError::new_err(
        "SampleMetadata changed during update_shapes_seen (by code that ran meanwhile)",
    )
}

impl Storage {
    pub fn compact(c: Compact) -> Storage {
        Self::of(Data::Compact(c))
    }

    /// Python `(Locator, TensorSpec)` and `(Locator, value)` pairs, kept as given (validated by
    /// the caller).
    pub fn python(tensors: Py<PyAny>, others: Py<PyAny>) -> Storage {
        Self::of(Data::Py { tensors, others })
    }

    /// No tensors and no other values.
    pub fn empty(py: Python<'_>) -> Storage {
        Self::compact(Compact::new_in(SharedArena::empty(py), false))
    }

    fn of(data: Data) -> Storage {
        Storage {
            data,
            other_cache: OnceLock::new(),
            handed: OnceLock::new(),
        }
    }

    /// The form an operation reading `level` of each spec reads: the compact one while it says
    /// what the handed-out specs (if any) say, the Python objects otherwise.
    #[inline(always)]
    pub fn view<'a, 'py>(&'a self, py: Python<'py>, level: Level) -> PyResult<View<'a, 'py>> {
        match &self.data {
            Data::Compact(c) => match self.handed.get() {
                Some(h) if !h.intact(py, c, level) => self.handed_view(py, h),
                _ => Ok(View::C(c)),
            },
            Data::Py { tensors, others } => Self::py_data_view(py, tensors, others),
        }
    }

    #[inline(never)]
    fn py_data_view<'a, 'py>(
        py: Python<'py>,
        tensors: &Py<PyAny>,
        others: &Py<PyAny>,
    ) -> PyResult<View<'a, 'py>> {
        Ok(View::P(py_view(py, tensors.bind(py), others.bind(py))?))
    }

    /// The view whose specs `update_shapes_seen` changes: the handed-out Python specs where there
    /// are any (they are the truth), else as [`Storage::view`].
    pub fn learning_view<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<View<'a, 'py>> {
        match (&self.data, self.handed.get()) {
            (Data::Compact(_), Some(h)) => self.handed_view(py, h),
            _ => self.view(py, Level::Full),
        }
    }

    #[inline(never)]
    fn handed_view<'a, 'py>(&'a self, py: Python<'py>, h: &Handed) -> PyResult<View<'a, 'py>> {
        let others = self.others_tuple(py)?;
        Ok(View::P(py_view(py, h.pairs.bind(py).as_any(), &others)?))
    }

    /// Keep what `update_shapes_seen` learned, `(tensor index, spec)`, read from a
    /// [`Storage::learning_view`]; `in_python`: that view held Python specs, which already hold it
    /// (a compact form beside them learns the same, so that it keeps serving while they say what
    /// it says). A compact view must still be the truth, with every index in range.
    pub fn keep_learned(
        &mut self,
        learned: impl Iterator<Item = (usize, Spec)>,
        in_python: bool,
    ) -> PyResult<()> {
        let handed_out = self.handed.get().is_some();
        let Data::Compact(c) = &mut self.data else {
            return if in_python { Ok(()) } else { Err(changed()) };
        };
        if in_python != handed_out {
            // Python specs learned but none were handed out: they were a user's own, nothing to
            // mirror; compact learned but specs were handed out meanwhile: they are the truth now
            return if in_python { Ok(()) } else { Err(changed()) };
        }
        for (i, spec) in learned {
            if i < c.items.len() {
                c.set_learned(i, spec);
            } else if !in_python {
                return Err(changed());
            }
        }
        Ok(())
    }

    /// The `(Locator, value)` pairs: made once for compact metadata, then the same objects.
    pub fn others_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = match &self.data {
            Data::Py { others, .. } => return Ok(others.bind(py).clone()),
            Data::Compact(c) => c,
        };
        if let Some(t) = self.other_cache.get() {
            return Ok(t.bind(py).clone().into_any());
        }
        let pairs = c
            .others
            .iter()
            .map(|(node, v)| {
                let loc = Bound::new(
                    py,
                    Locator::new_in(c.arena.clone_ref(py), *node, c.is_output),
                )?;
                PyTuple::new(py, [loc.into_any(), v.bind(py).clone()])
            })
            .collect::<PyResult<Vec<_>>>()?;
        let t = PyTuple::new(py, pairs)?;
        // another thread may have made them meanwhile (Python code ran): keep the first
        let _ = self.other_cache.set(t.clone().unbind());
        match self.other_cache.get() {
            Some(first) => Ok(first.bind(py).clone().into_any()),
            None => Ok(t.into_any()),
        }
    }

    /// The `(Locator, TensorSpec)` pairs: made once for compact metadata, then the same objects
    /// (which are the truth from then on).
    pub fn tensors_tuple<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = match &self.data {
            Data::Py { tensors, .. } => return Ok(tensors.bind(py).clone()),
            Data::Compact(c) => c,
        };
        if let Some(h) = self.handed.get() {
            return Ok(h.pairs.bind(py).clone().into_any());
        }
        self.others_tuple(py)?; // handed-out views read `other_data` as handed out too
        let (pairs, specs) = c.hand_out(py)?;
        // another thread may have made them meanwhile (Python code ran): keep the first
        let _ = self
            .handed
            .set(Box::new(Handed::new(py, pairs.clone().unbind(), specs)?));
        match self.handed.get() {
            Some(first) => Ok(first.pairs.bind(py).clone().into_any()),
            None => Ok(pairs.into_any()),
        }
    }

    /// The `(Locator, TensorSpec)` pairs pickling writes: the Python pairs if there are any,
    /// else fresh ones (a compact metadata is left as it is).
    pub fn pickled_tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match (&self.data, self.handed.get()) {
            (Data::Py { tensors, .. }, _) => tensors.bind(py).clone(),
            (Data::Compact(_), Some(h)) => h.pairs.bind(py).clone().into_any(),
            (Data::Compact(c), None) => c.tensor_pairs(py)?.into_any(),
        })
    }

    /// For the cycle collector: the references held here (a compact form's path arena among them).
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match &self.data {
            Data::Compact(c) => {
                for (_, v) in &c.others {
                    visit.call(v)?;
                }
                c.arena.visit(visit)?;
            }
            Data::Py { tensors, others } => {
                visit.call(tensors)?;
                visit.call(others)?;
            }
        }
        if let Some(t) = self.other_cache.get() {
            visit.call(t)?;
        }
        if let Some(h) = self.handed.get() {
            h.traverse(visit)?;
        }
        Ok(())
    }
}
