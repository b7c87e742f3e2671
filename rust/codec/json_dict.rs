//! `to_json_dict()`: the reference's JSON-ready dict, built without a Python detour for the common
//! cases.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::interp::interp;
use crate::metadata::{Compact, SampleMetadata, View};
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

/// The keys of `to_json_dict`'s rows, interned.
struct RowKeys<'py> {
    access_path: Bound<'py, PyString>,
    semantic_path: Bound<'py, PyString>,
    shape: Bound<'py, PyString>,
    min_shape: Bound<'py, PyString>,
    max_shape: Bound<'py, PyString>,
    dtype: Bound<'py, PyString>,
    value: Bound<'py, PyString>,
}

impl<'py> RowKeys<'py> {
    fn new(py: Python<'py>) -> Self {
        RowKeys {
            access_path: PyString::intern(py, "access_path"),
            semantic_path: PyString::intern(py, "semantic_path"),
            shape: PyString::intern(py, "shape"),
            min_shape: PyString::intern(py, "min_shape"),
            max_shape: PyString::intern(py, "max_shape"),
            dtype: PyString::intern(py, "dtype"),
            value: PyString::intern(py, "value"),
        }
    }

    fn tensor_row(&self, py: Python<'py>) -> PyResult<RowTemplate<'py>> {
        RowTemplate::new(
            py,
            &[
                self.access_path.clone(),
                self.semantic_path.clone(),
                self.shape.clone(),
                self.min_shape.clone(),
                self.max_shape.clone(),
                self.dtype.clone(),
            ],
        )
    }

    fn other_row(&self, py: Python<'py>) -> PyResult<RowTemplate<'py>> {
        RowTemplate::new(
            py,
            &[
                self.access_path.clone(),
                self.semantic_path.clone(),
                self.value.clone(),
            ],
        )
    }
}

pub fn to_json_dict<'py>(py: Python<'py>, md: &SampleMetadata) -> PyResult<Bound<'py, PyDict>> {
    let phase = match &md.llm_phase {
        Some(p) => p.bind(py).clone(),
        None => py.None().into_bound(py),
    };
    if let Some((tensors, others)) = md.py_parts(py)? {
        return py_parts_json_dict(py, md, tensors.bind(py), others.bind(py), phase);
    }
    let v = md.view(py)?;
    let View::C(c) = &v else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "SampleMetadata changed during to_json_dict",
        ));
    };
    let keys = RowKeys::new(py);
    let mut paths = RowPaths::new(c);
    let tensor_rows = compact_tensor_rows(py, c, &keys, &mut paths)?;
    let other_rows = compact_other_rows(py, c, &keys, &mut paths)?;
    let d = PyDict::new(py);
    d.set_item("tensor_data", PyList::new(py, tensor_rows)?)?;
    d.set_item("other_data", PyList::new(py, other_rows)?)?;
    d.set_item("strict", md.strict)?;
    d.set_item("llm_phase", serialize(py, phase)?)?;
    Ok(d)
}

/// `to_json_dict` of metadata held as Python lists of `(locator, spec or value)`: user-built or
/// handed-out specs may hold anything, so the rows are rendered exactly as the reference does.
fn py_parts_json_dict<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    tensors: &Bound<'py, PyAny>,
    others: &Bound<'py, PyAny>,
    phase: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let tensor_rows = PyList::empty(py);
    for item in tensors.try_iter()? {
        let (loc, spec): (
            Bound<'py, crate::paths::Locator>,
            Bound<'py, crate::tensor_spec::TensorSpec>,
        ) = item?.extract()?;
        let s = spec.try_borrow()?;
        let row = py_row_paths(py, &loc)?;
        row.set_item("shape", s.shape.bind(py))?;
        row.set_item("min_shape", s.min_shape.bind(py))?;
        row.set_item("max_shape", s.max_shape.bind(py))?;
        row.set_item("dtype", s.dtype.bind(py))?;
        tensor_rows.append(row)?;
    }
    let other_rows = PyList::empty(py);
    for item in others.try_iter()? {
        let (loc, value): (Bound<'py, crate::paths::Locator>, Bound<'py, PyAny>) =
            item?.extract()?;
        let row = py_row_paths(py, &loc)?;
        row.set_item("value", value)?;
        other_rows.append(row)?;
    }
    let d = PyDict::new(py);
    d.set_item("tensor_data", tensor_rows)?;
    d.set_item("other_data", other_rows)?;
    d.set_item("strict", md.strict)?;
    d.set_item("llm_phase", phase)?;
    interp(py)?
        .json_serialize
        .bind(py)
        .call1((d,))?
        .downcast_into::<PyDict>()
        .map_err(Into::into)
}

