//! What a thread keeps between walks. Callers describe the same kind of call again and again, so
//! each walk leaves the next one a head start; none of it changes a result: a walk that finds
//! nothing kept (the first on a thread, another kind of call, a thread being torn down) builds from
//! scratch and gives the same metadata.
//!
//! | kept | reused by | replaced or dropped |
//! |---|---|---|
//! | the last walk's node, tensor and size counts ([`SizeHint`]) | sizing the next walk's buffers | by every walk; each count capped at [`SPARE_BOUND`] |
//! | the last walk's path arena, inputs and outputs apart ([`last_paths`]) | the next walk of the same kind, which repeats its steps while it can and then shares it ([`Arena::replaying`](crate::paths::Arena::replaying)) | by every walk that built another; not kept past [`KEEP_PATHS`] nodes, nor with a key other than an exact `int` or `str` (any other key object is the user's to free) |
//! | the buffers of the last dropped compact metadata (in `storage/compact.rs`, beside the one type that fills and leaves them) | the next walk, which fills them | taken by that walk; not kept past [`SPARE_BOUND`] entries; the values they held are released first |
//! | the node buffer of the last dropped arena (in `paths/arena.rs`: an arena is freed from its own Python object, one layer down) | the next arena built | taken by it; same bound |
//!
//! Everything is per thread (`thread_local!`) and goes with the thread; access uses `try_with`, so
//! a walk during thread teardown simply finds nothing.
//!
//! Lower layers keep three per-thread caches of their own, each beside the code that alone
//! reads it: the walk's memo of type classifications and field layouts (`walk/memo.rs`: emptied
//! when the type registry changes or a kind of entry passes its bound; an entry whose type
//! changed is looked up again), this thread's copy of recent type classifications
//! (`walk/registry.rs`: valid for one registry generation), and the thread's stack bounds
//! (`stack.rs`: read once).

use std::cell::{Cell, RefCell};

use pyo3::prelude::*;

use crate::paths::SharedArena;
pub use crate::paths::SPARE_BOUND;

/// The most nodes a kept path arena may have.
pub const KEEP_PATHS: usize = 1 << 16;

/// How big the last walk was, to size the next one's buffers.
#[derive(Clone, Copy)]
pub struct SizeHint {
    pub nodes: usize,
    pub items: usize,
    pub dims: usize,
}

/// The sizes assumed before a thread's first walk.
const FIRST_HINT: SizeHint = SizeHint {
    nodes: 16,
    items: 4,
    dims: 8,
};

thread_local! {
    static SIZE_HINT: Cell<SizeHint> = const { Cell::new(FIRST_HINT) };
    static LAST_PATHS: RefCell<[Option<SharedArena>; 2]> = const { RefCell::new([None, None]) };
}

pub fn size_hint() -> SizeHint {
    SIZE_HINT.try_with(Cell::get).unwrap_or(FIRST_HINT)
}

/// Note how big this walk was (each count capped, so one huge structure does not inflate the
/// buffers of the small ones after it).
pub fn note_size(hint: SizeHint) {
    let capped = SizeHint {
        nodes: hint.nodes.min(SPARE_BOUND),
        items: hint.items.min(SPARE_BOUND),
        dims: hint.dims.min(SPARE_BOUND),
    };
    let _ = SIZE_HINT.try_with(|h| h.set(capped));
}

/// The path arena of this thread's last walk of inputs (or outputs), if one was kept.
pub fn last_paths(py: Python<'_>, is_output: bool) -> Option<SharedArena> {
    LAST_PATHS
        .try_with(|l| {
            l.borrow()[is_output as usize]
                .as_ref()
                .map(|t| t.clone_ref(py))
        })
        .ok()
        .flatten()
}

/// Keep `paths` (this walk's arena) for the next walk of the same kind, where the rule allows.
pub fn keep_paths(py: Python<'_>, is_output: bool, paths: &SharedArena) {
    let replaced = LAST_PATHS.try_with(|l| {
        let mut l = l.borrow_mut();
        let slot = &mut l[is_output as usize];
        if slot.as_ref().is_some_and(|t| SharedArena::ptr_eq(t, paths)) {
            return None;
        }
        let keep = paths.len() <= KEEP_PATHS && paths.keys_are_plain();
        std::mem::replace(slot, keep.then(|| paths.clone_ref(py)))
    });
    drop(replaced); // released once the slot is no longer borrowed
}
