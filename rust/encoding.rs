//! Versioned, pickle-free encodings of a metadata: `to_json`/`from_json` and `to_dict`/`from_dict`.
//!
//! # `to_json()`: format `"aitune_fast.sample_metadata"`, version 1
//!
//! One JSON object (the schema ships as `aitune_fast/schema/sample_metadata.schema.json`):
//!
//! ```text
//! {"format": "aitune_fast.sample_metadata", "version": 1, "strict": bool, "llm_phase": str|null,
//!  "is_output": bool,
//!  "tensor_data": [{"locator": STEPS, "access_path": str, "semantic_path": LOSSY,
//!                   "shape": [int|str], "min_shape": [int], "max_shape": [int],
//!                   "dtype": "torch.<name>"|null, "bs_multipliers": [number], "is_output"?: bool}],
//!  "other_data":  [{"locator": STEPS, "access_path": str, "semantic_path": LOSSY,
//!                   "exact_value": EXACT, "value": LOSSY, "is_output"?: bool}]}
//! ```
//!
//! `access_path`, `semantic_path`, `value`, `shape`, `min_shape`, `max_shape`, `dtype`, `strict` and
//! `llm_phase` hold what `json.dumps(md.to_json_dict())` holds. The rest makes the round trip exact:
//! `STEPS` is the locator as `[[accessor, object_type], ...]` (object types 0 to 3, accessors as
//! `EXACT` values), `bs_multipliers` the batch-size multipliers (`NaN` included), `exact_value` the
//! other value, and `is_output` whether locators point into outputs (per entry only where an entry
//! differs from the document). `access_path`, `semantic_path` and `value` are derived, and checked
//! only for syntax (and `access_path` for being a string) on reading.
//!
//! `EXACT` values: `null`, `true`/`false`, integers (any size), floats (always with `.`, `e`, or
//! one of `NaN`, `Infinity`, `-Infinity`), strings, arrays (lists), objects (dicts whose keys are
//! all strings not starting with `$`), and one-key tagged objects: `{"$tuple": [...]}`,
//! `{"$set": [...]}`, `{"$frozenset": [...]}`, `{"$dict": [[key, value], ...]}` (any other dict),
//! `{"$bytes": "hex"}`, `{"$complex": [real, imag]}`, `{"$dtype": "torch.<name>"}`.
//!
//! # `to_dict()`
//!
//! The reference's keys. `strict` and `llm_phase` are plain values; `tensor_data` and `other_data`
//! are bytes holding compact UTF-8 JSON documents, each with its format and version:
//!
//! ```text
//! {"format": "aitune_fast.sample_metadata.tensor_data", "version": 1, "is_output": bool,
//!  "batch_size": number, "paths": PATHS, "dtypes": ["torch.<name>"|null, ...],
//!  "tensors": [[path, dtype, sizes] | [path, dtype, shape, min_shape, max_shape, bs_multipliers]]}
//! {"format": "aitune_fast.sample_metadata.other_data", "version": 1, "is_output": bool,
//!  "paths": PATHS, "others": [[path, EXACT], ...]}
//! ```
//!
//! `PATHS` is the locators' prefix tree: rows `[parent, accessor, object_type]` numbered from 1,
//! each parent 0 (the empty path) or an earlier row; rows refer to it by number (0: the empty
//! path), and to `dtypes` by position. A tensor that saw one shape is its sizes alone (its
//! multipliers follow from `batch_size`). Any row may end with `is_output` where it differs from
//! the part's. `from_dict` also reads dicts written by the reference: its pickled bytes (which
//! begin with `0x80`) go to `aitune_fast._legacy`, a restricted unpickler.
//!
//! # Errors
//!
//! Reading raises `ValueError` for anything but a well-formed document of a known format and
//! version: syntax, unknown or missing or repeated keys, wrong types, mismatched list lengths,
//! repeated locators, repeated set elements or dict keys. Writing raises `TypeError` for values it
//! cannot encode exactly and `ValueError` for circular or too deeply nested ones, naming the locator.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyComplex, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet,
    PyString, PyTuple, PyType,
};

use crate::json_text::{self as jt, JNum, JStr, Parser, Tok, MAX_NESTING};
use crate::locator::{
    path_eq, py_int_hash, Accessor, Arena, DisplayCache, Kind, Locator, Text, ROOT,
};
use crate::metadata::{Compact, Loc, SampleMetadata, View};
use crate::str_sink::{StrSink, CHUNK};
use crate::tensor_spec::{dtype_id, dtype_obj, multiplier, Dim, Spec, TensorSpec, FOREIGN_DTYPE};

pub const FORMAT: &str = "aitune_fast.sample_metadata";
pub const FORMAT_TENSORS: &str = "aitune_fast.sample_metadata.tensor_data";
pub const FORMAT_OTHERS: &str = "aitune_fast.sample_metadata.other_data";
pub const VERSION: i64 = 1;

const SUPPORTED: &str = "None, bool, int, float, str, bytes, complex, list, tuple, dict, set, \
                         frozenset and torch.dtype";

struct Torch {
    /// `torch.__dict__`: dtypes are looked up here, never through `getattr` (which may import)
    dict: Py<PyDict>,
    dtype: Py<PyType>,
}

static TORCH: GILOnceCell<Torch> = GILOnceCell::new();

fn torch(py: Python<'_>) -> PyResult<&'static Torch> {
    TORCH.get_or_try_init(py, || {
        let m = py.import("torch")?;
        Ok(Torch {
            dict: m.getattr("__dict__")?.downcast_into::<PyDict>()?.unbind(),
            dtype: m.getattr("dtype")?.downcast_into::<PyType>()?.unbind(),
        })
    })
}

fn is_dtype(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(v.get_type().is(torch(py)?.dtype.bind(py)))
}

/// The torch dtype named `name` (`"torch.float32"`), or a message saying why there is none.
fn dtype_named<'py>(py: Python<'py>, name: &str) -> PyResult<Result<Bound<'py, PyAny>, String>> {
    let attr = match name.strip_prefix("torch.") {
        Some(a)
            if !a.is_empty()
                && a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                && !a.as_bytes()[0].is_ascii_digit() =>
        {
            a
        }
        _ => {
            return Ok(Err(format!(
                "dtype {name:?} is not of the form \"torch.<name>\""
            )))
        }
    };
    let t = torch(py)?;
    match t.dict.bind(py).get_item(attr)? {
        Some(obj) if obj.get_type().is(t.dtype.bind(py)) => Ok(Ok(obj)),
        _ => Ok(Err(format!("{name:?} is not a torch dtype"))),
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The same kind of exception as `e` (TypeError, ValueError, else `e` itself), its message prefixed.
fn with_context(py: Python<'_>, e: PyErr, prefix: &str) -> PyErr {
    let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    let new = if e.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(format!("{prefix}: {msg}"))
    } else if e.is_instance_of::<PyValueError>(py) {
        PyValueError::new_err(format!("{prefix}: {msg}"))
    } else {
        return e;
    };
    new.set_cause(py, Some(e));
    new
}

// ================================================================================================
// writing
// ================================================================================================

/// A JSON string of `t`; lone surrogates are written as `\\uXXXX` escapes.
fn write_text(out: &mut String, t: &Text) -> PyResult<()> {
    match t.as_str() {
        Some(s) => jt::write_str(out, s),
        None => {
            if !jt::write_wtf8(out, t.as_bytes()) {
                return Err(pair_error());
            }
        }
    }
    Ok(())
}

fn pair_error() -> PyErr {
    PyValueError::new_err(
        "a string holds a high surrogate followed by a low one as two code points, \
         which JSON cannot tell from the pair's character",
    )
}

struct Enc<'py> {
    py: Python<'py>,
    out: String,
    scratch: String,
    path: Text,
    /// per dtype id: `Some(None)` for a `None` dtype, `Some(Some(name))` for a torch dtype
    dtypes: Vec<Option<Option<String>>>,
    /// containers being written, to refuse cycles
    active: Vec<usize>,
    depth: usize,
    prefix: Prefix,
    /// where `out` goes once it holds a chunk (`to_json`); `None` keeps everything in `out`
    sink: Option<StrSink<'py>>,
}

