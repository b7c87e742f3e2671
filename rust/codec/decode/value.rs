//! `EXACT` values (see `format`) read back into Python objects.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyComplex, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString,
    PyTuple,
};

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::safe_enums::member_of;
use crate::codec::shared::{device_named, dtype_named};
use crate::codec::syntax::read::{JNum, JStr, Parser, Tok};

/// A Python str from a JSON string (lone surrogates included).
pub(super) fn jstr_to_py<'py>(py: Python<'py>, s: &JStr<'_>) -> CodecResult<Bound<'py, PyString>> {
    match s {
        JStr::Str(t) => Ok(PyString::new(py, t)),
        JStr::Wtf8(b) => Ok(crate::paths::decode_surrogatepass(py, b)?),
    }
}

/// The int of `digits` (read at `at`): refused, with Python's reason as the cause, past
/// Python's limit on the digits of an int (`sys.set_int_max_str_digits`).
pub(super) fn big_int<'py>(
    py: Python<'py>,
    at: usize,
    digits: &str,
) -> CodecResult<Bound<'py, PyAny>> {
    py.get_type::<PyInt>()
        .call1((digits,))
        .map_err(|e| CodecError::refusing::<PyValueError>(py, e, "integer not readable").at(at))
}

/// Read an `EXACT` value.
pub(super) fn read_exact<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
) -> CodecResult<Bound<'py, PyAny>> {
    match p.peek()? {
        Tok::Null => {
            p.null()?;
            Ok(py.None().into_bound(py))
        }
        Tok::True | Tok::False => Ok(PyBool::new(py, p.boolean()?).to_owned().into_any()),
        Tok::Num => {
            let at = p.pos;
            match p.number()? {
                JNum::Int(v) => Ok(PyInt::new(py, v).into_any()),
                JNum::BigInt(d) => big_int(py, at, d),
                JNum::Float(f) => Ok(PyFloat::new(py, f).into_any()),
            }
        }
        Tok::Str => Ok(jstr_to_py(py, &p.string()?)?.into_any()),
        Tok::Arr => Ok(read_items(py, p)?.into_any()),
        Tok::Obj => read_object(py, p),
    }
}

/// An object: a plain dict or a one-key tagged object. Out of line, like every branch that does
/// not recurse, so that the frames of the recursion (`read_exact`, `read_items`) stay small.
#[inline(never)]
fn read_object<'py>(py: Python<'py>, p: &mut Parser<'_>) -> CodecResult<Bound<'py, PyAny>> {
    p.obj_begin()?;
    let mut first = true;
    let Some((kat, key)) = p.obj_next(&mut first)? else {
        return Ok(PyDict::new(py).into_any());
    };
    let tag = match key.as_str() {
        Some(k) if k.starts_with('$') => k.to_owned(),
        _ => return read_plain_dict(py, p, kat, key, &mut first),
    };
    let value = read_tagged(py, p, &tag, kat)?;
    if p.obj_next(&mut first)?.is_some() {
        return Err(CodecError::invalid_at(
            kat,
            format!("a {tag} object has no other keys"),
        ));
    }
    Ok(value)
}

/// The value of the tagged object whose key `tag` (at `kat`) was just read.
fn read_tagged<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    tag: &str,
    kat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let vat = p.pos;
    match tag {
        "$tuple" => Ok(PyTuple::new(py, read_items(py, p)?)?.into_any()),
        "$set" | "$frozenset" => read_set(py, p, tag, vat),
        "$dict" => Ok(read_dict_pairs(py, p)?.into_any()),
        "$bytes" => read_bytes(py, p, vat),
        "$complex" => read_complex(py, p, vat),
        "$dtype" => read_dtype_tag(py, p, vat),
        "$device" => read_device_tag(py, p, vat),
        "$enum" => read_enum_tag(py, p, vat),
        "$float" => Ok(PyFloat::new(py, read_float_tag(p, vat)?).into_any()),
        _ => Err(CodecError::invalid_at(kat, format!("unknown tag {tag:?}"))),
    }
}

