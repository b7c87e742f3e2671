//! Python objects the core needs again and again, looked up once per interpreter.
//!
//! Everything here is created lazily on first use, after `aitune_fast` has finished importing,
//! so the Rust core can call back into the package's small Python helpers without import cycles.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

pub struct Interp {
    pub tensor_type: Py<PyType>,
    pub parameter_type: Py<PyType>,
    pub object_types: [Py<PyAny>; 4],
    pub info_levels: [Py<PyAny>; 3],
    /// `aitune_fast._config._source`: `[config]`, or AITune's config under `patch_aitune()`
    pub config_source: Py<PyList>,
    /// `aitune_fast.global_context._source`: `[global_context]`, or AITune's under `patch_aitune()`
    pub global_context_source: Py<PyList>,
    pub batch_size_key: Py<PyString>,
    pub json_serialize: Py<PyAny>,
    pub describe: Py<PyAny>,
    pub make_batch: Py<PyAny>,
    pub update_max_batch_size: Py<PyAny>,
    pub reference_spec: Py<PyAny>,
    pub sym_int: Py<PyAny>,
    pub sym_float: Py<PyAny>,
    pub user_dict: Py<PyType>,
    pub mapping_abc: Py<PyAny>,
    /// the type of `OrderedDict().items()`: iterating one yields each key of one dict once
    pub odict_items: Py<PyType>,
    /// `collections.OrderedDict`
    pub ordered_dict: Py<PyType>,
    /// `_thread.LockType` and `_thread.RLock`: their `__exit__` is their `release()`
    pub thread_locks: [Py<PyType>; 2],
    pub prefill: Py<PyString>,
    pub decode: Py<PyString>,
    pub empty_str: Py<PyString>,
    pub output_str: Py<PyString>,
}

static INTERP: PyOnceLock<Interp> = PyOnceLock::new();

