//! The tables and rows of a `to_dict` part: `dtypes`, `tensors`, `others`.

use pyo3::prelude::*;

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::syntax::read::{Parser, Tok};
use crate::paths::ROOT;
use crate::tensor_spec::Dim;

use super::build::{Build, OUT_DEFAULT};
use super::fields::{check_entry_lengths, read_dims, read_dtype, read_floats, read_ints, Scratch};
use super::value::read_exact;

/// What a `to_dict` part declares before its rows: the path and dtype tables and the batch size.
pub(super) struct Part {
    pub(super) paths: Vec<u32>,
    pub(super) dtypes: Vec<u16>,
    pub(super) batch_size: f64,
}

/// `dtypes`: `"torch.<name>"` or null, as rows refer to them by position.
pub(super) fn read_dtypes(
    p: &mut Parser<'_>,
    b: &mut Build<'_>,
    part: &mut Part,
) -> CodecResult<()> {
    p.arr_begin()?;
    let mut first = true;
    while p.arr_next(&mut first)? {
        let i = part.dtypes.len();
        let id = read_dtype(p, b).map_err(|e| e.in_entry("dtypes", i))?;
        part.dtypes.push(id);
    }
    Ok(())
}

/// Open a row and read its first entry, the path index: `(row start, array state, node)`.
fn row_path(
    p: &mut Parser<'_>,
    part: &Part,
    shape_msg: &'static str,
) -> CodecResult<(usize, bool, u32)> {
    let rat = p.pos;
    p.arr_begin()?;
    let mut f = true;
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, shape_msg));
    }
    let path = read_index(p, "path", part.paths.len() + 1)?;
    let node = if path == 0 {
        ROOT
    } else {
        part.paths[path - 1]
    };
    Ok((rat, f, node))
}

fn read_index(p: &mut Parser<'_>, what: &str, len: usize) -> CodecResult<usize> {
    let at = p.pos;
    let i = p.int(what)?;
    if i < 0 || i as usize >= len {
        return Err(CodecError::invalid_at(
            at,
            format!("{what} {i} is out of range (0 to {})", len as i64 - 1),
        ));
    }
    Ok(i as usize)
}

/// What a `tensors` row that is not one says.
const TENSOR_ROW: &str =
    "a tensors row is [path, dtype, sizes] or [path, dtype, shape, min_shape, \
                          max_shape, bs_multipliers], then is_output where it differs";

/// What an `others` row that is not one says.
const OTHER_ROW: &str = "an others row is [path, value], then is_output where it differs";

/// `tensors`: rows `[path, dtype, sizes]` for specs that saw one shape (multipliers from the part's
/// batch size), `[path, dtype, shape, min_shape, max_shape, bs_multipliers]` for the others; either
/// may end with `is_output` where it differs from the part's.
pub(super) fn read_tensor_rows<'py>(
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    part: &Part,
) -> CodecResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    while p.arr_next(&mut first)? {
        read_tensor_row(p, b, sc, part).map_err(|e| e.in_entry("tensors", i))?;
        i += 1;
    }
    Ok(())
}

/// One row of `tensors`.
fn read_tensor_row<'py>(
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    part: &Part,
) -> CodecResult<()> {
    let (rat, mut f, node) = row_path(p, part, TENSOR_ROW)?;
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, TENSOR_ROW));
    }
    let dtype = part.dtypes[read_index(p, "dtype", part.dtypes.len())?];
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, TENSOR_ROW));
    }
    read_dims(p, &mut sc.shape)?;
    let mut out = OUT_DEFAULT;
    let mut full = false;
    let mut more = p.arr_next(&mut f)?;
    if more && matches!(p.peek()?, Tok::Arr) {
        full = true;
        read_ints(p, &mut sc.min, "min_shape")?;
        if !p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(rat, TENSOR_ROW));
        }
        read_ints(p, &mut sc.max, "max_shape")?;
        if !p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(rat, TENSOR_ROW));
        }
        read_floats(p, &mut sc.mult)?;
        more = p.arr_next(&mut f)?;
    }
    if more {
        out = if p.boolean()? { 2 } else { 1 };
        if p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(rat, TENSOR_ROW));
        }
    }
    if full {
        check_entry_lengths(rat, sc)?;
        return b
            .add_tensor(node, out, sc.dims(), dtype)
            .map_err(|e| e.at(rat));
    }
    sc.min.clear();
    for d in &sc.shape {
        match d {
            Dim::Int(x) => sc.min.push(*x),
            _ => {
                let msg = "the sizes of a one-shape row are integers";
                return Err(CodecError::invalid_at(rat, msg));
            }
        }
    }
    b.add_fresh(node, out, &sc.min, dtype, part.batch_size)
        .map_err(|e| e.at(rat))
}

/// `others`: rows `[path, value]`, then `is_output` where it differs from the part's.
pub(super) fn read_other_rows<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    part: &Part,
) -> CodecResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    while p.arr_next(&mut first)? {
        read_other_row(py, p, b, part).map_err(|e| e.in_entry("others", i))?;
        i += 1;
    }
    Ok(())
}

/// One row of `others`.
fn read_other_row<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    part: &Part,
) -> CodecResult<()> {
    let (rat, mut f, node) = row_path(p, part, OTHER_ROW)?;
    if !p.arr_next(&mut f)? {
        return Err(CodecError::invalid_at(rat, OTHER_ROW));
    }
    let value = read_exact(py, p)?;
    let mut out = OUT_DEFAULT;
    if p.arr_next(&mut f)? {
        out = if p.boolean()? { 2 } else { 1 };
        if p.arr_next(&mut f)? {
            return Err(CodecError::invalid_at(rat, OTHER_ROW));
        }
    }
    b.add_other(node, out, value.unbind());
    Ok(())
}
