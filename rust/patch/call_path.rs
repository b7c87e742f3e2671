//! A tuned module's per-call path under `patch_aitune()`, in one native call: `Module._forward`'s
//! hook swap, `TunedModule.__call__` (binding, AITune's context, the backend lookup) and
//! `Backend.infer` (its three decorators and TorchEager's no-grad call), as
//! `python/aitune_fast/patch/_call_path.py` describes them. That module learns the path's parts
//! (`parts.rs`, each whole or not at all) and holds the steps that stay in Python (the binder
//! cache, `describe()`'s cache, the nvtx object on a miss, and every fall back to stock's code).
//! A step done here in place of stock's code runs only while that code is still there (the parts'
//! guards, `guard.rs`); otherwise stock's code runs.
//!
//! Each step does what the Python it replaces does, in the same order, with the same calls into
//! Python objects (so their errors and side effects are stock's); `try`/`finally` and `with` are
//! written out as "run, then always undo, the undo's error winning" (Python's `finally`).

use pyo3::exceptions::{PyKeyError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::bind_plan::{BoundCall, Unbound};
use super::guard::{generic_attr, has_any_own, has_own, ClassGuard, NameGuard};
use super::parts::{
    ContextPart, EagerPart, ForwardPart, InferPart, MetricsPart, ModuleCallPart, TunedCallPart,
};
use super::stats::{self, Outcome, Recording};
use crate::api::describe_inputs;
use crate::interp::interp;
use crate::metadata::SampleMetadata;
use crate::stack::{self, PATH_STACK};

/// What an entry of the path returns, having done nothing, where its shim is to run stock's step
/// instead (`_core._STOCK_STEP`): the entry's part is not learned (a shim kept past an unpatch
/// meets the next period's path, or none), or the calling thread has less than [`PATH_STACK`]
/// bytes of C stack left (stock's code, called from the shim, needs less of it a level than the
/// path's Rust frames on top of the same calls).
static STOCK_STEP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `_core._STOCK_STEP`: an object of its own, never a value a call returns.
pub fn stock_step(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let marker = STOCK_STEP.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.get_type::<PyAny>().call0()?.unbind())
    })?;
    Ok(marker.bind(py).clone())
}

/// Whether an entry whose part is `part` runs: the part learned, and room on the stack.
fn runs<T>(part: &Option<Py<T>>) -> bool {
    part.is_some() && stack::room_for(PATH_STACK)
}

/// The path: its parts as `_call_path` learned them (None where a part was not learned: its step
/// runs stock's code). Frozen: a call in flight keeps the object it started with, and a part newly
/// learned goes into a new one.
#[pyclass(module = "aitune_fast._core", name = "_CallPath", frozen)]
pub struct CallPath {
    context: Option<Py<ContextPart>>,
    forward: Option<Py<ForwardPart>>,
    tuned: Option<Py<TunedCallPart>>,
    infer: Option<Py<InferPart>>,
    eager: Option<Py<EagerPart>>,
    module_call: Option<Py<ModuleCallPart>>,
    metrics: Option<Py<MetricsPart>>,
}

/// The part a step needs, or a RuntimeError naming it (a step reached without its part, which the
/// entries' checks and the install order never let happen).
fn part<'a, T>(value: &'a Option<Py<T>>, name: &str) -> PyResult<&'a T>
where
    T: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
{
    match value {
        Some(value) => Ok(value.get()),
        None => Err(PyRuntimeError::new_err(format!(
            "aitune_fast call path: its {name} part is not learned"
        ))),
    }
}

/// The part itself, as a Python object.
fn part_of<'a, 'py, T: pyo3::PyClass>(
    py: Python<'py>,
    value: &'a Option<Py<T>>,
) -> PyResult<&'a Bound<'py, T>> {
    match value {
        Some(value) => Ok(value.bind(py)),
        None => Err(PyRuntimeError::new_err(
            "aitune_fast call path: a part is not learned",
        )),
    }
}

