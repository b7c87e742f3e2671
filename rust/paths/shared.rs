//! [`SharedArena`]: a finished path arena as its holders (metadata, locators, a thread's last walk)
//! share it.
//!
//! The arena lives in a Python object, so that the cycle collector sees the truth: each holder
//! visits its own reference to that object, and the object visits the dict keys its steps hold,
//! once. A cycle through a key (`k.md = from_inputs({"d": {k: t}})`) is then freed however many
//! metadata and locators share the arena.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{PyTraverseError, PyVisit};

use super::arena::Arena;

/// The Python object an arena lives in; never seen from Python code.
#[pyclass(frozen, module = "aitune_fast._core", name = "_PathArena")]
pub struct ArenaObject {
    arena: Arena,
    /// Unique for the life of the process: [`Arena::twins`] remembers arenas by it, so a later
    /// arena at a freed one's address is never taken for it.
    serial: u64,
}

#[pymethods]
impl ArenaObject {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.arena.traverse_objects(&visit)
    }
}

/// A reference to a finished arena; read it through `Deref`.
pub struct SharedArena(Py<ArenaObject>);

impl Deref for SharedArena {
    type Target = Arena;

    #[inline]
    fn deref(&self) -> &Arena {
        &self.0.get().arena
    }
}

impl SharedArena {
    pub fn new(py: Python<'_>, arena: Arena) -> PyResult<SharedArena> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        Ok(SharedArena(Py::new(py, ArenaObject { arena, serial })?))
    }

    /// An arena with no nodes at all, not even the root: a placeholder, never walked into (one
    /// for the process).
    pub fn empty(py: Python<'_>) -> SharedArena {
        static EMPTY: PyOnceLock<Py<ArenaObject>> = PyOnceLock::new();
        let arena = EMPTY.get_or_init(py, || {
            SharedArena::new(py, Arena::empty())
                .expect("allocating the placeholder arena")
                .0
        });
        SharedArena(arena.clone_ref(py))
    }

    #[inline]
    pub fn clone_ref(&self, py: Python<'_>) -> SharedArena {
        SharedArena(self.0.clone_ref(py))
    }

    #[inline]
    pub fn ptr_eq(a: &SharedArena, b: &SharedArena) -> bool {
        a.0.is(&b.0)
    }

    pub fn serial(&self) -> u64 {
        self.0.get().serial
    }

    /// For the cycle collector, from a Python object that holds this reference.
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.0)
    }
}
