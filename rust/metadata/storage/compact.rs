//! Compact storage: what a walk builds. One path arena, a 12-byte [`Item`] per tensor, its
//! sizes in a shared pool, the specs `update_shapes_seen` changed, and the non-tensor leaves.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::OnceLock;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::paths::{Arena, Locator, SharedArena, SPARE_BOUND};
use crate::tensor_spec::{Spec, TensorSpec};

/// One tensor of a compact metadata.
#[derive(Clone, Copy)]
pub struct Item {
    pub node: u32,
    pub off: u32,
    pub rank: u16,
    pub dtype: u16,
}

/// What a tensor of too many dimensions is refused with.
pub const RANK_LIMIT_MESSAGE: &str = "tensor rank above 65535";

pub struct Compact {
    pub arena: SharedArena,
    pub items: Vec<Item>,
    pub dims: Vec<i64>,
    pub batch_size: f64,
    /// specs changed by `update_shapes_seen`; empty, or one slot per item
    pub learned: Vec<Option<Box<Spec>>>,
    pub others: Vec<(u32, Py<PyAny>)>,
    pub is_output: bool,
    pub(super) tensor_hash: OnceLock<u64>,
}

/// The buffers of a dropped compact metadata, empty, their capacity kept for the next walk on
/// the thread (listed with the rest of what a thread keeps in `metadata/reuse.rs`).
struct Buffers {
    items: Vec<Item>,
    dims: Vec<i64>,
    others: Vec<(u32, Py<PyAny>)>,
}

thread_local! {
    static BUFFERS: Cell<Option<Buffers>> = const { Cell::new(None) };
}

/// The buffers the last dropped compact metadata left, if any.
fn take_buffers() -> Option<Buffers> {
    BUFFERS.try_with(Cell::take).ok().flatten()
}

/// Leave a dropped compact metadata's buffers to the next walk (emptied here; none past the bound).
fn give_buffers(mut b: Buffers) {
    let (items, dims) = (b.items.capacity(), b.dims.capacity());
    if items == 0 || dims == 0 || items > SPARE_BOUND || dims > SPARE_BOUND {
        return;
    }
    b.items.clear();
    b.dims.clear();
    if b.others.capacity() > SPARE_BOUND {
        b.others = Vec::new();
    }
    b.others.clear(); // the values are released here, not kept
    let _ = BUFFERS.try_with(|s| s.set(Some(b)));
}

impl Drop for Compact {
    /// Its buffers go to the next walk on this thread.
    fn drop(&mut self) {
        give_buffers(Buffers {
            items: std::mem::take(&mut self.items),
            dims: std::mem::take(&mut self.dims),
            others: std::mem::take(&mut self.others),
        });
    }
}

impl Compact {
    /// An empty compact metadata with room for `n_items` tensors of `n_dims` sizes in all, in the
    /// buffers this thread's last dropped one left (if any) rather than fresh allocations.
    pub fn with_capacity(
        arena: SharedArena,
        is_output: bool,
        n_items: usize,
        n_dims: usize,
    ) -> Compact {
        let mut c = Self::new_in(arena, is_output);
        if let Some(b) = take_buffers() {
            (c.items, c.dims, c.others) = (b.items, b.dims, b.others);
        }
        c.items.reserve(n_items);
        c.dims.reserve(n_dims);
        c
    }

    pub fn new(py: Python<'_>, arena: Arena, is_output: bool) -> PyResult<Compact> {
        Ok(Self::new_in(SharedArena::new(py, arena)?, is_output))
    }

    pub fn new_in(arena: SharedArena, is_output: bool) -> Compact {
        Compact {
            arena,
            items: Vec::new(),
            dims: Vec::new(),
            batch_size: f64::NAN,
            learned: Vec::new(),
            others: Vec::new(),
            is_output,
            tensor_hash: OnceLock::new(),
        }
    }

    #[inline]
    pub fn dims_of(&self, i: usize) -> &[i64] {
        let it = self.items[i];
        &self.dims[it.off as usize..it.off as usize + it.rank as usize]
    }

    pub fn learned(&self, i: usize) -> Option<&Spec> {
        self.learned.get(i).and_then(|s| s.as_deref())
    }

    pub fn spec(&self, i: usize) -> Cow<'_, Spec> {
        match self.learned(i) {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(Spec::fresh(
                self.dims_of(i),
                self.items[i].dtype,
                self.batch_size,
            )),
        }
    }

    /// Record a tensor of sizes `dims` (on error the sizes stay appended: callers drop the whole
    /// metadata then).
    /// Whether a tensor of `rank` dimensions fits (its rank is kept in 16 bits).
    pub fn rank_fits(rank: usize) -> bool {
        u16::try_from(rank).is_ok()
    }

    pub fn push_tensor(&mut self, node: u32, dims: &[i64], dtype: u16) -> PyResult<()> {
        let off = self.dims.len();
        self.dims.extend_from_slice(dims);
        self.push_tail(node, off, dtype)
    }

    /// Record a tensor whose sizes are `dims[off..]`, just appended.
    #[inline(always)]
    pub fn push_tail(&mut self, node: u32, off: usize, dtype: u16) -> PyResult<()> {
        let rank = self.dims.len().saturating_sub(off);
        let off = u32::try_from(off)
            .map_err(|_| PyValueError::new_err("too many tensor dimensions in one structure"))?;
        let rank = u16::try_from(rank).map_err(|_| PyValueError::new_err(RANK_LIMIT_MESSAGE))?;
        self.items.push(Item {
            node,
            off,
            rank,
            dtype,
        });
        Ok(())
    }

    /// New `(Locator, TensorSpec)` pairs for the tensors (Python objects the caller asked for).
    pub fn tensor_pairs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        Ok(self.hand_out(py)?.0)
    }

    /// [`Compact::tensor_pairs`], with the specs in order.
    pub(super) fn hand_out<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Vec<Py<TensorSpec>>)> {
        let mut pairs = Vec::with_capacity(self.items.len());
        let mut specs = Vec::with_capacity(self.items.len());
        for i in 0..self.items.len() {
            let loc = Bound::new(
                py,
                Locator::new_in(self.arena.clone_ref(py), self.items[i].node, self.is_output),
            )?;
            let spec = Bound::new(py, TensorSpec::from_spec(py, &self.spec(i))?)?;
            specs.push(spec.clone().unbind());
            pairs.push(PyTuple::new(py, [loc.into_any(), spec.into_any()])?);
        }
        Ok((PyTuple::new(py, pairs)?, specs))
    }

    pub fn set_learned(&mut self, i: usize, spec: Spec) {
        if self.learned.len() < self.items.len() {
            self.learned.resize_with(self.items.len(), || None);
        }
        if let Some(slot) = self.learned.get_mut(i) {
            *slot = Some(Box::new(spec));
        }
    }
}
