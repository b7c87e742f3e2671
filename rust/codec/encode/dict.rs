//! `to_dict()`: the reference's keys, its data as the compact parts `FORMAT_TENSORS` and
//! `FORMAT_OTHERS` (locators as a prefix table, one-shape tensors as their sizes).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::codec::error::CodecResult;

use crate::codec::format::{FORMAT_OTHERS, FORMAT_TENSORS};
use crate::codec::shared::{guess_bs, mults_match};
use crate::codec::syntax::write as jt;
use crate::metadata::{Loc, Part, SampleMetadata, View};
use crate::paths::{Arena, ROOT};
use crate::tensor_spec::{Dim, Spec};

use super::writer::Enc;
use super::{check_lengths, check_unique, default_is_output, phase};

/// `md` as a dict; `exact`: it is an `ExactSampleMetadata` (its `tensor_data` part says so).
pub fn to_dict<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    exact: bool,
) -> PyResult<Bound<'py, PyDict>> {
    write_dict(py, md, exact).map_err(|e| e.into_pyerr(py))
}

fn write_dict<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    exact: bool,
) -> CodecResult<Bound<'py, PyDict>> {
    const WHAT: &str = "SampleMetadata.to_dict";
    let v = md.view(py)?;
    check_unique(py, &v, WHAT)?;
    let out_default = default_is_output(&v);
    let phase = phase(py, md, WHAT)?;
    let mut e = Enc::new(py, 256 + 40 * v.n_tensors());
    e.tensor_part(&v, out_default, exact, WHAT)?;
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

/// Rows written to a dict part's `paths` table, per arena: node -> row (0: not written).
#[derive(Default)]
struct PathRows {
    tables: Vec<(usize, Vec<u32>)>,
    rows: u32,
    stack: Vec<u32>,
}

/// The batch size of metadata held as Python specs: the first that explains a spec that has seen
/// one shape only (NaN if none does).
fn guessed_batch_size(v: &View<'_, '_>) -> f64 {
    (0..v.n_tensors())
        .find_map(|i| {
            let s = v.spec(i);
            let dims = fresh_dims(&s)?;
            guess_bs(&dims, &s.mult).filter(|&b| mults_match(&dims, &s.mult, b))
        })
        .unwrap_or(f64::NAN)
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

impl<'py> Enc<'py> {
    /// The row of `node`'s path in a dict part's `paths` table (0: the empty path), writing the
    /// rows of it and of its ancestors not written yet.
    fn path_row(&mut self, rows: &mut PathRows, arena: &Arena, node: u32) -> CodecResult<u32> {
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

    /// The `paths` rows of every entry's locator; returns each entry's row.
    fn path_rows(&mut self, v: &View<'_, '_>, part: Part, what: &str) -> CodecResult<Vec<u32>> {
        let n = v.len(part);
        let mut rows = PathRows::default();
        let mut of = Vec::with_capacity(n);
        for i in 0..n {
            let l = v.loc(part, i);
            match self.path_row(&mut rows, l.arena, l.node) {
                Ok(r) => of.push(r),
                Err(e) => return Err(self.entry_error(v, part, i, e, what)),
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
    fn tensor_part(
        &mut self,
        v: &View<'_, 'py>,
        default_out: bool,
        exact: bool,
        what: &str,
    ) -> CodecResult<()> {
        let n = v.n_tensors();
        let bs = v
            .known_batch_size()
            .unwrap_or_else(|| guessed_batch_size(v));
        self.out.push_str("{\"format\":\"");
        self.out.push_str(FORMAT_TENSORS);
        self.out.push_str("\",\"version\":1,");
        if exact {
            self.out.push_str(super::EXACT_CLASS);
        }
        self.out.push_str("\"is_output\":");
        self.out
            .push_str(if default_out { "true" } else { "false" });
        self.out.push_str(",\"batch_size\":");
        self.float(bs);
        self.out.push_str(",\"paths\":[");
        let rows = self.path_rows(v, Part::Tensors, what)?;
        self.out.push_str("],\"dtypes\":[");
        let mut table: Vec<u16> = Vec::new();
        let mut index: Vec<u32> = Vec::with_capacity(n);
        for i in 0..n {
            let id = v.dtype(i);
            let at = match table.iter().position(|&t| t == id) {
                Some(at) => at,
                None => {
                    if !table.is_empty() {
                        self.out.push(',');
                    }
                    if let Err(e) = self.dtype_of(v, i, id) {
                        return Err(self.entry_error(v, Part::Tensors, i, e, what));
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
            if let Some(f) = v.fresh(i) {
                self.ints(f.dims);
            } else {
                let s = v.spec(i);
                if let Err(e) = check_lengths(&s) {
                    return Err(self.entry_error(v, Part::Tensors, i, e, what));
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
    fn other_part(&mut self, v: &View<'_, 'py>, default_out: bool, what: &str) -> CodecResult<()> {
        self.out.push_str("{\"format\":\"");
        self.out.push_str(FORMAT_OTHERS);
        self.out.push_str("\",\"version\":1,\"is_output\":");
        self.out
            .push_str(if default_out { "true" } else { "false" });
        self.out.push_str(",\"paths\":[");
        let rows = self.path_rows(v, Part::Others, what)?;
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
                return Err(self.entry_error(v, Part::Others, i, e, what));
            }
            self.out_flag(&v.other_loc(i), default_out);
            self.out.push(']');
        }
        self.out.push_str("]}");
        Ok(())
    }
}
