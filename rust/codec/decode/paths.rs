//! Locators read from text: `to_json`'s steps `[[accessor, object_type], ...]` and `to_dict`'s
//! `paths` table.

use pyo3::prelude::*;

use crate::codec::error::{CodecError, CodecResult};
use pyo3::types::PyFloat;

use crate::codec::syntax::read::{JNum, JStr, Parser, Tok};
use crate::paths::{Kind, ROOT};

use super::build::{Acc, Build, LastKey};
use super::value::{big_int, jstr_to_py, read_exact};

/// A step's accessor: a string or integer as such, any other `EXACT` value as a Python object.
fn read_accessor<'a, 'py>(
    py: Python<'py>,
    p: &mut Parser<'a>,
) -> CodecResult<(usize, Acc<'a, 'py>)> {
    p.ws();
    let at = p.pos;
    let acc = match p.peek()? {
        Tok::Str => match p.string()? {
            JStr::Str(s) => Acc::Str(s),
            w => Acc::Obj(jstr_to_py(py, &w)?.into_any()),
        },
        Tok::Num => match p.number()? {
            JNum::Int(v) => Acc::Int(v),
            JNum::BigInt(d) => Acc::Obj(big_int(py, at, d)?),
            JNum::Float(f) => Acc::Obj(PyFloat::new(py, f).into_any()),
        },
        _ => Acc::Obj(read_exact(py, p)?),
    };
    Ok((at, acc))
}

fn read_kind(p: &mut Parser<'_>) -> CodecResult<Kind> {
    p.ws();
    let at = p.pos;
    let k = p.int("object type")?;
    Kind::from_index(k)
        .ok_or_else(|| CodecError::invalid_at(at, format!("object type {k} is not 0, 1, 2 or 3")))
}

pub(super) fn read_locator<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
) -> CodecResult<u32> {
    p.arr_begin()?;
    let mut cur = ROOT;
    let mut first = true;
    let (mut depth, mut prefix) = (0usize, true);
    while p.arr_next(&mut first)? {
        let sat = p.pos;
        p.arr_begin()?;
        let mut f = true;
        if !p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(
                sat,
                "a locator step is [accessor, object type]",
            ));
        }
        let (aat, acc) = read_accessor(py, p)?;
        if !p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(
                sat,
                "a locator step is [accessor, object type]",
            ));
        }
        let kind = read_kind(p)?;
        if p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(
                sat,
                "a locator step is [accessor, object type]",
            ));
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
        cur = b.step(cur, acc, kind).map_err(|e| e.at(aat))?;
        b.last.push((kind, key, cur));
        depth += 1;
    }
    b.last.truncate(depth);
    Ok(cur)
}

/// `paths`: rows `[parent, accessor, object type]`, each parent 0 (the empty path) or an earlier row.
pub(super) fn read_paths<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    paths: &mut Vec<u32>,
) -> CodecResult<()> {
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        let row = paths.len();
        let node = read_path_row(py, p, b, paths).map_err(|e| e.in_entry("paths", row))?;
        paths.push(node);
    }
    Ok(())
}

/// One row of a `paths` table, `[parent, accessor, object type]`: its node.
fn read_path_row<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    paths: &[u32],
) -> CodecResult<u32> {
    let rat = p.pos;
    p.arr_begin()?;
    let mut f = true;
    let shape = "a paths row is [parent, accessor, object type]";
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, shape));
    }
    let pat = p.pos;
    let parent = p.int("parent")?;
    let parent = match parent {
        0 => ROOT,
        r if r > 0 && (r as usize) <= paths.len() => paths[r as usize - 1],
        r => {
            return Err(CodecError::invalid_at(
                pat,
                format!(
                    "parent {r} is neither 0 nor an earlier row (1 to {})",
                    paths.len()
                ),
            ))
        }
    };
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, shape));
    }
    let (aat, acc) = read_accessor(py, p)?;
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, shape));
    }
    let kind = read_kind(p)?;
    if p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, shape));
    }
    b.step(parent, acc, kind).map_err(|e| e.at(aat))
}
