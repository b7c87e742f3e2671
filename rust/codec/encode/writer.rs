//! `Enc`, the writer both encodings share: `EXACT` and lossy values, locator steps, dtypes,
//! numbers, and the hand-over of large documents to a `StrSink`.

use std::collections::HashSet;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyComplex, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString,
    PyTuple,
};

use crate::codec::error::{CodecError, CodecResult};

use super::sink::StrSink;
use crate::codec::safe_enums;
use crate::codec::shared::{enum_class, is_device, is_device_text, is_dtype, type_name};
use crate::codec::syntax::write as jt;
use crate::codec::syntax::MAX_NESTING;
use crate::metadata::View;
use crate::paths::{Accessor, Arena, DisplayCache, Text};
use crate::tensor_spec::{dtype_obj, Dim, FOREIGN_DTYPE};

/// Most bytes of text one document may spend on containers it already wrote (a list held twice is
/// written twice): pickled values can share sub-lists so that a few hundred bytes expand to
/// terabytes (`x = [x, x]`, 40 times).
pub const MAX_REPEATED_TEXT: usize = 4 << 20;

const SUPPORTED: &str = "None, bool, int, float, str, bytes, complex, list, tuple, dict, set, \
                         frozenset, torch.dtype, torch.device and members of Enum classes allowed \
                         with aitune_fast.add_safe_enums()";

/// A JSON string of `t`; lone surrogates are written as `\\uXXXX` escapes.
pub(super) fn write_text(out: &mut String, t: &Text) -> CodecResult<()> {
    match t.as_str() {
        Some(s) => jt::write_str(out, s),
        None => {
            jt::write_wtf8(out, t.as_bytes()).map_err(pair_error)?;
        }
    }
    Ok(())
}

/// The `$float` tag's name of a float that is not finite: `nan`, `inf` or `-inf`.
fn nonfinite_name(v: f64) -> &'static str {
    if v.is_nan() {
        "nan"
    } else if v > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// The `TypeError` for a value of a type neither encoding holds, naming the ways out.
fn unsupported(v: &Bound<'_, PyAny>) -> CodecError {
    let ty = v.get_type();
    let full = ty
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| type_name(v));
    // by the type's MRO: no `__class__` of the value's own is asked
    let is_enum = enum_class(v.py())
        .and_then(|e| ty.is_subclass(e))
        .unwrap_or(false);
    let way_out = if is_enum {
        let short = ty.name().map(|n| n.to_string()).unwrap_or_default();
        format!(
            "allow its class first with aitune_fast.add_safe_enums([{short}]) (the reader needs \
             the same call), or"
        )
    } else {
        "keep such values with pickle (pickle.dumps(metadata) or torch.save), or".to_owned()
    };
    CodecError::type_error(format!(
        "a value of type {full} cannot be encoded exactly (supported: {SUPPORTED}); {way_out} \
         build the metadata with strict=False, which keeps no other values"
    ))
}

fn pair_error([high, low]: [u32; 2]) -> CodecError {
    CodecError::value(format!(
        "a string holds a high surrogate followed by a low one as two code points \
         ('\\u{high:04x}\\u{low:04x}'), which JSON cannot tell from the pair's character"
    ))
}

pub(super) struct Enc<'py> {
    pub(super) py: Python<'py>,
    pub(super) out: String,
    scratch: String,
    pub(super) path: Text,
    /// per dtype id: `Some(None)` for a `None` dtype, `Some(Some(name))` for a torch dtype
    dtypes: Vec<Option<Option<String>>>,
    /// containers being written, to refuse cycles, each with whether it was written before
    active: Vec<(usize, bool)>,
    /// the containers written so far (address, and 1 added for the lossy form)
    written: HashSet<usize>,
    /// how many of `active` were written before, `out`'s length when the outermost one began, and
    /// the bytes that finished ones wrote (see [`MAX_REPEATED_TEXT`])
    repeating: usize,
    repeat_start: usize,
    repeated: usize,
    pub(super) depth: usize,
    pub(super) prefix: Prefix,
    /// where `out` goes once it holds a chunk (`to_json`); `None` keeps everything in `out`
    pub(super) sink: Option<StrSink<'py>>,
    /// RFC 8259 JSON (`to_json`): floats that are not finite are tagged, `null` or strings (see
    /// `format`); else (`to_dict`'s parts) the `NaN`/`Infinity`/`-Infinity` tokens
    pub(super) standard: bool,
}

