//! A whole document of any of the three formats, and `from_json`.

use pyo3::prelude::*;

use crate::codec::format::{CLASSES, FORMAT, FORMAT_OTHERS, FORMAT_TENSORS, VERSION};
use crate::codec::text::parse::{JNum, Parser, Tok};
use crate::metadata::SampleMetadata;

use super::build::Build;
use super::entries::read_entries;
use super::fields::{check_required, Scratch};
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

/// The optional `class` key (its index in `DOC_KEYS`), in full documents and `tensor_data` parts.
const CLASS: usize = 12;

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
        9 => read_paths(py, p, b, &mut part.paths),
        10 => read_tensor_rows(py, p, b, sc, part),
        _ => read_other_rows(py, p, b, part),
    }
}

/// Read one document of kind `doc` into `b`.
pub(super) fn read_doc<'py>(
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
    let (required, tables, entries): (&[usize], &[usize], &[usize]) = match doc {
        Doc::Full => (&[0, 1, 2, 3, 4, 5, 6], &[], &[3, 4]),
        Doc::Tensors => (&[0, 1, 2, 7, 8, 9, 10], &[8, 9], &[10]),
        Doc::Others => (&[0, 1, 2, 9, 11], &[9], &[11]),
    };
    let optional: &[usize] = if doc == Doc::Others { &[] } else { &[CLASS] };
    let before_entries: u32 = required
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
        exact: false,
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
            .filter(|i| required.contains(i) || optional.contains(i))
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
            CLASS => info.exact = read_class(p)?,
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
    check_required(p, top, &DOC_KEYS, seen, required)?;
    deferred.sort_by_key(|&(_, i)| !tables.contains(&i));
    for (pos, i) in deferred {
        let mut q = p.fork_at(pos, 1);
        read_section(py, &mut q, b, &mut sc, &mut part, i, doc)?;
    }
    b.resolve_out(t0, o0, info.is_output);
    Ok(info)
}

/// The `class` key's value: whether it names `ExactSampleMetadata` (else `SampleMetadata`).
fn read_class(p: &mut Parser<'_>) -> PyResult<bool> {
    let at = p.pos;
    let name = match p.peek()? {
        Tok::Str => p.string()?,
        t => return Err(p.err(format!("class is a string, found {}", t.name()))),
    };
    match CLASSES.iter().position(|c| name.is(c)) {
        Some(i) => Ok(i == 1),
        None => Err(p.err_at(
            at,
            format!(
                "class is {}, expected one of {CLASSES:?} (a document names only aitune_fast's own classes)",
                name.show()
            ),
        )),
    }
}

/// `from_json`: the metadata, and whether the document was written by an `ExactSampleMetadata`.
pub fn from_json(py: Python<'_>, text: &str) -> PyResult<(SampleMetadata, bool)> {
    const WHAT: &str = "SampleMetadata.from_json";
    let mut p = Parser::new(text.as_bytes(), true, WHAT);
    let mut b = Build::new(py, WHAT);
    let info = read_doc(py, &mut p, &mut b, Doc::Full)?;
    let md = b.finish(info.strict, info.llm_phase, info.is_output, true)?;
    Ok((md, info.exact))
}