impl<'py> Enc<'py> {
    fn new(py: Python<'py>, capacity: usize) -> Enc<'py> {
        Enc {
            py,
            out: String::with_capacity(capacity),
            scratch: String::new(),
            path: Text::new(),
            dtypes: Vec::new(),
            active: Vec::new(),
            depth: 0,
            prefix: Prefix::default(),
            sink: None,
        }
    }

    fn open(&mut self, c: char) -> PyResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(PyValueError::new_err(format!(
                "the value is nested too deeply (JSON nesting above {MAX_NESTING} levels)"
            )));
        }
        self.out.push(c);
        Ok(())
    }

    fn close(&mut self, c: char) {
        self.depth -= 1;
        self.out.push(c);
    }

    fn enter(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let p = v.as_ptr() as usize;
        if self.active.contains(&p) {
            return Err(PyValueError::new_err(
                "circular reference: a container holds itself",
            ));
        }
        self.active.push(p);
        Ok(())
    }

    fn leave(&mut self) {
        self.active.pop();
    }

    fn pystr(&mut self, s: &Bound<'_, PyString>) -> PyResult<()> {
        match s.to_str() {
            Ok(t) => {
                jt::write_str(&mut self.out, t);
                Ok(())
            }
            Err(_) => {
                // lone surrogates: escape them
                let b =
                    s.call_method1(pyo3::intern!(self.py, "encode"), ("utf-8", "surrogatepass"))?;
                let b = b.downcast::<PyBytes>()?;
                if jt::write_wtf8(&mut self.out, b.as_bytes()) {
                    Ok(())
                } else {
                    Err(pair_error())
                }
            }
        }
    }

    fn int(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        match v.extract::<i64>() {
            Ok(i) => jt::write_i64(&mut self.out, i),
            Err(_) => {
                let s = v.str()?;
                self.out.push_str(s.to_str()?);
            }
        }
        Ok(())
    }

    /// `float.__repr__` (or a JSON float token): Rust's shortest digits, or Python's own where the
    /// two could break a tie differently.
    fn float(&mut self, v: f64) {
        let start = self.out.len();
        jt::write_f64(&mut self.out, v, &mut self.scratch);
        if v.is_finite() && v != 0.0 && jt::shortest_is_ambiguous(&self.scratch) {
            // SAFETY: the GIL is held; the result is a NUL-terminated PyMem buffer freed here
            unsafe {
                let p = ffi::PyOS_double_to_string(
                    v,
                    b'r' as std::os::raw::c_char,
                    0,
                    ffi::Py_DTSF_ADD_DOT_0,
                    std::ptr::null_mut(),
                );
                if p.is_null() {
                    ffi::PyErr_Clear(); // out of memory: keep Rust's digits, which read back the same
                    return;
                }
                let text = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
                ffi::PyMem_Free(p as *mut std::ffi::c_void);
                self.out.truncate(start);
                self.out.push_str(&text);
            }
        }
    }

    fn tagged_open(&mut self, tag: &str) -> PyResult<()> {
        self.open('{')?;
        self.out.push('"');
        self.out.push_str(tag);
        self.out.push_str("\":");
        Ok(())
    }

    /// An `EXACT` value (see the module docs).
    fn exact(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = self.py;
        if v.is_none() {
            self.out.push_str("null");
        } else if let Ok(b) = v.downcast_exact::<PyBool>() {
            self.out
                .push_str(if b.is_true() { "true" } else { "false" });
        } else if v.is_exact_instance_of::<PyInt>() {
            self.int(v)?;
        } else if let Ok(f) = v.downcast_exact::<PyFloat>() {
            self.float(f.value());
        } else if let Ok(s) = v.downcast_exact::<PyString>() {
            self.pystr(s)?;
        } else if v.is_exact_instance_of::<PyList>() {
            self.array(v, Self::exact)?;
        } else if v.is_exact_instance_of::<PyTuple>() {
            self.tagged_open("$tuple")?;
            self.array(v, Self::exact)?;
            self.close('}');
        } else if let Ok(d) = v.downcast_exact::<PyDict>() {
            self.enter(v)?;
            let items = d.items();
            let mut plain = true;
            for kv in items.iter() {
                let k = kv.get_item(0)?;
                plain = match k.downcast_exact::<PyString>() {
                    Ok(s) => !s.to_cow().map(|t| t.starts_with('$')).unwrap_or(true),
                    Err(_) => false,
                };
                if !plain {
                    break;
                }
            }
            if plain {
                self.open('{')?;
                for (i, kv) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let k = kv.get_item(0)?;
                    self.pystr(k.downcast::<PyString>()?)?;
                    self.out.push(':');
                    self.exact(&kv.get_item(1)?)?;
                }
                self.close('}');
            } else {
                self.tagged_open("$dict")?;
                self.open('[')?;
                for (i, kv) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.open('[')?;
                    self.exact(&kv.get_item(0)?)?;
                    self.out.push(',');
                    self.exact(&kv.get_item(1)?)?;
                    self.close(']');
                }
                self.close(']');
                self.close('}');
            }
            self.leave();
        } else if v.is_exact_instance_of::<PySet>() {
            self.tagged_open("$set")?;
            self.array(v, Self::exact)?;
            self.close('}');
        } else if v.is_exact_instance_of::<PyFrozenSet>() {
            self.tagged_open("$frozenset")?;
            self.array(v, Self::exact)?;
            self.close('}');
        } else if let Ok(b) = v.downcast_exact::<PyBytes>() {
            self.tagged_open("$bytes")?;
            self.out.push('"');
            for byte in b.as_bytes() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.out.push(HEX[(byte >> 4) as usize] as char);
                self.out.push(HEX[(byte & 15) as usize] as char);
            }
            self.out.push('"');
            self.close('}');
        } else if let Ok(c) = v.downcast_exact::<PyComplex>() {
            self.tagged_open("$complex")?;
            self.out.push('[');
            self.float(c.real());
            self.out.push(',');
            self.float(c.imag());
            self.out.push(']');
            self.close('}');
        } else if is_dtype(py, v)? {
            self.tagged_open("$dtype")?;
            let s = v.str()?;
            self.pystr(&s)?;
            self.close('}');
        } else {
            return Err(PyTypeError::new_err(format!(
                "a value of type {} cannot be encoded exactly (supported: {SUPPORTED})",
                v.get_type()
                    .fully_qualified_name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| type_name(v))
            )));
        }
        Ok(())
    }

    /// The items of the list, tuple or set `v` as a JSON array, each written by `item`
    /// (`exact` or `lossy`).
    fn array(
        &mut self,
        v: &Bound<'_, PyAny>,
        item: fn(&mut Self, &Bound<'_, PyAny>) -> PyResult<()>,
    ) -> PyResult<()> {
        self.enter(v)?;
        self.open('[')?;
        for (i, x) in v.try_iter()?.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            item(self, &x?)?;
        }
        self.close(']');
        self.leave();
        Ok(())
    }

    /// What `json.dumps(json_serialize(v))` writes, for a value `exact` accepted.
    fn lossy(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        if v.is_none()
            || v.is_exact_instance_of::<PyBool>()
            || v.is_exact_instance_of::<PyInt>()
            || v.is_exact_instance_of::<PyFloat>()
            || v.is_exact_instance_of::<PyString>()
        {
            return self.exact(v);
        }
        if v.is_exact_instance_of::<PyList>()
            || v.is_exact_instance_of::<PyTuple>()
            || v.is_exact_instance_of::<PySet>()
        {
            return self.array(v, Self::lossy);
        }
        if let Ok(d) = v.downcast_exact::<PyDict>() {
            self.enter(v)?;
            self.open('{')?;
            for (i, kv) in d.items().iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let k = kv.get_item(0)?;
                if let Ok(s) = k.downcast_exact::<PyString>() {
                    self.pystr(s)?;
                } else if k.is_exact_instance_of::<PyInt>() {
                    self.out.push('"');
                    self.int(&k)?;
                    self.out.push('"');
                } else {
                    let s = k.str()?;
                    self.pystr(&s)?;
                }
                self.out.push(':');
                self.lossy(&kv.get_item(1)?)?;
            }
            self.close('}');
            self.leave();
            return Ok(());
        }
        // frozenset, bytes, complex, dtype: json_serialize falls back to str()
        let s = v.str()?;
        self.pystr(&s)
    }

    fn accessor_exact(&mut self, acc: &Accessor) -> PyResult<()> {
        match acc {
            Accessor::Int(v) => {
                jt::write_i64(&mut self.out, *v);
                Ok(())
            }
            Accessor::Str(s) => self.pystr(s.bind(self.py)),
            Accessor::Obj(o) => self.exact(o.bind(self.py)),
        }
    }

    fn accessor_lossy(&mut self, acc: &Accessor) -> PyResult<()> {
        match acc {
            Accessor::Obj(o) => self.lossy(o.bind(self.py)),
            _ => self.accessor_exact(acc),
        }
    }

    fn step_exact(&mut self, arena: &Arena, s: u32, depth: usize) -> PyResult<()> {
        let n = arena.node(s);
        self.out.push('[');
        self.depth = depth;
        self.accessor_exact(&n.acc)?;
        self.out.push(',');
        self.out.push((b'0' + n.kind as u8) as char);
        self.out.push(']');
        Ok(())
    }

    /// The head of a `to_json` entry: `{"locator":...,"access_path":...,"semantic_path":...`.
    /// Entries below one parent share the text of the parent's steps (kept in `self.prefix`).
    fn entry_head(&mut self, l: &Loc<'_>) -> PyResult<()> {
        let (arena, node) = (l.arena, l.node);
        let parent = if node == ROOT {
            ROOT
        } else {
            arena.node(node).parent
        };
        self.out.push_str("{\"locator\":[");
        if parent == ROOT {
            // no step, or one: nothing to share
            if node != ROOT {
                self.step_exact(arena, node, 5)?;
            }
            self.out.push_str("],\"access_path\":");
            self.path.clear();
            arena.write_display_path(self.py, node, l.is_output, &mut self.path)?;
            write_text(&mut self.out, &self.path)?;
            self.out.push_str(",\"semantic_path\":");
            if node == ROOT {
                self.out.push_str("[]");
            } else {
                self.depth = 3;
                self.accessor_lossy(&arena.node(node).acc)?;
            }
            return Ok(());
        }
        let key = (arena as *const Arena as usize, l.is_output);
        if self.prefix.key != Some(key) {
            self.prefix.key = Some(key);
            self.prefix.parent = u32::MAX;
            self.prefix.display = DisplayCache::default();
        }
        if self.prefix.parent != parent {
            let chain = arena.chain(parent);
            let start = self.out.len();
            for (i, &s) in chain.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.step_exact(arena, s, 5)?;
            }
            self.prefix.locator.clear();
            self.prefix.locator.push_str(&self.out[start..]);
            self.out.truncate(start);
            for (i, &s) in chain.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.depth = 4;
                self.accessor_lossy(&arena.node(s).acc)?;
            }
            self.prefix.semantic.clear();
            self.prefix.semantic.push_str(&self.out[start..]);
            self.out.truncate(start);
            self.prefix.parent = parent;
        }
        self.out.push_str(&self.prefix.locator);
        self.out.push(',');
        self.step_exact(arena, node, 5)?;
        self.out.push_str("],\"access_path\":");
        self.path.clear();
        arena.write_display_path_cached(
            self.py,
            node,
            l.is_output,
            &mut self.prefix.display,
            &mut self.path,
        )?;
        write_text(&mut self.out, &self.path)?;
        self.out.push_str(",\"semantic_path\":[");
        self.out.push_str(&self.prefix.semantic);
        self.out.push(',');
        self.depth = 4;
        self.accessor_lossy(&arena.node(node).acc)?;
        self.out.push(']');
        Ok(())
    }

    /// The row of `node`'s path in a dict part's `paths` table (0: the empty path), writing the
    /// rows of it and of its ancestors not written yet.
    fn path_row(&mut self, rows: &mut PathRows, arena: &Arena, node: u32) -> PyResult<u32> {
        if node == ROOT {
            return Ok(0);
        }
        let key = arena as *const Arena as usize;
        let t = match rows.tables.iter().position(|(k, _)| *k == key) {
            Some(t) => t,
            None => {
                rows.tables.push((key, vec![0; arena.len()]));
                rows.tables.len() - 1
            }
        };
        let known = rows.tables[t].1[node as usize];
        if known != 0 {
            return Ok(known);
        }
        let mut stack = std::mem::take(&mut rows.stack);
        stack.clear();
        stack.push(node);
        let mut cur = arena.node(node).parent;
        while cur != ROOT && rows.tables[t].1[cur as usize] == 0 {
            stack.push(cur);
            cur = arena.node(cur).parent;
        }
        let mut parent_row = if cur == ROOT {
            0
        } else {
            rows.tables[t].1[cur as usize]
        };
        while let Some(n) = stack.pop() {
            if rows.rows > 0 {
                self.out.push(',');
            }
            rows.rows += 1;
            self.out.push('[');
            jt::write_i64(&mut self.out, parent_row as i64);
            self.out.push(',');
            let step = arena.node(n);
            self.depth = 3;
            self.accessor_exact(&step.acc)?;
            self.out.push(',');
            self.out.push((b'0' + step.kind as u8) as char);
            self.out.push(']');
            rows.tables[t].1[n as usize] = rows.rows;
            parent_row = rows.rows;
        }
        rows.stack = stack;
        Ok(parent_row)
    }

    /// [`Enc::dtype`] for tensor `i` of `v`, whose dtype may be one the table does not hold.
    fn dtype_of(&mut self, v: &View<'_, '_>, i: usize, id: u16) -> PyResult<()> {
        if id == FOREIGN_DTYPE {
            return Err(PyTypeError::new_err(format!(
                "its dtype {} is not a torch.dtype (nor None)",
                v.dtype_repr(self.py, i)
            )));
        }
        self.dtype(id)
    }

    fn dtype(&mut self, id: u16) -> PyResult<()> {
        let i = id as usize;
        if self.dtypes.len() <= i {
            self.dtypes.resize(i + 1, None);
        }
        if self.dtypes[i].is_none() {
            let obj = dtype_obj(self.py, id);
            let name = if obj.is_none() {
                None
            } else if is_dtype(self.py, &obj)? {
                Some(obj.str()?.to_str()?.to_owned())
            } else {
                return Err(PyTypeError::new_err(format!(
                    "its dtype {} is not a torch.dtype (nor None)",
                    obj.repr().map(|r| r.to_string()).unwrap_or_default()
                )));
            };
            self.dtypes[i] = Some(name);
        }
        match &self.dtypes[i] {
            Some(Some(name)) => jt::write_str(&mut self.out, name),
            _ => self.out.push_str("null"),
        }
        Ok(())
    }

    fn ints(&mut self, v: &[i64]) {
        self.out.push('[');
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            jt::write_i64(&mut self.out, *x);
        }
        self.out.push(']');
    }

    fn dims(&mut self, v: &[Dim]) {
        self.out.push('[');
        for (i, d) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            match d {
                Dim::Int(x) => jt::write_i64(&mut self.out, *x),
                other => {
                    self.scratch.clear();
                    other.write(&mut self.scratch);
                    jt::write_str(&mut self.out, &self.scratch);
                }
            }
        }
        self.out.push(']');
    }

    fn floats(&mut self, v: impl Iterator<Item = f64>) {
        self.out.push('[');
        for (i, x) in v.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.float(x);
        }
        self.out.push(']');
    }

    fn is_output_key(&mut self, l: &Loc<'_>, default_out: bool) {
        if l.is_output != default_out {
            self.out.push_str(if l.is_output {
                ",\"is_output\":true"
            } else {
                ",\"is_output\":false"
            });
        }
    }

    /// `,"shape":...,"min_shape":...,"max_shape":...,"dtype":...,"bs_multipliers":...` of tensor `i`.
    fn spec_fields(&mut self, v: &View<'_, '_>, i: usize) -> PyResult<()> {
        // fresh compact specs are written from their sizes, without building a Spec
        if let View::C(c) = v {
            if c.learned(i).is_none() {
                let dims = c.dims_of(i);
                self.out.push_str(",\"shape\":");
                self.ints(dims);
                self.out.push_str(",\"min_shape\":");
                self.ints(dims);
                self.out.push_str(",\"max_shape\":");
                self.ints(dims);
                self.out.push_str(",\"dtype\":");
                self.dtype(c.items[i].dtype)?;
                self.out.push_str(",\"bs_multipliers\":");
                let bs = c.batch_size;
                self.floats(dims.iter().map(|&d| multiplier(d, bs)));
                return Ok(());
            }
        }
        let s = v.spec(i);
        check_lengths(&s)?;
        self.out.push_str(",\"shape\":");
        self.dims(&s.shape);
        self.out.push_str(",\"min_shape\":");
        self.ints(&s.min);
        self.out.push_str(",\"max_shape\":");
        self.ints(&s.max);
        self.out.push_str(",\"dtype\":");
        self.dtype_of(v, i, s.dtype)?;
        self.out.push_str(",\"bs_multipliers\":");
        self.floats(s.mult.iter().copied());
        Ok(())
    }

    /// One `to_json` entry of `tensor_data` (`tensors`) or `other_data`.
    fn full_entry(
        &mut self,
        v: &View<'_, 'py>,
        tensors: bool,
        i: usize,
        default_out: bool,
    ) -> PyResult<()> {
        let l = if tensors {
            v.tensor_loc(i)
        } else {
            v.other_loc(i)
        };
        self.entry_head(&l)?;
        if tensors {
            self.spec_fields(v, i)?;
        } else {
            let value = v.other_value(self.py, i);
            self.out.push_str(",\"exact_value\":");
            self.depth = 3;
            self.exact(&value)?;
            self.out.push_str(",\"value\":");
            self.depth = 3;
            self.lossy(&value)?;
        }
        self.is_output_key(&l, default_out);
        self.out.push('}');
        Ok(())
    }

    /// `err`, said of entry `i`.
    fn entry_error(
        &mut self,
        v: &View<'_, '_>,
        tensors: bool,
        i: usize,
        err: PyErr,
        what: &str,
    ) -> PyErr {
        self.active.clear();
        let list = if tensors { "tensor_data" } else { "other_data" };
        let l = if tensors {
            v.tensor_loc(i)
        } else {
            v.other_loc(i)
        };
        let shown = l.arena.display_path_lossy(self.py, l.node, l.is_output);
        with_context(
            self.py,
            err,
            &format!("{what}: {list}[{i}] at locator {shown:?} cannot be encoded"),
        )
    }

    fn full_entries(
        &mut self,
        v: &View<'_, 'py>,
        tensors: bool,
        default_out: bool,
        what: &str,
    ) -> PyResult<()> {
        let n = if tensors { v.n_tensors() } else { v.n_others() };
        for i in 0..n {
            if i > 0 {
                self.out.push(',');
            }
            if let Err(e) = self.full_entry(v, tensors, i, default_out) {
                return Err(self.entry_error(v, tensors, i, e, what));
            }
            if self.sink.is_some() && self.out.len() >= CHUNK {
                self.spill()?;
            }
        }
        Ok(())
    }

    /// Hand what `out` holds to the sink, if there is one.
    fn spill(&mut self) -> PyResult<()> {
        if let Some(sink) = &mut self.sink {
            sink.write(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    /// The `paths` rows of every entry's locator; returns each entry's row.
    fn path_rows(&mut self, v: &View<'_, '_>, tensors: bool, what: &str) -> PyResult<Vec<u32>> {
        let n = if tensors { v.n_tensors() } else { v.n_others() };
        let mut rows = PathRows::default();
        let mut of = Vec::with_capacity(n);
        for i in 0..n {
            let l = if tensors {
                v.tensor_loc(i)
            } else {
                v.other_loc(i)
            };
            match self.path_row(&mut rows, l.arena, l.node) {
                Ok(r) => of.push(r),
                Err(e) => return Err(self.entry_error(v, tensors, i, e, what)),
            }
        }
        Ok(of)
    }

    fn out_flag(&mut self, l: &Loc<'_>, default_out: bool) {
        if l.is_output != default_out {
            self.out
                .push_str(if l.is_output { ",true" } else { ",false" });
        }
    }

    /// The `tensor_data` part of `to_dict` (format `FORMAT_TENSORS`).
    fn tensor_part(&mut self, v: &View<'_, 'py>, default_out: bool, what: &str) -> PyResult<()> {
        let n = v.n_tensors();
        let bs = match v {
            View::C(c) => c.batch_size,
            _ => (0..n)
                .find_map(|i| {
                    let s = v.spec(i);
                    let dims = fresh_dims(&s)?;
                    guess_bs(&dims, &s.mult).filter(|&b| mults_match(&dims, &s.mult, b))
                })
                .unwrap_or(f64::NAN),
        };
        self.out.push_str("{\"format\":\"");
        self.out.push_str(FORMAT_TENSORS);
        self.out.push_str("\",\"version\":1,\"is_output\":");
        self.out
            .push_str(if default_out { "true" } else { "false" });
        self.out.push_str(",\"batch_size\":");
        self.float(bs);
        self.out.push_str(",\"paths\":[");
        let rows = self.path_rows(v, true, what)?;
        self.out.push_str("],\"dtypes\":[");
        let mut table: Vec<u16> = Vec::new();
        let mut index: Vec<u32> = Vec::with_capacity(n);
        for i in 0..n {
            let id = match v {
                View::C(c) => c.items[i].dtype,
                _ => v.spec(i).dtype,
            };
            let at = match table.iter().position(|&t| t == id) {
                Some(at) => at,
                None => {
                    if !table.is_empty() {
                        self.out.push(',');
                    }
                    if let Err(e) = self.dtype_of(v, i, id) {
                        return Err(self.entry_error(v, true, i, e, what));
                    }
                    table.push(id);
                    table.len() - 1
                }
            };
            index.push(at as u32);
        }
        self.out.push_str("],\"tensors\":[");
        for i in 0..n {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push('[');
            jt::write_i64(&mut self.out, rows[i] as i64);
            self.out.push(',');
            jt::write_i64(&mut self.out, index[i] as i64);
            self.out.push(',');
            let fresh = match v {
                View::C(c) if c.learned(i).is_none() => {
                    self.ints(c.dims_of(i));
                    true
                }
                _ => false,
            };
            if !fresh {
                let s = v.spec(i);
                if let Err(e) = check_lengths(&s) {
                    return Err(self.entry_error(v, true, i, e, what));
                }
                match fresh_dims(&s).filter(|d| mults_match(d, &s.mult, bs)) {
                    Some(dims) => self.ints(&dims),
                    None => {
                        self.dims(&s.shape);
                        self.out.push(',');
                        self.ints(&s.min);
                        self.out.push(',');
                        self.ints(&s.max);
                        self.out.push(',');
                        self.floats(s.mult.iter().copied());
                    }
                }
            }
            self.out_flag(&v.tensor_loc(i), default_out);
            self.out.push(']');
        }
        self.out.push_str("]}");
        Ok(())
    }

    /// The `other_data` part of `to_dict` (format `FORMAT_OTHERS`).
    fn other_part(&mut self, v: &View<'_, 'py>, default_out: bool, what: &str) -> PyResult<()> {
        self.out.push_str("{\"format\":\"");
        self.out.push_str(FORMAT_OTHERS);
        self.out.push_str("\",\"version\":1,\"is_output\":");
        self.out
            .push_str(if default_out { "true" } else { "false" });
        self.out.push_str(",\"paths\":[");
        let rows = self.path_rows(v, false, what)?;
        self.out.push_str("],\"others\":[");
        for (i, row) in rows.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push('[');
            jt::write_i64(&mut self.out, row as i64);
            self.out.push(',');
            self.depth = 3;
            let value = v.other_value(self.py, i);
            if let Err(e) = self.exact(&value) {
                return Err(self.entry_error(v, false, i, e, what));
            }
            self.out_flag(&v.other_loc(i), default_out);
            self.out.push(']');
        }
        self.out.push_str("]}");
        Ok(())
    }
}

/// Rows written to a dict part's `paths` table, per arena: node -> row (0: not written).
#[derive(Default)]
struct PathRows {
    tables: Vec<(usize, Vec<u32>)>,
    rows: u32,
    stack: Vec<u32>,
}

/// The text of the parent steps shared by consecutive `to_json` entries.
#[derive(Default)]
struct Prefix {
    /// (arena, is_output) the texts are for
    key: Option<(usize, bool)>,
    parent: u32,
    locator: String,
    semantic: String,
    display: DisplayCache,
}

fn check_lengths(s: &Spec) -> PyResult<()> {
    if s.min.len() != s.rank() || s.max.len() != s.rank() || s.mult.len() != s.rank() {
        return Err(PyValueError::new_err(format!(
            "its shape, min_shape, max_shape and _bs_multipliers have different lengths \
             ({}, {}, {}, {})",
            s.rank(),
            s.min.len(),
            s.max.len(),
            s.mult.len()
        )));
    }
    Ok(())
}

/// The sizes of a spec that has seen one shape only (integer sizes, equal to min and max).
fn fresh_dims(s: &Spec) -> Option<Vec<i64>> {
    if s.min.len() != s.rank() || s.max.len() != s.rank() {
        return None;
    }
    s.shape
        .iter()
        .zip(s.min.iter().zip(&s.max))
        .map(|(d, (&a, &b))| match d {
            Dim::Int(x) if *x == a && *x == b => Some(a),
            _ => None,
        })
        .collect()
}

/// A batch size that would give `mults` for `dims`, when one of them tells.
fn guess_bs(dims: &[i64], mults: &[f64]) -> Option<f64> {
    if dims.is_empty() || mults.len() != dims.len() {
        return None;
    }
    if mults.iter().all(|m| m.is_nan()) {
        return Some(f64::NAN);
    }
    let (d, m) = dims
        .iter()
        .zip(mults)
        .find(|(&d, &m)| d != 0 && m.is_finite() && m != 0.0)?;
    let mut cand = *d as f64 / m;
    if !cand.is_finite() {
        return None;
    }
    let r = cand.round();
    if (cand - r).abs() <= 1e-9 * r.abs().max(1.0) {
        cand = r;
    }
    Some(cand)
}

/// Whether `mults` are exactly the multipliers `dims` get at batch size `bs` (NaN matching NaN).
fn mults_match(dims: &[i64], mults: &[f64], bs: f64) -> bool {
    dims.len() == mults.len()
        && dims.iter().zip(mults).all(|(&d, &m)| {
            let f = multiplier(d, bs);
            (f.is_nan() && m.is_nan()) || f.to_bits() == m.to_bits()
        })
}

/// Every locator occurs once among the tensors, and once among the other values (always true of
/// metadata built by a walk; user-built metadata may repeat one).
fn check_unique(py: Python<'_>, v: &View<'_, '_>, what: &str) -> PyResult<()> {
    if v.unique() {
        return Ok(());
    }
    // only specs held as Python objects can carry symbolic sizes (traced tensors)
    for i in 0..v.n_tensors() {
        if v.spec(i).is_symbolic() {
            let l = v.tensor_loc(i);
            return Err(PyTypeError::new_err(format!(
                "{what}: tensor_data[{i}] at locator {:?} has symbolic sizes (torch.SymInt); \
                 only concrete shapes can be encoded",
                l.arena.display_path_lossy(py, l.node, l.is_output)
            )));
        }
    }
    for (list, n) in [("tensor_data", v.n_tensors()), ("other_data", v.n_others())] {
        let loc = |i: usize| {
            if list == "tensor_data" {
                v.tensor_loc(i)
            } else {
                v.other_loc(i)
            }
        };
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::with_capacity(n);
        for i in 0..n {
            let li = loc(i);
            let h = li.arena.node(li.node).hash;
            let bucket = buckets.entry(h).or_default();
            for &j in bucket.iter() {
                let lj = loc(j);
                if path_eq(py, lj.arena, lj.node, li.arena, li.node)? {
                    return Err(PyValueError::new_err(format!(
                        "{what}: {list}[{j}] and {list}[{i}] have the same locator {:?}; \
                         a metadata with repeated locators cannot be encoded",
                        li.arena.display_path_lossy(py, li.node, li.is_output)
                    )));
                }
            }
            bucket.push(i);
        }
    }
    Ok(())
}

/// The document's `is_output`: the first entry's (false without entries, where it shows nowhere).
fn default_is_output(v: &View<'_, '_>) -> bool {
    if v.n_tensors() > 0 {
        v.tensor_loc(0).is_output
    } else if v.n_others() > 0 {
        v.other_loc(0).is_output
    } else {
        false
    }
}

fn phase<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    what: &str,
) -> PyResult<Option<Bound<'py, PyString>>> {
    match &md.llm_phase {
        None => Ok(None),
        Some(p) => match p.bind(py).downcast_exact::<PyString>() {
            Ok(s) => Ok(Some(s.clone())),
            Err(_) => Err(PyTypeError::new_err(format!(
                "{what}: llm_phase must be a str or None, got {}",
                type_name(p.bind(py))
            ))),
        },
    }
}