pub fn interp(py: Python<'_>) -> PyResult<&'static Interp> {
    INTERP.get_or_try_init(py, || {
        let torch = py.import("torch")?;
        let enums = py.import("aitune_fast._enums")?;
        let object_type = enums.getattr("ObjectType")?;
        let info_level = enums.getattr("InfoLevel")?;
        let ot = |name: &str| -> PyResult<Py<PyAny>> { Ok(object_type.getattr(name)?.unbind()) };
        let il = |name: &str| -> PyResult<Py<PyAny>> { Ok(info_level.getattr(name)?.unbind()) };
        let helpers = py.import("aitune_fast._helpers")?;
        let gc = py.import("aitune_fast.global_context")?;
        Ok(Interp {
            tensor_type: torch.getattr("Tensor")?.cast_into::<PyType>()?.unbind(),
            parameter_type: torch
                .getattr("nn")?
                .getattr("Parameter")?
                .cast_into::<PyType>()?
                .unbind(),
            object_types: [
                ot("SEQUENCE")?,
                ot("DICT")?,
                ot("DATACLASS")?,
                ot("USER_TYPE")?,
            ],
            info_levels: [il("SHORT")?, il("MEDIUM")?, il("FULL")?],
            config_source: py
                .import("aitune_fast._config")?
                .getattr("_source")?
                .cast_into::<PyList>()?
                .unbind(),
            global_context_source: gc.getattr("_source")?.cast_into::<PyList>()?.unbind(),
            batch_size_key: gc
                .getattr("BATCH_SIZE_KEY")?
                .cast_into::<PyString>()?
                .unbind(),
            json_serialize: helpers.getattr("json_serialize")?.unbind(),
            describe: helpers.getattr("describe")?.unbind(),
            make_batch: helpers.getattr("make_batch")?.unbind(),
            update_max_batch_size: helpers.getattr("update_max_batch_size")?.unbind(),
            reference_spec: helpers.getattr("reference_spec")?.unbind(),
            sym_int: torch.getattr("SymInt")?.unbind(),
            sym_float: torch.getattr("SymFloat")?.unbind(),
            user_dict: py
                .import("collections")?
                .getattr("UserDict")?
                .cast_into::<PyType>()?
                .unbind(),
            mapping_abc: py.import("collections.abc")?.getattr("Mapping")?.unbind(),
            odict_items: py
                .import("collections")?
                .getattr("OrderedDict")?
                .call0()?
                .call_method0("items")?
                .get_type()
                .unbind(),
            ordered_dict: py
                .import("collections")?
                .getattr("OrderedDict")?
                .cast_into::<PyType>()?
                .unbind(),
            thread_locks: {
                let thread = py.import("_thread")?;
                [
                    thread.getattr("LockType")?.cast_into::<PyType>()?.unbind(),
                    thread.getattr("RLock")?.cast_into::<PyType>()?.unbind(),
                ]
            },
            prefill: PyString::intern(py, "prefill").unbind(),
            decode: PyString::intern(py, "decode").unbind(),
            empty_str: PyString::intern(py, "").unbind(),
            output_str: PyString::intern(py, "output").unbind(),
        })
    })
}

/// Which detail level `obj` asks for: 0 SHORT, 1 MEDIUM, 2 FULL. Our `InfoLevel` members, and
/// any other enum member named SHORT, MEDIUM or FULL (AITune's `InfoLevel`); anything else is a
/// `ValueError` (the reference silently renders nothing).
pub fn info_level_index(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let it = interp(py)?;
    if let Some(i) = it
        .info_levels
        .iter()
        .position(|m| m.as_ptr() == obj.as_ptr())
    {
        return Ok(i);
    }
    let enum_type = py.import("enum")?.getattr("Enum")?;
    if obj.is_instance(&enum_type)? {
        if let Ok(name) = obj.getattr(pyo3::intern!(py, "name"))?.extract::<String>() {
            match name.as_str() {
                "SHORT" => return Ok(0),
                "MEDIUM" => return Ok(1),
                "FULL" => return Ok(2),
                _ => {}
            }
        }
    }
    Err(pyo3::exceptions::PyValueError::new_err(format!(
        "info_level must be an InfoLevel member (SHORT, MEDIUM or FULL), got {}",
        obj.repr()?
    )))
}

/// Whether `from_inputs` detects the LLM phase: `enable_transformers_integration` of the active
/// config (aitune_fast's, or AITune's under `patch_aitune()`), read on every call.
pub fn transformers_integration(py: Python<'_>) -> PyResult<bool> {
    let it = interp(py)?;
    let source = it.config_source.bind(py);
    source
        .get_item(0)?
        .getattr(pyo3::intern!(py, "enable_transformers_integration"))?
        .is_truthy()
}

/// The batch size in the innermost `global_context` scope, read without taking its lock
/// (the GIL already serialises us with every writer).
pub fn context_batch_size<'py>(py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let it = interp(py)?;
    let ctx = it.global_context_source.bind(py).get_item(0)?;
    let stack = ctx.getattr(pyo3::intern!(py, "_data_stack"))?;
    let key = it.batch_size_key.bind(py);
    let stack = stack.cast_into::<pyo3::types::PyList>()?;
    for i in (0..stack.len()).rev() {
        let scope = stack.get_item(i)?.cast_into::<PyDict>()?;
        if let Some(v) = scope.get_item(key)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// The values of `keys` in `state`, the dict of a stock AITune object's `__dict__` that its
/// pickle holds (or `(None, dict)`, the form of slotted classes): exactly those keys.
pub fn stock_state<'py, const N: usize>(
    state: &Bound<'py, PyAny>,
    class: &str,
    keys: [&str; N],
) -> PyResult<[Bound<'py, PyAny>; N]> {
    let dict = match state.cast::<PyTuple>() {
        Ok(t) if t.len() == 2 && t.get_item(0)?.is_none() => t.get_item(1)?,
        _ => state.clone(),
    };
    let dict = dict.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{class}.__setstate__ takes the dict a stock AITune {class} pickles, got {}",
            type_name(state)
        ))
    })?;
    let mut out = Vec::with_capacity(N);
    for key in keys {
        out.push(
            dict.get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("{class} state: missing {key:?}")))?,
        );
    }
    if dict.len() != N {
        return Err(PyValueError::new_err(format!(
            "{class} state: unexpected keys (it holds exactly {keys:?})"
        )));
    }
    out.try_into()
        .map_err(|_| PyValueError::new_err(format!("{class} state: missing keys")))
}

/// The name of `v`'s type, for messages (`?` if the type has none that reads as text).
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
