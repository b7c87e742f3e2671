//! `to_json()`: the document of format `FORMAT`, one entry per tensor and other value.

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::codec::error::{CodecError, CodecResult};

use super::sink::{StrSink, CHUNK};
use crate::codec::format::{FORMAT, JSON_VERSION};
use crate::metadata::{Loc, Part, SampleMetadata, View};
use crate::paths::{Arena, DisplayCache, ROOT};
use crate::tensor_spec::multiplier;

use super::writer::{write_text, Enc};
use super::{check_lengths, check_unique, default_is_output, phase, EXACT_CLASS};

/// `md`'s document; `exact`: it is an `ExactSampleMetadata` (the document says so).
pub fn to_json<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    exact: bool,
) -> PyResult<Bound<'py, PyString>> {
    write_json(py, md, exact).map_err(|e| e.into_pyerr(py))
}

fn write_json<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    exact: bool,
) -> CodecResult<Bound<'py, PyString>> {
    const WHAT: &str = "SampleMetadata.to_json";
    let v = md.view(py)?;
    check_unique(py, &v, WHAT)?;
    let out_default = default_is_output(&v);
    let phase = phase(py, md, WHAT)?;
    let size = 256 + 240 * v.n_tensors() + 160 * v.n_others();
    let mut e = if size < IN_PLACE {
        Enc::new(py, size)
    } else {
        let mut e = Enc::new(py, 2 * CHUNK);
        e.sink = Some(StrSink::new(py, size)?);
        e
    };
    e.out.push_str("{\"format\":\"");
    e.out.push_str(FORMAT);
    e.out.push_str("\",\"version\":");
    e.out.push_str(&JSON_VERSION.to_string());
    e.out.push(',');
    e.standard = true;
    if exact {
        e.out.push_str(EXACT_CLASS);
    }
    e.out.push_str("\"strict\":");
    e.out.push_str(if md.strict { "true" } else { "false" });
    e.out.push_str(",\"llm_phase\":");
    match &phase {
        Some(s) => e.pystr(s)?,
        None => e.out.push_str("null"),
    }
    e.out.push_str(",\"is_output\":");
    e.out.push_str(if out_default { "true" } else { "false" });
    e.out.push_str(",\"tensor_data\":[");
    e.full_entries(&v, Part::Tensors, out_default, WHAT)?;
    e.out.push_str("],\"other_data\":[");
    e.full_entries(&v, Part::Others, out_default, WHAT)?;
    e.out.push_str("]}");
    e.spill()?;
    match e.sink.take() {
        Some(sink) => Ok(sink.finish()?),
        None => Ok(PyString::new(py, &e.out)),
    }
}

/// From about this size `to_json` writes its text straight into the returned `str`, a chunk at a
/// time, rather than building it whole and copying it: a document this large is then held once
/// instead of twice, and it lands in one fresh allocation instead of two (glibc serves requests
/// above 32 MiB with new, not yet faulted-in memory every time). Smaller documents are cheapest
/// built whole: their buffers reuse freed memory from call to call.
const IN_PLACE: usize = 32 << 20;