pub fn to_json<'py>(py: Python<'py>, md: &SampleMetadata) -> PyResult<Bound<'py, PyString>> {
    const WHAT: &str = "SampleMetadata.to_json";
    let v = md.view(py)?;
    check_unique(py, &v, WHAT)?;
    let out_default = default_is_output(&v);
    let phase = phase(py, md, WHAT)?;
    let size = 256 + 240 * v.n_tensors() + 160 * v.n_others();
    let mut e = if size < IN_PLACE {
        Enc::new(py, size)
    } else {
        let mut e = Enc::new(py, 2 * CHUNK);
        e.sink = Some(StrSink::new(py, size)?);
        e
    };
    e.out.push_str("{\"format\":\"");
    e.out.push_str(FORMAT);
    e.out.push_str("\",\"version\":1,\"strict\":");
    e.out.push_str(if md.strict { "true" } else { "false" });
    e.out.push_str(",\"llm_phase\":");
    match &phase {
        Some(s) => e.pystr(s)?,
        None => e.out.push_str("null"),
    }
    e.out.push_str(",\"is_output\":");
    e.out.push_str(if out_default { "true" } else { "false" });
    e.out.push_str(",\"tensor_data\":[");
    e.full_entries(&v, true, out_default, WHAT)?;
    e.out.push_str("],\"other_data\":[");
    e.full_entries(&v, false, out_default, WHAT)?;
    e.out.push_str("]}");
    e.spill()?;
    match e.sink.take() {
        Some(sink) => sink.finish(),
        None => Ok(PyString::new(py, &e.out)),
    }
}

