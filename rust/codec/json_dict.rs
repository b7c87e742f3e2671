//! `to_json_dict()`: the reference's JSON-ready dict, built without a Python detour for the common
//! cases.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::interp::interp;
use crate::metadata::{Loc, SampleMetadata, View};
use crate::paths::{Accessor, Arena};
use crate::tensor_spec::dtype_str;

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
    fn new(py: Python<'py>, keys: &[&Bound<'py, PyString>]) -> PyResult<Self> {
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
    if chain.len() == 1 {
        return serialized_accessor(py, arena, chain[0]);
    }
    Ok(PyList::new(
        py,
        chain
            .into_iter()
            .map(|s| serialized_accessor(py, arena, s))
            .collect::<PyResult<Vec<_>>>()?,
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
}

/// `to_json_dict()`, in the reference's two steps: rows of the values as they are, then
/// `json_serialize` of every value that is not JSON already (user objects, a Python spec's lists),
/// in the order the rows hold them.
pub fn to_json_dict<'py>(py: Python<'py>, md: &SampleMetadata) -> PyResult<Bound<'py, PyDict>> {
    let v = md.view(py)?;
    let mut rows = Rows {
        keys: RowKeys::new(py),
        paths: RowPaths::default(),
        dtypes: DtypeTexts::default(),
        later: Vec::new(),
    };
    let tensor_rows = rows.tensors(py, &v)?;
    let other_rows = rows.others(py, &v)?;
    let d = PyDict::new(py);
    d.set_item("tensor_data", PyList::new(py, tensor_rows)?)?;
    d.set_item("other_data", PyList::new(py, other_rows)?)?;
    d.set_item("strict", md.strict)?;
    let phase = match &md.llm_phase {
        Some(p) => p.bind(py).clone(),
        None => py.None().into_bound(py),
    };
    rows.set(&d, &PyString::intern(py, "llm_phase"), phase)?;
    for (row, key, value) in rows.later {
        row.set_item(key, serialize(py, value)?)?;
    }
    Ok(d)
}

/// The rows of `to_json_dict`, and the cells still to serialize.
struct Rows<'py> {
    keys: RowKeys<'py>,
    paths: RowPaths<'py>,
    dtypes: DtypeTexts<'py>,
    /// `(row, key, value)`: cells whose values `json_serialize` changes, set once every row is built
    later: Vec<(Bound<'py, PyDict>, Bound<'py, PyString>, Bound<'py, PyAny>)>,
}

impl<'py> Rows<'py> {
    /// `row[key] = value` if it is JSON as it is, else later, serialized.
    fn set(
        &mut self,
        row: &Bound<'py, PyDict>,
        key: &Bound<'py, PyString>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        if is_plain(&value) {
            return row.set_item(key, value);
        }
        row.set_item(key, py_none(row.py()))?;
        self.later.push((row.clone(), key.clone(), value));
        Ok(())
    }

    fn tensors(&mut self, py: Python<'py>, v: &View<'_, 'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let k = &self.keys;
        let template = RowTemplate::new(
            py,
            &[
                &k.access_path,
                &k.semantic_path,
                &k.shape,
                &k.min_shape,
                &k.max_shape,
                &k.dtype,
            ],
        )?;
        let mut rows = Vec::with_capacity(v.n_tensors());
        for i in 0..v.n_tensors() {
            let row = template.row()?;
            self.paths.write(py, &self.keys, &row, &v.tensor_loc(i))?;
            let cells = v.spec_cells(py, i)?;
            let keys = [&self.keys.shape, &self.keys.min_shape, &self.keys.max_shape];
            let lists = [cells.shape, cells.min_shape, cells.max_shape];
            if cells.json_ready {
                for (key, list) in keys.into_iter().zip(lists) {
                    row.set_item(key, list)?;
                }
                row.set_item(&self.keys.dtype, self.dtypes.get(py, v.dtype(i)))?;
            } else {
                for (key, list) in keys.into_iter().zip(lists) {
                    self.later.push((row.clone(), key.clone(), list));
                }
                let dtype = self.keys.dtype.clone();
                self.set(&row, &dtype, cells.dtype)?;
            }
            rows.push(row);
        }
        Ok(rows)
    }

    fn others(&mut self, py: Python<'py>, v: &View<'_, 'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let k = &self.keys;
        let template = RowTemplate::new(py, &[&k.access_path, &k.semantic_path, &k.value])?;
        let mut rows = Vec::with_capacity(v.n_others());
        for i in 0..v.n_others() {
            let row = template.row()?;
            self.paths.write(py, &self.keys, &row, &v.other_loc(i))?;
            let value = self.keys.value.clone();
            self.set(&row, &value, v.other_value(py, i))?;
            rows.push(row);
        }
        Ok(rows)
    }
}

fn py_none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

/// Writes the access and semantic paths of rows, sharing the work between siblings met in walk
/// order (of one arena and direction: the caches start over at another).
#[derive(Default)]
struct RowPaths<'py> {
    /// the arena and direction the caches hold paths of
    of: Option<(*const Arena, bool)>,
    display: crate::paths::DisplayCache,
    semantic: PathCache<'py>,
    text: crate::paths::Text,
}

impl<'py> RowPaths<'py> {
    fn write(
        &mut self,
        py: Python<'py>,
        keys: &RowKeys<'py>,
        row: &Bound<'py, PyDict>,
        l: &Loc<'_>,
    ) -> PyResult<()> {
        let of = (l.arena as *const Arena, l.is_output);
        if self.of != Some(of) {
            self.display = crate::paths::DisplayCache::default();
            self.semantic = PathCache::default();
            self.of = Some(of);
        }
        self.text.clear();
        l.arena.write_display_path_cached(
            py,
            l.node,
            l.is_output,
            &mut self.display,
            &mut self.text,
        )?;
        row.set_item(&keys.access_path, self.text.to_py(py)?)?;
        row.set_item(
            &keys.semantic_path,
            semantic_path_cached(py, l.arena, l.node, &mut self.semantic)?,
        )
    }
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
