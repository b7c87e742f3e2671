//! The entries of a `to_json` document (`tensor_data`, `other_data`).

use pyo3::prelude::*;

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::syntax::read::{JStr, Parser, Tok};
use crate::paths::ROOT;

use super::build::{Build, OUT_DEFAULT};
use super::fields::{
    check_entry_lengths, check_required, key_once, read_dims, read_dtype, read_floats, read_ints,
    Scratch,
};
use super::paths::read_locator;
use super::value::read_exact;

/// The keys one kind of entry may have.
struct EntryKeys {
    names: &'static [&'static str],
    /// how many of `names` (the first) a lean document's entries have
    lean: usize,
    /// the order the writer puts them in
    order: &'static [usize],
    /// the keys every entry has, in full and in lean documents
    required_full: &'static [usize],
    required_lean: &'static [usize],
}

const TENSOR_KEYS: EntryKeys = EntryKeys {
    names: &[
        "locator",
        "shape",
        "min_shape",
        "max_shape",
        "dtype",
        "bs_multipliers",
        "is_output",
        "access_path",
        "semantic_path",
    ],
    lean: 7,
    order: &[0, 7, 8, 1, 2, 3, 4, 5, 6],
    required_full: &[0, 1, 2, 3, 4, 5, 7, 8],
    required_lean: &[0, 1, 2, 3, 4, 5],
};

const OTHER_KEYS: EntryKeys = EntryKeys {
    names: &[
        "locator",
        "exact_value",
        "is_output",
        "access_path",
        "semantic_path",
        "value",
    ],
    lean: 3,
    order: &[0, 3, 4, 1, 5, 2],
    required_full: &[0, 1, 3, 4, 5],
    required_lean: &[0, 1],
};

/// One entry object as its keys are read: each one of its kind's (a lean document's only), each
/// once.
struct Entry {
    keys: &'static EntryKeys,
    full: bool,
    /// where the entry starts
    start: usize,
    first: bool,
    seen: u32,
    /// how far into `keys.order` the entry is, so that in-order keys cost one comparison
    next: usize,
}

impl Entry {
    fn open(p: &mut Parser<'_>, keys: &'static EntryKeys, full: bool) -> CodecResult<Self> {
        let start = p.pos;
        p.obj_begin()?;
        Ok(Entry {
            keys,
            full,
            start,
            first: true,
            seen: 0,
            next: 0,
        })
    }

    /// The index of the next key (its value is next in `p`), `None` after the last.
    fn next_key(&mut self, p: &mut Parser<'_>) -> CodecResult<Option<usize>> {
        let Some((at, key)) = p.obj_next(&mut self.first)? else {
            return Ok(None);
        };
        let found = self.key_index(&key);
        key_once(at, &key, found, &mut self.seen).map(Some)
    }

    /// The position of `key` in the keys this entry may have.
    fn key_index(&mut self, key: &JStr<'_>) -> Option<usize> {
        let EntryKeys {
            names, lean, order, ..
        } = self.keys;
        let k = key.as_str()?;
        if let Some(&i) = order.get(self.next) {
            if names[i] == k {
                self.next += 1;
                return (self.full || i < *lean).then_some(i);
            }
        }
        let i = names.iter().position(|&x| x == k)?;
        if !self.full && i >= *lean {
            return None;
        }
        Some(i)
    }

    /// Check, after the last key, that the entry had every key it must have.
    fn check_required(&self) -> CodecResult<()> {
        let required = if self.full {
            self.keys.required_full
        } else {
            self.keys.required_lean
        };
        check_required(self.start, self.keys.names, self.seen, required)
    }
}

/// An `access_path` value: checked to be a string, and skipped (the locator says the same).
fn skip_access_path(p: &mut Parser<'_>) -> CodecResult<()> {
    match p.peek()? {
        Tok::Str => {
            p.string()?;
            Ok(())
        }
        t => Err(CodecError::invalid_at(
            p.pos,
            format!("access_path is a string, found {}", t.name()),
        )),
    }
}

fn read_tensor_entry<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    sc: &mut Scratch,
    full: bool,
) -> CodecResult<()> {
    let mut e = Entry::open(p, &TENSOR_KEYS, full)?;
    let (mut node, mut out, mut dtype) = (ROOT, OUT_DEFAULT, 0u16);
    while let Some(i) = e.next_key(p)? {
        match i {
            0 => node = read_locator(py, p, b)?,
            1 => read_dims(p, &mut sc.shape)?,
            2 => read_ints(p, &mut sc.min, "min_shape")?,
            3 => read_ints(p, &mut sc.max, "max_shape")?,
            4 => dtype = read_dtype(p, b)?,
            5 => read_floats(p, &mut sc.mult)?,
            6 => out = if p.boolean()? { 2 } else { 1 },
            7 => skip_access_path(p)?,
            _ => p.skip()?,
        }
    }
    e.check_required()?;
    check_entry_lengths(e.start, sc)?;
    b.add_tensor(node, out, sc.dims(), dtype)
        .map_err(|err| err.at(e.start))
}

fn read_other_entry<'py>(
    py: Python<'py>,
    p: &mut Parser<'_>,
    b: &mut Build<'py>,
    full: bool,
) -> CodecResult<()> {
    let mut e = Entry::open(p, &OTHER_KEYS, full)?;
    let (mut node, mut out) = (ROOT, OUT_DEFAULT);
    let mut value: Option<Bound<'py, PyAny>> = None;
    while let Some(i) = e.next_key(p)? {
        match i {
            0 => node = read_locator(py, p, b)?,
            1 => value = Some(read_exact(py, p)?),
            2 => out = if p.boolean()? { 2 } else { 1 },
            3 => skip_access_path(p)?,
            _ => p.skip()?,
        }
    }
    e.check_required()?;
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
) -> CodecResult<()> {
    p.arr_begin()?;
    let mut first = true;
    let mut i = 0;
    while p.arr_next(&mut first)? {
        let read = if tensors {
            read_tensor_entry(py, p, b, sc, full)
        } else {
            read_other_entry(py, p, b, full)
        };
        read.map_err(|e| e.in_entry(if tensors { "tensor_data" } else { "other_data" }, i))?;
        i += 1;
    }
    Ok(())
}