/// Whether every guard in `guards` (each a `_ClassGuard` or a `_NameGuard`) holds.
fn all_hold(py: Python<'_>, guards: &Bound<'_, PyTuple>) -> PyResult<bool> {
    for guard in guards.iter() {
        let holds = if let Ok(guard) = guard.cast::<ClassGuard>() {
            guard.get().holds(py)?
        } else {
            guard.cast::<NameGuard>()?.get().holds(py)?
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `dict[key]`, raising KeyError as a subscript does.
fn item<'py>(dict: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    dict.get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
}

/// Python's `try: body finally: undo`: the undo always runs, and its error replaces the body's.
fn finally<T>(py: Python<'_>, body: PyResult<T>, undo: PyResult<()>) -> PyResult<T> {
    match undo {
        Ok(()) => body,
        Err(undo_err) => {
            if let Err(body_err) = body {
                undo_err.set_context(py, Some(body_err));
            }
            Err(undo_err)
        }
    }
}

/// `f"{value}"`.
fn formatted(value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.cast_exact::<PyString>() {
        return Ok(text.to_str()?.to_owned());
    }
    let py = value.py();
    let text = value.call_method1(intern!(py, "__format__"), ("",))?;
    Ok(text.cast::<PyString>()?.to_str()?.to_owned())
}

/// `stack[-1]` (a list's own item read directly; else, or empty, as Python subscripts).
fn last<'py>(stack: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match stack.cast_exact::<PyList>() {
        Ok(list) if !list.is_empty() => list.get_item(list.len() - 1),
        _ => stack.get_item(-1),
    }
}

/// `value.copy()` (a dict's own copy made directly).
fn copy<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match value.cast_exact::<PyDict>() {
        Ok(dict) => Ok(dict.copy()?.into_any()),
        Err(_) => {
            let py = value.py();
            value.call_method0(intern!(py, "copy"))
        }
    }
}

/// `stack.pop()`, its result dropped (a list's own last item deleted directly; else, or empty,
/// its `pop` called).
fn pop_last(stack: &Bound<'_, PyAny>) -> PyResult<()> {
    match stack.cast_exact::<PyList>() {
        Ok(list) if !list.is_empty() => list.del_item(list.len() - 1),
        _ => {
            let py = stack.py();
            stack.call_method0(intern!(py, "pop")).map(drop)
        }
    }
}

/// AITune's context stack: a copy of its top pushed (with `key` set to `value` if given), under
/// its lock; and popped.
fn push_context<'py>(
    context: &Bound<'py, PyAny>,
    set: Option<(&Bound<'py, PyAny>, &Bound<'py, PyAny>)>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = context.py();
    let lock = context.getattr(intern!(py, "_lock"))?;
    lock.call_method0(intern!(py, "__enter__"))?;
    let pushed = (|| {
        let stack = context.getattr(intern!(py, "_data_stack"))?;
        let top = copy(&last(&stack)?)?;
        if let Some((key, value)) = set {
            top.set_item(key, value)?;
        }
        match stack.cast_exact::<PyList>() {
            Ok(list) => list.append(&top)?,
            Err(_) => drop(stack.call_method1(intern!(py, "append"), (&top,))?),
        }
        Ok(top)
    })();
    let released = unlock(&lock);
    finally(py, pushed, released)
}

fn pop_context(context: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = context.py();
    let lock = context.getattr(intern!(py, "_lock"))?;
    lock.call_method0(intern!(py, "__enter__"))?;
    let popped = context
        .getattr(intern!(py, "_data_stack"))
        .and_then(|stack| pop_last(&stack));
    let released = unlock(&lock);
    finally(py, popped, released)
}

/// `lock.__exit__(None, None, None)`. For `_thread`'s lock and `RLock`, whose `__exit__` is the C
/// function their `release()` is (and neither class can be changed), `release()`, called with no
/// argument tuple to build.
fn unlock(lock: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = lock.py();
    if interp(py)?
        .thread_locks
        .iter()
        .any(|cls| lock.get_type().is(cls))
    {
        return lock.call_method0(intern!(py, "release")).map(drop);
    }
    lock.call_method1(intern!(py, "__exit__"), (py.None(), py.None(), py.None()))
        .map(drop)
}

