//! Python objects the core needs again and again, looked up once per interpreter.
//!
//! Everything here is created lazily on first use, after `aitune_fast` has finished importing,
//! so the Rust core can call back into the package's small Python helpers without import cycles.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyString, PyType};

pub struct Interp {
    pub tensor_type: Py<PyType>,
    pub parameter_type: Py<PyType>,
    pub object_types: [Py<PyAny>; 4],
    pub info_levels: [Py<PyAny>; 3],
    pub config: Py<PyAny>,
    pub global_context: Py<PyAny>,
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
    pub prefill: Py<PyString>,
    pub decode: Py<PyString>,
    pub empty_str: Py<PyString>,
    pub output_str: Py<PyString>,
}

static INTERP: GILOnceCell<Interp> = GILOnceCell::new();

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
            tensor_type: torch.getattr("Tensor")?.downcast_into::<PyType>()?.unbind(),
            parameter_type: torch
                .getattr("nn")?
                .getattr("Parameter")?
                .downcast_into::<PyType>()?
                .unbind(),
            object_types: [
                ot("SEQUENCE")?,
                ot("DICT")?,
                ot("DATACLASS")?,
                ot("USER_TYPE")?,
            ],
            info_levels: [il("SHORT")?, il("MEDIUM")?, il("FULL")?],
            config: py
                .import("aitune_fast._config")?
                .getattr("config")?
                .unbind(),
            global_context: gc.getattr("global_context")?.unbind(),
            batch_size_key: gc
                .getattr("BATCH_SIZE_KEY")?
                .downcast_into::<PyString>()?
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
                .downcast_into::<PyType>()?
                .unbind(),
            mapping_abc: py.import("collections.abc")?.getattr("Mapping")?.unbind(),
            prefill: PyString::intern(py, "prefill").unbind(),
            decode: PyString::intern(py, "decode").unbind(),
            empty_str: PyString::intern(py, "").unbind(),
            output_str: PyString::intern(py, "output").unbind(),
        })
    })
}

/// Which `InfoLevel` member `obj` is: 0 SHORT, 1 MEDIUM, 2 FULL, None for anything else.
pub fn info_level_index(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    let it = interp(py)?;
    Ok(it
        .info_levels
        .iter()
        .position(|m| m.as_ptr() == obj.as_ptr()))
}

/// The batch size in the innermost `global_context` scope, read without taking its lock
/// (the GIL already serialises us with every writer).
pub fn context_batch_size<'py>(py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let it = interp(py)?;
    let ctx = it.global_context.bind(py);
    let stack = ctx.getattr(pyo3::intern!(py, "_data_stack"))?;
    let key = it.batch_size_key.bind(py);
    let stack = stack.downcast_into::<pyo3::types::PyList>()?;
    for i in (0..stack.len()).rev() {
        let scope = stack.get_item(i)?.downcast_into::<PyDict>()?;
        if let Some(v) = scope.get_item(key)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}
