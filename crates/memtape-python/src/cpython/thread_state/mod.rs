//! Finding the calling thread's Python thread state from inside an allocation hook,
//! without taking the GIL and without allocating.
//!
//! CPython's exported getter (`_PyThreadState_UncheckedGet`, 3.13's
//! `PyThreadState_GetUnchecked`) costs every hooked allocation a call through the PLT, and
//! from 3.12 on a `__tls_get_addr` call inside it. [`locate`] reads the getter's code
//! once, before the hooks are installed, to find the word it loads, and the hooks then
//! load that word themselves:
//! - before 3.12, one word of `_PyRuntime` for the whole process (`runtime_word`);
//! - from 3.12 on, a thread-local of libpython, whose address each thread asks once and
//!   keeps in its [`StateWord`] (`tls_word`).
//!
//! Where the code has another shape, the hooks keep calling the getter. The shapes are
//! the architecture's ([`crate::arch::getter_code`]): x86-64's are decoded, aarch64's not
//! yet (its hooks call the getter).

use pyo3::ffi;

mod getter;
#[cfg(not(Py_3_12))]
mod runtime_word;
mod state_word;
#[cfg(Py_3_12)]
mod tls_word;

use getter::call_unchecked_get;
pub(crate) use state_word::StateWord;

#[inline(always)]
fn unchecked_get() -> *mut ffi::PyThreadState {
    #[cfg(not(Py_3_12))]
    if let Some(current) = runtime_word::read() {
        return current;
    }
    call_unchecked_get()
}

/// [`unchecked_get`] for the thread whose word `word` is.
#[inline(always)]
fn unchecked_get_via(word: &StateWord) -> *mut ffi::PyThreadState {
    #[cfg(Py_3_12)]
    {
        if let Some(at) = word.address() {
            // SAFETY: `at` was kept by `tls_word::ask_and_get` from `address` on this
            // thread: `word` is the calling thread's own.
            return unsafe { tls_word::read(at) };
        }
        tls_word::ask_and_get(word)
    }
    #[cfg(not(Py_3_12))]
    {
        let _ = word;
        unchecked_get()
    }
}

/// Finds the word the getter reads, so that the hooks read it without the call (where
/// the architecture knows the getter's shapes). Called with the GIL held, before the
/// hooks are installed; once found, it is kept for the process.
pub(crate) fn locate(_py: pyo3::Python<'_>) {
    #[cfg(not(Py_3_12))]
    runtime_word::locate(call_unchecked_get);
    #[cfg(Py_3_12)]
    tls_word::locate(call_unchecked_get);
}

/// Whether the hooks read the current thread state's word themselves (see [`locate`]).
pub(crate) fn read_directly() -> bool {
    #[cfg(not(Py_3_12))]
    {
        runtime_word::read().is_some()
    }
    #[cfg(Py_3_12)]
    {
        tls_word::located()
    }
}

/// The thread state of the calling thread, which holds the GIL (MEM and OBJ hooks);
/// `word` is the calling thread's own.
#[inline(always)]
pub(crate) fn attached_via(word: &StateWord) -> *mut ffi::PyThreadState {
    unchecked_get_via(word)
}

/// The calling thread's thread state if it holds the GIL, else null (RAW hooks, which
/// CPython may call without the GIL, e.g. from `PyGILState_Ensure` or thread teardown).
#[inline]
pub(crate) fn attached_if_holding_gil() -> *mut ffi::PyThreadState {
    holding_gil(unchecked_get())
}

/// [`attached_if_holding_gil`] for the thread whose word `word` is: the calling
/// thread's own.
#[inline]
pub(crate) fn attached_if_holding_gil_via(word: &StateWord) -> *mut ffi::PyThreadState {
    holding_gil(unchecked_get_via(word))
}

/// `current` (the getter's answer) if the calling thread holds the GIL, else null.
#[inline(always)]
fn holding_gil(current: *mut ffi::PyThreadState) -> *mut ffi::PyThreadState {
    #[cfg(not(Py_3_12))]
    {
        // 3.11 keeps one global "current" thread state: the GIL holder's, not
        // necessarily ours. Compare it with this thread's own state.
        if current.is_null() {
            return current;
        }
        // SAFETY: reads this thread's TSS slot; no allocation, no lock, no GIL needed.
        let own = unsafe { ffi::PyGILState_GetThisThreadState() };
        if own == current {
            current
        } else {
            std::ptr::null_mut()
        }
    }
    #[cfg(Py_3_12)]
    {
        // 3.12+: the attached thread state is thread-local; non-null means we hold the GIL.
        current
    }
}
