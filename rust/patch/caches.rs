//! The call path's two caches, looked up here so that a warm call goes shim -> core -> backend with
//! no Python frame of ours: the binding plans of call shapes (`_BindCache`) and backends'
//! `describe()` results (`_DescribeCache`). Each is made by `_call_path` when it learns the part
//! that holds it, so it lives as long as that patched period (an unpatch drops the part with it, a
//! patch after it starts empty). Python is called only on a miss: to compile a plan, or to decide
//! whether a pair of classes' descriptions may be kept.
//!
//! Both hold their entries in Python dicts, changed only while the GIL is held, never across a
//! call into Python: a `__del__` run by an entry's release may itself make a tuned call. The
//! describe cache's memo of its last answers is a Rust list under a lock held for no call into
//! Python and no release of a Python object, for the same reason.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyRecursionError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyFrozenSet, PyInt, PyTuple, PyType};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::bind_plan::BindPlan;
use super::guard::{has_any_own, has_own, ClassGuard};
use super::stats;

/// Call shapes kept per forward signature.
pub const MAX_SHAPES: usize = 64;
/// Forward signatures with kept shapes.
pub const MAX_SIGNATURES: usize = 1024;
/// Backend descriptions kept, by backend class, config class and config values.
pub const MAX_DESCRIPTIONS: usize = 4096;
/// Descriptions remembered with the very objects their config held (`DescribeCache`'s memo).
pub const MEMO_SLOTS: usize = 4;

/// The plans (`_BindPlan`) of the call shapes that repeat, per forward signature: a shape's first
/// call binds as stock does (compiling costs more than one stock bind), its second compiles it.
#[pyclass(module = "aitune_fast._core", name = "_BindCache", frozen)]
pub struct BindCache {
    /// AITune's `ForwardSignature`: only its objects are planned
    signature_cls: Py<PyType>,
    /// it still holds the `normalize` the plans were compiled with (AITune's own)
    guard: Py<ClassGuard>,
    /// `compile(signature, n_args, names)`: a shape's plan, or None where it does not bind
    compile: Py<PyAny>,
    /// stands for a shape seen once
    seen_once: Py<PyAny>,
    /// `id(signature)` -> `(signature, {shape: plan | None | seen_once})`
    signatures: Py<PyDict>,
}

#[pymethods]
impl BindCache {
    /// `_BindCache(*, signature_cls, guard, compile)`: empty.
    #[new]
    #[pyo3(signature = (*, signature_cls, guard, compile))]
    fn py_new(
        py: Python<'_>,
        signature_cls: Py<PyType>,
        guard: Py<ClassGuard>,
        compile: Py<PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            signature_cls,
            guard,
            compile,
            seen_once: py.eval(c"object()", None, None)?.unbind(),
            signatures: PyDict::new(py).unbind(),
        })
    }

    /// The plan of this call's shape, or None where stock's `normalize` must bind it: the shape's
    /// first call, a shape that does not bind, a signature whose `normalize` is not AITune's own.
    #[pyo3(signature = (signature, args, kwargs, /))]
    pub fn plan<'py>(
        &self,
        signature: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, BindPlan>>> {
        let py = signature.py();
        if !signature.get_type().is(self.signature_cls.bind(py))
            || !self.guard.get().holds(py)?
            || has_own(signature, intern!(py, "normalize"))?
        {
            return Ok(None);
        }
        let shapes = self.shapes_of(signature)?;
        let mut shape = Vec::with_capacity(1 + kwargs.len());
        shape.push(PyInt::new(py, args.len()).into_any());
        shape.extend(kwargs.keys());
        let shape = PyTuple::new(py, shape)?;
        let found = shapes.get_item(&shape)?;
        if found.is_none() && shapes.len() >= MAX_SHAPES {
            shapes.clear();
        }
        // while dispatch statistics are on, a first call compiles too: every call's backend is then
        // picked (and counted) by the core
        let Some(found) = found.or_else(|| stats::on().then(|| self.seen_once.bind(py).clone()))
        else {
            shapes.set_item(&shape, self.seen_once.bind(py))?;
            return Ok(None);
        };
        let found = if found.is(self.seen_once.bind(py)) {
            let names = PyTuple::new(py, kwargs.keys())?;
            match self.compile.bind(py).call1((signature, args.len(), names)) {
                Ok(plan) => {
                    shapes.set_item(&shape, &plan)?;
                    plan
                }
                // too little stack on this thread to compile: stock binds, a later call compiles
                Err(err) if err.is_instance_of::<PyRecursionError>(py) => return Ok(None),
                Err(err) => return Err(err),
            }
        } else {
            found
        };
        if found.is_none() {
            return Ok(None);
        }
        Ok(Some(found.cast_into::<BindPlan>()?))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.signature_cls)?;
        visit.call(&self.guard)?;
        visit.call(&self.compile)?;
        visit.call(&self.seen_once)?;
        visit.call(&self.signatures)
    }
}

