//! The word of `_PyRuntime` that holds the current thread state (3.10 and 3.11).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use pyo3::ffi;

use super::getter::Getter;
use crate::arch::getter_code::decode_runtime_word;

/// The word's address once [`locate`] has found and checked it; null until then.
static WORD: AtomicPtr<AtomicUsize> = AtomicPtr::new(std::ptr::null_mut());

/// The current thread state, read from the word; `None` while it is not located.
#[inline(always)]
pub(super) fn read() -> Option<*mut ffi::PyThreadState> {
    let word = WORD.load(Ordering::Relaxed);
    // SAFETY: when not null, `word` is the address inside `_PyRuntime` (a static of
    // libpython, alive as long as the process) that `_PyThreadState_UncheckedGet`
    // loads with a relaxed atomic load; `locate` checked that both give one value.
    (!word.is_null()).then(|| unsafe { (*word).load(Ordering::Relaxed) } as *mut _)
}

/// Finds the word from `_PyThreadState_UncheckedGet`'s code and keeps it when reading
/// it gives what `call` (the function itself) returns, with the GIL held.
pub(super) fn locate(call: fn() -> *mut ffi::PyThreadState) {
    if !WORD.load(Ordering::Acquire).is_null() {
        return;
    }
    let Some(getter) = Getter::find() else {
        return;
    };
    let Some(word) = decode_runtime_word(getter.code(), getter.at, |a| getter.read_word(a)) else {
        return;
    };
    if !getter.holds_word(word) {
        return;
    }
    let word = word as *mut AtomicUsize;
    // SAFETY: an aligned word of the getter's own object, which its code loads.
    let read = unsafe { (*word).load(Ordering::Relaxed) };
    let called = call();
    if !called.is_null() && read == called as usize {
        WORD.store(word, Ordering::Release);
    }
}
