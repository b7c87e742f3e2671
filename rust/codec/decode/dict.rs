//! `from_dict()`: the dict's keys and values checked, each part read as aitune_fast's JSON or the
//! reference's pickle. What a part's JSON text holds wrongly raises `MetadataDecodeError` placed in
//! that text (as `from_json`); the dict's own keys and values, and reference pickles, a
//! `ValueError`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyString};

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::shared::type_name;
use crate::codec::syntax::read::Parser;
use crate::metadata::SampleMetadata;

use super::build::Build;
use super::doc::{read_doc, Doc, DocInfo};
use super::legacy::{legacy_others, legacy_rows, legacy_tensors};

const DICT_KEYS: [&str; 4] = ["tensor_data", "other_data", "strict", "llm_phase"];

const WHAT: &str = "SampleMetadata.from_dict";

/// `from_dict`: the metadata, and whether its `tensor_data` part says it was written by an
/// `ExactSampleMetadata` (the reference's pickled dicts never do).
pub fn from_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<(SampleMetadata, bool)> {
    read_dict(py, data).map_err(|e| e.into_pyerr(py))
}

fn read_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> CodecResult<(SampleMetadata, bool)> {
    let d = data.cast::<PyDict>().map_err(|_| {
        CodecError::value(format!(
            "{WHAT}: expected a dict (as to_dict() returns), got {}",
            type_name(data)
        ))
    })?;
    for k in d.keys() {
        let known = k
            .cast_exact::<PyString>()
            .ok()
            .and_then(|s| s.to_str().ok().map(|t| DICT_KEYS.contains(&t)))
            .unwrap_or(false);
        if !known {
            return Err(CodecError::value(format!(
                "{WHAT}: unexpected key {} (the keys are tensor_data, other_data, strict and llm_phase)",
                k.repr().map(|r| r.to_string()).unwrap_or_default()
            )));
        }
    }
    let get = |k: &str| -> CodecResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| CodecError::value(format!("{WHAT}: missing key {k:?}")))
    };
    let strict = get("strict")?;
    let strict = strict
        .cast_exact::<PyBool>()
        .map_err(|_| {
            CodecError::value(format!(
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
        return Err(CodecError::value(format!(
            "{WHAT}: llm_phase must be a str or None, got {}",
            type_name(&phase)
        )));
    };
    let mut b = Build::new(py);
    let mut legacy = false;
    let mut default_out: Option<bool> = None;
    let mut exact = false;
    for (key, doc) in [("tensor_data", Doc::Tensors), ("other_data", Doc::Others)] {
        let v = get(key)?;
        let owned: Vec<u8>;
        let bytes: &[u8] = if let Ok(bb) = v.cast_exact::<PyBytes>() {
            bb.as_bytes()
        } else if let Ok(ba) = v.cast_exact::<PyByteArray>() {
            owned = ba.to_vec();
            &owned
        } else {
            return Err(CodecError::value(format!(
                "{WHAT}: {key} must be bytes, got {}",
                type_name(&v)
            )));
        };
        match bytes.first() {
            Some(b'{') => {
                let info = read_json_part(py, &mut b, doc, bytes)?;
                default_out.get_or_insert(info.is_output);
                exact |= info.exact;
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
                return Err(CodecError::value(format!(
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
    let md = b
        .finish(strict, llm_phase, default_out.unwrap_or(false), !legacy)
        .map_err(|e| e.prefixed(WHAT))?;
    Ok((md, exact))
}

/// A part written by `to_dict` (`bytes`, JSON text) read into `b`: a refusal in it is a
/// `MetadataDecodeError` placed in that text (as `from_json`'s).
fn read_json_part<'py>(
    py: Python<'py>,
    b: &mut Build<'py>,
    doc: Doc,
    bytes: &[u8],
) -> CodecResult<DocInfo> {
    let what = if doc == Doc::Tensors {
        "SampleMetadata.from_dict: tensor_data"
    } else {
        "SampleMetadata.from_dict: other_data"
    };
    let mut p = Parser::new(bytes, false);
    read_doc(py, &mut p, b, doc).map_err(|e| {
        let text = PyString::new(py, &String::from_utf8_lossy(bytes));
        CodecError::Python(e.into_decode_error(py, what, &text, bytes))
    })
}