#[pymethods]
impl CallPath {
    /// `_CallPath(*, context, forward, tuned, infer, eager, module_call, metrics)`: each a part of
    /// its type, or None where it was not learned.
    #[new]
    #[pyo3(signature = (*, context=None, forward=None, tuned=None, infer=None, eager=None, module_call=None, metrics=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        context: Option<Py<ContextPart>>,
        forward: Option<Py<ForwardPart>>,
        tuned: Option<Py<TunedCallPart>>,
        infer: Option<Py<InferPart>>,
        eager: Option<Py<EagerPart>>,
        module_call: Option<Py<ModuleCallPart>>,
        metrics: Option<Py<MetricsPart>>,
    ) -> Self {
        Self {
            context,
            forward,
            tuned,
            infer,
            eager,
            module_call,
            metrics,
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.context)?;
        visit.call(&self.forward)?;
        visit.call(&self.tuned)?;
        visit.call(&self.infer)?;
        visit.call(&self.eager)?;
        visit.call(&self.module_call)?;
        visit.call(&self.metrics)
    }

    /// `Module._forward(self=proxy, ...)`: the wrapped module's own `forward` and no hooks in
    /// place while its tuned (or recording, passthrough) wrapper runs; both put back afterwards.
    #[pyo3(signature = (proxy, args, kwargs, /))]
    fn forward<'py>(
        &self,
        proxy: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = proxy.py();
        if !runs(&self.forward) {
            return stock_step(py);
        }
        let recording = Recording::start();
        let swap = part(&self.forward, "forward")?;
        // AITune's `Module` as learned (its `__getattribute__` generic first): its attributes read so
        let learned = swap.guard.get().holds_for(proxy)?;
        let read = |name: &Bound<'py, PyString>| {
            if learned {
                generic_attr(proxy, name)
            } else {
                proxy.getattr(name)
            }
        };
        let state = read(intern!(py, "_self_state"))?;
        if state.eq(swap.init_state.bind(py))? {
            proxy.call_method0(intern!(py, "enable_recording"))?;
        }
        let inner = read(intern!(py, "__wrapped__"))?;
        let setattr = inner.get_type().getattr(intern!(py, "__setattr__"))?;
        if !learned || !setattr.is(swap.nn_setattr.bind(py)) {
            return swap.stock_swap.bind(py).call1((proxy, args, kwargs));
        }
        let namespace = inner.getattr(intern!(py, "__dict__"))?;
        let state = namespace.cast::<PyDict>()?;
        let mut outcome = Outcome::Other;
        let mut served = None;
        let result = swap_out(proxy, state).and_then(|()| {
            let wrapper = generic_attr(proxy, intern!(py, "_self_wrapper"))?;
            match &self.tuned {
                Some(tuned) if self.is_tuned_call(tuned.get(), &wrapper)? => {
                    let seen = recording.as_ref().map(|_| &mut outcome);
                    let result = self.tuned_call(&wrapper, args, kwargs, seen);
                    served = Some(wrapper);
                    result
                }
                _ => wrapper.call(args, Some(kwargs)),
            }
        });
        let result = finally(py, result, swap_back(proxy, state));
        // the tuned call counted with the hook swap around it: the path's time from the shim's call
        if let (Some(recording), Some(tuned)) = (recording, served) {
            recording.finish(&tuned, &outcome);
        }
        result
    }

    /// `TunedModule.__call__(tuned, *args, **kwargs)`: bound by the call shape's plan (`_BindPlan`),
    /// then in a new AITune context naming the module, the backend function: `safe_call_backend`
    /// (the backend whose key equals the call's metadata), `call_unique_backend`, or any other
    /// function as it is.
    /// With dispatch statistics on, the call is counted in the module's record (`stats.rs`).
    #[pyo3(signature = (tuned, args, kwargs, /))]
    fn call<'py>(
        &self,
        tuned: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !runs(&self.tuned) {
            return stock_step(tuned.py());
        }
        let Some(recording) = Recording::start() else {
            return self.tuned_call(tuned, args, kwargs, None);
        };
        let mut outcome = Outcome::Other;
        let result = self.tuned_call(tuned, args, kwargs, Some(&mut outcome));
        recording.finish(tuned, &outcome);
        result
    }

    /// `Backend.infer(backend, *args, **kwargs)` (no `_method`): the backend described in a new
    /// AITune context, inside the nvtx range and the hardware-metrics scope, its state checked,
    /// then its `_infer` (stock TorchEager's inline: the module called with grad off).
    #[pyo3(signature = (backend, args, kwargs, /))]
    fn infer<'py>(
        &self,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !runs(&self.infer) {
            return stock_step(backend.py());
        }
        self.backend_infer(backend, args, kwargs)
    }
}

