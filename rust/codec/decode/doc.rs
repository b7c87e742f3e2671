//! A whole document of any of the three formats, and `from_json`.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::format::{
    CLASSES, FORMAT as FORMAT_FULL, FORMAT_OTHERS, FORMAT_TENSORS, JSON_VERSION, VERSION,
};
use crate::codec::syntax::read::{JNum, Parser, Tok};
use crate::metadata::SampleMetadata;
use crate::paths::str_bytes;

use super::build::Build;
use super::entries::read_entries;
use super::fields::{check_required, key_once, Scratch};
use super::parts::{read_dtypes, read_other_rows, read_tensor_rows, Part};
use super::paths::read_paths;
use super::value::{jstr_to_py, read_float};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Doc {
    Full,
    Tensors,
    Others,
}

pub(super) struct DocInfo {
    /// the document says it was written by an `ExactSampleMetadata` (its `class` key)
    pub(super) exact: bool,
    pub(super) strict: bool,
    pub(super) llm_phase: Option<Py<PyAny>>,
    pub(super) is_output: bool,
}

const DOC_KEYS: [&str; 13] = [
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
    "class",
];

/// A document's keys: each one's index in `DOC_KEYS`, and its bit in a mask of keys seen.
mod key {
    pub(super) const FORMAT: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const IS_OUTPUT: usize = 2;
    pub(super) const TENSOR_DATA: usize = 3;
    pub(super) const OTHER_DATA: usize = 4;
    pub(super) const STRICT: usize = 5;
    pub(super) const LLM_PHASE: usize = 6;
    pub(super) const BATCH_SIZE: usize = 7;
    pub(super) const DTYPES: usize = 8;
    pub(super) const PATHS: usize = 9;
    pub(super) const TENSORS: usize = 10;
    pub(super) const OTHERS: usize = 11;
    /// optional, in full documents and `tensor_data` parts
    pub(super) const CLASS: usize = 12;
}

/// The keys of one kind of document.
struct Layout {
    /// its `format` value
    format: &'static str,
    required: &'static [usize],
    optional: &'static [usize],
    /// sections that say how to read the entries (read first)
    tables: &'static [usize],
    /// the sections of entries, read once every other key is known
    entries: &'static [usize],
}

impl Doc {
    fn layout(self) -> Layout {
        use key::*;
        match self {
            Doc::Full => Layout {
                format: FORMAT_FULL,
                required: &[
                    FORMAT,
                    VERSION,
                    IS_OUTPUT,
                    TENSOR_DATA,
                    OTHER_DATA,
                    STRICT,
                    LLM_PHASE,
                ],
                optional: &[CLASS],
                tables: &[],
                entries: &[TENSOR_DATA, OTHER_DATA],
            },
            Doc::Tensors => Layout {
                format: FORMAT_TENSORS,
                required: &[
                    FORMAT, VERSION, IS_OUTPUT, BATCH_SIZE, DTYPES, PATHS, TENSORS,
                ],
                optional: &[CLASS],
                tables: &[DTYPES, PATHS],
                entries: &[TENSORS],
            },
            Doc::Others => Layout {
                format: FORMAT_OTHERS,
                required: &[FORMAT, VERSION, IS_OUTPUT, PATHS, OTHERS],
                optional: &[],
                tables: &[PATHS],
                entries: &[OTHERS],
            },
        }
    }
}

/// What the sections of a document are read into, besides the `Build`.
struct Sections {
    doc: Doc,
    sc: Scratch,
    part: Part,
}

/// Read the value of section `key` (a table or the entries).
fn read_section<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sections: &mut Sections,
    key: usize,
) -> CodecResult<()> {
    let full = sections.doc == Doc::Full;
    let (sc, part) = (&mut sections.sc, &mut sections.part);
    match key {
        key::TENSOR_DATA => read_entries(py, p, b, sc, true, full),
        key::OTHER_DATA => read_entries(py, p, b, sc, false, full),
        key::DTYPES => read_dtypes(p, b, part),
        key::PATHS => read_paths(py, p, b, &mut part.paths),
        key::TENSORS => read_tensor_rows(p, b, sc, part),
        _ => read_other_rows(py, p, b, part),
    }
}