/// From about this size `to_json` writes its text straight into the returned `str`, a chunk at a
/// time, rather than building it whole and copying it: a document this large is then held once
/// instead of twice, and it lands in one fresh allocation instead of two (glibc serves requests
/// above 32 MiB with new, not yet faulted-in memory every time). Smaller documents are cheapest
/// built whole: their buffers reuse freed memory from call to call.
const IN_PLACE: usize = 32 << 20;

pub fn to_dict<'py>(py: Python<'py>, md: &SampleMetadata) -> PyResult<Bound<'py, PyDict>> {
    const WHAT: &str = "SampleMetadata.to_dict";
    let v = md.view(py)?;
    check_unique(py, &v, WHAT)?;
    let out_default = default_is_output(&v);
    let phase = phase(py, md, WHAT)?;
    let mut e = Enc::new(py, 256 + 40 * v.n_tensors());
    e.tensor_part(&v, out_default, WHAT)?;
    let tensors = PyBytes::new(py, e.out.as_bytes());
    e.out = String::with_capacity(128 + 80 * v.n_others());
    e.other_part(&v, out_default, WHAT)?;
    let others = PyBytes::new(py, e.out.as_bytes());

    let d = PyDict::new(py);
    d.set_item("tensor_data", tensors)?;
    d.set_item("other_data", others)?;
    d.set_item("strict", md.strict)?;
    d.set_item("llm_phase", phase)?;
    Ok(d)
}

// ================================================================================================
// building a metadata from decoded entries
// ================================================================================================

/// A step's accessor as read, before it becomes a node.
enum Acc<'a, 'py> {
    Int(i64),
    Str(Cow<'a, str>),
    Obj(Bound<'py, PyAny>),
}

/// The dedup map's hasher: multiply-rotate over its small integer keys (std's SipHash costs more
/// than the rest of a lookup), started from a per-process random seed and finished with murmur's
/// fmix64 so that keys crafted to share low bits do not pile into one bucket.
#[derive(Clone, Copy)]
struct FastHasher(u64);

impl Default for FastHasher {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        FastHasher(*SEED.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x5eed);
            h.finish() | 1
        }))
    }
}

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

/// A step of the previous locator read, so that the next one, which usually shares its prefix,
/// finds its nodes without a lookup.
enum LastKey {
    Int(i64),
    Str(String),
    Never,
}

fn fnv(s: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A node's Int children while they are exactly `0..next`, all of kind `kind`.
#[derive(Clone, Copy, Default)]
struct DenseChildren {
    next: u32,
    kind: u8,
}

/// Entry flags for `is_output`: not given (the document's), false, true.
const OUT_DEFAULT: u8 = 0;

struct Build<'py> {
    py: Python<'py>,
    what: &'static str,
    arena: Arena,
    /// `(parent, kind + 4 * accessor type, key hash)` -> node, for Str accessors and, once
    /// `indexed`, Int accessors too
    dedup: FastMap<(u32, u8, u64), u32>,
    /// per node, while not `indexed`: its Int children, which are exactly `0..next` of one kind
    dense: Vec<DenseChildren>,
    /// whether `dedup` holds every Int node (see `step_int`)
    indexed: bool,
    /// the previous locator's steps: `(kind, key, node)`
    last: Vec<(Kind, LastKey, u32)>,
    /// whether equal paths always got the same node (no object accessors, no hash clashes)
    exact_nodes: bool,
    c: Compact,
    t_nodes: Vec<u32>,
    t_out: Vec<u8>,
    learned: Vec<Option<Box<Spec>>>,
    n_learned: usize,
    bs: Option<f64>,
    o_nodes: Vec<u32>,
    o_vals: Vec<Py<PyAny>>,
    o_out: Vec<u8>,
    dtypes: HashMap<String, u16>,
    none_dtype: Option<u16>,
}