impl CallPath {
    /// `Backend.infer`'s steps (`infer`).
    fn backend_infer<'py>(
        &self,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let steps = part(&self.infer, "infer")?;
        let Some(context) = self.stock_context(py)? else {
            let mut all = vec![backend.clone()];
            all.extend(args.iter());
            let all = PyTuple::new(py, all)?;
            return stats::backend_time(|| steps.stock.bind(py).call(all, Some(kwargs)));
        };
        let obj = context.obj.bind(py);
        let top = push_context(obj, None)?;
        let result = self.infer_in_context(steps, context, &top, backend, args, kwargs);
        finally(py, result, pop_context(obj))
    }
}

/// `Module._forward`'s first half: the hook dicts kept (as copies) and emptied, the module's own
/// `forward` in place. The proxy is AITune's `Module` as learned (its attributes read generically).
fn swap_out(proxy: &Bound<'_, PyAny>, state: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = proxy.py();
    let pre = ordered_copy(&item(state, intern!(py, "_forward_pre_hooks"))?)?;
    state.set_item(intern!(py, "_current_forward_pre_hooks"), pre)?;
    let post = ordered_copy(&item(state, intern!(py, "_forward_hooks"))?)?;
    state.set_item(intern!(py, "_current_forward_hooks"), post)?;
    state.set_item(intern!(py, "_forward_pre_hooks"), new_ordered_dict(py)?)?;
    state.set_item(
        intern!(py, "forward"),
        generic_attr(proxy, intern!(py, "_self_orig_forward"))?,
    )?;
    state.set_item(intern!(py, "_forward_hooks"), new_ordered_dict(py)?)
}

extern "C" {
    // CPython's own `OrderedDict` (`collections.OrderedDict`, unless a module rebinds it) and its
    // constructor without arguments (`cpython/odictobject.h`, 3.10-3.13)
    static mut PyODict_Type: pyo3::ffi::PyTypeObject;
    fn PyODict_New() -> *mut pyo3::ffi::PyObject;
}

/// `OrderedDict()`: made directly where `collections.OrderedDict` is CPython's own, not through a
/// call of the class (its argument tuple, `__new__` and `__init__`).
fn new_ordered_dict(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let ordered_dict = interp(py)?.ordered_dict.bind(py);
    if !std::ptr::eq(ordered_dict.as_type_ptr(), &raw mut PyODict_Type) {
        return ordered_dict.call0();
    }
    // SAFETY: `collections.OrderedDict` is CPython's C type, whose constructor this is; it
    // returns a new reference, or NULL with an error set.
    unsafe { Bound::from_owned_ptr_or_err(py, PyODict_New()) }
}

/// `OrderedDict(hooks)`: for an empty dict or `OrderedDict` (exactly: their length is what the
/// copy reads), a new empty one.
fn ordered_copy<'py>(hooks: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = hooks.py();
    if empty_dict(Some(hooks))? {
        return new_ordered_dict(py);
    }
    interp(py)?.ordered_dict.bind(py).call1((hooks,))
}

/// `Module._forward`'s second half: the hooks and the routing `forward` back.
fn swap_back(proxy: &Bound<'_, PyAny>, state: &Bound<'_, PyDict>) -> PyResult<()> {
    let py = proxy.py();
    let pre = item(state, intern!(py, "_current_forward_pre_hooks"))?;
    state.set_item(intern!(py, "_forward_pre_hooks"), pre)?;
    state.set_item(
        intern!(py, "forward"),
        generic_attr(proxy, intern!(py, "_self_proxy_forward"))?,
    )?;
    let post = item(state, intern!(py, "_current_forward_hooks"))?;
    state.set_item(intern!(py, "_forward_hooks"), post)
}

