//! Libpython's thread-local holding the current thread state (3.12 and later),
//! whose address each thread asks once: from `__tls_get_addr` where libpython is a shared
//! library (the general dynamic model), or from the thread pointer where the thread-local
//! is in static TLS (an executable with libpython linked in, such as Debian's
//! `python3.X`: the local- or initial-exec model).

use std::sync::atomic::{AtomicIsize, AtomicPtr, AtomicU8, Ordering};

use pyo3::ffi;

use super::getter::{call_unchecked_get, Getter};
use super::state_word::StateWord;
use crate::arch::getter_code::{decode_tls_index, decode_tp_offset, STATIC_TLS};
use crate::arch::thread_pointer;

/// The argument of `__tls_get_addr`: a module's TLS id and the offset in its block.
#[repr(C)]
pub(super) struct TlsIndex {
    module: usize,
    offset: usize,
}

extern "C" {
    // glibc's: the calling thread's address of the variable `index` names.
    fn __tls_get_addr(index: *const TlsIndex) -> *mut u8;
}

/// How the thread-local's address is found, once [`locate`] has found and checked it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Access {
    Unknown = 0,
    /// `__tls_get_addr(INDEX)`.
    Dynamic = 1,
    /// The thread pointer plus `TP_OFFSET`.
    ThreadPointer = 2,
}

static ACCESS: AtomicU8 = AtomicU8::new(Access::Unknown as u8);
/// Libpython's index of the thread-local (in its GOT), for [`Access::Dynamic`].
static INDEX: AtomicPtr<TlsIndex> = AtomicPtr::new(std::ptr::null_mut());
/// The thread-local's offset from the thread pointer, for [`Access::ThreadPointer`].
static TP_OFFSET: AtomicIsize = AtomicIsize::new(0);

fn access() -> Access {
    match ACCESS.load(Ordering::Acquire) {
        1 => Access::Dynamic,
        2 => Access::ThreadPointer,
        _ => Access::Unknown,
    }
}

pub(super) fn located() -> bool {
    access() != Access::Unknown
}

/// The calling thread's address of the thread-local, found the way `how` says.
fn address(how: Access) -> Option<usize> {
    match how {
        Access::Unknown => None,
        // SAFETY: libpython's own index of the thread-local (checked by `locate`); the
        // getter makes this very call on every use.
        Access::Dynamic => Some(unsafe { __tls_get_addr(INDEX.load(Ordering::Acquire)) as usize }),
        Access::ThreadPointer => {
            Some(thread_pointer().wrapping_add_signed(TP_OFFSET.load(Ordering::Acquire)))
        }
    }
}

/// The current thread state held at `at`.
///
/// # Safety
/// `at` is the calling thread's address of the thread-local, as [`address`] gave it on
/// this thread (it lives as long as the thread).
#[inline(always)]
pub(super) unsafe fn read(at: usize) -> *mut ffi::PyThreadState {
    // SAFETY: the caller's contract: a live, aligned pointer-sized thread-local.
    unsafe { std::ptr::read(at as *const *mut ffi::PyThreadState) }
}

/// The current thread state through the getter, asking first for the calling
/// thread's address of the thread-local and keeping it in `word` (the calling
/// thread's own) when it gives the same.
#[inline(never)]
pub(super) fn ask_and_get(word: &StateWord) -> *mut ffi::PyThreadState {
    let called = call_unchecked_get();
    if !word.asked() {
        if let Some(at) = address(access()) {
            // SAFETY: `at` was just given by `address` on this thread.
            let held = unsafe { read(at) };
            word.keep((held == called).then_some(at));
        }
    }
    called
}

/// Finds how the getter reaches the thread-local and keeps it when the address it gives
/// holds what `call` (the getter) returns, with the GIL held.
pub(super) fn locate(call: fn() -> *mut ffi::PyThreadState) {
    if located() {
        return;
    }
    let Some(getter) = Getter::find() else {
        return;
    };
    let code = getter.code();
    let how = if let Some(index) = decode_tls_index(code, getter.at) {
        // Both words of the index lie in the getter's object (its GOT).
        if !getter.holds_word(index) || !getter.holds_word(index + 8) {
            return;
        }
        INDEX.store(index as *mut TlsIndex, Ordering::Release);
        Access::Dynamic
    } else if let Some(offset) = decode_tp_offset(code, getter.at, |a| getter.read_word(a)) {
        if !STATIC_TLS.contains(&offset) {
            return;
        }
        TP_OFFSET.store(offset, Ordering::Release);
        Access::ThreadPointer
    } else {
        return;
    };
    let Some(at) = address(how) else {
        return;
    };
    if at % std::mem::align_of::<usize>() != 0 {
        return;
    }
    // SAFETY: the address `address` gives on this thread for the way just decoded; a
    // thread pointer offset names a word of this thread's static TLS block, and an index
    // one of its dynamic blocks.
    let held = unsafe { read(at) };
    let called = call();
    if !called.is_null() && held == called {
        ACCESS.store(how as u8, Ordering::Release);
    }
}