/// The text of the parent steps shared by consecutive `to_json` entries.
#[derive(Default)]
pub(super) struct Prefix {
    /// (arena, is_output) the texts are for
    pub(super) key: Option<(usize, bool)>,
    pub(super) parent: u32,
    pub(super) locator: String,
    pub(super) semantic: String,
    pub(super) display: DisplayCache,
}

impl<'py> Enc<'py> {
    pub(super) fn new(py: Python<'py>, capacity: usize) -> Enc<'py> {
        Enc {
            py,
            out: String::with_capacity(capacity),
            scratch: String::new(),
            path: Text::new(),
            dtypes: Vec::new(),
            active: Vec::new(),
            written: HashSet::new(),
            repeating: 0,
            repeat_start: 0,
            repeated: 0,
            depth: 0,
            prefix: Prefix::default(),
            sink: None,
            standard: false,
        }
    }

    fn open(&mut self, c: char) -> CodecResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(CodecError::value(format!(
                "the value is nested too deeply (JSON nesting above {MAX_NESTING} levels)"
            )));
        }
        // `exact` and `lossy` recurse once per level
        if !crate::stack::room_left() {
            return Err(CodecError::stack("writing a nested value"));
        }
        if self.repeating > 0
            && self.repeated + (self.out.len() - self.repeat_start) > MAX_REPEATED_TEXT
        {
            return Err(CodecError::value(format!(
                "its containers are shared so often that writing each copy would take more than \
                 {} MiB (a list or tuple held in many places is written once per place)",
                MAX_REPEATED_TEXT >> 20
            )));
        }
        self.out.push(c);
        Ok(())
    }

    fn close(&mut self, c: char) {
        self.depth -= 1;
        self.out.push(c);
    }

    /// Begin writing the container `v` (in its lossy form if `lossy`): refuse a cycle, and count
    /// what a container written before writes again.
    fn enter(&mut self, v: &Bound<'_, PyAny>, lossy: bool) -> CodecResult<()> {
        let p = v.as_ptr() as usize;
        if self.active.iter().any(|a| a.0 == p) {
            return Err(CodecError::value(
                "circular reference: a container holds itself",
            ));
        }
        // objects are aligned: the low bit tells the two forms apart
        let again = !self.written.insert(p | lossy as usize);
        if again {
            if self.repeating == 0 {
                self.repeat_start = self.out.len();
            }
            self.repeating += 1;
        }
        self.active.push((p, again));
        Ok(())
    }

    /// Forget the containers being written (after an error).
    pub(super) fn abandon(&mut self) {
        self.active.clear();
        self.repeating = 0;
    }

    fn leave(&mut self) {
        if let Some((_, true)) = self.active.pop() {
            self.repeating -= 1;
            if self.repeating == 0 {
                self.repeated += self.out.len() - self.repeat_start;
            }
        }
    }

    pub(super) fn pystr(&mut self, s: &Bound<'_, PyString>) -> CodecResult<()> {
        match s.to_str() {
            Ok(t) => {
                jt::write_str(&mut self.out, t);
                Ok(())
            }
            Err(_) => {
                // lone surrogates: escape them
                let b =
                    s.call_method1(pyo3::intern!(self.py, "encode"), ("utf-8", "surrogatepass"))?;
                let b = b.cast::<PyBytes>()?;
                jt::write_wtf8(&mut self.out, b.as_bytes()).map_err(pair_error)
            }
        }
    }

    fn int(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
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
    pub(super) fn float(&mut self, v: f64) {
        if self.standard && !v.is_finite() {
            self.out.push_str("{\"$float\":\"");
            self.out.push_str(nonfinite_name(v));
            self.out.push_str("\"}");
            return;
        }
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

    fn tagged_open(&mut self, tag: &str) -> CodecResult<()> {
        self.open('{')?;
        self.out.push('"');
        self.out.push_str(tag);
        self.out.push_str("\":");
        Ok(())
    }

    /// An `EXACT` value (see the module docs). The containers recurse; everything else is written
    /// out of line, so that the recursion's frames stay small.
    pub(super) fn exact(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        if v.is_exact_instance_of::<PyList>() {
            self.array(v, false, Self::exact)
        } else if let Ok(d) = v.cast_exact::<PyDict>() {
            self.exact_dict(v, d)
        } else if v.is_exact_instance_of::<PyTuple>() {
            self.tagged_array("$tuple", v)
        } else if v.is_exact_instance_of::<PySet>() {
            self.tagged_array("$set", v)
        } else if v.is_exact_instance_of::<PyFrozenSet>() {
            self.tagged_array("$frozenset", v)
        } else {
            self.exact_leaf(v)
        }
    }

    fn tagged_array(&mut self, tag: &str, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        self.tagged_open(tag)?;
        self.array(v, false, Self::exact)?;
        self.close('}');
        Ok(())
    }

    /// A dict: an object if every key is a str not starting with `$`, else a `$dict`.
    #[inline(never)]
    fn exact_dict(&mut self, v: &Bound<'_, PyAny>, d: &Bound<'_, PyDict>) -> CodecResult<()> {
        self.enter(v, false)?;
        let items = d.items();
        let mut plain = true;
        for kv in items.iter() {
            let k = kv.get_item(0)?;
            plain = match k.cast_exact::<PyString>() {
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
                self.pystr(k.cast::<PyString>()?)?;
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
        Ok(())
    }

    /// A value that holds no other: a scalar, bytes, complex or dtype (else a TypeError).
    #[inline(never)]
    fn exact_leaf(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        let py = self.py;
        if v.is_none() {
            self.out.push_str("null");
        } else if let Ok(b) = v.cast_exact::<PyBool>() {
            self.out
                .push_str(if b.is_true() { "true" } else { "false" });
        } else if v.is_exact_instance_of::<PyInt>() {
            self.int(v)?;
        } else if let Ok(f) = v.cast_exact::<PyFloat>() {
            self.float(f.value());
        } else if let Ok(s) = v.cast_exact::<PyString>() {
            self.pystr(s)?;
        } else if let Ok(b) = v.cast_exact::<PyBytes>() {
            self.tagged_open("$bytes")?;
            self.out.push('"');
            self.out.push_str(&hex::encode(b.as_bytes()));
            self.out.push('"');
            self.close('}');
        } else if let Ok(c) = v.cast_exact::<PyComplex>() {
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
        } else if is_device(py, v)? {
            self.device(v)?;
        } else {
            self.enum_member(v)?;
        }
        Ok(())
    }

    /// A `torch.device`: `{"$device": str(device)}`.
    fn device(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        let s = v.str()?;
        let text = s.to_str()?;
        if !is_device_text(text) {
            return Err(CodecError::value(format!(
                "the torch.device {text:?} has no text that reads back as the same device"
            )));
        }
        self.tagged_open("$device")?;
        jt::write_str(&mut self.out, text);
        self.close('}');
        Ok(())
    }

    /// A member of an Enum class on the allow-list: `{"$enum": [class name, member name]}`;
    /// any other value is a `TypeError` saying what can be done.
    fn enum_member(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        let ty = v.get_type();
        let Some(name) = safe_enums::allowed_name(self.py, &ty) else {
            return Err(unsupported(v));
        };
        let member = safe_enums::member_name(v, &ty, &name)?;
        self.tagged_open("$enum")?;
        self.out.push('[');
        self.pystr(&name)?;
        self.out.push(',');
        self.pystr(&member)?;
        self.out.push(']');
        self.close('}');
        Ok(())
    }

    /// The items of the list, tuple or set `v` as a JSON array, each written by `item`
    /// (`exact`, or `lossy` if `lossy`).
    fn array(
        &mut self,
        v: &Bound<'_, PyAny>,
        lossy: bool,
        item: fn(&mut Self, &Bound<'_, PyAny>) -> CodecResult<()>,
    ) -> CodecResult<()> {
        self.enter(v, lossy)?;
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
    pub(super) fn lossy(&mut self, v: &Bound<'_, PyAny>) -> CodecResult<()> {
        if self.standard {
            if let Ok(f) = v.cast_exact::<PyFloat>() {
                let f = f.value();
                if !f.is_finite() {
                    // the token json.dumps writes, as a string
                    self.out.push('"');
                    jt::write_f64(&mut self.out, f, &mut self.scratch);
                    self.out.push('"');
                    return Ok(());
                }
            }
        }
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
            return self.array(v, true, Self::lossy);
        }
        if let Ok(d) = v.cast_exact::<PyDict>() {
            self.enter(v, true)?;
            self.open('{')?;
            for (i, kv) in d.items().iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let k = kv.get_item(0)?;
                if let Ok(s) = k.cast_exact::<PyString>() {
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
        if v.get_type().is_subclass(enum_class(self.py)?)? {
            // json_serialize writes an Enum member's value
            return self.lossy(&v.getattr(pyo3::intern!(self.py, "_value_"))?);
        }
        // frozenset, bytes, complex, dtype, device: json_serialize falls back to str()
        let s = v.str()?;
        self.pystr(&s)
    }

    pub(super) fn accessor_exact(&mut self, acc: &Accessor) -> CodecResult<()> {
        match acc {
            Accessor::Int(v) => {
                jt::write_i64(&mut self.out, *v);
                Ok(())
            }
            Accessor::Str(s) => self.pystr(s.bind(self.py)),
            Accessor::Obj(o) => self.exact(o.bind(self.py)),
        }
    }

    pub(super) fn accessor_lossy(&mut self, acc: &Accessor) -> CodecResult<()> {
        match acc {
            Accessor::Obj(o) => self.lossy(o.bind(self.py)),
            _ => self.accessor_exact(acc),
        }
    }

    pub(super) fn step_exact(&mut self, arena: &Arena, s: u32, depth: usize) -> CodecResult<()> {
        let n = arena.node(s);
        self.out.push('[');
        self.depth = depth;
        self.accessor_exact(&n.acc)?;
        self.out.push(',');
        self.out.push((b'0' + n.kind as u8) as char);
        self.out.push(']');
        Ok(())
    }

    /// [`Enc::dtype`] for tensor `i` of `v`, whose dtype may be one the table does not hold.
    pub(super) fn dtype_of(&mut self, v: &View<'_, '_>, i: usize, id: u16) -> CodecResult<()> {
        if id == FOREIGN_DTYPE {
            return Err(CodecError::type_error(format!(
                "its dtype {} is not a torch.dtype (nor None)",
                v.dtype_repr(self.py, i)
            )));
        }
        self.dtype(id)
    }

    pub(super) fn dtype(&mut self, id: u16) -> CodecResult<()> {
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
                return Err(CodecError::type_error(format!(
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

    pub(super) fn ints(&mut self, v: &[i64]) {
        self.out.push('[');
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            jt::write_i64(&mut self.out, *x);
        }
        self.out.push(']');
    }

    pub(super) fn dims(&mut self, v: &[Dim]) {
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

    pub(super) fn floats(&mut self, v: impl Iterator<Item = f64>) {
        self.out.push('[');
        for (i, x) in v.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            if self.standard && x.is_nan() {
                self.out.push_str("null"); // an unknown multiplier
            } else {
                self.float(x);
            }
        }
        self.out.push(']');
    }

    /// Hand what `out` holds to the sink, if there is one.
    pub(super) fn spill(&mut self) -> CodecResult<()> {
        if let Some(sink) = &mut self.sink {
            sink.write(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }
}
