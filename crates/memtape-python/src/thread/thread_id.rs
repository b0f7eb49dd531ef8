//! The calling thread's OS thread id (what `threading.get_native_id()` returns), cached.

use std::cell::Cell;

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's OS thread id.
#[inline]
pub(crate) fn current() -> u32 {
    TID.with(|t| {
        let cached = t.get();
        if cached != 0 {
            return cached;
        }
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() } as u32;
        t.set(tid);
        tid
    })
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
#[inline]
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