impl CallPath {
    /// `TunedModule.__call__`'s steps (`call`), the lookup's outcome written to `outcome` if given.
    fn tuned_call<'py>(
        &self,
        tuned: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
        outcome: Option<&mut Outcome<'py>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = tuned.py();
        let steps = part(&self.tuned, "tuned call")?;
        let signature = tuned.getattr(intern!(py, "_forward_signature"))?;
        let plan = steps.binder.get().plan(&signature, args, kwargs)?;
        let stock = || steps.stock_steps.bind(py).call1((tuned, args, kwargs));
        let Some(context) = self.stock_context(py)? else {
            return stock();
        };
        let Some(plan) = plan else {
            return stock();
        };
        let BoundCall {
            args: call_args,
            kwargs: call_kwargs,
            arguments,
        } = match plan.get().bind(args, kwargs) {
            Ok(bound) => bound,
            // too little stack left for the plan's few levels: bound as stock binds, never refused
            Err(Unbound::Short) => return stock(),
            Err(Unbound::Error(err)) => return Err(err),
        };
        let func = tuned.getattr(intern!(py, "_backend_func"))?;
        let module_name = tuned.getattr(intern!(py, "_module_name"))?;
        let obj = context.obj.bind(py);
        push_context(obj, Some((context.module_key.bind(py), &module_name)))?;
        let result = self.call_backend(
            steps,
            tuned,
            &func,
            (&call_args, &call_kwargs, &arguments),
            outcome,
        );
        finally(py, result, pop_context(obj))
    }

    /// The context part, where AITune's context is the object it was learned from, of a class that
    /// still holds AITune's `__enter__`, `__exit__`, `set` and `_current_data`, with no `set` of its
    /// own, and the one AITune's modules name: only then is pushing and popping its stack directly
    /// what stock's `with` and `set` do.
    fn stock_context(&self, py: Python<'_>) -> PyResult<Option<&ContextPart>> {
        let Some(context) = &self.context else {
            return Ok(None);
        };
        let context = context.get();
        let obj = context.obj.bind(py);
        let stock = obj.get_type().is(context.context_cls.bind(py))
            && context.guard.get().holds(py)?
            && !has_own(obj, intern!(py, "set"))?
            && all_hold(py, context.names.bind(py))?;
        Ok(stock.then_some(context))
    }

    /// Whether `wrapper` is a `TunedModule` whose class keeps the path's shim as its `__call__`.
    fn is_tuned_call(&self, steps: &TunedCallPart, wrapper: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = wrapper.py();
        let cls = wrapper.get_type();
        Ok(cls.is(steps.tuned_cls.bind(py))
            && cls
                .getattr(intern!(py, "__call__"))?
                .is(steps.shim.bind(py)))
    }

    /// Inside the module's context: the backend `func` picks, then its `infer`.
    fn call_backend<'py>(
        &self,
        steps: &TunedCallPart,
        tuned: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        (call_args, call_kwargs, arguments): (
            &Bound<'py, PyAny>,
            &Bound<'py, PyAny>,
            &Bound<'py, PyAny>,
        ),
        outcome: Option<&mut Outcome<'py>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = tuned.py();
        let method = func.getattr_opt(intern!(py, "__func__"))?;
        let own = |expected: &Py<PyAny>| -> PyResult<bool> {
            Ok(match &method {
                Some(method) if method.is(expected.bind(py)) => {
                    func.getattr(intern!(py, "__self__"))?.is(tuned)
                }
                _ => false,
            })
        };
        let backend = if own(&steps.safe_call)? {
            match backend_for(steps, tuned, arguments)? {
                Ok(backend) => backend,
                Err(metadata) => {
                    let message = tuned
                        .getattr(intern!(py, "ERROR_NO_BACKEND_FOUND"))?
                        .call_method1(intern!(py, "format"), (&metadata,))?;
                    if let Some(outcome) = outcome {
                        *outcome = Outcome::Miss(metadata);
                    }
                    return Err(PyRuntimeError::new_err(message.unbind()));
                }
            }
        } else if own(&steps.unique_call)? {
            tuned.getattr(intern!(py, "_unique_backend"))?
        } else {
            return func.call1(((call_args, call_kwargs),));
        };
        if let Some(outcome) = outcome {
            *outcome = Outcome::Hit(backend.clone());
        }
        let args = call_args.cast::<PyTuple>()?;
        let kwargs = call_kwargs.cast::<PyDict>()?;
        if let Some(infer) = &self.infer {
            let ours = backend.get_type().getattr_opt(intern!(py, "infer"))?;
            if ours.is_some_and(|f| f.is(infer.get().shim.bind(py)))
                && !has_own(&backend, intern!(py, "infer"))?
                && !kwargs.contains(intern!(py, "_method"))?
            {
                return self.backend_infer(&backend, args, kwargs);
            }
        }
        let infer = backend.getattr(intern!(py, "infer"))?;
        stats::backend_time(|| infer.call(args, Some(kwargs)))
    }

    /// `Backend.infer`'s body in its context (`top`, already pushed).
    fn infer_in_context<'py>(
        &self,
        steps: &InferPart,
        context: &ContextPart,
        top: &Bound<'py, PyAny>,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let backend_key = context.backend_key.bind(py);
        let description = steps.describe.get().describe(backend)?;
        top.set_item(backend_key, description)?;
        let decorator = steps.nvtx_decorator.bind(py);
        let mut message = formatted(&decorator.getattr(intern!(py, "name"))?)?;
        for (label, key) in [
            (" module:", context.module_key.bind(py)),
            (" backend:", backend_key),
        ] {
            let value = top.call_method1(intern!(py, "get"), (key,))?;
            if !value.is_none() {
                message.push_str(label);
                message.push_str(&formatted(&value)?);
            }
        }
        let message = PyString::new(py, &message);
        let annotation = annotation_for(part_of(py, &self.infer)?, &message)?;
        decorator.setattr(intern!(py, "_nvtx_annotation"), &annotation)?;
        annotation.call_method0(intern!(py, "__enter__"))?;
        let result = self.infer_scoped(steps, backend, args, kwargs);
        let (kind, value, trace) = match &result {
            Ok(_) => (
                py.None().into_bound(py),
                py.None().into_bound(py),
                py.None().into_bound(py),
            ),
            Err(err) => (
                err.get_type(py).into_any(),
                err.value(py).clone().into_any(),
                err.traceback(py)
                    .map_or_else(|| py.None().into_bound(py), |t| t.into_any()),
            ),
        };
        let exit = annotation.call_method1(intern!(py, "__exit__"), (kind, value, trace))?;
        match result {
            Err(_) if exit.is_truthy()? => Ok(py.None().into_bound(py)), // suppressed: `infer` returns None
            result => result,
        }
    }

    /// Inside the nvtx range: the hardware-metrics scope around the state check and `_infer` (its
    /// two calls skipped while they would reach AITune's no-op collector).
    fn infer_scoped<'py>(
        &self,
        steps: &InferPart,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let metrics = steps.metrics_module.bind(py);
        let collector = || -> PyResult<Option<Bound<'py, PyAny>>> {
            if let Some(part) = &self.metrics {
                if metrics_off(part.get(), py)? {
                    return Ok(None);
                }
            }
            metrics
                .call_method0(intern!(py, "get_default_collector"))
                .map(Some)
        };
        if let Some(collector) = collector()? {
            collector.call_method1(intern!(py, "start_scope"), (steps.scope.bind(py),))?;
        }
        let result = self.checked_infer(steps, backend, args, kwargs);
        let ended = collector().and_then(|collector| match collector {
            Some(collector) => collector.call_method0(intern!(py, "end_scope")).map(drop),
            None => Ok(()),
        });
        finally(py, result, ended)
    }

    /// The backend's state checked, then its `_infer`.
    fn checked_infer<'py>(
        &self,
        steps: &InferPart,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let state = backend.getattr(intern!(py, "state"))?;
        let states = steps.states.bind(py);
        if state.ne(states.get_item(0)?)? && state.ne(states.get_item(1)?)? {
            let name = formatted(&backend.getattr(intern!(py, "name"))?)?;
            return Err(PyRuntimeError::new_err(format!(
                "Cannot run inference, backend {name} should be activated first"
            )));
        }
        match &self.eager {
            Some(eager) if is_stock_eager(eager.get(), backend)? => {
                self.eager_infer(eager.get(), backend, args, kwargs)
            }
            _ => {
                let infer = backend.getattr(intern!(py, "_infer"))?;
                stats::backend_time(|| infer.call(args, Some(kwargs)))
            }
        }
    }

    /// Stock TorchEager's `_infer`: `with torch.no_grad(): return self._orig_module(...)`.
    fn eager_infer<'py>(
        &self,
        eager: &EagerPart,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let enabled = eager.grad_enabled.bind(py).call0()?;
        let set_grad = eager.set_grad_enabled.bind(py);
        set_grad.call1((false,))?;
        let result = backend
            .getattr(intern!(py, "_orig_module"))
            .and_then(|module| stats::backend_time(|| self.call_module(&module, args, kwargs)));
        finally(py, result, set_grad.call1((enabled,)).map(drop))
    }
}