impl<'py> Build<'py> {
    fn new(py: Python<'py>, what: &'static str) -> Build<'py> {
        Build {
            py,
            what,
            arena: Arena::with_capacity(64),
            dedup: FastMap::default(),
            dense: Vec::new(),
            indexed: false,
            last: Vec::new(),
            exact_nodes: true,
            c: Compact::new(Arena::new(), false),
            t_nodes: Vec::new(),
            t_out: Vec::new(),
            learned: Vec::new(),
            n_learned: 0,
            bs: None,
            o_nodes: Vec::new(),
            o_vals: Vec::new(),
            o_out: Vec::new(),
            dtypes: HashMap::new(),
            none_dtype: None,
        }
    }

    /// The node for Int step `v` below `parent`.
    ///
    /// Lists are written item by item, so a parent's Int children usually arrive as `0, 1, 2...`
    /// of one kind. While every parent's do, a new child `next` cannot exist yet and needs no
    /// lookup: a map of a million children, one cache miss per lookup, would cost more than the
    /// rest of the decoding. The first child that breaks the pattern puts every Int node made so
    /// far into `dedup` (once), and from then on each step is looked up.
    fn step_int(&mut self, parent: u32, v: i64, kind: Kind) -> PyResult<u32> {
        if !self.indexed {
            if self.dense.len() <= parent as usize {
                self.dense
                    .resize(self.arena.len(), DenseChildren::default());
            }
            let d = self.dense[parent as usize];
            if v == i64::from(d.next) && (d.next == 0 || d.kind == kind as u8) && d.next < u32::MAX
            {
                let n = self
                    .arena
                    .push_hashed(parent, Accessor::Int(v), kind, py_int_hash(v))?;
                self.dense[parent as usize] = DenseChildren {
                    next: d.next + 1,
                    kind: kind as u8,
                };
                return Ok(n);
            }
            self.index_int_nodes();
        }
        let key = (parent, kind as u8, v as u64);
        if let Some(&n) = self.dedup.get(&key) {
            return Ok(n);
        }
        let n = self
            .arena
            .push_hashed(parent, Accessor::Int(v), kind, py_int_hash(v))?;
        self.dedup.insert(key, n);
        Ok(n)
    }

    /// Put every Int node into `dedup` (the first of equal ones wins, as it would have).
    fn index_int_nodes(&mut self) {
        for id in 1..self.arena.len() as u32 {
            let n = self.arena.node(id);
            if let Accessor::Int(x) = n.acc {
                self.dedup
                    .entry((n.parent, n.kind as u8, x as u64))
                    .or_insert(id);
            }
        }
        self.indexed = true;
        self.dense = Vec::new();
    }

    fn step_str(
        &mut self,
        parent: u32,
        s: &str,
        obj: Option<&Bound<'py, PyString>>,
        kind: Kind,
    ) -> PyResult<u32> {
        let key = (parent, kind as u8 + 4, fnv(s.as_bytes()));
        let hit = self.dedup.get(&key).copied();
        if let Some(n) = hit {
            if let Accessor::Str(x) = &self.arena.node(n).acc {
                if x.bind(self.py).to_str().map(|t| t == s).unwrap_or(false) {
                    return Ok(n);
                }
            }
            self.exact_nodes = false;
        }
        let py_s = match obj {
            Some(o) => o.clone(),
            None => PyString::new(self.py, s),
        };
        let h = py_s.hash()?;
        let n = self
            .arena
            .push_hashed(parent, Accessor::Str(py_s.unbind()), kind, h)?;
        if hit.is_none() {
            self.dedup.insert(key, n);
        }
        Ok(n)
    }

    fn step(&mut self, parent: u32, acc: Acc<'_, 'py>, kind: Kind) -> PyResult<u32> {
        match acc {
            Acc::Int(v) => self.step_int(parent, v, kind),
            Acc::Str(s) => self.step_str(parent, &s, None, kind),
            Acc::Obj(o) => match Accessor::from_py(&o) {
                Accessor::Int(v) => self.step_int(parent, v, kind),
                Accessor::Str(s) => {
                    let s = s.into_bound(self.py);
                    match s.to_str() {
                        Ok(t) => {
                            let t = t.to_owned();
                            self.step_str(parent, &t, Some(&s), kind)
                        }
                        Err(_) => {
                            // a lone surrogate: no dedup key; equal paths are checked later
                            let h = s.hash()?;
                            self.exact_nodes = false;
                            self.arena
                                .push_hashed(parent, Accessor::Str(s.unbind()), kind, h)
                        }
                    }
                }
                Accessor::Obj(o) => {
                    let o = o.into_bound(self.py);
                    let h = o.hash().map_err(|e| {
                        PyValueError::new_err(format!(
                            "a locator accessor must be hashable, got {} ({})",
                            type_name(&o),
                            e.value(self.py)
                        ))
                    })?;
                    let acc = Accessor::Obj(o.clone().unbind());
                    let mut shown = Text::new();
                    if acc.format(self.py, &mut shown).is_err() {
                        return Err(PyValueError::new_err(format!(
                            "the locator accessor {} cannot be displayed",
                            o.repr().map(|r| r.to_string()).unwrap_or_default()
                        )));
                    }
                    self.exact_nodes = false;
                    self.arena.push_hashed(parent, acc, kind, h)
                }
            },
        }
    }

    fn dtype_of_name(&mut self, name: &str) -> PyResult<Result<u16, String>> {
        if let Some(&id) = self.dtypes.get(name) {
            return Ok(Ok(id));
        }
        match dtype_named(self.py, name)? {
            Ok(obj) => {
                let id = dtype_id(&obj)?;
                self.dtypes.insert(name.to_owned(), id);
                Ok(Ok(id))
            }
            Err(msg) => Ok(Err(msg)),
        }
    }

    fn dtype_none(&mut self) -> PyResult<u16> {
        if let Some(id) = self.none_dtype {
            return Ok(id);
        }
        let id = dtype_id(&self.py.None().into_bound(self.py))?;
        self.none_dtype = Some(id);
        Ok(id)
    }

    /// Add a tensor; `shape`, `min`, `max` and `mult` have equal lengths.
    #[allow(clippy::too_many_arguments)]
    fn add_tensor(
        &mut self,
        node: u32,
        out: u8,
        shape: &[Dim],
        min: &[i64],
        max: &[i64],
        mult: &[f64],
        dtype: u16,
    ) -> PyResult<()> {
        let fresh = shape
            .iter()
            .zip(min.iter().zip(max))
            .all(|(d, (a, b))| matches!(d, Dim::Int(x) if x == a && x == b));
        self.t_nodes.push(node);
        self.t_out.push(out);
        if fresh {
            if self.bs.is_none() {
                if let Some(bs) = guess_bs(min, mult) {
                    if mults_match(min, mult, bs) {
                        self.bs = Some(bs);
                    }
                }
            }
            let ok = match self.bs {
                Some(bs) => mults_match(min, mult, bs),
                None => min.is_empty(),
            };
            if ok {
                self.learned.push(None);
                return self.c.push_tensor(node, min, dtype);
            }
        }
        self.c.push_tensor(node, max, dtype)?;
        self.learned.push(Some(Box::new(Spec {
            shape: shape.to_vec(),
            min: min.to_vec(),
            max: max.to_vec(),
            mult: mult.to_vec(),
            dtype,
        })));
        self.n_learned += 1;
        Ok(())
    }

    /// Add a tensor that saw one shape, `dims`, at batch size `bs`.
    fn add_fresh(&mut self, node: u32, out: u8, dims: &[i64], dtype: u16, bs: f64) -> PyResult<()> {
        let mine = *self.bs.get_or_insert(bs);
        if mine.to_bits() == bs.to_bits() || (mine.is_nan() && bs.is_nan()) {
            self.t_nodes.push(node);
            self.t_out.push(out);
            self.learned.push(None);
            return self.c.push_tensor(node, dims, dtype);
        }
        let shape: Vec<Dim> = dims.iter().map(|&d| Dim::Int(d)).collect();
        let mult: Vec<f64> = dims.iter().map(|&d| multiplier(d, bs)).collect();
        self.add_tensor(node, out, &shape, dims, dims, &mult, dtype)
    }

    fn add_other(&mut self, node: u32, out: u8, value: Py<PyAny>) {
        self.o_nodes.push(node);
        self.o_out.push(out);
        self.o_vals.push(value);
    }

    /// Give the entries added since `t0`/`o0` that did not say, the document's `is_output`.
    fn resolve_out(&mut self, t0: usize, o0: usize, is_output: bool) {
        let flag = if is_output { 2 } else { 1 };
        for f in self.t_out[t0..]
            .iter_mut()
            .chain(self.o_out[o0..].iter_mut())
        {
            if *f == OUT_DEFAULT {
                *f = flag;
            }
        }
    }

    fn find_dup(&self, nodes: &[u32]) -> PyResult<Option<(usize, usize)>> {
        if self.exact_nodes {
            let mut seen: Vec<u32> = vec![u32::MAX; self.arena.len()];
            for (i, &n) in nodes.iter().enumerate() {
                let s = &mut seen[n as usize];
                if *s != u32::MAX {
                    return Ok(Some((*s as usize, i)));
                }
                *s = i as u32;
            }
            return Ok(None);
        }
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::with_capacity(nodes.len());
        for (i, &n) in nodes.iter().enumerate() {
            let bucket = buckets.entry(self.arena.node(n).hash).or_default();
            for &j in bucket.iter() {
                if path_eq(self.py, &self.arena, nodes[j], &self.arena, n)? {
                    return Ok(Some((j, i)));
                }
            }
            bucket.push(i);
        }
        Ok(None)
    }

    fn finish(
        mut self,
        strict: bool,
        llm_phase: Option<Py<PyAny>>,
        default_out: bool,
        reject_duplicates: bool,
    ) -> PyResult<SampleMetadata> {
        let py = self.py;
        let resolve = |f: u8| match f {
            1 => false,
            2 => true,
            _ => default_out,
        };
        let first = self
            .t_out
            .iter()
            .chain(&self.o_out)
            .map(|&f| resolve(f))
            .next()
            .unwrap_or(default_out);
        let uniform = self
            .t_out
            .iter()
            .chain(&self.o_out)
            .all(|&f| resolve(f) == first);
        let mut dups = false;
        for (list, nodes) in [
            ("tensor_data", &self.t_nodes),
            ("other_data", &self.o_nodes),
        ] {
            if let Some((i, j)) = self.find_dup(nodes)? {
                if reject_duplicates {
                    return Err(PyValueError::new_err(format!(
                        "{}: {list}[{i}] and {list}[{j}] have the same locator {:?}",
                        self.what,
                        self.arena.display_path_lossy(py, nodes[j], default_out)
                    )));
                }
                dups = true;
            }
        }
        let bs = self.bs.unwrap_or(f64::NAN);
        let arena = Arc::new(std::mem::take(&mut self.arena));
        if uniform && !dups {
            let mut c = self.c;
            c.arena = arena;
            c.is_output = first;
            c.batch_size = bs;
            c.learned = if self.n_learned > 0 {
                self.learned
            } else {
                Vec::new()
            };
            c.others = self.o_nodes.into_iter().zip(self.o_vals).collect();
            return Ok(SampleMetadata::from_compact(c, strict, llm_phase));
        }
        // mixed `is_output`, or (legacy data only) repeated locators: hold Python pairs, as the
        // reference would
        let mut tensors = Vec::with_capacity(self.t_nodes.len());
        for i in 0..self.t_nodes.len() {
            let spec = match &self.learned[i] {
                Some(s) => (**s).clone(),
                None => Spec::fresh(self.c.dims_of(i), self.c.items[i].dtype, bs),
            };
            let loc = Bound::new(
                py,
                Locator::new_in(arena.clone(), self.t_nodes[i], resolve(self.t_out[i])),
            )?;
            let spec = Bound::new(py, TensorSpec::from_spec(py, &spec)?)?;
            tensors.push(PyTuple::new(py, [loc.into_any(), spec.into_any()])?);
        }
        let mut others = Vec::with_capacity(self.o_nodes.len());
        for (i, v) in self.o_vals.into_iter().enumerate() {
            let loc = Bound::new(
                py,
                Locator::new_in(arena.clone(), self.o_nodes[i], resolve(self.o_out[i])),
            )?;
            others.push(PyTuple::new(py, [loc.into_any(), v.into_bound(py)])?);
        }
        Ok(SampleMetadata::from_py_parts(
            PyTuple::new(py, tensors)?.into_any().unbind(),
            PyTuple::new(py, others)?.into_any().unbind(),
            strict,
            llm_phase,
        ))
    }
}

// ================================================================================================
// reading JSON
// ================================================================================================

/// A Python str from a JSON string (lone surrogates included).
fn jstr_to_py<'py>(py: Python<'py>, s: &JStr<'_>) -> PyResult<Bound<'py, PyString>> {
    match s {
        JStr::Str(t) => Ok(PyString::new(py, t)),
        JStr::Wtf8(b) => crate::locator::decode_surrogatepass(py, b),
    }
}

fn big_int<'py>(
    py: Python<'py>,
    p: &Parser<'_>,
    at: usize,
    digits: &str,
) -> PyResult<Bound<'py, PyAny>> {
    py.get_type::<PyInt>()
        .call1((digits,))
        .map_err(|e| p.err_at(at, format!("integer not readable: {}", e.value(py))))
}