/// A `$set` or `$frozenset` (`tag`) whose items start at `vat`: hashable, each once.
fn read_set<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    tag: &str,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let items = read_items(py, p)?;
    let n = items.len();
    let made = if tag == "$set" {
        PySet::new(py, &items).map(|s| (s.len(), s.into_any()))
    } else {
        PyFrozenSet::new(py, &items).map(|s| (s.len(), s.into_any()))
    };
    let (len, s) = made.map_err(|e| {
        let msg = format!("{tag} elements must be hashable");
        CodecError::refusing::<PyTypeError>(py, e, msg).at(vat)
    })?;
    if len != n {
        return Err(CodecError::invalid_at(
            vat,
            format!("{tag} holds an element twice"),
        ));
    }
    Ok(s)
}

/// A `$dict`: a list of `[key, value]` pairs, hashable keys, each once.
fn read_dict_pairs<'py>(py: Python<'py>, p: &mut Parser<'_>) -> CodecResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    p.arr_begin()?;
    let mut f = true;
    let mut n = 0;
    while p.arr_next(&mut f)? {
        let pat = p.pos;
        let (k, v) = read_pair(py, p)?;
        d.set_item(&k, v).map_err(|e| {
            CodecError::refusing::<PyTypeError>(py, e, "$dict keys must be hashable").at(pat)
        })?;
        n += 1;
        if d.len() != n {
            return Err(CodecError::invalid_at(pat, "$dict holds a key twice"));
        }
    }
    Ok(d)
}

/// One `[key, value]` item of a `$dict`.
fn read_pair<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
) -> CodecResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let pat = p.pos;
    let not_a_pair = || CodecError::invalid_at(pat, "a $dict item is a [key, value] pair");
    p.arr_begin()?;
    let mut f = true;
    if !p.arr_next(&mut f)? {
        return Err(not_a_pair());
    }
    let k = read_exact(py, p)?;
    if !p.arr_next(&mut f)? {
        return Err(not_a_pair());
    }
    let v = read_exact(py, p)?;
    if p.arr_next(&mut f)? {
        return Err(not_a_pair());
    }
    Ok((k, v))
}

/// A `$bytes`: an even number of lower-case hex digits.
fn read_bytes<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let s = match p.peek()? {
        Tok::Str => p.string()?,
        t => {
            return Err(CodecError::invalid_at(
                p.pos,
                format!("$bytes holds a hex string, found {}", t.name()),
            ))
        }
    };
    let hex = s.as_str().unwrap_or("?").as_bytes();
    if hex.len() % 2 != 0 {
        return Err(CodecError::invalid_at(
            vat,
            "$bytes holds an even number of hex digits",
        ));
    }
    // `hex` also reads upper-case digits, which the format does not admit
    let lower = hex.iter().all(|c| !c.is_ascii_uppercase());
    match hex::decode(hex) {
        Ok(out) if lower => Ok(PyBytes::new(py, &out).into_any()),
        _ => Err(CodecError::invalid_at(
            vat,
            "$bytes holds lower-case hex digits only",
        )),
    }
}

/// A `$complex`: `[real, imag]`.
fn read_complex<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    p.arr_begin()?;
    let mut f = true;
    let mut parts = [0f64; 2];
    for part in parts.iter_mut() {
        if !p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(vat, "$complex holds [real, imag]"));
        }
        *part = read_float(p, "$complex")?;
    }
    if p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(vat, "$complex holds [real, imag]"));
    }
    Ok(PyComplex::from_doubles(py, parts[0], parts[1]).into_any())
}

/// A `$dtype`: a torch dtype by name.
fn read_dtype_tag<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let s = tag_string(p, "$dtype")?;
    dtype_named(py, s.as_str().unwrap_or("?")).map_err(|e| e.at(vat))
}

/// A string value of tag `tag` (a refusal at the value if it is another JSON value), with its
/// text (`"?"` for lone surrogates, which no name holds).
fn tag_string<'a>(p: &mut Parser<'a>, tag: &str) -> CodecResult<JStr<'a>> {
    match p.peek()? {
        Tok::Str => Ok(p.string()?),
        t => Err(CodecError::invalid_at(
            p.pos,
            format!("{tag} holds a string, found {}", t.name()),
        )),
    }
}