impl BindCache {
    /// The shapes kept for `signature` (by identity: a signature's own `__eq__` never runs).
    fn shapes_of<'py>(&self, signature: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let py = signature.py();
        let signatures = self.signatures.bind(py);
        let id = PyInt::new(py, signature.as_ptr() as usize);
        if let Some(entry) = signatures.get_item(&id)? {
            let entry = entry.cast_into::<PyTuple>()?;
            if entry.get_item(0)?.is(signature) {
                return Ok(entry.get_item(1)?.cast_into::<PyDict>()?);
            }
        }
        if signatures.len() >= MAX_SIGNATURES {
            signatures.clear();
        }
        let shapes = PyDict::new(py);
        signatures.set_item(id, (signature, &shapes))?;
        Ok(shapes)
    }
}

/// Backends' `describe()` results, kept where a description is a function of what the key holds:
/// the backend's class, its config's class and the config's field values (of immutable types, each
/// with its type: `True`, `1` and `1.0` are equal keys but print apart). `decide(backend_cls,
/// config_cls)` says whether a pair of classes may be kept: `(guards, getter)`, where `guards`
/// (None: nothing to watch) says the functions the decision read are still in place, and `getter`
/// (None: call `describe()` every time) gives a config's field values. A call whose config holds
/// the very objects one of the last few calls' configs held gets that call's description without
/// the key being built.
#[pyclass(module = "aitune_fast._core", name = "_DescribeCache", frozen)]
pub struct DescribeCache {
    decide: Py<PyAny>,
    /// the names of the functions a description calls on the config (`_call_path._CONFIG_DESCRIBE`):
    /// one set on the config object itself is not what its class says
    config_functions: Py<PyTuple>,
    /// the types whose values a key may hold
    immutable: Py<PyFrozenSet>,
    /// `(backend_cls, config_cls)` -> `decide`'s answer
    decisions: Py<PyDict>,
    /// `((backend_cls, config_cls), value types, values)` -> the description
    descriptions: Py<PyDict>,
    /// the descriptions last given, newest first, at most `MEMO_SLOTS`: a config whose fields hold
    /// the same objects as one of these gets its description without the key being built. Emptied
    /// with `descriptions`. Locked only to copy an entry in or out (never across a call into
    /// Python; what it drops is dropped after the lock is let go, as a `__del__` may call here).
    memo: Mutex<Vec<Arc<Remembered>>>,
}

/// A description given, with what it was given for: the classes, the decision that let it be kept
/// (`guards`, `getter`) and the config's field values (the objects themselves).
struct Remembered {
    backend_cls: Py<PyType>,
    config_cls: Py<PyType>,
    decision: Decision,
    values: Py<PyTuple>,
    description: Py<PyAny>,
}

/// `decide`'s answer for a pair of classes.
struct Decision {
    /// None, or a tuple of `_ClassGuard`s watching the functions the decision read
    guards: Py<PyAny>,
    /// None (describe every call), or a function giving a config's field values as a tuple
    getter: Py<PyAny>,
}