impl<'py> Enc<'py> {
    /// The head of a `to_json` entry: `{"locator":...,"access_path":...,"semantic_path":...`.
    /// Entries below one parent share the text of the parent's steps (kept in `self.prefix`).
    fn entry_head(&mut self, l: &Loc<'_>) -> CodecResult<()> {
        let (arena, node) = (l.arena, l.node);
        let parent = if node == ROOT {
            ROOT
        } else {
            arena.node(node).parent
        };
        self.out.push_str("{\"locator\":[");
        if parent == ROOT {
            // no step, or one: nothing to share
            if node != ROOT {
                self.step_exact(arena, node, 5)?;
            }
            self.out.push_str("],\"access_path\":");
            self.path.clear();
            arena.write_display_path(self.py, node, l.is_output, &mut self.path)?;
            write_text(&mut self.out, &self.path)?;
            self.out.push_str(",\"semantic_path\":");
            if node == ROOT {
                self.out.push_str("[]");
            } else {
                self.depth = 3;
                self.accessor_lossy(&arena.node(node).acc)?;
            }
            return Ok(());
        }
        let key = (arena as *const Arena as usize, l.is_output);
        if self.prefix.key != Some(key) {
            self.prefix.key = Some(key);
            self.prefix.parent = u32::MAX;
            self.prefix.display = DisplayCache::default();
        }
        if self.prefix.parent != parent {
            let chain = arena.chain(parent);
            let start = self.out.len();
            for (i, &s) in chain.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.step_exact(arena, s, 5)?;
            }
            self.prefix.locator.clear();
            self.prefix.locator.push_str(&self.out[start..]);
            self.out.truncate(start);
            for (i, &s) in chain.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.depth = 4;
                self.accessor_lossy(&arena.node(s).acc)?;
            }
            self.prefix.semantic.clear();
            self.prefix.semantic.push_str(&self.out[start..]);
            self.out.truncate(start);
            self.prefix.parent = parent;
        }
        self.out.push_str(&self.prefix.locator);
        self.out.push(',');
        self.step_exact(arena, node, 5)?;
        self.out.push_str("],\"access_path\":");
        self.path.clear();
        arena.write_display_path_cached(
            self.py,
            node,
            l.is_output,
            &mut self.prefix.display,
            &mut self.path,
        )?;
        write_text(&mut self.out, &self.path)?;
        self.out.push_str(",\"semantic_path\":[");
        self.out.push_str(&self.prefix.semantic);
        self.out.push(',');
        self.depth = 4;
        self.accessor_lossy(&arena.node(node).acc)?;
        self.out.push(']');
        Ok(())
    }

    fn is_output_key(&mut self, l: &Loc<'_>, default_out: bool) {
        if l.is_output != default_out {
            self.out.push_str(if l.is_output {
                ",\"is_output\":true"
            } else {
                ",\"is_output\":false"
            });
        }
    }

    /// `,"shape":...,"min_shape":...,"max_shape":...,"dtype":...,"bs_multipliers":...` of tensor `i`.
    fn spec_fields(&mut self, v: &View<'_, '_>, i: usize) -> CodecResult<()> {
        // fresh compact specs are written from their sizes, without building a Spec
        if let Some(f) = v.fresh(i) {
            self.out.push_str(",\"shape\":");
            self.ints(f.dims);
            self.out.push_str(",\"min_shape\":");
            self.ints(f.dims);
            self.out.push_str(",\"max_shape\":");
            self.ints(f.dims);
            self.out.push_str(",\"dtype\":");
            self.dtype(f.dtype)?;
            self.out.push_str(",\"bs_multipliers\":");
            self.floats(f.dims.iter().map(|&d| multiplier(d, f.batch_size)));
            return Ok(());
        }
        let s = v.spec(i);
        check_lengths(&s)?;
        self.out.push_str(",\"shape\":");
        self.dims(&s.shape);
        self.out.push_str(",\"min_shape\":");
        self.ints(&s.min);
        self.out.push_str(",\"max_shape\":");
        self.ints(&s.max);
        self.out.push_str(",\"dtype\":");
        self.dtype_of(v, i, s.dtype)?;
        self.out.push_str(",\"bs_multipliers\":");
        self.floats(s.mult.iter().copied());
        Ok(())
    }

    /// One `to_json` entry of `part`.
    fn full_entry(
        &mut self,
        v: &View<'_, 'py>,
        part: Part,
        i: usize,
        default_out: bool,
    ) -> CodecResult<()> {
        let l = v.loc(part, i);
        self.entry_head(&l)?;
        if part == Part::Tensors {
            self.spec_fields(v, i)?;
        } else {
            let value = v.other_value(self.py, i);
            self.out.push_str(",\"exact_value\":");
            self.depth = 3;
            self.exact(&value)?;
            self.out.push_str(",\"value\":");
            self.depth = 3;
            self.lossy(&value)?;
        }
        self.is_output_key(&l, default_out);
        self.out.push('}');
        Ok(())
    }

    /// `err`, said of entry `i`.
    pub(super) fn entry_error(
        &mut self,
        v: &View<'_, '_>,
        part: Part,
        i: usize,
        err: CodecError,
        what: &str,
    ) -> CodecError {
        self.abandon();
        let list = part.name();
        let l = v.loc(part, i);
        let shown = l.arena.display_path_lossy(self.py, l.node, l.is_output);
        err.prefixed(&format!(
            "{what}: {list}[{i}] at locator {shown:?} cannot be encoded"
        ))
    }

    fn full_entries(
        &mut self,
        v: &View<'_, 'py>,
        part: Part,
        default_out: bool,
        what: &str,
    ) -> CodecResult<()> {
        for i in 0..v.len(part) {
            if i > 0 {
                self.out.push(',');
            }
            if let Err(e) = self.full_entry(v, part, i, default_out) {
                return Err(self.entry_error(v, part, i, e, what));
            }
            if self.sink.is_some() && self.out.len() >= CHUNK {
                self.spill()?;
            }
        }
        Ok(())
    }
}