/// A `$device`: a torch device by its `str()`, made by `torch.device` (see `shared`).
fn read_device_tag<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let s = tag_string(p, "$device")?;
    device_named(py, s.as_str().unwrap_or("?")).map_err(|e| e.at(vat))
}

/// An `$enum`: `[class name, member name]`, a member of a class on the allow-list
/// (`safe_enums`). Both names are looked up as the strs they are, lone surrogates included.
fn read_enum_tag<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    vat: usize,
) -> CodecResult<Bound<'py, PyAny>> {
    let not_a_pair = || CodecError::invalid_at(vat, "$enum holds [class name, member name]");
    if p.peek()? != Tok::Arr {
        return Err(not_a_pair());
    }
    p.arr_begin()?;
    let mut f = true;
    let mut name = || {
        if !p.arr_next(&mut f)? || p.peek()? != Tok::Str {
            return Err(not_a_pair());
        }
        jstr_to_py(py, &p.string()?)
    };
    let (class, member) = (name()?, name()?);
    if p.arr_next(&mut f)? {
        return Err(not_a_pair());
    }
    member_of(py, &class, &member).map_err(|e| e.at(vat))
}

fn read_items<'py>(py: Python<'py>, p: &mut Parser<'_>) -> CodecResult<Bound<'py, PyList>> {
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
) -> CodecResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    let mut next = Some((kat, key));
    let mut n = 0;
    while let Some((at, k)) = next {
        if k.as_str().map(|s| s.starts_with('$')).unwrap_or(false) {
            return Err(CodecError::invalid_at(at, format!("key {} starts with '$' in an untagged object (such dicts are written as $dict)", k.show())));
        }
        let v = read_exact(py, p)?;
        d.set_item(jstr_to_py(py, &k)?, v)?;
        n += 1;
        if d.len() != n {
            return Err(CodecError::invalid_at(
                at,
                format!("key {} occurs twice", k.show()),
            ));
        }
        next = p.obj_next(first)?;
    }
    Ok(d.into_any())
}

/// A `$float`'s value (at `vat`): `"nan"`, `"inf"` or `"-inf"`.
fn read_float_tag(p: &mut Parser<'_>, vat: usize) -> CodecResult<f64> {
    let name = match p.peek()? {
        Tok::Str => p.string()?,
        t => {
            return Err(CodecError::invalid_at(
                vat,
                format!("$float holds a string, found {}", t.name()),
            ))
        }
    };
    match name.as_str() {
        Some("nan") => Ok(f64::NAN),
        Some("inf") => Ok(f64::INFINITY),
        Some("-inf") => Ok(f64::NEG_INFINITY),
        _ => Err(CodecError::invalid_at(
            vat,
            format!(
                "$float holds \"nan\", \"inf\" or \"-inf\", found {}",
                name.show()
            ),
        )),
    }
}

/// A float that is a number or a `{"$float": ...}` (what `to_json` writes for one that is not
/// finite).
pub(super) fn read_float(p: &mut Parser<'_>, what: &str) -> CodecResult<f64> {
    let at = p.pos;
    match p.peek()? {
        Tok::Obj => {
            p.obj_begin()?;
            let mut first = true;
            let tagged = match p.obj_next(&mut first)? {
                Some((_, key)) if key.is("$float") => read_float_tag(p, p.pos)?,
                _ => {
                    return Err(CodecError::invalid_at(
                        at,
                        format!("{what} holds numbers, found an object"),
                    ))
                }
            };
            if p.obj_next(&mut first)?.is_some() {
                return Err(CodecError::invalid_at(
                    at,
                    "a $float object has no other keys",
                ));
            }
            Ok(tagged)
        }
        Tok::Num => match p.number()? {
            JNum::Int(v) => Ok(v as f64),
            JNum::BigInt(d) => d
                .parse::<f64>()
                .map_err(|_| CodecError::invalid_at(at, "invalid number")),
            JNum::Float(f) => Ok(f),
        },
        t => Err(CodecError::invalid_at(
            p.pos,
            format!("{what} holds numbers, found {}", t.name()),
        )),
    }
}
