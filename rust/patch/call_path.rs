//! A tuned module's per-call path under `patch_aitune()`, in one native call: `Module._forward`'s
//! hook swap, `TunedModule.__call__` (binding, AITune's context, the backend lookup) and
//! `Backend.infer` (its three decorators and TorchEager's no-grad call), as
//! `python/aitune_fast/patch/_call_path.py` describes them. That module installs the path, decides
//! what is AITune's own code, and holds the steps that stay in Python (the binder cache,
//! `describe()`'s cache, the nvtx object cache on a miss, and every fall back to stock's code); it
//! gives them to one `_CallPath` object, whose fields it keeps in step with what it learns.
//!
//! Each step does what the Python it replaces does, in the same order, with the same calls into
//! Python objects (so their errors and side effects are stock's); `try`/`finally` and `with` are
//! written out as "run, then always undo, the undo's error winning" (Python's `finally`).

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::bind_plan::{BindPlan, BoundCall};
use super::sample_metadata::describe_inputs;
use crate::metadata::SampleMetadata;

/// Declares the fields of [`CallPath`] once: the struct, the constructor's check of each keyword
/// name, and the list the GC traverses.
macro_rules! call_path_fields {
    ($($name:ident),* $(,)?) => {
        /// What the call path needs of AITune and of its own Python steps, given whole to the
        /// constructor by `_call_path._rebuild_native()` (None until the part that needs it is
        /// installed). Frozen: a call in flight keeps the object it started with, and a new part
        /// installed makes a new object.
        #[pyclass(module = "aitune_fast._core", name = "_CallPath", frozen)]
        #[derive(Default)]
        pub struct CallPath {
            $($name: Option<Py<PyAny>>,)*
        }

        impl CallPath {
            fn set(&mut self, name: &str, value: Py<PyAny>) -> bool {
                match name {
                    $(stringify!($name) => self.$name = Some(value),)*
                    _ => return false,
                }
                true
            }

            fn fields(&self) -> impl Iterator<Item = &Py<PyAny>> {
                [$(&self.$name),*].into_iter().flatten()
            }
        }
    };
}

call_path_fields!(
    init_state,
    module_cls,
    nn_setattr,
    ordered_dict,
    forward_stock_swap,
    tuned_cls,
    tuned_call,
    tuned_module,
    binder,
    call_stock_steps,
    context,
    context_cls,
    module_key,
    backend_key,
    safe_call,
    unique_call,
    our_infer,
    parts,
    describe,
    annotation,
    eager_infer,
    grad_enabled,
    set_grad_enabled,
    module_call,
    module_call_impl,
    module_globals,
    is_tracing,
);

/// A field the installed step needs, or a RuntimeError naming it (a path installed half-way).
fn field<'py>(
    py: Python<'py>,
    value: &Option<Py<PyAny>>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Some(value) => Ok(value.bind(py).clone()),
        None => Err(PyRuntimeError::new_err(format!(
            "aitune_fast call path: `{name}` is not set (the path was not installed whole)"
        ))),
    }
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

/// Whether `name` is set on `obj` itself (its instance dict), hiding the class's attribute.
fn has_own(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<bool> {
    let py = obj.py();
    match obj.getattr_opt(intern!(py, "__dict__"))? {
        Some(namespace) => match namespace.cast::<PyDict>() {
            Ok(dict) => dict.contains(name),
            Err(_) => Ok(false),
        },
        None => Ok(false),
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
        let top = stack.get_item(-1)?.call_method0(intern!(py, "copy"))?;
        if let Some((key, value)) = set {
            top.set_item(key, value)?;
        }
        stack.call_method1(intern!(py, "append"), (&top,))?;
        Ok(top)
    })();
    let released = lock
        .call_method1(intern!(py, "__exit__"), (py.None(), py.None(), py.None()))
        .map(drop);
    finally(py, pushed, released)
}