/// Read one document of kind `doc` into `b`.
pub(super) fn read_doc<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    doc: Doc,
) -> CodecResult<DocInfo> {
    let (t0, o0) = (b.t_nodes.len(), b.o_nodes.len());
    let layout = doc.layout();
    let before_entries: u32 = layout
        .required
        .iter()
        .filter(|i| !layout.entries.contains(i))
        .fold(0, |m, &i| m | (1 << i));
    let mut sections = Sections {
        doc,
        sc: Scratch::default(),
        part: Part {
            paths: Vec::new(),
            dtypes: Vec::new(),
            batch_size: f64::NAN,
        },
    };
    let mut info = DocInfo {
        exact: false,
        strict: false,
        llm_phase: None,
        is_output: false,
    };
    let top = p.pos;
    if p.peek()? != Tok::Obj {
        let t = p.peek()?;
        let at = p.pos;
        // text that is no JSON value at all is said to be so, rather than named by its first byte
        if !matches!(t, Tok::Arr) {
            p.skip()
                .map_err(|e| CodecError::from(e).prefixed("the text is not JSON"))?;
        }
        return Err(CodecError::invalid_at(
            at,
            format!("expected an object, found {}", t.name()),
        ));
    }
    p.obj_begin()?;
    let mut first = true;
    let mut seen: u32 = 0;
    let (mut format_ok, mut version_ok) = (false, false);
    let mut deferred: Vec<(usize, usize)> = Vec::new();
    while let Some((at, name)) = p.obj_next(&mut first)? {
        let found = name
            .as_str()
            .and_then(|k| DOC_KEYS.iter().position(|&x| x == k))
            .filter(|i| layout.required.contains(i) || layout.optional.contains(i));
        let i = key_once(at, &name, found, &mut seen)?;
        p.ws();
        let vat = p.pos;
        match i {
            key::FORMAT => format_ok = read_format(p, layout.format)?,
            key::VERSION => version_ok = read_version(p, doc)?,
            key::IS_OUTPUT => info.is_output = p.boolean()?,
            key::STRICT => info.strict = p.boolean()?,
            key::LLM_PHASE => info.llm_phase = read_llm_phase(py, p)?,
            key::BATCH_SIZE => sections.part.batch_size = read_float(p, "batch_size")?,
            key::CLASS => info.exact = read_class(p)?,
            _ => {
                let ready = format_ok
                    && version_ok
                    && (layout.tables.contains(&i) || seen & before_entries == before_entries);
                if ready {
                    read_section(py, p, b, &mut sections, i)?;
                } else {
                    // read once the format, the version and (for entries) the tables are known
                    deferred.push((vat, i));
                    p.skip()?;
                }
            }
        }
    }
    p.end()?;
    if doc == Doc::Full && seen & (1 << key::FORMAT) == 0 {
        return Err(CodecError::invalid_at(
            top,
            "missing key \"format\": not a document of to_json(), the writer from_json reads \
             (to_json_dict() output is for display and cannot be read back)",
        ));
    }
    check_required(top, &DOC_KEYS, seen, layout.required)?;
    deferred.sort_by_key(|&(_, i)| !layout.tables.contains(&i));
    for (pos, i) in deferred {
        let mut q = p.fork_at(pos, 1);
        read_section(py, &mut q, b, &mut sections, i)?;
    }
    b.resolve_out(t0, o0, info.is_output);
    Ok(info)
}

/// The `format` key's value, which must be `expected`; `Ok(true)` when it is.
fn read_format(p: &mut Parser<'_>, expected: &str) -> CodecResult<bool> {
    let vat = p.pos;
    let f = match p.peek()? {
        Tok::Str => p.string()?,
        t => {
            return Err(CodecError::invalid_at(
                p.pos,
                format!("format is a string, found {}", t.name()),
            ))
        }
    };
    if f.is(expected) {
        return Ok(true);
    }
    let hint = if [FORMAT_FULL, FORMAT_TENSORS, FORMAT_OTHERS]
        .iter()
        .any(|x| f.is(x))
    {
        " (a different part of aitune_fast's encoding)"
    } else {
        ""
    };
    Err(CodecError::invalid_at(
        vat,
        format!("format is {}, expected {expected:?}{hint}", f.show()),
    ))
}

/// The `version` key's value, which must be one `doc` reads (`to_json`'s 1 to `JSON_VERSION`,
/// the parts' `VERSION`); `Ok(true)` when it is.
fn read_version(p: &mut Parser<'_>, doc: Doc) -> CodecResult<bool> {
    let newest = if doc == Doc::Full {
        JSON_VERSION
    } else {
        VERSION
    };
    let vat = p.pos;
    let v = match p.peek()? {
        Tok::Num => p.number()?,
        t => {
            return Err(CodecError::invalid_at(
                p.pos,
                format!("version is an integer, found {}", t.name()),
            ))
        }
    };
    match v {
        JNum::Int(n) if (1..=newest).contains(&n) => Ok(true),
        JNum::Int(n) => Err(CodecError::invalid_at(
            vat,
            format!(
                "unsupported version {n}: this aitune_fast reads {}",
                if newest == 1 {
                    "version 1".to_owned()
                } else {
                    format!("versions 1 to {newest}")
                }
            ),
        )),
        _ => Err(CodecError::invalid_at(vat, "version is an integer")),
    }
}

