//! `to_json_dict()`: the reference's JSON-ready dict, built without a Python detour for the common
//! cases.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::interp::interp;
use crate::metadata::{SampleMetadata, View};
use crate::paths::{Accessor, Arena};
use crate::tensor_spec::{dim_list, dtype_str};

/// Whether `json_serialize` returns `v` itself.
fn is_plain(v: &Bound<'_, PyAny>) -> bool {
    v.is_none()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_exact_instance_of::<PyFloat>()
        || v.is_exact_instance_of::<PyBool>()
}

fn serialize<'py>(py: Python<'py>, v: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if is_plain(&v) {
        return Ok(v);
    }
    interp(py)?.json_serialize.bind(py).call1((v,))
}

/// The serialised accessors of the last parent seen, so siblings share the work.
#[derive(Default)]
struct PathCache<'py> {
    parent: Option<u32>,
    items: Vec<Bound<'py, PyAny>>,
}

fn serialized_accessor<'py>(
    py: Python<'py>,
    arena: &Arena,
    step: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let acc = &arena.node(step).acc;
    match acc {
        Accessor::Obj(_) => serialize(py, acc.to_py(py)),
        _ => Ok(acc.to_py(py)),
    }
}

/// `json_serialize(locator.path)` for nodes met in walk order.
fn semantic_path_cached<'py>(
    py: Python<'py>,
    arena: &Arena,
    node: u32,
    cache: &mut PathCache<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = arena.node(node);
    if n.depth < 2 {
        return semantic_path(py, arena, node);
    }
    if cache.parent != Some(n.parent) {
        cache.items = arena
            .chain(n.parent)
            .into_iter()
            .map(|s| serialized_accessor(py, arena, s))
            .collect::<PyResult<_>>()?;
        cache.parent = Some(n.parent);
    }
    let leaf = serialized_accessor(py, arena, node)?;
    let mut items = Vec::with_capacity(cache.items.len() + 1);
    items.extend(cache.items.iter().cloned());
    items.push(leaf);
    Ok(PyList::new(py, items)?.into_any())
}

/// Rows of one shape: copies of a template dict holding `keys` (all `None`), so every row gets a
/// compact str-keyed table in one copy instead of growing one key at a time.
struct RowTemplate<'py> {
    template: Bound<'py, PyDict>,
}

impl<'py> RowTemplate<'py> {
    fn new(py: Python<'py>, keys: &[Bound<'py, PyString>]) -> PyResult<Self> {
        let template = PyDict::new(py);
        for k in keys {
            template.set_item(k, py.None())?;
        }
        Ok(RowTemplate { template })
    }

    fn row(&self) -> PyResult<Bound<'py, PyDict>> {
        self.template.copy()
    }
}

fn semantic_path<'py>(py: Python<'py>, arena: &Arena, node: u32) -> PyResult<Bound<'py, PyAny>> {
    let chain = arena.chain(node);
    let one = |s: u32| -> PyResult<Bound<'py, PyAny>> {
        let acc = &arena.node(s).acc;
        match acc {
            Accessor::Obj(_) => serialize(py, acc.to_py(py)),
            _ => Ok(acc.to_py(py)),
        }
    };
    if chain.len() == 1 {
        return one(chain[0]);
    }
    Ok(PyList::new(
        py,
        chain.into_iter().map(one).collect::<PyResult<Vec<_>>>()?,
    )?
    .into_any())
}