fn pop_context(context: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = context.py();
    let lock = context.getattr(intern!(py, "_lock"))?;
    lock.call_method0(intern!(py, "__enter__"))?;
    let popped = context
        .getattr(intern!(py, "_data_stack"))
        .and_then(|stack| stack.call_method0(intern!(py, "pop")))
        .map(drop);
    let released = lock
        .call_method1(intern!(py, "__exit__"), (py.None(), py.None(), py.None()))
        .map(drop);
    finally(py, popped, released)
}

#[pymethods]
impl CallPath {
    /// `_CallPath(**fields)`: each keyword one of the fields above (a value of None leaves it unset).
    #[new]
    #[pyo3(signature = (**fields))]
    fn py_new(fields: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut path = Self::default();
        for (name, value) in fields.into_iter().flat_map(|fields| fields.iter()) {
            let name = name.cast::<PyString>()?.to_str()?.to_owned();
            if value.is_none() {
                continue;
            }
            if !path.set(&name, value.unbind()) {
                return Err(PyTypeError::new_err(format!(
                    "_CallPath: no field {name:?}"
                )));
            }
        }
        Ok(path)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for value in self.fields() {
            visit.call(value)?;
        }
        Ok(())
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
        let state = proxy.getattr(intern!(py, "_self_state"))?;
        if state.eq(field(py, &self.init_state, "init_state")?)? {
            proxy.call_method0(intern!(py, "enable_recording"))?;
        }
        let inner = proxy.getattr(intern!(py, "__wrapped__"))?;
        let setattr = inner.get_type().getattr(intern!(py, "__setattr__"))?;
        if !proxy
            .get_type()
            .is(field(py, &self.module_cls, "module_cls")?)
            || !setattr.is(field(py, &self.nn_setattr, "nn_setattr")?)
        {
            return field(py, &self.forward_stock_swap, "forward_stock_swap")?
                .call1((proxy, args, kwargs));
        }
        let namespace = inner.getattr(intern!(py, "__dict__"))?;
        let state = namespace.cast::<PyDict>()?;
        let result = self.swap_out(proxy, state).and_then(|()| {
            let wrapper = proxy.getattr(intern!(py, "_self_wrapper"))?;
            let wrapper_cls = wrapper.get_type();
            if wrapper_cls.is(field(py, &self.tuned_cls, "tuned_cls")?)
                && wrapper_cls.getattr(intern!(py, "__call__"))?.is(field(
                    py,
                    &self.tuned_call,
                    "tuned_call",
                )?)
            {
                self.call(&wrapper, args, kwargs)
            } else {
                wrapper.call(args, Some(kwargs))
            }
        });
        let restored = (|| {
            let pre = item(state, intern!(py, "_current_forward_pre_hooks"))?;
            state.set_item(intern!(py, "_forward_pre_hooks"), pre)?;
            state.set_item(
                intern!(py, "forward"),
                proxy.getattr(intern!(py, "_self_proxy_forward"))?,
            )?;
            let post = item(state, intern!(py, "_current_forward_hooks"))?;
            state.set_item(intern!(py, "_forward_hooks"), post)
        })();
        finally(py, result, restored)
    }