/// Whether `get_default_collector()` would now give AITune's no-op collector, whose class still holds
/// its no-op `start_scope` and `end_scope`: what stock's `get_collector` reads (the session's
/// `_runtime_enabled`, else `HARDWARE_METRICS_ENABLED`), read in place while the code that reads it
/// is AITune's.
fn metrics_off(part: &MetricsPart, py: Python<'_>) -> PyResult<bool> {
    let session = part.session.bind(py);
    if !all_hold(py, part.names.bind(py))?
        || !part.session_guard.get().holds_for(session)?
        || has_any_own(
            session,
            [intern!(py, "get_collector"), intern!(py, "_should_collect")],
        )?
    {
        return Ok(false);
    }
    let runtime = generic_attr(session, intern!(py, "_runtime_enabled"))?;
    let collect = if runtime.is_none() {
        part.enabled.bind(py).is_truthy()?
    } else {
        runtime.is_truthy()?
    };
    if collect {
        return Ok(false);
    }
    let collector = generic_attr(session, intern!(py, "_noop_collector"))?;
    Ok(part.noop_guard.get().holds_for(&collector)?
        && !has_any_own(
            &collector,
            [intern!(py, "start_scope"), intern!(py, "end_scope")],
        )?)
}

/// Whether `backend`'s `_infer` is stock TorchEager's, not hidden by its own, with `torch.no_grad`
/// and what it calls torch's own and unchanged.
fn is_stock_eager(eager: &EagerPart, backend: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = backend.py();
    let own_infer = backend.get_type().getattr(intern!(py, "_infer"))?;
    Ok(own_infer.is(eager.infer.bind(py))
        && !has_own(backend, intern!(py, "_infer"))?
        && all_hold(py, eager.grad_guards.bind(py))?)
}