#[pymethods]
impl DescribeCache {
    /// `_DescribeCache(*, decide, config_functions, immutable)`: empty.
    #[new]
    #[pyo3(signature = (*, decide, config_functions, immutable))]
    fn py_new(
        py: Python<'_>,
        decide: Py<PyAny>,
        config_functions: Py<PyTuple>,
        immutable: Py<PyFrozenSet>,
    ) -> Self {
        Self {
            decide,
            config_functions,
            immutable,
            decisions: PyDict::new(py).unbind(),
            descriptions: PyDict::new(py).unbind(),
            memo: Mutex::new(Vec::new()),
        }
    }

    /// `backend.describe()`, kept where that is a function of the key.
    pub fn describe<'py>(&self, backend: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let call = || backend.call_method0(intern!(py, "describe"));
        let config = backend
            .getattr_opt(intern!(py, "_config"))?
            .unwrap_or_else(|| py.None().into_bound(py));
        // a function its description calls set on the object itself: not what its class says
        if has_own(backend, intern!(py, "describe"))?
            || has_any_own(&config, self.config_functions.bind(py))?
        {
            return call();
        }
        let (backend_cls, config_cls) = (backend.get_type(), config.get_type());
        let mut remembered = self.remembered(&backend_cls, &config_cls);
        let decision = match remembered.first() {
            Some(first) if guards_hold(first.decision.guards.bind(py))? => Decision {
                guards: first.decision.guards.clone_ref(py),
                getter: first.decision.getter.clone_ref(py),
            },
            _ => {
                remembered.clear(); // what a function replaced since made them is not used
                self.decision(&backend_cls, &config_cls)?
            }
        };
        let getter = decision.getter.bind(py);
        if getter.is_none() {
            return call();
        }
        let values = getter.call1((&config,))?.cast_into::<PyTuple>()?;
        if let Some(same) = remembered
            .iter()
            .find(|r| same_objects(&values, r.values.bind(py)))
        {
            return Ok(same.description.bind(py).clone());
        }
        let Some(description) = self.kept(&backend_cls, &config_cls, &values, call)? else {
            return call();
        };
        self.remember(Remembered {
            backend_cls: backend_cls.unbind(),
            config_cls: config_cls.unbind(),
            decision,
            values: values.unbind(),
            description: description.clone().unbind(),
        });
        Ok(description)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.decide)?;
        visit.call(&self.config_functions)?;
        visit.call(&self.immutable)?;
        visit.call(&self.decisions)?;
        visit.call(&self.descriptions)?;
        // a memo being copied now (another thread) is skipped: what it holds then looks held from
        // outside, which keeps it alive (never the other way round)
        if let Ok(memo) = self.memo.try_lock() {
            for remembered in memo.iter() {
                visit.call(&remembered.backend_cls)?;
                visit.call(&remembered.config_cls)?;
                visit.call(&remembered.decision.guards)?;
                visit.call(&remembered.decision.getter)?;
                visit.call(&remembered.values)?;
                visit.call(&remembered.description)?;
            }
        }
        Ok(())
    }
}