    /// `TunedModule.__call__(tuned, *args, **kwargs)`: bound by the call shape's plan (`_BindPlan`),
    /// then in a new AITune context naming the module, the backend function: `safe_call_backend`
    /// (the backend whose key equals the call's metadata), `call_unique_backend`, or any other
    /// function as it is.
    #[pyo3(signature = (tuned, args, kwargs, /))]
    fn call<'py>(
        &self,
        tuned: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = tuned.py();
        let signature = tuned.getattr(intern!(py, "_forward_signature"))?;
        let plan = field(py, &self.binder, "binder")?.call1((signature, args, kwargs))?;
        let context = field(py, &self.context, "context")?;
        if plan.is_none()
            || !context
                .get_type()
                .is(field(py, &self.context_cls, "context_cls")?)
        {
            return field(py, &self.call_stock_steps, "call_stock_steps")?
                .call1((tuned, args, kwargs));
        }
        let BoundCall {
            args: call_args,
            kwargs: call_kwargs,
            arguments,
        } = plan.cast::<BindPlan>()?.get().bind(args, kwargs)?;
        let func = tuned.getattr(intern!(py, "_backend_func"))?;
        let module_name = tuned.getattr(intern!(py, "_module_name"))?;
        let key = field(py, &self.module_key, "module_key")?;
        push_context(&context, Some((&key, &module_name)))?;
        let result = self.call_backend(tuned, &func, &call_args, &call_kwargs, &arguments);
        finally(py, result, pop_context(&context))
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
        let py = backend.py();
        let parts = field(py, &self.parts, "parts")?;
        let context = field(py, &self.context, "context")?;
        if !context
            .get_type()
            .is(field(py, &self.context_cls, "context_cls")?)
        {
            let stock = parts.getattr(intern!(py, "stock"))?;
            let mut all = vec![backend.clone()];
            all.extend(args.iter());
            return stock.call(PyTuple::new(py, all)?, Some(kwargs));
        }
        let top = push_context(&context, None)?;
        let result = self.infer_in_context(&parts, &top, backend, args, kwargs);
        finally(py, result, pop_context(&context))
    }
}

impl CallPath {
    /// `Module._forward`'s first half: the hook dicts kept (as copies) and emptied, the module's
    /// own `forward` in place.
    fn swap_out(&self, proxy: &Bound<'_, PyAny>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let py = proxy.py();
        let ordered_dict = field(py, &self.ordered_dict, "ordered_dict")?;
        let pre = ordered_dict.call1((item(state, intern!(py, "_forward_pre_hooks"))?,))?;
        state.set_item(intern!(py, "_current_forward_pre_hooks"), pre)?;
        let post = ordered_dict.call1((item(state, intern!(py, "_forward_hooks"))?,))?;
        state.set_item(intern!(py, "_current_forward_hooks"), post)?;
        state.set_item(intern!(py, "_forward_pre_hooks"), ordered_dict.call0()?)?;
        state.set_item(
            intern!(py, "forward"),
            proxy.getattr(intern!(py, "_self_orig_forward"))?,
        )?;
        state.set_item(intern!(py, "_forward_hooks"), ordered_dict.call0()?)
    }

