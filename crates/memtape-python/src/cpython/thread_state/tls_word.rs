//! Libpython's thread-local holding the current thread state (3.12 and later, x86-64),
//! whose address `__tls_get_addr` gives each thread.

use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::ffi;

use super::getter::{call_unchecked_get, Getter};
use super::getter_code::decode_tls_index;
use super::state_word::StateWord;

/// The argument of `__tls_get_addr`: a module's TLS id and the offset in its block.
#[repr(C)]
pub(super) struct TlsIndex {
    module: usize,
    offset: usize,
}

extern "C" {
    // glibc's (x86-64 ABI): the calling thread's address of the variable `index` names.
    fn __tls_get_addr(index: *const TlsIndex) -> *mut u8;
}

/// Libpython's index of the thread-local (in its GOT) once [`locate`] has found and
/// checked it; null until then.
static INDEX: AtomicPtr<TlsIndex> = AtomicPtr::new(std::ptr::null_mut());

pub(super) fn located() -> bool {
    !INDEX.load(Ordering::Acquire).is_null()
}

/// The calling thread's address of the thread-local that `index` names.
fn address(index: *const TlsIndex) -> usize {
    // SAFETY: `index` is libpython's own index of the thread-local (checked by
    // `locate`); the getter makes this very call on every use.
    unsafe { __tls_get_addr(index) as usize }
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
    let index = INDEX.load(Ordering::Acquire);
    if !word.asked() && !index.is_null() {
        let at = address(index);
        // SAFETY: `at` was just given by `address` on this thread.
        let held = unsafe { read(at) };
        word.keep((held == called).then_some(at));
    }
    called
}

/// Finds the getter's index and keeps it when the address it gives holds what `call`
/// (the getter) returns, with the GIL held.
pub(super) fn locate(call: fn() -> *mut ffi::PyThreadState) {
    if located() {
        return;
    }
    let Some(getter) = Getter::find() else {
        return;
    };
    let Some(index) = decode_tls_index(getter.code(), getter.at) else {
        return;
    };
    // Both words of the index lie in the getter's object (its GOT).
    if !getter.holds_word(index) || !getter.holds_word(index + 8) {
        return;
    }
    let index = index as *mut TlsIndex;
    // SAFETY: the address `address` gives on this thread.
    let held = unsafe { read(address(index)) };
    let called = call();
    if !called.is_null() && held == called {
        INDEX.store(index, Ordering::Release);
    }
}