impl DescribeCache {
    /// The description kept for these classes and field values, looked up, or made by `call` and
    /// kept; None where a value is not of an immutable type (nothing is kept then).
    fn kept<'py>(
        &self,
        backend_cls: &Bound<'py, PyType>,
        config_cls: &Bound<'py, PyType>,
        values: &Bound<'py, PyTuple>,
        call: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = values.py();
        let immutable = self.immutable.bind(py);
        let mut value_types = Vec::with_capacity(values.len());
        let mut float_zero = false;
        for value in values.iter() {
            let kind = value.get_type();
            if !immutable.contains(&kind)? {
                return Ok(None);
            }
            float_zero |= value
                .cast_exact::<PyFloat>()
                .is_ok_and(|f| f.value() == 0.0);
            value_types.push(kind);
        }
        let values = if float_zero {
            signed_zeros(values)?
        } else {
            values.clone()
        };
        let kind = PyTuple::new(py, [backend_cls, config_cls])?;
        let key = PyTuple::new(
            py,
            [
                kind.into_any(),
                PyTuple::new(py, value_types)?.into_any(),
                values.into_any(),
            ],
        )?;
        let descriptions = self.descriptions.bind(py);
        if let Some(description) = descriptions.get_item(&key)? {
            return Ok(Some(description));
        }
        let description = call()?;
        if descriptions.len() >= MAX_DESCRIPTIONS {
            self.forget(py);
        }
        descriptions.set_item(key, &description)?;
        Ok(Some(description))
    }

    /// The decision for `(backend_cls, config_cls)`: made by `decide` where none was, or where a
    /// function it read was replaced since (which also drops every kept description).
    fn decision(
        &self,
        backend_cls: &Bound<'_, PyType>,
        config_cls: &Bound<'_, PyType>,
    ) -> PyResult<Decision> {
        let py = backend_cls.py();
        let kind = PyTuple::new(py, [backend_cls, config_cls])?;
        let decisions = self.decisions.bind(py);
        let decided = match decisions.get_item(&kind)? {
            Some(decided) if guards_hold(&decided.cast::<PyTuple>()?.get_item(0)?)? => decided,
            kept => {
                if kept.is_some() {
                    self.forget(py);
                }
                let decided = self.decide.bind(py).call1((backend_cls, config_cls))?;
                decisions.set_item(&kind, &decided)?;
                decided
            }
        };
        let decided = decided.cast_into::<PyTuple>()?;
        Ok(Decision {
            guards: decided.get_item(0)?.unbind(),
            getter: decided.get_item(1)?.unbind(),
        })
    }

    /// The remembered descriptions of this pair of classes, newest first (copies: the lock is let
    /// go before anything is called).
    fn remembered(
        &self,
        backend_cls: &Bound<'_, PyType>,
        config_cls: &Bound<'_, PyType>,
    ) -> Vec<Arc<Remembered>> {
        self.memo()
            .iter()
            .filter(|r| r.backend_cls.is(backend_cls) && r.config_cls.is(config_cls))
            .cloned()
            .collect()
    }

    /// `remembered` first in the memo; the oldest past `MEMO_SLOTS` dropped (after the lock).
    fn remember(&self, remembered: Remembered) {
        let remembered = Arc::new(remembered);
        let dropped = {
            let mut memo = self.memo();
            memo.insert(0, remembered);
            let kept = memo.len().min(MEMO_SLOTS);
            memo.split_off(kept)
        };
        drop(dropped);
    }

    /// Every kept description dropped, and the memo with them (after the lock).
    fn forget(&self, py: Python<'_>) {
        self.descriptions.bind(py).clear();
        let dropped = std::mem::take(&mut *self.memo());
        drop(dropped);
    }

    /// The memo, locked. No lock is held across a call into Python or a drop of a Python object,
    /// so a wait here is short; a panic while it was held left it whole (each change is one step).
    fn memo(&self) -> MutexGuard<'_, Vec<Arc<Remembered>>> {
        self.memo.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether two tuples hold the very same objects, in order.
fn same_objects(values: &Bound<'_, PyTuple>, kept: &Bound<'_, PyTuple>) -> bool {
    values.len() == kept.len() && values.iter().zip(kept.iter()).all(|(a, b)| a.is(&b))
}

/// Whether `guards` (None, or a tuple of `_ClassGuard`s) all hold.
fn guards_hold(guards: &Bound<'_, PyAny>) -> PyResult<bool> {
    if guards.is_none() {
        return Ok(true);
    }
    let py = guards.py();
    for guard in guards.cast::<PyTuple>()?.iter() {
        if !guard.cast::<ClassGuard>()?.get().holds(py)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `values` with each float zero paired with its sign: `0.0` and `-0.0` are equal keys but print
/// apart.
fn signed_zeros<'py>(values: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyTuple>> {
    let py = values.py();
    let mut out = Vec::with_capacity(values.len());
    for value in values.iter() {
        match value.cast_exact::<PyFloat>() {
            Ok(float) if float.value() == 0.0 => {
                let sign = PyFloat::new(py, 1.0_f64.copysign(float.value()));
                out.push(PyTuple::new(py, [value.clone(), sign.into_any()])?.into_any());
            }
            _ => out.push(value),
        }
    }
    PyTuple::new(py, out)
}