    /// Inside the module's context: the backend `func` picks, then its `infer`.
    fn call_backend<'py>(
        &self,
        tuned: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        call_args: &Bound<'py, PyAny>,
        call_kwargs: &Bound<'py, PyAny>,
        arguments: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = tuned.py();
        let method = func.getattr_opt(intern!(py, "__func__"))?;
        let own = |expected: &Option<Py<PyAny>>| -> PyResult<bool> {
            Ok(match (&method, expected) {
                (Some(method), Some(expected)) if method.is(expected.bind(py)) => {
                    func.getattr(intern!(py, "__self__"))?.is(tuned)
                }
                _ => false,
            })
        };
        let backend = if own(&self.safe_call)? {
            self.backend_for(tuned, arguments)?
        } else if own(&self.unique_call)? {
            tuned.getattr(intern!(py, "_unique_backend"))?
        } else {
            return func.call1(((call_args, call_kwargs),));
        };
        let args = call_args.cast::<PyTuple>()?;
        let kwargs = call_kwargs.cast::<PyDict>()?;
        let infer = backend.get_type().getattr_opt(intern!(py, "infer"))?;
        if infer.is_some_and(|f| {
            self.our_infer
                .as_ref()
                .is_some_and(|ours| f.is(ours.bind(py)))
        }) && !has_own(&backend, intern!(py, "infer"))?
            && !kwargs.contains(intern!(py, "_method"))?
        {
            return self.infer(&backend, args, kwargs);
        }
        backend
            .getattr(intern!(py, "infer"))?
            .call(args, Some(kwargs))
    }

    /// `safe_call_backend`'s lookup: the backend whose key equals the call's metadata.
    fn backend_for<'py>(
        &self,
        tuned: &Bound<'py, PyAny>,
        arguments: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = tuned.py();
        let owner = field(py, &self.tuned_module, "tuned_module")?;
        let sample_metadata = owner.getattr(intern!(py, "SampleMetadata"))?;
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
        let missing = || -> PyResult<PyErr> {
            let message = tuned
                .getattr(intern!(py, "ERROR_NO_BACKEND_FOUND"))?
                .call_method1(intern!(py, "format"), (&metadata,))?;
            Ok(PyRuntimeError::new_err(message.unbind()))
        };
        let ordered = field(py, &self.ordered_dict, "ordered_dict")?;
        let kind = backends.get_type();
        if kind.is(&ordered) || kind.is(py.get_type::<PyDict>()) {
            return match backends.cast::<PyDict>()?.get_item(&metadata)? {
                Some(backend) => Ok(backend),
                None => Err(missing()?),
            };
        }
        if !backends.contains(&metadata)? {
            return Err(missing()?);
        }
        backends.get_item(&metadata)
    }

    /// `Backend.infer`'s body in its context (`top`, already pushed).
    fn infer_in_context<'py>(
        &self,
        parts: &Bound<'py, PyAny>,
        top: &Bound<'py, PyAny>,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let backend_key = field(py, &self.backend_key, "backend_key")?;
        let description = field(py, &self.describe, "describe")?.call1((backend,))?;
        top.set_item(&backend_key, description)?;
        let decorator = parts.getattr(intern!(py, "nvtx_decorator"))?;
        let mut message = formatted(&decorator.getattr(intern!(py, "name"))?)?;
        for (label, key) in [
            (" module:", field(py, &self.module_key, "module_key")?),
            (" backend:", backend_key),
        ] {
            let value = top.call_method1(intern!(py, "get"), (key,))?;
            if !value.is_none() {
                message.push_str(label);
                message.push_str(&formatted(&value)?);
            }
        }
        let message = PyString::new(py, &message);
        let annotation = self.annotation_for(parts, &message)?;
        decorator.setattr(intern!(py, "_nvtx_annotation"), &annotation)?;
        annotation.call_method0(intern!(py, "__enter__"))?;
        let result = self.infer_scoped(parts, backend, args, kwargs);
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

    /// The nvtx `annotate` object for `message`, kept per message while `nvtx.annotate` is the
    /// class the cache was filled from (else `_annotation` decides and makes one).
    fn annotation_for<'py>(
        &self,
        parts: &Bound<'py, PyAny>,
        message: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = parts.py();
        let annotate = parts
            .getattr(intern!(py, "nvtx_module"))?
            .getattr(intern!(py, "nvtx"))?
            .getattr(intern!(py, "annotate"))?;
        if annotate.is(parts.getattr(intern!(py, "annotate_cls"))?) {
            let kept = parts.getattr(intern!(py, "annotations"))?;
            if let Some(annotation) = kept.cast::<PyDict>()?.get_item(message)? {
                if !annotation.is_none() {
                    return Ok(annotation);
                }
            }
        }
        field(py, &self.annotation, "annotation")?.call1((parts, message))
    }

    /// Inside the nvtx range: the hardware-metrics scope around the state check and `_infer`.
    fn infer_scoped<'py>(
        &self,
        parts: &Bound<'py, PyAny>,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let metrics = parts.getattr(intern!(py, "metrics_module"))?;
        let scope = parts.getattr(intern!(py, "scope"))?;
        metrics
            .call_method0(intern!(py, "get_default_collector"))?
            .call_method1(intern!(py, "start_scope"), (scope,))?;
        let result = self.checked_infer(parts, backend, args, kwargs);
        let ended = metrics
            .call_method0(intern!(py, "get_default_collector"))
            .and_then(|collector| collector.call_method0(intern!(py, "end_scope")))
            .map(drop);
        finally(py, result, ended)
    }

    /// The backend's state checked, then its `_infer`.
    fn checked_infer<'py>(
        &self,
        parts: &Bound<'py, PyAny>,
        backend: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = backend.py();
        let state = backend.getattr(intern!(py, "state"))?;
        let states = parts.getattr(intern!(py, "states"))?;
        if state.ne(states.get_item(0)?)? && state.ne(states.get_item(1)?)? {
            let name = formatted(&backend.getattr(intern!(py, "name"))?)?;
            return Err(PyRuntimeError::new_err(format!(
                "Cannot run inference, backend {name} should be activated first"
            )));
        }
        let eager = field(py, &self.eager_infer, "eager_infer").ok();
        let own_infer = backend.get_type().getattr(intern!(py, "_infer"))?;
        if eager.is_none_or(|eager| !own_infer.is(eager))
            || has_own(backend, intern!(py, "_infer"))?
        {
            return backend
                .getattr(intern!(py, "_infer"))?
                .call(args, Some(kwargs));
        }
        // stock TorchEager's `_infer`: `with torch.no_grad(): return self._orig_module(...)`
        let enabled = field(py, &self.grad_enabled, "grad_enabled")?.call0()?;
        let set_grad = field(py, &self.set_grad_enabled, "set_grad_enabled")?;
        set_grad.call1((false,))?;
        let result = backend
            .getattr(intern!(py, "_orig_module"))
            .and_then(|module| self.call_module(&module, args, kwargs));
        finally(py, result, set_grad.call1((enabled,)).map(drop))
    }
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
        if self.calls_forward_only(module)? {
            let py = module.py();
            return module
                .getattr(intern!(py, "forward"))?
                .call(args, Some(kwargs));
        }
        module.call(args, Some(kwargs))
    }

    /// Whether `value` is an empty dict or `OrderedDict` (exactly: a subclass's truth may be its own).
    fn empty_dict(&self, value: Option<Bound<'_, PyAny>>) -> bool {
        value.is_some_and(|value| {
            let py = value.py();
            let kind = value.get_type();
            let known = kind.is(py.get_type::<PyDict>())
                || self
                    .ordered_dict
                    .as_ref()
                    .is_some_and(|od| kind.is(od.bind(py)));
            // a dict or OrderedDict exactly: its length is its truth
            known && value.cast::<PyDict>().is_ok_and(|dict| dict.is_empty())
        })
    }

    fn calls_forward_only(&self, module: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = module.py();
        let (Some(call), Some(call_impl), Some(globals), Some(is_tracing)) = (
            &self.module_call,
            &self.module_call_impl,
            &self.module_globals,
            &self.is_tracing,
        ) else {
            return Ok(false);
        };
        let cls = module.get_type();
        if !cls.getattr(intern!(py, "__call__"))?.is(call)
            || !cls.getattr(intern!(py, "_call_impl"))?.is(call_impl)
        {
            return Ok(false);
        }
        let Some(namespace) = module.getattr_opt(intern!(py, "__dict__"))? else {
            return Ok(false);
        };
        let Ok(namespace) = namespace.cast::<PyDict>() else {
            return Ok(false);
        };
        // torch's class attribute (None), or the instance's once `module.compile()` ran
        match module.getattr_opt(intern!(py, "_compiled_call_impl"))? {
            Some(compiled) if compiled.is_none() => {}
            _ => return Ok(false),
        }
        let globals = globals.bind(py).cast::<PyDict>()?;
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
            if !self.empty_dict(dict.get_item(name)?) {
                return Ok(false);
            }
        }
        Ok(!is_tracing.bind(py).call0()?.is_truthy()?)
    }
}
