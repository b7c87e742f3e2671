//! The recursion guard: every recursive path that follows user data (the codecs' nested values,
//! `hash` of nested other values) calls [`check`] once per level, which raises `RecursionError`
//! while less than [`STACK_MARGIN`] bytes of the thread's C stack are left, instead of letting the
//! next level overflow it (a SIGSEGV). The way CPython 3.12+ protects its own C stack.
//!
//! The thread's stack bounds come from `pthread_getattr_np` (Linux) or
//! `pthread_get_stackaddr_np` (macOS), read once per thread and cached in a thread-local. Where
//! they are unknown (another platform, a failed query) or the current frame lies outside them (a
//! coroutine library that runs code on a stack of its own), nothing is refused.

use pyo3::exceptions::PyRecursionError;
use pyo3::{PyErr, PyResult};
use std::cell::Cell;

/// Bytes of C stack that must be left when a recursive path goes one level deeper: room for the
/// level itself (under 1 KiB in the codecs), the Python calls it makes (a `__hash__`, `items()`)
/// and raising the error; twice what CPython 3.14 keeps for its own calls (16 KiB).
pub const STACK_MARGIN: usize = 32 * 1024;

/// Bytes of C stack a tuned module's call must find left to take the native call path: below it
/// the patch runs stock's code from its shims, which needs less of the stack a level (the path's
/// Rust frames come on top of the Python calls it keeps). Ten nested tuned modules on CPython 3.11:
/// stock returns on a 68 KiB thread (not on 64), the native path alone needs 80 KiB, with this
/// fall back 72 (the shims' `*args, **kwargs` calls into stock's code add a C frame each).
pub const PATH_STACK: usize = 256 * 1024;

thread_local! {
    /// (lowest address the stack may reach, highest address); (0, 0) before the first query,
    /// (usize::MAX, 0) when the bounds are unknown (no address passes both tests).
    static BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The current stack depth's address: that of a local of this (never inlined) function.
#[inline(never)]
fn here() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Whether the calling thread has at least [`STACK_MARGIN`] bytes of stack left (or its bounds
/// are unknown): what [`check`] asks, for code that reports the refusal in its own error type.
#[inline]
pub fn room_left() -> bool {
    room_for(STACK_MARGIN)
}

/// Whether the calling thread has at least `bytes` of stack left (or its bounds are unknown).
#[inline]
pub fn room_for(bytes: usize) -> bool {
    let (low, high) = match BOUNDS.try_with(Cell::get) {
        Ok((0, 0)) => init(),
        Ok(b) => b,
        Err(_) => return true, // thread-locals being torn down: no bounds to check against
    };
    let sp = here();
    !(sp < low.saturating_add(bytes) && sp <= high)
}

/// `Err(RecursionError)` when the calling thread has less than [`STACK_MARGIN`] bytes of stack
/// left; `what` completes "maximum recursion depth exceeded while ...".
#[inline]
pub fn check(what: &str) -> PyResult<()> {
    if room_left() {
        return Ok(());
    }
    Err(exhausted(what))
}

/// The `RecursionError` of a refusal: `what` completes "maximum recursion depth exceeded while
/// ...".
#[cold]
pub fn exhausted(what: &str) -> PyErr {
    PyRecursionError::new_err(exhausted_message(what))
}

/// The message of [`exhausted`].
pub fn exhausted_message(what: &str) -> String {
    format!(
        "maximum recursion depth exceeded while {what} (less than {} KiB of the thread's C stack \
         left)",
        STACK_MARGIN / 1024
    )
}

#[cold]
#[inline(never)]
fn init() -> (usize, usize) {
    let bounds = match stack_bounds() {
        Some((low, high)) if high > low => (low, high),
        _ => (usize::MAX, 0),
    };
    let _ = BOUNDS.try_with(|b| b.set(bounds));
    bounds
}

/// The calling thread's stack as `(lowest, highest)` address.
#[cfg(target_os = "linux")]
fn stack_bounds() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: pthread_getattr_np initialises `attr` for the calling thread; it is read and
    // destroyed only after it succeeded
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        if !ok {
            return None;
        }
    }
    let low = addr as usize;
    Some((low, low.checked_add(size)?))
}

/// The calling thread's stack as `(lowest, highest)` address.
#[cfg(target_os = "macos")]
fn stack_bounds() -> Option<(usize, usize)> {
    // SAFETY: plain queries about the calling thread
    let (high, size) = unsafe {
        let t = libc::pthread_self();
        (
            libc::pthread_get_stackaddr_np(t) as usize,
            libc::pthread_get_stacksize_np(t),
        )
    };
    Some((high.checked_sub(size)?, high))
}

/// Elsewhere the bounds are unknown and nothing is refused.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn stack_bounds() -> Option<(usize, usize)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_hold_the_current_frame() {
        let (low, high) = stack_bounds().expect("stack bounds");
        let sp = here();
        assert!(low < sp && sp < high, "{low:#x} < {sp:#x} < {high:#x}");
    }

    fn depth_reached(level: usize) -> usize {
        let pad = std::hint::black_box([0u8; 512]);
        if check("testing").is_err() {
            return level;
        }
        depth_reached(level + 1) + pad[level % 512] as usize
    }

    #[test]
    fn room_for_more_than_the_stack_holds_is_refused() {
        let (low, high) = stack_bounds().expect("stack bounds");
        assert!(room_for(1024));
        assert!(!room_for(high - low));
    }

    #[test]
    fn deep_recursion_is_refused_before_the_stack_ends() {
        let levels = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| depth_reached(0))
            .unwrap()
            .join()
            .expect("the thread overflowed its stack");
        assert!(levels > 50, "refused after {levels} levels");
    }
}