/// Read an `EXACT` value.
fn read_exact<'py>(py: Python<'py>, p: &mut Parser<'_>) -> PyResult<Bound<'py, PyAny>> {
    match p.peek()? {
        Tok::Null => {
            p.null()?;
            Ok(py.None().into_bound(py))
        }
        Tok::True | Tok::False => Ok(PyBool::new(py, p.boolean()?).to_owned().into_any()),
        Tok::Num => {
            let at = p.pos;
            match p.number()? {
                JNum::Int(v) => Ok(v.into_pyobject(py)?.into_any()),
                JNum::BigInt(d) => big_int(py, p, at, d),
                JNum::Float(f) => Ok(PyFloat::new(py, f).into_any()),
            }
        }
        Tok::Str => Ok(jstr_to_py(py, &p.string()?)?.into_any()),
        Tok::Arr => Ok(read_items(py, p)?.into_any()),
        Tok::Obj => {
            p.obj_begin()?;
            let mut first = true;
            let Some((kat, key)) = p.obj_next(&mut first)? else {
                return Ok(PyDict::new(py).into_any());
            };
            let tag = match key.as_str() {
                Some(k) if k.starts_with('$') => k.to_owned(),
                _ => return read_plain_dict(py, p, kat, key, &mut first),
            };
            let vat = p.pos;
            let value: Bound<'py, PyAny> = match tag.as_str() {
                "$tuple" => PyTuple::new(py, read_items(py, p)?)?.into_any(),
                "$set" | "$frozenset" => {
                    let items = read_items(py, p)?;
                    let n = items.len();
                    let made = if tag == "$set" {
                        PySet::new(py, &items).map(|s| (s.len(), s.into_any()))
                    } else {
                        PyFrozenSet::new(py, &items).map(|s| (s.len(), s.into_any()))
                    };
                    let (len, s) = made.map_err(|e| {
                        p.err_at(
                            vat,
                            format!("{tag} elements must be hashable: {}", e.value(py)),
                        )
                    })?;
                    if len != n {
                        return Err(p.err_at(vat, format!("{tag} holds an element twice")));
                    }
                    s
                }
                "$dict" => {
                    let d = PyDict::new(py);
                    p.arr_begin()?;
                    let mut f = true;
                    let mut n = 0;
                    while p.arr_next(&mut f)? {
                        let pat = p.pos;
                        p.arr_begin()?;
                        let mut f2 = true;
                        if !p.arr_next(&mut f2)? {
                            return Err(p.err_at(pat, "a $dict item is a [key, value] pair"));
                        }
                        let k = read_exact(py, p)?;
                        if !p.arr_next(&mut f2)? {
                            return Err(p.err_at(pat, "a $dict item is a [key, value] pair"));
                        }
                        let v = read_exact(py, p)?;
                        if p.arr_next(&mut f2)? {
                            return Err(p.err_at(pat, "a $dict item is a [key, value] pair"));
                        }
                        d.set_item(&k, v).map_err(|e| {
                            p.err_at(pat, format!("$dict keys must be hashable: {}", e.value(py)))
                        })?;
                        n += 1;
                        if d.len() != n {
                            return Err(p.err_at(pat, "$dict holds a key twice"));
                        }
                    }
                    d.into_any()
                }
                "$bytes" => {
                    let s = match p.peek()? {
                        Tok::Str => p.string()?,
                        t => {
                            return Err(
                                p.err(format!("$bytes holds a hex string, found {}", t.name()))
                            )
                        }
                    };
                    let hex = s.as_str().unwrap_or("?").as_bytes();
                    if hex.len() % 2 != 0 {
                        return Err(p.err_at(vat, "$bytes holds an even number of hex digits"));
                    }
                    let mut out = Vec::with_capacity(hex.len() / 2);
                    for pair in hex.chunks(2) {
                        let d = |c: u8| match c {
                            b'0'..=b'9' => Some(c - b'0'),
                            b'a'..=b'f' => Some(c - b'a' + 10),
                            _ => None,
                        };
                        match (d(pair[0]), d(pair[1])) {
                            (Some(h), Some(l)) => out.push(h * 16 + l),
                            _ => {
                                return Err(p.err_at(vat, "$bytes holds lower-case hex digits only"))
                            }
                        }
                    }
                    PyBytes::new(py, &out).into_any()
                }
                "$complex" => {
                    p.arr_begin()?;
                    let mut f = true;
                    let mut parts = [0f64; 2];
                    for part in parts.iter_mut() {
                        if !p.arr_next(&mut f)? {
                            return Err(p.err_at(vat, "$complex holds [real, imag]"));
                        }
                        *part = read_float(p, "$complex")?;
                    }
                    if p.arr_next(&mut f)? {
                        return Err(p.err_at(vat, "$complex holds [real, imag]"));
                    }
                    PyComplex::from_doubles(py, parts[0], parts[1]).into_any()
                }
                "$dtype" => {
                    let s = match p.peek()? {
                        Tok::Str => p.string()?,
                        t => {
                            return Err(p.err(format!("$dtype holds a string, found {}", t.name())))
                        }
                    };
                    match dtype_named(py, s.as_str().unwrap_or("?"))? {
                        Ok(d) => d,
                        Err(msg) => return Err(p.err_at(vat, msg)),
                    }
                }
                _ => return Err(p.err_at(kat, format!("unknown tag {tag:?}"))),
            };
            if p.obj_next(&mut first)?.is_some() {
                return Err(p.err_at(kat, format!("a {tag} object has no other keys")));
            }
            Ok(value)
        }
    }
}

fn read_items<'py>(py: Python<'py>, p: &mut Parser<'_>) -> PyResult<Bound<'py, PyList>> {
    p.arr_begin()?;
    let l = PyList::empty(py);
    let mut first = true;
    while p.arr_next(&mut first)? {
        l.append(read_exact(py, p)?)?;
    }
    Ok(l)
}

fn read_plain_dict<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    kat: usize,
    key: JStr<'_>,
    first: &mut bool,
) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    let mut next = Some((kat, key));
    let mut n = 0;
    while let Some((at, k)) = next {
        if k.as_str().map(|s| s.starts_with('$')).unwrap_or(false) {
            return Err(p.err_at(at, format!("key {} starts with '$' in an untagged object (such dicts are written as $dict)", k.show())));
        }
        let v = read_exact(py, p)?;
        d.set_item(jstr_to_py(py, &k)?, v)?;
        n += 1;
        if d.len() != n {
            return Err(p.err_at(at, format!("key {} occurs twice", k.show())));
        }
        next = p.obj_next(first)?;
    }
    Ok(d.into_any())
}

fn read_float(p: &mut Parser<'_>, what: &str) -> PyResult<f64> {
    let at = p.pos;
    match p.peek()? {
        Tok::Num => match p.number()? {
            JNum::Int(v) => Ok(v as f64),
            JNum::BigInt(d) => d.parse::<f64>().map_err(|_| p.err_at(at, "invalid number")),
            JNum::Float(f) => Ok(f),
        },
        t => Err(p.err(format!("{what} holds numbers, found {}", t.name()))),
    }
}

/// A step's accessor: a string or integer as such, any other `EXACT` value as a Python object.
fn read_accessor<'a, 'py>(py: Python<'py>, p: &mut Parser<'a>) -> PyResult<(usize, Acc<'a, 'py>)> {
    p.ws();
    let at = p.pos;
    let acc = match p.peek()? {
        Tok::Str => match p.string()? {
            JStr::Str(s) => Acc::Str(s),
            w => Acc::Obj(jstr_to_py(py, &w)?.into_any()),
        },
        Tok::Num => match p.number()? {
            JNum::Int(v) => Acc::Int(v),
            JNum::BigInt(d) => Acc::Obj(big_int(py, p, at, d)?),
            JNum::Float(f) => Acc::Obj(PyFloat::new(py, f).into_any()),
        },
        _ => Acc::Obj(read_exact(py, p)?),
    };
    Ok((at, acc))
}

fn read_kind(p: &mut Parser<'_>) -> PyResult<Kind> {
    p.ws();
    let at = p.pos;
    let k = p.int("object type")?;
    Kind::from_index(k).ok_or_else(|| p.err_at(at, format!("object type {k} is not 0, 1, 2 or 3")))
}

/// A ValueError from building, placed at `at` in the text.
fn at_parser(py: Python<'_>, p: &Parser<'_>, at: usize, e: PyErr) -> PyErr {
    if e.is_instance_of::<PyValueError>(py) {
        p.err_at(at, e.value(py))
    } else {
        e
    }
}

fn read_dtype(p: &mut Parser<'_>, b: &mut Build<'_>) -> PyResult<u16> {
    p.ws();
    let at = p.pos;
    match p.peek()? {
        Tok::Null => {
            p.null()?;
            b.dtype_none()
        }
        Tok::Str => {
            let s = p.string()?;
            match b.dtype_of_name(s.as_str().unwrap_or("?"))? {
                Ok(id) => Ok(id),
                Err(msg) => Err(p.err_at(at, msg)),
            }
        }
        t => Err(p.err(format!("dtype is a string or null, found {}", t.name()))),
    }
}

fn read_floats(p: &mut Parser<'_>, out: &mut Vec<f64>) -> PyResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        out.push(read_float(p, "bs_multipliers")?);
    }
    Ok(())
}

fn check_entry_lengths(p: &Parser<'_>, at: usize, sc: &Scratch) -> PyResult<()> {
    let r = sc.shape.len();
    if sc.min.len() != r || sc.max.len() != r || sc.mult.len() != r {
        return Err(p.err_at(
            at,
            format!(
                "shape, min_shape, max_shape and bs_multipliers have different lengths ({r}, {}, {}, {})",
                sc.min.len(),
                sc.max.len(),
                sc.mult.len()
            ),
        ));
    }
    Ok(())
}

fn read_locator<'py>(py: Python<'py>, p: &mut Parser<'_>, b: &mut Build<'py>) -> PyResult<u32> {
    p.arr_begin()?;
    let mut cur = ROOT;
    let mut first = true;
    let (mut depth, mut prefix) = (0usize, true);
    while p.arr_next(&mut first)? {
        let sat = p.pos;
        p.arr_begin()?;
        let mut f = true;
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(sat, "a locator step is [accessor, object type]"));
        }
        let (aat, acc) = read_accessor(py, p)?;
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(sat, "a locator step is [accessor, object type]"));
        }
        let kind = read_kind(p)?;
        if p.arr_next(&mut f)? {
            return Err(p.err_at(sat, "a locator step is [accessor, object type]"));
        }
        if prefix && depth < b.last.len() {
            let (k, key, node) = &b.last[depth];
            let same = *k == kind
                && match (key, &acc) {
                    (LastKey::Int(x), Acc::Int(y)) => x == y,
                    (LastKey::Str(x), Acc::Str(y)) => x.as_str() == y.as_ref(),
                    _ => false,
                };
            if same {
                cur = *node;
                depth += 1;
                continue;
            }
        }
        prefix = false;
        b.last.truncate(depth);
        let key = match &acc {
            Acc::Int(v) => LastKey::Int(*v),
            Acc::Str(s) => LastKey::Str(s.to_string()),
            Acc::Obj(_) => LastKey::Never,
        };
        cur = b
            .step(cur, acc, kind)
            .map_err(|e| at_parser(py, p, aat, e))?;
        b.last.push((kind, key, cur));
        depth += 1;
    }
    b.last.truncate(depth);
    Ok(cur)
}

#[derive(Default)]
struct Scratch {
    shape: Vec<Dim>,
    min: Vec<i64>,
    max: Vec<i64>,
    mult: Vec<f64>,
}

fn read_ints(p: &mut Parser<'_>, out: &mut Vec<i64>, what: &str) -> PyResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        out.push(p.int(what)?);
    }
    Ok(())
}

fn read_dims(p: &mut Parser<'_>, out: &mut Vec<Dim>) -> PyResult<()> {
    out.clear();
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        match p.peek()? {
            Tok::Str => {
                let at = p.pos;
                match p.string()? {
                    JStr::Str(s) => out.push(Dim::parse(&s)),
                    _ => return Err(p.err_at(at, "shape: a symbolic size must be valid Unicode")),
                }
            }
            Tok::Num => out.push(Dim::Int(p.int("shape")?)),
            t => {
                return Err(p.err(format!(
                    "shape holds integers and strings, found {}",
                    t.name()
                )))
            }
        }
    }
    Ok(())
}

const T_KEYS: [&str; 9] = [
    "locator",
    "shape",
    "min_shape",
    "max_shape",
    "dtype",
    "bs_multipliers",
    "is_output",
    "access_path",
    "semantic_path",
];
const O_KEYS: [&str; 6] = [
    "locator",
    "exact_value",
    "is_output",
    "access_path",
    "semantic_path",
    "value",
];

/// The position of `key` in `keys`; `order` is the order the writer uses, `next` how far into it
/// the entry is, so that in-order keys cost one comparison.
fn key_index(
    keys: &[&str],
    key: &JStr<'_>,
    full: bool,
    lean_count: usize,
    order: &[usize],
    next: &mut usize,
) -> Option<usize> {
    let k = key.as_str()?;
    if let Some(&i) = order.get(*next) {
        if keys[i] == k {
            *next += 1;
            return (full || i < lean_count).then_some(i);
        }
    }
    let i = keys.iter().position(|&x| x == k)?;
    if !full && i >= lean_count {
        return None;
    }
    Some(i)
}