/// `safe_call_backend`'s lookup: the backend whose key equals the call's metadata, or (`Err`) the
/// metadata no key equals.
fn backend_for<'py>(
    steps: &TunedCallPart,
    tuned: &Bound<'py, PyAny>,
    arguments: &Bound<'py, PyAny>,
) -> PyResult<Result<Bound<'py, PyAny>, Bound<'py, PyAny>>> {
    let py = tuned.py();
    let sample_metadata = steps
        .owner
        .bind(py)
        .getattr(intern!(py, "SampleMetadata"))?;
    let strict = tuned
        .getattr(intern!(py, "_config"))?
        .getattr(intern!(py, "strict_mode"))?;
    let metadata = if sample_metadata.is(py.get_type::<SampleMetadata>()) {
        Bound::new(py, describe_inputs(py, arguments, Some(&strict), None)?)?.into_any()
    } else {
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "strict"), &strict)?;
        sample_metadata.call_method(intern!(py, "from_inputs"), (arguments,), Some(&kwargs))?
    };
    let backends = tuned.getattr(intern!(py, "_backends"))?;
    let kind = backends.get_type();
    if kind.is(interp(py)?.ordered_dict.bind(py)) || kind.is(py.get_type::<PyDict>()) {
        return Ok(backends
            .cast::<PyDict>()?
            .get_item(&metadata)?
            .ok_or(metadata));
    }
    if !backends.contains(&metadata)? {
        return Ok(Err(metadata));
    }
    backends.get_item(&metadata).map(Ok)
}

/// The nvtx `annotate` object for `message`, kept per message while `nvtx.annotate` is the class
/// the cache was filled from (else `_annotation` decides and makes one).
fn annotation_for<'py>(
    part: &Bound<'py, InferPart>,
    message: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = message.py();
    let steps = part.get();
    let annotate = steps
        .nvtx_module
        .bind(py)
        .getattr(intern!(py, "nvtx"))?
        .getattr(intern!(py, "annotate"))?;
    if annotate.is(steps.annotate_cls.bind(py).get_item(0)?) {
        if let Some(annotation) = steps.annotations.bind(py).get_item(message)? {
            if !annotation.is_none() {
                return Ok(annotation);
            }
        }
    }
    steps.annotation.bind(py).call1((part, message))
}

