//! Backing off after a fast reader is refused.
//!
//! Torch refuses a read by throwing a C++ exception (a backtrace is captured: microseconds to
//! milliseconds). After one refusal the refused object, and a growing number of the reads that
//! follow, go straight to Python instead of asking torch again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One reader's refusal record.
pub struct Backoff {
    /// refused reads so far (never reset)
    refused: AtomicU64,
    /// reads sent to Python without trying
    skipped: AtomicU64,
    /// reads left to send to Python without trying
    skip: AtomicU64,
    /// the most recently refused objects (addresses; a reused address only costs a Python read)
    recent: [AtomicUsize; 8],
    recent_at: AtomicUsize,
}

impl Backoff {
    pub const fn new() -> Self {
        Backoff {
            refused: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            skip: AtomicU64::new(0),
            recent: [const { AtomicUsize::new(0) }; 8],
            recent_at: AtomicUsize::new(0),
        }
    }

    /// `(refused, skipped)` reads so far.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.refused.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
        )
    }

    /// Whether to try the object at `ptr`: always, until a read is refused.
    #[inline(always)]
    pub fn may_try(&self, ptr: usize) -> bool {
        self.refused.load(Ordering::Relaxed) == 0 || self.may_try_after_refusal(ptr)
    }

    #[cold]
    fn may_try_after_refusal(&self, ptr: usize) -> bool {
        let skip = self.skip.load(Ordering::Relaxed);
        let try_it = if skip > 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            false
        } else {
            !self.recent.iter().any(|r| r.load(Ordering::Relaxed) == ptr)
        };
        if !try_it {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        try_it
    }

    /// Record a refusal of the object at `ptr`.
    #[cold]
    #[inline(never)]
    pub fn refused(&self, ptr: usize) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let at = self.recent_at.fetch_add(1, Ordering::Relaxed);
        self.recent[at % self.recent.len()].store(ptr, Ordering::Relaxed);
        // 64 reads after the first refusal, doubling with each, at most about a million
        self.skip.store(64u64 << (n - 1).min(14), Ordering::Relaxed);
    }
}
