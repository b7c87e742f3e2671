//! The call path's two caches, looked up here so that a warm call goes shim -> core -> backend with
//! no Python frame of ours: the binding plans of call shapes (`_BindCache`) and backends'
//! `describe()` results (`_DescribeCache`). Each is made by `_call_path` when it learns the part
//! that holds it, so it lives as long as that patched period (an unpatch drops the part with it, a
//! patch after it starts empty). Python is called only on a miss: to compile a plan, or to decide
//! whether a pair of classes' descriptions may be kept.
//!
//! Both hold their entries in Python dicts, changed only while the GIL is held, never across a
//! call into Python: a `__del__` run by an entry's release may itself make a tuned call.

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
/// (None: call `describe()` every time) gives a config's field values.
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
        let kind = PyTuple::new(py, [backend.get_type(), config.get_type()])?;
        let Some(getter) = self.getter(&kind)? else {
            return call();
        };
        let values = getter.call1((&config,))?.cast_into::<PyTuple>()?;
        let immutable = self.immutable.bind(py);
        let mut value_types = Vec::with_capacity(values.len());
        let mut float_zero = false;
        for value in values.iter() {
            let kind = value.get_type();
            if !immutable.contains(&kind)? {
                return call();
            }
            float_zero |= value
                .cast_exact::<PyFloat>()
                .is_ok_and(|f| f.value() == 0.0);
            value_types.push(kind);
        }
        let values = if float_zero {
            signed_zeros(&values)?
        } else {
            values
        };
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
            return Ok(description);
        }
        let description = call()?;
        if descriptions.len() >= MAX_DESCRIPTIONS {
            descriptions.clear();
        }
        descriptions.set_item(key, &description)?;
        Ok(description)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.decide)?;
        visit.call(&self.config_functions)?;
        visit.call(&self.immutable)?;
        visit.call(&self.decisions)?;
        visit.call(&self.descriptions)
    }
}

impl DescribeCache {
    /// The decision for `(backend_cls, config_cls)`, made by `decide` where none was, or where a
    /// function it read was replaced since (which also drops every kept description).
    fn decision<'py>(&self, kind: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyTuple>> {
        let py = kind.py();
        let decisions = self.decisions.bind(py);
        if let Some(decided) = decisions.get_item(kind)? {
            let decided = decided.cast_into::<PyTuple>()?;
            if guards_hold(&decided.get_item(0)?)? {
                return Ok(decided);
            }
            self.descriptions.bind(py).clear();
        }
        let decided = self
            .decide
            .bind(py)
            .call1((kind.get_item(0)?, kind.get_item(1)?))?
            .cast_into::<PyTuple>()?;
        decisions.set_item(kind, &decided)?;
        Ok(decided)
    }

    /// The field getter of the decision for `kind`, or None where descriptions are not kept.
    fn getter<'py>(&self, kind: &Bound<'py, PyTuple>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let getter = self.decision(kind)?.get_item(1)?;
        Ok((!getter.is_none()).then_some(getter))
    }
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
