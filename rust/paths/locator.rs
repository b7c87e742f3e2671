//! [`Locator`], the Python face of one arena node, and reading and writing the value a path
//! points to. Its Python methods are in `api/locator.rs` (with the staticmethods that walk).

use std::ops::Deref;
use std::sync::{LazyLock, OnceLock};

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError};
use pyo3::prelude::*;

use pyo3::types::{PyString, PyTuple};

use super::arena::Arena;
use super::shared::SharedArena;

/// A path into a nested structure of arguments or outputs.
///
/// Built from `((accessor, ObjectType), ...)` steps; equal when the steps are equal (whether the
/// locator points into outputs does not matter for equality, only for `display_path`).
///
/// Immutable.
#[pyclass(
    module = "aitune_fast.locator",
    name = "Locator",
    frozen,
    subclass,
    weakref
)]
pub struct Locator {
    /// Empty only in a blank locator (`Locator.__new__(Locator)`, as unpickling a stock AITune
    /// `Locator` makes one), which reads as the empty path until `__setstate__` sets it, once.
    data: OnceLock<LocatorData>,
}

/// What a [`Locator`] says: a node of a path arena; read through `Deref`.
pub struct LocatorData {
    pub arena: SharedArena,
    pub node: u32,
    pub is_output: bool,
}

/// What a blank locator reads as: the empty path.
static BLANK: LazyLock<LocatorData> = LazyLock::new(|| LocatorData {
    // a Locator is only read with the GIL held; the arena, made once, is never freed
    arena: Python::attach(|py| SharedArena::new(py, Arena::new()))
        .expect("allocating the blank locator's arena"),
    node: super::arena::ROOT,
    is_output: false,
});

impl Deref for Locator {
    type Target = LocatorData;

    fn deref(&self) -> &LocatorData {
        self.data.get().unwrap_or(&BLANK)
    }
}

impl Locator {
    pub fn new_in(arena: SharedArena, node: u32, is_output: bool) -> Locator {
        Locator {
            data: OnceLock::from(LocatorData {
                arena,
                node,
                is_output,
            }),
        }
    }

    /// A locator to be set once by [`Locator::fill`].
    pub fn blank() -> Locator {
        Locator {
            data: OnceLock::new(),
        }
    }

    /// Set a blank locator to what `from` says; false (nothing changed) unless it was blank.
    pub fn fill(&self, from: Locator) -> bool {
        match from.data.into_inner() {
            Some(d) => self.data.set(d).is_ok(),
            None => false,
        }
    }

    /// For the cycle collector: its arena, if it has one of its own (a blank locator's is shared
    /// by all and made on first read, which may not happen here: the collector forbids the GIL).
    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        match self.data.get() {
            Some(d) => d.arena.visit(visit),
            None => Ok(()),
        }
    }

    pub fn steps(&self) -> Vec<u32> {
        self.arena.chain(self.node)
    }
}

/// One step down: `obj[key]` or `getattr(obj, name)`, with errors that say which step failed.
pub fn step_into<'py>(
    py: Python<'py>,
    arena: &Arena,
    step: u32,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = arena.node(step);
    let key = n.acc.to_py(py);
    if n.kind.is_attribute() {
        let name = key.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "attribute names are strings, the locator holds {}",
                key.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        obj.getattr(name)
    } else {
        obj.get_item(&key).map_err(|e| {
            if e.is_instance_of::<PyKeyError>(py) || e.is_instance_of::<PyIndexError>(py) {
                let msg = format!(
                    "locator {} does not resolve: {} has no item {}",
                    arena.display_path_lossy(py, step, false),
                    crate::interp::type_name(obj),
                    key.repr().map(|r| r.to_string()).unwrap_or_default()
                );
                if e.is_instance_of::<PyKeyError>(py) {
                    PyKeyError::new_err(msg)
                } else {
                    PyIndexError::new_err(msg)
                }
            } else {
                e
            }
        })
    }
}

pub fn set_value<'py>(
    py: Python<'py>,
    arena: &Arena,
    steps: &[u32],
    root: Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if steps.is_empty() {
        return Ok(value);
    }
    // the containers along the path: parents[i] holds step i
    let mut parents = Vec::with_capacity(steps.len());
    let mut cur = root.clone();
    for &s in &steps[..steps.len() - 1] {
        parents.push(cur.clone());
        cur = step_into(py, arena, s, &cur)?;
    }
    parents.push(cur);
    let mut new_value = value;
    for i in (0..steps.len()).rev() {
        let container = &parents[i];
        let n = arena.node(steps[i]);
        let key = n.acc.to_py(py);
        if n.kind.is_attribute() {
            container.setattr(key.cast::<PyString>()?, new_value)?;
            return Ok(root);
        } else if container.is_instance_of::<PyTuple>() {
            let mut items: Vec<Bound<'py, PyAny>> =
                container.try_iter()?.collect::<PyResult<_>>()?;
            let len = items.len() as i64;
            let idx = key.extract::<i64>()?;
            let j = if idx < 0 { idx + len } else { idx };
            if j < 0 || j >= len {
                return Err(PyIndexError::new_err("list assignment index out of range"));
            }
            items[j as usize] = new_value;
            new_value = PyTuple::new(py, items)?.into_any();
            if i == 0 {
                return Ok(new_value);
            }
        } else {
            container.set_item(key, new_value)?;
            return Ok(root);
        }
    }
    unreachable!("the loop returns at the root")
}