fn check_required(
    p: &Parser<'_>,
    at: usize,
    keys: &[&str],
    seen: u32,
    required: &[usize],
) -> PyResult<()> {
    for &i in required {
        if seen & (1 << i) == 0 {
            return Err(p.err_at(at, format!("missing key {:?}", keys[i])));
        }
    }
    Ok(())
}

fn read_tensor_entry<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    full: bool,
) -> PyResult<()> {
    let start = p.pos;
    p.obj_begin()?;
    let mut first = true;
    let mut seen: u32 = 0;
    let mut next = 0usize;
    let (mut node, mut out, mut dtype) = (ROOT, OUT_DEFAULT, 0u16);
    while let Some((at, key)) = p.obj_next(&mut first)? {
        let Some(i) = key_index(
            &T_KEYS,
            &key,
            full,
            7,
            &[0, 7, 8, 1, 2, 3, 4, 5, 6],
            &mut next,
        ) else {
            return Err(p.err_at(at, format!("unexpected key {}", key.show())));
        };
        if seen & (1 << i) != 0 {
            return Err(p.err_at(at, format!("key {} occurs twice", key.show())));
        }
        seen |= 1 << i;
        match i {
            0 => node = read_locator(py, p, b)?,
            1 => read_dims(p, &mut sc.shape)?,
            2 => read_ints(p, &mut sc.min, "min_shape")?,
            3 => read_ints(p, &mut sc.max, "max_shape")?,
            4 => dtype = read_dtype(p, b)?,
            5 => read_floats(p, &mut sc.mult)?,
            6 => out = if p.boolean()? { 2 } else { 1 },
            7 => match p.peek()? {
                Tok::Str => {
                    p.string()?;
                }
                t => return Err(p.err(format!("access_path is a string, found {}", t.name()))),
            },
            _ => p.skip()?,
        }
    }
    let required: &[usize] = if full {
        &[0, 1, 2, 3, 4, 5, 7, 8]
    } else {
        &[0, 1, 2, 3, 4, 5]
    };
    check_required(p, start, &T_KEYS, seen, required)?;
    check_entry_lengths(p, start, sc)?;
    b.add_tensor(node, out, &sc.shape, &sc.min, &sc.max, &sc.mult, dtype)
        .map_err(|e| p.err_at(start, e.value(py)))
}

fn read_other_entry<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    full: bool,
) -> PyResult<()> {
    let start = p.pos;
    p.obj_begin()?;
    let mut first = true;
    let mut seen: u32 = 0;
    let mut next = 0usize;
    let (mut node, mut out) = (ROOT, OUT_DEFAULT);
    let mut value: Option<Bound<'py, PyAny>> = None;
    while let Some((at, key)) = p.obj_next(&mut first)? {
        let Some(i) = key_index(&O_KEYS, &key, full, 3, &[0, 3, 4, 1, 5, 2], &mut next) else {
            return Err(p.err_at(at, format!("unexpected key {}", key.show())));
        };
        if seen & (1 << i) != 0 {
            return Err(p.err_at(at, format!("key {} occurs twice", key.show())));
        }
        seen |= 1 << i;
        match i {
            0 => node = read_locator(py, p, b)?,
            1 => value = Some(read_exact(py, p)?),
            2 => out = if p.boolean()? { 2 } else { 1 },
            3 => match p.peek()? {
                Tok::Str => {
                    p.string()?;
                }
                t => return Err(p.err(format!("access_path is a string, found {}", t.name()))),
            },
            _ => p.skip()?,
        }
    }
    let required: &[usize] = if full { &[0, 1, 3, 4, 5] } else { &[0, 1] };
    check_required(p, start, &O_KEYS, seen, required)?;
    if let Some(v) = value {
        b.add_other(node, out, v.unbind());
    }
    Ok(())
}

fn read_entries<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    tensors: bool,
    full: bool,
) -> PyResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    while p.arr_next(&mut first)? {
        p.ctx = Some((if tensors { "tensor_data" } else { "other_data" }, i));
        if tensors {
            read_tensor_entry(py, p, b, sc, full)?;
        } else {
            read_other_entry(py, p, b, full)?;
        }
        p.ctx = None;
        i += 1;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Doc {
    Full,
    Tensors,
    Others,
}

struct DocInfo {
    strict: bool,
    llm_phase: Option<Py<PyAny>>,
    is_output: bool,
}

const DOC_KEYS: [&str; 12] = [
    "format",
    "version",
    "is_output",
    "tensor_data",
    "other_data",
    "strict",
    "llm_phase",
    "batch_size",
    "dtypes",
    "paths",
    "tensors",
    "others",
];

/// What a `to_dict` part declares before its rows: the path and dtype tables and the batch size.
struct Part {
    paths: Vec<u32>,
    dtypes: Vec<u16>,
    batch_size: f64,
}

/// `paths`: rows `[parent, accessor, object type]`, each parent 0 (the empty path) or an earlier row.
fn read_paths<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    part: &mut Part,
) -> PyResult<()> {
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        p.ctx = Some(("paths", part.paths.len()));
        let rat = p.pos;
        p.arr_begin()?;
        let mut f = true;
        let shape = "a paths row is [parent, accessor, object type]";
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape));
        }
        let pat = p.pos;
        let parent = p.int("parent")?;
        let parent = match parent {
            0 => ROOT,
            r if r > 0 && (r as usize) <= part.paths.len() => part.paths[r as usize - 1],
            r => {
                return Err(p.err_at(
                    pat,
                    format!(
                        "parent {r} is neither 0 nor an earlier row (1 to {})",
                        part.paths.len()
                    ),
                ))
            }
        };
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape));
        }
        let (aat, acc) = read_accessor(py, p)?;
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape));
        }
        let kind = read_kind(p)?;
        if p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape));
        }
        let node = b
            .step(parent, acc, kind)
            .map_err(|e| at_parser(py, p, aat, e))?;
        part.paths.push(node);
    }
    p.ctx = None;
    Ok(())
}

/// `dtypes`: `"torch.<name>"` or null, as rows refer to them by position.
fn read_dtypes(p: &mut Parser<'_>, b: &mut Build<'_>, part: &mut Part) -> PyResult<()> {
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        p.ctx = Some(("dtypes", part.dtypes.len()));
        let id = read_dtype(p, b)?;
        part.dtypes.push(id);
    }
    p.ctx = None;
    Ok(())
}

/// Open a row and read its first entry, the path index: `(row start, array state, node)`.
fn row_path(p: &mut Parser<'_>, part: &Part, shape_msg: &str) -> PyResult<(usize, bool, u32)> {
    let rat = p.pos;
    p.arr_begin()?;
    let mut f = true;
    if !p.arr_next(&mut f)? {
        return Err(p.err_at(rat, shape_msg));
    }
    let path = read_index(p, "path", part.paths.len() + 1)?;
    let node = if path == 0 {
        ROOT
    } else {
        part.paths[path - 1]
    };
    Ok((rat, f, node))
}

fn read_index(p: &mut Parser<'_>, what: &str, len: usize) -> PyResult<usize> {
    let at = p.pos;
    let i = p.int(what)?;
    if i < 0 || i as usize >= len {
        return Err(p.err_at(
            at,
            format!("{what} {i} is out of range (0 to {})", len as i64 - 1),
        ));
    }
    Ok(i as usize)
}

/// `tensors`: rows `[path, dtype, sizes]` for specs that saw one shape (multipliers from the part's
/// batch size), `[path, dtype, shape, min_shape, max_shape, bs_multipliers]` for the others; either
/// may end with `is_output` where it differs from the part's.
fn read_tensor_rows<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    part: &Part,
) -> PyResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    let shape_msg =
        "a tensors row is [path, dtype, sizes] or [path, dtype, shape, min_shape, max_shape, \
                     bs_multipliers], then is_output where it differs";
    while p.arr_next(&mut first)? {
        p.ctx = Some(("tensors", i));
        let (rat, mut f, node) = row_path(p, part, shape_msg)?;
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape_msg));
        }
        let dtype = part.dtypes[read_index(p, "dtype", part.dtypes.len())?];
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape_msg));
        }
        read_dims(p, &mut sc.shape)?;
        let mut out = OUT_DEFAULT;
        let mut full = false;
        let mut more = p.arr_next(&mut f)?;
        if more && matches!(p.peek()?, Tok::Arr) {
            full = true;
            read_ints(p, &mut sc.min, "min_shape")?;
            if !p.arr_next(&mut f)? {
                return Err(p.err_at(rat, shape_msg));
            }
            read_ints(p, &mut sc.max, "max_shape")?;
            if !p.arr_next(&mut f)? {
                return Err(p.err_at(rat, shape_msg));
            }
            read_floats(p, &mut sc.mult)?;
            more = p.arr_next(&mut f)?;
        }
        if more {
            out = if p.boolean()? { 2 } else { 1 };
            if p.arr_next(&mut f)? {
                return Err(p.err_at(rat, shape_msg));
            }
        }
        if full {
            check_entry_lengths(p, rat, sc)?;
            b.add_tensor(node, out, &sc.shape, &sc.min, &sc.max, &sc.mult, dtype)
                .map_err(|e| p.err_at(rat, e.value(py)))?;
        } else {
            sc.min.clear();
            for d in &sc.shape {
                match d {
                    Dim::Int(x) => sc.min.push(*x),
                    _ => return Err(p.err_at(rat, "the sizes of a one-shape row are integers")),
                }
            }
            b.add_fresh(node, out, &sc.min, dtype, part.batch_size)
                .map_err(|e| p.err_at(rat, e.value(py)))?;
        }
        i += 1;
    }
    p.ctx = None;
    Ok(())
}

/// `others`: rows `[path, value]`, then `is_output` where it differs from the part's.
fn read_other_rows<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    part: &Part,
) -> PyResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    let shape_msg = "an others row is [path, value], then is_output where it differs";
    while p.arr_next(&mut first)? {
        p.ctx = Some(("others", i));
        let (rat, mut f, node) = row_path(p, part, shape_msg)?;
        if !p.arr_next(&mut f)? {
            return Err(p.err_at(rat, shape_msg));
        }
        let value = read_exact(py, p)?;
        let mut out = OUT_DEFAULT;
        if p.arr_next(&mut f)? {
            out = if p.boolean()? { 2 } else { 1 };
            if p.arr_next(&mut f)? {
                return Err(p.err_at(rat, shape_msg));
            }
        }
        b.add_other(node, out, value.unbind());
        i += 1;
    }
    p.ctx = None;
    Ok(())
}

/// Read the value of section `key` (a table or the entries).
#[allow(clippy::too_many_arguments)]
fn read_section<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    part: &mut Part,
    key: usize,
    doc: Doc,
) -> PyResult<()> {
    match key {
        3 => read_entries(py, p, b, sc, true, doc == Doc::Full),
        4 => read_entries(py, p, b, sc, false, doc == Doc::Full),
        8 => read_dtypes(p, b, part),
        9 => read_paths(py, p, b, part),
        10 => read_tensor_rows(py, p, b, sc, part),
        _ => read_other_rows(py, p, b, part),
    }
}