/// The `llm_phase` key's value: a string or null.
fn read_llm_phase(py: Python<'_>, p: &mut Parser<'_>) -> CodecResult<Option<Py<PyAny>>> {
    match p.peek()? {
        Tok::Null => {
            p.null()?;
            Ok(None)
        }
        Tok::Str => Ok(Some(jstr_to_py(py, &p.string()?)?.into_any().unbind())),
        t => Err(CodecError::invalid_at(
            p.pos,
            format!("llm_phase is a string or null, found {}", t.name()),
        )),
    }
}

/// The `class` key's value: whether it names `ExactSampleMetadata` (else `SampleMetadata`).
fn read_class(p: &mut Parser<'_>) -> CodecResult<bool> {
    let at = p.pos;
    let name = match p.peek()? {
        Tok::Str => p.string()?,
        t => {
            return Err(CodecError::invalid_at(
                p.pos,
                format!("class is a string, found {}", t.name()),
            ))
        }
    };
    match CLASSES.iter().position(|c| name.is(c)) {
        Some(i) => Ok(i == 1),
        None => Err(CodecError::invalid_at(
            at,
            format!(
                "class is {}, expected one of {CLASSES:?} (a document names only aitune_fast's own classes)",
                name.show()
            ),
        )),
    }
}

/// `from_json`'s text: a `str`, or the bytes of a `bytes`, `bytearray` or `memoryview` (copied:
/// nothing else holds on to them while they are read).
enum Input<'py> {
    Str(Bound<'py, PyString>),
    Bytes(Vec<u8>),
}

impl<'py> Input<'py> {
    fn of(text: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = text.cast::<PyString>() {
            return Ok(Input::Str(s.clone()));
        }
        if let Ok(b) = text.cast::<PyBytes>() {
            return Ok(Input::Bytes(b.as_bytes().to_vec()));
        }
        if text.is_instance_of::<PyByteArray>() || text.is_instance_of::<PyMemoryView>() {
            let b = text.py().get_type::<PyBytes>().call1((text,))?;
            return Ok(Input::Bytes(b.cast_into::<PyBytes>()?.as_bytes().to_vec()));
        }
        Err(PyTypeError::new_err(format!(
            "SampleMetadata.from_json takes str, bytes, bytearray or memoryview (UTF-8 text of \
             to_json()), not {}",
            text.get_type().name()?
        )))
    }

    /// The text as UTF-8 bytes, borrowed from the str or the copy; for a str holding lone
    /// surrogates (which `to_str` refuses), its surrogatepass UTF-8, and `true`.
    fn src(&self) -> PyResult<(Cow<'_, [u8]>, bool)> {
        match self {
            Input::Str(s) => match s.to_str() {
                Ok(t) => Ok((Cow::Borrowed(t.as_bytes()), false)),
                Err(_) => Ok((str_bytes(s)?, true)),
            },
            Input::Bytes(b) => Ok((Cow::Borrowed(b), false)),
        }
    }

    /// The text as the `str` an error reports as its `doc` (made only for an error).
    fn doc(&self, py: Python<'py>) -> Bound<'py, PyString> {
        match self {
            Input::Str(s) => s.clone(),
            Input::Bytes(b) => PyString::new(py, &String::from_utf8_lossy(b)),
        }
    }
}

/// `from_json`: the metadata, and whether the document was written by an `ExactSampleMetadata`.
pub fn from_json(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<(SampleMetadata, bool)> {
    const WHAT: &str = "SampleMetadata.from_json";
    let input = Input::of(text)?;
    let (src, lone_surrogates) = input.src()?;
    let src = &*src;
    let read = || {
        if let Input::Bytes(bytes) = &input {
            if let Err(e) = std::str::from_utf8(bytes) {
                return Err(CodecError::invalid_at(
                    e.valid_up_to(),
                    "the bytes are not UTF-8 text (to_json() writes str; encode it as UTF-8)",
                ));
            }
        }
        let mut p = if lone_surrogates {
            Parser::with_lone_surrogates(src)
        } else {
            Parser::new(src, true)
        };
        let mut b = Build::new(py);
        let info = read_doc(py, &mut p, &mut b, Doc::Full)?;
        let md = b.finish(info.strict, info.llm_phase, info.is_output, true)?;
        Ok((md, info.exact))
    };
    read().map_err(|e: CodecError| e.into_decode_error(py, WHAT, &input.doc(py), src))
}
