//! The entries of a `to_json` document (`tensor_data`, `other_data`).

use pyo3::prelude::*;

use crate::codec::text::parse::{JStr, Parser, Tok};
use crate::paths::ROOT;

use super::build::{Build, OUT_DEFAULT};
use super::fields::{
    check_entry_lengths, check_required, read_dims, read_dtype, read_floats, read_ints, Scratch,
};
use super::paths::read_locator;
use super::value::read_exact;

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
    b.add_tensor(node, out, sc.dims(), dtype)
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

pub(super) fn read_entries<'py>(
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
