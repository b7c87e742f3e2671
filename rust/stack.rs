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
use pyo3::PyResult;
use std::cell::Cell;

/// Bytes of C stack that must be left when a recursive path goes one level deeper: room for the
/// level itself (under 1 KiB in the codecs), the Python calls it makes (a `__hash__`, `items()`)
/// and raising the error; twice what CPython 3.14 keeps for its own calls (16 KiB).
pub const STACK_MARGIN: usize = 32 * 1024;

thread_local! {
    /// (lowest address the stack may reach plus the margin, highest address); (0, 0) before the
    /// first query, (1, 0) when the bounds are unknown (no address passes both tests).
    static BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The current stack depth's address: that of a local of this (never inlined) function.
#[inline(never)]
fn here() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// `Err(RecursionError)` when the calling thread has less than [`STACK_MARGIN`] bytes of stack
/// left; `what` completes "maximum recursion depth exceeded while ...".
#[inline]
pub fn check(what: &str) -> PyResult<()> {
    let (limit, high) = match BOUNDS.try_with(Cell::get) {
        Ok((0, 0)) => init(),
        Ok(b) => b,
        Err(_) => return Ok(()), // thread-locals being torn down: no bounds to check against
    };
    let sp = here();
    if sp < limit && sp <= high {
        return Err(PyRecursionError::new_err(format!(
            "maximum recursion depth exceeded while {what} (less than {} KiB of the thread's \
             C stack left)",
            STACK_MARGIN / 1024
        )));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn init() -> (usize, usize) {
    let bounds = match stack_bounds() {
        Some((low, high)) if high > low => (low.saturating_add(STACK_MARGIN), high),
        _ => (1, 0),
    };
    let _ = BOUNDS.try_with(|b| b.set(bounds));
    bounds
}

/// The calling thread's stack as `(lowest, highest)` address.
#[cfg(target_os = "linux")]
fn stack_bounds() -> Option<(usize, usize)> {
    use std::os::raw::{c_int, c_void};
    // pthread_attr_t is 56 bytes on x86-64 glibc, 64 on aarch64, 36-56 on musl: 128 bytes is room
    // for every one of them
    #[repr(C, align(16))]
    struct Attr([u8; 128]);
    extern "C" {
        fn pthread_self() -> usize;
        fn pthread_getattr_np(thread: usize, attr: *mut Attr) -> c_int;
        fn pthread_attr_getstack(
            attr: *const Attr,
            addr: *mut *mut c_void,
            size: *mut usize,
        ) -> c_int;
        fn pthread_attr_destroy(attr: *mut Attr) -> c_int;
    }
    let mut attr = Attr([0; 128]);
    let mut addr: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: `attr` is large enough for any libc's pthread_attr_t and is destroyed only after a
    // successful pthread_getattr_np initialised it
    unsafe {
        if pthread_getattr_np(pthread_self(), &mut attr) != 0 {
            return None;
        }
        let ok = pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        pthread_attr_destroy(&mut attr);
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
    use std::os::raw::c_void;
    extern "C" {
        fn pthread_self() -> usize;
        fn pthread_get_stackaddr_np(thread: usize) -> *mut c_void;
        fn pthread_get_stacksize_np(thread: usize) -> usize;
    }
    // SAFETY: plain queries about the calling thread
    let (high, size) = unsafe {
        let t = pthread_self();
        (
            pthread_get_stackaddr_np(t) as usize,
            pthread_get_stacksize_np(t),
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
