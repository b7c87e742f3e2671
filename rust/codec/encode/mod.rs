//! Writing a metadata: `to_json()` (`json`) and `to_dict()` (`dict`) on one writer (`writer`).

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::shared::type_name;
use crate::metadata::{Part, SampleMetadata, View};
use crate::paths::{path_eq, PathIndex};
use crate::tensor_spec::Spec;

mod dict;
mod json;
mod sink;
mod writer;

pub use dict::to_dict;

/// The `class` member of a document written by an `ExactSampleMetadata` (`format::CLASSES`), with
/// the comma that follows it.
const EXACT_CLASS: &str = "\"class\":\"ExactSampleMetadata\",";
pub use json::to_json;

fn check_lengths(s: &Spec) -> CodecResult<()> {
    if s.min.len() != s.rank() || s.max.len() != s.rank() || s.mult.len() != s.rank() {
        return Err(CodecError::value(format!(
            "its shape, min_shape, max_shape and _bs_multipliers have different lengths \
             ({}, {}, {}, {})",
            s.rank(),
            s.min.len(),
            s.max.len(),
            s.mult.len()
        )));
    }
    Ok(())
}

/// Every locator occurs once among the tensors, and once among the other values (always true of
/// metadata built by a walk; user-built metadata may repeat one).
fn check_unique(py: Python<'_>, v: &View<'_, '_>, what: &str) -> CodecResult<()> {
    if v.unique() {
        return Ok(());
    }
    // only specs held as Python objects can carry symbolic sizes (traced tensors)
    for i in 0..v.n_tensors() {
        if v.spec(i).is_symbolic() {
            let l = v.tensor_loc(i);
            return Err(CodecError::type_error(format!(
                "{what}: tensor_data[{i}] at locator {:?} has symbolic sizes (torch.SymInt); \
                 only concrete shapes can be encoded",
                l.arena.display_path_lossy(py, l.node, l.is_output)
            )));
        }
    }
    for part in [Part::Tensors, Part::Others] {
        let (list, n) = (part.name(), v.len(part));
        let loc = |i: usize| v.loc(part, i);
        let mut index = PathIndex::with_capacity(n);
        for i in 0..n {
            let li = loc(i);
            let h = li.arena.node(li.node).hash;
            let same = |j: usize| {
                let lj = loc(j);
                path_eq(py, lj.arena, lj.node, li.arena, li.node)
            };
            if let Some(j) = index.find(h, same)? {
                return Err(CodecError::value(format!(
                    "{what}: {list}[{j}] and {list}[{i}] have the same locator {:?}; \
                     a metadata with repeated locators cannot be encoded",
                    li.arena.display_path_lossy(py, li.node, li.is_output)
                )));
            }
            index.insert(h, i);
        }
    }
    Ok(())
}

/// The document's `is_output`: the first entry's (false without entries, where it shows nowhere).
fn default_is_output(v: &View<'_, '_>) -> bool {
    if v.n_tensors() > 0 {
        v.tensor_loc(0).is_output
    } else if v.n_others() > 0 {
        v.other_loc(0).is_output
    } else {
        false
    }
}

fn phase<'py>(
    py: Python<'py>,
    md: &SampleMetadata,
    what: &str,
) -> CodecResult<Option<Bound<'py, PyString>>> {
    match &md.llm_phase {
        None => Ok(None),
        Some(p) => match p.bind(py).cast_exact::<PyString>() {
            Ok(s) => Ok(Some(s.clone())),
            Err(_) => Err(CodecError::type_error(format!(
                "{what}: llm_phase must be a str or None, got {}",
                type_name(p.bind(py))
            ))),
        },
    }
}
