//! The calling thread's identities: its OS thread id (what `threading.get_native_id()`
//! returns), cached, and its token (the thread pointer, read without a call, `arch`).

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

/// Forgets the cached id: a forked child's only thread has an id of its own (`fork`
/// copies the parent thread's cache with it).
pub(crate) fn forget() {
    let _ = TID.try_with(|t| t.set(0));
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
#[inline]
pub(crate) fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
    // Both fields are non-negative after the epoch; before it, 0 (as documented).
    match (u64::try_from(t.tv_sec), u64::try_from(t.tv_nsec)) {
        (Ok(s), Ok(ns)) => s.saturating_mul(1_000_000_000).saturating_add(ns),
        _ => 0,
    }
}

/// A non-zero number unique to the calling thread among the live threads: its thread
/// pointer (one register read on x86-64 and aarch64 Linux).
pub(crate) use crate::arch::thread_pointer as thread_token;