impl CallPath {
    /// `module(*args, **kwargs)`; where torch's `nn.Module.__call__` would only call `module.forward`
    /// (its class keeps torch's `__call__` and `_call_impl`, nothing compiled, not tracing, no hook
    /// on the module or global), `module.forward` straight away.
    fn call_module<'py>(
        &self,
        module: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(torch_call) = &self.module_call {
            if calls_forward_only(torch_call.get(), module)? {
                let py = module.py();
                return module
                    .getattr(intern!(py, "forward"))?
                    .call(args, Some(kwargs));
            }
        }
        module.call(args, Some(kwargs))
    }
}

/// Whether `value` is an empty dict or `OrderedDict` (exactly: a subclass's truth may be its own).
fn empty_dict(value: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let Some(value) = value else {
        return Ok(false);
    };
    let py = value.py();
    let kind = value.get_type();
    let known = kind.is(py.get_type::<PyDict>()) || kind.is(interp(py)?.ordered_dict.bind(py));
    // a dict or OrderedDict exactly: its length is its truth
    Ok(known && value.cast::<PyDict>().is_ok_and(|dict| dict.is_empty()))
}

fn calls_forward_only(torch_call: &ModuleCallPart, module: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = module.py();
    let cls = module.get_type();
    if !cls
        .getattr(intern!(py, "__call__"))?
        .is(torch_call.call.bind(py))
        || !cls
            .getattr(intern!(py, "_call_impl"))?
            .is(torch_call.call_impl.bind(py))
    {
        return Ok(false);
    }
    let Some(namespace) = module.getattr_opt(intern!(py, "__dict__"))? else {
        return Ok(false);
    };
    let Ok(namespace) = namespace.cast::<PyDict>() else {
        return Ok(false);
    };
    // `nn.Module.__call__` calls `self._call_impl`: one set on the module itself runs instead
    if namespace.contains(intern!(py, "_call_impl"))? {
        return Ok(false);
    }
    // torch's class attribute (None), or the instance's once `module.compile()` ran
    match module.getattr_opt(intern!(py, "_compiled_call_impl"))? {
        Some(compiled) if compiled.is_none() => {}
        _ => return Ok(false),
    }
    let globals = torch_call.globals.bind(py);
    // the hook dicts `nn.Module._call_impl` reads on the module, and torch's global ones
    let hooks = [
        (namespace, intern!(py, "_backward_hooks")),
        (namespace, intern!(py, "_backward_pre_hooks")),
        (namespace, intern!(py, "_forward_hooks")),
        (namespace, intern!(py, "_forward_pre_hooks")),
        (globals, intern!(py, "_global_backward_pre_hooks")),
        (globals, intern!(py, "_global_backward_hooks")),
        (globals, intern!(py, "_global_forward_hooks")),
        (globals, intern!(py, "_global_forward_pre_hooks")),
    ];
    for (dict, name) in hooks {
        if !empty_dict(dict.get_item(name)?.as_ref())? {
            return Ok(false);
        }
    }
    Ok(!torch_call.is_tracing.bind(py).call0()?.is_truthy()?)
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    /// The value of `name` after running `code`.
    fn run<'py>(py: Python<'py>, code: &str, name: &str) -> Bound<'py, PyAny> {
        let globals = PyDict::new(py);
        py.run(&CString::new(code).unwrap(), Some(&globals), None)
            .unwrap();
        globals.get_item(name).unwrap().unwrap()
    }

    #[test]
    fn unlock_lets_go_of_threads_locks_and_calls_any_other_locks_exit() {
        Python::attach(|py| {
            for code in [
                "import _thread\nlock = _thread.allocate_lock()\nlock.acquire()\n",
                "import _thread\nlock = _thread.RLock()\nlock.acquire()\n",
            ] {
                let lock = run(py, code, "lock");
                unlock(&lock).unwrap();
                let held = lock.call_method1("acquire", (false,)).unwrap();
                assert!(held.is_truthy().unwrap(), "{code}: still held");
                unlock(&lock).unwrap();
                // as `__exit__` would: letting go of a lock not held is an error
                assert!(unlock(&lock).is_err(), "{code}");
            }
            let code = "import _thread\nclass Counting(_thread.RLock):\n    exits = []\n    def __exit__(self, *args):\n        self.exits.append(args)\n        return super().__exit__(*args)\nlock = Counting()\nlock.acquire()\n";
            let lock = run(py, code, "lock");
            unlock(&lock).unwrap();
            let exits = lock.getattr("exits").unwrap();
            assert_eq!(exits.repr().unwrap().to_string(), "[(None, None, None)]");
        });
    }
}