pub fn to_json_dict<'py>(py: Python<'py>, md: &SampleMetadata) -> PyResult<Bound<'py, PyDict>> {
    let it = interp(py)?;
    let phase = match &md.llm_phase {
        Some(p) => p.bind(py).clone(),
        None => py.None().into_bound(py),
    };
    if let Some((tensors, others)) = md.py_parts(py)? {
        // user-built or handed-out specs may hold anything: render exactly as the reference does
        let tensor_rows = PyList::empty(py);
        for item in tensors.bind(py).try_iter()? {
            let (loc, spec): (
                Bound<'py, crate::paths::Locator>,
                Bound<'py, crate::tensor_spec::TensorSpec>,
            ) = item?.extract()?;
            let l = loc.get();
            let s = spec.try_borrow()?;
            let row = PyDict::new(py);
            row.set_item(
                "access_path",
                l.arena.display_path(py, l.node, l.is_output)?,
            )?;
            row.set_item("semantic_path", l.arena.semantic_path(py, l.node)?)?;
            row.set_item("shape", s.shape.bind(py))?;
            row.set_item("min_shape", s.min_shape.bind(py))?;
            row.set_item("max_shape", s.max_shape.bind(py))?;
            row.set_item("dtype", s.dtype.bind(py))?;
            tensor_rows.append(row)?;
        }
        let other_rows = PyList::empty(py);
        for item in others.bind(py).try_iter()? {
            let (loc, value): (Bound<'py, crate::paths::Locator>, Bound<'py, PyAny>) =
                item?.extract()?;
            let l = loc.get();
            let row = PyDict::new(py);
            row.set_item(
                "access_path",
                l.arena.display_path(py, l.node, l.is_output)?,
            )?;
            row.set_item("semantic_path", l.arena.semantic_path(py, l.node)?)?;
            row.set_item("value", value)?;
            other_rows.append(row)?;
        }
        let d = PyDict::new(py);
        d.set_item("tensor_data", tensor_rows)?;
        d.set_item("other_data", other_rows)?;
        d.set_item("strict", md.strict)?;
        d.set_item("llm_phase", phase)?;
        return Ok(it
            .json_serialize
            .bind(py)
            .call1((d,))?
            .downcast_into::<PyDict>()?);
    }
    let v = md.view(py)?;
    let View::C(c) = &v else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "SampleMetadata changed during to_json_dict",
        ));
    };
    let keys = [
        PyString::intern(py, "access_path"),
        PyString::intern(py, "semantic_path"),
        PyString::intern(py, "shape"),
        PyString::intern(py, "min_shape"),
        PyString::intern(py, "max_shape"),
        PyString::intern(py, "dtype"),
        PyString::intern(py, "value"),
    ];
    let mut dtype_texts: Vec<(u16, Bound<'py, PyAny>)> = Vec::new();
    let mut cache = crate::paths::DisplayCache::default();
    let mut paths = PathCache::default();
    let mut text = crate::paths::Text::new();
    let tensor_row = RowTemplate::new(py, &keys[..6])?;
    let other_row = RowTemplate::new(py, &[keys[0].clone(), keys[1].clone(), keys[6].clone()])?;
    let mut tensor_rows = Vec::with_capacity(c.items.len());
    for i in 0..c.items.len() {
        let node = c.items[i].node;
        let s = c.spec(i);
        let row = tensor_row.row()?;
        text.clear();
        c.arena
            .write_display_path_cached(py, node, c.is_output, &mut cache, &mut text)?;
        row.set_item(&keys[0], text.to_py(py)?)?;
        row.set_item(
            &keys[1],
            semantic_path_cached(py, &c.arena, node, &mut paths)?,
        )?;
        row.set_item(&keys[2], dim_list(py, &s.shape)?)?;
        row.set_item(&keys[3], PyList::new(py, &s.min)?)?;
        row.set_item(&keys[4], PyList::new(py, &s.max)?)?;
        let text = match dtype_texts.iter().find(|(id, _)| *id == s.dtype) {
            Some((_, t)) => t.clone(),
            None => {
                // a `None` dtype (possible in decoded metadata) stays None, as json_serialize leaves it
                let t = if crate::tensor_spec::dtype_obj(py, s.dtype).is_none() {
                    py.None().into_bound(py)
                } else {
                    PyString::new(py, &dtype_str(s.dtype)).into_any()
                };
                dtype_texts.push((s.dtype, t.clone()));
                t
            }
        };
        row.set_item(&keys[5], text)?;
        tensor_rows.push(row);
    }
    let mut other_rows = Vec::with_capacity(c.others.len());
    for (node, value) in &c.others {
        let row = other_row.row()?;
        text.clear();
        c.arena
            .write_display_path_cached(py, *node, c.is_output, &mut cache, &mut text)?;
        row.set_item(&keys[0], text.to_py(py)?)?;
        row.set_item(
            &keys[1],
            semantic_path_cached(py, &c.arena, *node, &mut paths)?,
        )?;
        row.set_item(&keys[6], serialize(py, value.bind(py).clone())?)?;
        other_rows.push(row);
    }
    let d = PyDict::new(py);
    d.set_item("tensor_data", PyList::new(py, tensor_rows)?)?;
    d.set_item("other_data", PyList::new(py, other_rows)?)?;
    d.set_item("strict", md.strict)?;
    d.set_item("llm_phase", serialize(py, phase)?)?;
    Ok(d)
}