/// Read one document of kind `doc` into `b`.
fn read_doc<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    doc: Doc,
) -> PyResult<DocInfo> {
    let (t0, o0) = (b.t_nodes.len(), b.o_nodes.len());
    let expected = match doc {
        Doc::Full => FORMAT,
        Doc::Tensors => FORMAT_TENSORS,
        Doc::Others => FORMAT_OTHERS,
    };
    // the document's keys; its tables; its entries, read once every other key is known
    let (allowed, tables, entries): (&[usize], &[usize], &[usize]) = match doc {
        Doc::Full => (&[0, 1, 2, 3, 4, 5, 6], &[], &[3, 4]),
        Doc::Tensors => (&[0, 1, 2, 7, 8, 9, 10], &[8, 9], &[10]),
        Doc::Others => (&[0, 1, 2, 9, 11], &[9], &[11]),
    };
    let before_entries: u32 = allowed
        .iter()
        .filter(|i| !entries.contains(i))
        .fold(0, |m, &i| m | (1 << i));
    let mut sc = Scratch::default();
    let mut part = Part {
        paths: Vec::new(),
        dtypes: Vec::new(),
        batch_size: f64::NAN,
    };
    let mut info = DocInfo {
        strict: false,
        llm_phase: None,
        is_output: false,
    };
    let top = p.pos;
    if p.peek()? != Tok::Obj {
        let t = p.peek()?;
        return Err(p.err(format!("expected an object, found {}", t.name())));
    }
    p.obj_begin()?;
    let mut first = true;
    let mut seen: u32 = 0;
    let (mut format_ok, mut version_ok) = (false, false);
    let mut deferred: Vec<(usize, usize)> = Vec::new();
    while let Some((at, key)) = p.obj_next(&mut first)? {
        let i = key
            .as_str()
            .and_then(|k| DOC_KEYS.iter().position(|&x| x == k))
            .filter(|i| allowed.contains(i))
            .ok_or_else(|| p.err_at(at, format!("unexpected key {}", key.show())))?;
        if seen & (1 << i) != 0 {
            return Err(p.err_at(at, format!("key {} occurs twice", key.show())));
        }
        seen |= 1 << i;
        p.ws();
        let vat = p.pos;
        match i {
            0 => {
                let f = match p.peek()? {
                    Tok::Str => p.string()?,
                    t => return Err(p.err(format!("format is a string, found {}", t.name()))),
                };
                if !f.is(expected) {
                    let hint = if [FORMAT, FORMAT_TENSORS, FORMAT_OTHERS]
                        .iter()
                        .any(|x| f.is(x))
                    {
                        " (a different part of aitune_fast's encoding)"
                    } else {
                        ""
                    };
                    return Err(p.err_at(
                        vat,
                        format!("format is {}, expected {expected:?}{hint}", f.show()),
                    ));
                }
                format_ok = true;
            }
            1 => {
                let v = match p.peek()? {
                    Tok::Num => p.number()?,
                    t => return Err(p.err(format!("version is an integer, found {}", t.name()))),
                };
                match v {
                    JNum::Int(VERSION) => version_ok = true,
                    JNum::Int(n) => {
                        return Err(p.err_at(
                            vat,
                            format!(
                                "unsupported version {n}: this aitune_fast reads version {VERSION}"
                            ),
                        ))
                    }
                    _ => return Err(p.err_at(vat, "version is an integer")),
                }
            }
            2 => info.is_output = p.boolean()?,
            5 => info.strict = p.boolean()?,
            6 => {
                info.llm_phase = match p.peek()? {
                    Tok::Null => {
                        p.null()?;
                        None
                    }
                    Tok::Str => Some(jstr_to_py(py, &p.string()?)?.into_any().unbind()),
                    t => {
                        return Err(
                            p.err(format!("llm_phase is a string or null, found {}", t.name()))
                        )
                    }
                }
            }
            7 => part.batch_size = read_float(p, "batch_size")?,
            _ => {
                let ready = format_ok
                    && version_ok
                    && (tables.contains(&i) || seen & before_entries == before_entries);
                if ready {
                    read_section(py, p, b, &mut sc, &mut part, i, doc)?;
                } else {
                    // read once the format, the version and (for entries) the tables are known
                    deferred.push((vat, i));
                    p.skip()?;
                }
            }
        }
    }
    p.end()?;
    check_required(p, top, &DOC_KEYS, seen, allowed)?;
    deferred.sort_by_key(|&(_, i)| !tables.contains(&i));
    for (pos, i) in deferred {
        let mut q = p.fork_at(pos, 1);
        read_section(py, &mut q, b, &mut sc, &mut part, i, doc)?;
    }
    b.resolve_out(t0, o0, info.is_output);
    Ok(info)
}

pub fn from_json(py: Python<'_>, text: &str) -> PyResult<SampleMetadata> {
    const WHAT: &str = "SampleMetadata.from_json";
    let mut p = Parser::new(text.as_bytes(), true, WHAT);
    let mut b = Build::new(py, WHAT);
    let info = read_doc(py, &mut p, &mut b, Doc::Full)?;
    b.finish(info.strict, info.llm_phase, info.is_output, true)
}

// ================================================================================================
// to_dict / from_dict
// ================================================================================================

const DICT_KEYS: [&str; 4] = ["tensor_data", "other_data", "strict", "llm_phase"];

fn legacy_rows<'py>(py: Python<'py>, func: &str, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let m = py.import("aitune_fast._legacy")?;
    let rows = m.getattr(func)?.call1((PyBytes::new(py, data),))?;
    Ok(rows.downcast_into::<PyList>()?)
}

fn bad_row(what: &str, list: &str, i: usize, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{what}: {list}[{i}]: {msg}"))
}

fn legacy_path<'py>(b: &mut Build<'py>, steps: &Bound<'py, PyAny>) -> PyResult<u32> {
    let mut cur = ROOT;
    for step in steps.try_iter()? {
        let step = step?;
        let (acc, kind): (Bound<'py, PyAny>, i64) = step.extract()?;
        let kind = Kind::from_index(kind).ok_or_else(|| {
            PyValueError::new_err(format!("object type {kind} is not 0, 1, 2 or 3"))
        })?;
        cur = b.step(cur, Acc::Obj(acc), kind)?;
    }
    Ok(cur)
}

fn legacy_tensors<'py>(b: &mut Build<'py>, rows: &Bound<'py, PyList>, what: &str) -> PyResult<()> {
    let py = b.py;
    for (i, row) in rows.iter().enumerate() {
        let r = (|| -> PyResult<()> {
            #[allow(clippy::type_complexity)]
            let (steps, out, shape, min, max, dtype, mult): (
                Bound<'py, PyAny>,
                bool,
                Vec<Bound<'py, PyAny>>,
                Vec<i64>,
                Vec<i64>,
                Bound<'py, PyAny>,
                Vec<f64>,
            ) = row.extract()?;
            let node = legacy_path(b, &steps)?;
            let mut dims = Vec::with_capacity(shape.len());
            for d in &shape {
                if let Ok(s) = d.downcast::<PyString>() {
                    dims.push(Dim::parse(s.to_str()?));
                } else {
                    dims.push(Dim::Int(d.extract()?));
                }
            }
            if min.len() != dims.len() || max.len() != dims.len() || mult.len() != dims.len() {
                return Err(PyValueError::new_err(format!(
                    "shape, min_shape, max_shape and _bs_multipliers have different lengths ({}, {}, {}, {})",
                    dims.len(),
                    min.len(),
                    max.len(),
                    mult.len()
                )));
            }
            let dtype = if dtype.is_none() {
                b.dtype_none()?
            } else if is_dtype(py, &dtype)? {
                dtype_id(&dtype)?
            } else {
                return Err(PyValueError::new_err("the dtype is not a torch.dtype"));
            };
            b.add_tensor(
                node,
                if out { 2 } else { 1 },
                &dims,
                &min,
                &max,
                &mult,
                dtype,
            )
        })();
        r.map_err(|e| bad_row(what, "tensor_data", i, e.value(py)))?;
    }
    Ok(())
}

fn legacy_others<'py>(b: &mut Build<'py>, rows: &Bound<'py, PyList>, what: &str) -> PyResult<()> {
    let py = b.py;
    for (i, row) in rows.iter().enumerate() {
        let r = (|| -> PyResult<()> {
            let (steps, out, value): (Bound<'py, PyAny>, bool, Bound<'py, PyAny>) =
                row.extract()?;
            let node = legacy_path(b, &steps)?;
            b.add_other(node, if out { 2 } else { 1 }, value.unbind());
            Ok(())
        })();
        r.map_err(|e| bad_row(what, "other_data", i, e.value(py)))?;
    }
    Ok(())
}

pub fn from_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<SampleMetadata> {
    const WHAT: &str = "SampleMetadata.from_dict";
    let d = data.downcast::<PyDict>().map_err(|_| {
        PyValueError::new_err(format!(
            "{WHAT}: expected a dict (as to_dict() returns), got {}",
            type_name(data)
        ))
    })?;
    for k in d.keys() {
        let known = k
            .downcast_exact::<PyString>()
            .ok()
            .and_then(|s| s.to_str().ok().map(|t| DICT_KEYS.contains(&t)))
            .unwrap_or(false);
        if !known {
            return Err(PyValueError::new_err(format!(
                "{WHAT}: unexpected key {} (the keys are tensor_data, other_data, strict and llm_phase)",
                k.repr().map(|r| r.to_string()).unwrap_or_default()
            )));
        }
    }
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| PyValueError::new_err(format!("{WHAT}: missing key {k:?}")))
    };
    let strict = get("strict")?;
    let strict = strict
        .downcast_exact::<PyBool>()
        .map_err(|_| {
            PyValueError::new_err(format!(
                "{WHAT}: strict must be a bool, got {}",
                type_name(&strict)
            ))
        })?
        .is_true();
    let phase = get("llm_phase")?;
    let llm_phase = if phase.is_none() {
        None
    } else if phase.is_exact_instance_of::<PyString>() {
        Some(phase.clone().unbind())
    } else {
        return Err(PyValueError::new_err(format!(
            "{WHAT}: llm_phase must be a str or None, got {}",
            type_name(&phase)
        )));
    };
    let mut b = Build::new(py, WHAT);
    let mut legacy = false;
    let mut default_out: Option<bool> = None;
    for (key, doc) in [("tensor_data", Doc::Tensors), ("other_data", Doc::Others)] {
        let v = get(key)?;
        let owned: Vec<u8>;
        let bytes: &[u8] = if let Ok(bb) = v.downcast_exact::<PyBytes>() {
            bb.as_bytes()
        } else if let Ok(ba) = v.downcast_exact::<PyByteArray>() {
            owned = ba.to_vec();
            &owned
        } else {
            return Err(PyValueError::new_err(format!(
                "{WHAT}: {key} must be bytes, got {}",
                type_name(&v)
            )));
        };
        match bytes.first() {
            Some(b'{') => {
                let what = if doc == Doc::Tensors {
                    "SampleMetadata.from_dict: tensor_data"
                } else {
                    "SampleMetadata.from_dict: other_data"
                };
                let mut p = Parser::new(bytes, false, what);
                let info = read_doc(py, &mut p, &mut b, doc)?;
                default_out.get_or_insert(info.is_output);
            }
            Some(0x80) => {
                legacy = true;
                if doc == Doc::Tensors {
                    let rows = legacy_rows(py, "load_tensor_data", bytes)?;
                    legacy_tensors(&mut b, &rows, WHAT)?;
                } else {
                    let rows = legacy_rows(py, "load_other_data", bytes)?;
                    legacy_others(&mut b, &rows, WHAT)?;
                }
            }
            first => {
                return Err(PyValueError::new_err(format!(
                "{WHAT}: {key} is neither aitune_fast's encoding (JSON text, starting with '{{') \
                     nor a pickle written by the reference (starting with 0x80); {}",
                match first {
                    None => "it is empty".to_string(),
                    Some(c) => format!("it starts with 0x{c:02x}"),
                }
            )))
            }
        }
    }
    b.finish(strict, llm_phase, default_out.unwrap_or(false), !legacy)
}