/// A new row holding the access and semantic paths of `loc`.
fn py_row_paths<'py>(
    py: Python<'py>,
    loc: &Bound<'py, crate::paths::Locator>,
) -> PyResult<Bound<'py, PyDict>> {
    let l = loc.get();
    let row = PyDict::new(py);
    row.set_item(
        "access_path",
        l.arena.display_path(py, l.node, l.is_output)?,
    )?;
    row.set_item("semantic_path", l.arena.semantic_path(py, l.node)?)?;
    Ok(row)
}

/// Writes the access and semantic paths of compact metadata's rows, in walk order, sharing the
/// work between siblings.
struct RowPaths<'a, 'py> {
    c: &'a Compact,
    display: crate::paths::DisplayCache,
    semantic: PathCache<'py>,
    text: crate::paths::Text,
}

impl<'a, 'py> RowPaths<'a, 'py> {
    fn new(c: &'a Compact) -> Self {
        RowPaths {
            c,
            display: crate::paths::DisplayCache::default(),
            semantic: PathCache::default(),
            text: crate::paths::Text::new(),
        }
    }

    fn write(
        &mut self,
        py: Python<'py>,
        keys: &RowKeys<'py>,
        row: &Bound<'py, PyDict>,
        node: u32,
    ) -> PyResult<()> {
        let c = self.c;
        self.text.clear();
        c.arena.write_display_path_cached(
            py,
            node,
            c.is_output,
            &mut self.display,
            &mut self.text,
        )?;
        row.set_item(&keys.access_path, self.text.to_py(py)?)?;
        row.set_item(
            &keys.semantic_path,
            semantic_path_cached(py, &c.arena, node, &mut self.semantic)?,
        )
    }
}

fn compact_tensor_rows<'py>(
    py: Python<'py>,
    c: &Compact,
    keys: &RowKeys<'py>,
    paths: &mut RowPaths<'_, 'py>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let template = keys.tensor_row(py)?;
    let mut dtypes = DtypeTexts::default();
    let mut rows = Vec::with_capacity(c.items.len());
    for i in 0..c.items.len() {
        let s = c.spec(i);
        let row = template.row()?;
        paths.write(py, keys, &row, c.items[i].node)?;
        row.set_item(&keys.shape, dim_list(py, &s.shape)?)?;
        row.set_item(&keys.min_shape, PyList::new(py, &s.min)?)?;
        row.set_item(&keys.max_shape, PyList::new(py, &s.max)?)?;
        row.set_item(&keys.dtype, dtypes.get(py, s.dtype))?;
        rows.push(row);
    }
    Ok(rows)
}

fn compact_other_rows<'py>(
    py: Python<'py>,
    c: &Compact,
    keys: &RowKeys<'py>,
    paths: &mut RowPaths<'_, 'py>,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let template = keys.other_row(py)?;
    let mut rows = Vec::with_capacity(c.others.len());
    for (node, value) in &c.others {
        let row = template.row()?;
        paths.write(py, keys, &row, *node)?;
        row.set_item(&keys.value, serialize(py, value.bind(py).clone())?)?;
        rows.push(row);
    }
    Ok(rows)
}

/// The JSON text of each dtype met so far.
#[derive(Default)]
struct DtypeTexts<'py> {
    seen: Vec<(u16, Bound<'py, PyAny>)>,
}

impl<'py> DtypeTexts<'py> {
    fn get(&mut self, py: Python<'py>, dtype: u16) -> Bound<'py, PyAny> {
        if let Some((_, t)) = self.seen.iter().find(|(id, _)| *id == dtype) {
            return t.clone();
        }
        // a `None` dtype (possible in decoded metadata) stays None, as json_serialize leaves it
        let t = if crate::tensor_spec::dtype_obj(py, dtype).is_none() {
            py.None().into_bound(py)
        } else {
            PyString::new(py, &dtype_str(dtype)).into_any()
        };
        self.seen.push((dtype, t.clone()));
        t
    }
}
