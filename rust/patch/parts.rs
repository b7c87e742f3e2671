//! The call path's parts: one per stock step it does in place, each learned whole by a `learn_*`
//! function of `python/aitune_fast/patch/_call_path.py`. Every field is required, so a part that
//! misses one is a TypeError when it is learned, never when a call comes; a part is frozen, and a
//! newly learned one goes into a new `_CallPath`. The private names the steps read of AITune's,
//! torch's and wrapt's objects are listed in `_names.NATIVE_NAMES`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use super::caches::{BindCache, DescribeCache};
use super::guard::ClassGuard;

/// Declares a part: its fields (each a `Py` of the given type, readable from Python), a
/// constructor taking each by keyword, and the GC's traversal of them.
macro_rules! part {
    (
        $(#[$meta:meta])*
        $name:ident as $py_name:literal {
            $($(#[$field_meta:meta])* $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[pyclass(module = "aitune_fast._core", name = $py_name, frozen, get_all)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: Py<$ty>,)*
        }

        #[pymethods]
        impl $name {
            // one keyword argument a field, as Python names them: a part is built in one call
            #[allow(clippy::too_many_arguments)]
            #[new]
            #[pyo3(signature = (*, $($field),*))]
            fn py_new($($field: Py<$ty>),*) -> Self {
                Self { $($field),* }
            }

            fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
                $(visit.call(&self.$field)?;)*
                Ok(())
            }
        }
    };
}

part! {
    /// AITune's global context, pushed and popped in place of `with global_context:` and `set`.
    ContextPart as "_ContextPart" {
        /// `aitune.global_context.global_context`
        obj: PyAny,
        /// its class, `GlobalContext`
        context_cls: PyType,
        /// `MODULE_CONTEXT_KEY`
        module_key: PyAny,
        /// `BACKEND_CONTEXT_KEY`
        backend_key: PyAny,
        /// the class still holds AITune's `__enter__`, `__exit__`, `set` and `_current_data`
        guard: ClassGuard,
        /// `_NameGuard`s: the modules whose code the path does in place (`TunedModule.__call__`'s,
        /// `with_backend_context`'s) still name this context and its keys
        names: PyTuple,
    }
}

part! {
    /// `Module._forward`'s hook swap, done in the wrapped module's `__dict__`.
    ForwardPart as "_ForwardPart" {
        /// `ModuleState.INIT`
        init_state: PyAny,
        /// `nn.Module.__setattr__`: the swap writes `__dict__` only under it
        nn_setattr: PyAny,
        /// `_forward`'s body as stock runs it (through the two helpers)
        stock_swap: PyAny,
        /// AITune's `Module` (the guarded class: a proxy of another is swapped as stock does) still
        /// holds AITune's `_restore_original_forward`, `_proxy_forward` and a generic-first
        /// `__getattribute__`
        guard: ClassGuard,
    }
}

part! {
    /// `TunedModule.__call__`: binding, the module's context, the backend lookup.
    TunedCallPart as "_TunedCallPart" {
        /// AITune's `TunedModule`
        tuned_cls: PyType,
        /// the shim installed as its `__call__`
        shim: PyAny,
        /// `aitune.torch.module.tuned_module`, whose `SampleMetadata` the lookup uses
        owner: PyAny,
        /// the plans of the call shapes that repeat
        binder: BindCache,
        /// `__call__` step by step as stock runs it
        stock_steps: PyAny,
        /// `TunedModule.safe_call_backend` where AITune's own (else an object no function is)
        safe_call: PyAny,
        /// `TunedModule.call_unique_backend`, likewise
        unique_call: PyAny,
    }
}

part! {
    /// `Backend.infer`: its context, nvtx range, hardware-metrics scope and state check.
    InferPart as "_InferPart" {
        /// the shim installed as `Backend.infer`
        shim: PyAny,
        /// stock's `Backend.infer` (its decorator chain)
        stock: PyAny,
        /// `backend.describe()`, kept where that is a function of its key
        describe: DescribeCache,
        /// `_call_path._annotation`: the nvtx object for a message not in `annotations`
        annotation: PyAny,
        /// the chain's `annotate_with_nvtx` object
        nvtx_decorator: PyAny,
        /// `aitune.utils.monitoring.nvtx_annotation`
        nvtx_module: PyAny,
        /// `aitune.utils.monitoring.hardware_metrics_annotation`
        metrics_module: PyAny,
        /// the hardware-metrics scope's name
        scope: PyString,
        /// `(BackendState.ACTIVE, BackendState.DEPLOYED)`: the states `infer` accepts
        states: PyTuple,
        /// nvtx objects by message, made by the class `annotate_cls[0]` (the cache changes; the part does not)
        annotations: PyDict,
        /// one item: the `nvtx.annotate` class whose objects `annotations` holds (None: none yet)
        annotate_cls: PyList,
    }
}

part! {
    /// Stock TorchEager's `_infer`: the module called with grad off.
    EagerPart as "_EagerPart" {
        /// stock's `TorchEagerBackend._infer`
        infer: PyAny,
        /// `torch.is_grad_enabled`
        grad_enabled: PyAny,
        /// `torch._C._set_grad_enabled`
        set_grad_enabled: PyAny,
        /// `torch.no_grad` and what it calls are torch's own and unchanged (guards)
        grad_guards: PyTuple,
    }
}

part! {
    /// `nn.Module.__call__` where it would only call `forward`.
    ModuleCallPart as "_ModuleCallPart" {
        /// torch's `nn.Module.__call__`
        call: PyAny,
        /// torch's `nn.Module._call_impl`
        call_impl: PyAny,
        /// `torch.nn.modules.module`'s namespace: its global hook dicts
        globals: PyDict,
        /// `torch._C._is_tracing` (or `_get_tracing_state`)
        is_tracing: PyAny,
    }
}

part! {
    /// The hardware-metrics scope while AITune's collector is its no-op one (metrics off, as they
    /// are unless enabled): then `start_scope` and `end_scope` do nothing, and the path skips them.
    MetricsPart as "_MetricsPart" {
        /// `setup_hardware_metrics._DEFAULT_SESSION`
        session: PyAny,
        /// its class still holds AITune's `get_collector`, `_should_collect` and a generic-first
        /// `__getattribute__`
        session_guard: ClassGuard,
        /// `HARDWARE_METRICS_ENABLED` as learned (`names` watch it)
        enabled: PyAny,
        /// `NoOpHardwareMetricsCollector` still holds AITune's no-op `start_scope` and `end_scope`
        noop_guard: ClassGuard,
        /// `_NameGuard`s: `hardware_metrics_annotation` names AITune's `get_default_collector`, and
        /// `setup_hardware_metrics` the session and `HARDWARE_METRICS_ENABLED` learned
        names: PyTuple,
    }
}
